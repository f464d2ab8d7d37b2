r"""Set-union metrics: captured and missing mass (ℓ1 and ℓ∞), cardinality."""

from __future__ import annotations

from typing import Any

import polars as pl

from opendp_wgm.metrics.truth import _COUNT, Data, Items, Truth, _mark_released, _released_series, _summarise

__all__ = ["captured_mass", "cardinality", "linf_missing_mass", "missing_mass"]


def _marked(data: Data, released: Any, user: str, item: Items) -> tuple[Truth, pl.DataFrame]:
    """The data's summary (its :class:`Truth`) and its items marked ``in_s`` when released, with their counts."""
    summary = _summarise(data, user, item)
    return summary, _mark_released(summary, _released_series(released, item), summary.column)


def captured_mass(data: Data, released: Any, *, user: str = "user", item: Items = "item") -> float:
    r"""Fraction of the total mass held by released items (the paper's plotted set-union utility).

    .. math::

        \mathrm{CM}(S) = \frac{\sum_{x \in S} c(x)}{M}, \qquad M = \sum_x c(x)

    Parameters
    ----------
    data, released, user, item
        As for :func:`~opendp_wgm.metrics.missing_mass`: the data (or its :class:`Truth`), items, columns.

    Returns
    -------
    float
        A number in [0, 1]; ``1 - missing_mass(...)``.

    Raises
    ------
    ValueError
        As for :func:`missing_mass`.

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
    summary, marked = _marked(data, released, user, item)
    captured = marked.filter("in_s").get_column(_COUNT).sum()
    return captured / summary.total_mass


def missing_mass(data: Data, released: Any, *, user: str = "user", item: Items = "item") -> float:
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
    summary, marked = _marked(data, released, user, item)
    missed = marked.filter(~pl.col("in_s")).get_column(_COUNT).sum()
    return missed / summary.total_mass


def linf_missing_mass(
    data: Data, released: Any, *, user: str = "user", item: Items = "item", normalize: bool = False
) -> float:
    r"""The ℓ∞ missing mass: the largest user count among items that were not released.

    .. math::

        \mathrm{MM}_\infty(S) = \max_{x \notin S} c(x)
        \quad\text{or, with } \texttt{normalize=True},\quad \frac{1}{N} \max_{x \notin S} c(x)

    and 0 when nothing is missed. The reference does not compute this metric (the paper's reference code); the raw
    value is what the paper's ℓ∞ guarantee bounds.

    Parameters
    ----------
    data, released, user, item
        As for :func:`~opendp_wgm.metrics.missing_mass`: the data (or its :class:`Truth`), items, columns.
    normalize
        Divide by the number of distinct users :math:`N`.

    Returns
    -------
    float
        In [0, N], or in [0, 1] with ``normalize=True``.

    Raises
    ------
    ValueError
        As for :func:`missing_mass`.

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"user": [0, 0, 1, 1, 2], "item": ["a", "b", "a", "c", "a"]})
    >>> linf_missing_mass(df, ["b"])
    3.0
    >>> linf_missing_mass(df, ["a"], normalize=True)
    0.3333333333333333
    """
    summary, marked = _marked(data, released, user, item)
    worst = float(marked.filter(~pl.col("in_s")).select(pl.col(_COUNT).max().fill_null(0)).item())
    return worst / summary.n_users if normalize else worst


def cardinality(released: Any, *, item: Items = "item") -> int:
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
