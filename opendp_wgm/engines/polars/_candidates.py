"""Stage 2's steps on a public candidate list: the candidates cast exactly to the data's item dtype, the
distinct (user, candidate) pairs and their distinct-user counts, on the compiled step's codes or runs of the same
release when it left them (:class:`~opendp_wgm.engines.polars._prepared.Prepared`), else by the Polars plans."""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from numpy.typing import NDArray

from opendp_wgm._spaces import _Space
from opendp_wgm.engines.polars._compiled_steps import (
    _even_ranges,
    _user_runs,
    hashed_jit,
    in_threads,
    kernel_jit,
    kernel_threads,
    peel_jit,
    user_ranges,
)
from opendp_wgm.engines.polars._prepared import (
    Prepared,
    _as_prepared,
    _shared_codes,
    _shared_runs,
    _shared_user_codes,
)

if TYPE_CHECKING:
    from polars._typing import PolarsDataType


__all__ = [
    "candidate_counts",
    "candidate_csr",
    "candidate_pairs",
    "cast_candidates",
    "chunk_views",
    "holders_by_item",
    "item_counts",
    "run_offsets",
    "string_views",
]


_TEXT_DTYPES = (pl.String, pl.Categorical, pl.Enum)


def cast_candidates(candidates: pl.Series, dtype: pl.DataType) -> pl.Series:
    """The public candidates cast to the data's item dtype, exactly: every candidate must survive the cast and
    the cast back unchanged, and stay distinct.

    A lossy cast would let two candidates name one item (floats 1.2 and 1.7 on an Int64 column both become 1,
    and that item would be released at two ranks) or compare a candidate with an item it is not ("07" and 7).
    Text and numbers never match each other. A composite key's candidates (Struct) are cast field by field,
    by name. Raises before any data is read or any noise drawn.
    """
    cast = _cast_exactly(candidates, dtype)
    if cast.is_duplicated().any():
        examples = candidates.filter(cast.is_duplicated()).head(4).to_list()
        msg = f"`candidates` must stay distinct in the item column's type {dtype} (found {examples})"
        raise ValueError(msg)
    return cast


def _cast_exactly(candidates: pl.Series, dtype: PolarsDataType) -> pl.Series:
    """:func:`cast_candidates` without the distinctness check (a Struct's fields need not be distinct)."""
    source = candidates.dtype
    if isinstance(dtype, pl.Struct) and isinstance(source, pl.Struct):
        names, given = [f.name for f in dtype.fields], [f.name for f in source.fields]
        if sorted(names) != sorted(given):
            msg = f"`candidates` must have the key columns {names} (found {given})"
            raise TypeError(msg)
        fields = candidates.struct.unnest()
        return pl.DataFrame([_cast_exactly(fields[f.name], f.dtype) for f in dtype.fields]).to_struct(candidates.name)
    if source == dtype and not isinstance(dtype, (pl.Categorical, pl.Enum)):
        return candidates  # the identity (a two-stage release's candidates are in the data's dtype already)
    text_source, text_target = isinstance(source, _TEXT_DTYPES), isinstance(dtype, _TEXT_DTYPES)
    if source != pl.Null and candidates.len() and (text_source != text_target):
        msg = f"`candidates` must have the item column's type {dtype} (found {source})"
        raise TypeError(msg)
    try:
        cast = candidates.cast(dtype, strict=True)
        back = cast.cast(source, strict=True) if source != pl.Null else candidates
    except pl.exceptions.PolarsError as error:
        msg = f"`candidates` must be representable in the item column's type {dtype} (found {source}: {error})"
        raise TypeError(msg) from None
    changed = (back != candidates) | back.is_null()
    if changed.any():
        examples = candidates.filter(changed).head(3).to_list()
        msg = f"`candidates` must be exactly representable in the item column's type {dtype} (found {examples})"
        raise ValueError(msg)
    return cast


#: Columns of :func:`candidate_pairs`' plan (private names: they never reach a release).
_POSITION, _USER_CODE, _PAIR = "__opendp_wgm_position__", "__opendp_wgm_user__", "__opendp_wgm_pair__"


