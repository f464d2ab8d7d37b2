r"""The Spark engine: the WGM's kernel steps as Spark plans, for the constructors of :mod:`opendp_wgm.measurements`.

Install with ``pip install "opendp-wgm[spark]"`` (pyspark 3.5 with pandas and pyarrow; Java 17). There is no
Spark API of its own: :func:`opendp_wgm.make_wgm`, :func:`opendp_wgm.make_dp_sips`, the two-stage mechanisms
and their ``_from_budget`` forms take the input space of :func:`spark_user_items_space` and then release on a
``pyspark.sql.DataFrame`` (the engine is a property of the input; ``docs/engines.md``). This module holds the
steps they run, on a frame with a user column and an item column:

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
   only the items whose noisy sum exceeds :math:`\lfloor T 2^{20}\rfloor` leave the executors;

plus what the other mechanisms read: the optimal partition selection (steps 1–3 at Δ0 = 1, then one exact
Bernoulli draw per item in the executors), the items of a release removed (DP-SIPS's rounds), the adaptive
schedule's two-bin user count, the exact user counts of candidates and their (user, candidate) pairs (stage 2). Only
releases and counts reach the driver. The privacy maps are the measurements' own (``docs/privacy.md``); this
module imports no measurement.

The executors import this package (step 4 is the Polars kernel's ``noisy_above_threshold`` and its sampler,
:mod:`opendp_wgm.samplers`): on a cluster, install it on every executor (or ship it with
``SparkContext.addPyFile``).
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import opendp.prelude as dp
import polars as pl

from opendp_wgm._spaces import _assert_features, _user_of_metric
from opendp_wgm._validation import _check_columns, _check_key_columns, _check_one_item
from opendp_wgm.engines.polars import cast_candidates, noisy_above_threshold, released_by_table, weights_frame
from opendp_wgm.privacy.threshold import LATTICE_BITS, lattice_weights

if TYPE_CHECKING:  # pragma: no cover - typing only
    import numpy as np
    import pyarrow as pa
    from numpy.typing import NDArray
    from pyspark.sql import DataFrame, Row

__all__ = ["SparkUserItemsDescriptor", "spark_user_items_space"]
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
    #: A composite key's columns (two or more), which the mechanisms that support them (keys with statistics)
    #: pack into the one column ``item``; ``()`` for one item column.
    keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_one_item(self.item, "on the Spark engine (composite keys are Polars-only)")
        _check_columns(self.user, self.item)  # the checks (and messages) of UserItemsDescriptor
        if self.keys:  # a composite key: the checks of UserItemsDescriptor on its columns
            _check_key_columns(self.user, self.keys)


def spark_user_items_space(user: str = "user", item: str | Sequence[str] = "item") -> tuple[dp.Domain, dp.Metric]:
    r"""The input space of raw (user, item) rows in a Spark DataFrame, with user-level add/remove neighbours.

    Parameters
    ----------
    user
        Name of the column identifying the privacy unit.
    item
        Name of the item column (string, integer, boolean, decimal, date, timestamp or binary); or a list of two
        or more columns for a composite key (string, integer or boolean columns), which only
        :func:`opendp_wgm.make_wgm_group_by` runs on Spark (the other measurements refuse it).

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
    keys = _check_key_columns(user, item)[1]
    if isinstance(keys, tuple):  # a composite key, packed into one column named after none of the frame's
        descriptor = SparkUserItemsDescriptor(user=user, item=_fresh_name("__wgm_key", {user, *keys}), keys=keys)
    else:
        descriptor = SparkUserItemsDescriptor(user=user, item=keys)
    columns = {user, *(descriptor.keys or (descriptor.item,))}

    def member(frame: object) -> bool:
        return isinstance(frame, sql.DataFrame) and columns <= set(frame.columns)

    name = f"SparkUserItemsDomain(user={user!r}, item={keys!r})"
    return dp.user_domain(name, member, descriptor=descriptor), dp.symmetric_id_distance(pl.col(user))


