r"""DP-SIPS's privacy: the budget fractions of its rounds and the composed map of R adaptive WGM rounds.

Round i runs the WGM with :math:`(\sigma_i, T_i)` on the data restricted to the items not released before it.
The derivation is in ``docs/privacy.md`` §4: under approximate zCDP the rounds' :math:`(\rho_i, \delta_{T,i})`
add; under (ε, δ)-DP the Gaussian parts compose exactly as one Gaussian mechanism of
:math:`1/\sigma^2 = \sum_i 1/\sigma_i^2`, whose analytic profile (with the rounds' lattice slacks, which add)
is charged once, plus :math:`\sum_i \delta_{T,i}`. With one round both maps are the WGM's exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from opendp_wgm._validation import _check_d_in, _check_int, _check_positive, _check_real
from opendp_wgm.privacy.gaussian import (
    _noise_delta,
    _over_squared_scale,
    _up,
    wgm_privacy_loss,
    wgm_rho,
)
from opendp_wgm.privacy.threshold import _threshold_delta, check_max_contributions

__all__ = [
    "ADAPTIVE_DENSE_SHARES",
    "ADAPTIVE_FIRST_FRACTION",
    "ADAPTIVE_STATISTIC_FRACTION",
    "DEFAULT_FRACTIONS",
    "DENSE_SHARE",
    "check_fractions",
    "combined_scale",
    "dp_sips_privacy_loss",
    "schedule",
    "sips_fractions",
]

#: The default *fixed* schedule (:func:`schedule` without arguments, ``calibrate_dp_sips(adaptive=False)``
#: without one): two rounds, 5% then 95% of the budget. It keeps most of the multi-round gain where users hold
#: many items (imdb_50k −0.055, fimi_retail −0.041 missing mass against the WGM) and loses ≈0.005–0.015 where
#: they hold one or two (docs/dp_sips.md); every DP-SIPS constructor (Polars, Spark, Tumult, and stage 1 of the
#: two-stage mechanisms) defaults to the adaptive schedule instead.
DEFAULT_FRACTIONS: tuple[float, ...] = (0.05, 0.95)

#: The adaptive default of :func:`opendp_wgm.make_dp_sips_from_budget` and every DP-SIPS constructor
#: (``docs/dp_sips.md``): round 1, a cheap
#: probe, gets this share of the threshold δ and this share minus :data:`ADAPTIVE_STATISTIC_FRACTION` of the
#: Gaussian budget; a noisy two-bin user count gets :data:`ADAPTIVE_STATISTIC_FRACTION` of the Gaussian budget;
#: the rest (0.99 of both) goes to one round (sparse branch: the fixed schedule (0.01, 0.99), within a hair of
#: the WGM) or to two rounds in the shares :data:`ADAPTIVE_DENSE_SHARES` (dense branch), chosen from round 1's
#: release and the count.
ADAPTIVE_FIRST_FRACTION = 0.01
#: The Gaussian share of the adaptive default's paid statistic (a two-bin count of users, ℓ2 sensitivity 1).
ADAPTIVE_STATISTIC_FRACTION = 0.0025
#: How the dense branch splits the rest over its two rounds: geometric with r = 0.3, (0.3, 1)/1.3.
ADAPTIVE_DENSE_SHARES: tuple[float, float] = (0.3 / 1.3, 1.0 / 1.3)
#: A user still holding unreleased items is *boosted* by round 1 when round 1 released one of its items (its
#: weight per remaining item grows); the dense branch runs when more than this share of the users still holding
#: unreleased items is boosted.
DENSE_SHARE = 0.25

#: Tolerance on the sum of the fractions.
_FRACTION_SUM_TOLERANCE = 1e-9

#: Relative margin by which a float-evaluated combined scale is lowered: its float error is below 3 ulp
#: (2^-51 relative), 2^-50 covers it, so the reported σ never exceeds the exact one.
_SCALE_MARGIN = 1.0 - 2.0**-50


def sips_fractions(rounds: int, ratio: float) -> tuple[float, ...]:
    r"""The geometric schedule of DP-SIPS: :math:`f_i \propto r^{R-i}`, i = 1..R, summing to 1.

    The last round gets the largest share (r < 1). R = 3, r = 0.3 gives (0.065, 0.216, 0.719).

    Parameters
    ----------
    rounds
        R ≥ 1.
    ratio
        r > 0 (r = 1: equal shares).
    """
    rounds = _check_int("rounds", rounds, minimum=1)
    ratio = _check_positive("ratio", ratio)
    # f_i ∝ r^(R-i) = r^(R-1)·(1/r)^(i-1): powers of the smaller of r and 1/r, which cannot overflow
    powers = [ratio ** (rounds - i) for i in range(1, rounds + 1)] if ratio <= 1.0 else [
        (1.0 / ratio) ** (i - 1) for i in range(1, rounds + 1)
    ]
    total = math.fsum(powers)
    if not (math.isfinite(total) and total > 0.0 and all(p > 0.0 for p in powers)):
        msg = f"`ratio` must give positive, finite fractions over {rounds} rounds (found {ratio!r})"
        raise ValueError(msg)
    return check_fractions(tuple(p / total for p in powers))


def schedule(
    fractions: Sequence[float] | None = None, rounds: int | None = None, ratio: float | None = None
) -> tuple[float, ...]:
    """The rounds' budget fractions: ``fractions`` if given; else the geometric :func:`sips_fractions` if
    ``rounds`` or ``ratio`` is given (the other defaulting to R = 3, r = 0.3); else :data:`DEFAULT_FRACTIONS`."""
    if fractions is not None:
        for name, value in (("rounds", rounds), ("ratio", ratio)):
            if value is not None:
                msg = f"`{name}` must be None when `fractions` is given (found {value!r})"
                raise ValueError(msg)
        return check_fractions(fractions)
    if rounds is None and ratio is None:
        return DEFAULT_FRACTIONS
    return sips_fractions(3 if rounds is None else rounds, 0.3 if ratio is None else ratio)


def check_fractions(fractions: object) -> tuple[float, ...]:
    """The budget fractions of the rounds: a non-empty sequence of finite reals > 0 that sum to 1 (within 1e-9),
    returned divided by their sum (so the rounds never share out more than the budget)."""
    if isinstance(fractions, (str, bytes)) or not isinstance(fractions, Sequence) or len(fractions) == 0:
        msg = f"`fractions` must be a non-empty sequence of positive numbers summing to 1 (found {fractions!r})"
        is_sequence = isinstance(fractions, Sequence) and not isinstance(fractions, (str, bytes))
        raise (ValueError if is_sequence else TypeError)(msg)
    checked = tuple(_check_real(f"fractions[{i}]", f, minimum=0.0, minimum_inclusive=False)
                    for i, f in enumerate(fractions))
    total = math.fsum(checked)
    if abs(total - 1.0) > _FRACTION_SUM_TOLERANCE:
        msg = f"`fractions` must sum to 1 within {_FRACTION_SUM_TOLERANCE:g} (found a sum of {total!r})"
        raise ValueError(msg)
    return tuple(f / total for f in checked)


def _sequence(name: str, values: object) -> Sequence[Any]:
    """``values`` if it is a non-empty sequence (not a string), one entry per round."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) == 0:
        raise TypeError(f"`{name}` must be a non-empty sequence of numbers, one per round (found {values!r})")
    return values


