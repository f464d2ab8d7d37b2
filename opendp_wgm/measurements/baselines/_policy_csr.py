"""The policy baselines' input: a bounded frame as CSR arrays (user → item codes), users in a uniformly random
order, built with Polars (and, with Numba, by the compiled helpers of
:mod:`opendp_wgm.measurements.baselines._policy_jit`)."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from types import ModuleType
from typing import Any, cast

import numpy as np
import polars as pl

from opendp_wgm._spaces import _prepare_frame, _Space, _value_key
from opendp_wgm.engines.polars import (
    bound_key,
    bounded_lists_plan,
    chunk_views,
    fresh_seeds,
    in_threads,
    kernel_jit,
    kernel_threads,
    mostly_above,
    user_ranges,
)
from opendp_wgm.measurements._user_items import user_item_csr


@dataclass(frozen=True)
class _UserItems:
    """Users' item codes in CSR form, and the map back from codes to item values."""

    codes: np.ndarray  # int64 item code of each (user, item) row, users contiguous
    offsets: np.ndarray  # int64, n_users + 1
    n_codes: int  # codes are in [0, n_codes)
    decode: Callable[[np.ndarray], pl.Series]  # codes -> item values (input dtype)


def _item_codes(item: str, dtype: pl.DataType) -> tuple[pl.Expr, bool]:
    """Integer codes of the item column, and whether they increase with the key.

    Strings are coded through Polars' categorical dictionary (hashing, not sorting millions of strings); those
    codes are *not* in key order. Other dtypes are coded by dense rank, whose codes increase with the key. The
    codes depend on other users' rows (first appearance, rank): they only relabel values.
    """
    if dtype == pl.String:
        return pl.col(item).cast(pl.Categorical).to_physical().cast(pl.Int64), False
    return pl.col(item).rank("dense").cast(pl.Int64) - 1, True


def _encode(lf: pl.LazyFrame, space: _Space, dtype: pl.DataType, seeds: tuple[int, ...]) -> tuple[pl.LazyFrame, bool]:
    """Integer codes ``_u`` (user) and ``_x`` (item, :func:`_item_codes`), the item itself as ``_value`` (to decode
    codes), and the user's order key ``_h``, a hash of the user's value under ``seeds``. Returns the plan and
    whether its item codes are in key order.
    """
    user, item = space.user, space.item
    schema = lf.collect_schema()
    u = pl.col(user)
    u = u.cast(pl.Categorical).to_physical() if schema[user] == pl.String else u
    x, in_key_order = _item_codes(item, dtype)
    h = _value_key(user, schema[user]).hash(*seeds)
    return lf.select(_u=u, _x=x, _value=pl.col(item), _h=h), in_key_order


def _coded(codes: np.ndarray, offsets: np.ndarray, values: pl.Series, row_of: np.ndarray) -> _UserItems:
    """:class:`_UserItems` from the rows' item codes and the users' CSR offsets; code ``c`` decodes to
    ``values[row_of[c]]``."""

    def decode(selected: np.ndarray) -> pl.Series:
        return values.gather(row_of[selected])

    n_codes = int(codes.max()) + 1 if codes.size else 0
    return _UserItems(codes=codes, offsets=offsets, n_codes=n_codes, decode=decode)


def _dense_codes(values: pl.Series) -> np.ndarray | None:
    """Integer items within a small range coded as ``value - min`` (no sort, no hash); ``None`` otherwise.

    The codes only index the weight vector, so a few unused codes cost nothing; "small" is at most 4 codes
    per row (or 2^16). The difference is taken in a dtype holding every value and, the range being small,
    every difference (Int8's ``127 - (-128)`` would wrap in Int8).
    """
    low, high = cast("int", values.min()), cast("int", values.max())  # an integer Series without nulls
    if high - low >= max(4 * values.len(), 1 << 16):
        return None
    wide = pl.UInt64 if values.dtype == pl.UInt64 else pl.Int64
    return (values.cast(wide) - pl.Series([low], dtype=wide)).cast(pl.Int64).to_numpy()


