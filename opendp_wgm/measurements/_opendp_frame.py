"""How (user, key) columns enter OpenDP's own Polars measurements (``make_private_lazyframe``) and come back.

OpenDP's frame domain knows a few dtypes: the user key and the keys enter as Int64, UInt64 or String and are
cast back on output. Every cast here is lossless for every value of its dtype (UInt64 stays UInt64: its values
from 2^63 on have no Int64), so that no private value can make a release fail after its noise is drawn.
OpenDP's key release baseline (:mod:`opendp_wgm.measurements.baselines.key_release`) and the aggregates of
:mod:`opendp_wgm.measurements.group_by` both go through these.
"""

from __future__ import annotations

import opendp.prelude as dp
import polars as pl
from polars._typing import PolarsDataType

__all__ = ["canonical_dtype", "canonical_item", "canonical_user", "check_key_dtype", "series_domain"]


def series_domain(name: str, dtype: PolarsDataType) -> dp.Domain:
    """OpenDP's series domain of a canonical column (String, UInt64, or Int64 for anything else)."""
    if dtype == pl.String:
        return dp.series_domain(name, dp.atom_domain(T=dp.String))
    if dtype == pl.UInt64:
        return dp.series_domain(name, dp.atom_domain(T=dp.u64))
    return dp.series_domain(name, dp.atom_domain(T=dp.i64))


def canonical_dtype(dtype: PolarsDataType) -> PolarsDataType:
    """The dtype a column is cast to before it enters OpenDP: UInt64 as it is, any other integer (and
    Boolean) as Int64, which holds all its values, anything else as String."""
    if dtype == pl.UInt64:
        return pl.UInt64
    if dtype.is_integer() or dtype == pl.Boolean:
        return pl.Int64
    return pl.String


def check_key_dtype(column: str, dtype: PolarsDataType) -> None:
    """Refuse, from the schema (before any noise is drawn), a key whose dtype does not enter OpenDP's frame and
    come back exactly for every value: integers, Boolean, floats, String, Categorical, Enum, Decimal and Date
    do (:func:`canonical_item`); a Datetime's or a Time's string does not parse back, a Binary value may not be
    UTF-8, and nested dtypes have no string."""
    exact = dtype.is_numeric() or isinstance(dtype, (pl.Categorical, pl.Enum))
    if not (exact or dtype in (pl.Boolean, pl.String, pl.Date)):
        msg = (
            f"key column {column!r} must be an integer, Boolean, float, String, Categorical, Enum, Decimal or "
            f"Date column to enter OpenDP's frame (found {dtype}); cast it (e.g. to String or Int64) first"
        )
        raise ValueError(msg)


def canonical_item(item: str, dtype: PolarsDataType) -> pl.Expr:
    """The item as it enters OpenDP (:func:`canonical_dtype`), one value one string: floats' ``-0.0`` is
    written as ``0.0`` (Polars' equality, and every other mechanism here, has them equal)."""
    column = pl.col(item)
    if dtype.is_float():
        column = pl.when(column == 0).then(pl.lit(0.0, dtype)).otherwise(column)
    return column.cast(canonical_dtype(dtype))


def canonical_user(user: str, dtype: PolarsDataType) -> pl.Expr:
    """The user as it enters OpenDP: integers as :func:`canonical_dtype` (UInt64 as it is, others as Int64),
    strings as they are, any other dtype as its dense rank, i.e. by Polars' equality (a cast to String would
    split ``0.0`` and ``-0.0`` into two users). The rank depends on other users but only relabels them:
    OpenDP's plan uses the user as a group only."""
    if dtype.is_integer() or dtype == pl.Boolean:
        return pl.col(user).cast(canonical_dtype(dtype))
    if dtype == pl.String:
        return pl.col(user)
    return pl.col(user).rank("dense").cast(pl.Int64)
