"""The lattice histogram of logs as they are (rows in time order, users interleaved, text ids) by the compiled
steps, with no category map and no Polars ``group_by``: the ``compiled-hashed`` plan (:func:`hashed_histogram`).

Text columns are coded by a 64-bit hash of each value, checked exactly (:func:`_exact_coding`); the rows are
bucketed by user in a counting sort whose counts :func:`user_counts` takes first (the plan's choice reads them:
:func:`opendp_wgm.kernel.plan_for`); each user's rows are deduplicated, weighted and, above Δ0, cut by the secret
key in one compiled pass (:func:`opendp_wgm.engines._hashed_jit.weigh_users`). Each user's distinct items are left
in the release's :class:`~opendp_wgm.engines.polars.Prepared` (:class:`_UserCodes`) for stage 2.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
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
    _hash_holds,
    _Hashed,
    _hashed_text,
    _text_codes,
    in_threads,
    kernel_threads,
    user_ranges,
)
from opendp_wgm.engines.polars._plans import BoundedLists, keys_of_hashes, value_hash
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
    return _text_coding(*text)


#: Text coded by its hash and not checked yet: the column and its hashed codes (:func:`_hashed_text`), which
#: :func:`_hash_holds` must hold on (every row) before the codes are used.
_Unchecked = tuple[pl.Series, _Hashed]


def _coding_of(
    column: pl.Series, jit: ModuleType, threads: int, *, compact: bool, check: bool
) -> tuple[_Coding, _Unchecked | None]:
    """:func:`_exact_coding` of ``column``; with ``check=False``, text that takes the hash is coded by it and
    returned unchecked too (for the caller to check, in threads beside other work); ``None``: exact already."""
    if not check and column.dtype == pl.String:
        hashed = _hashed_text(column, jit)
        if hashed is not None:
            return _text_coding(hashed.codes, hashed.values.len(), hashed.values.gather), (column, hashed)
    return _exact_coding(column, jit, threads, compact=compact), None


class _SharedWork:
    """Tasks (each returning whether its check held) that several threads take in turn, each task once, and the
    groups (``"users"``, ``"items"``, ``"keys"``) whose checks failed. :meth:`drain_when_ready` waits until the
    first tasks are in (:meth:`set_ready`), so that a thread that comes early does not leave at once; the
    threads take the tasks in the order they were added."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: deque[tuple[str, Callable[[], bool]]] = deque()
        self._ready = threading.Event()
        self.failed: set[str] = set()

    def add(self, group: str, tasks: list[Callable[[], bool]]) -> None:
        with self._lock:
            self._tasks.extend((group, task) for task in tasks)

    def set_ready(self) -> None:
        self._ready.set()

    def drain(self) -> None:
        """Run tasks until none is left."""
        while True:
            with self._lock:
                if not self._tasks:
                    return
                group, task = self._tasks.popleft()
            if not task():
                with self._lock:
                    self.failed.add(group)

    def wait_ready(self) -> None:
        self._ready.wait()

    def drain_when_ready(self) -> None:
        self.wait_ready()
        self.drain()


def _text_coding(codes: NDArray[np.integer], size: int, decode: Callable[[NDArray[np.int64]], pl.Series]) -> _Coding:
    """Text codes (already dense: the compiled step reads them as they are) as a :class:`_Coding`."""
    return _Coding(codes, 0, _NO_WORDS, _NO_WORDS.view(np.int64), size, decode)


@dataclass(frozen=True)
class UserCounts:
    """The users of a collected prepared frame coded exactly (:func:`_exact_coding`) and their rows counted per
    chunk of rows (``counts[chunk, user]``, ``threads`` chunks): where :func:`hashed_histogram`'s counting sort
    starts, and what :func:`opendp_wgm.kernel.plan_for` reads (:meth:`mostly_above`)."""

    coding: _Coding
    counts: NDArray[np.int64]
    threads: int
    #: text users coded by their hash but not checked yet (``check=False``), which :func:`_hash_holds` must hold on
    #: (every row) before the codes are used; ``None``: exact already
    unchecked: _Unchecked | None = None

    def mostly_above(self, max_contributions: int) -> bool:
        """Whether most rows belong to users with more than ``max_contributions`` rows (a speed choice only:
        repeated rows count, so a user may hold fewer distinct items)."""
        rows = self.counts.sum(axis=0)
        return 2 * int(rows[rows > max_contributions].sum()) > int(rows.sum())


def user_counts(frame: pl.DataFrame, space: _Space, jit: ModuleType, *, check: bool = True) -> UserCounts:
    """:class:`UserCounts` of ``frame``'s user column (text or integers, no nulls), in the compiled step's
    threads (:func:`kernel_threads`). ``check=False``: text users that take the hash are left unchecked
    (:attr:`UserCounts.unchecked`), for the caller to check in threads beside other work."""
    threads = kernel_threads(frame.height, jit)
    users, unchecked = _coding_of(frame.get_column(space.user), jit, threads, compact=False, check=check)
    counts = np.zeros((threads, users.size), dtype=np.int64)
    chunks = _even_ranges(frame.height, threads)
    in_threads(chunks, lambda k, first, stop: jit.count_users(users.values, users.low, first, stop, counts[k]))
    return UserCounts(users, counts, threads, unchecked)