def _bounded_csr(
    lf: pl.LazyFrame,
    space: _Space,
    max_contributions: int,
    *,
    key_order: bool,
    seeds: tuple[int, ...] | None = None,
) -> _UserItems:
    """The CSR arrays of Policy Gaussian: Δ0-bounded lists (one row per user), ordered by the user's keyed hash.

    ``seeds``: the bound's secret seed (``None``: fresh, as every release draws it; a test gives one, to compare
    the kept subsets with the kernel's, :mod:`opendp_wgm.kernel.reference`).

    When most users hold more than Δ0 items (the keyed plan's case), without ``key_order``, with Numba and at
    least :data:`_JIT_MIN_ROWS` rows: :func:`_hashed_csr`. Otherwise (and whenever that cannot vouch for its
    arrays) Polars builds the lists; the order (and, for ``key_order``, sorting) is decided on the users' list
    rows — one per user, not one per item — and applied to the flat item codes; the users' offsets are the
    lists' lengths. Both keep the same items for the same seeds, in the same user order.
    """
    user, item = space.user, space.item
    bound_seeds, order_seeds = fresh_seeds() if seeds is None else seeds, fresh_seeds()
    order = _value_key(user, lf.collect_schema()[user]).hash(*order_seeds)
    above = mostly_above(lf, user, max_contributions)  # read once: it also chooses the lists' plan
    if above and not key_order and _numba_installed():
        data = _hashed_csr(lf, space, max_contributions, bound_seeds, order)
        if data is not None:
            return data
    # before coding: the hash key must read values
    lists = bounded_lists_plan(lf, space, max_contributions, bound_seeds, plan="keyed" if above else "split")
    if key_order:
        lists = lists.with_columns(pl.col(item).list.sort())
    collected = lists.select(item, _by=pl.arg_sort_by(order, user)).collect()  # ties (~N²/2^65) by user value
    lengths = collected[item].list.len().to_numpy().astype(np.int64)
    values = collected[item].explode()
    codes, row_of = _value_codes(values, item)
    # users in hash order: the segments of the flat codes permuted, not the lists of values
    by = collected["_by"].to_numpy()
    starts = np.cumsum(lengths) - lengths
    offsets = np.concatenate(([0], np.cumsum(lengths[by]))).astype(np.int64)
    codes = codes[np.repeat(starts[by] - offsets[:-1], lengths[by]) + np.arange(offsets[-1])]
    return _coded(codes, offsets, values, row_of)


def _value_codes(values: pl.Series, item: str) -> tuple[np.ndarray, np.ndarray]:
    """``int64`` codes of ``values`` and a row holding each code (to decode them); codes are a relabelling.

    Integers in a small range: ``value - min`` (:func:`_dense_codes`). With Numba and at least
    :data:`_JIT_MIN_ROWS` values, a hash table (no sort, no string dictionary): of the integers themselves
    (exact), or of a keyed hash of other values, checked exactly against the values (a collision, probability
    ~D²/2^65 for D distinct values, falls back). Otherwise :func:`_item_codes` (Polars).
    """
    codes = _dense_codes(values) if values.dtype.is_integer() and values.len() else None
    if codes is None and values.len() >= max(_JIT_MIN_ROWS, 1) and (kernel := _codes_kernel()) is not None:
        if values.dtype in (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64):
            wide = pl.UInt64 if values.dtype == pl.UInt64 else pl.Int64
            codes, first = kernel(values.cast(wide).to_numpy().view(np.uint64))
            return codes, first
        codes, first = kernel(values.hash(*fresh_seeds()).to_numpy())
        if (values == values.gather(first[codes])).all():
            return codes, first
        codes = None
    if codes is None:
        codes = values.to_frame().select(_item_codes(item, values.dtype)[0])[item].to_numpy()
    codes = codes.astype(np.int64, copy=False)
    row_of = np.zeros(int(codes.max()) + 1 if codes.size else 1, dtype=np.int64)
    row_of[codes] = np.arange(codes.size)  # any row holding the code decodes it
    return codes, row_of


