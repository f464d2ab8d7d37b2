r"""The WGM on Spark DataFrames: the same mechanism, distributed, with the same privacy maps.

Install with ``pip install "opendp-wgm[spark]"`` (pyspark 3.5 with pandas and pyarrow; Java 17). The
measurements here take a ``pyspark.sql.DataFrame`` with a user column and an item column and release a
Polars ``DataFrame`` of items, exactly like :func:`opendp_wgm.make_wgm` does on Polars:

1. rows with a null user or item are dropped and duplicate (user, item) rows removed (``distinct``);
2. each user keeps the at most Δ0 items of smallest key ``xxhash64(s1, s2, user, item)`` under a secret
   128-bit seed drawn from the OS for every release (one ``collect_set`` by user; only a set larger than Δ0 is
   sorted, by (key, item), so exactly min(t, Δ0) items); the kept subset is a function of that user's rows and
   the seed;
3. a user keeping ``t`` items gives each the lattice weight :func:`opendp_wgm.privacy.threshold.lattice_weights`
   ``(Δ0)[t - 1]`` :math:`= \lfloor 2^{20}/\sqrt t\rfloor` (integers, exact), summed per item (``groupBy``);
4. in the executors (``mapInArrow``), every item's integer sum gets discrete Gaussian noise
   :math:`\mathcal N_{\mathbb Z}(0, (\sigma 2^{20})^2)` from :func:`opendp_wgm.samplers.sample_discrete_gaussian`
   (the package's exact sampler; each call keys a fresh AES-CTR generator from the executor's OS entropy), and
   only the items whose noisy sum exceeds :math:`\lfloor T 2^{20}\rfloor` leave the executors.

Only the released items are collected to the driver. Every number the privacy argument uses is the one of the
Polars path (``docs/privacy.md``): the measurement's privacy map *is* the map of the equivalent
:func:`opendp_wgm.make_wgm`, which is built first (so parameters are validated by the same code) and whose
``map`` this measurement calls. See ``docs/engines.md``.

The executors import this package (step 4 is the Polars kernel's ``noisy_above_threshold`` and its sampler,
:mod:`opendp_wgm.samplers`): on a cluster, install it on every executor (or ship it with
``SparkContext.addPyFile``).
"""

from __future__ import annotations

import functools
import secrets
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import opendp.prelude as dp
import polars as pl

from opendp_wgm._partial import _to_then
from opendp_wgm._spaces import _assert_features, _Space, _user_of_metric
from opendp_wgm._validation import _check_columns, _check_one_item
from opendp_wgm.domains import user_items_space
from opendp_wgm.engines.polars import noisy_above_threshold, weights_frame
from opendp_wgm.measurements.dp_sips import ROUND, noisy_dense_branch
from opendp_wgm.measurements.dp_sips import dp_sips_arguments as _dp_sips_arguments
from opendp_wgm.measurements.dp_sips import make_dp_sips as _make_polars_dp_sips
from opendp_wgm.measurements.hitting_set import make_user_peeling
from opendp_wgm.measurements.hitting_set import peel as _peel
from opendp_wgm.measurements.top_k import WGM_TOP_K_SAMPLER as _WGM_TOP_K_SAMPLER
from opendp_wgm.measurements.top_k import check_method as _check_method
from opendp_wgm.measurements.top_k import make_peeling_top_k
from opendp_wgm.measurements.top_k import top_k_of_counts as _top_k_of_counts
from opendp_wgm.measurements.two_stage import Peeling, Preparation
from opendp_wgm.measurements.two_stage import make_dp_sips_then_peeling as _make_dp_sips_then_peeling
from opendp_wgm.measurements.two_stage import make_wgm_then_peeling as _make_wgm_then_peeling
from opendp_wgm.measurements.two_stage import two_stage_arguments as _two_stage_arguments
from opendp_wgm.measurements.wgm import make_wgm as _make_polars_wgm
from opendp_wgm.measurements.wgm import wgm_arguments as _wgm_arguments
from opendp_wgm.privacy.calibrate import (
    Stage1Mechanism,
    calibrate_dp_sips,
    calibrate_wgm,
    calibrate_wgm_hitting_set,
    calibrate_wgm_top_k,
)
from opendp_wgm.privacy.peeling import TOP_K, USER_PEELING, Accounting
from opendp_wgm.privacy.threshold import lattice_weights

if TYPE_CHECKING:  # pragma: no cover - typing only
    import numpy as np
    import pyarrow as pa
    from numpy.typing import NDArray
    from pyspark.sql import DataFrame, Row

__all__ = [
    "SparkUserItemsDescriptor",
    "make_dp_sips",
    "make_dp_sips_from_budget",
    "make_wgm",
    "make_wgm_from_budget",
    "make_wgm_hitting_set",
    "make_wgm_hitting_set_from_budget",
    "make_wgm_top_k",
    "make_wgm_top_k_from_budget",
    "spark_user_items_space",
    "then_dp_sips",
    "then_dp_sips_from_budget",
    "then_wgm",
    "then_wgm_from_budget",
    "then_wgm_hitting_set",
    "then_wgm_hitting_set_from_budget",
    "then_wgm_top_k",
    "then_wgm_top_k_from_budget",
]

#: What to install when pyspark (or what its Arrow UDFs need) is missing.
INSTALL_HINT = 'pip install "opendp-wgm[spark]"'

#: Name of the noisy lattice sum inside the Spark plan (int64, units of 2^-LATTICE_BITS).
_NOISY_LAT = "noisy_lat"


def _pyspark() -> Any:
    """Import pyspark (and the pandas/pyarrow its Arrow UDFs need), or say which extra to install."""
    try:
        import pyspark.sql as sql
        import pyspark.sql.functions as functions  # noqa: F401 - imported for its side effect on `sql`
        import pyspark.sql.types as types  # noqa: F401
        import pyspark.sql.window as window  # noqa: F401
    except ImportError as err:
        msg = f"opendp_wgm.spark needs pyspark (>= 3.5, < 3.6): {INSTALL_HINT}"
        raise ModuleNotFoundError(msg) from err
    for module in ("pandas", "pyarrow"):
        try:
            __import__(module)
        except ImportError as err:
            msg = f"opendp_wgm.spark needs {module} for Spark's Arrow UDFs: {INSTALL_HINT}"
            raise ModuleNotFoundError(msg) from err
    return sql


