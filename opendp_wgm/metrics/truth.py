"""What every metric reads from the data, once (:class:`Truth`), and the metrics' shared private helpers: the
released items as a Series aligned with the data's item column."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from opendp_wgm._spaces import _item_column, _null_items, _release_keys
from opendp_wgm._validation import _check_item, _check_key_columns

__all__ = ["Truth"]

_COUNT = "__opendp_wgm_count__"
_TEXT_DTYPES = (pl.String, pl.Categorical, pl.Enum)


@dataclass(frozen=True, eq=False)
class Truth:
    r"""What every metric needs from the data, computed once: distinct pairs, c(x), M and N.

    Each metric function accepts a ``Truth`` in place of ``data`` and then does not read the data again, so
    evaluating many releases against one data set costs one pass over it (:meth:`of`) plus one join per release.

    Attributes
    ----------
    pairs : polars.DataFrame
        The distinct (user, item) rows.
    counts : polars.DataFrame
        One row per distinct item: the item column and its user count :math:`c(x)`.
    total_mass : int
        :math:`M = \sum_x c(x)`, the number of distinct pairs.
    n_users : int
        :math:`N`, the number of distinct users.
    user, item : str
        The column names; a metric given a ``Truth`` must be called with these (the defaults match
        ``Truth.of``'s). A composite key's ``item`` is the tuple of its columns; ``pairs`` and ``counts`` then
        hold one Struct column of them, named :attr:`column`.
    """

    pairs: pl.DataFrame
    counts: pl.DataFrame
    total_mass: int
    n_users: int
    user: str
    item: str | tuple[str, ...]

    @property
    def column(self) -> str:
        """The item column of ``pairs`` and ``counts``: ``item``, or a composite key's Struct (its columns
        joined by commas)."""
        return _item_column(self.item)

    @classmethod
    def of(
        cls, data: pl.DataFrame | pl.LazyFrame, *, user: str = "user", item: Items = "item"
    ) -> Truth:
        """Validate ``data`` and summarise it (one collect).

        Raises
        ------
        TypeError
            If ``data`` is not a Polars frame or a column name is not a string.
        ValueError
            On a missing column, nulls in ``user``/``item``, or empty data.

        Examples
        --------
        >>> import polars as pl
        >>> from opendp_wgm.metrics import missing_mass
        >>> truth = Truth.of(pl.DataFrame({"user": [0, 1, 1, 1], "item": ["a", "a", "b", "b"]}))
        >>> truth.total_mass, truth.n_users, missing_mass(truth, ["a"])
        (3, 2, 0.3333333333333333)
        """
        user, item = _check_key_columns(user, item)
        keys, column = ((item,) if isinstance(item, str) else item), _item_column(item)
        if isinstance(data, pl.DataFrame):
            lf = data.lazy()
        elif isinstance(data, pl.LazyFrame):
            lf = data
        else:
            msg = f"`data` must be a polars DataFrame or LazyFrame (found {type(data).__name__})"
            raise TypeError(msg)
        columns = lf.collect_schema().names()
        for name in (user, *keys):
            if name not in columns:
                msg = f"column {name!r} not found in data (columns: {columns})"
                raise ValueError(msg)
        # Nulls and emptiness survive `unique`, so one pass over the distinct pairs validates everything.
        pairs = lf.select(user, *keys).unique().collect()
        if pairs.height == 0:
            msg = "data is empty: metrics need at least one (user, item) row"
            raise ValueError(msg)
        for name in (user, *keys):
            if pairs.get_column(name).null_count() > 0:
                msg = f"column {name!r} contains null values: every row must name a user and an item"
                raise ValueError(msg)
        pairs = pairs.select(user, _release_keys(pairs, keys))
        counts = pairs.group_by(column).agg(pl.len().alias(_COUNT))
        n_users = pairs.get_column(user).n_unique()
        return cls(pairs=pairs, counts=counts, total_mass=pairs.height, n_users=n_users, user=user, item=item)



#: What every metric reads: the data (one row per (user, item) occurrence) or its :class:`Truth`.
Data = pl.DataFrame | pl.LazyFrame | Truth
#: The item column, or the columns of a composite key.
Items = str | Sequence[str]

def _summarise(data: Any, user: str, item: Items) -> Truth:
    """``data``'s :class:`Truth`: itself if it is one (with matching column names), else computed."""
    if not isinstance(data, Truth):
        return Truth.of(data, user=user, item=item)
    for name, given, own in (("user", user, data.user), ("item", _check_item(item), data.item)):
        if given != own:
            msg = f"`{name}` must be the Truth's {name} column {own!r} (found {given!r})"
            raise ValueError(msg)
    return data