#: below this many rows the Polars plan of :func:`_bounded_csr` (< ~0.1 s) beats importing Numba
_JIT_MIN_ROWS = 200_000


def _hashed_csr(
    lf: pl.LazyFrame, space: _Space, max_contributions: int, bound_seeds: tuple[int, ...], order: pl.Expr
) -> _UserItems | None:
    """:func:`_bounded_csr` without ``key_order``, from per-row hashes in compiled passes (no sort of the rows,
    no per-user lists, no string dictionary); ``None`` when it does not apply.

    Polars computes the runs of equal users (``rle``) and each run's order hash ``order``, and, per row, the key
    of :func:`~opendp_wgm.engines.polars.bounded_lists_plan` (:func:`~opendp_wgm.engines.polars.bound_key`) and a
    hash of the item under fresh seeds; :func:`_bounded_arrays` groups the runs by user hash, keeps each user's
    ``max_contributions`` distinct keys of smallest value and codes the items by hash. Its arrays are those of
    the Polars plan whenever the hashes tell the values apart; that is checked exactly against the values: runs
    merged as one user hold equal users, and every kept row holds its code's item (String items by their Arrow
    views in the kernel, :func:`~opendp_wgm.engines.polars.chunk_views`: exact up to 12 bytes, the pairs of
    longer strings that share a length and 4-byte prefix gathered and compared here; other items by gathering
    every kept row). Two items of
    one user with one key, or two Strings with one code, make the kernel give up; in either case (probability
    ~N²/2^64) ``None`` sends the caller to the Polars plan. A user's items come in ascending key (the order of
    the keyed plan), users in ascending order hash (no two users share one, as checked).
    """
    user, item = space.user, space.item
    schema = lf.collect_schema()
    key = bound_key(lf, space, bound_seeds)
    runs_plan = lf.select(pl.col(user).rle()).unnest(user)  # one row per run of equal users: len, value
    rows_plan = lf.select(item, _k=key, _x=_value_key(item, schema[item]).hash(*fresh_seeds()))
    runs, rows = pl.collect_all([runs_plan, rows_plan])
    kernel = _bounded_kernel() if rows.height >= max(_JIT_MIN_ROWS, 1) else None
    if kernel is None:
        return None
    run_users = runs["value"].rename(user)
    run_start = np.concatenate(([0], np.cumsum(runs["len"].to_numpy()))).astype(np.int64)
    run_hash = run_users.to_frame().select(order).to_series().to_numpy()
    items = rows[item]
    views = chunk_views(items) or []  # none: every kept row is gathered and compared
    data = kernel(run_start, run_hash, rows["_k"].to_numpy(), rows["_x"].to_numpy(), views, max_contributions)
    if data is None or not (run_users == run_users.gather(data.same_user)).all():
        return None
    # every kept row holds its code's item: the pairs the kernel's views could not vouch for, compared whole
    if not (items.gather(data.compare[:, 0]) == items.gather(data.compare[:, 1])).all():
        return None
    values = items.gather(data.first_rows)  # each code's item
    return _UserItems(codes=data.codes, offsets=data.offsets, n_codes=values.len(), decode=values.gather)


