"""The lattice histogram of logs as they are (rows in time order, users interleaved, text ids) by the compiled
steps, with no category map and no Polars ``group_by``: the ``compiled-hashed`` plan (:func:`hashed_histogram`).

Text columns are coded by a 64-bit hash of each value, checked exactly (:func:`_exact_coding`); the rows are
bucketed by user in a counting sort whose counts :func:`user_counts` takes first (the plan's choice reads them:
:func:`opendp_wgm.kernel.plan_for`); each user's rows are deduplicated, weighted and, above Δ0, cut by the secret
key in one compiled pass (:func:`opendp_wgm.engines._hashed_jit.weigh_users`). Each user's distinct items are left
in the release's :class:`~opendp_wgm.engines.polars.Prepared` (:class:`_UserCodes`) for stage 2.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import polars as pl
from numpy.typing import NDArray

from opendp_wgm._spaces import _Space
from opendp_wgm.engines.polars._compiled_histogram import add_above, decoded_histogram
from opendp_wgm.engines.polars._compiled_steps import (
    _Coding,
    _coding,
    _even_ranges,
    _text_codes,
    in_threads,
    kernel_threads,
    user_ranges,
)
from opendp_wgm.engines.polars._plans import BoundedLists, bound_key
from opendp_wgm.engines.polars._prepared import _UserCodes
from opendp_wgm.privacy.threshold import lattice_weights

__all__ = ["UserCounts", "hashed_histogram", "user_counts"]


_NO_WORDS = np.zeros(0, dtype=np.uint64)


def _exact_coding(column: pl.Series, jit: ModuleType, threads: int, *, compact: bool) -> _Coding:
    """Exact codes of a prepared column (equal values, equal codes) for the compiled step. Text by a 64-bit hash of
    each value (:func:`_text_codes`: codes in order of first occurrence, every row checked against its code's
    first value); where two values share a hash, through a fresh category map instead (the codes
    ``compiled-coded`` gives: exact either way, slower). Integers and categories as the compiled step codes them
    (:func:`_coding`)."""
    dtype = column.dtype
    if dtype != pl.String:
        return _coding(column, dtype, jit, threads, compact=compact)
    text = _text_codes(column, jit)
    if text is None:  # two values share a hash (or no rows): the category map decides
        categories = column.cast(pl.Categorical(pl.Categories.random()))
        return _coding(categories, dtype, jit, threads, compact=compact)
    codes, size, decode = text
    return _Coding(codes, 0, _NO_WORDS, _NO_WORDS.view(np.int64), size, decode)


@dataclass(frozen=True)
class UserCounts:
    """The users of a collected prepared frame coded exactly (:func:`_exact_coding`) and their rows counted per
    chunk of rows (``counts[chunk, user]``, ``threads`` chunks): where :func:`hashed_histogram`'s counting sort
    starts, and what :func:`opendp_wgm.kernel.plan_for` reads (:meth:`mostly_above`)."""

    coding: _Coding
    counts: NDArray[np.int64]
    threads: int

    def mostly_above(self, max_contributions: int) -> bool:
        """Whether most rows belong to users with more than ``max_contributions`` rows (a speed choice only:
        repeated rows count, so a user may hold fewer distinct items)."""
        rows = self.counts.sum(axis=0)
        return 2 * int(rows[rows > max_contributions].sum()) > int(rows.sum())


def user_counts(frame: pl.DataFrame, space: _Space, jit: ModuleType) -> UserCounts:
    """:class:`UserCounts` of ``frame``'s user column (text or integers, no nulls), in the compiled step's
    threads (:func:`kernel_threads`)."""
    threads = kernel_threads(frame.height, jit)
    users = _exact_coding(frame.get_column(space.user), jit, threads, compact=False)
    counts = np.zeros((threads, users.size), dtype=np.int64)
    chunks = _even_ranges(frame.height, threads)
    in_threads(chunks, lambda k, first, stop: jit.count_users(users.values, users.low, first, stop, counts[k]))
    return UserCounts(users, counts, threads)


def _keys(lists: BoundedLists, frame: pl.DataFrame, threads: int) -> NDArray[np.uint64]:
    """Every row's secret key (:func:`bound_key`), one Polars ``select`` per chunk of rows, the chunks in threads
    (a ``select`` of one expression runs in one thread)."""
    keys = np.empty(frame.height, dtype=np.uint64)
    key = bound_key(frame.lazy(), lists.space, lists.seeds)

    def chunk(_: int, first: int, stop: int) -> None:
        keys[first:stop] = frame.slice(first, stop - first).select(key).to_series().to_numpy()

    in_threads(_even_ranges(frame.height, threads), chunk)
    return keys


def hashed_histogram(
    lists: BoundedLists,
    frame: pl.DataFrame,
    max_contributions: int,
    jit: ModuleType,
    hashed: ModuleType,
    users: UserCounts | None = None,
) -> pl.DataFrame:
    """The lattice histogram of ``lists`` on its collected frame ``frame`` (below 2^31 rows; user column text or
    integers) by the ``compiled-hashed`` plan: the same histogram as :func:`lattice_histogram_plan` of
    ``lists(None)``, bit for bit.

    ``users``: :func:`user_counts` of ``frame`` (``None``: counted here). The item column is coded exactly
    (:func:`_exact_coding`). Where most rows belong to users above Δ0 (:meth:`UserCounts.mostly_above`, a speed
    choice: the same histogram), every row's secret key (:func:`bound_key`, one Polars ``select``) is placed with
    its item, and each user's rows are weighted and cut in one compiled pass; otherwise the items alone are
    placed, and the users found above Δ0 are keyed on their rows only afterwards (:func:`add_above`). The
    counting sort and the passes run in threads (chunks of rows, then ranges of users with a marker and a
    histogram each: integer sums, the same whatever their number). When the lists carry the release's
    :class:`~opendp_wgm.engines.polars.Prepared` (``lists.shared``), each user's distinct items are left in it
    (:class:`_UserCodes`) for stage 2."""
    space, bound = lists.space, lists.max_contributions
    threads, rows = kernel_threads(frame.height, jit), frame.height
    # the items coded while another thread codes the users, or, given the users, keys the rows (each step releases
    # the GIL): the other core is not left idle
    with ThreadPoolExecutor(max_workers=1) as pool:
        counting = None if users is not None else pool.submit(user_counts, frame, space, jit)
        keying = pool.submit(_keys, lists, frame, 1) if users is not None and users.mostly_above(bound) else None
        items = _exact_coding(frame.get_column(space.item), jit, threads, compact=True)
        counted = counting.result() if counting is not None else users
        keys = keying.result() if keying is not None else None
    assert counted is not None  # given, or counted here
    coding = counted.coding
    if keys is None:
        keys = _keys(lists, frame, threads) if counted.mostly_above(bound) else np.zeros(0, dtype=np.uint64)
    cursors = counted.counts.copy()  # the counts become each chunk's cursors (the counts stay the facts')
    start = np.empty(coding.size + 1, dtype=np.int64)
    jit.user_cursors(cursors, start)
    held = np.empty(rows, dtype=np.int32)  # the item offsets, then (once all are placed) ranked: item codes
    held_keys = np.empty(keys.size, dtype=np.uint64)
    chunks = _even_ranges(rows, threads)
    in_threads(chunks, lambda k, first, stop: hashed.place_keyed(
        coding.values, coding.low, items.values, items.low, keys, first, stop, cursors[k], held, held_keys))
    in_threads(chunks, lambda _, first, stop: items.ranked(jit, held, first, stop))
    weights = lattice_weights(max_contributions)
    ranges = user_ranges(start, threads)
    seen = np.full((threads, items.size), -1, dtype=np.int32)
    histograms = np.zeros((threads, items.size), dtype=np.int64)
    distinct = np.empty(coding.size, dtype=np.int64)
    above = np.zeros(coding.size, dtype=np.bool_)
    shared = lists.shared  # a later step of the release reads the rows: each user's items, and their holders
    holders = np.zeros((threads, items.size if shared is not None else 0), dtype=np.int64)
    in_threads(ranges, lambda k, first, stop: hashed.weigh_users(
        held, held_keys, start, first, stop, bound, weights, seen[k], histograms[k], distinct, above, holders[k]))
    histogram: NDArray[np.int64] = histograms[0] if threads == 1 else histograms.sum(axis=0)
    if above.any():  # without keys: the users above Δ0, keyed on their rows only
        rows_of, offsets = jit.rows_above(coding.values, coding.low, start, above)
        add_above(jit, lists, frame, histogram, items, rows_of, offsets, weights)
    if shared is not None:
        shared.coding = _UserCodes(held, start, distinct, holders.sum(axis=0), items.size, items.decode)
    return decoded_histogram(items, histogram)