# --------------------------------------------------------------------------------------------------------------
# input space


@dataclass(frozen=True)
class SparkUserItemsDescriptor:
    """What a Spark user-items domain promises: a ``pyspark.sql.DataFrame`` with these two columns.

    Attributes
    ----------
    user, item
        Column names of the user identifier (the privacy unit) and of the item.
    """

    user: str = "user"
    item: str = "item"

    def __post_init__(self) -> None:
        _check_one_item(self.item, "on the Spark engine (composite keys are Polars-only)")
        _check_columns(self.user, self.item)  # the checks (and messages) of UserItemsDescriptor


def spark_user_items_space(user: str = "user", item: str = "item") -> tuple[dp.Domain, dp.Metric]:
    r"""The input space of raw (user, item) rows in a Spark DataFrame, with user-level add/remove neighbours.

    Parameters
    ----------
    user
        Name of the column identifying the privacy unit.
    item
        Name of the item column (string, integer, boolean, decimal, date, timestamp or binary).

    Returns
    -------
    tuple[opendp.mod.Domain, opendp.mod.Metric]
        A domain whose members are ``pyspark.sql.DataFrame`` objects with both columns, and
        ``dp.symmetric_id_distance(pl.col(user))``: the distance between two frames is the number of users
        whose rows differ (added or removed), as for :func:`opendp_wgm.user_items_space`.

    Raises
    ------
    ModuleNotFoundError
        If pyspark is not installed (the message names the extra to install).
    """
    sql = _pyspark()
    _assert_features()  # a user_domain: the caller opts in to trusting this plugin
    descriptor = SparkUserItemsDescriptor(user=user, item=item)

    def member(frame: object) -> bool:
        return isinstance(frame, sql.DataFrame) and {user, item} <= set(frame.columns)

    name = f"SparkUserItemsDomain(user={user!r}, item={item!r})"
    return dp.user_domain(name, member, descriptor=descriptor), dp.symmetric_id_distance(pl.col(user))


def _resolve_spark_space(input_domain: dp.Domain, input_metric: dp.Metric) -> SparkUserItemsDescriptor:
    descriptor = getattr(input_domain, "descriptor", None)
    if not isinstance(descriptor, SparkUserItemsDescriptor):
        msg = (
            "`input_domain` must come from opendp_wgm.spark.spark_user_items_space() (for Polars frames use "
            f"opendp_wgm.make_wgm) (found {input_domain})"
        )
        raise ValueError(msg)
    user = _user_of_metric(input_metric)
    if user != descriptor.user:
        msg = f"`input_metric` identifies users by {user!r} but `input_domain` by {descriptor.user!r}"
        raise ValueError(msg)
    return descriptor


# --------------------------------------------------------------------------------------------------------------
# checks on the data (schema and session only: never on values, so errors are data-independent)


def _type_names(types: Any) -> dict[type, str]:
    return {
        types.StringType: "string",
        types.ByteType: "tinyint",
        types.ShortType: "smallint",
        types.IntegerType: "int",
        types.LongType: "bigint",
        types.BooleanType: "boolean",
        types.DecimalType: "decimal",
        types.DateType: "date",
        types.TimestampType: "timestamp",
        types.TimestampNTZType: "timestamp_ntz",
        types.BinaryType: "binary",
    }


def _polars_dtype(data_type: Any) -> pl.DataType:
    """The Polars dtype of a released item column, from the (supported) Spark type of the input's."""
    from pyspark.sql import types

    if isinstance(data_type, types.DecimalType):
        return pl.Decimal(data_type.precision, data_type.scale)
    mapping = {
        types.StringType: pl.String(),
        types.ByteType: pl.Int8(),
        types.ShortType: pl.Int16(),
        types.IntegerType: pl.Int32(),
        types.LongType: pl.Int64(),
        types.BooleanType: pl.Boolean(),
        types.DateType: pl.Date(),
        types.TimestampType: pl.Datetime("us"),
        types.TimestampNTZType: pl.Datetime("us"),
        types.BinaryType: pl.Binary(),
    }
    return mapping[type(data_type)]


def _check_frame(frame: object, space: SparkUserItemsDescriptor) -> DataFrame:
    """A running Spark DataFrame with both columns, of supported types; raises a clear error otherwise."""
    sql = _pyspark()
    if not isinstance(frame, sql.DataFrame):
        polars = isinstance(frame, (pl.DataFrame, pl.LazyFrame))
        hint = " (for Polars frames use opendp_wgm.make_wgm)" if polars else ""
        found = f"{type(frame).__module__}.{type(frame).__name__}"
        msg = f"`data` must be a pyspark.sql.DataFrame (found {found}){hint}"
        raise TypeError(msg)
    session = frame.sparkSession
    if session.sparkContext._jsc is None:  # SparkContext.stop() clears it
        msg = (
            "the Spark session of this DataFrame is not running (it was stopped): start one with "
            "SparkSession.builder.getOrCreate() and build the DataFrame again"
        )
        raise RuntimeError(msg)
    schema = {field.name: field.dataType for field in frame.schema.fields}
    missing = [c for c in (space.user, space.item) if c not in schema]
    if missing:
        msg = f"column(s) {missing} not found in the data (columns: {list(schema)})"
        raise ValueError(msg)
    names = _type_names(sql.types)
    for column in (space.user, space.item):
        if type(schema[column]) not in names:
            allowed = ", ".join(sorted(set(names.values())))
            msg = (
                f"column {column!r} has Spark type {schema[column].simpleString()}, which is not supported "
                f"(supported: {allowed}; floating-point and nested types are not)"
            )
            raise TypeError(msg)
    return frame