def _resolve_spark_space(
    input_domain: dp.Domain, input_metric: dp.Metric, *, composite: bool = False
) -> SparkUserItemsDescriptor:
    """The Spark space's descriptor; a composite key only with ``composite`` (the mechanisms that pack it)."""
    descriptor = getattr(input_domain, "descriptor", None)
    if not isinstance(descriptor, SparkUserItemsDescriptor):
        msg = (
            "`input_domain` must come from opendp_wgm.spark.spark_user_items_space() (for Polars frames use "
            f"opendp_wgm.user_items_space()) (found {input_domain})"
        )
        raise ValueError(msg)
    user = _user_of_metric(input_metric)
    if user != descriptor.user:
        msg = f"`input_metric` identifies users by {user!r} but `input_domain` by {descriptor.user!r}"
        raise ValueError(msg)
    if descriptor.keys and not composite:
        where = "on the Spark engine for this mechanism (composite keys on Spark: make_wgm_group_by)"
        _check_one_item(descriptor.keys, where)
    return descriptor


def spark_descriptor(input_domain: dp.Domain, input_metric: dp.Metric) -> SparkUserItemsDescriptor | None:
    """The Spark descriptor of an input space from :func:`spark_user_items_space` (its metric checked), or
    ``None`` for any other domain: how a constructor tells that its input runs on this engine."""
    if not isinstance(getattr(input_domain, "descriptor", None), SparkUserItemsDescriptor):
        return None
    _pyspark()
    return _resolve_spark_space(input_domain, input_metric)


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


def check_frame(frame: object, space: SparkUserItemsDescriptor) -> DataFrame:
    """A running Spark DataFrame with both columns, of supported types; raises a clear error otherwise."""
    sql = _pyspark()
    if not isinstance(frame, sql.DataFrame):
        polars = isinstance(frame, (pl.DataFrame, pl.LazyFrame))
        hint = " (for Polars frames build the measurement on opendp_wgm.user_items_space())" if polars else ""
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


_check_frame = check_frame  # the name the other engine modules import


# --------------------------------------------------------------------------------------------------------------
# the distributed pipeline


