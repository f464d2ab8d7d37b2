r"""Keys with statistics on Spark: the Spark steps of :func:`opendp_wgm.make_wgm_group_by` on a Spark DataFrame.

Spark computes what the Polars engine's OpenDP plan aggregates, only over the released keys, and collects one
row per released key to the driver, where the measurement adds OpenDP's noise
(``opendp_wgm.measurements._group_by_spark``; stage 1, the key release, is a constructor's own, which runs on
the packed key column as on any Spark space):

1. :func:`check_group_by_frame`: the frame's schema (public) — the user and key columns of supported types,
   the summed columns numeric;
2. :func:`pack_keys`: rows with a null user or key dropped; a composite key's columns packed into one string
   column, ``to_json(struct(keys))`` (injective and row-wise; :func:`unpack_keys` reads it back into the key
   columns' Polars dtypes on the driver);
3. :func:`bounded_aggregates`: the rows of released keys only (a broadcast join on the keys, numbered by
   position), at most R rows per (user, key), at most Δ0 keys per user, then one ``groupBy`` per key: the row
   count and each value column's sum on its grid (null and NaN as 0, clipped, rounded half to even to
   multiples of :math:`2^{-b}`, as Polars rounds);

and :func:`user_count_bins`, the histogram of the users' distinct-key counts that ``max_contributions="auto"``
noises to choose Δ0 (for every Spark constructor: one key column or a composite key's).

Which rows and keys a user keeps is a function of that user's rows and of secret seeds drawn from the OS for
every release: each user keeps the R rows of each key of smallest ``xxhash64(s, user, key, values)`` (then by
the values: rows tied on both are equal, so either gives the same sums) and the Δ0 keys of smallest
``xxhash64(s', user, key)`` (then by the key's position), a uniformly random subset of its released keys as on
Polars. Spark has no frame order: where the Polars engine keeps each user's *first* R rows of a key, Spark keeps
R of them chosen by the seed. Both are per-user truncations, which OpenDP's map reads (``docs/privacy.md`` §5).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import polars as pl

from opendp_wgm.engines.spark import (
    SparkUserItemsDescriptor,
    _check_frame,
    _fresh_name,
    _polars_dtype,
    _pyspark,
    _quoted,
    _resolve_spark_space,
)
from opendp_wgm.privacy.auto import BINS, GRID

if TYPE_CHECKING:  # pragma: no cover - typing only
    from numpy.typing import NDArray
    from pyspark.sql import DataFrame

__all__ = [
    "GridValue",
    "bounded_aggregates",
    "check_group_by_frame",
    "group_by_space",
    "key_dtypes",
    "pack_keys",
    "unpack_keys",
    "user_count_bins",
]

#: Spark types of a composite key's columns: their ``to_json`` text reads back exactly (``unpack_keys``).
_PACKABLE = ("string", "tinyint", "smallint", "int", "bigint", "boolean")
#: Spark types a summed column may have (as the Polars engine: numeric or boolean).
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean")


class GridValue(NamedTuple):
    """A value column as it is summed: null and NaN as 0, clipped to [lower, upper], on the grid 2^-bits."""

    column: str
    lower: float
    upper: float
    bits: int


def _type_name(data_type: Any) -> str:
    name: str = data_type.simpleString()
    return "decimal" if name.startswith("decimal") else name


def group_by_space(input_domain: Any, input_metric: Any) -> SparkUserItemsDescriptor:
    """The descriptor of a Spark input space, a composite key's included (its columns are packed here)."""
    return _resolve_spark_space(input_domain, input_metric, composite=True)