# --------------------------------------------------------------------------------------------------------------
# the distributed pipeline


def _fresh_name(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name = "_" + name
    return name


def _kept_items(frame: DataFrame, space: SparkUserItemsDescriptor, max_contributions: int) -> tuple[DataFrame, str]:
    """Steps 1–2 as one aggregation by user: a lazy plan of (user, ``kept``), ``kept`` the array of the user's
    min(t, Δ0) kept distinct items, and the name of that column.

    ``collect_set`` gathers each user's distinct non-null items in the one shuffle by user (partial sets are
    merged map-side first); a user with at most Δ0 of them keeps them all; a larger set is sorted by
    (``xxhash64(s1, s2, user, item)``, item) under a secret 128-bit seed fresh from the OS and its first Δ0 kept
    (so exactly Δ0, whatever the hash collisions). No window and no sort by key over all rows: beyond what the
    aggregation itself does (Spark's object hash aggregate sorts by user once a task holds many users), only heavy
    users' arrays are sorted, each on its own.
    """
    sql = _pyspark()
    functions = sql.functions
    user, item = space.user, space.item
    kept, key, value = (_fresh_name(f"__wgm_{n}", {user, item}) for n in ("kept", "key", "value"))
    # 128 secret bits from the OS, fed to xxhash64 before the row's values (Spark's hash chains its inputs)
    seeds = [functions.lit(secrets.randbits(64) - 2**63).cast("bigint") for _ in range(2)]
    items = functions.col(kept)

    def keyed(x: Any) -> Any:
        return functions.struct(functions.xxhash64(*seeds, functions.col(user), x).alias(key), x.alias(value))

    sampled = functions.slice(
        functions.transform(functions.array_sort(functions.transform(items, keyed)), lambda pair: pair[value]),
        1,
        max_contributions,
    )
    sets = (
        frame.select(user, item)
        .where(functions.col(user).isNotNull() & functions.col(item).isNotNull())
        .groupBy(user)
        .agg(functions.collect_set(item).alias(kept))
    )
    bounded = functions.when(functions.size(items) <= max_contributions, items).otherwise(sampled)
    return sets.select(user, bounded.alias(kept)), kept


def bound_plan(frame: DataFrame, space: SparkUserItemsDescriptor, max_contributions: int) -> DataFrame:
    """Steps 1–2: distinct (user, item) rows, at most Δ0 per user, as a lazy Spark plan.

    The kernel's bound step (``opendp_wgm.engines.polars.bound_plan``) in Spark: nulls dropped, duplicates
    removed, then each user keeps its distinct items of smallest key ``xxhash64(s1, s2, user, item)`` (ties
    broken by the item, so exactly min(t, Δ0) rows whatever the hash collisions), by one aggregation by user
    (:func:`_kept_items`). The seed is fresh from the OS on every call; a user's kept rows are a function of that
    user's rows and the seed only (``docs/privacy.md`` §1).
    """
    functions = _pyspark().functions
    sets, kept = _kept_items(frame, space, max_contributions)
    return sets.select(space.user, functions.explode(kept).alias(space.item))


def lattice_histogram_plan(frame: DataFrame, space: SparkUserItemsDescriptor, max_contributions: int) -> DataFrame:
    """Steps 1–3: a lazy Spark plan of (item, ``weight_lat``) with ``weight_lat`` the Int64 lattice sum.

    The kernel's histogram step (``opendp_wgm.engines.polars.lattice_histogram_plan`` on the bounded lists) in Spark,
    with the same integer weights ``lattice_weights(Δ0)``: a user keeping ``t`` items (the size of its kept array,
    :func:`_kept_items`) adds ``w_lat(t)`` to each; the exploded rows are summed by item (a partial sum map-side,
    then one shuffle of per-item sums, as a bare ``groupBy(item).count()`` does).
    """
    functions = _pyspark().functions
    item = space.item
    weight = _fresh_name("__wgm_weight", {space.user, item})
    table = functions.array(*[functions.lit(int(w)).cast("bigint") for w in lattice_weights(max_contributions)])
    sets, kept = _kept_items(frame, space, max_contributions)
    weights = functions.element_at(table, functions.size(kept)).alias(weight)
    return (
        sets.select(functions.explode(kept).alias(item), weights)
        .groupBy(item)
        .agg(functions.sum(weight).cast("bigint").alias("weight_lat"))
    )


def _noise_and_threshold(
    item: str, scale: float, threshold: float
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Step 4, run in the executors by ``mapInArrow``: noise every sum, keep those above the threshold, with the
    Polars kernel's code (``opendp_wgm.engines.polars.noisy_above_threshold``, which the executors import)."""

    def apply(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            weights = batch.column(1).to_numpy(zero_copy_only=False)
            # noisy weight > T, in exact integers; a fresh AES-CTR generator keyed from this executor's OS
            # entropy on every call
            noisy, keep = noisy_above_threshold(weights, scale=scale, threshold=threshold)
            if keep.any():
                items = batch.column(0).filter(pa.array(keep))
                noisy_lat = pa.array(noisy[keep], type=pa.int64())
                yield pa.RecordBatch.from_arrays([items, noisy_lat], names=[item, _NOISY_LAT])

    return apply


def _item_schema(item: str, item_type: Any, column: str, column_type: Any) -> Any:
    """The Spark schema of a two-column frame: ``item`` (the input's type), then ``column``; neither nullable.
    The released rows here, the candidates' positions and :mod:`opendp_wgm.tumult`'s outputs have it."""
    from pyspark.sql import types

    return types.StructType([types.StructField(item, item_type, False), types.StructField(column, column_type, False)])


def release_above_threshold(
    histogram: DataFrame, item: str, item_type: Any, *, scale: float, threshold: float
) -> list[Row]:
    """Noise and threshold in the executors; collect only the released (item, noisy_lat) rows."""
    sql = _pyspark()
    schema = _item_schema(item, item_type, _NOISY_LAT, sql.types.LongType())
    with warnings.catch_warnings():  # pyspark builds mapInArrow on a pandas_udf and warns about its own call
        warnings.filterwarnings("ignore", message="In Python 3.6\\+ and Spark 3.0\\+", category=UserWarning)
        released = histogram.mapInArrow(_noise_and_threshold(item, scale, threshold), schema)
    rows: list[Row] = released.collect()
    return rows


def _value(value: Any) -> Any:
    """A collected Spark value as Polars takes it (Spark returns ``binary`` as ``bytearray``)."""
    return bytes(value) if isinstance(value, bytearray) else value


def _to_polars(rows: list[Row], item: str, item_dtype: pl.DataType) -> pl.DataFrame:
    """The release as the Polars engine returns it: item (input dtype) and ``noisy_weight``, sorted by item."""
    items = pl.Series(item, [_value(r[0]) for r in rows], dtype=item_dtype)
    return weights_frame(items, pl.Series(_NOISY_LAT, [r[1] for r in rows], dtype=pl.Int64))


def _spark_wgm_release(
    frame: DataFrame, space: SparkUserItemsDescriptor, max_contributions: int, scale: float, threshold: float
) -> pl.DataFrame:
    """Steps 1–4 on a checked frame: the release as a Polars frame (item, ``noisy_weight``)."""
    item_type = frame.schema[space.item].dataType
    histogram = lattice_histogram_plan(frame, space, max_contributions)
    rows = release_above_threshold(histogram, space.item, item_type, scale=scale, threshold=threshold)
    return _to_polars(rows, space.item, _polars_dtype(item_type))


def _spark_wgm_function(
    space: SparkUserItemsDescriptor, max_contributions: int, scale: float, threshold: float
) -> Callable[[DataFrame], pl.DataFrame]:
    def function(frame: DataFrame) -> pl.DataFrame:
        return _spark_wgm_release(_check_frame(frame, space), space, max_contributions, scale, threshold)

    return function


#: The adaptive schedule of a DP-SIPS release: (σ_s, the dense branch's σ_i, its T_i), or None (fixed).
_Adaptive = tuple[float, tuple[float, ...], tuple[float, ...]] | None


def _spark_user_bins(frame: DataFrame, space: SparkUserItemsDescriptor, keys: DataFrame) -> NDArray[np.int64]:
    """The adaptive schedule's two-bin count on Spark (the Polars ``dp_sips._user_bins``): the users still holding
    an item not in ``keys`` (round 1's release), boosted (round 1 released one of their items) then the others.
    Each user is in at most one bin (ℓ2 sensitivity 1); only the two counts reach the driver."""
    import numpy as np

    sql = _pyspark()
    functions = sql.functions
    user, item = space.user, space.item
    released, held, hit = (_fresh_name(f"__wgm_{n}", {user, item}) for n in ("released", "held", "hit"))
    marked = keys.select(item).withColumn(released, functions.lit(1))
    per_user = (
        frame.select(user, item)
        .where(functions.col(user).isNotNull() & functions.col(item).isNotNull())
        .distinct()
        .join(functions.broadcast(marked), on=item, how="left")
        .groupBy(user)
        .agg(functions.count(functions.lit(1)).alias(held), functions.count(released).alias(hit))
        .where(functions.col(held) > functions.col(hit))  # still holds an unreleased item
    )
    row = per_user.agg(
        functions.coalesce(functions.sum((functions.col(hit) > 0).cast("bigint")), functions.lit(0)),
        functions.coalesce(functions.sum((functions.col(hit) == 0).cast("bigint")), functions.lit(0)),
    ).collect()[0]
    return np.array([row[0], row[1]], dtype=np.int64)


def _spark_dp_sips_release(
    frame: DataFrame,
    space: SparkUserItemsDescriptor,
    max_contributions: int,
    scales: Sequence[float],
    thresholds: Sequence[float],
    adaptive: _Adaptive = None,
) -> pl.DataFrame:
    """DP-SIPS's rounds on a checked frame: round i runs steps 1–4 (a fresh seed in ``bound_plan``) on the rows
    whose item no earlier round released (an anti-join with a broadcast frame of the released keys, built on
    the driver from the collected rows); the release as the Polars engine returns it (item, ``noisy_weight``,
    ``round``), sorted by item. With the ``adaptive`` schedule, after round 1 the two-bin user count
    (:func:`_spark_user_bins`) is noised on the driver at σ_s with the WGM's sampler and, when
    :func:`opendp_wgm.measurements.dp_sips.dense_branch` holds, rounds 2.. run the dense branch's (σ_i, T_i)."""
    sql = _pyspark()
    functions, types = sql.functions, sql.types
    item = space.item
    item_type = frame.schema[item].dataType
    item_dtype = _polars_dtype(item_type)
    keys_schema = types.StructType([types.StructField(item, item_type, False)])
    rounds: list[pl.DataFrame] = []
    released_keys: list[tuple[Any]] = []
    remaining = frame

    def keys() -> DataFrame:  # the items released so far: a small frame, broadcast
        return frame.sparkSession.createDataFrame(released_keys, keys_schema)

    plan = list(zip(scales, thresholds, strict=True))
    number = 0
    while number < len(plan):
        scale, threshold = plan[number]
        number += 1
        histogram = lattice_histogram_plan(remaining, space, max_contributions)
        rows = release_above_threshold(histogram, item, item_type, scale=scale, threshold=threshold)
        released = _to_polars(rows, item, item_dtype)
        rounds.append(released.with_columns(pl.lit(number, dtype=pl.Int16).alias(ROUND)))
        released_keys += [(r[0],) for r in rows]
        if number == 1 and adaptive is not None:  # the branch: round 1's release and one noisy count
            statistic_scale, branch_scales, branch_thresholds = adaptive
            if noisy_dense_branch(_spark_user_bins(frame, space, keys()), statistic_scale):
                plan = plan[:1] + list(zip(branch_scales, branch_thresholds, strict=True))
        if number < len(plan) and released_keys:  # drop every item released so far
            remaining = frame.join(functions.broadcast(keys()), on=item, how="left_anti")
    return pl.concat(rounds).sort(item)


def _spark_dp_sips_function(
    space: SparkUserItemsDescriptor,
    max_contributions: int,
    scales: Sequence[float],
    thresholds: Sequence[float],
    adaptive: _Adaptive = None,
) -> Callable[[DataFrame], pl.DataFrame]:
    def function(frame: DataFrame) -> pl.DataFrame:
        checked = _check_frame(frame, space)
        return _spark_dp_sips_release(checked, space, max_contributions, scales, thresholds, adaptive)

    return function


# --------------------------------------------------------------------------------------------------------------
# constructors


def _twin_measurement(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    make_polars: Callable[..., dp.Measurement],
    release: Callable[[SparkUserItemsDescriptor], Callable[[DataFrame], pl.DataFrame]],
    parameters: dict[str, Any],
) -> dp.Measurement:
    """A Spark measurement whose Polars twin, ``make_polars(*user_items_space(user, item), **parameters)``, is
    built first: it validates the parameters (with the same messages) and owns the output measure and the
    privacy map, so both engines have one map. ``release(space)`` is the Spark release function."""
    _assert_features()
    _pyspark()
    space = _resolve_spark_space(input_domain, input_metric)
    reference = make_polars(*user_items_space(space.user, space.item), **parameters)
    function = release(space)
    return dp.m.make_user_measurement(input_domain, input_metric, reference.output_measure, function, reference.map)


def make_wgm(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    scale: float,
    threshold: float,
    output_measure: dp.Measure | None = None,
    epsilon: float | None = None,
) -> dp.Measurement:
    r"""The WGM on a Spark DataFrame: release the items whose weighted, noised user count exceeds a threshold.

    Parameters
    ----------
    input_domain, input_metric
        From :func:`spark_user_items_space`.
    max_contributions
        Δ0 ≥ 1: each user keeps a uniform random subset of at most this many distinct items.
    scale
        σ > 0, the standard deviation of the Gaussian noise on each item's weight.
    threshold
        T: an item is released when its noisy weight exceeds it.
    output_measure
        ``dp.approximate(dp.zero_concentrated_divergence())`` (default) or
        ``dp.approximate(dp.max_divergence())`` (then ``epsilon`` is required), as in
        :func:`opendp_wgm.make_wgm`.
    epsilon
        Only with the (ε, δ) measure: the ε at which the privacy profile is reported for one user.

    Returns
    -------
    opendp.mod.Measurement
        Maps a ``pyspark.sql.DataFrame`` to a Polars ``DataFrame`` with the item column (the Polars type of the
        Spark column) and ``noisy_weight`` (Float64), sorted by item: the same release as the Polars engine's.

    Raises
    ------
    ModuleNotFoundError
        If pyspark (or pandas/pyarrow) is not installed: ``pip install "opendp-wgm[spark]"``.
    ValueError, TypeError
        On invalid parameters (the messages of :func:`opendp_wgm.make_wgm`); when called, on a frame that is
        not a Spark DataFrame, lacks a column, has an unsupported column type, or whose session is stopped.

    Notes
    -----
    Neighbouring datasets differ by all rows of ``d_in`` users (add or remove). The privacy map is that of
    :func:`opendp_wgm.make_wgm` with the same parameters (``docs/privacy.md`` §3): the distributed plan computes
    the same function of the data and the seed, and draws the same noise distribution. For one user,

    .. math::
        \rho = \frac{1}{2\sigma^2},\quad
        \delta = \max_{t=1..\Delta_0} 1 - (1 - q(w(t)))^t,\quad
        q(w) = \bar\Phi\big((\lfloor T 2^{20}\rfloor 2^{-20} - w)/\sigma\big)

    where :math:`w(t) = \lfloor 2^{20}/\sqrt t\rfloor 2^{-20}`.

    Required features: ``contrib``, ``honest-but-curious``.
    """
    parameters = dict(
        max_contributions=max_contributions,
        scale=scale,
        threshold=threshold,
        output_measure=output_measure,
        epsilon=epsilon,
    )
    return _twin_measurement(
        input_domain,
        input_metric,
        _make_polars_wgm,
        lambda space: _spark_wgm_function(space, int(max_contributions), float(scale), float(threshold)),
        parameters,
    )


def make_wgm_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    noise_delta_fraction: float = 0.5,
) -> dp.Measurement:
    r"""The Spark WGM calibrated to a per-user budget: (ε, δ)-DP or approximate (ρ, δ)-zCDP.

    The calibration is :func:`opendp_wgm.calibrate_wgm` (as in :func:`opendp_wgm.make_wgm_from_budget`), so
    the Spark and Polars measurements built from one budget have the same σ, T and map.
    """
    _assert_features()
    calibration = calibrate_wgm(
        max_contributions=max_contributions,
        delta=delta,
        epsilon=epsilon,
        rho=rho,
        noise_delta_fraction=noise_delta_fraction,
    )
    return make_wgm(input_domain, input_metric, **_wgm_arguments(calibration))


def make_dp_sips(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    scales: Sequence[float],
    thresholds: Sequence[float],
    output_measure: dp.Measure | None = None,
    epsilon: float | None = None,
    statistic_scale: float | None = None,
    branch_scales: Sequence[float] | None = None,
    branch_thresholds: Sequence[float] | None = None,
) -> dp.Measurement:
    r"""DP-SIPS on a Spark DataFrame: R rounds of the WGM, each on the items not yet released.

    The Spark twin of :func:`opendp_wgm.make_dp_sips`, with the same parameters (no ``noise``: the executors
    use the package's exact lattice sampler; no ``passes``/``engine``). Round i keeps the rows whose item no
    earlier round released (an anti-join with a broadcast frame of the released keys), bounds every user again
    to Δ0 of them under a fresh seed, sums the lattice weights and releases, in the executors, the items whose
    noisy weight (scale σ_i) exceeds T_i: steps 1–4 of :func:`make_wgm`. Only the released items reach the
    driver. With the adaptive schedule, Spark counts after round 1 the users still holding an unreleased item,
    boosted (round 1 released one of their items) or not, each user in one bin; only the two counts reach the
    driver, which noises them at ``statistic_scale`` with the WGM's exact sampler (never released) and runs
    rounds 2.. at ``branch_scales``/``branch_thresholds`` when :func:`opendp_wgm.measurements.dp_sips.dense_branch`
    holds, as the Polars engine does.

    Parameters
    ----------
    input_domain, input_metric
        From :func:`spark_user_items_space`.
    max_contributions, scales, thresholds, output_measure, epsilon
        As for :func:`opendp_wgm.make_dp_sips` (the Polars twin is built first and checks them, with its
        messages).
    statistic_scale, branch_scales, branch_thresholds
        The adaptive schedule (all three, or none), as for :func:`opendp_wgm.make_dp_sips`;
        :func:`make_dp_sips_from_budget` calibrates them by default.

    Returns
    -------
    opendp.mod.Measurement
        Maps a ``pyspark.sql.DataFrame`` to a Polars ``DataFrame`` with the item column (the Polars type of the
        Spark column), ``noisy_weight`` (Float64) and ``round`` (Int16, 1-based), sorted by item: the release
        of the Polars engine.

    Notes
    -----
    Neighbouring datasets differ by all rows of ``d_in`` users (add or remove). The privacy map is that of
    :func:`opendp_wgm.make_dp_sips` with the same parameters (:func:`opendp_wgm.privacy.sips.dp_sips_privacy_loss`,
    ``docs/privacy.md``): each round computes the same function of the data, the earlier releases and a fresh
    seed as the Polars engine's, and draws the same noise distribution.

    Required features: ``contrib``, ``honest-but-curious``.
    """
    parameters = dict(
        max_contributions=max_contributions,
        scales=scales,
        thresholds=thresholds,
        output_measure=output_measure,
        epsilon=epsilon,
        statistic_scale=statistic_scale,
        branch_scales=branch_scales,
        branch_thresholds=branch_thresholds,
    )

    def release(space: SparkUserItemsDescriptor) -> Callable[[DataFrame], pl.DataFrame]:
        # runs after the twin has checked the parameters (the adaptive ones: all three, or none)
        per_round = (tuple(float(s) for s in scales), tuple(float(t) for t in thresholds))
        adaptive: _Adaptive = None
        if statistic_scale is not None and branch_scales is not None and branch_thresholds is not None:
            branch = (tuple(float(s) for s in branch_scales), tuple(float(t) for t in branch_thresholds))
            adaptive = (float(statistic_scale), *branch)
        return _spark_dp_sips_function(space, int(max_contributions), *per_round, adaptive)

    return _twin_measurement(input_domain, input_metric, _make_polars_dp_sips, release, parameters)


def make_dp_sips_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    fractions: Sequence[float] | None = None,
    rounds: int | None = None,
    ratio: float | None = None,
    noise_delta_fraction: float = 0.5,
) -> dp.Measurement:
    r"""The Spark DP-SIPS calibrated to a per-user budget: (ε, δ)-DP or approximate (ρ, δ)-zCDP.

    The calibration is :func:`opendp_wgm.privacy.calibrate.calibrate_dp_sips` (as in
    :func:`opendp_wgm.make_dp_sips_from_budget`, same parameters minus ``noise``, ``item``, ``passes`` and
    ``engine``), so the Spark and Polars measurements built from one budget and schedule have the same σ_i,
    T_i and map. Without a schedule (none of ``fractions``, ``rounds``, ``ratio``) this is the adaptive
    schedule, as on Polars (``docs/dp_sips.md``).
    """
    _assert_features()
    calibration = calibrate_dp_sips(
        max_contributions=max_contributions,
        delta=delta,
        epsilon=epsilon,
        rho=rho,
        fractions=fractions,
        rounds=rounds,
        ratio=ratio,
        noise_delta_fraction=noise_delta_fraction,
        adaptive=None,  # the adaptive schedule unless one is given
    )
    return make_dp_sips(input_domain, input_metric, **_dp_sips_arguments(calibration))


# --------------------------------------------------------------------------------------------------------------
# two-stage mechanisms: the combinators of measurements.two_stage, with stage 1 the Spark WGM or DP-SIPS above
# and stage 2 a Spark peeling whose Polars twin (make_peeling_top_k / make_user_peeling) validates the parameters
# and owns the map; the candidates' exact statistics are computed by Spark, and the selection runs on the driver
# with the Polars engine's code.


def _candidate_pairs(
    frame: DataFrame, space: SparkUserItemsDescriptor, candidates: pl.Series
) -> tuple[DataFrame, str]:
    """Distinct (user, item) rows whose item is a candidate, with the candidate's position (a lazy Spark plan),
    and the name of the position column."""
    sql = _pyspark()
    functions, types = sql.functions, sql.types
    user, item = space.user, space.item
    position = _fresh_name("__wgm_position", {user, item})
    item_type = frame.schema[item].dataType
    keys = frame.sparkSession.createDataFrame(
        [(value, i) for i, value in enumerate(candidates.to_list())],
        _item_schema(item, item_type, position, types.IntegerType()),
    )
    return (
        frame.select(user, item)
        .where(functions.col(user).isNotNull() & functions.col(item).isNotNull())
        .join(functions.broadcast(keys), on=item, how="inner")
        .distinct()
    ), position


def candidate_counts(frame: DataFrame, space: SparkUserItemsDescriptor, candidates: pl.Series) -> NDArray[np.int64]:
    """Exact number of distinct users holding each candidate, in the candidates' order (int64)."""
    import numpy as np

    counts = np.zeros(candidates.len(), dtype=np.int64)
    if candidates.len() == 0:
        return counts
    pairs, position = _candidate_pairs(frame, space, candidates)
    for row in pairs.groupBy(position).count().collect():
        counts[row[0]] = row[1]
    return counts


def _top_k_stage_2(
    frame: DataFrame, space: SparkUserItemsDescriptor, candidates: pl.Series, k: int, scale: float, method: str
) -> pl.DataFrame:
    """Top-k's stage 2: Spark counts the distinct users holding each candidate (unclipped); only the counts reach
    the driver, which selects as the Polars engine does (``top_k._top_k_of_counts``)."""
    counts = candidate_counts(frame, space, candidates)  # no job for an empty list
    return _top_k_of_counts(candidates, counts, k, scale, _WGM_TOP_K_SAMPLER, method, space.item)


def _hitting_set_stage_2(
    frame: DataFrame, space: SparkUserItemsDescriptor, candidates: pl.Series, k: int, scale: float
) -> pl.DataFrame:
    """The hitting set's stage 2: Spark selects the distinct (user, candidate) pairs, which are collected to the
    driver, where the Polars engine's user peeling (``hitting_set._peel``) runs on them unchanged."""
    user_dtype = _polars_dtype(frame.schema[space.user].dataType)
    if candidates.len() == 0:
        rows: list[Row] = []
    else:
        pairs, _ = _candidate_pairs(frame, space, candidates)
        rows = pairs.select(space.user, space.item).collect()
    lf = pl.DataFrame(
        {space.user: [_value(r[0]) for r in rows], space.item: [_value(r[1]) for r in rows]},
        schema={space.user: user_dtype, space.item: candidates.dtype},
    ).lazy()
    return _peel(lf, _Space(space.user, space.item, None, lazyframe_domain=False), candidates, k, scale)


def _spark_peeling(
    make_polars: Callable[..., dp.Measurement],
    stage_2: Callable[[DataFrame, SparkUserItemsDescriptor, pl.Series, int, float], pl.DataFrame],
) -> Callable[..., dp.Measurement]:
    """A known-domain peeling constructor on Spark, ``(domain, metric, *, candidates, k, scale, ...) ->
    Measurement``: the Polars measurement ``make_polars`` (on the same columns) checks the parameters and gives
    the output measure and the map, and ``stage_2`` releases on the checked Spark frame."""

    def make(input_domain: dp.Domain, input_metric: dp.Metric, *, candidates: pl.Series, k: int, scale: float,
             **options: Any) -> dp.Measurement:
        def release(space: SparkUserItemsDescriptor) -> Callable[[DataFrame], pl.DataFrame]:
            return lambda frame: stage_2(frame, space, candidates, k, scale)

        parameters = dict(candidates=candidates, k=k, scale=scale, **options)
        return _twin_measurement(input_domain, input_metric, make_polars, release, parameters)

    return make


def _make_two_stage(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    peeling: Peeling,
    accounting: Accounting,
    parameters: dict[str, Any],
    stage_1: Stage1Mechanism = "wgm",
) -> dp.Measurement:
    """Stage 1, then peeling, on Spark: the Polars engine's combinator (``measurements.two_stage``:
    ``make_wgm_then_peeling``, or ``make_dp_sips_then_peeling`` with ``stage_1="dp-sips"``, whose ``parameters``
    it takes) with the Spark WGM or DP-SIPS as stage 1 (built once) and ``peeling`` as stage 2, on the checked
    Spark frame (checked once)."""
    _assert_features()
    _pyspark()
    space = _resolve_spark_space(input_domain, input_metric)
    preparation = Preparation(input_domain, input_metric, lambda frame: _check_frame(frame, space), space.item)
    then_peeling, make_stage_1 = (
        (_make_dp_sips_then_peeling, make_dp_sips) if stage_1 == "dp-sips" else (_make_wgm_then_peeling, make_wgm)
    )
    return then_peeling(
        input_domain,
        input_metric,
        **parameters,
        noise="lattice",
        item=space.item,
        passes=1,
        engine="auto",
        peeling=peeling,
        accounting=accounting,
        make_stage_1=make_stage_1,
        preparation=preparation,
    )


def _top_k_peeling(method: Any) -> Peeling:
    """Top-k's stage 2 on Spark with the checked selection ``method``: the Polars ``make_peeling_top_k`` checks
    the parameters and owns the map, :func:`_top_k_stage_2` releases."""
    method = _check_method(method)
    stage_2 = functools.partial(_top_k_stage_2, method=method)
    return functools.partial(_spark_peeling(make_peeling_top_k, stage_2), method=method)


#: The hitting set's stage 2 on Spark: the Polars ``make_user_peeling`` checks and owns the map.
_HITTING_SET_PEELING = _spark_peeling(make_user_peeling, _hitting_set_stage_2)


def _make_dp_sips_two_stage(
    input_domain: dp.Domain, input_metric: dp.Metric, peeling: Peeling, accounting: Accounting, **parameters: Any
) -> dp.Measurement:
    """DP-SIPS, then ``peeling``, on Spark from the explicit parameters of the Polars ``make_dp_sips_then_peeling``
    (``k``, ``max_contributions``, ``sips_scales``, ``sips_thresholds``, ``peel_scale``; ``output_measure``,
    ``sips_epsilon``, ``peel_delta`` default to None; the adaptive schedule's ``sips_statistic_scale``,
    ``sips_branch_scales``, ``sips_branch_thresholds`` are optional), which checks them and owns the map."""
    _assert_features()
    parameters = {"output_measure": None, "sips_epsilon": None, "peel_delta": None, **parameters}
    return _make_two_stage(input_domain, input_metric, peeling, accounting, parameters, "dp-sips")


def _make_dp_sips_top_k(
    input_domain: dp.Domain, input_metric: dp.Metric, *, method: str = "auto", **parameters: Any
) -> dp.Measurement:
    """DP-SIPS-then-top-k on Spark (:func:`_make_dp_sips_two_stage`'s parameters and ``method``): what
    ``make_wgm_top_k_from_budget(stage_1="dp-sips")`` builds from its calibration."""
    return _make_dp_sips_two_stage(input_domain, input_metric, _top_k_peeling(method), TOP_K, **parameters)


def _make_dp_sips_hitting_set(input_domain: dp.Domain, input_metric: dp.Metric, **parameters: Any) -> dp.Measurement:
    """DP-SIPS-then-user-peeling on Spark (:func:`_make_dp_sips_two_stage`'s parameters): what
    ``make_wgm_hitting_set_from_budget(stage_1="dp-sips")`` builds from its calibration."""
    return _make_dp_sips_two_stage(input_domain, input_metric, _HITTING_SET_PEELING, USER_PEELING, **parameters)


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
    method: str = "auto",
) -> dp.Measurement:
    r"""Private top-k over an unknown domain on a Spark DataFrame: WGM candidates, then peeling on the driver.

    The Spark twin of :func:`opendp_wgm.measurements.top_k.make_wgm_top_k`, with the same parameters (no
    ``noise``: the executors use the package's exact lattice sampler). Stage 1 is :func:`make_wgm`; Spark then
    counts the distinct users holding each released candidate (unclipped), and only those counts reach the
    driver, where ``k`` items are peeled with the exact sampler of the Polars engine. The privacy map is the
    Polars measurement's (adaptive composition, ``docs/top_k.md``).

    Returns
    -------
    opendp.mod.Measurement
        Maps a ``pyspark.sql.DataFrame`` to a Polars frame: the item column and ``rank`` (UInt32), at most ``k``
        rows in rank order.
    """
    parameters = dict(
        k=k,
        max_contributions=max_contributions,
        wgm_scale=wgm_scale,
        wgm_threshold=wgm_threshold,
        peel_scale=peel_scale,
        output_measure=output_measure,
        wgm_epsilon=wgm_epsilon,
        peel_delta=peel_delta,
    )
    _assert_features()
    return _make_two_stage(input_domain, input_metric, _top_k_peeling(method), TOP_K, parameters)


