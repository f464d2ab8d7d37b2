r"""The optimal (ε, δ) partition selection for one item per user (private set union at Δ0 = 1).

Desfontaines, Voss, Gipson, Mandayam, "Differentially private partition selection" (PoPETs 2022), the mechanism
that Google's differential-privacy library and PipelineDP call *truncated geometric* partition selection:

1. each user keeps one of its distinct items, uniformly at random (:func:`opendp_wgm.make_bound_user_items` at
   Δ0 = 1);
2. each item's count of users is taken (:func:`opendp_wgm.make_weighted_histogram`: at Δ0 = 1 every weight is
   exactly 1);
3. an item counted ``n`` times is released with probability π(n), independently
   (:func:`make_partition_release`; π is :func:`opendp_wgm.privacy.partition.release_table`).

No noise is added to any count, and none is released: the output is the released items only. Where users hold
about one item this beats the WGM at Δ0 = 1 (``docs/baselines.md``); where they hold many, the WGM's larger Δ0
wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import opendp.prelude as dp
import polars as pl

from opendp_wgm._partial import _to_then
from opendp_wgm._spaces import _assert_features
from opendp_wgm._validation import _check_execution
from opendp_wgm._validation import _Engine as Engine
from opendp_wgm.engines.polars import released_by_table
from opendp_wgm.measurements._spark import spark_space
from opendp_wgm.privacy.budget import measure_kind, measure_of
from opendp_wgm.privacy.partition import ReleaseTable, partition_selection_loss, release_table
from opendp_wgm.transformations import (
    histogram_space,
    make_bound_user_items,
    make_weighted_histogram,
)

__all__ = [
    "make_partition_release",
    "make_partition_selection",
    "then_partition_release",
    "then_partition_selection",
]


def _check_measure(output_measure: dp.Measure | None) -> dp.Measure:
    """``dp.approximate(dp.max_divergence())`` (the default): the only measure this mechanism states."""
    if output_measure is None:
        return measure_of("approx_dp")
    return measure_of(measure_kind(output_measure, ("approx_dp",)))


def _selection_map(table: ReleaseTable) -> Callable[[int], tuple[float, float]]:
    """The privacy map of the selection at ``table``'s (ε, δ): group privacy in ``d_in`` (``docs/privacy.md`` §6)."""

    def privacy_map(d_in: int) -> tuple[float, float]:
        return partition_selection_loss(d_in, epsilon=table.epsilon, delta=table.delta)

    return privacy_map


def make_partition_release(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    epsilon: float,
    delta: float,
    output_measure: dp.Measure | None = None,
) -> dp.Measurement:
    r"""Release each item of a Δ0 = 1 histogram counted ``n`` times with probability π(n), independently.

    Step 3 of :func:`make_partition_selection`, which is ``make_bound_user_items(1) >> make_weighted_histogram
    >> make_partition_release``.

    Parameters
    ----------
    input_domain, input_metric
        The output space of :func:`opendp_wgm.make_weighted_histogram` at ``max_contributions=1``.
    epsilon, delta, output_measure
        As for :func:`make_partition_selection`.

    Returns
    -------
    opendp.mod.Measurement
        Maps a histogram frame (item, ``weight``: users per item) to a ``pl.DataFrame`` with the item column
        only (a composite key's columns), sorted by item.

    Required features: ``contrib``, ``honest-but-curious``.
    """
    _assert_features()
    output_measure = _check_measure(output_measure)
    table = release_table(epsilon, delta)  # checks ε and δ, and the table's length
    histogram = histogram_space(input_domain, input_metric, single=True)
    item, words = histogram.item, table.words()

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        counts = frame.lazy().select(item, count=pl.col("weight").round().cast(pl.UInt64)).collect()
        keep = released_by_table(counts.get_column("count").to_numpy().astype(np.uint64), words)
        released = counts.select(item).filter(pl.Series(keep)).sort(item)  # the row order is arbitrary
        return released.unnest(item) if histogram.composite else released

    return dp.m.make_user_measurement(input_domain, input_metric, output_measure, function, _selection_map(table))