def _dense_user_code(user: str, dtype: pl.DataType) -> pl.Expr | None:
    """The user key as dense ``UInt32`` codes (one per distinct value, exactly), or ``None`` for other dtypes.

    Text goes through a fresh, call-local category map (no global string cache grows), integers through a dense
    rank. The codes only name users inside one count: they depend on the other rows, so they never reach a
    hash, a bound or a release. Other dtypes (floats, structs, ...) keep the group-by on the value itself.
    """
    if dtype == pl.String:
        return pl.col(user).cast(pl.Categorical(pl.Categories.random())).to_physical()
    if dtype.is_integer():
        return pl.col(user).rank("dense")
    return None


def _candidate_rows(data: Prepared, space: _Space, items: pl.Series) -> pl.DataFrame:
    """The user key and the candidate position (column :data:`_POSITION`) of every row whose item is a candidate,
    in row order. Text items look up an ``Enum`` whose categories are the candidates (exact string matching: the
    category's index is the position; about twice as fast as ``replace_strict`` on imdb_50k's 5.5e6 candidate
    rows), other dtypes ``replace_strict``.

    A plan that scans a file is filtered first (``is_in``: the filter reaches the scan, which then decodes the
    candidates' rows only), then each kept row looked up. A frame :func:`collect_once` collected is in memory:
    text and integer items are looked up once per row, null where the item is no candidate (a non-strict cast; a
    null default), and those rows dropped: a quarter less CPU than the filter and the second lookup (imdb_50k:
    0.19 s against 0.25 s)."""
    item = pl.col(space.item)
    lf, once = data.lf, data.in_memory and _looked_up_once(items)
    position = _position(space, items, once=once)
    if once:
        rows = lf.select(pl.col(space.user), position.alias(_POSITION)).filter(pl.col(_POSITION).is_not_null())
    else:
        rows = lf.filter(item.is_in(items.implode())).select(pl.col(space.user), position.alias(_POSITION))
    return rows.collect()


def _looked_up_once(items: pl.Series) -> bool:
    """Whether :func:`_position` looks up candidates of this dtype once per row (text and integers)."""
    return items.dtype == pl.String or items.dtype.is_integer()


def _position(space: _Space, items: pl.Series, *, once: bool) -> pl.Expr:
    """The candidate position of a row's item: ``once``, null where it is no candidate (text and integers:
    :func:`_looked_up_once`); otherwise strict (the rows are filtered to the candidates first)."""
    item = pl.col(space.item)
    if items.dtype == pl.String:
        return item.cast(pl.Enum(items), strict=not once).to_physical()
    positions = pl.int_range(items.len(), eager=True, dtype=pl.UInt32)
    return item.replace_strict(items, positions, default=None) if once else item.replace_strict(items, positions)





