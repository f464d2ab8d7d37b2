r"""Top-k metrics: the top-k missing mass and the top-k ℓ1 loss."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from opendp_wgm._validation import _check_choice, _check_int
from opendp_wgm.metrics.truth import (
    _COUNT,
    Data,
    Items,
    _check_at_most_k,
    _mark_released,
    _released_counts,
    _released_series,
    _summarise,
)

__all__ = ["top_k_l1_loss", "top_k_missing_mass"]


def top_k_missing_mass(data: Data, released: Any, k: int, *, user: str = "user", item: Items = "item") -> float:
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
    data: Data,
    released: Any,
    k: int,
    *,
    user: str = "user",
    item: Items = "item",
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
