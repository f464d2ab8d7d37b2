r"""Private k-hitting set (maximum coverage) over an unknown domain: WGM, then user peeling.

A k-hitting set is a list of at most ``k`` items chosen so that as many users as possible hold at least one
of them. "Missing Mass for Differentially Private Domain Discovery" (arXiv 2603.14016) solves it privately in
two stages (the paper's "WGM-And-Peel"):

1. stage 1, :func:`opendp_wgm.make_wgm`: discover candidate items on the unknown domain;
2. stage 2, :func:`make_user_peeling`: ``k`` rounds of the exponential mechanism; round ``r`` selects, among
   the candidates not yet chosen, one held by many users *not yet covered* by rounds ``1..r-1``, then marks
   its holders as covered (the paper's reference code).

Baselines: :func:`greedy_hitting_set` (the non-private greedy algorithm of the paper, without the
reference's repeat-item bug) and :func:`user_peeling_on_true_domain` (stage 2 on the true item domain, which
is read from the data and is therefore *not* private; the paper's reference code).

Privacy arguments: ``docs/hitting_set.md``. Implementation: CSR arrays item → users and user → items, a
"covered" flag per user and uncovered-user counts per item updated incrementally (the paper's reference code fixes
the reference's per-round re-sort and set copies); cost :math:`O(\text{pairs} + k\,|\text{candidates}|)`
plus ``k`` exact noisy-max draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np
import opendp.prelude as dp
import polars as pl

from opendp_wgm._docs import USER_ITEMS_SPACE, fill_doc
from opendp_wgm._partial import _to_then
from opendp_wgm._spaces import (
    _assert_features,
    _check_candidates,
    _check_candidates_for,
    _released,
    _resolve_space,
    _Space,
)
from opendp_wgm._validation import _check_int, _check_positive
from opendp_wgm.engines import spark as spark_engine
from opendp_wgm.engines.polars import prepared_input
from opendp_wgm.measurements._budget_boundary import budget_boundary
from opendp_wgm.measurements._of_calibration import two_stage_of_calibration

# re-exported: the Spark engine, the benchmarks and the tests reach the rounds through this module
from opendp_wgm.measurements._peeling_rounds import coverage as coverage  # noqa: PLC0414
from opendp_wgm.measurements._peeling_rounds import peel as peel  # noqa: PLC0414
from opendp_wgm.measurements._spark import spark_space
from opendp_wgm.measurements.two_stage import (
    PeelingStage,
    StageParts,
    make_dp_sips_then_peeling,
    measurement_of,
    peeling_parts,
    release_of,
    wgm_then_peeling,
)
from opendp_wgm.measurements.wgm import Engine
from opendp_wgm.privacy.auto import DEFAULT_AUTO_FRACTION
from opendp_wgm.privacy.budget import Budget, check_peeling_measure
from opendp_wgm.privacy.calibrate import (
    HittingSetCalibration,
    Stage1Mechanism,
    calibrate_peeling_for,
    calibrate_user_peeling,
    calibrate_wgm_hitting_set,
)
from opendp_wgm.privacy.peeling import USER_PEELING
from opendp_wgm.samplers import NoiseMethod

__all__ = [
    "HittingSetCalibration",
    "calibrate_user_peeling",
    "calibrate_wgm_hitting_set",
    "make_user_peeling",
    "make_user_peeling_from_budget",
    "make_wgm_hitting_set",
    "make_wgm_hitting_set_from_budget",
    "then_user_peeling",
    "then_user_peeling_from_budget",
    "then_wgm_hitting_set",
    "then_wgm_hitting_set_from_budget",
]

# --------------------------------------------------------------------------------------------------------
# user peeling on a public candidate list
# --------------------------------------------------------------------------------------------------------
@fill_doc(user_items_space=USER_ITEMS_SPACE)
def make_user_peeling(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    candidates: Sequence[Any] | pl.Series | np.ndarray,
    k: int,
    scale: float,
    output_measure: dp.Measure | None = None,
    delta: float | None = None,
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Pick up to ``k`` public candidates that together cover many users (private greedy, user peeling).

    ``min(k, len(candidates))`` adaptive rounds; round ``r`` selects, with the exponential mechanism, a
    candidate not chosen before with probability proportional to
    :math:`\exp(c_r(x)/\text{scale})`, where :math:`c_r(x)` is the number of users holding ``x`` and none of
    the items picked in rounds ``1..r-1`` (the paper's reference code). Its holders are then marked as covered.

    Parameters
    ----------
    {user_items_space}
    candidates
        The public candidate items (distinct, no nulls), e.g. a WGM release. Cast exactly to the item
        column's dtype (at construction when a ``dp.lazyframe_domain`` states it, else at release before any
        noise is drawn): a cast that changes a candidate or merges two raises. If empty, the release is empty
        and costs nothing.
    k
        Number of rounds, ≥ 1.
    scale
        > 0: the exponential mechanism's temperature; each round is (1/scale)-DP for one user.
    output_measure
        ``dp.approximate(dp.zero_concentrated_divergence())`` (default; composes with the WGM and in a
        ``dp.Context``), ``dp.zero_concentrated_divergence()``, ``dp.max_divergence()`` (pure ε by basic
        composition) or ``dp.approximate(dp.max_divergence())`` (then ``delta`` is required).
    delta
        Only with ``dp.approximate(dp.max_divergence())``: the δ ∈ [0, 1) at which the composed zCDP
        guarantee is converted to (ε, δ), as the paper's reference code does; 0 gives basic
        composition.
    item
        The item column or columns, as for :func:`opendp_wgm.make_wgm`.

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column (input name and dtype) and ``rank``
        (UInt32, 1 = first pick), one row per round, in selection order. Rows with a null user or item are
        dropped first. Counts are of distinct users and are not clipped (no Δ0 is needed).

    Raises
    ------
    TypeError, ValueError
        On a bad parameter (named, with the value received), before any OpenDP object is built.

    Notes
    -----
    Neighbouring datasets differ by ``d_in`` users (add/remove). Given the earlier picks, every round's
    scores move by at most ``d_in``, all in the same direction, so a round is
    :math:`\varepsilon_r`-DP and :math:`\varepsilon_r`-bounded-range with
    :math:`\varepsilon_r = d_{in}/\text{scale}` (no factor 1/2), hence :math:`\varepsilon_r^2/8`-zCDP
    (``docs/hitting_set.md`` §2). ``k`` adaptive rounds compose to

    .. math::
        \rho = \frac{k\,d_{in}^2}{8\,\text{scale}^2}, \qquad
        \varepsilon_{\text{pure}} = \frac{k\,d_{in}}{\text{scale}}, \qquad
        \varepsilon_{(\varepsilon,\delta)} = \min\big(\varepsilon_{\text{pure}},\
        \rho + 2\sqrt{\rho\ln(1/\delta)}\big)

    with ``k`` replaced by the number of rounds :math:`R = \min(k, |C|)` (public, as the candidates are);
    δ is reported as 0 when the pure bound is the smaller one. Maps round up.

    Required features: ``contrib``, ``honest-but-curious``.

    References
    ----------
    Missing Mass for Differentially Private Domain Discovery (2026), arXiv 2603.14016.
    Durfee, Rogers (2019), Practical Differentially Private Top-k Selection with Pay-what-you-get
    Composition, arXiv 1905.04273.
    Cesar, Rogers (2021), Bounding, Concentrating, and Truncating: Unifying Privacy Loss Composition for Data
    Analytics, arXiv 2004.07223.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_user_peeling(*wgm.user_items_space(), candidates=["a", "b", "c"], k=2, scale=4.0)
    >>> m.map(1)  # 2 rounds: 2 / (8 * 4^2)
    (0.015625, 0.0)
    """
    parts = _user_peeling(
        input_domain, input_metric, candidates=candidates, k=k, scale=scale, output_measure=output_measure,
        delta=delta, item=item,
    )
    return measurement_of(input_domain, input_metric, parts)


