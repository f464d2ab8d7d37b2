"""The lattice histogram by the compiled steps (Numba): on coded columns (:func:`coded_histogram`), on users'
runs (:func:`runs_histogram`), and on the distinct pairs coded once for several bounds (:class:`CodedPairs`)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from numpy.typing import NDArray

from opendp_wgm._spaces import _Space
from opendp_wgm._validation import _Engine
from opendp_wgm.engines.polars._compiled_steps import (
    _code_expr,
    _codes,
    _Coding,
    _coding,
    _even_ranges,
    _text_codes,
    codes_dtype,
    in_threads,
    kernel_jit,
    kernel_threads,
    user_ranges,
)
from opendp_wgm.engines.polars._plans import (
    WEIGHT_LAT,
    BoundedLists,
    bound_key,
)
from opendp_wgm.engines.polars._prepared import _CodedRows, _UserRuns
from opendp_wgm.privacy.threshold import lattice_weights

if TYPE_CHECKING:
    from opendp_wgm.engines.polars._hashed_histogram import UserCounts  # which imports this module


__all__ = ["CodedPairs", "coded_histogram", "coded_pairs", "runs_histogram"]


def _histogram_below(
    jit: ModuleType,
    users: _Coding,
    items: _Coding,
    bound: int,
    weights: NDArray[np.int64],
    threads: int = 1,
    counted: NDArray[np.int64] | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """The histogram of the users with at most ``bound`` distinct items, and the rows (grouped by user) and
    offsets of the others: a counting sort of the item codes by user, then each user's distinct items. The codes
    are computed as the rows are read (``users`` uncompacted: a user code is an offset or a hashed code).

    In ``threads`` threads: each counts and then places a chunk of the rows (after the previous chunks' rows
    of each user: the same order as in one pass), then each takes a range of users holding about as many rows,
    with its own per-item marker and histogram (one per thread: the item codes are compact, :func:`_coding`),
    and the histograms are added up: integer sums, the same whatever their order. ``counted``: the rows of each
    user per chunk, already counted on these codes in ``threads`` chunks (``plan_for``'s count): not counted again.
    """
    n_users, n_items, rows = users.size, items.size, users.values.size
    chunks = _even_ranges(rows, threads)
    if counted is not None:
        counts = counted.astype(np.int32)  # a copy: the cursors below overwrite it
    else:
        counts = np.zeros((threads, n_users), dtype=np.int32)  # rows below 2^31 (coded_histogram)
        in_threads(chunks, lambda k, first, stop: jit.count_users(users.values, users.low, first, stop, counts[k]))
    start = np.empty(n_users + 1, dtype=np.int64)
    jit.user_cursors(counts, start)  # the counts become each chunk's cursors
    held = np.empty(rows, dtype=np.int32)  # the item offsets, then (once all are placed) ranked: item codes
    in_threads(chunks, lambda k, first, stop: jit.place_items(
        users.values, users.low, items.values, items.low, first, stop, counts[k], held))
    if items.words.size:
        in_threads(chunks, lambda _, first, stop: items.ranked(jit, held, first, stop))
    ranges = user_ranges(start, threads)
    above = np.zeros(n_users, dtype=np.bool_)
    seen = np.full((threads, n_items), -1, dtype=np.int32)
    histograms = np.zeros((threads, n_items), dtype=np.int64)
    in_threads(ranges, lambda k, first, stop: jit.histogram_user_range(
        held, start, first, stop, bound, weights, above, seen[k], histograms[k]))
    histogram: NDArray[np.int64] = histograms[0] if threads == 1 else histograms.sum(axis=0)
    if not above.any():
        return histogram, np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    rows_of, offsets = jit.rows_above(users.values, users.low, start, above)
    return histogram, rows_of, offsets


def coded_histogram(
    lists: BoundedLists,
    frame: pl.DataFrame,
    max_contributions: int,
    jit: ModuleType,
    counted: UserCounts | None = None,
) -> pl.DataFrame:
    """The lattice histogram of ``lists`` by the compiled step on coded columns (``frame``: ``lists.lf``
    collected, below 2^31 rows; columns of dtypes :func:`codes_dtype` accepts).

    The same histogram as :func:`lattice_histogram_plan` of ``lists(None)``, bit for bit: the columns are coded
    (:func:`_coding`) and the rows bucketed by user (:func:`_histogram_below`); a user with at most Δ0 distinct
    items keeps them all; a user with more keeps the Δ0 distinct items of smallest key, the keys being
    :func:`bounded_lists_plan`'s (the same Polars expression, on those users' rows only). Which frames it runs
    on is :func:`opendp_wgm.kernel.plan_for`'s choice. ``counted``: the users coded and counted per chunk
    (``plan_for`` counted them to choose): reused where they are integers coded as here, in as many chunks.
    """
    space = lists.space
    schema = frame.schema
    user_dtype, item_dtype = schema[space.user], schema[space.item]
    bound = lists.max_contributions
    frame = frame.select(_code_expr(space.user, user_dtype), _code_expr(space.item, item_dtype))
    threads = kernel_threads(frame.height, jit)
    if counted is None or counted.unchecked is not None or counted.threads != threads or user_dtype == pl.String:
        counted = None  # text is coded here by a category map, not by the counts' hash
        users = _coding(frame.get_column(space.user), user_dtype, jit, threads, compact=False)
    else:
        users = counted.coding
    items = _coding(frame.get_column(space.item), item_dtype, jit, threads)
    slot = lists.shared
    if slot is not None:  # a later step of the release reads the same rows (Prepared): their codes, written
        user_codes, item_codes = users.codes(jit, threads), items.codes(jit, threads)
        slot.coding = _CodedRows(user_codes, users.size, item_codes, items.size, items.decode)
    weights = lattice_weights(max_contributions)
    histogram, rows, offsets = _histogram_below(
        jit, users, items, bound, weights, threads, None if counted is None else counted.counts)
    # on the coded values: a fresh category hashes as its string, as the value did
    add_above(jit, lists, frame, histogram, items, rows, offsets, weights)
    return decoded_histogram(items, histogram)


def add_above(
    jit: ModuleType,
    lists: BoundedLists,
    frame: pl.DataFrame,
    histogram: NDArray[np.int64],
    items: _Coding,
    rows: NDArray[np.int64],
    offsets: NDArray[np.int64],
    weights: NDArray[np.int64],
) -> None:
    """Add to ``histogram`` the users above Δ0, each keeping its Δ0 distinct items of smallest key, keyed on their
    rows only: ``rows[offsets[a]:offsets[a + 1]]`` are user ``a``'s rows of ``frame`` (nothing when empty)."""
    if not rows.size:
        return
    bound = lists.max_contributions
    keys = frame[rows].select(bound_key(frame.lazy(), lists.space, lists.seeds)).to_series().to_numpy()
    positions = np.arange(rows.size, dtype=np.int64)  # of the rows' codes, in rows' order
    weight = int(weights[bound - 1])
    jit.histogram_above(histogram, items.codes_at(jit, rows), positions, offsets, keys, bound, weight)