def _released_series(released: Any, item: Items) -> pl.Series:
    """Normalise ``released`` to a Polars Series, in output order, duplicates kept, no nulls (a composite key's:
    a Struct Series of its columns, named like the :class:`Truth`'s column)."""
    item = _check_item(item)
    keys = (item,) if isinstance(item, str) else item
    if isinstance(released, pl.LazyFrame):
        released = released.collect()
    if isinstance(released, pl.DataFrame):
        for name in keys:
            if name not in released.columns:
                msg = f"column {name!r} not found in `released` (columns: {released.columns})"
                raise ValueError(msg)
        series = _release_keys(released, keys)
    elif isinstance(released, pl.Series):
        series = released
    elif isinstance(released, (str, bytes)):
        msg = (
            f"`released` must be a collection of items, not a single {type(released).__name__} ({released!r})"
        )
        raise TypeError(msg)
    elif isinstance(released, np.ndarray) and isinstance(item, str):
        series = pl.Series(item, released)
    elif isinstance(released, Iterable):
        values = list(released)
        try:
            if isinstance(item, tuple):  # tuples, in the key columns' order
                series = pl.DataFrame(values, schema=list(item), orient="row").to_struct()
            else:
                series = pl.Series(item, values)
        except (TypeError, pl.exceptions.PolarsError) as err:
            msg = f"`released` holds items that do not form one column ({err})"
            raise TypeError(msg) from err
    else:
        msg = (
            "`released` must be a polars DataFrame, a polars Series or an iterable of items"
            f" (found {type(released).__name__})"
        )
        raise TypeError(msg)
    if _null_items(series) > 0:
        msg = "`released` contains null items"
        raise ValueError(msg)
    return series.rename(_item_column(item))


def _is_text(dtype: pl.DataType) -> bool:
    return isinstance(dtype, _TEXT_DTYPES) or dtype in _TEXT_DTYPES


def _aligned(released: pl.Series, data_dtype: pl.DataType) -> tuple[pl.Series, pl.DataType | type[pl.DataType] | None]:
    """Cast ``released`` so it compares with the data's items.

    Returns the cast series and, when the data column must be cast as well, the common dtype.
    """
    rel_dtype = released.dtype
    if rel_dtype == data_dtype or rel_dtype == pl.Null:
        return released.cast(data_dtype), None
    if rel_dtype.is_numeric() and data_dtype.is_numeric():
        if rel_dtype.is_integer() and data_dtype.is_integer():
            try:  # lossless when it succeeds; an out-of-range id cannot be in the data anyway
                return released.cast(data_dtype, strict=True), None
            except pl.exceptions.InvalidOperationError:
                return released.cast(pl.Int128), pl.Int128
        return released.cast(pl.Float64), pl.Float64
    if _is_text(rel_dtype) and _is_text(data_dtype):
        return released.cast(pl.String), pl.String
    incompatible = (_is_text(rel_dtype) and data_dtype.is_numeric()) or (
        rel_dtype.is_numeric() and _is_text(data_dtype)
    )
    if not incompatible:
        try:
            return released.cast(data_dtype, strict=True), None
        except pl.exceptions.PolarsError:
            pass
    msg = f"released items of dtype {rel_dtype} cannot be compared with the item column of dtype {data_dtype}"
    raise TypeError(msg)


def _mark_released(summary: Truth, released: pl.Series, item: str) -> pl.DataFrame:
    """The item counts with a boolean column ``in_s`` telling whether each item is released."""
    released, common = _aligned(released.unique(), summary.counts.schema[item])
    key = pl.col(item) if common is None else pl.col(item).cast(common)
    return summary.counts.with_columns(key.is_in(released.implode()).alias("in_s"))


def _released_counts(summary: Truth, released: pl.Series, item: str) -> pl.Series:
    """c(s) for each *distinct* released item, in first-occurrence order (0 for items not in the data)."""
    released = released.unique(maintain_order=True)
    aligned, common = _aligned(released, summary.counts.schema[item])
    counts = summary.counts
    if common is not None:
        counts = counts.with_columns(pl.col(item).cast(common))
    return (
        aligned.to_frame(item)
        .join(counts, on=item, how="left", maintain_order="left")
        .get_column(_COUNT)
        .fill_null(0)
        .cast(pl.Int64)
    )


def _check_at_most_k(released: pl.Series, k: int) -> int:
    size = released.n_unique()
    if size > k:
        msg = f"`released` holds {size} distinct items, more than `k` = {k}"
        raise ValueError(msg)
    return size
