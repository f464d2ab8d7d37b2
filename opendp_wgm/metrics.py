r"""Utility metrics for domain discovery: missing mass, top-k loss, hitting-set coverage.

The metrics compare a released set of items ``S`` with the *true*, non-private data. They are evaluation
tools, not releases: they read the raw data and must never be published as they stand.

Notation (as in the paper). The data holds one row per (user, item) occurrence and each user
holds a *set* ``W_i`` (duplicate rows of a user count once).

* :math:`c(x) = |\{i : x \in W_i\}|`, the number of distinct users holding item :math:`x`;
* :math:`M = \sum_x c(x)`, the number of distinct (user, item) pairs (the total mass);
* :math:`N`, the number of distinct users (users appear through their rows, so every user holds an item);
* :math:`c_{(1)} \ge c_{(2)} \ge \dots`, the counts sorted in descending order.

``released`` may be a Polars ``DataFrame`` holding the item column, a Polars ``Series``, or any iterable of
items (a list, a set, a NumPy array). Released items that are not in the data count 0, and duplicates in
``released`` count once. Released items are compared with the data's item column after aligning dtypes
(integers of different widths, integers against floats, ``String`` against ``Categorical``/``Enum``);
strings are never compared with numbers.

``item`` may name several columns (``item=["country", "query"]``, a composite key, as in
:func:`opendp_wgm.user_items_space`): the items are then the distinct tuples of those columns, and ``released``
is a ``DataFrame`` with those columns (a release), a Struct ``Series`` of them, or an iterable of tuples in
the columns' order.

Every function reads the data once, in Polars, with no Python loop over rows, users or items, and never
modifies its inputs. To evaluate many releases against one data set, summarise it once with
:meth:`Truth.of` and pass the :class:`Truth` as ``data``: the data is then not read again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl

from opendp_wgm._spaces import _item_column, _null_items, _release_keys
from opendp_wgm._validation import _check_choice, _check_int, _check_item, _check_key_columns

__all__ = [
    "Truth",
    "captured_mass",
    "cardinality",
    "coverage",
    "linf_missing_mass",
    "missed_users",
    "missing_mass",
    "top_k_l1_loss",
    "top_k_missing_mass",
]

_COUNT = "__opendp_wgm_count__"
_TEXT_DTYPES = (pl.String, pl.Categorical, pl.Enum)


# --------------------------------------------------------------------------------------------------------
# private helpers
# --------------------------------------------------------------------------------------------------------

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
        cls, data: pl.DataFrame | pl.LazyFrame, *, user: str = "user", item: str | Sequence[str] = "item"
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


def _summarise(data: Any, user: str, item: str | Sequence[str]) -> Truth:
    """``data``'s :class:`Truth`: itself if it is one (with matching column names), else computed."""
    if not isinstance(data, Truth):
        return Truth.of(data, user=user, item=item)
    for name, given, own in (("user", user, data.user), ("item", _check_item(item), data.item)):
        if given != own:
            msg = f"`{name}` must be the Truth's {name} column {own!r} (found {given!r})"
            raise ValueError(msg)
    return data


def _released_series(released: Any, item: str | Sequence[str]) -> pl.Series:
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


# --------------------------------------------------------------------------------------------------------
# set union
# --------------------------------------------------------------------------------------------------------
def captured_mass(
    data: pl.DataFrame | pl.LazyFrame | Truth, released: Any, *, user: str = "user", item: str | Sequence[str] = "item"
) -> float:
    r"""Fraction of the total mass held by released items (the paper's plotted set-union utility).

    .. math::

        \mathrm{CM}(S) = \frac{\sum_{x \in S} c(x)}{M}, \qquad M = \sum_x c(x)

    Parameters
    ----------
    data
        Polars ``DataFrame`` or ``LazyFrame`` with one row per (user, item) occurrence, or its :class:`Truth`.
    released
        The released items: a ``DataFrame`` with the item column, a ``Series`` or any iterable.
    user, item
        Names of the user-id and item columns (``item``: a list of columns for a composite key).

    Returns
    -------
    float
        A number in [0, 1]; ``1 - missing_mass(...)``.

    Raises
    ------
    ValueError
        On a missing column, nulls in ``user``/``item``, or empty data.

    See Also
    --------
    missing_mass

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"user": [0, 0, 1, 1, 2], "item": ["a", "b", "a", "c", "a"]})
    >>> captured_mass(df, ["a"])
    0.6
    """
    summary = _summarise(data, user, item)
    marked = _mark_released(summary, _released_series(released, item), summary.column)
    captured = marked.filter("in_s").get_column(_COUNT).sum()
    return captured / summary.total_mass