def decoded_histogram(items: _Coding, histogram: NDArray[np.int64]) -> pl.DataFrame:
    """The (item, :data:`WEIGHT_LAT`) frame of a histogram per item code: the codes of positive weight, decoded."""
    kept = np.flatnonzero(histogram)
    return pl.DataFrame([items.decode(kept), pl.Series(WEIGHT_LAT, histogram[kept], dtype=pl.Int64)])


def runs_histogram(
    lists: BoundedLists,
    frame: pl.DataFrame,
    start: NDArray[np.int64],
    max_contributions: int,
    jit: ModuleType,
    *,
    keyed: bool,
) -> pl.DataFrame | None:
    """:func:`coded_histogram` where each user's rows form one run (``start``: :func:`run_starts`), with no
    coding of the columns: each user's rows are weighted by the compiled step from one key per row
    (:func:`opendp_wgm.engines._kernel_jit.keyed_weights`, in threads over ranges of users: a per-user hash set
    of the keys drops repeated items), and the kept rows are summed per item by one Polars ``group_by``. The same
    histogram as :func:`lattice_histogram_plan` of ``lists(None)``, bit for bit.

    ``keyed`` (most rows belong to users above Δ0, imdb_50k): every row's key is the bound's secret key (one
    Polars ``select``), and a user above Δ0 keeps its Δ0 distinct items of smallest key by a linear selection.
    Otherwise (Zipf) the keys identify the items only (:func:`_item_keys`): users with at most Δ0 distinct items
    keep them all, and the rows of the others alone are keyed and weighted again, as in the ``keyed`` case.

    ``None`` (the Polars plans, which decide any tie as they always did) where two distinct items of a user share
    a hashed key (:func:`_weigh_runs` checks every repeat).
    """
    space, bound = lists.space, lists.max_contributions
    slot = lists.shared
    if slot is not None:  # a later step of the release reads the same rows (Prepared): their users' runs
        slot.coding = _UserRuns(start)
    items = frame.get_column(space.item)
    weights = lattice_weights(max_contributions).astype(np.int32)  # at most 2^20
    if keyed:
        keys = frame.select(bound_key(lists.lf, space, lists.seeds)).to_series().to_numpy()
        weighed = _weigh_runs(jit, start, keys, items, bound, weights, check=True, flag=False)
    else:
        keys, hashed = _item_keys(items)
        weighed = _weigh_runs(jit, start, keys, items, bound, weights, check=hashed, flag=True)
    if weighed is None:
        return None
    out, above = weighed
    if above.any():  # the users above Δ0, keyed on their rows only
        rows, offsets = _rows_of_runs(start, above)
        theirs = frame[rows]
        keys = theirs.select(bound_key(lists.lf, space, lists.seeds)).to_series().to_numpy()
        weighed = _weigh_runs(jit, offsets, keys, theirs.get_column(space.item), bound, weights, check=True, flag=False)
        if weighed is None:
            return None
        out[rows] = weighed[0]
    weight = pl.col(WEIGHT_LAT)
    kept = pl.DataFrame([items, pl.Series(WEIGHT_LAT, out)]).lazy().filter(weight > 0)
    # the streaming engine's group_by: half the CPU of the in-memory engine's on text here (the same integer sums)
    return kept.group_by(space.item).agg(weight.cast(pl.Int64).sum()).collect(engine="streaming")