def _check_rounds(scales: object, thresholds: object) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-round σ_i > 0 and T_i: two non-empty sequences of the same length."""
    scales, thresholds = _sequence("scales", scales), _sequence("thresholds", thresholds)
    if len(scales) != len(thresholds):
        msg = f"`thresholds` must have one entry per round, as `scales` ({len(scales)}) (found {len(thresholds)})"
        raise ValueError(msg)
    checked_scales = tuple(_check_positive(f"scales[{i}]", s) for i, s in enumerate(scales))
    checked_thresholds = tuple(_check_real(f"thresholds[{i}]", t) for i, t in enumerate(thresholds))
    return checked_scales, checked_thresholds


def combined_scale(scales: Sequence[float]) -> float:
    r"""The scale σ of the one Gaussian mechanism the rounds compose to: :math:`1/\sigma^2 = \sum_i 1/\sigma_i^2`.

    Rounded down (a smaller σ only raises the charged δ); one scale is returned unchanged.
    """
    checked = tuple(_check_positive(f"scales[{i}]", s) for i, s in enumerate(_sequence("scales", scales)))
    if len(checked) == 1:
        return checked[0]
    precision = math.fsum(_over_squared_scale(1.0, s) for s in checked)
    if math.isinf(precision):
        return 0.0
    return (1.0 / math.sqrt(precision)) * _SCALE_MARGIN


def dp_sips_privacy_loss(
    d_in: int,
    *,
    scales: Sequence[float],
    thresholds: Sequence[float],
    max_contributions: int,
    epsilon: float | None = None,
    statistic_scale: float | None = None,
    branch_scales: Sequence[float] | None = None,
    branch_thresholds: Sequence[float] | None = None,
) -> tuple[float, float]:
    r"""DP-SIPS's privacy loss for ``d_in`` users added or removed: R adaptive WGM rounds (``docs/privacy.md`` §4).

    Without ``epsilon``: approximate zCDP
    :math:`\big(\sum_i d_{in}^2/(2\sigma_i^2),\ \sum_i \delta_T(\sigma_i, T_i, \Delta_0, d_{in})\big)`.
    With ``epsilon`` (ε at ``d_in = 1``): the :math:`(\varepsilon', \delta)` pair at
    :math:`\varepsilon' = d_{in}\,\varepsilon`,

    .. math:: \delta = \delta_{\mathcal N}(\varepsilon' - a;\ \sigma, \Delta = d_{in})
              + \sum_i \delta_T(\sigma_i, T_i, \Delta_0, d_{in}),
              \qquad \frac{1}{\sigma^2} = \sum_i \frac{1}{\sigma_i^2},
              \qquad a = \frac{2 d_{in}\sqrt{\Delta_0}}{\sigma^2 2^{20}} = \sum_i a_i,

    where :math:`\delta_{\mathcal N}` is :func:`~opendp_wgm.privacy.gaussian.analytic_gaussian_delta` and
    :math:`a_i` the WGM's lattice slack of round i (the argument :math:`\varepsilon' - a` may be negative: it is
    not clamped at 0). Sums are rounded up. With one round this is
    :func:`~opendp_wgm.privacy.gaussian.wgm_privacy_loss`.

    The adaptive schedule (``docs/privacy.md`` §4, "Two phases") adds a Gaussian statistic of ℓ2 sensitivity 1
    at ``statistic_scale`` (one more Gaussian term, no threshold) and may run ``branch_*`` instead of rounds
    2..R, chosen from round 1's release and the statistic: the map is the largest over the two paths of each
    sum (Gaussian precision, ρ, threshold δ).

    Parameters
    ----------
    d_in
        Users added or removed, ≥ 0.
    scales, thresholds
        σ_i and T_i of each round, in the order the rounds run.
    max_contributions
        Δ0, the items kept per user in every round.
    epsilon
        ε of the (ε, δ) output measure, or ``None`` for approximate zCDP.
    statistic_scale
        σ_s of the paid statistic, or ``None`` (none).
    branch_scales, branch_thresholds
        σ_i and T_i of the rounds the other branch runs after round 1, or ``None`` (no branch).
    """
    d_in = _check_d_in(d_in)
    scales, thresholds = _check_rounds(scales, thresholds)
    max_contributions = check_max_contributions(max_contributions)
    extra = () if statistic_scale is None else (_check_positive("statistic_scale", statistic_scale),)
    paths = [(scales, thresholds)]
    if branch_scales is not None or branch_thresholds is not None:
        other = _check_rounds(branch_scales, branch_thresholds)
        paths.append(((scales[0], *other[0]), (thresholds[0], *other[1])))
    if len(scales) == 1 and len(paths) == 1 and not extra:  # the WGM itself, bit for bit
        return wgm_privacy_loss(
            d_in, scale=scales[0], threshold=thresholds[0], max_contributions=max_contributions, epsilon=epsilon
        )
    if d_in == 0:
        return 0.0, 0.0
    # every path's sums, and the largest: the proof's bound for a branch chosen from the released history
    threshold_delta = max(_up(math.fsum(
        _threshold_delta(s, t, max_contributions, d_in) for s, t in zip(*path, strict=True)
    )) for path in paths)
    if epsilon is None:
        rho = max(_up(math.fsum(wgm_rho(d_in, s) for s in (*path[0], *extra))) for path in paths)
        return rho, min(1.0, threshold_delta)
    epsilon = _check_real("epsilon", epsilon, minimum=0.0)
    scale = min(combined_scale((*path[0], *extra)) for path in paths)
    if scale == 0.0:  # Σ 1/σ_i² overflowed: δ_N = 1
        return d_in * epsilon, 1.0
    eps_out = d_in * epsilon
    return eps_out, min(1.0, _up(_noise_delta(eps_out, scale, d_in, max_contributions) + threshold_delta))
