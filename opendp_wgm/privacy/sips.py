r"""TEMPORARY stand-in for DP-SIPS's privacy maps (the privacy engineer's module replaces this file).

Only the interface that :mod:`opendp_wgm.measurements.dp_sips` codes against: the round fractions and the
composed loss, approximate zCDP :math:`(\sum_i d^2/(2\sigma_i^2), \sum_i \delta_{T,i})`, and under (ε, δ) the
Gaussian parts as one Gaussian of :math:`1/\sigma^2 = \sum_i 1/\sigma_i^2` plus :math:`\sum_i \delta_{T,i}`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from opendp_wgm._validation import _check_d_in, _check_int, _check_positive, _check_real
from opendp_wgm.privacy.gaussian import analytic_gaussian_delta, lattice_epsilon_slack, wgm_rho
from opendp_wgm.privacy.threshold import _threshold_delta, check_max_contributions

__all__ = ["check_fractions", "dp_sips_privacy_loss", "sips_fractions"]


def sips_fractions(rounds: int, ratio: float) -> tuple[float, ...]:
    """Budget fractions :math:`f_i \\propto r^{R-i}`, i = 1..R, summing to 1."""
    rounds = _check_int("rounds", rounds, minimum=1)
    ratio = _check_real("ratio", ratio, minimum=0.0, maximum=1.0, minimum_inclusive=False)
    raw = [ratio ** (rounds - i) for i in range(1, rounds + 1)]
    return tuple(f / sum(raw) for f in raw)


def check_fractions(fractions: Sequence[float]) -> tuple[float, ...]:
    """Nonempty positive fractions summing to 1."""
    checked = tuple(_check_positive("fractions", f) for f in fractions)
    if not checked or not math.isclose(sum(checked), 1.0, rel_tol=0.0, abs_tol=1e-9):
        msg = f"`fractions` must be positive and sum to 1 (found {list(fractions)!r})"
        raise ValueError(msg)
    return checked


def dp_sips_privacy_loss(
    d_in: int,
    *,
    scales: Sequence[float],
    thresholds: Sequence[float],
    max_contributions: int,
    epsilon: float | None = None,
) -> tuple[float, float]:
    """The composed loss of R WGM rounds at (σ_i, T_i) for ``d_in`` users added or removed."""
    d_in = _check_d_in(d_in)
    max_contributions = check_max_contributions(max_contributions)
    delta_t = sum(_threshold_delta(s, t, max_contributions, d_in) for s, t in zip(scales, thresholds, strict=True))
    if epsilon is None:
        return sum(wgm_rho(d_in, s) for s in scales), min(1.0, delta_t)
    epsilon = _check_real("epsilon", epsilon, minimum=0.0)
    if d_in == 0:
        return 0.0, 0.0
    scale = sum(s**-2 for s in scales) ** -0.5
    slack = sum(lattice_epsilon_slack(d_in, s, max_contributions) for s in scales)
    eps_out = d_in * epsilon
    delta = analytic_gaussian_delta(max(0.0, eps_out - slack), scale, float(d_in)) + delta_t
    return eps_out, min(1.0, delta)