def _item_keys(items: pl.Series) -> tuple[NDArray[np.integer], bool]:
    """A key per row that identifies its item within a user's rows, and whether it is a hash (repeats then need a
    check): integers are their own keys (exact), a category its physical code (one per value in a column), text
    a 64-bit hash of its value."""
    if items.dtype == pl.String:
        return items.hash(0).to_numpy(), True
    physical = items.to_physical() if isinstance(items.dtype, (pl.Categorical, pl.Enum)) else items
    return physical.to_numpy(), False


def _weigh_runs(
    jit: ModuleType,
    start: NDArray[np.int64],
    keys: NDArray[np.integer],
    items: pl.Series,
    bound: int,
    weights: NDArray[np.int32],
    *,
    check: bool,
    flag: bool,
) -> tuple[NDArray[np.int32], NDArray[np.bool_]] | None:
    """:func:`opendp_wgm.engines._kernel_jit.keyed_weights` over every user's run, in threads over ranges of users
    holding about as many rows: the weight of each row and (``flag``) the users above ``bound`` left to the
    caller. With ``check`` (hashed keys), every row that repeats a key is compared with the row it repeats (a
    gather of those rows only); ``None`` where one holds another item."""
    rows, n_users = int(start[-1]), start.size - 1
    threads = kernel_threads(rows, jit)
    ranges = user_ranges(start, threads)
    out = np.empty(rows, dtype=np.int32)
    twins = np.empty((rows if check else 0, 2), dtype=np.int32)  # rows below 2^31; pages written where rows repeat
    above = np.zeros(n_users if flag else 0, dtype=np.bool_)
    found = np.zeros(threads, dtype=np.int64)

    def weigh(k: int, first: int, stop: int) -> None:
        found[k] = jit.keyed_weights(start, keys, first, stop, bound, weights, out, twins, above)

    in_threads(ranges, weigh)
    if found.any():
        at = start[ranges[:-1]]  # each range wrote its pairs from its first row on
        pairs = np.concatenate([twins[first : first + n] for first, n in zip(at, found, strict=True)])
        if not (items.gather(pairs[:, 0]) == items.gather(pairs[:, 1])).all():
            return None
    return out, above