def make_partition_selection(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    epsilon: float,
    delta: float,
    output_measure: dp.Measure | None = None,
    item: str | Sequence[str] | None = None,
    passes: int = 1,
    engine: Engine = "auto",
) -> dp.Measurement:
    r"""Release items by the optimal (ε, δ) partition selection, one uniformly chosen item per user.

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with
        ``dp.symmetric_id_distance`` (e.g. ``ctx.accountant.input_space`` of a ``dp.Context``). From
        :func:`opendp_wgm.spark.spark_user_items_space`: it runs on Spark, on a ``pyspark.sql.DataFrame``, with
        the same map and output (``docs/engines.md``; ``passes`` and ``engine`` keep their defaults).
    epsilon
        ε > 0, for one user. The parameters are the budget: there is nothing to calibrate.
    delta
        δ ∈ (0, 1), for one user: an item held by a single user is released with probability δ.
    output_measure
        ``dp.approximate(dp.max_divergence())`` (the default and the only one: the mechanism is (ε, δ)-DP, with
        no zCDP statement; ``docs/privacy.md`` §6).
    item, passes, engine
        As for :func:`opendp_wgm.make_wgm`.

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column only (same name and dtype as the input; a
        composite key's columns), sorted by item: a key release for the ``stage_1`` of
        :func:`opendp_wgm.measurements.two_stage.make_two_stage` or the ``key_release`` of
        :func:`opendp_wgm.make_wgm_group_by` (``then_partition_selection(...)``). Rows with a null user or item
        are dropped first; empty data releases an empty frame.

    Notes
    -----
    Each user keeps one of its distinct items uniformly at random; an item kept by ``n`` users is released with
    probability π(n) (:func:`opendp_wgm.privacy.partition.release_table`), the largest that keeps the counts
    ``n − 1`` and ``n`` (ε, δ)-indistinguishable:
    :math:`\pi(n) = \min(e^\varepsilon \pi(n-1) + \delta,\ 1 - e^{-\varepsilon}(1 - \pi(n-1) - \delta),\ 1)`,
    π(0) = 0, computed exactly with :math:`e^\varepsilon` bounded below and π rounded down.

    Neighbouring datasets differ by the rows of ``d_in`` users (add or remove). Privacy map
    (``docs/privacy.md`` §6): (ε, δ) at ``d_in = 1``; group privacy
    :math:`(k\varepsilon,\ \delta \sum_{i<k} e^{i\varepsilon})` at ``d_in = k``.

    Required features: ``contrib``, ``honest-but-curious``.

    References
    ----------
    Desfontaines, Voss, Gipson, Mandayam (2022), Differentially private partition selection, PoPETs 2022(1).

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=1.0, delta=1e-5)
    >>> m.map(1)
    (1.0, 1e-05)
    >>> data = wgm.datasets.synthetic_zipf(n_users=2_000, items_per_user=1, seed=0)
    >>> m(data).columns
    ['item']
    """
    _assert_features()
    output_measure = _check_measure(output_measure)
    table = release_table(epsilon, delta)  # the checks (and their order) of the steps below, before any is built
    passes, engine = _check_execution(passes, engine)
    spark = spark_space(input_domain, input_metric, item=item, passes=passes, engine=engine)
    if spark is not None:  # the kernel's Δ0 = 1 histogram as a Spark plan, the draws in the executors
        from opendp_wgm.engines.spark import partition_selection_function  # imported: the space is a Spark one

        function = partition_selection_function(spark, table.words())
        return dp.m.make_user_measurement(input_domain, input_metric, output_measure, function, _selection_map(table))
    bound = make_bound_user_items(input_domain, input_metric, max_contributions=1, item=item)
    histogram = make_weighted_histogram(bound.output_domain, bound.output_metric, passes=passes, engine=engine)
    release = make_partition_release(
        histogram.output_domain, histogram.output_metric, epsilon=epsilon, delta=delta, output_measure=output_measure
    )
    return bound >> histogram >> release


then_partition_release = _to_then(make_partition_release)
then_partition_selection = _to_then(make_partition_selection)
