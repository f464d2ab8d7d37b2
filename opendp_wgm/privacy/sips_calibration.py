"""DP-SIPS's calibration: each round's (σ_i, T_i) from a budget, by searching on the composed map."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opendp_wgm._validation import _check_probability
from opendp_wgm.privacy.budget import Budget
from opendp_wgm.privacy.gaussian import _noise_delta
from opendp_wgm.privacy.search import _Calibrated, _check_scale_fits, _noise_scale, _rho_scale, _smallest_threshold
from opendp_wgm.privacy.sips import (
    ADAPTIVE_DENSE_SHARES,
    ADAPTIVE_FIRST_FRACTION,
    ADAPTIVE_STATISTIC_FRACTION,
    combined_scale,
    dp_sips_privacy_loss,
    schedule,
)
from opendp_wgm.privacy.threshold import MAX_SCALE, check_max_contributions

__all__ = ["DPSIPSCalibration", "calibrate_dp_sips"]


@dataclass(frozen=True)
class DPSIPSCalibration(_Calibrated):
    r"""DP-SIPS's per-round parameters calibrated to a budget, and the budget they were calibrated to.

    Attributes
    ----------
    scales, thresholds
        σ_i and T_i of each round, in the order the rounds run.
    fractions
        f_i, the share of the budget of each round (summing to 1).
    max_contributions
        Δ0 of every round.
    delta, epsilon, rho
        The budget for one user (exactly one of ``epsilon`` and ``rho`` is set).
    scale
        The combined scale σ, :math:`1/\sigma^2 = \sum_i 1/\sigma_i^2`: under (ε, δ) the WGM's σ at the
        same budget (``σ_i = σ/√f_i``); under zCDP :math:`1/\sqrt{2\rho}` up to rounding.
    noise_delta
        The part of δ spent on the Gaussian noise (0 under zCDP); the rest pays for the thresholds.
    round_deltas
        δ_i, each round's share of the threshold δ (T_i is the smallest threshold with δ_T ≤ δ_i).
    statistic_scale
        The adaptive schedule only (else ``None``): σ_s of the noisy two-bin user count that, with round 1's
        release, chooses the branch. ``scales``, ``thresholds``, ``fractions`` and ``round_deltas`` are then
        the sparse branch (round 1, then one round); round 1's Gaussian share is ``fractions[0]`` minus the
        statistic's.
    branch_scales, branch_thresholds, branch_fractions, branch_round_deltas
        The adaptive schedule only (else empty): the dense branch's rounds after round 1.
    """

    scales: tuple[float, ...]
    thresholds: tuple[float, ...]
    fractions: tuple[float, ...]
    max_contributions: int
    delta: float
    scale: float
    round_deltas: tuple[float, ...]
    epsilon: float | None = None
    rho: float | None = None
    noise_delta: float = 0.0
    statistic_scale: float | None = None
    branch_scales: tuple[float, ...] = ()
    branch_thresholds: tuple[float, ...] = ()
    branch_fractions: tuple[float, ...] = ()
    branch_round_deltas: tuple[float, ...] = ()

    @property
    def rounds(self) -> int:
        """R, the number of rounds (of the sparse branch for the adaptive schedule)."""
        return len(self.scales)

    def loss(self, d_in: int = 1) -> tuple[float, float]:
        """The privacy map of these parameters at ``d_in`` (:func:`~opendp_wgm.privacy.sips.dp_sips_privacy_loss`)."""
        return dp_sips_privacy_loss(
            d_in, scales=self.scales, thresholds=self.thresholds, max_contributions=self.max_contributions,
            epsilon=self.epsilon, **self.branch_arguments(),
        )

    def branch_arguments(self) -> dict[str, Any]:
        """The adaptive schedule's extra map and constructor arguments (``statistic_scale``, ``branch_scales``,
        ``branch_thresholds``); empty for a fixed schedule."""
        if self.statistic_scale is None:
            return {}
        return {
            "statistic_scale": self.statistic_scale,
            "branch_scales": self.branch_scales,
            "branch_thresholds": self.branch_thresholds,
        }


#: Relative shrinks of the rounds' shares tried in turn when the composed map, whose sums are rounded up, lands
#: a few ulp over the budget (1 is tried first: with one round it always passes, as the WGM's).
_SIPS_SHRINKS = (1.0, 1.0 - 2.0**-40, 1.0 - 1e-9)


def calibrate_dp_sips(
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    fractions: Sequence[float] | None = None,
    rounds: int | None = None,
    ratio: float | None = None,
    noise_delta_fraction: float = 0.5,
    adaptive: bool | None = False,
) -> DPSIPSCalibration:
    r"""Calibrate DP-SIPS's per-round (σ_i, T_i) to a budget, by searching on the privacy maps.

    - ``epsilon`` given, (ε, δ)-DP: σ is the WGM's (:func:`calibrate_wgm`'s) combined scale, the smallest with
      analytic-Gaussian δ at ε at most ``noise_delta_fraction · δ``; round i gets :math:`\sigma_i =
      \sigma/\sqrt{f_i}` (so :math:`\sum_i 1/\sigma_i^2 = 1/\sigma^2`: the rounds' Gaussian parts compose
      to the WGM's), and :math:`\delta_i = f_i\,\delta_T` of what the noise leaves,
      :math:`\delta_T = \delta - \delta_{\mathcal N}`.
    - ``rho`` given, approximate zCDP: round i gets :math:`\rho_i = f_i\rho` (σ_i the smallest with
      :math:`1/(2\sigma_i^2) \le \rho_i`) and :math:`\delta_i = f_i\delta`.

    T_i is the smallest threshold with :math:`\delta_T(\sigma_i, T_i, \Delta_0) \le \delta_i`. The composed
    map (:func:`~opendp_wgm.privacy.sips.dp_sips_privacy_loss`) is then checked at the budget, so the returned
    parameters pass ``measurement.check(1, budget)``. With one round (``fractions=(1.0,)``) the result is
    :func:`calibrate_wgm`'s.

    Parameters
    ----------
    max_contributions
        Δ0 ≥ 1, in every round.
    delta
        δ ∈ (0, 1).
    epsilon, rho
        Exactly one of them, > 0.
    fractions
        The rounds' shares f_i (> 0, summing to 1); then ``rounds`` and ``ratio`` must be None.
    rounds, ratio
        The geometric schedule :math:`f_i \propto r^{R-i}` (:func:`~opendp_wgm.privacy.sips.sips_fractions`),
        used when either is given (the other defaulting to R = 3, r = 0.3: (0.065, 0.216, 0.719)).
        With none of ``fractions``, ``rounds``, ``ratio`` and ``adaptive=False``:
        :data:`~opendp_wgm.privacy.sips.DEFAULT_FRACTIONS` (0.05, 0.95).
    noise_delta_fraction
        Share of δ given to the Gaussian noise under (ε, δ)-DP, in (0, 1).
    adaptive
        Calibrate the adaptive schedule (the default of :func:`opendp_wgm.make_dp_sips_from_budget`;
        ``fractions``, ``rounds`` and ``ratio`` must then be None): round 1 at
        :data:`~opendp_wgm.privacy.sips.ADAPTIVE_FIRST_FRACTION` of the threshold δ and that minus
        :data:`~opendp_wgm.privacy.sips.ADAPTIVE_STATISTIC_FRACTION` of the Gaussian budget, the statistic at
        the latter, and the rest either in one round (the sparse branch: ``scales``, ``thresholds``) or in two
        (``branch_*``, shares :data:`~opendp_wgm.privacy.sips.ADAPTIVE_DENSE_SHARES` of the rest). Every branch
        spends the same rest, so the map is the fixed schedule (0.01, 0.99)'s with the statistic's Gaussian
        term moved out of round 1 (``docs/privacy.md`` §4). ``None``: the constructors' default, the adaptive
        schedule when none of ``fractions``, ``rounds``, ``ratio`` is given, else the fixed schedule they give.
    """
    max_contributions = check_max_contributions(max_contributions)
    budget = Budget.of(epsilon=epsilon, rho=rho, delta=delta)
    return _calibrate_dp_sips(max_contributions, budget, fractions, rounds, ratio, noise_delta_fraction, adaptive)


def _calibrate_dp_sips(
    max_contributions: int,
    budget: Budget,
    fractions: Sequence[float] | None,
    rounds: int | None,
    ratio: float | None,
    noise_delta_fraction: float,
    adaptive: bool | None,
) -> DPSIPSCalibration:
    """:func:`calibrate_dp_sips` for a Δ0 its public caller has checked once (:func:`check_max_contributions`)."""
    fraction = _check_probability("noise_delta_fraction", noise_delta_fraction)
    if adaptive is None:  # the adaptive schedule is the default of every DP-SIPS constructor
        adaptive = fractions is None and rounds is None and ratio is None
    if adaptive:
        for name, value in (("fractions", fractions), ("rounds", rounds), ("ratio", ratio)):
            if value is not None:
                raise ValueError(f"`{name}` must be None when `adaptive` is True (found {value!r})")
        shares: tuple[float, ...] = (ADAPTIVE_FIRST_FRACTION, 1.0 - ADAPTIVE_FIRST_FRACTION)
        branch_shares = tuple(shares[1] * d for d in ADAPTIVE_DENSE_SHARES)
        statistic: tuple[float, ...] = (ADAPTIVE_STATISTIC_FRACTION,)
    else:
        shares, branch_shares, statistic = schedule(fractions, rounds, ratio), (), ()
    # Gaussian shares: round 1 pays for the statistic; every path's shares sum to 1
    gaussian = (shares[0] - sum(statistic), *shares[1:])
    # every σ_i = σ/√f_i must stay within MAX_SCALE: the widest round bounds the combined σ
    limit = MAX_SCALE * math.sqrt(min(gaussian + branch_shares + statistic)) * _SCALE_LIMIT_MARGIN
    scale, noise_delta = _noise_scale(budget, max_contributions, fraction, limit)
    for shrink in _SIPS_SHRINKS:
        scales = tuple(_share_scale(f, scale, budget, shrink) for f in gaussian)
        branch_scales = tuple(_share_scale(f, scale, budget, shrink) for f in branch_shares)
        statistic_scale = _share_scale(statistic[0], scale, budget, shrink) if statistic else None
        if max(scales + branch_scales) > MAX_SCALE:  # pragma: no cover - the limit above keeps them in
            _check_scale_fits(math.inf, budget, fraction, limit)
        extra = () if statistic_scale is None else (statistic_scale,)
        if budget.epsilon is not None:
            paths = [scales + extra] + ([(scales[0], *branch_scales, *extra)] if branch_scales else [])
            noise_delta = _noise_delta(budget.epsilon, min(combined_scale(p) for p in paths), 1, max_contributions)
            threshold_budget = budget.delta - noise_delta
        else:
            threshold_budget = budget.delta
        round_deltas = tuple(f * threshold_budget * shrink for f in shares)
        branch_deltas = tuple(f * threshold_budget * shrink for f in branch_shares)
        thresholds, branch_thresholds = (
            tuple(_smallest_threshold(s, max_contributions, d, budget) for s, d in zip(ss, ds, strict=True))
            for ss, ds in ((scales, round_deltas), (branch_scales, branch_deltas))
        )
        calibration = DPSIPSCalibration(
            scales=scales, thresholds=thresholds, fractions=shares, max_contributions=max_contributions,
            delta=budget.delta, scale=combined_scale(scales + extra) if budget.epsilon is None else scale,
            round_deltas=round_deltas, epsilon=budget.epsilon, rho=budget.rho, noise_delta=noise_delta,
            statistic_scale=statistic_scale, branch_scales=branch_scales, branch_thresholds=branch_thresholds,
            branch_fractions=branch_shares, branch_round_deltas=branch_deltas,
        )
        d_out = calibration.loss(1)
        if d_out[0] <= budget.value and d_out[1] <= budget.delta:
            return calibration
    raise AssertionError(f"calibration produced {d_out}, over the budget {budget.d_out}")  # pragma: no cover


def _share_scale(share: float, scale: float, budget: Budget, shrink: float) -> float:
    """σ of a part with this share of the Gaussian budget: σ/√f under (ε, δ) (the parts compose to σ), the
    smallest σ with 1/(2σ²) ≤ f·ρ·shrink under zCDP."""
    if budget.epsilon is not None:
        return scale / math.sqrt(share)
    return _rho_scale(share * budget.value * shrink, budget)


#: σ/√f_min rounds within a few ulp: the limit on the combined σ keeps a relative 2^-40 below the exact one.
_SCALE_LIMIT_MARGIN = 1.0 - 2.0**-40
