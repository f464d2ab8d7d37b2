r"""Private top-k: known-domain peeling, WGM-then-top-k on an unknown domain, and the limited-domain baseline.

"Missing Mass for Differentially Private Domain Discovery" (arXiv 2603.14016) releases the k items held by
the most users, when the item domain is unknown, in two stages (the paper's reference code):

1. stage 1, :func:`opendp_wgm.make_wgm`: discover candidate items on the unknown domain;
2. stage 2, :func:`make_peeling_top_k`: exponential-mechanism peeling (one-shot Gumbel top-k) over the
   candidates, scored by their exact (unclipped, per-user-deduplicated) user counts.

The baseline is the limited-domain mechanism of Durfee & Rogers (2019, Algorithm 1; the paper's reference code),
:func:`make_limited_domain_top_k`.

Every release is a ``pl.DataFrame`` with the item column (the input's name and dtype) and ``rank``
(``UInt32``, 1 = best), in rank order; nothing else. Selections are sampled exactly
(:mod:`opendp_wgm.samplers.selection`). Privacy arguments: ``docs/top_k.md``.
"""

from __future__ import annotations

import functools
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
from opendp_wgm._validation import (
    _check_choice,
    _check_int,
    _check_positive,
)
from opendp_wgm.engines import spark as spark_engine
from opendp_wgm.engines.polars import Prepared, cast_candidates, item_counts, prepared_input
from opendp_wgm.measurements._budget_boundary import budget_boundary
from opendp_wgm.measurements._of_calibration import two_stage_of_calibration
from opendp_wgm.measurements._spark import spark_space
from opendp_wgm.measurements.two_stage import (
    PeelingStage,
    StageParts,
    make_dp_sips_then_peeling,
    measurement_of,
    peeling_parts,
    ranked_frame,
    release_of,
    wgm_then_peeling,
)
from opendp_wgm.measurements.wgm import Engine
from opendp_wgm.privacy.auto import DEFAULT_AUTO_FRACTION
from opendp_wgm.privacy.budget import MeasureKind, check_peeling_measure
from opendp_wgm.privacy.calibrate import Stage1Mechanism, WGMTopKCalibration, calibrate_wgm_top_k
from opendp_wgm.privacy.peeling import TOP_K
from opendp_wgm.samplers import SELECTION_METHODS, NoiseMethod, SelectionMethod, noisy_top_k

__all__ = [
    "make_peeling_top_k",
    "make_wgm_top_k",
    "make_wgm_top_k_from_budget",
    "then_peeling_top_k",
    "then_wgm_top_k",
    "then_wgm_top_k_from_budget",
]

# --------------------------------------------------------------------------------------------------------------
# selection on exact counts


def _selection_sampler(kind: MeasureKind) -> Literal["zcdp", "max_divergence"]:
    """Pure DP uses permute-and-flip (OpenDP's exponential noise); every other measure the Gumbel/EM form."""
    return "max_divergence" if kind == "pure_dp" else "zcdp"


def check_method(method: Any) -> SelectionMethod:
    return _check_choice("method", method, SELECTION_METHODS)


def _item_dtype(lf: pl.LazyFrame, space: _Space) -> pl.DataType:
    return lf.collect_schema()[space.item]


#: The sampler of WGM-then-top-k's stage 2: both of its output measures (approximate zCDP and (ε, δ)) select
#: with the exponential mechanism's Gumbel form (:func:`_selection_sampler`).
WGM_TOP_K_SAMPLER: Literal["zcdp"] = "zcdp"


def top_k_of_counts(
    items: pl.Series, counts: np.ndarray, k: int, scale: float, sampler: str, method: str, name: str
) -> pl.DataFrame:
    """A private top-k of ``items`` by their exact ``counts`` (same order), as the released frame (column
    ``name``, then ``rank``). The Polars and the Spark engine (:mod:`opendp_wgm.spark`) both select with it."""
    if items.len() == 0:
        return ranked_frame(items, np.zeros(0, dtype=np.int64), name)
    chosen = noisy_top_k(counts, k, scale, measure=sampler, method=method)  # type: ignore[arg-type]
    return ranked_frame(items, chosen, name)


