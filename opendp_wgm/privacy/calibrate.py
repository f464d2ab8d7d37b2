r"""Calibration: the parameters of every mechanism from a budget, by searching on the privacy maps.

Each ``calibrate_*`` function turns a :class:`~opendp_wgm.privacy.budget.Budget` (built from the user's
``epsilon``/``rho`` and ``delta``) into the parameters of a measurement, and checks them against the map the
measurement will publish, so ``measurement.check(1, budget)`` holds. Every search is :func:`smallest_passing`,
on ``dp.binary_search``. Two exceptions, each documented where it is: :func:`limited_domain_local_epsilon`
reproduces the reference implementation's bisection bit for bit (an oracle value of the paper), and
:func:`calibrate_key_release` bisects OpenDP's own (costly) map to a relative 1e-5.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import opendp.prelude as dp

from opendp_wgm._validation import _check_absent, _check_choice, _check_int, _check_positive, _check_probability
from opendp_wgm.privacy.budget import Budget, Loss, MeasureKind
from opendp_wgm.privacy.gaussian import (
    _noise_delta,
    analytic_gaussian_delta,
    wgm_privacy_loss,
    wgm_rho,
)
from opendp_wgm.privacy.peeling import (
    USER_PEELING,
    add_up,
    limited_domain_epsilon,
    peeling_approx_epsilon,
    peeling_loss,
    peeling_rho,
)
from opendp_wgm.privacy.sips import (
    ADAPTIVE_DENSE_SHARES,
    ADAPTIVE_FIRST_FRACTION,
    ADAPTIVE_STATISTIC_FRACTION,
    combined_scale,
    dp_sips_privacy_loss,
    schedule,
)
from opendp_wgm.privacy.threshold import (
    LATTICE_BITS,
    MAX_SCALE,
    _threshold_delta,
    check_max_contributions,
)

__all__ = [
    "STAGE_1_MECHANISMS",
    "DPSIPSCalibration",
    "HittingSetCalibration",
    "LimitedDomainCalibration",
    "WGMCalibration",
    "WGMTopKCalibration",
    "calibrate_dp_sips",
    "calibrate_key_release",
    "calibrate_limited_domain",
    "calibrate_policy_greedy",
    "calibrate_user_peeling",
    "calibrate_wgm",
    "calibrate_wgm_for",
    "calibrate_wgm_hitting_set",
    "calibrate_wgm_top_k",
    "limited_domain_local_epsilon",
    "smallest_passing",
]


# ==============================================================================================================
# The one search
# ==============================================================================================================


#: A searched parameter: a float (a scale) or an int (a threshold in lattice units).
_Number = TypeVar("_Number", int, float)


def smallest_passing(
    predicate: Callable[[_Number], bool], *, lower: _Number, parameter: str, budget: Budget
) -> _Number:
    """The smallest ``x >= lower`` with ``predicate(x)``, for a predicate monotone increasing in ``x``.

    ``lower`` is a float or an int, and so is the result. The upper end is the first of 1, 2, 4, … (from
    ``lower`` when it exceeds 1) that passes; ``dp.binary_search`` then bisects to the type's resolution (one
    ulp, or 1) and returns a passing value. A predicate that passes nowhere below 1e300 is refused, naming the
    ``parameter`` searched and the ``budget`` it was searched for.
    """
    if predicate(lower):
        return lower
    upper = max(type(lower)(1), lower)
    while not predicate(upper):
        upper *= 2
        if upper > 1e300:
            msg = f"calibration failed: no finite `{parameter}` satisfies the budget {budget.description}"
            raise ValueError(msg)
    # OpenDP annotates binary_search for floats; it searches the type of the bounds (int or float)
    search: Callable[..., Any] = dp.binary_search
    found: _Number = search(predicate, bounds=(lower, upper))
    return found


# ==============================================================================================================
# The WGM
# ==============================================================================================================


class _Calibrated:
    """The ``budget`` of a calibration with fields ``epsilon`` (or ``rho``) and ``delta``."""

    epsilon: float | None
    rho: float | None
    delta: float

    @property
    def budget(self) -> Budget:
        """The budget the parameters were calibrated to."""
        kind: MeasureKind = "approx_dp" if self.epsilon is not None else "approx_zcdp"
        return Budget(kind, self.epsilon if self.epsilon is not None else self.rho, self.delta)  # type: ignore[arg-type]


@dataclass(frozen=True)
class WGMCalibration(_Calibrated):
    """The WGM parameters calibrated to a budget, and the budget they were calibrated to.

    Attributes
    ----------
    scale, threshold
        σ and T to pass to :func:`opendp_wgm.make_wgm`.
    max_contributions
        Δ0.
    epsilon, rho, delta
        The budget for one user (exactly one of ``epsilon`` and ``rho`` is set).
    noise_delta
        The part of δ spent on the Gaussian noise (0 under zCDP); the rest pays for the threshold.
    """

    scale: float
    threshold: float
    max_contributions: int
    delta: float
    epsilon: float | None = None
    rho: float | None = None
    noise_delta: float = 0.0



class _BudgetTooSmall(ValueError):
    """A budget whose noise scale would exceed :data:`~opendp_wgm.privacy.threshold.MAX_SCALE`, with the smallest
    ε or ρ that fits.

    Two-stage calibrations catch it and restate the bound for the total budget the user gave (:func:`_restated`).
    """

    def __init__(self, name: str, value: float, minimum: float, context: str) -> None:
        self.name, self.value, self.minimum = name, value, minimum
        super().__init__(_too_small_message(name, value, minimum, context))


def _too_small_message(name: str, value: float, minimum: float, context: str) -> str:
    from decimal import Decimal

    exponent = math.floor(math.log10(minimum)) - 2  # three significant digits, rounded up
    shown = float(Decimal(math.ceil(minimum / 10.0**exponent)).scaleb(exponent))
    return (
        f"`{name}` must be >= {shown:.3g} at {context} (found {value!r}): a smaller budget needs a noise scale "
        f"above the WGM's limit 2**{LATTICE_BITS}"
    )


def _restated(error: _BudgetTooSmall, total: Budget, split: float, context: str) -> ValueError:
    """``error`` (raised for a stage given ``split`` of the budget) in terms of the ``total`` the user gave."""
    return ValueError(_too_small_message(error.name, total.value, error.minimum / split, context))


def _check_scale_fits(scale: float, budget: Budget, fraction: float, limit: float = MAX_SCALE) -> None:
    """Raise :class:`_BudgetTooSmall`, in terms of the budget, when the calibrated σ exceeds ``limit``
    (``MAX_SCALE``; lower for DP-SIPS, whose rounds' scales σ/√f_i must each stay within ``MAX_SCALE``)."""
    if scale <= limit:
        return
    if budget.epsilon is not None:
        minimum = smallest_passing(
            lambda e: analytic_gaussian_delta(e, limit) <= fraction * budget.delta,
            lower=0.0, parameter="epsilon", budget=budget,
        )
        raise _BudgetTooSmall("epsilon", budget.value, minimum, f"`delta` = {budget.delta!r}")
    raise _BudgetTooSmall("rho", budget.value, wgm_rho(1, limit), "any `delta`")


def _noise_scale(
    budget: Budget, max_contributions: int, fraction: float, limit: float = MAX_SCALE
) -> tuple[float, float]:
    """The WGM's noise search: the smallest σ whose analytic-Gaussian δ at ε is at most ``fraction · δ`` (at
    least 2^-20), or with ``1/(2σ²) <= ρ``; and the δ its noise spends at one user (0 under zCDP)."""
    if budget.kind == "approx_dp":
        epsilon = budget.value
        scale = smallest_passing(
            lambda s: analytic_gaussian_delta(epsilon, s) <= fraction * budget.delta,
            lower=1e-12, parameter="scale", budget=budget,
        )
        _check_scale_fits(scale, budget, fraction, limit)
        scale = max(scale, 1.0 / MAX_SCALE)  # the (ε, δ) map needs a lattice step of noise; more only helps
        return scale, _noise_delta(epsilon, scale, 1, max_contributions)
    scale = _rho_scale(budget.value, budget)
    _check_scale_fits(scale, budget, fraction, limit)
    return scale, 0.0


def _rho_scale(rho: float, budget: Budget) -> float:
    r"""The smallest σ with :math:`1/(2\sigma^2) \le \rho` (``budget`` names the search in its errors)."""
    return smallest_passing(lambda s: wgm_rho(1, s) <= rho, lower=1e-12, parameter="scale", budget=budget)


def calibrate_wgm(
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    noise_delta_fraction: float = 0.5,
) -> WGMCalibration:
    r"""Calibrate the WGM's (scale, threshold) to a budget, by searching on the privacy maps.

    - ``epsilon`` given, (ε, δ)-DP: σ is the smallest scale whose analytic-Gaussian δ at ε is at most
      ``noise_delta_fraction · δ`` (the paper's reference uses 1/2); T is the smallest threshold whose
      :math:`\delta_T` fits in what is left. At ε = 1, δ = 1e-5, Δ0 = 100 this gives σ = 3.88414,
      T = 20.7898 (the paper's calibration with an exact σ).
    - ``rho`` given, approximate zCDP (ρ, δ): σ is the smallest scale with :math:`1/(2\sigma^2) \le \rho` and T
      the smallest threshold with :math:`\delta_T \le \delta`.

    Both results are then checked against the map itself, so the returned parameters always pass
    ``measurement.check(1, budget)``.

    Parameters
    ----------
    max_contributions
        Δ0 ≥ 1.
    delta
        δ ∈ (0, 1).
    epsilon, rho
        Exactly one of them, > 0.
    noise_delta_fraction
        Share of δ given to the Gaussian noise under (ε, δ)-DP, in (0, 1).
    """
    max_contributions = check_max_contributions(max_contributions)
    return calibrate_wgm_for(
        Budget.of(epsilon=epsilon, rho=rho, delta=delta),
        max_contributions=max_contributions,
        noise_delta_fraction=noise_delta_fraction,
    )


def calibrate_wgm_for(budget: Budget, *, max_contributions: int, noise_delta_fraction: float = 0.5) -> WGMCalibration:
    """:func:`calibrate_wgm` for a :class:`~opendp_wgm.privacy.budget.Budget` (approximate DP or approximate zCDP)."""
    max_contributions = check_max_contributions(max_contributions)
    fraction = _check_probability("noise_delta_fraction", noise_delta_fraction)
    delta = budget.delta
    scale, noise_delta = _noise_scale(budget, max_contributions, fraction)
    threshold = _smallest_threshold(scale, max_contributions, delta - noise_delta, budget)
    d_out = wgm_privacy_loss(
        1, scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=budget.epsilon
    )
    if not (d_out[0] <= budget.value and d_out[1] <= delta):  # pragma: no cover - a bug guard
        raise AssertionError(f"calibration produced {d_out}, over the budget {budget.d_out}")
    return WGMCalibration(
        scale=scale,
        threshold=threshold,
        max_contributions=max_contributions,
        delta=delta,
        epsilon=budget.epsilon,
        rho=budget.rho,
        noise_delta=noise_delta,
    )


def _smallest_threshold(scale: float, max_contributions: int, threshold_delta: float, budget: Budget) -> float:
    r"""The smallest T whose threshold δ at one user, :math:`\delta_T(\sigma, T, \Delta_0)`, is at most
    ``threshold_delta``."""
    return smallest_passing(
        lambda t: _threshold_delta(scale, t, max_contributions, 1) <= threshold_delta,
        lower=0.0, parameter="threshold", budget=budget,
    )


#: Stage 1 of a two-stage mechanism (top-k, hitting set): the WGM (one round, the paper's) or DP-SIPS.
Stage1Mechanism = Literal["wgm", "dp-sips"]
STAGE_1_MECHANISMS: tuple[Stage1Mechanism, ...] = ("wgm", "dp-sips")
def check_stage_1(stage_1: Any, rounds: Any, ratio: Any) -> Stage1Mechanism:
    """``stage_1``; DP-SIPS's schedule (``rounds``, ``ratio``) may be given only with ``"dp-sips"`` (None there:
    the adaptive schedule; :func:`calibrate_dp_sips` checks them)."""
    mechanism = _check_choice("stage_1", stage_1, STAGE_1_MECHANISMS)
    if mechanism == "wgm":
        _check_absent("rounds", rounds, unless="stage_1='dp-sips'")
        _check_absent("ratio", ratio, unless="stage_1='dp-sips'")
    return mechanism


def _stage_1(
    budget: Budget,
    split: float,
    max_contributions: int,
    noise_delta_fraction: float = 0.5,
    stage_1: Stage1Mechanism = "wgm",
    rounds: int | None = None,
    ratio: float | None = None,
) -> WGMCalibration | DPSIPSCalibration:
    """Stage 1 of a two-stage calibration: the WGM (or DP-SIPS: the geometric schedule of ``rounds`` and
    ``ratio``, or the adaptive schedule when both are None) at ``split`` of ``budget``; a budget too small for
    it is restated in terms of the total."""
    first, _ = budget.split(split)
    try:
        if stage_1 == "dp-sips":
            return calibrate_dp_sips(
                max_contributions=max_contributions, delta=first.delta, epsilon=first.epsilon, rho=first.rho,
                rounds=rounds, ratio=ratio, noise_delta_fraction=noise_delta_fraction, adaptive=None,
            )
        return calibrate_wgm_for(first, max_contributions=max_contributions, noise_delta_fraction=noise_delta_fraction)
    except _BudgetTooSmall as error:
        context = f"`split` = {split!r}"
        if budget.epsilon is not None:
            context = f"`delta` = {budget.delta!r} and {context}"
        raise _restated(error, budget, split, context) from None


def _split_stage_1(
    calibration: WGMCalibration | DPSIPSCalibration,
) -> tuple[WGMCalibration | None, DPSIPSCalibration | None]:
    """Stage 1's calibration as the two fields ``(wgm, sips)`` of a two-stage calibration, one of them None."""
    if isinstance(calibration, DPSIPSCalibration):
        return None, calibration
    return calibration, None


def _stage_1_of(wgm: WGMCalibration | None, sips: DPSIPSCalibration | None) -> WGMCalibration | DPSIPSCalibration:
    """The one stage-1 calibration of ``(wgm, sips)``."""
    if wgm is not None:
        return wgm
    if sips is None:  # pragma: no cover - a bug guard: the calibrations set exactly one
        raise AssertionError("a two-stage calibration without a stage 1")
    return sips


def _stage_1_loss(calibration: WGMCalibration | DPSIPSCalibration) -> tuple[float, float]:
    """Stage 1's privacy map at one user: the WGM's or DP-SIPS's."""
    if isinstance(calibration, DPSIPSCalibration):
        return calibration.loss(1)
    return wgm_privacy_loss(
        1, scale=calibration.scale, threshold=calibration.threshold,
        max_contributions=calibration.max_contributions, epsilon=calibration.epsilon,
    )


# ==============================================================================================================
# DP-SIPS: R adaptive rounds of the WGM
# ==============================================================================================================


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


# ==============================================================================================================
# WGM, then top-k
# ==============================================================================================================


@dataclass(frozen=True)
class WGMTopKCalibration:
    r"""The calibrated parameters of WGM-then-top-k (:func:`opendp_wgm.make_wgm_top_k_from_budget`).

    Attributes
    ----------
    k, max_contributions, split
        k, Δ0, and the share of the budget given to stage 1 (the WGM or DP-SIPS).
    delta, epsilon, rho
        The total budget for one user (exactly one of ``epsilon`` and ``rho`` is set).
    wgm
        Stage 1 with ``stage_1="wgm"``: the :class:`WGMCalibration` (σ, T) at its share of the budget (else None).
    peel_scale
        Stage 2: the Gumbel scale s of the peeling; ``peel_local_epsilon`` = 1/s is the reference's ε'.
    peel_epsilon, peel_rho, peel_delta
        Stage 2's budget: (ε₂, δ₂) under (ε, δ)-DP, or ρ₂ (and δ₂ = 0) under approximate zCDP.
    sips
        Stage 1 with ``stage_1="dp-sips"``: the :class:`DPSIPSCalibration` (σ_i, T_i) at its share (else None).
    """

    k: int
    max_contributions: int
    split: float
    delta: float
    wgm: WGMCalibration | None
    peel_scale: float
    peel_delta: float
    epsilon: float | None = None
    rho: float | None = None
    peel_epsilon: float | None = None
    peel_rho: float | None = None
    sips: DPSIPSCalibration | None = None

    @property
    def stage_1(self) -> WGMCalibration | DPSIPSCalibration:
        """Stage 1's calibration, the WGM's or DP-SIPS's."""
        return _stage_1_of(self.wgm, self.sips)

    @property
    def peel_local_epsilon(self) -> float:
        """ε' = 1/s, the per-round parameter of the peeling (the reference's ``em_epsilon_cdp``)."""
        return 1.0 / self.peel_scale



def calibrate_wgm_top_k(
    *,
    k: int,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    split: float = 0.5,
    stage_1: Stage1Mechanism = "wgm",
    rounds: int | None = None,
    ratio: float | None = None,
) -> WGMTopKCalibration:
    r"""Calibrate WGM-then-top-k to a total per-user budget, split between its two stages.

    - ``epsilon`` given, (ε, δ)-DP (the paper's accounting): stage 1 gets
      (split·ε, split·δ) and is :func:`calibrate_wgm` there (half of its δ to the noise, half to the
      threshold); stage 2 gets the rest, (ε₂, δ₂), and peels with the smallest scale s whose map fits it,
      :math:`s \approx 1/\varepsilon'` with ε' = :func:`~opendp_wgm.privacy.peeling.peeling_epsilon` (ε₂, δ₂, k).
      At ε = 1, δ = 1e-5, Δ0 = 100, k = 100 and the default split 1/2 this is σ = 7.6611, T = 41.86 and
      ε' = 0.020036.
    - ``rho`` given, approximate zCDP: stage 1 gets (split·ρ, δ) (the peeling needs no δ) and stage 2
      ρ₂ = (1 − split)·ρ, the smallest :math:`s` with :math:`k/(8s^2) \le \rho_2`.
    - ``stage_1="dp-sips"``: stage 1's share is calibrated by :func:`calibrate_dp_sips` (the adaptive
      schedule, or the geometric one of ``rounds``, ``ratio``) instead of :func:`calibrate_wgm`; stage 2 is
      unchanged.

    Every parameter is then checked against the privacy maps, so the composed measurement passes
    ``check(1, budget)``.

    Parameters
    ----------
    k
        Number of items to release, ≥ 1.
    max_contributions
        Δ0 ≥ 1 of the WGM stage.
    delta
        Total δ ∈ (0, 1).
    epsilon, rho
        Exactly one, > 0.
    split
        Share of the budget given to stage 1, in (0, 1); default 1/2 (the reference's split).
    stage_1 : {'wgm', 'dp-sips'}
        Stage 1's mechanism (default the WGM, the paper's).
    rounds, ratio
        ``stage_1="dp-sips"`` only: a geometric schedule for DP-SIPS (both None: the adaptive schedule, as in
        :func:`opendp_wgm.make_dp_sips_from_budget`).
    """
    k = _check_int("k", k, minimum=1)
    max_contributions = check_max_contributions(max_contributions)
    budget = Budget.of(epsilon=epsilon, rho=rho, delta=delta)
    split = _check_probability("split", split)
    stage_1 = check_stage_1(stage_1, rounds, ratio)
    first = _stage_1(budget, split, max_contributions, stage_1=stage_1, rounds=rounds, ratio=ratio)
    wgm, sips = _split_stage_1(first)
    _, rest = budget.split(split)
    if budget.epsilon is not None:
        scale = smallest_passing(
            lambda s: peeling_approx_epsilon(1, k=k, scale=s, delta=rest.delta) <= rest.value,
            lower=1e-12, parameter="peel_scale", budget=budget,
        )
        return WGMTopKCalibration(
            k=k, max_contributions=max_contributions, split=split, delta=budget.delta, wgm=wgm,
            peel_scale=scale, peel_delta=rest.delta, epsilon=budget.value, peel_epsilon=rest.value, sips=sips,
        )
    scale = smallest_passing(
        lambda s: peeling_rho(1, k=k, scale=s) <= rest.value, lower=1e-12, parameter="peel_scale", budget=budget
    )
    return WGMTopKCalibration(
        k=k, max_contributions=max_contributions, split=split, delta=budget.delta, wgm=wgm,
        peel_scale=scale, peel_delta=0.0, rho=budget.value, peel_rho=rest.value, sips=sips,
    )


# ==============================================================================================================
# User peeling, and WGM then user peeling (the k-hitting set)
# ==============================================================================================================


def _first(d_out: Loss) -> float:
    return d_out[0] if isinstance(d_out, tuple) else d_out


def _pair(d_out: Loss) -> tuple[float, float]:
    """The ``(value, delta)`` of an approximate measure's loss."""
    if not isinstance(d_out, tuple):  # pragma: no cover - a bug guard: the approximate kinds give pairs
        raise AssertionError(f"expected a (value, delta) loss (found {d_out!r})")
    return d_out


def calibrate_peeling_for(budget: Budget, k: int) -> float:
    """The smallest user-peeling scale whose ``k`` rounds fit ``budget`` at d_in = 1 (a search on the map, never
    a closed form); ``budget`` is a peeling budget (:meth:`~opendp_wgm.privacy.budget.Budget.of_peeling`)."""

    def fits(scale: float) -> bool:
        loss = peeling_loss(1, k=k, scale=scale, kind=budget.kind, accounting=USER_PEELING, delta=budget.delta)
        return _first(loss) <= budget.value

    scale = smallest_passing(fits, lower=1e-12, parameter="scale", budget=budget)
    if not fits(scale):  # pragma: no cover
        raise AssertionError(f"calibration produced a scale over the budget {budget.d_out}")
    return scale


def calibrate_user_peeling(
    *, k: int, epsilon: float | None = None, rho: float | None = None, delta: float | None = None
) -> float:
    r"""The smallest user-peeling ``scale`` whose ``k`` rounds fit a budget for one user.

    - ``rho``: approximate zCDP, :math:`k/(8\,\text{scale}^2) \le \rho`;
    - ``epsilon`` and ``delta``: (ε, δ)-DP through zCDP, so :math:`1/\text{scale}` equals the reference's
      per-round ε' (``em_epsilon_cdp``, :func:`opendp_wgm.privacy.peeling.peeling_epsilon`);
    - ``epsilon`` alone: pure ε-DP by basic composition, :math:`\text{scale} = k/\varepsilon`.

    The scale is found by :func:`smallest_passing` on the privacy map of
    :func:`opendp_wgm.measurements.hitting_set.make_user_peeling`.

    Examples
    --------
    >>> from opendp_wgm.privacy.calibrate import calibrate_user_peeling
    >>> round(1 / calibrate_user_peeling(k=10, epsilon=1.1, delta=0.1), 5)  # the reference's ε' = 0.29264
    0.29264
    """
    k = _check_int("k", k, minimum=1)
    return calibrate_peeling_for(Budget.of_peeling(epsilon=epsilon, rho=rho, delta=delta), k)


@dataclass(frozen=True)
class HittingSetCalibration:
    """The two stages of :func:`opendp_wgm.make_wgm_hitting_set` calibrated to a budget.

    Attributes
    ----------
    wgm
        Stage 1 with ``stage_1="wgm"``: σ, T and Δ0 (:class:`opendp_wgm.WGMCalibration`), calibrated to ``split``
        of the budget (else None).
    peel_scale
        Stage 2: the exponential mechanism's scale; ``1 / peel_scale`` is the per-round ε'.
    peel_delta
        Stage 2's zCDP → (ε, δ) conversion δ under (ε, δ)-DP; 0 under zCDP.
    k, split
        Rounds, and the share of ε (and of δ) or of ρ given to stage 1.
    epsilon, rho, delta
        The total budget for one user (exactly one of ``epsilon`` and ``rho`` is set).
    wgm_loss, peel_loss
        Each stage's privacy map at ``d_in = 1``: (ε, δ) or (ρ, δ) (``wgm_loss`` is stage 1's, WGM or DP-SIPS).
    sips
        Stage 1 with ``stage_1="dp-sips"``: the :class:`DPSIPSCalibration` (σ_i, T_i) at its share (else None).
    """

    wgm: WGMCalibration | None
    peel_scale: float
    peel_delta: float
    k: int
    split: float
    delta: float
    epsilon: float | None
    rho: float | None
    wgm_loss: tuple[float, float]
    peel_loss: tuple[float, float]
    sips: DPSIPSCalibration | None = None

    @property
    def stage_1(self) -> WGMCalibration | DPSIPSCalibration:
        """Stage 1's calibration, the WGM's or DP-SIPS's."""
        return _stage_1_of(self.wgm, self.sips)

    @property
    def max_contributions(self) -> int:
        """Δ0 of stage 1."""
        return self.stage_1.max_contributions

    @property
    def peel_round_epsilon(self) -> float:
        """ε' of one peeling round for one user, ``1 / peel_scale``."""
        return 1.0 / self.peel_scale


def calibrate_wgm_hitting_set(
    *,
    k: int,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    split: float = 0.5,
    noise_delta_fraction: float = 0.5,
    stage_1: Stage1Mechanism = "wgm",
    rounds: int | None = None,
    ratio: float | None = None,
) -> HittingSetCalibration:
    r"""Calibrate both stages of :func:`opendp_wgm.make_wgm_hitting_set` to one per-user budget.

    - ``epsilon`` ((ε, δ)-DP, the reference's accounting): stage 1 is :func:`opendp_wgm.calibrate_wgm` at
      (split·ε, split·δ) (``noise_delta_fraction`` of that δ pays for its noise); stage 2 gets the rest,
      (1 − split)·δ for its zCDP → (ε, δ) conversion and the smallest ``peel_scale`` for which the composed
      map is within (ε, δ). With ``split = 0.5`` this is the reference's (ε/2, δ/2) per stage and its
      per-round ε' = ``em_epsilon_cdp(ε/2, δ/2, k)`` (the paper's reference code).
    - ``rho`` (approximate zCDP): stage 1 gets split·ρ and all of δ (for its threshold); stage 2 gets the
      rest of ρ and no δ.
    - ``stage_1="dp-sips"``: stage 1's share is calibrated by :func:`calibrate_dp_sips` (the adaptive
      schedule, or the geometric one of ``rounds``, ``ratio``) instead of :func:`calibrate_wgm`; stage 2 fits
      what its map leaves, as above.

    Parameters
    ----------
    k
        Peeling rounds, ≥ 1.
    max_contributions
        Δ0 ≥ 1 of the WGM.
    delta
        δ ∈ (0, 1).
    epsilon, rho
        Exactly one of them, > 0.
    split
        Share of the budget given to stage 1, in (0, 1) (default 1/2, as the reference).
    noise_delta_fraction
        Under (ε, δ): share of stage 1's δ spent on its Gaussian noise, in (0, 1).
    stage_1 : {'wgm', 'dp-sips'}
        Stage 1's mechanism (default the WGM, the paper's).
    rounds, ratio
        ``stage_1="dp-sips"`` only: a geometric schedule for DP-SIPS (both None: the adaptive schedule, as in
        :func:`opendp_wgm.make_dp_sips_from_budget`).

    Examples
    --------
    >>> from opendp_wgm.privacy.calibrate import calibrate_wgm_hitting_set
    >>> cal = calibrate_wgm_hitting_set(k=100, max_contributions=100, epsilon=1.0, delta=1e-5)
    >>> round(cal.wgm.scale, 3), round(cal.peel_round_epsilon, 5)  # σ at (ε/2, δ/2); em_epsilon_cdp(ε/2, δ/2, k)
    (7.661, 0.02004)
    """
    k = _check_int("k", k, minimum=1)
    max_contributions = check_max_contributions(max_contributions)
    split = _check_probability("split", split)
    budget = Budget.of(epsilon=epsilon, rho=rho, delta=delta)
    stage_1 = check_stage_1(stage_1, rounds, ratio)
    first = _stage_1(
        budget, split, max_contributions, noise_delta_fraction, stage_1=stage_1, rounds=rounds, ratio=ratio
    )
    wgm, sips = _split_stage_1(first)
    wgm_loss = _stage_1_loss(first)
    if budget.epsilon is not None:
        peel_delta = (1.0 - split) * budget.delta
        while add_up(wgm_loss[1], peel_delta, USER_PEELING) > budget.delta:  # at most a few ulps
            peel_delta = math.nextafter(peel_delta, 0.0)
    else:
        peel_delta = 0.0
    kind = budget.kind

    def fits(scale: float) -> bool:
        peel = _pair(peeling_loss(1, k=k, scale=scale, kind=kind, accounting=USER_PEELING, delta=peel_delta))
        return (
            add_up(wgm_loss[0], peel[0], USER_PEELING) <= budget.value
            and add_up(wgm_loss[1], peel[1], USER_PEELING) <= budget.delta
        )

    if not fits(1e300):
        msg = f"stage 1 alone spends {wgm_loss}, the whole budget {budget.d_out}: lower `split`"  # pragma: no cover
        raise ValueError(msg)  # pragma: no cover
    peel_scale = smallest_passing(fits, lower=1e-12, parameter="peel_scale", budget=budget)
    if not fits(peel_scale):  # pragma: no cover - a bug guard
        raise AssertionError(f"calibration produced peel_scale={peel_scale}, over the budget {budget.d_out}")
    peel_loss = _pair(peeling_loss(1, k=k, scale=peel_scale, kind=kind, accounting=USER_PEELING, delta=peel_delta))
    return HittingSetCalibration(
        wgm=wgm,
        peel_scale=peel_scale,
        peel_delta=peel_delta,
        k=k,
        split=split,
        delta=budget.delta,
        epsilon=budget.epsilon,
        rho=budget.rho,
        wgm_loss=wgm_loss,
        peel_loss=peel_loss,
        sips=sips,
    )


# ==============================================================================================================
# Limited-domain top-k (Durfee & Rogers 2019)
# ==============================================================================================================


def _increasing_bisection(function: Callable[[float], float], target: float, tol: float) -> float:
    """Bisection for an increasing f: the largest v with f(v) < target, erring low (returns lo), as the paper's
    reference implementation does. The one search not on ``dp.binary_search``: it reproduces the reference's
    ε' bit for bit (an oracle value), which a search to float resolution would not."""
    lo, hi = 0.0, 1.0
    while function(hi) < target:
        lo, hi = hi, 2.0 * hi
        if hi > 1e300:
            raise ValueError("bisection failed: the function never reaches the target")
    while hi - lo > tol:
        mid = (lo + hi) / 2.0
        if function(mid) < target:
            lo = mid
        else:
            hi = mid
    return lo


def limited_domain_local_epsilon(epsilon: float, delta: float, k: int, *, tol: float = 1e-6) -> float:
    r"""The per-selection ε' of limited-domain top-k: the largest ε' with :math:`E(\varepsilon') \le \varepsilon`.

    Found with the reference's increasing bisection on [0, 1] (doubling the bracket while needed), tolerance
    ``tol``, returning the lower end, so the reference implementation's result is reproduced bit for bit (
    ε = 1.1, δ' = 0.05, k = 10 gives 0.22107791900634766) and :math:`E(\varepsilon') < \varepsilon`.

    Parameters
    ----------
    epsilon
        Total ε > 0.
    delta
        δ' ∈ (0, 1), the part of δ that pays for composition (the reference uses δ/2).
    k
        Number of selections, ≥ 1.
    """
    epsilon = _check_positive("epsilon", epsilon)
    delta = _check_probability("delta", delta)
    k = _check_int("k", k, minimum=1)
    tol = _check_positive("tol", tol)
    return _increasing_bisection(lambda e: limited_domain_epsilon(e, delta, k), epsilon, tol)


@dataclass(frozen=True)
class LimitedDomainCalibration:
    """The calibrated parameters of limited-domain top-k (:func:`opendp_wgm.make_limited_domain_top_k`).

    Attributes
    ----------
    scale
        The Gumbel scale s; the ε' actually used is 1/s, at most the reference's ε'.
    epsilon
        :math:`E(1/s)`, the (ε, δ)-DP ε of one user (at most the budget's ε).
    delta_composition, delta_bottom
        The halves of δ: δ' for the composition and :math:`\\delta_\\perp` for the threshold.
    """

    scale: float
    epsilon: float
    delta_composition: float
    delta_bottom: float


def calibrate_limited_domain(*, epsilon: float, delta: float, k: int) -> LimitedDomainCalibration:
    """The Gumbel scale of limited-domain top-k for an (ε, δ) budget: δ/2 pays for composition, the rest for the
    threshold, and ε' = :func:`limited_domain_local_epsilon` (the reference's bisection)."""
    delta_composition = delta / 2.0
    delta_bottom = delta - delta_composition
    local = limited_domain_local_epsilon(epsilon, delta_composition, k)
    scale = 1.0 / local * (1.0 + 1e-12)  # the Gumbel scale; the ε' actually used is 1/scale <= local
    eps_1 = limited_domain_epsilon(1.0 / scale, delta_composition, k) * (1.0 + 1e-12)
    if eps_1 > epsilon:  # pragma: no cover - a bug guard (the bisection keeps a 1e-6 margin)
        raise AssertionError(f"limited-domain calibration gave ε = {eps_1} > {epsilon}")
    return LimitedDomainCalibration(scale, eps_1, delta_composition, delta_bottom)


# ==============================================================================================================
# Baselines: Policy Greedy and OpenDP's key release
# ==============================================================================================================


def calibrate_policy_greedy(
    budget: Budget, *, lattice_bits: int, threshold_delta: Callable[[float, int], float]
) -> tuple[float, int]:
    r"""Policy Greedy's Laplace scale λ and threshold for an (ε, δ) budget: λ = 1/ε (rounded so that
    1/λ ≤ ε) and the smallest lattice threshold :math:`F \ge 2^b` (in units :math:`2^{-b}`) with
    ``threshold_delta(λ, F)`` ≤ δ (its map at one user, nonincreasing in F)."""
    scale = 1.0 / budget.value
    while 1.0 / scale > budget.value:  # float rounding: never report more than ε
        scale = math.nextafter(scale, math.inf)
    floor_t = smallest_passing(
        lambda f: threshold_delta(scale, f) <= budget.delta, lower=1 << lattice_bits, parameter="threshold",
        budget=budget,
    )
    return scale, floor_t


def calibrate_key_release(
    budget: Budget,
    *,
    noise_delta: float,
    threshold_delta: Callable[[float, int], float],
    loss: Callable[[float, int], tuple[float, float]],
) -> tuple[float, int]:
    """The smallest global scale of OpenDP's key release (to a relative 1e-5), and for it the smallest integer
    threshold > 1, whose map at d_in = 1 meets ``budget``.

    ``threshold_delta(scale, threshold)`` is the δ of OpenDP's threshold alone (it gets ``budget.delta −
    noise_delta``: all of δ under zCDP), ``loss(scale, threshold)`` the measurement's map at one user; either
    may raise where OpenDP refuses the parameters, which then do not fit.

    The second exception to :func:`smallest_passing`: every evaluation builds OpenDP measurements (~10 ms), so
    the scale is bisected to a relative 1e-5 (about 20 evaluations, where a search to one ulp needs 60 and took
    8 times as long), and the threshold is searched from the previous answer.
    """
    threshold_budget = budget.delta - noise_delta
    hint = [2]

    def threshold_for(scale: float) -> int:
        """Smallest integer threshold > 1 whose δ fits, by exponential search from the last answer."""
        lo, hi = max(1, hint[0] - 1), hint[0]
        if threshold_delta(scale, hi) <= threshold_budget:
            step = 1
            while lo > 1 and threshold_delta(scale, lo) <= threshold_budget:  # the answer is lower
                hi, lo = lo, max(1, lo - step)
                step *= 2
        else:
            step = 1
            while threshold_delta(scale, hi) > threshold_budget:
                lo, hi = hi, hi + step
                step *= 2
                if hi > 2**31:
                    msg = f"calibration failed: no finite `threshold` satisfies the budget {budget.description}"
                    raise ValueError(msg)
        while hi - lo > 1:  # invariant: lo fails (or is 1, which OpenDP refuses), hi fits
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if threshold_delta(scale, mid) <= threshold_budget else (mid, hi)
        hint[0] = hi
        return hi

    def fits(scale: float) -> bool:
        try:
            d_out = loss(scale, threshold_for(scale))
        except (dp.OpenDPException, ValueError):
            return False
        return float(d_out[0]) <= budget.value and float(d_out[1]) <= budget.delta

    lo, hi = 0.0, 1.0
    while not fits(hi):
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            msg = f"calibration failed: no finite `scale` satisfies the budget {budget.description}"
            raise ValueError(msg)
    while hi - lo > 1e-5 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi, threshold_for(hi)
