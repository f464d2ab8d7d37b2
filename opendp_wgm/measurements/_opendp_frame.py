"""How (user, key) columns enter OpenDP's own Polars measurements (``make_private_lazyframe``) and come back.

OpenDP's frame domain knows a few dtypes: the user key and the keys enter as Int64 or String and are cast back
on output. OpenDP's key release baseline (:mod:`opendp_wgm.measurements.baselines.key_release`) and the
aggregates of :mod:`opendp_wgm.measurements.group_by` both go through these.
"""

from __future__ import annotations

import opendp.prelude as dp
import polars as pl
from polars._typing import PolarsDataType

__all__ = ["canonical_dtype", "canonical_item", "canonical_user", "series_domain"]


def series_domain(name: str, dtype: PolarsDataType) -> dp.Domain:
    """OpenDP's series domain of a canonical column (String, UInt64, or Int64 for anything else)."""
    if dtype == pl.String:
        return dp.series_domain(name, dp.atom_domain(T=dp.String))
    if dtype == pl.UInt64:
        return dp.series_domain(name, dp.atom_domain(T=dp.u64))
    return dp.series_domain(name, dp.atom_domain(T=dp.i64))


def canonical_dtype(dtype: PolarsDataType) -> PolarsDataType:
    """The dtype a column is cast to before it enters OpenDP: String or Int64."""
    if dtype.is_integer() or dtype == pl.Boolean:
        return pl.Int64
    return pl.String


def canonical_item(item: str, dtype: PolarsDataType) -> pl.Expr:
    """The item as it enters OpenDP (:func:`canonical_dtype`), one value one string: floats' ``-0.0`` is
    written as ``0.0`` (Polars' equality, and every other mechanism here, has them equal)."""
    column = pl.col(item)
    if dtype.is_float():
        column = pl.when(column == 0).then(pl.lit(0.0, dtype)).otherwise(column)
    return column.cast(canonical_dtype(dtype))


def canonical_user(user: str, dtype: PolarsDataType) -> pl.Expr:
    """The user as it enters OpenDP: integers as Int64, strings as they are, any other dtype as its dense
    rank, i.e. by Polars' equality (a cast to String would split ``0.0`` and ``-0.0`` into two users). The
    rank depends on other users but only relabels them: OpenDP's plan uses the user as a group only."""
    if dtype.is_integer() or dtype == pl.Boolean:
        return pl.col(user).cast(pl.Int64)
    if dtype == pl.String:
        return pl.col(user)
    return pl.col(user).rank("dense").cast(pl.Int64)
