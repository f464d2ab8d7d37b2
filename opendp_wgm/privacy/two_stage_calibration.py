"""The two-stage calibrations: stage 1 (the WGM or DP-SIPS) at its share of the budget, then the peeling (top-k,
or user peeling for the k-hitting set) at the rest, by searching on the peeling's own map."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from opendp_wgm._validation import _check_absent, _check_choice, _check_int, _check_probability
from opendp_wgm.privacy.budget import Budget
from opendp_wgm.privacy.gaussian import wgm_privacy_loss
from opendp_wgm.privacy.peeling import USER_PEELING, add_up, peeling_approx_epsilon, peeling_loss, peeling_rho
from opendp_wgm.privacy.search import _BudgetTooSmall, _pair, _restated, smallest_fitting, smallest_passing
from opendp_wgm.privacy.sips_calibration import DPSIPSCalibration, _calibrate_dp_sips
from opendp_wgm.privacy.threshold import check_max_contributions
from opendp_wgm.privacy.wgm_calibration import WGMCalibration, _calibrate_wgm

__all__ = [
    "STAGE_1_MECHANISMS",
    "HittingSetCalibration",
    "Stage1Mechanism",
    "WGMTopKCalibration",
    "calibrate_peeling_for",
    "calibrate_user_peeling",
    "calibrate_wgm_hitting_set",
    "calibrate_wgm_top_k",
    "check_stage_1",
]


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


def _checked_stage_1(
    k: int, max_contributions: int, epsilon: float | None, rho: float | None, delta: float, split: float,
    noise_delta_fraction: float, stage_1: Stage1Mechanism, rounds: int | None, ratio: float | None,
) -> tuple[int, Budget, float, WGMCalibration | DPSIPSCalibration]:
    """What both two-stage calibrations check first, in this order (``k``, Δ0, the budget, ``split``, ``stage_1``
    and its schedule), and stage 1 calibrated at ``split`` of the budget: ``(k, budget, split, stage 1's
    calibration)``; the calibration's ``max_contributions`` is the checked Δ0. Stage 1 is the WGM or DP-SIPS (the
    geometric schedule of ``rounds`` and ``ratio``, or the adaptive schedule when both are None); a budget too
    small for it is restated in terms of the total."""
    k = _check_int("k", k, minimum=1)
    max_contributions = check_max_contributions(max_contributions)
    total = Budget.of(epsilon=epsilon, rho=rho, delta=delta)
    split = _check_probability("split", split)
    stage_1 = check_stage_1(stage_1, rounds, ratio)
    first, _ = total.split(split)
    try:
        if stage_1 == "dp-sips":
            sips_budget = Budget.of(epsilon=first.epsilon, rho=first.rho, delta=first.delta)
            calibration: WGMCalibration | DPSIPSCalibration = _calibrate_dp_sips(
                max_contributions, sips_budget, None, rounds, ratio, noise_delta_fraction, None
            )
        else:
            calibration = _calibrate_wgm(first, max_contributions, noise_delta_fraction)
    except _BudgetTooSmall as error:
        context = f"`split` = {split!r}"
        if total.epsilon is not None:
            context = f"`delta` = {total.delta!r} and {context}"
        raise _restated(error, total, split, context) from None
    return k, total, split, calibration


def _split_stage_1(
    calibration: WGMCalibration | DPSIPSCalibration,
) -> tuple[WGMCalibration | None, DPSIPSCalibration | None]:
    """Stage 1's calibration as the two fields ``(wgm, sips)`` of a two-stage calibration, one of them None."""
    if isinstance(calibration, DPSIPSCalibration):
        return None, calibration
    return calibration, None


class _TwoStage:
    """What both two-stage calibrations share: stage 1 as the fields ``wgm`` and ``sips``, exactly one set."""

    wgm: WGMCalibration | None
    sips: DPSIPSCalibration | None

    @property
    def stage_1(self) -> WGMCalibration | DPSIPSCalibration:
        """Stage 1's calibration, the WGM's or DP-SIPS's."""
        if self.wgm is not None:
            return self.wgm
        if self.sips is None:  # pragma: no cover - a bug guard: the calibrations set exactly one
            raise AssertionError("a two-stage calibration without a stage 1")
        return self.sips


def _stage_1_loss(calibration: WGMCalibration | DPSIPSCalibration) -> tuple[float, float]:
    """Stage 1's privacy map at one user: the WGM's or DP-SIPS's."""
    if isinstance(calibration, DPSIPSCalibration):
        return calibration.loss(1)
    return wgm_privacy_loss(
        1, scale=calibration.scale, threshold=calibration.threshold,
        max_contributions=calibration.max_contributions, epsilon=calibration.epsilon,
    )


@dataclass(frozen=True)
class WGMTopKCalibration(_TwoStage):
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
    k, budget, split, first = _checked_stage_1(
        k, max_contributions, epsilon, rho, delta, split, 0.5, stage_1, rounds, ratio
    )
    max_contributions = first.max_contributions
    wgm, sips = _split_stage_1(first)
    _, rest = budget.split(split)
    if budget.epsilon is not None:
        scale = smallest_fitting(
            peeling_approx_epsilon, rest.value, parameter="scale", name="peel_scale", budget=budget, k=k,
            delta=rest.delta,
        )
        return WGMTopKCalibration(
            k=k, max_contributions=max_contributions, split=split, delta=budget.delta, wgm=wgm,
            peel_scale=scale, peel_delta=rest.delta, epsilon=budget.value, peel_epsilon=rest.value, sips=sips,
        )
    scale = smallest_fitting(peeling_rho, rest.value, parameter="scale", name="peel_scale", budget=budget, k=k)
    return WGMTopKCalibration(
        k=k, max_contributions=max_contributions, split=split, delta=budget.delta, wgm=wgm,
        peel_scale=scale, peel_delta=0.0, rho=budget.value, peel_rho=rest.value, sips=sips,
    )


def calibrate_peeling_for(budget: Budget, k: int) -> float:
    """The smallest user-peeling scale whose ``k`` rounds fit ``budget`` at d_in = 1 (a search on the map, never
    a closed form); ``budget`` is a peeling budget (:meth:`~opendp_wgm.privacy.budget.Budget.of_peeling`)."""
    return smallest_fitting(
        peeling_loss, budget.value, parameter="scale", budget=budget, k=k, kind=budget.kind,
        accounting=USER_PEELING, delta=budget.delta,
    )


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
class HittingSetCalibration(_TwoStage):
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
    k, budget, split, first = _checked_stage_1(
        k, max_contributions, epsilon, rho, delta, split, noise_delta_fraction, stage_1, rounds, ratio
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