def make_wgm_top_k_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    k: int,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    split: float = 0.5,
    method: str = "auto",
    stage_1: Stage1Mechanism = "wgm",
    rounds: int | None = None,
    ratio: float | None = None,
) -> dp.Measurement:
    """:func:`make_wgm_top_k` calibrated by :func:`opendp_wgm.calibrate_wgm_top_k` (as on Polars).

    With ``stage_1="dp-sips"`` (``rounds``, ``ratio``: its schedule, both None for the adaptive one) stage 1 is
    :func:`make_dp_sips` at the σ_i, T_i that :func:`opendp_wgm.calibrate_wgm_top_k` gives stage 1's share, as
    in the Polars :func:`opendp_wgm.make_wgm_top_k_from_budget`: the same parameters, checks, release columns and
    map. Stage 2 reads the candidates every round released.
    """
    _assert_features()
    calibration = calibrate_wgm_top_k(
        k=k, max_contributions=max_contributions, delta=delta, epsilon=epsilon, rho=rho, split=split,
        stage_1=stage_1, rounds=rounds, ratio=ratio,
    )  # fmt: skip
    make = _make_dp_sips_top_k if calibration.sips is not None else make_wgm_top_k
    return make(input_domain, input_metric, **_two_stage_arguments(calibration, method=method))


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
) -> dp.Measurement:
    r"""Private k-hitting set over an unknown domain on a Spark DataFrame: WGM candidates, then user peeling.

    The Spark twin of :func:`opendp_wgm.measurements.hitting_set.make_wgm_hitting_set`, same parameters (no
    ``noise``). Stage 1 is :func:`make_wgm`; Spark then selects the distinct (user, candidate) pairs, which are
    collected to the driver, where user peeling runs exactly as in the Polars engine
    (``hitting_set._peel``: each round's counts are the users no earlier pick covers). The privacy map is the
    Polars measurement's.

    Returns
    -------
    opendp.mod.Measurement
        Maps a ``pyspark.sql.DataFrame`` to a Polars frame: the item column and ``rank`` (UInt32), at most ``k``
        rows in selection order.
    """
    parameters = dict(
        k=k,
        max_contributions=max_contributions,
        wgm_scale=wgm_scale,
        wgm_threshold=wgm_threshold,
        peel_scale=peel_scale,
        output_measure=output_measure,
        wgm_epsilon=wgm_epsilon,
        peel_delta=peel_delta,
    )
    _assert_features()
    return _make_two_stage(input_domain, input_metric, _HITTING_SET_PEELING, USER_PEELING, parameters)