def missing_mass(
    data: pl.DataFrame | pl.LazyFrame | Truth, released: Any, *, user: str = "user", item: str | Sequence[str] = "item"
) -> float:
    r"""The ℓ1 missing mass: fraction of the total mass held by items that were *not* released.

    .. math::

        \mathrm{MM}(S) = \frac{\sum_{x \notin S} c(x)}{M} = 1 - \mathrm{CM}(S)

    Counts are distinct users (duplicate rows of a user count once); the denominator is the total mass
    :math:`M` (distinct (user, item) pairs), not the number of users, as in the reference.

    Parameters
    ----------
    data
        Polars ``DataFrame`` or ``LazyFrame`` with one row per (user, item) occurrence, or its :class:`Truth`.
    released
        The released items: a ``DataFrame`` with the item column, a ``Series`` or any iterable.
        Items not in the data count 0; duplicates count once.
    user, item
        Names of the user-id and item columns (``item``: a list of columns for a composite key).

    Returns
    -------
    float
        A number in [0, 1], 0 when every item of the data is released.

    Raises
    ------
    ValueError
        On a missing column, nulls in ``user``/``item``, or empty data.

    See Also
    --------
    captured_mass, linf_missing_mass, top_k_missing_mass

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"user": [0, 0, 1, 1, 2], "item": ["a", "b", "a", "c", "a"]})
    >>> missing_mass(df, ["a", "zzz"])
    0.4
    """
    summary = _summarise(data, user, item)
    marked = _mark_released(summary, _released_series(released, item), summary.column)
    missed = marked.filter(~pl.col("in_s")).get_column(_COUNT).sum()
    return missed / summary.total_mass


def linf_missing_mass(
    data: pl.DataFrame | pl.LazyFrame | Truth,
    released: Any,
    *,
    user: str = "user",
    item: str | Sequence[str] = "item",
    normalize: bool = False,
) -> float:
    r"""The ℓ∞ missing mass: the largest user count among items that were not released.

    .. math::

        \mathrm{MM}_\infty(S) = \max_{x \notin S} c(x)
        \quad\text{or, with } \texttt{normalize=True},\quad \frac{1}{N} \max_{x \notin S} c(x)

    and 0 when nothing is missed. The reference does not compute this metric (the paper's reference code); the raw
    value is what the paper's ℓ∞ guarantee bounds.

    Parameters
    ----------
    data
        Polars ``DataFrame`` or ``LazyFrame`` with one row per (user, item) occurrence, or its :class:`Truth`.
    released
        The released items: a ``DataFrame`` with the item column, a ``Series`` or any iterable.
    user, item
        Names of the user-id and item columns (``item``: a list of columns for a composite key).
    normalize
        Divide by the number of distinct users :math:`N`.

    Returns
    -------
    float
        In [0, N], or in [0, 1] with ``normalize=True``.

    Raises
    ------
    ValueError
        On a missing column, nulls in ``user``/``item``, or empty data.

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"user": [0, 0, 1, 1, 2], "item": ["a", "b", "a", "c", "a"]})
    >>> linf_missing_mass(df, ["b"])
    3.0
    >>> linf_missing_mass(df, ["a"], normalize=True)
    0.3333333333333333
    """
    summary = _summarise(data, user, item)
    marked = _mark_released(summary, _released_series(released, item), summary.column)
    worst = float(marked.filter(~pl.col("in_s")).select(pl.col(_COUNT).max().fill_null(0)).item())
    return worst / summary.n_users if normalize else worst


def cardinality(released: Any, *, item: str | Sequence[str] = "item") -> int:
    r"""Number of distinct released items, :math:`|S|`.

    .. math::

        \mathrm{card}(S) = |S|

    Parameters
    ----------
    released
        The released items: a ``DataFrame`` with the item column, a ``Series`` or any iterable.
    item
        Name of the item column when ``released`` is a ``DataFrame``.

    Returns
    -------
    int

    Examples
    --------
    >>> cardinality(["a", "b", "a"])
    2
    """
    return _released_series(released, item).n_unique()