def _view_pieces(
    views: list[np.ndarray], user_start: np.ndarray, rows: np.ndarray, first: int, stop: int
) -> list[tuple[np.ndarray, int, int, int]]:
    """The users ``first <= u < stop`` cut into pieces ``(views, base, first, stop)`` whose rows' views are
    ``views[r - base]``: runs of users within one chunk read it where it is; a user across chunks (or, users not in
    runs, all of them) reads a joined copy of the views it needs. No views: one piece of an empty array."""
    if not views:
        none = np.zeros((0, 2), dtype=np.uint64)
        none.flags.writeable = False  # the type of the views (read-only Arrow buffers)
        return [(none, 0, first, stop)]
    if first == stop:
        return []
    if rows.size:  # users not in runs: their rows anywhere
        joined = np.concatenate(views) if len(views) > 1 else views[0]
        return [(joined, 0, first, stop)]
    chunk_start = np.cumsum([0] + [chunk.shape[0] for chunk in views])
    users = np.arange(first, stop)
    low = np.searchsorted(chunk_start, user_start[first:stop], side="right") - 1  # the chunk of each first row
    high = np.searchsorted(chunk_start, user_start[first + 1 : stop + 1] - 1, side="right") - 1  # of each last row
    pieces = []
    cuts = np.flatnonzero(np.diff(low) != 0) + 1  # runs of users starting in one chunk
    for a, b in itertools.pairwise([0, *cuts.tolist(), users.size]):
        c = int(low[a])
        across = np.flatnonzero(high[a:b] != c)  # at most the last user of the run crosses into the next chunks
        end = a + (int(across[0]) if across.size else b - a)
        if a < end:
            pieces.append((views[c], int(chunk_start[c]), first + a, first + end))
        for u in range(first + end, first + b):
            lo, hi = int(user_start[u]), int(user_start[u + 1])
            chunks = range(c, int(high[u - first]) + 1)
            parts = [views[j][max(lo - chunk_start[j], 0) : hi - chunk_start[j]] for j in chunks]
            pieces.append((np.concatenate(parts), lo, u, u + 1))
    return pieces