def check_group_by_frame(frame: object, space: SparkUserItemsDescriptor, values: Sequence[str]) -> DataFrame:
    """A running Spark DataFrame with the user, key and value columns, of supported types (its schema only:
    public); raises a clear error otherwise."""
    keys = space.keys or (space.item,)
    checked = _check_frame(frame, SparkUserItemsDescriptor(space.user, keys[0]))
    for key in keys[1:]:  # the Spark engine's checks of a (user, item) frame, for each key column
        _check_frame(checked, SparkUserItemsDescriptor(space.user, key))
    schema = {field.name: field.dataType for field in checked.schema.fields}
    if space.keys:
        for key in space.keys:
            if _type_name(schema[key]) not in _PACKABLE:
                msg = (
                    f"composite key column {key!r} has Spark type {schema[key].simpleString()}: a composite key on "
                    f"Spark takes {', '.join(_PACKABLE)} columns (cast it to string first)"
                )
                raise TypeError(msg)
    missing = [c for c in values if c not in schema]
    if missing:
        msg = f"column(s) {missing} not found in the data (columns: {list(schema)})"
        raise ValueError(msg)
    for column in values:
        if _type_name(schema[column]) not in (*_NUMERIC, "decimal"):
            msg = f"column {column!r} must be numeric to be summed (found Spark type {schema[column].simpleString()})"
            raise ValueError(msg)
    return checked


def pack_keys(frame: DataFrame, space: SparkUserItemsDescriptor, values: Sequence[str]) -> DataFrame:
    """The user, the key (a composite key packed into the string column ``space.item``, its columns kept) and
    the value columns; rows with a null user or key dropped (a row-wise map and filter)."""
    functions = _pyspark().functions
    keys = space.keys or (space.item,)
    present = functions.col(space.user).isNotNull()
    for key in keys:
        present = present & functions.col(key).isNotNull()
    key = functions.to_json(functions.struct(*keys)) if space.keys else functions.col(space.item)
    return frame.where(present).select(space.user, key.alias(space.item), *space.keys, *dict.fromkeys(values))


def key_dtypes(frame: DataFrame, space: SparkUserItemsDescriptor) -> dict[str, pl.DataType]:
    """The Polars dtypes of the key columns (a composite key's), from the frame's Spark schema."""
    schema = {field.name: field.dataType for field in frame.schema.fields}
    return {key: _polars_dtype(schema[key]) for key in space.keys or (space.item,)}


def unpack_keys(packed: pl.Series, dtypes: dict[str, pl.DataType]) -> pl.Series:
    """Packed composite keys (:func:`pack_keys`) as a Struct of the key columns, in their Polars ``dtypes``."""
    return packed.str.json_decode(pl.Struct(dtypes))


def _seed() -> Any:
    """A secret 64-bit seed from the OS, as a Spark literal (fed to ``xxhash64`` before the row's values)."""
    return _pyspark().functions.lit(secrets.randbits(64) - 2**63).cast("bigint")


def _grid(column: Any, value: GridValue) -> Any:
    """``value`` on its grid, as an int64 Spark column: the Polars engine's ``_Statistic.value`` in Spark SQL
    (``bround``: half to even, as Polars' ``round``)."""
    functions = _pyspark().functions
    number = column.cast("double")
    number = functions.when(number.isNull() | functions.isnan(number), functions.lit(0.0)).otherwise(number)
    clipped = functions.least(functions.greatest(number, functions.lit(value.lower)), functions.lit(value.upper))
    return functions.bround(clipped * functions.lit(2.0**value.bits), 0).cast("bigint")