def _fresh_name(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name = "_" + name
    return name


def _quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier (backquoted, its backquotes doubled)."""
    return "`" + name.replace("`", "``") + "`"


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
    functions = _pyspark().functions
    user, item = space.user, space.item
    kept = _fresh_name("__wgm_kept", {user, item})
    x = _fresh_name("__wgm_x", {user.lower(), item.lower()})  # a lambda variable shadows columns of any case
    # 128 secret bits from the OS, fed to xxhash64 before the row's values (Spark's hash chains its inputs)
    s1, s2 = (f"CAST({secrets.randbits(64) - 2**63} AS BIGINT)" for _ in range(2))
    items, var = _quoted(kept), _quoted(x)
    # one SQL expression, not a tree of Column calls: each Column call is a round trip to the JVM, and on small
    # inputs building the plan that way cost as much as running it
    bounded = functions.expr(
        f"CASE WHEN size({items}) <= {max_contributions} THEN {items} ELSE slice(transform(array_sort(transform("
        f"{items}, {var} -> named_struct('k', xxhash64({s1}, {s2}, {_quoted(user)}, {var}), 'v', {var}))), "
        f"{var} -> {var}.v), 1, {max_contributions}) END"
    )
    sets = (
        frame.select(user, item)
        .where(functions.col(user).isNotNull() & functions.col(item).isNotNull())
        .groupBy(user)
        .agg(functions.collect_set(item).alias(kept))
    )
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
    table = functions.expr(f"array({', '.join(f'{int(w)}L' for w in lattice_weights(max_contributions))})")
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


def _collect_in_arrow(
    histogram: DataFrame, step: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]], schema: Any
) -> list[Row]:
    """Run ``step`` on the executors (``mapInArrow``: its closure is pickled to them) and collect its rows."""
    with warnings.catch_warnings():  # pyspark builds mapInArrow on a pandas_udf and warns about its own call
        warnings.filterwarnings("ignore", message="In Python 3.6\\+ and Spark 3.0\\+", category=UserWarning)
        released = histogram.mapInArrow(step, schema)
    rows: list[Row] = released.collect()
    return rows


def release_above_threshold(
    histogram: DataFrame, item: str, item_type: Any, *, scale: float, threshold: float
) -> list[Row]:
    """Noise and threshold in the executors; collect only the released (item, noisy_lat) rows."""
    schema = _item_schema(item, item_type, _NOISY_LAT, _pyspark().types.LongType())
    return _collect_in_arrow(histogram, _noise_and_threshold(item, scale, threshold), schema)


def _value(value: Any) -> Any:
    """A collected Spark value as Polars takes it (Spark returns ``binary`` as ``bytearray``)."""
    return bytes(value) if isinstance(value, bytearray) else value


def _released_items(rows: list[Row], item: str, item_type: Any) -> pl.Series:
    """The collected rows' first column as the Polars engine returns an item: its Spark type mapped to Polars."""
    return pl.Series(item, [_value(r[0]) for r in rows], dtype=_polars_dtype(item_type))


def _to_polars(rows: list[Row], item: str, item_type: Any) -> pl.DataFrame:
    """The release as the Polars engine returns it: item (input dtype) and ``noisy_weight``, sorted by item."""
    items = _released_items(rows, item, item_type)
    return weights_frame(items, pl.Series(_NOISY_LAT, [r[1] for r in rows], dtype=pl.Int64))


def wgm_release(
    frame: DataFrame, space: SparkUserItemsDescriptor, max_contributions: int, scale: float, threshold: float
) -> pl.DataFrame:
    """Steps 1–4 on a checked frame: the release as a Polars frame (item, ``noisy_weight``)."""
    item_type = frame.schema[space.item].dataType
    histogram = lattice_histogram_plan(frame, space, max_contributions)
    rows = release_above_threshold(histogram, space.item, item_type, scale=scale, threshold=threshold)
    return _to_polars(rows, space.item, item_type)


def wgm_function(
    space: SparkUserItemsDescriptor, max_contributions: int, scale: float, threshold: float
) -> Callable[[DataFrame], pl.DataFrame]:
    """The WGM's release function on Spark frames of ``space``: the frame checked, then :func:`wgm_release`."""

    def function(frame: DataFrame) -> pl.DataFrame:
        return wgm_release(check_frame(frame, space), space, max_contributions, scale, threshold)

    return function


_spark_wgm_function = wgm_function  # the name the other engine modules import


# --------------------------------------------------------------------------------------------------------------
# the optimal partition selection: the Δ0 = 1 histogram, then one exact Bernoulli draw per item


def _release_by_table(
    item: str, words: NDArray[np.uint64]
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Partition selection's draws, run in the executors by ``mapInArrow``: an item of lattice sum ``n·2^20``
    (``n`` users at Δ0 = 1) is kept with probability π(n) (``words``, public: pickled with the step), by the
    Polars release's code (``opendp_wgm.engines.polars.released_by_table``, which the executors import)."""

    def apply(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        for batch in batches:
            counts = batch.column(1).to_numpy(zero_copy_only=False).astype(np.uint64) >> np.uint64(LATTICE_BITS)
            keep = released_by_table(counts, words)  # a fresh AES-CTR generator keyed from the OS on every call
            if keep.any():
                yield pa.RecordBatch.from_arrays([batch.column(0).filter(pa.array(keep))], names=[item])

    return apply


def partition_selection_release(
    frame: DataFrame, space: SparkUserItemsDescriptor, words: NDArray[np.uint64]
) -> pl.DataFrame:
    """The optimal partition selection on a checked frame: each user's one uniformly kept item and the per-item
    sums (:func:`lattice_histogram_plan` at Δ0 = 1: every kept item weighs exactly 2^20, so a sum is ``n·2^20``
    for ``n`` users), then each item's draw in the executors (:func:`_release_by_table`); only the released items
    reach the driver. The Polars engine's output: the item column (its dtype mapped as the WGM's), sorted."""
    types = _pyspark().types
    item_type = frame.schema[space.item].dataType
    histogram = lattice_histogram_plan(frame, space, 1)
    schema = types.StructType([types.StructField(space.item, item_type, False)])
    rows = _collect_in_arrow(histogram, _release_by_table(space.item, words), schema)
    items = _released_items(rows, space.item, item_type)
    return items.to_frame().sort(space.item)  # the collected order is arbitrary: sort so that it carries nothing


def partition_selection_function(
    space: SparkUserItemsDescriptor, words: NDArray[np.uint64]
) -> Callable[[DataFrame], pl.DataFrame]:
    """:func:`opendp_wgm.make_partition_selection`'s release on Spark frames of ``space``, at the release table
    ``words`` (``release_table(ε, δ).words()``): the frame checked, then :func:`partition_selection_release`."""
    if lattice_weights(1).tolist() != [1 << LATTICE_BITS]:  # pragma: no cover - a guard on the kernel's weights
        raise AssertionError("at Δ0 = 1 the lattice weight must be exactly 2^LATTICE_BITS")

    def function(frame: DataFrame) -> pl.DataFrame:
        return partition_selection_release(check_frame(frame, space), space, words)

    return function


# --------------------------------------------------------------------------------------------------------------
# DP-SIPS's rounds: the rows still in play, and the adaptive schedule's count


def without_items(frame: DataFrame, space: SparkUserItemsDescriptor, items: pl.Series) -> DataFrame:
    """``frame``'s rows whose item is not in ``items`` (a lazy plan: an anti-join with a broadcast frame of the
    items, built on the driver from a release): DP-SIPS's rows still in play after a round."""
    if items.len() == 0:
        return frame
    functions = _pyspark().functions
    return frame.join(functions.broadcast(_items_frame(frame, space, items)), on=space.item, how="left_anti")


def _items_frame(frame: DataFrame, space: SparkUserItemsDescriptor, items: pl.Series) -> DataFrame:
    """``items`` (released by a mechanism on ``frame``, or cast to its item type) as a one-column Spark frame."""
    types = _pyspark().types
    schema = types.StructType([types.StructField(space.item, frame.schema[space.item].dataType, False)])
    return frame.sparkSession.createDataFrame([(value,) for value in items.to_list()], schema)


def user_bins(frame: DataFrame, space: SparkUserItemsDescriptor, released: pl.Series) -> NDArray[np.int64]:
    """The adaptive schedule's two-bin count on Spark: the users still holding an item not in ``released``
    (round 1's release), boosted (round 1 released one of their items) then the others. Each user is in at most
    one bin (ℓ2 sensitivity 1); only the two counts reach the driver."""
    import numpy as np

    functions = _pyspark().functions
    user, item = space.user, space.item
    marked_name, held, hit = (_fresh_name(f"__wgm_{n}", {user, item}) for n in ("released", "held", "hit"))
    marked = _items_frame(frame, space, released).withColumn(marked_name, functions.lit(1))
    per_user = (
        frame.select(user, item)
        .where(functions.col(user).isNotNull() & functions.col(item).isNotNull())
        .distinct()
        .join(functions.broadcast(marked), on=item, how="left")
        .groupBy(user)
        .agg(functions.count(functions.lit(1)).alias(held), functions.count(marked_name).alias(hit))
        .where(functions.col(held) > functions.col(hit))  # still holds an unreleased item
    )
    row = per_user.agg(
        functions.coalesce(functions.sum((functions.col(hit) > 0).cast("bigint")), functions.lit(0)),
        functions.coalesce(functions.sum((functions.col(hit) == 0).cast("bigint")), functions.lit(0)),
    ).collect()[0]
    return np.array([row[0], row[1]], dtype=np.int64)


# --------------------------------------------------------------------------------------------------------------
# stage 2 of the two-stage mechanisms: exact statistics of a public candidate list


def frame_candidates(frame: DataFrame, space: SparkUserItemsDescriptor, candidates: pl.Series) -> pl.Series:
    """``candidates`` cast exactly to the Polars type of ``frame``'s item column (the Polars engine's
    ``cast_candidates``: a cast that changes or merges a candidate raises), from the schema only."""
    return cast_candidates(candidates, _polars_dtype(frame.schema[space.item].dataType)).rename(space.item)


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
    """Exact number of distinct users holding each candidate, in the candidates' order (int64): top-k's stage 2
    (only the counts reach the driver)."""
    import numpy as np

    counts = np.zeros(candidates.len(), dtype=np.int64)
    if candidates.len() == 0:
        return counts
    pairs, position = _candidate_pairs(frame, space, candidates)
    for row in pairs.groupBy(position).count().collect():
        counts[row[0]] = row[1]
    return counts


def candidate_pairs(frame: DataFrame, space: SparkUserItemsDescriptor, candidates: pl.Series) -> pl.LazyFrame:
    """The distinct (user, candidate) pairs of ``frame``, collected to the driver as a Polars frame (the user's
    Polars type, the candidates' dtype): the hitting set's stage 2, whose user peeling then runs on them."""
    user_dtype = _polars_dtype(frame.schema[space.user].dataType)
    rows: list[Row] = []
    if candidates.len():
        pairs, _ = _candidate_pairs(frame, space, candidates)
        rows = pairs.select(space.user, space.item).collect()
    return pl.DataFrame(
        {space.user: [_value(r[0]) for r in rows], space.item: [_value(r[1]) for r in rows]},
        schema={space.user: user_dtype, space.item: candidates.dtype},
    ).lazy()