def make_wgm_hitting_set_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
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
) -> dp.Measurement:
    """:func:`make_wgm_hitting_set` calibrated by :func:`opendp_wgm.calibrate_wgm_hitting_set` (as on Polars).

    With ``stage_1="dp-sips"`` (``rounds``, ``ratio``: its schedule, both None for the adaptive one) stage 1 is
    :func:`make_dp_sips` at the σ_i, T_i that :func:`opendp_wgm.calibrate_wgm_hitting_set` gives stage 1's
    share, as in the Polars :func:`opendp_wgm.make_wgm_hitting_set_from_budget`: the same parameters, checks,
    release columns and map.
    """
    _assert_features()
    calibration = calibrate_wgm_hitting_set(
        k=k,
        max_contributions=max_contributions,
        delta=delta,
        epsilon=epsilon,
        rho=rho,
        split=split,
        noise_delta_fraction=noise_delta_fraction,
        stage_1=stage_1,
        rounds=rounds,
        ratio=ratio,
    )
    make = _make_dp_sips_hitting_set if calibration.sips is not None else make_wgm_hitting_set
    return make(input_domain, input_metric, **_two_stage_arguments(calibration))


then_wgm = _to_then(make_wgm)
then_wgm_from_budget = _to_then(make_wgm_from_budget)
then_wgm_top_k = _to_then(make_wgm_top_k)
then_wgm_top_k_from_budget = _to_then(make_wgm_top_k_from_budget)
then_wgm_hitting_set = _to_then(make_wgm_hitting_set)
then_wgm_hitting_set_from_budget = _to_then(make_wgm_hitting_set_from_budget)
then_dp_sips = _to_then(make_dp_sips)
then_dp_sips_from_budget = _to_then(make_dp_sips_from_budget)