def _peel_candidates(
    data: Prepared, space: _Space, candidates: pl.Series, k: int, scale: float, sampler: str, method: str
) -> pl.DataFrame:
    """Exact user counts of the candidates on ``data`` (unclipped, deduplicated), then a private top-k."""
    items = cast_candidates(candidates, _item_dtype(data.lf, space))  # before any noise: errors carry no data
    counts = item_counts(data, space, items)  # no query for an empty list
    return top_k_of_counts(items, counts, k, scale, sampler, method, space.item)


# --------------------------------------------------------------------------------------------------------------
# known-domain peeling


@fill_doc(user_items_space=USER_ITEMS_SPACE)
def make_peeling_top_k(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    candidates: Sequence[Any] | pl.Series | np.ndarray,
    k: int,
    scale: float,
    output_measure: dp.Measure | None = None,
    delta: float | None = None,
    method: SelectionMethod = "auto",
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Private top-k over a public candidate list: exact user counts, then exponential-mechanism peeling.

    The release is :func:`opendp_wgm.make_candidate_counts` (distinct-user counts of the candidates,
    monotone ℓ∞ stability 1, no Δ0 needed) followed by an exact private top-k of the count vector
    (the distribution of OpenDP's ``make_noisy_top_k``; the paper's reference code ``cdp_peeling``).

    Parameters
    ----------
    {user_items_space}
    candidates
        The public candidate items (distinct, no nulls). They are cast to the item column's dtype (at
        construction when a ``dp.lazyframe_domain`` states it, else at release before any noise is drawn); a
        cast that changes a candidate (1.2 on an integer column, text on a numeric one) or merges two raises.
    k
        Number of items to release, ≥ 1 (the output has ``min(k, len(candidates))`` rows).
    scale
        The selection's noise scale s > 0: every round selects with :math:`\Pr[x] \propto e^{c(x)/s}`
        (Gumbel; permute-and-flip under pure DP). The reference's ε' is 1/s.
    output_measure
        ``dp.approximate(dp.zero_concentrated_divergence())`` (default), ``dp.zero_concentrated_divergence()``,
        ``dp.max_divergence()`` (samples permute-and-flip, as OpenDP does) or
        ``dp.approximate(dp.max_divergence())`` (then ``delta`` is required).
    delta
        Only with ``dp.approximate(dp.max_divergence())``: the δ at which the zCDP of the peeling is
        converted to ε (the accounting of the paper's reference code).
    method : {'auto', 'opendp', 'fast'}
        The exact sampler (:func:`opendp_wgm.samplers.noisy_top_k`); all draw the same distribution.
    item
        The item column or columns, as for :func:`opendp_wgm.make_wgm`.

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column (input name and dtype) and ``rank`` (UInt32,
        1 = best), in rank order. An empty candidate list releases an empty frame (and costs nothing).

    Notes
    -----
    With :math:`r = \min(k, |C|)` rounds and :math:`d = d_{in}` users added or removed, the counts move
    monotonically by at most d, so (``docs/top_k.md`` §2)

    .. math::
        \rho = \frac{r\,d^2}{8 s^2}, \qquad \varepsilon_{\text{pure}} = \frac{r\,d}{s}, \qquad
        \varepsilon(\delta) = \min\Big(\frac{r\,d}{s},\ \rho + 2\sqrt{\rho\ln(1/\delta)}\Big).

    No factor 1/2: user counts are monotone under add/remove (the paper's reference code).

    Required features: ``contrib``, ``honest-but-curious``.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_peeling_top_k(*wgm.user_items_space(), candidates=["a", "b", "c"], k=2, scale=2.0)
    >>> m.map(1)
    (0.06250000000000006, 0.0)
    """
    parts = _peeling_top_k(
        input_domain, input_metric, candidates=candidates, k=k, scale=scale, output_measure=output_measure,
        delta=delta, method=method, item=item,
    )
    return measurement_of(input_domain, input_metric, parts)


def _peeling_top_k(
    input_domain: dp.Domain, input_metric: dp.Metric, *, candidates: Sequence[Any] | pl.Series | np.ndarray, k: int,
    scale: float, output_measure: dp.Measure | None = None, delta: float | None = None,
    method: SelectionMethod = "auto", item: str | Sequence[str] | None = None,
) -> StageParts:
    """:func:`make_peeling_top_k`'s parts, checked: the output measure and release function, and the map."""
    _assert_features()
    k = _check_int("k", k, minimum=1)
    scale = _check_positive("scale", scale)
    kind, delta_value = check_peeling_measure(output_measure, delta, zero_delta=TOP_K.zero_delta)
    method = check_method(method)
    sampler = _selection_sampler(kind)
    spark = spark_space(input_domain, input_metric, item=item)
    if spark is not None:  # Spark counts the candidates' users; only the counts reach the driver, which selects
        series = _check_candidates(candidates)

        def function(frame: Any) -> pl.DataFrame:
            checked = spark_engine.check_frame(frame, spark)
            items = spark_engine.frame_candidates(checked, spark, series)  # exact cast, before any noise
            counts = spark_engine.candidate_counts(checked, spark, items)
            return top_k_of_counts(items, counts, k, scale, sampler, method, spark.item)

    else:
        space = _resolve_space(input_domain, input_metric, item)
        series = _check_candidates_for(_check_candidates(candidates), space)

        # candidate counts (monotone ℓ∞ stability d_in -> d_in) then an exact private top-k of the count vector
        def function(frame: Any) -> pl.DataFrame:
            released = _peel_candidates(prepared_input(frame, space), space, series, k, scale, sampler, method)
            return _released(released, space)

    rounds = min(k, series.len())  # public: the candidate list is
    return peeling_parts(function, kind=kind, rounds=rounds, scale=scale, accounting=TOP_K, delta=delta_value)


#: :func:`make_peeling_top_k` without its measurement: WGM-then-top-k's stage 2 at every release.
_peeling_top_k_release = release_of(_peeling_top_k)


# --------------------------------------------------------------------------------------------------------------
# WGM-then-top-k


@fill_doc(user_items_space=USER_ITEMS_SPACE)
def make_wgm_top_k(
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
    method: SelectionMethod = "auto",
    item: str | Sequence[str] | None = None,
    passes: int = 1,
    engine: Engine = "auto",
) -> dp.Measurement:
    r"""Private top-k over an unknown domain: WGM candidates, then exponential-mechanism peeling on them.

    Stage 1 is :func:`opendp_wgm.make_wgm` (``max_contributions``, ``wgm_scale``, ``wgm_threshold``); stage 2
    peels ``k`` items from the released candidates with scale ``peel_scale``, scored by their *exact* user
    counts (unclipped, one per user; the paper's reference code). Only the stage-2 items are released.

    Parameters
    ----------
    {user_items_space}
    k
        Number of items to release, ≥ 1 (fewer when the WGM releases fewer than k candidates).
    max_contributions, wgm_scale, wgm_threshold
        Δ0, σ and T of the WGM (:func:`opendp_wgm.make_wgm`).
    peel_scale
        The Gumbel scale s of the peeling (the reference's ε' is 1/s).
    output_measure
        ``dp.approximate(dp.zero_concentrated_divergence())`` (default) or
        ``dp.approximate(dp.max_divergence())`` (then ``wgm_epsilon`` and ``peel_delta`` are required).
    wgm_epsilon
        Only under (ε, δ): the ε at which the WGM stage reports its δ (``epsilon`` of :func:`make_wgm`).
    peel_delta
        Only under (ε, δ): the δ at which the peeling stage's zCDP is converted to ε.
    noise : {'lattice', 'opendp'}
        The WGM's exact discrete Gaussian sampler.
    method : {'auto', 'opendp', 'fast'}
        The exact selection sampler.
    item
        The item column or columns, as for :func:`opendp_wgm.make_wgm`.
    passes
        Stage 1 processes the users in this many disjoint hash buckets, one lazy plan each (``passes`` of
        :func:`opendp_wgm.make_wgm`: the same release, peak memory about 1/``passes``; ``docs/engines.md``).
        At one in-memory pass the prepared input is collected once and stage 2 reads it; otherwise stage 2 is one
        more pass, over the candidates' rows only (the filter reaches a file scan).
    engine : {'auto', 'in-memory', 'streaming'}
        Polars engine that collects each stage-1 pass (``engine`` of :func:`opendp_wgm.make_wgm`).

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column (input name and dtype) and ``rank`` (UInt32),
        at most k rows in rank order. If the WGM releases nothing, the release is empty (the map is unchanged).

    Notes
    -----
    Adaptive composition of the two stages (``docs/top_k.md`` §3): the candidate list is a release of stage 1,
    and stage 2 is private for every fixed candidate list, with a map that does not depend on it (it charges k
    rounds whatever the number of candidates). So

    .. math::
        m(d) = m_{\text{WGM}}(d) + m_{\text{peel}}(d), \qquad
        m_{\text{peel}}(d) = \Big(\frac{k d^2}{8 s^2},\ 0\Big) \text{ (approx. zCDP)} \quad\text{or}\quad
        \Big(\min\big(\tfrac{k d}{s}, \rho + 2\sqrt{\rho \ln(1/\delta_2)}\big),\ \delta_2\Big) \text{ ((ε, δ))}

    with :math:`\rho = k d^2/(8 s^2)`; (ρ, δ) pairs and (ε, δ) pairs add.

    Required features: ``contrib``, ``honest-but-curious``.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm_top_k(*wgm.user_items_space(), k=10, max_contributions=100,
    ...                        wgm_scale=4.0, wgm_threshold=25.0, peel_scale=10.0)
    >>> rho, delta = m.map(1)
    >>> round(rho, 6), delta < 1e-6
    (0.04375, True)
    """
    _assert_features()
    peeling = functools.partial(_peeling_top_k_release, method=check_method(method))
    stage_2 = PeelingStage.checked(k, peel_scale, output_measure, wgm_epsilon, peel_delta, peeling, TOP_K)
    return wgm_then_peeling(
        input_domain, input_metric, stage_2, max_contributions=max_contributions, wgm_scale=wgm_scale,
        wgm_threshold=wgm_threshold, noise=noise, item=item, passes=passes, engine=engine,
    )


@budget_boundary()
def make_wgm_top_k_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    k: int,
    max_contributions: int | Literal["auto"],
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    split: float = 0.5,
    noise: NoiseMethod = "lattice",
    method: SelectionMethod = "auto",
    item: str | Sequence[str] | None = None,
    passes: int = 1,
    engine: Engine = "auto",
    stage_1: Stage1Mechanism = "wgm",
    rounds: int | None = None,
    ratio: float | None = None,
    auto_fraction: float = DEFAULT_AUTO_FRACTION,
) -> dp.Measurement:
    r"""WGM-then-top-k calibrated to a per-user budget: (ε, δ)-DP or approximate (ρ, δ)-zCDP.

    ``split`` (default 1/2, the reference's) is the share of the budget given to stage 1 (the WGM); the
    calibrated parameters are those of :func:`opendp_wgm.calibrate_wgm_top_k`, which returns them
    for inspection. The result is :func:`make_wgm_top_k` with those parameters, so ``m.check(1, budget)``.

    - ``epsilon``: stage 1 is (split·ε, split·δ)-DP (its δ half for noise, half for the threshold, as the
      reference), stage 2 ((1 − split)·ε, (1 − split)·δ)-DP with the reference's ε'
      (the paper's reference code).
    - ``rho``: stage 1 gets (split·ρ, δ), stage 2 (1 − split)·ρ (the peeling needs no δ).

    With ``stage_1="dp-sips"`` stage 1 is DP-SIPS (:func:`opendp_wgm.make_dp_sips`: rounds on the items not
    yet released, by default the adaptive schedule) calibrated to the same share by
    :func:`opendp_wgm.privacy.calibrate.calibrate_dp_sips`: it beats the WGM where users hold many items
    (``docs/privacy.md`` §4). The map is still the sum of the stage maps.

    Parameters
    ----------
    input_domain, input_metric, k, max_contributions
        As for :func:`make_wgm_top_k`.
    delta
        δ ∈ (0, 1), for one user.
    epsilon, rho
        Exactly one of them, > 0, for one user.
    split
        Share of the budget given to stage 1, in (0, 1).
    noise, method, item, passes, engine
        As for :func:`make_wgm_top_k` (``noise``, ``passes`` and ``engine`` apply to every DP-SIPS round).
    stage_1 : {'wgm', 'dp-sips'}
        Stage 1's mechanism: the WGM (default, the paper's) or DP-SIPS.
    rounds, ratio
        ``stage_1="dp-sips"`` only: a geometric schedule of R ≥ 1 rounds and ratio r (both None: the adaptive
        schedule of :func:`opendp_wgm.make_dp_sips_from_budget`, ``docs/dp_sips.md``).
    auto_fraction
        With ``max_contributions="auto"`` (a private choice of Δ0, :func:`opendp_wgm.make_auto_contributions`,
        ``docs/auto.md``) only: the share of the budget spent on the choice, in (0, 0.5]; both stages share the
        rest, split by ``split``.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm_top_k_from_budget(*wgm.user_items_space(), k=100, max_contributions=100,
    ...                                    epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    """
    calibration = calibrate_wgm_top_k(  # @budget_boundary checked max_contributions: never "auto" here
        k=k, max_contributions=cast(int, max_contributions), delta=delta, epsilon=epsilon, rho=rho, split=split,
        stage_1=stage_1, rounds=rounds, ratio=ratio,
    )
    return wgm_top_k_of_calibration(
        input_domain, input_metric, calibration, noise=noise, method=method, item=item, passes=passes, engine=engine
    )


def wgm_top_k_of_calibration(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    calibration: WGMTopKCalibration,
    *,
    noise: NoiseMethod,
    method: SelectionMethod,
    item: str | Sequence[str] | None,
    passes: int,
    engine: Engine,
) -> dp.Measurement:
    """:func:`make_wgm_top_k_from_budget`'s measurement for its ``calibration``: the CLI, which prints the
    calibration, builds from it without calibrating again."""
    return two_stage_of_calibration(
        input_domain, input_metric, calibration, make_wgm_then=make_wgm_top_k, accounting=TOP_K,
        sips_peeling=lambda: functools.partial(_peeling_top_k_release, method=check_method(method)),
        wgm_options={"method": method}, noise=noise, item=item, passes=passes, engine=engine,
    )


def _make_dp_sips_top_k(
    input_domain: dp.Domain, input_metric: dp.Metric, *, method: SelectionMethod = "auto", **parameters: Any
) -> dp.Measurement:
    """DP-SIPS, then top-k, from explicit parameters (those of
    :func:`~opendp_wgm.measurements.two_stage.make_dp_sips_then_peeling` but ``peeling`` and ``accounting``;
    ``output_measure``, ``sips_epsilon``, ``peel_delta`` default to None, ``noise``, ``item``, ``passes``,
    ``engine`` to theirs): what :func:`make_wgm_top_k_from_budget` builds with ``stage_1="dp-sips"``, on either
    engine (the Tumult adapter runs it)."""
    _assert_features()
    options = dict(output_measure=None, sips_epsilon=None, peel_delta=None, noise="lattice", item=None, passes=1,
                   engine="auto")  # fmt: skip
    peeling = functools.partial(_peeling_top_k_release, method=check_method(method))
    return make_dp_sips_then_peeling(
        input_domain, input_metric, **{**options, **parameters}, peeling=peeling, accounting=TOP_K
    )


then_peeling_top_k = _to_then(make_peeling_top_k)
then_wgm_top_k = _to_then(make_wgm_top_k)
then_wgm_top_k_from_budget = _to_then(make_wgm_top_k_from_budget)
