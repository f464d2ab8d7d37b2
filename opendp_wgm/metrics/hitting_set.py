r"""Hitting-set metrics: missed users and coverage."""

from __future__ import annotations

from typing import Any

import polars as pl

from opendp_wgm._validation import _check_int
from opendp_wgm.metrics.truth import Data, Items, _aligned, _released_series, _summarise

__all__ = ["coverage", "missed_users"]


def _missed_and_total(
    data: Any, released: Any, user: str, item: Items, n_users: int | None
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
    data: Data, released: Any, *, user: str = "user", item: Items = "item", n_users: int | None = None
) -> int:
    r"""Number of users holding none of the released items (the k-hitting-set loss).

    .. math::

        \mathrm{missed}(S) = N - \bigl|\{ i : W_i \cap S \ne \emptyset \}\bigr|

    Parameters
    ----------
    data, released, user, item
        As for :func:`~opendp_wgm.metrics.missing_mass`: the data (or its :class:`Truth`), items, columns.
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
    data: Data, released: Any, *, user: str = "user", item: Items = "item", n_users: int | None = None
) -> float:
    r"""Fraction of users holding at least one released item.

    .. math::

        \mathrm{coverage}(S) = 1 - \frac{\mathrm{missed}(S)}{N}

    Parameters
    ----------
    data, released, user, item
        As for :func:`~opendp_wgm.metrics.missing_mass`: the data (or its :class:`Truth`), items, columns.
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
