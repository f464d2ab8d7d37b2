r"""Keys with statistics on a Spark DataFrame: :func:`opendp_wgm.make_wgm_group_by` (and ``_from_budget``) when the
input space is :func:`opendp_wgm.spark.spark_user_items_space`'s, with the Polars constructor's maps.

The same two-stage composition (:func:`opendp_wgm.measurements.two_stage.make_two_stage`): the input is checked
(its schema only) and packed once (:func:`opendp_wgm.engines.spark_aggregates.pack_keys`: a composite key becomes
one string column), stage 1 releases keys on the packed Spark frame, and stage 2 is the Polars engine's OpenDP
plan computed by Spark: the exact per-key counts and grid sums over the released keys after the per-user
truncation (R rows per key, Δ0 keys per user; :func:`~opendp_wgm.engines.spark_aggregates.bounded_aggregates`),
collected (one row per released key), then noised on the driver by OpenDP's integer Gaussian
(``dp.m.make_gaussian`` on int64 vectors: the sampler of OpenDP's plan) at the scales OpenDP's plan gives each
aggregate (read from that plan's own summary). A mean is the noisy sum over its own noisy count, as OpenDP's
``.dp.mean``. The charged map is the Polars constructor's (``docs/privacy.md`` §5, "On Spark").
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import opendp.prelude as dp
import polars as pl

from opendp_wgm._validation import _check_choice
from opendp_wgm.engines.spark import SparkUserItemsDescriptor, spark_user_items_space
from opendp_wgm.engines.spark_aggregates import (
    GridValue,
    bounded_aggregates,
    check_group_by_frame,
    group_by_space,
    key_dtypes,
    pack_keys,
    unpack_keys,
)
from opendp_wgm.measurements._group_by_stage_2 import COUNT, _Aggregates, _GroupByRequest
from opendp_wgm.measurements.key_discovery import KEY_MECHANISMS, _key_release_from_budget
from opendp_wgm.measurements.two_stage import Preparation, Stage1, Stage2Release
from opendp_wgm.privacy.budget import Budget

__all__ = ["is_spark_space", "make_spark_group_by", "spark_key_release"]

#: Stage 2's column of a composite key's unpacked columns (a Struct), which the combined release unnests.
_KEYS = "__opendp_wgm_keys__"


def is_spark_space(input_domain: dp.Domain) -> bool:
    """Whether ``input_domain`` is a Spark space (:func:`opendp_wgm.spark.spark_user_items_space`)."""
    return isinstance(getattr(input_domain, "descriptor", None), SparkUserItemsDescriptor)


def _spark_space(input_domain: dp.Domain, input_metric: dp.Metric, item: Any) -> SparkUserItemsDescriptor:
    space = group_by_space(input_domain, input_metric)
    if item is not None:
        msg = "`item` must be None on Spark: name the key column(s) in spark_user_items_space(user, item)"
        raise ValueError(msg)
    return space


def frame_check(
    input_domain: dp.Domain, input_metric: dp.Metric, item: Any, max_rows_per_key: Any, sums: Any, means: Any
) -> Callable[[Any], object]:
    """The schema checks of :func:`make_spark_group_by`'s preparation (the user, key and value columns), alone:
    ``max_contributions="auto"`` runs them before its choice draws noise."""
    space = _spark_space(input_domain, input_metric, item)
    values = _Aggregates.of(space.keys or (space.item,), 1, max_rows_per_key, sums, means).values  # any valid Δ0
    return lambda frame: check_group_by_frame(frame, space, values)


def _packed_space(space: SparkUserItemsDescriptor) -> tuple[dp.Domain, dp.Metric]:
    """The space stage 1 runs on: (user, the packed key column)."""
    return spark_user_items_space(space.user, space.item)


# --------------------------------------------------------------------------------------------------------------
# stage 1 on Spark from a budget


def spark_key_release(mechanism: Any, budget: Budget, max_contributions: int, k: int | None, noise: Any) -> Stage1:
    """Stage 1 of :func:`opendp_wgm.make_wgm_group_by_from_budget` on Spark, calibrated to ``budget``: the Polars
    path's key release (its own ``*_from_budget``), which runs on the packed Spark space as every constructor
    does: the WGM (:func:`opendp_wgm.make_wgm_from_budget`, the kernel's Spark plan with the Polars map) or the
    optimal partition selection (:func:`opendp_wgm.make_partition_selection`). Refused up front (public
    parameters only): the mechanisms that have no key release on Spark here, and ``noise="opendp"`` (the
    executors draw the lattice sampler)."""
    mechanism = _check_choice("mechanism", mechanism, KEY_MECHANISMS)
    if mechanism not in ("wgm", "partition-selection"):
        why = "pass a Spark key release to make_wgm_group_by(key_release=...) instead"
        msg = f"`mechanism` must be 'wgm' or 'partition-selection' on Spark (found {mechanism!r}): {why}"
        raise ValueError(msg)
    stage_1 = _key_release_from_budget(mechanism, budget, max_contributions, k, noise)  # checks `k` first
    if mechanism == "wgm" and noise != "lattice":
        msg = f"`noise` must be 'lattice' on Spark: the executors draw the WGM's lattice sampler (found {noise!r})"
        raise ValueError(msg)
    return stage_1


# --------------------------------------------------------------------------------------------------------------
# stage 2: Spark's exact aggregates, OpenDP's noise


def _noise(aggregates: _Aggregates, scale: float) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """The noisy release of the exact aggregates (:func:`bounded_aggregates`' array): OpenDP's integer Gaussian
    at the scale OpenDP's plan gives each noisy quantity (its summary: the count, each sum, a mean's sum and
    length), the sums and means rescaled from their grids to the data's units."""
    summary = aggregates.summary(scale)
    if set(summary["distribution"]) != {"Integer Gaussian"}:  # pragma: no cover - a guard on OpenDP's plan
        raise AssertionError(f"OpenDP's plan draws {set(summary['distribution'])}, not the integer Gaussian")
    scales = {(row["column"], row["aggregate"]): row["scale"] for row in summary.iter_rows(named=True)}
    domain, metric = dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l2_distance(T=dp.i64)

    @functools.cache
    def sampler(noise_scale: float) -> dp.Measurement:
        return dp.m.make_gaussian(domain, metric, noise_scale)

    def noisy(exact: np.ndarray, column: str, aggregate: str) -> np.ndarray:
        return np.asarray(sampler(scales[column, aggregate])(exact.tolist()), dtype=np.int64)

    def release(totals: np.ndarray) -> dict[str, np.ndarray]:
        columns = {COUNT: noisy(totals[0], COUNT, "Frame Length")}
        for row, statistic in enumerate(aggregates.statistics, start=1):
            unit = 2.0**-statistic.bits
            total = noisy(totals[row], statistic.name, "Sum").astype(np.float64)
            if statistic.kind == "mean":  # OpenDP's mean: the noisy sum over a noisy count of its own
                with np.errstate(divide="ignore", invalid="ignore"):
                    total = total / noisy(totals[0], statistic.name, "Length")
            columns[statistic.name] = total * unit
        return columns

    return release


def _stage_2(
    space: SparkUserItemsDescriptor, aggregates: _Aggregates, release: Callable[[np.ndarray], dict[str, np.ndarray]],
    measure: dp.Measure,
) -> Callable[[dp.Domain, dp.Metric, pl.Series], Stage2Release]:
    values = [GridValue(s.internal, s.lower, s.upper, s.bits) for s in aggregates.statistics]

    def stage_2(domain: dp.Domain, metric: dp.Metric, candidates: pl.Series) -> Stage2Release:
        def function(frame: Any) -> pl.DataFrame:
            totals = bounded_aggregates(
                frame, space, candidates, max_contributions=aggregates.max_contributions,
                max_rows_per_key=aggregates.max_rows_per_key, values=values,
            )
            schema = {COUNT: pl.Int64, **{s.name: pl.Float64 for s in aggregates.statistics}}
            released = pl.DataFrame(release(totals), schema=schema).insert_column(0, candidates.alias(space.item))
            if not space.keys:
                return released
            # a composite key's columns, read back in the frame's dtypes (its schema), for the combined release
            return released.with_columns(unpack_keys(candidates, key_dtypes(frame, space)).alias(_KEYS))

        return Stage2Release(measure, function)

    return stage_2


def make_spark_group_by(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    key_release: Stage1,
    request: _GroupByRequest,
    item: str | Sequence[str] | None,
) -> dp.Measurement:
    """:func:`opendp_wgm.make_wgm_group_by` on a Spark space (its stage-2 parameters in ``request``; ``item`` must
    be None: the space names the key columns). ``key_release`` is built on the packed Spark space (the user column
    and one key column: a composite key's packed string), e.g. a Spark WGM; the release is the Polars engine's
    frame. Called by :func:`~opendp_wgm.measurements.group_by.make_wgm_group_by` after its checks of the features
    and of ``key_release``."""
    space = _spark_space(input_domain, input_metric, item)
    checked = request.setup(space.keys or (space.item,))
    aggregates = checked.aggregates
    if space.user in aggregates.values:
        msg = f"`sums`/`means` must not name the user column (found {space.user!r})"
        raise ValueError(msg)
    # the values enter the plan under their internal names (a user column may share a key's name)
    renamed = [s.internal for s in aggregates.statistics]
    sources = [s.column for s in aggregates.statistics]

    def prepare(frame: Any) -> Any:  # before stage 1 draws any noise: the schema's checks
        out = pack_keys(check_group_by_frame(frame, space, aggregates.values), space, aggregates.values)
        values = (out[c].alias(r) for c, r in zip(sources, renamed, strict=True))
        return out.select(space.user, space.item, *space.keys, *values)

    def combine(released_keys: pl.DataFrame, statistics: pl.DataFrame) -> pl.DataFrame:
        joined = released_keys.join(statistics, on=space.item, how="left", maintain_order="left")
        if not space.keys:
            return joined
        return joined.with_columns(pl.col(_KEYS).alias(space.item)).drop(_KEYS).unnest(space.item)

    domain, metric = _packed_space(space)
    stage_2 = _stage_2(space, aggregates, _noise(aggregates, checked.scale), checked.measure)
    return checked.compose(
        input_domain, input_metric, key_release=key_release, stage_2=stage_2,
        preparation=Preparation(domain, metric, prepare, space.item), combine=combine,
    )