# --------------------------------------------------------------------------------------------------------
# top-k
# --------------------------------------------------------------------------------------------------------
def top_k_missing_mass(
    data: pl.DataFrame | pl.LazyFrame | Truth,
    released: Any,
    k: int,
    *,
    user: str = "user",
    item: str | Sequence[str] = "item",
) -> float:
    r"""Mass of the true top-k items that a released set of at most k items fails to capture.

    .. math::

        \mathrm{MM}_k(S) = \frac{\sum_{j=1}^{\min(k, U)} c_{(j)} - \sum_{x \in S} c(x)}{M}

    where :math:`U` is the number of distinct items. When ``k`` exceeds :math:`U` the first sum runs over all
    items: the reference raises ``IndexError`` there (the paper's reference code).

    Parameters
    ----------
    data
        Polars ``DataFrame`` or ``LazyFrame`` with one row per (user, item) occurrence, or its :class:`Truth`.
    released
        At most ``k`` distinct released items.
    k
        Integer >= 1.
    user, item
        Names of the user-id and item columns (``item``: a list of columns for a composite key).

    Returns
    -------
    float
        In [0, 1]; 0 when ``released`` is a true top-k set (ties broken either way).

    Raises
    ------
    ValueError
        If ``released`` holds more than ``k`` distinct items, ``k < 1``, or on bad data.

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"user": [0, 0, 1, 1, 2], "item": ["a", "b", "a", "c", "a"]})
    >>> top_k_missing_mass(df, ["b"], k=2)
    0.6
    """
    k = _check_int("k", k, minimum=1)
    series = _released_series(released, item)
    _check_at_most_k(series, k)
    summary = _summarise(data, user, item)
    best = summary.counts.get_column(_COUNT).top_k(k).sum()
    marked = _mark_released(summary, series, summary.column)
    captured = marked.filter("in_s").get_column(_COUNT).sum()
    return (best - captured) / summary.total_mass


def top_k_l1_loss(
    data: pl.DataFrame | pl.LazyFrame | Truth,
    released: Any,
    k: int,
    *,
    user: str = "user",
    item: str | Sequence[str] = "item",
    order: Literal["sorted", "output"] = "sorted",
) -> float:
    r"""ℓ1 distance between the true top-k counts and the counts of the released items (raw, not normalised).

    .. math::

        L_k(S) = \sum_{j=1}^{k} \bigl| c_{(j)} - c(s_j) \bigr|

    Both lists are padded with zero counts to length ``k``. With ``order="sorted"`` (default),
    :math:`s_1, s_2, \dots` are the released items sorted by true count, descending, so that
    :math:`c(s_1) \ge c(s_2) \ge \dots` and the loss does not depend on the order of the output. With
    ``order="output"``, :math:`s_j` is the j-th distinct released item in the order given, which reproduces
    the reference (its docstring says the lists are sorted, its code does not sort the output,
    a quirk of the paper's reference code). For example, with top-3 counts (3, 2, 2) and an output whose counts are
    (2, 3, 2) in output order, the loss is 2 with ``order="output"`` and 0 with ``order="sorted"``.

    Parameters
    ----------
    data
        Polars ``DataFrame`` or ``LazyFrame`` with one row per (user, item) occurrence, or its :class:`Truth`.
    released
        At most ``k`` distinct released items; for ``order="output"`` their order matters (a repeated item
        keeps its first position).
    k
        Integer >= 1. If it exceeds the number of distinct items, the true counts are padded with zeros.
    user, item
        Names of the user-id and item columns (``item``: a list of columns for a composite key).
    order : {'sorted', 'output'}
        How released items are matched to ranks (see above).

    Returns
    -------
    float
        A count in [0, k·N].

    Raises
    ------
    ValueError
        If ``released`` holds more than ``k`` distinct items, ``k < 1``, an unknown ``order``, or bad data.

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"user": [0, 0, 1, 1, 2], "item": ["a", "b", "a", "c", "a"]})
    >>> top_k_l1_loss(df, ["b", "a"], k=2)
    0.0
    >>> top_k_l1_loss(df, ["b", "a"], k=2, order="output")
    4.0
    """
    k = _check_int("k", k, minimum=1)
    order = _check_choice("order", order, ("sorted", "output"))
    series = _released_series(released, item)
    _check_at_most_k(series, k)
    summary = _summarise(data, user, item)
    best = np.zeros(k, dtype=np.int64)
    top = summary.counts.get_column(_COUNT).top_k(k).sort(descending=True).to_numpy()
    best[: top.size] = top
    got = np.zeros(k, dtype=np.int64)
    found = _released_counts(summary, series, summary.column)
    if order == "sorted":
        found = found.sort(descending=True)
    got[: found.len()] = found.to_numpy()
    return float(np.abs(best - got).sum())