def _user_peeling(
    input_domain: dp.Domain, input_metric: dp.Metric, *, candidates: Sequence[Any] | pl.Series | np.ndarray, k: int,
    scale: float, output_measure: dp.Measure | None = None, delta: float | None = None,
    item: str | Sequence[str] | None = None,
) -> StageParts:
    """:func:`make_user_peeling`'s parts, checked: the output measure and release function, and the map."""
    _assert_features()
    series = _check_candidates(candidates)
    k = _check_int("k", k, minimum=1)
    scale = _check_positive("scale", scale)
    kind, delta = check_peeling_measure(output_measure, delta, zero_delta=USER_PEELING.zero_delta)
    rounds = min(k, series.len())  # public: the candidate list is
    spark = spark_space(input_domain, input_metric, item=item)
    if spark is not None:  # Spark selects the (user, candidate) pairs; the driver peels them as on Polars

        def on_spark(frame: Any) -> pl.DataFrame:
            checked = spark_engine.check_frame(frame, spark)
            items = spark_engine.frame_candidates(checked, spark, series)  # exact cast, before any noise
            pairs = spark_engine.candidate_pairs(checked, spark, items)
            return peel(pairs, _Space(spark.user, spark.item, None, lazyframe_domain=False), items, k, scale)

        return peeling_parts(on_spark, kind=kind, rounds=rounds, scale=scale, accounting=USER_PEELING, delta=delta)
    space = _resolve_space(input_domain, input_metric, item)
    series = _check_candidates_for(series, space)

    def function(frame: Any) -> pl.DataFrame:
        return _released(peel(prepared_input(frame, space), space, series, k, scale), space)

    return peeling_parts(function, kind=kind, rounds=rounds, scale=scale, accounting=USER_PEELING, delta=delta)