def _bounded_arrays(
    run_start: np.ndarray,
    run_hash: np.ndarray,
    key: np.ndarray,
    item_hash: np.ndarray,
    views: list[np.ndarray],
    max_contributions: int,
) -> _BoundedArrays | None:
    """Policy Gaussian's CSR arrays from per-row hashes (compiled, :mod:`._policy_jit`): users by ascending user
    hash, each with its ``max_contributions`` distinct items of smallest ``key``, in ascending ``key``; items coded
    by ``item_hash`` in order of first appearance in the arrays. ``None`` when two items of one user share a key,
    or two Strings a hash (or a 64-bit collision the views see).

    The rows come in runs of equal users (``rle``: run ``j`` is rows ``run_start[j]:run_start[j + 1]``, of user
    hash ``run_hash[j]``); runs with one hash are one user (:func:`~._policy_jit.group_runs`; the caller checks
    their values). Passes in threads over ranges of about equal work (the compiled functions release the GIL):

    1. :func:`~._policy_jit.keep_smallest` bounds the users, each range reading its users' rows in order (their
       keys, item hashes and String views, ``views``: one array per chunk, :func:`_view_pieces`) and
       writing their kept items to slots laid out in the users' final order (room for ``min(rows, Δ0)`` each);
    2. :func:`~._policy_jit.code_slots` codes each range of the final order by a table of its own, comparing each
       String with its code's first one by their views; :func:`~._policy_jit.merge_codes` numbers the ranges'
       codes as one pass would; :func:`~._policy_jit.relabel` writes the arrays.

    The arrays are those of one sequential pass over the users in their final order, whatever the threads.
    Reading each user's rows in order (never a kept row out of order) and the slots in order keeps the passes
    off the memory latency.

    Returns
    -------
    _BoundedArrays
        With ``compare``: pairs of rows whose items the caller must compare (longer Strings whose views are
        equal; without views, every kept row and its code's first).
    """
    jit = _jit()
    first_run, user_start, rows, same_user = jit.group_runs(run_start, run_hash)
    n_users, n = first_run.size, int(run_start[-1])
    order = np.argsort(run_hash[first_run])  # users in ascending hash (distinct: equal hashes are one user)
    room = np.minimum(np.diff(user_start), max_contributions)
    slot = np.empty(n_users, dtype=np.int64)  # each user's first slot, the users in final order
    slot[order] = np.cumsum(room[order]) - room[order]
    slots = int(room.sum())
    count = np.empty(n_users, dtype=np.int64)
    # allocated by NumPy (large pages)
    slot_rows, slot_hash = np.empty(slots, dtype=np.int64), np.empty(slots, dtype=np.uint64)
    slot_views = np.empty((slots if views else 0, 2), dtype=np.uint64)
    threads = kernel_threads(n, cast("ModuleType", kernel_jit()))  # Numba is installed: this runs compiled code
    users = user_ranges(user_start, threads)
    ok = np.ones(threads, dtype=np.bool_)

    def keep(k: int, first: int, stop: int) -> None:
        for chunk, base, a, b in _view_pieces(views, user_start, rows, first, stop):
            ok[k] &= jit.keep_smallest(
                user_start, rows, key, item_hash, chunk, base, a, b, max_contributions,
                slot, count, slot_rows, slot_hash, slot_views,
            )

    in_threads(users, keep)
    empty = np.zeros(0, dtype=np.int64)
    if not ok.all():
        return None
    offsets = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(count[order], out=offsets[1:])
    size = int(offsets[-1])
    pairs = np.empty((slots if views else 0, 2), dtype=np.int64)  # pages written only where pairs are
    positions = user_ranges(offsets, threads)
    coded: list[tuple[bool, np.ndarray, np.ndarray, int]] = [(True, empty, empty, 0)] * threads

    def code(k: int, first: int, stop: int) -> None:
        coded[k] = jit.code_slots(order, slot, count, slot_hash, slot_views, first, stop, pairs)

    in_threads(positions, code)
    if not all(c[0] for c in coded):
        return None
    firsts = np.concatenate([c[1] for c in coded])
    done, final, first, merged = jit.merge_codes(np.concatenate([c[2] for c in coded]), slot_views, firsts)
    if not done:
        return None
    local = slot_hash.view(np.int64)  # code_slots wrote the local codes there
    bases = np.cumsum([0] + [c[1].size for c in coded])
    first_rows = slot_rows[first]  # merge_codes gives each code's first slot
    if views:  # the slots of long strings to compare: each range's from its first slot on, and the merge's
        at = [slot[order[a]] if a < n_users else 0 for a in positions[:-1]]
        pieces = [pairs[a : a + c[3]] for a, c in zip(at, coded, strict=True)]
        compare = slot_rows[np.concatenate([*pieces, merged])]
        # the codes over the slots' rows, no longer read (no fresh pages): each range reads only its local codes
        codes, kept = slot_rows[:size], empty
    else:  # every kept row against its code's first
        codes, kept = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)

    def write(k: int, first: int, stop: int) -> None:
        jit.relabel(order, slot, offsets, first, stop, local, final, bases[k], slot_rows, codes, kept)

    in_threads(positions, write)
    if not views:
        compare = np.stack((kept, first_rows[codes]), axis=1)
    return _BoundedArrays(codes, offsets, first_rows, same_user, compare)


@dataclass(frozen=True)
class _BoundedArrays:
    """:func:`_bounded_arrays`' result: the CSR arrays, the row of each code's first entry, for each run the first
    run of its user, and pairs of rows whose items the caller must compare (equal hashes, not vouched for by their
    Arrow views)."""

    codes: np.ndarray
    offsets: np.ndarray
    first_rows: np.ndarray
    same_user: np.ndarray
    compare: np.ndarray