def _hashed_pairs(rows: pl.LazyFrame, user: str, dtype: pl.DataType, *, contiguous: bool) -> pl.DataFrame:
    """:func:`candidate_pairs`' (user code, position) frame by hashing the user key."""
    code = None if contiguous else _dense_user_code(user, dtype)
    if code is None:
        # one hash pass over the users: dedup per user and dense user codes, each user's pairs contiguous
        by_user = rows.group_by(user).agg(pl.col(_POSITION).unique()).with_row_index(_USER_CODE)
        return by_user.explode(_POSITION).select(_USER_CODE, _POSITION).collect()
    pair = (code.cast(pl.UInt64) * 2**32 + pl.col(_POSITION).cast(pl.UInt64)).alias(_PAIR)
    split = ((pl.col(_PAIR) // 2**32).alias(_USER_CODE), (pl.col(_PAIR) % 2**32).alias(_POSITION))
    return rows.select(pair.unique()).select(*split).collect()




@dataclass(frozen=True)
class _Pairs:
    """Distinct (user, candidate) pairs: the candidate position of each pair (int32: positions of a candidate
    list, half the bytes of int64 for user peeling's CSR to write and read), and its user as a code per pair
    (``users``) or, each user's pairs adjacent and users coded ``0, 1, ...``, as CSR offsets (``offsets``). The
    other form is derived only when a caller reads it: the counts read the positions only."""

    positions: NDArray[np.int32]
    users: NDArray[np.int64] | None = None
    offsets: NDArray[np.int64] | None = None

    def user_codes(self) -> NDArray[np.int64]:
        if self.users is not None:
            return self.users
        if self.offsets is None:  # pragma: no cover - a bug guard: every path gives one of the two
            raise AssertionError("pairs without their users")
        return np.repeat(np.arange(self.offsets.size - 1, dtype=np.int64), np.diff(self.offsets))

    def user_offsets(self) -> NDArray[np.int64]:
        """CSR offsets (each user's pairs adjacent: built so, or ``contiguous`` asked of the Polars plans)."""
        return self.offsets if self.offsets is not None else run_offsets(self.user_codes())


def _compiled_candidate_pairs(data: Prepared, items: pl.Series) -> _Pairs | None:
    """:func:`candidate_pairs` on the codes the WGM's compiled step made of ``data``'s rows (:attr:`Prepared.coding`),
    when it ran on this frame: the candidates' rows by one compiled pass
    (:func:`opendp_wgm.engines._peel_jit.candidate_rows`), then deduplicated per user by the compiled step's
    counting sort (:func:`opendp_wgm.engines._kernel_jit.distinct_items_by_user`, linear passes; each user's
    candidates in order of first row), as CSR offsets; users holding none are dropped. The data is not read or
    coded again. ``None`` (the Polars plans) otherwise, or without Numba: coding the candidates' rows afresh cost
    more CPU than the Polars plans on imdb_50k (0.47 s against 0.38 s for 5.5·10^6 rows of String users; its
    stage 1 takes the Polars plans)."""
    jit, peel, coded = kernel_jit(), peel_jit(), _shared_codes(data)
    if jit is None or peel is None or coded is None:
        return None
    users, positions = peel.candidate_rows(coded.users, coded.items, coded.positions_of(items))
    held, start = jit.distinct_items_by_user(users, positions, coded.n_users, items.len())
    ends = start[1:]
    offsets = np.concatenate((start[:1], ends[ends > start[:-1]]))  # the users holding a candidate
    return _Pairs(held, offsets=offsets)  # int32 (distinct_items_by_user)


def _user_codes_candidate_pairs(data: Prepared, items: pl.Series) -> _Pairs | None:
    """:func:`candidate_pairs` on each user's distinct items the WGM's ``compiled-hashed`` plan left in ``data``
    (:attr:`Prepared.coding`, :class:`~opendp_wgm.engines.polars._prepared._UserCodes`): one compiled pass over
    them (:func:`opendp_wgm.engines._hashed_jit.user_candidates`) keeps the candidates, as CSR arrays (users
    holding none dropped). The rows are not read, coded, sorted or deduplicated again. ``None`` (the other paths)
    where that plan left nothing, or without Numba."""
    hashed, coded = hashed_jit(), _shared_user_codes(data)
    if hashed is None or coded is None:
        return None
    positions, offsets = hashed.user_candidates(coded.held, coded.start, coded.distinct, coded.positions_of(items))
    return _Pairs(positions, offsets=offsets)  # int32 (user_candidates)


def run_offsets(users: NDArray[np.integer]) -> NDArray[np.int64]:
    """The offsets of the runs of equal adjacent values of ``users`` (``runs + 1`` of them, from 0 to the length):
    CSR offsets of rows whose users are contiguous."""
    starts = np.flatnonzero(np.concatenate(([True], users[1:] != users[:-1]))) if users.size else users[:0]
    return np.concatenate((starts, [users.size])).astype(np.int64)


def _polars_candidate_pairs(data: Prepared, space: _Space, items: pl.Series, *, contiguous: bool) -> _Pairs:
    """:func:`candidate_pairs` by the Polars plans (the rows read again)."""
    user = space.user
    rows = _candidate_rows(data, space, items)
    runs = _user_runs(rows.get_column(user))
    if runs is None:
        pairs = _hashed_pairs(rows.lazy(), user, rows.schema[user], contiguous=contiguous)
    elif (jit := kernel_jit()) is not None:  # each run's repeats dropped by the compiled step's marker pass
        n_users = int(runs[-1]) + 1 if runs.size else 0
        held, start = jit.distinct_items_by_user(
            runs, rows.get_column(_POSITION).to_numpy().astype(np.int32), n_users, items.len()
        )
        return _Pairs(held, offsets=start)  # int32; every run holds a candidate
    else:
        codes = pl.Series(_USER_CODE, runs).set_sorted()  # sorted: the group-by slices the runs
        coded = pl.DataFrame([codes, rows.get_column(_POSITION)])
        by_run = coded.lazy().group_by(_USER_CODE, maintain_order=True)
        pairs = by_run.agg(pl.col(_POSITION).unique()).explode(_POSITION).collect()
    users, positions = pairs.get_column(_USER_CODE), pairs.get_column(_POSITION)
    return _Pairs(positions.to_numpy().astype(np.int32), users=users.to_numpy().astype(np.int64))


def string_views(column: pl.Series) -> NDArray[np.uint64] | None:
    """The 16-byte Arrow views of a String column's values, two words per row, without a copy (Arrow's
    ``string_view`` layout, which Polars' strings use), or ``None`` where they cannot be read so (no ``pyarrow``,
    or an export of another layout, or a big-endian machine, where the words of a view are not read as
    :func:`opendp_wgm.engines._peel_jit.view_positions` reads them). A column of several chunks is exported
    whole: a copy."""
    if sys.byteorder != "little":  # pragma: no cover - the views' words are read little-endian
        return None
    try:
        array = column.to_arrow(compat_level=pl.CompatLevel.newest())
    except ImportError:  # pyarrow is an optional dependency
        return None
    if str(array.type) != "string_view":  # pragma: no cover - Polars' strings are views
        return None
    words = np.frombuffer(array.buffers()[1], dtype=np.uint64).reshape(-1, 2)
    return words[array.offset : array.offset + len(array)]


def chunk_views(column: pl.Series) -> list[NDArray[np.uint64]] | None:
    """:func:`string_views` of each chunk of a String column without nulls (no copy), or ``None`` for another
    dtype, nulls, or a chunk whose views cannot be read so."""
    if column.dtype != pl.String or column.null_count():
        return None
    read = [string_views(chunk) for chunk in column.get_chunks()]
    chunks = [views for views in read if views is not None]
    return chunks if len(chunks) == len(read) else None


def _view_positions(
    lf: pl.LazyFrame, space: _Space, items: pl.Series, threads: int, peel: ModuleType
) -> NDArray[np.int32] | None:
    """The candidate position of every row's String item (-1: no candidate), exactly, from the column's Arrow
    views (:func:`chunk_views`: no copy) by a compiled table of the candidates' views
    (:func:`opendp_wgm.engines._peel_jit.view_positions`, in ``threads`` ranges of rows): a string of up to 12
    bytes is held whole in its view, and a longer one differs from every candidate of another length or 4-byte
    prefix; the few rows left (a longer string sharing both with a candidate) are looked up by :func:`_position`.
    Half the wall time of the ``Enum`` cast on imdb_50k's 7·10^6 rows. ``None`` (the caller casts) for other
    dtypes, nulls, or without the views."""
    if items.dtype != pl.String:
        return None
    column = lf.select(space.item).collect().to_series()
    candidates, chunks = string_views(items), chunk_views(column)
    if candidates is None or chunks is None:
        return None
    table = peel.view_table(candidates, max(4, 2 + (items.len() - 1).bit_length()))  # at most a quarter full
    rows = column.len()
    looked_up = np.empty(rows, dtype=np.int32)  # allocated by NumPy (large pages)
    unsure = np.empty(rows, dtype=np.int32)  # pages written only where rows are unsure
    found: list[tuple[int, int]] = []
    firsts = np.cumsum([0] + [views.shape[0] for views in chunks])

    def look_up(_: int, first: int, stop: int) -> None:
        for views, low, high in zip(chunks, firsts[:-1], firsts[1:], strict=True):
            a, b = max(first, int(low)), min(stop, int(high))
            if a < b:  # each piece writes its unsure rows within its own rows' slots
                found.append((a, peel.view_positions(views, a - low, b - low, *table, looked_up, a, unsure)))

    in_threads(_even_ranges(rows, threads), look_up)
    if any(n for _, n in found):
        at = np.concatenate([unsure[a : a + n] for a, n in found])
        position = _position(space, items, once=True).cast(pl.Int32).fill_null(-1)
        looked_up[at] = column.gather(at).to_frame().select(position).to_series().to_numpy()
    return looked_up


def _run_candidate_pairs(data: Prepared, space: _Space, items: pl.Series) -> _Pairs | None:
    """:func:`candidate_pairs` on the users' runs the WGM's route on runs found in ``data`` (:attr:`Prepared.coding`,
    :class:`_UserRuns`): one lookup of every row's candidate position (no user column, no filtered copy of the
    rows, no second :func:`_user_runs`; text items by their Arrow views, :func:`_view_positions`, else in slices
    cut at users' boundaries and collected at once), then the users of each slice deduplicated by a compiled
    marker pass (:func:`opendp_wgm.engines._peel_jit.run_candidates`, one thread per slice, on the slice's own
    lookup: no joined copy of the rows' positions) into one int32 array, as CSR arrays; users holding none are
    dropped. ``None`` (the other paths) where that route left no runs, or without Numba."""
    runs, peel, lf = _shared_runs(data), peel_jit(), data.lf
    jit = kernel_jit()
    if runs is None or peel is None or jit is None or not _looked_up_once(items):
        return None
    start = runs.start
    rows, n_users = int(start[-1]), start.size - 1
    threads = kernel_threads(rows, jit)
    users = user_ranges(start, threads)
    bounds = start[users]  # each slice holds whole users
    held = _view_positions(lf, space, items, threads, peel)
    if held is not None:  # deduplicated in place: a row is read before any write reaches its slot
        lookups = [held[a:b] for a, b in itertools.pairwise(bounds)]
    else:  # one lookup per row, in slices collected at once: a cast of one column runs in one thread
        position = _position(space, items, once=True).cast(pl.Int32).fill_null(-1)
        plans = [lf.slice(int(a), int(b - a)).select(position) for a, b in itertools.pairwise(bounds)]
        lookups = [part.to_series().to_numpy() for part in pl.collect_all(plans)]
        held = np.empty(rows, dtype=np.int32)  # allocated by NumPy (large pages), each slice's pairs from its first row
    counts = np.empty(n_users, dtype=np.int64)
    ends = bounds[1:].copy()

    def deduplicate(k: int, first: int, stop: int) -> None:
        ends[k] = peel.run_candidates(start, lookups[k], items.len(), first, stop, held, bounds[k], counts)

    in_threads(users, deduplicate)
    at = int(ends[0])
    for k in range(1, users.size - 1):  # one move per slice (as many as threads): the pairs made contiguous
        size = int(ends[k] - bounds[k])
        held[at : at + size] = held[bounds[k] : ends[k]]
        at += size
    offsets = np.concatenate(([0], np.cumsum(counts[counts > 0]))).astype(np.int64)
    return _Pairs(held[:at], offsets=offsets)


def _candidate_pairs(
    lf: pl.LazyFrame | Prepared, space: _Space, items: pl.Series, *, contiguous: bool
) -> _Pairs:
    data = _as_prepared(lf)
    compiled = _compiled_candidate_pairs(data, items)
    if compiled is None:
        compiled = _user_codes_candidate_pairs(data, items)
    if compiled is None:
        compiled = _run_candidate_pairs(data, space, items)
    return _polars_candidate_pairs(data, space, items, contiguous=contiguous) if compiled is None else compiled


def candidate_pairs(
    lf: pl.LazyFrame | Prepared, space: _Space, items: pl.Series, *, contiguous: bool = False
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The distinct (user, candidate) pairs of a prepared frame (a plan, or the release's :class:`Prepared`): a
    user code and a candidate position per pair.

    ``items`` are the candidates, already in the data's item dtype (:func:`cast_candidates`); rows of other
    items are dropped first (a filter that reaches a file scan) and the frame is read once
    (:func:`_candidate_rows`). Users are coded densely. Both stage-2 counts read these pairs: distinct-user
    counts (:func:`candidate_counts`) and the coverage state of user peeling (:func:`candidate_csr`).

    When each user's candidate rows are adjacent (checked by :func:`_user_runs`: the public data sets, written
    user by user), the run index is the user code, and each user's positions are deduplicated in one pass with a
    marker per candidate (the compiled step's :func:`~opendp_wgm.engines._kernel_jit.distinct_items_by_user`;
    without Numba, one ``group_by`` on the run index, which slices the sorted runs): no hash of the user key, no
    hash of pairs (``docs/engines.md``). The pairs then come user by user, coded ``0, 1, ...``. Otherwise, with
    ``contiguous`` (the CSR of :mod:`opendp_wgm.measurements._user_items` needs each user's pairs adjacent) one
    group-by on the user key's value gives that; without it, a string or integer user key is coded once and the
    pairs deduplicated as one ``UInt64`` column; any other key takes the group-by. Where the WGM's compiled step
    coded ``lf`` in the same release (left in :attr:`Prepared.coding`), its codes are read instead
    (:func:`_compiled_candidate_pairs`: users grouped and coded ``0, 1, ...``; no read of the rows), or each user's
    distinct items its ``compiled-hashed`` plan left (:func:`_user_codes_candidate_pairs`); where its keyed
    route found each user's rows in one run, those runs are read and only the items looked up
    (:func:`_run_candidate_pairs`). Every path gives the same set of pairs, up to the naming of users.
    """
    pairs = _candidate_pairs(lf, space, items, contiguous=contiguous)
    return pairs.user_codes(), pairs.positions.astype(np.int64)


def candidate_csr(
    lf: pl.LazyFrame | Prepared, space: _Space, items: pl.Series
) -> tuple[NDArray[np.int64], NDArray[np.int32]]:
    """:func:`candidate_pairs` as CSR arrays: user ``u`` holds the candidates ``positions[offsets[u]:offsets[u + 1]]``
    (distinct, int32; only users holding one). User peeling's coverage state reads it
    (:func:`opendp_wgm.measurements._user_items.csr_of_offsets`); the compiled steps give these arrays directly,
    with no user code per pair."""
    pairs = _candidate_pairs(lf, space, items, contiguous=True)
    return pairs.user_offsets(), pairs.positions


def holders_by_item(
    items: NDArray[np.integer], offsets: NDArray[np.int64], n_items: int
) -> tuple[NDArray[np.int32], NDArray[np.int64]] | None:
    """The transpose of CSR rows (user ``u`` holds ``items[offsets[u]:offsets[u + 1]]``): item ``x`` is held by the
    users ``holders[start[x]:start[x + 1]]`` (int32), ascending. A counting sort by the compiled step, in threads
    over ranges of users holding about as many pairs:
    each counts its pairs' items, then places its users after the previous ranges' holders of each item (the
    cursors of :func:`~opendp_wgm.engines._kernel_jit.user_cursors`), so the holders come out as in one pass.
    ``None`` without Numba."""
    jit = kernel_jit()
    if jit is None:
        return None
    pairs = items.size
    users = user_ranges(offsets, kernel_threads(pairs, jit))
    counts = np.zeros((users.size - 1, n_items), dtype=np.int64)
    in_threads(users, lambda k, first, stop: jit.count_users(items, 0, offsets[first], offsets[stop], counts[k]))
    start = np.empty(n_items + 1, dtype=np.int64)
    jit.user_cursors(counts, start)  # by item: each range's first slot of each item
    holders = np.empty(pairs, dtype=np.int32)  # allocated by NumPy (large pages); users below 2^31
    in_threads(users, lambda k, first, stop: jit.place_holders(items, offsets, first, stop, counts[k], holders))
    return holders, start


def candidate_counts(lf: pl.LazyFrame | Prepared, space: _Space, candidates: pl.Series) -> NDArray[np.int64]:
    """Distinct-user counts of each candidate on a prepared frame (a plan, or the release's :class:`Prepared`), in
    the candidates' order (int64; 0 for absent items)."""
    if candidates.len() == 0:
        return np.zeros(0, dtype=np.int64)
    # cast the public list to the data's dtype (never the data to the list's), exactly
    schema = _as_prepared(lf).lf.collect_schema()
    return item_counts(lf, space, cast_candidates(candidates, schema[space.item]))


def item_counts(lf: pl.LazyFrame | Prepared, space: _Space, items: pl.Series) -> NDArray[np.int64]:
    """:func:`candidate_counts` of candidates already cast to the data's item dtype (:func:`cast_candidates`: a
    caller that cast them for its release does not cast them again)."""
    if items.len() == 0:
        return np.zeros(0, dtype=np.int64)
    coded = _shared_user_codes(_as_prepared(lf))
    if coded is not None:  # the compiled-hashed plan counted each item's holders: read them, no pairs
        position_of = coded.positions_of(items)
        counts = np.zeros(items.len(), dtype=np.int64)
        held = position_of >= 0
        counts[position_of[held]] = coded.holders[held]
        return counts
    positions = _candidate_pairs(lf, space, items, contiguous=False).positions  # no user code per pair
    return np.bincount(positions, minlength=items.len()).astype(np.int64)