def _public_hashes(frame: pl.DataFrame, column: str, unchecked: _Unchecked | None) -> NDArray[np.uint64]:
    """Each row's public hash of ``column`` (:func:`value_hash`): the text coding's, else hashed by Polars."""
    if unchecked is not None:
        return unchecked[1].hashes
    hashes: NDArray[np.uint64] = frame.select(value_hash(column, frame.schema[column])).to_series().to_numpy()
    return hashes


def _keys_of(
    user_hashes: NDArray[np.uint64], item_hashes: NDArray[np.uint64], seeds: tuple[int, ...], keys: NDArray[np.uint64],
    first: int, stop: int,
) -> bool:
    """The secret keys (:func:`keys_of_hashes`) of the rows ``first <= r < stop`` into ``keys``. ``True``."""
    keys[first:stop] = keys_of_hashes(user_hashes[first:stop], item_hashes[first:stop], seeds)
    return True


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
    (:func:`_exact_coding`; text by its hash, checked on every row). Where most rows belong to users above Δ0
    (:meth:`UserCounts.mostly_above`, a speed choice: the same histogram), every row's secret key
    (:func:`bound_key`, by pieces of rows) is placed with its item, and each user's rows are weighted and cut in
    one compiled pass; otherwise the items alone are placed, and the users found above Δ0 are keyed on their rows
    only afterwards (:func:`add_above`). The counting sort and the passes run in threads (chunks of rows, then
    ranges of users with a marker and a histogram each: integer sums, the same whatever their number). Text users
    and items are checked (:func:`_hash_holds`) beside the keys, the threads taking pieces of the checks and keys
    in turn, before their codes are read; where a check fails that column is coded by a category map (the users
    counted again: the keys do not depend on the codes). When the lists carry the release's
    :class:`~opendp_wgm.engines.polars.Prepared` (``lists.shared``), each user's distinct items are left in it
    (:class:`_UserCodes`) for stage 2."""
    space, bound = lists.space, lists.max_contributions
    threads, rows = kernel_threads(frame.height, jit), frame.height
    chunks = _even_ranges(rows, threads)  # the counts' chunks (:func:`user_counts`)
    # finer than one range a thread: the threads share these checks and keys, so one that started late still
    # finds work
    pieces = list(itertools.pairwise(_even_ranges(rows, 2 * threads).tolist()))
    keys = np.zeros(0, dtype=np.uint64)
    work = _SharedWork()
    given: list[UserCounts] = []

    def counted_then_shared() -> None:
        """The users counted (unless given) and their checks shared; then a share of the work."""
        try:
            given.append(users if users is not None else user_counts(frame, space, jit, check=False))
            if given[0].unchecked is not None:
                work.add("users", [partial(_hash_holds, *given[0].unchecked, a, b) for a, b in pieces])
        finally:  # the other threads wait for this, whatever happens
            work.set_ready()
        work.drain()

    # every step releases the GIL: the items are coded (their check left to the shared work) while another thread
    # counts the users; then all threads share the checks and the keys, which combine the hashes text was coded by
    with ThreadPoolExecutor(max_workers=threads) as pool:
        counting = pool.submit(counted_then_shared)
        helpers = [pool.submit(work.drain_when_ready) for _ in range(threads - 2)]
        item = frame.get_column(space.item)
        items, items_unchecked = _coding_of(item, jit, threads, compact=True, check=False)
        if items_unchecked is not None:
            work.add("items", [partial(_hash_holds, *items_unchecked, a, b) for a, b in pieces])
        work.wait_ready()
        if given and given[0].mostly_above(bound):
            user_hashes = _public_hashes(frame, space.user, given[0].unchecked)
            item_hashes = _public_hashes(frame, space.item, items_unchecked)
            keys = np.empty(rows, dtype=np.uint64)
            work.add("keys", [partial(_keys_of, user_hashes, item_hashes, lists.seeds, keys, a, b) for a, b in pieces])
        work.drain()
        counting.result()
        for helper in helpers:
            helper.result()
    counted = given[0]
    if "items" in work.failed:  # two item values share a hash: coded exactly (by a category map)
        items = _exact_coding(frame.get_column(space.item), jit, threads, compact=True)
    if "users" in work.failed:  # two user values share a hash: coded exactly and counted again (the keys do not
        counted = user_counts(frame, space, jit)  # depend on the codes)
    coding = counted.coding
    cursors = counted.counts.copy()  # the counts become each chunk's cursors (the counts stay the facts')
    start = np.empty(coding.size + 1, dtype=np.int64)
    jit.user_cursors(cursors, start)
    held = np.empty(rows, dtype=np.int32)  # the item offsets, then (once all are placed) ranked: item codes
    held_keys = np.empty(keys.size, dtype=np.uint64)
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