def _csr(
    frame: pl.DataFrame | pl.LazyFrame,
    space: _Space,
    *,
    max_contributions: int | None,
    key_order: bool,
    priority_order: bool,
) -> _UserItems:
    """Build the CSR arrays of a release: users in a fresh random order, items coded.

    - ``max_contributions``: dedup, then a uniform random subset of at most Δ0 items per user (WGM's
      :func:`~opendp_wgm.engines.polars.bounded_lists_plan`, on the values); ``None`` keeps every row (Policy
      Greedy).
    - ``key_order``: within a user, items by ascending key (the reference "L1" rule).
    - ``priority_order``: distinct items by multiplicity in the user's rows, descending, ties by first
      occurrence (Policy Greedy; needs ``max_contributions=None``).

    The user order is the order of a keyed hash of the user's value under a secret 256-bit seed drawn here,
    i.e. a uniformly random order drawn at call time; ties (probability ~N²/2^65) are split by the user (code)
    so a user's rows stay contiguous. Which items a user keeps and where it comes in the order are functions of
    its own rows and the seeds only; the integer codes are a relabelling.
    """
    lf = _prepare_frame(frame, space)
    if max_contributions is not None and not priority_order:
        return _bounded_csr(lf, space, max_contributions, key_order=key_order)
    coded, in_key_order = _encode(lf, space, lf.collect_schema()[space.item], fresh_seeds())
    descending: bool | list[bool]
    if priority_order:
        plan = coded.with_row_index("_row").group_by("_u", "_x").agg(
            _m=pl.len(), _first=pl.col("_row").min(), _h=pl.col("_h").first()
        )
        sort_by, descending = ["_h", "_u", "_m", "_first"], [False, False, True, False]
    else:
        plan = coded.select("_u", "_x", "_h").unique()
        sort_by, descending = ["_h", "_u"] + (["_x"] if key_order and in_key_order else []), False
    rows_plan = plan.sort(sort_by, descending=descending).select("_u", "_x")
    dictionary_plan = coded.select("_x", "_value").unique(subset="_x")  # code -> item, on distinct codes only
    rows, dictionary = pl.collect_all([rows_plan, dictionary_plan])
    codes = rows["_x"].to_numpy().astype(np.int64, copy=False)
    n_codes = int(codes.max()) + 1 if codes.size else 0
    row_of = np.full(max(n_codes, 1), -1, dtype=np.int64)  # code -> its row of the dictionary
    known = dictionary["_x"].to_numpy()
    keep = known < n_codes
    row_of[known[keep]] = np.flatnonzero(keep)
    offsets = user_item_csr(rows["_u"].to_numpy(), codes, n_codes).offsets
    data = _coded(codes, offsets, dictionary["_value"].rename(space.item), row_of)
    if key_order and not in_key_order and codes.size:
        # dictionary codes are not in key order: sort each user's items by the rank of their key
        present = np.unique(codes)
        key_rank = np.zeros(n_codes, dtype=np.int64)
        key_rank[present[data.decode(present).arg_sort().to_numpy()]] = np.arange(present.size)
        segment = np.repeat(np.arange(data.offsets.size - 1), np.diff(data.offsets))
        data = replace(data, codes=codes[np.lexsort((key_rank[codes], segment))])
    return data


#: the compiled hash-table coding's signature: values (uint64) -> (codes, first position of each code)
_CodesKernel = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
#: the compiled CSR builder's signature (:func:`_bounded_arrays`)
_BoundedKernel = Callable[..., "_BoundedArrays | None"]


@lru_cache(maxsize=1)
def _jit() -> Any:
    """The compiled helpers' module (``opendp-wgm[fast]``, Numba), or ``None`` when Numba is not installed.

    Imported on first use, not with the package (importing Numba takes a few tenths of a second).
    """
    try:
        from opendp_wgm.measurements.baselines import _policy_jit
    except ImportError:
        return None
    return _policy_jit


def _bounded_kernel() -> _BoundedKernel | None:
    """The compiled CSR builder of :func:`_hashed_csr` (:func:`_bounded_arrays`), or ``None`` without Numba."""
    return None if _jit() is None else _bounded_arrays


def _codes_kernel() -> _CodesKernel | None:
    """The compiled hash-table coding of :func:`_value_codes`, or ``None`` without Numba."""
    module = _jit()
    return None if module is None else cast("_CodesKernel", module.first_appearance_codes)


def _numba_installed() -> bool:
    """Whether Numba can be imported, without importing it (a few tenths of a second)."""
    return importlib.util.find_spec("numba") is not None