#: :func:`make_user_peeling` without its measurement: WGM-then-user-peeling's stage 2 at every release.
_user_peeling_release = release_of(_user_peeling)


def make_user_peeling_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    candidates: Sequence[Any] | pl.Series | np.ndarray,
    k: int,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""User peeling calibrated to a per-user budget (see :func:`calibrate_user_peeling`).

    ``rho`` gives ``dp.approximate(dp.zero_concentrated_divergence())`` with δ = 0; ``epsilon`` with
    ``delta`` gives ``dp.approximate(dp.max_divergence())`` (the reference's accounting); ``epsilon`` alone
    gives ``dp.max_divergence()``. The result is :func:`make_user_peeling` with the calibrated scale, so
    ``m.check(1, budget)`` holds. The budget is spread over :math:`\min(k, |C|)` rounds.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_user_peeling_from_budget(*wgm.user_items_space(), candidates=[1, 2, 3], k=5,
    ...                                       epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    """
    _assert_features()
    series = _check_candidates(candidates)
    k = _check_int("k", k, minimum=1)
    budget = Budget.of_peeling(epsilon=epsilon, rho=rho, delta=delta)
    scale = calibrate_peeling_for(budget, max(1, min(k, series.len())))
    return make_user_peeling(
        input_domain,
        input_metric,
        candidates=series,
        k=k,
        scale=scale,
        output_measure=budget.measure,
        delta=budget.delta if budget.kind == "approx_dp" else None,
        item=item,
    )


# --------------------------------------------------------------------------------------------------------
# WGM, then user peeling
# --------------------------------------------------------------------------------------------------------
@fill_doc(user_items_space=USER_ITEMS_SPACE)
def make_wgm_hitting_set(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    k: int,
    max_contributions: int,
    wgm_scale: float,
    wgm_threshold: float,
    peel_scale: float,
    output_measure: dp.Measure | None = None,
    wgm_epsilon: float | None = None,
    peel_delta: float | None = None,
    noise: NoiseMethod = "lattice",
    item: str | Sequence[str] | None = None,
    passes: int = 1,
    engine: Engine = "auto",
) -> dp.Measurement:
    r"""Private k-hitting set over an unknown domain: WGM candidates, then user peeling on them.

    Stage 1 is :func:`opendp_wgm.make_wgm` (``max_contributions``, ``wgm_scale``, ``wgm_threshold``); stage 2
    is :func:`make_user_peeling` on the released items with ``k`` and ``peel_scale``, on the *unclipped*
    data (the paper's reference code). Only the stage-2 picks are returned.

    Parameters
    ----------
    {user_items_space}
    k
        Number of peeling rounds, ≥ 1 (the output has ``min(k, #candidates)`` rows).
    max_contributions, wgm_scale, wgm_threshold
        Δ0, σ and T of the WGM (:func:`opendp_wgm.make_wgm`).
    peel_scale
        The exponential mechanism's scale in every peeling round.
    output_measure
        ``dp.approximate(dp.zero_concentrated_divergence())`` (default) or ``dp.approximate(dp.max_divergence())``
        (then ``wgm_epsilon`` and ``peel_delta`` are required).
    wgm_epsilon
        (ε, δ) only: the ε at which the WGM's profile is reported (``epsilon`` of :func:`opendp_wgm.make_wgm`).
    peel_delta
        (ε, δ) only: the δ ∈ [0, 1) of the peeling's zCDP → (ε, δ) conversion (``delta`` of
        :func:`make_user_peeling`).
    noise
        The WGM's sampler, ``"lattice"`` (default) or ``"opendp"``.
    item
        The item column or columns, as for :func:`opendp_wgm.make_wgm`.
    passes
        Stage 1 processes the users in this many disjoint hash buckets, one lazy plan each (``passes`` of
        :func:`opendp_wgm.make_wgm`: the same release, peak memory about 1/``passes``; ``docs/engines.md``).
        At one in-memory pass the prepared input is collected once and stage 2 reads it; otherwise stage 2 is one
        more pass. It keeps every distinct (user, candidate) pair in memory.
    engine : {'auto', 'in-memory', 'streaming'}
        Polars engine that collects each stage-1 pass (``engine`` of :func:`opendp_wgm.make_wgm`).

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column (input name and dtype) and ``rank`` (UInt32),
        in selection order. If the WGM releases nothing, the output is empty (the map is unchanged).

    Notes
    -----
    Adaptive composition of the two stages: stage 2 is private for every fixed candidate list, and its
    candidates are stage 1's output. The map is the sum of the stage maps, rounded up, with stage 2 charged
    for ``k`` rounds (its candidate list is not known in advance) (``docs/hitting_set.md`` §3):

    .. math::
        d_{in} \mapsto \mathrm{map}_{\mathrm{WGM}}(d_{in}) + \mathrm{map}_{\mathrm{peel}}(d_{in})

    in (ρ, δ) (zCDP: :math:`(d_{in}^2/(2\sigma^2) + k d_{in}^2/(8 s^2),\ \delta_T(d_{in}))`) or in (ε, δ).

    Required features: ``contrib``, ``honest-but-curious``.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm_hitting_set(*wgm.user_items_space(), k=10, max_contributions=100,
    ...                              wgm_scale=4.0, wgm_threshold=25.0, peel_scale=10.0)
    >>> rho, delta = m.map(1)
    >>> round(rho, 6), delta < 1e-6
    (0.04375, True)
    """
    _assert_features()
    stage_2 = PeelingStage.checked(
        k, peel_scale, output_measure, wgm_epsilon, peel_delta, _user_peeling_release, USER_PEELING
    )
    return wgm_then_peeling(
        input_domain, input_metric, stage_2, max_contributions=max_contributions, wgm_scale=wgm_scale,
        wgm_threshold=wgm_threshold, noise=noise, item=item, passes=passes, engine=engine,
    )


@budget_boundary()
def make_wgm_hitting_set_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    k: int,
    max_contributions: int | Literal["auto"],
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    split: float = 0.5,
    noise_delta_fraction: float = 0.5,
    noise: NoiseMethod = "lattice",
    item: str | Sequence[str] | None = None,
    passes: int = 1,
    engine: Engine = "auto",
    stage_1: Stage1Mechanism = "wgm",
    rounds: int | None = None,
    ratio: float | None = None,
    auto_fraction: float = DEFAULT_AUTO_FRACTION,
) -> dp.Measurement:
    r"""WGM-then-user-peeling calibrated to a per-user budget: (ε, δ)-DP or approximate (ρ, δ)-zCDP.

    ``split`` (default 1/2, the reference's) is the share of the budget given to stage 1 (the WGM); see
    :func:`calibrate_wgm_hitting_set`, which shows every calibrated parameter. The result is
    :func:`make_wgm_hitting_set` with those parameters, so ``m.check(1, budget)`` holds. With
    ``stage_1="dp-sips"`` stage 1 is DP-SIPS (:func:`opendp_wgm.make_dp_sips`: rounds on the items not yet
    released, by default the adaptive schedule) calibrated to the same share by
    :func:`opendp_wgm.privacy.calibrate.calibrate_dp_sips`; the map is still the sum of the stage maps.

    Parameters
    ----------
    input_domain, input_metric, k, max_contributions
        As for :func:`make_wgm_hitting_set`.
    delta, epsilon, rho, split, noise_delta_fraction
        The budget and its split, as for :func:`calibrate_wgm_hitting_set`.
    noise, item, passes, engine
        As for :func:`make_wgm_hitting_set` (``noise``, ``passes`` and ``engine`` apply to every DP-SIPS round).
    stage_1, rounds, ratio
        Stage 1's mechanism (``'wgm'``, the default, or ``'dp-sips'``) and DP-SIPS's schedule, as for
        :func:`opendp_wgm.make_wgm_top_k_from_budget`.
    auto_fraction
        With ``max_contributions="auto"`` only: as for :func:`opendp_wgm.make_wgm_top_k_from_budget`.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm_hitting_set_from_budget(*wgm.user_items_space(), k=20, max_contributions=100,
    ...                                          epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    """
    cal = calibrate_wgm_hitting_set(  # @budget_boundary checked max_contributions: never "auto" here
        k=k, max_contributions=cast(int, max_contributions), delta=delta, epsilon=epsilon, rho=rho, split=split,
        noise_delta_fraction=noise_delta_fraction, stage_1=stage_1, rounds=rounds, ratio=ratio,
    )
    return wgm_hitting_set_of_calibration(
        input_domain, input_metric, cal, noise=noise, item=item, passes=passes, engine=engine
    )


def wgm_hitting_set_of_calibration(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    cal: HittingSetCalibration,
    *,
    noise: NoiseMethod,
    item: str | Sequence[str] | None,
    passes: int,
    engine: Engine,
) -> dp.Measurement:
    """:func:`make_wgm_hitting_set_from_budget`'s measurement for its calibration ``cal``: the CLI, which prints
    the calibration, builds from it without calibrating again."""
    return two_stage_of_calibration(
        input_domain, input_metric, cal, make_wgm_then=make_wgm_hitting_set, accounting=USER_PEELING,
        sips_peeling=lambda: _user_peeling_release, wgm_options={}, noise=noise, item=item, passes=passes,
        engine=engine,
    )


def _make_dp_sips_hitting_set(input_domain: dp.Domain, input_metric: dp.Metric, **parameters: Any) -> dp.Measurement:
    """DP-SIPS, then user peeling, from explicit parameters (as for
    :func:`opendp_wgm.measurements.top_k._make_dp_sips_top_k`, without ``method``): what
    :func:`make_wgm_hitting_set_from_budget` builds with ``stage_1="dp-sips"``, on either engine."""
    _assert_features()
    options = dict(output_measure=None, sips_epsilon=None, peel_delta=None, noise="lattice", item=None, passes=1,
                   engine="auto")  # fmt: skip
    return make_dp_sips_then_peeling(
        input_domain, input_metric, **{**options, **parameters}, peeling=_user_peeling_release, accounting=USER_PEELING
    )


then_user_peeling = _to_then(make_user_peeling)
then_user_peeling_from_budget = _to_then(make_user_peeling_from_budget)
then_wgm_hitting_set = _to_then(make_wgm_hitting_set)
then_wgm_hitting_set_from_budget = _to_then(make_wgm_hitting_set_from_budget)