def _rows_of_runs(start: NDArray[np.int64], flags: NDArray[np.bool_]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The rows of the runs ``flags`` flags (run ``u``: ``start[u] <= r < start[u + 1]``), in order, and the offsets
    of each flagged run's rows among them."""
    runs = np.flatnonzero(flags)
    lengths = start[runs + 1] - start[runs]
    offsets = np.zeros(runs.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.arange(offsets[-1], dtype=np.int64) + np.repeat(start[runs] - offsets[:-1], lengths), offsets






@dataclass(frozen=True)
class CodedPairs:
    """The distinct (user, item) pairs of a prepared frame as the compiled step's arrays, coded and grouped by user
    once per call (:func:`coded_pairs`): every DP-SIPS round, its flags and its two-bin count run on them, with no
    Polars plan, no coding and no deduplication per round.

    ``held[start[u]:start[u + 1]]`` are user ``u``'s distinct item codes (those no earlier step dropped:
    :meth:`without`); ``values`` is the item value of each code. Codes only index arrays: the bound reads the
    Polars keys of the values (:func:`bound_key`), never the codes.
    """

    jit: ModuleType
    space: _Space
    #: the collected prepared frame whose distinct pairs these are (for the Polars plans: :func:`distinct_pairs_plan`)
    prepared: pl.DataFrame
    held: NDArray[np.int32]
    start: NDArray[np.int64]
    user_of: Callable[[NDArray[np.int64]], pl.Series]
    item_of: Callable[[NDArray[np.int64]], pl.Series]
    values: pl.Series
    #: threads of :meth:`histogram`'s keyed pass over the users above the bound (:func:`kernel_threads`): the same
    #: histogram in any number
    threads: int = 1

    def flags(self, items: pl.Series) -> NDArray[np.bool_]:
        """Per item code, whether its value is among ``items`` (values of the item column: a release's)."""
        return self.values.is_in(items.implode()).to_numpy()

    def without(self, flags: NDArray[np.bool_]) -> CodedPairs:
        """The pairs without the items ``flags`` flags (the rows a filter on the flags keeps)."""
        held, start = self.jit.drop_items(self.held, self.start, flags)
        return replace(self, held=held, start=start)

    def user_bins(self, flags: NDArray[np.bool_]) -> NDArray[np.int64]:
        """The two-bin count of the users still holding unflagged items: holding a flagged one too (boosted),
        then the others; DP-SIPS's count (:func:`opendp_wgm.measurements.dp_sips.dense_branch`)."""
        bins: NDArray[np.int64] = self.jit.boosted_users(self.held, self.start, flags)
        return bins

    def histogram(self, bound: int, seeds: tuple[int, ...], max_contributions: int) -> pl.DataFrame:
        """The lattice histogram of the pairs, each user bounded to ``bound`` items under ``seeds``, with the
        lattice weights of ``max_contributions``: the one :func:`lattice_histogram_plan` computes from
        :func:`bounded_lists_plan` of the same rows (``distinct=True``), bit for bit (as :func:`coded_histogram`:
        all items up to ``bound``, else the ``bound`` distinct items of smallest key)."""
        jit = self.jit
        weights = lattice_weights(max_contributions)
        histogram: NDArray[np.int64]
        histogram, above = jit.histogram_distinct(self.held, self.start, self.values.len(), bound, weights)
        if above.any():  # the users above Δ0: keyed on their pairs only, by the values
            # in ranges of users holding about as many pairs, each range's pairs, keys and histogram its own
            # (integer sums, the same whatever their order): the keys are one Polars select per range
            ranges = user_ranges(self.start, self.threads)
            parts = np.zeros((self.threads, histogram.size), dtype=np.int64)

            def keyed(k: int, first: int, stop: int) -> None:
                users, items, offsets = jit.pairs_of(self.held, self.start[first : stop + 1], above[first:stop])
                rows = pl.DataFrame([self.user_of(users + first), self.item_of(items)])
                keys = rows.select(bound_key(rows.lazy(), self.space, seeds)).to_series().to_numpy()
                positions = np.arange(items.size, dtype=np.int64)
                jit.histogram_above(parts[k], items, positions, offsets, keys, bound, int(weights[bound - 1]))

            in_threads(ranges, keyed)
            histogram += parts.sum(axis=0)
        kept = np.flatnonzero(histogram)
        return pl.DataFrame([self.item_of(kept), pl.Series(WEIGHT_LAT, histogram[kept], dtype=pl.Int64)])


def coded_pairs(lf: pl.LazyFrame, space: _Space, *, passes: int, engine: _Engine) -> CodedPairs | None:
    """The distinct pairs of the prepared frame ``lf`` as :class:`CodedPairs` (``lf`` collected once), or ``None``
    where the compiled step does not run (the caller keeps the Polars plans): Numba not installed, ``passes > 1``
    or the streaming engine (they bound the memory: nothing is collected), a column dtype :func:`codes_dtype`
    rejects, 2^31 rows or more (``lf`` is then collected again by the Polars plans)."""
    jit = kernel_jit()
    schema = lf.collect_schema()
    user_dtype, item_dtype = schema[space.user], schema[space.item]
    if jit is None or passes != 1 or engine == "streaming":
        return None
    if not (codes_dtype(user_dtype) and codes_dtype(item_dtype)):
        return None
    prepared = lf.collect()
    if prepared.height >= 2**31:
        return None
    threads = kernel_threads(prepared.height, jit)
    columns = ((space.user, user_dtype), (space.item, item_dtype))
    # text without a category map, the two columns at once (the compiled, NumPy and Polars steps release the GIL)
    with ThreadPoolExecutor(max_workers=min(threads, 2)) as pool:
        texts = list(pool.map(
            lambda column: _text_codes(prepared.get_column(column[0]), jit, runs=column[0] == space.user)
            if column[1] == pl.String else None,
            columns,
        ))
    # the others through a fresh category map each, one select each, in this thread: two fresh maps made at once
    # (in one select, or in two Python threads) were seen to be one map now and then (the codes of both columns
    # in one numbering, no longer each in order of first occurrence: the same histograms, their rows reordered)
    (user_codes, n_users, user_of), (item_codes, n_items, item_of) = (
        _codes(prepared.select(_code_expr(name, dtype)).to_series(), dtype, jit, threads) if text is None else text
        for (name, dtype), text in zip(columns, texts, strict=True)
    )
    held, start = jit.distinct_items_by_user(user_codes, item_codes, n_users, n_items)
    values = item_of(np.arange(n_items, dtype=np.int64))
    return CodedPairs(jit, space, prepared, held, start, user_of, item_of, values, threads)