# --------------------------------------------------------------------------------------------------------
# hitting set
# --------------------------------------------------------------------------------------------------------
def _missed_and_total(
    data: Any, released: Any, user: str, item: str | Sequence[str], n_users: int | None
) -> tuple[int, int]:
    summary = _summarise(data, user, item)
    series = _released_series(released, item).unique()
    column = summary.column
    aligned, common = _aligned(series, summary.pairs.schema[column])
    key = pl.col(column) if common is None else pl.col(column).cast(common)
    hit = summary.pairs.filter(key.is_in(aligned.implode())).get_column(user).n_unique()
    total = summary.n_users
    if n_users is not None:
        n_users = _check_int("n_users", n_users, minimum=1)
        if n_users < total:
            msg = f"`n_users` must be at least the number of users in the data ({total}) (found {n_users})"
            raise ValueError(msg)
        total = n_users
    return total - hit, total


def missed_users(
    data: pl.DataFrame | pl.LazyFrame | Truth,
    released: Any,
    *,
    user: str = "user",
    item: str | Sequence[str] = "item",
    n_users: int | None = None,
) -> int:
    r"""Number of users holding none of the released items (the k-hitting-set loss).

    .. math::

        \mathrm{missed}(S) = N - \bigl|\{ i : W_i \cap S \ne \emptyset \}\bigr|

    Parameters
    ----------
    data
        Polars ``DataFrame`` or ``LazyFrame`` with one row per (user, item) occurrence, or its :class:`Truth`.
    released
        The released items: a ``DataFrame`` with the item column, a ``Series`` or any iterable.
    user, item
        Names of the user-id and item columns (``item``: a list of columns for a composite key).
    n_users
        The number of users :math:`N`, when it exceeds the number of distinct users in ``data``. A user
        enters the table only through a row naming an item (rows with a null item are rejected), so users
        with an empty set are invisible; the reference counts them in :math:`N` (the paper's reference code). Pass
        their total here to reproduce that. By default :math:`N` is the number of distinct users in the data.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        On a missing column, nulls in ``user``/``item``, empty data, or ``n_users`` below the data's count.

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"user": [0, 0, 1, 1, 2], "item": ["a", "b", "a", "c", "b"]})
    >>> missed_users(df, ["c"])
    2
    >>> missed_users(df, ["c"], n_users=5)
    4
    """
    missed, _ = _missed_and_total(data, released, user, item, n_users)
    return missed


def coverage(
    data: pl.DataFrame | pl.LazyFrame | Truth,
    released: Any,
    *,
    user: str = "user",
    item: str | Sequence[str] = "item",
    n_users: int | None = None,
) -> float:
    r"""Fraction of users holding at least one released item.

    .. math::

        \mathrm{coverage}(S) = 1 - \frac{\mathrm{missed}(S)}{N}

    Parameters
    ----------
    data
        Polars ``DataFrame`` or ``LazyFrame`` with one row per (user, item) occurrence, or its :class:`Truth`.
    released
        The released items: a ``DataFrame`` with the item column, a ``Series`` or any iterable.
    user, item
        Names of the user-id and item columns (``item``: a list of columns for a composite key).
    n_users
        Total number of users :math:`N`, as in :func:`missed_users`.

    Returns
    -------
    float
        In [0, 1].

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"user": [0, 0, 1, 1, 2, 3], "item": ["a", "b", "a", "c", "b", "d"]})
    >>> coverage(df, ["a"])
    0.5
    """
    missed, total = _missed_and_total(data, released, user, item, n_users)
    return 1.0 - missed / total