def bounded_aggregates(
    frame: DataFrame,
    space: SparkUserItemsDescriptor,
    candidates: pl.Series,
    *,
    max_contributions: int,
    max_rows_per_key: int,
    values: Sequence[GridValue],
) -> NDArray[np.int64]:
    """Exact per-key aggregates of a packed frame (:func:`pack_keys`) over ``candidates`` (its item column's
    values), after the per-user truncation: an int64 array of shape (1 + len(values), len(candidates)), the row
    counts then each value's grid sum, in the candidates' order (0 for a candidate no kept row holds)."""
    sql = _pyspark()
    functions, types, Window = sql.functions, sql.types, sql.window.Window
    user, item = space.user, space.item
    taken = {user, item, *(v.column for v in values)}
    position, row, rank = (_fresh_name(f"__wgm_{n}", taken) for n in ("position", "row", "rank"))
    grid = [_fresh_name(f"__wgm_value_{i}", taken) for i in range(len(values))]
    totals = np.zeros((1 + len(values), candidates.len()), dtype=np.int64)
    if candidates.len() == 0:
        return totals
    item_type = frame.schema[item].dataType
    schema = types.StructType(
        [types.StructField(item, item_type, False), types.StructField(position, types.IntegerType(), False)]
    )
    keys = frame.sparkSession.createDataFrame([(v, i) for i, v in enumerate(candidates.to_list())], schema)
    rows = frame.select(
        user, item, *(_grid(functions.col(v.column), v).alias(g) for v, g in zip(values, grid, strict=True))
    ).join(functions.broadcast(keys), on=item, how="inner")
    by_values = [functions.col(g) for g in grid]
    rows_order = Window.partitionBy(user, position).orderBy(
        functions.xxhash64(_seed(), functions.col(user), functions.col(position), *by_values), *by_values
    )
    keys_order = Window.partitionBy(user).orderBy(
        functions.xxhash64(_seed(), functions.col(user), functions.col(position)), position
    )
    kept = (
        rows.withColumn(row, functions.row_number().over(rows_order))
        .where(functions.col(row) <= max_rows_per_key)
        .withColumn(rank, functions.dense_rank().over(keys_order))
        .where(functions.col(rank) <= max_contributions)
    )
    sums = [functions.sum(g).cast("bigint") for g in grid]
    collected = kept.groupBy(position).agg(functions.count(functions.lit(1)).cast("bigint"), *sums).collect()
    if collected:
        table = np.array(collected, dtype=np.int64).reshape(len(collected), 2 + len(values))
        totals[:, table[:, 0]] = table[:, 1:].T
    return totals


def user_count_bins(frame: object, space: SparkUserItemsDescriptor) -> NDArray[np.int64]:
    """The exact histogram of the users' distinct-item counts over :data:`~opendp_wgm.privacy.auto.GRID` on Spark
    (``max_contributions="auto"``'s choice; the Polars engine's ``_count_bins``): rows with a null user or item
    (any key column of a composite key) dropped, the size of each user's set of items (of key tuples), each user
    binned by one SQL expression (bin ``j`` holds the counts in ``(GRID[j-1], GRID[j]]``, bin 8 those above
    200), and one ``groupBy`` of the bins: at most :data:`~opendp_wgm.privacy.auto.BINS` rows reach the driver.
    The frame's schema is checked first (as :func:`check_group_by_frame` checks it: public)."""
    functions = _pyspark().functions
    checked = check_group_by_frame(frame, space, ())
    user, keys = space.user, space.keys or (space.item,)
    count, bin_name = (_fresh_name(f"__wgm_{n}", {user, *keys}) for n in ("count", "bin"))
    present = functions.col(user).isNotNull()
    for key in keys:
        present = present & functions.col(key).isNotNull()
    # size(collect_set) rather than count_distinct: an object aggregate per user in one shuffle, 2.4 s against
    # 4.8 s on 10^7 rows (local[2]); count_distinct plans a hash aggregate of every (user, item) pair first
    held = functions.col(keys[0]) if len(keys) == 1 else functions.struct(*keys)
    per_user = checked.where(present).groupBy(user).agg(functions.size(functions.collect_set(held)).alias(count))
    # the number of grid points below the count (numpy's searchsorted over GRID[:-1]), as one SQL expression
    binned = functions.expr(" + ".join(f"CAST({_quoted(count)} > {g} AS INT)" for g in GRID[:-1]))
    rows = per_user.select(binned.alias(bin_name)).groupBy(bin_name).count().collect()
    bins = np.zeros(BINS, dtype=np.int64)
    if rows:
        table = np.array(rows, dtype=np.int64).reshape(len(rows), 2)
        bins[table[:, 0]] = table[:, 1]
    return bins
