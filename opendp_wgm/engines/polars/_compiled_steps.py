"""The compiled steps' shared parts: importing them (Numba optional), coding columns to dense integers, the
threads and ranges their passes run in, and the users' runs they read."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl
from numpy.typing import NDArray

from opendp_wgm.engines.polars._plans import _PLAN_SAMPLE_ROWS, VALUE_SEEDS

if TYPE_CHECKING:
    pass


__all__ = [
    "Numba",
    "codes_dtype",
    "hashed_jit",
    "in_threads",
    "kernel_jit",
    "kernel_threads",
    "no_cold_compiled_import",
    "numba_state",
    "peel_jit",
    "run_starts",
    "user_ranges",
    "without_numba",
]


#: Inside :func:`no_cold_compiled_import`: the compiled modules not imported yet stay so.
_cold_import_deferred = False


@contextmanager
def _switched_on(switch: str) -> Iterator[None]:
    """Within this block, this module's process-wide boolean ``switch`` (:data:`_cold_import_deferred`,
    :data:`_numba_withheld`) is on; its value before is restored on exit, so blocks nest."""
    before = globals()[switch]
    globals()[switch] = True
    try:
        yield
    finally:
        globals()[switch] = before


@contextmanager
def no_cold_compiled_import() -> Iterator[None]:
    """Within this block, :func:`kernel_jit` and :func:`peel_jit` return ``None`` (the Polars plans run: the same
    release, bit for bit) unless their module is imported already: Numba and the compiled steps' cached code
    are not loaded. Importing them costs 0.4 to 0.9 s, more than the compiled steps save on a small input
    (10^5 rows: 0.04 s either way). For a caller that owns its process and knows its input is small: the
    ``opendp-wgm`` command (:mod:`opendp_wgm.cli._startup`). Which path runs is decided as always otherwise."""
    with _switched_on("_cold_import_deferred"):
        yield


def import_deferred() -> bool:
    """Whether this process is inside :func:`no_cold_compiled_import` (a compiled module not imported yet stays so)."""
    return _cold_import_deferred


class Numba(Enum):
    """Whether the compiled steps run in this process (:func:`numba_state`): an explicit input of
    :func:`opendp_wgm.kernel.plan_for`, so that a caller (a test, a benchmark) chooses the plans of each state
    without replacing any function."""

    #: Numba is installed and the compiled steps are (or will be, on first use) imported: they may run
    READY = "ready"
    #: inside :func:`no_cold_compiled_import`, the compiled steps not imported yet: the Polars plans run
    DEFERRED = "deferred"
    #: Numba is not installed (``opendp-wgm[fast]``), or :func:`without_numba` says so: the Polars plans run
    ABSENT = "absent"


#: Inside :func:`without_numba`: every compiled step declines, as without Numba.
_numba_withheld = False


@contextmanager
def without_numba() -> Iterator[None]:
    """Within this block, every compiled step declines as if Numba were not installed (:data:`Numba.ABSENT`): the
    Polars plans and paths run, the same release bit for bit. For tests and benchmarks that compare the paths
    of one process; :func:`opendp_wgm.kernel.plan_for` takes the state as an argument too."""
    with _switched_on("_numba_withheld"):
        yield


def numba_state() -> Numba:
    """The :class:`Numba` state of this process now (importing the compiled step when it is :data:`Numba.READY`)."""
    if _numba_withheld:
        return Numba.ABSENT
    name = "opendp_wgm.engines._kernel_jit"
    if _cold_import_deferred and name not in sys.modules:
        return Numba.DEFERRED
    return Numba.ABSENT if _import_compiled(name) is None else Numba.READY


def _compiled(module: str) -> ModuleType | None:
    """The compiled module ``opendp_wgm.engines.<module>``, or ``None`` when Numba is not installed (or, inside
    :func:`no_cold_compiled_import`, when the module is not imported yet; inside :func:`without_numba`, always).
    Imported on first use (importing Numba takes a few tenths of a second)."""
    if _numba_withheld:
        return None
    name = f"opendp_wgm.engines.{module}"
    if _cold_import_deferred and name not in sys.modules:
        return None
    return _import_compiled(name)


@lru_cache(maxsize=2)
def _import_compiled(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def kernel_jit() -> ModuleType | None:
    """The compiled per-user step (:mod:`opendp_wgm.engines._kernel_jit`, ``opendp-wgm[fast]``), or ``None``
    when Numba is not installed; user peeling's CSR reads its counting sort too."""
    return _compiled("_kernel_jit")


#: Codes of a column for the compiled kernel: (codes per row, number of codes, decode: codes -> values).
_Codes = tuple[NDArray[np.integer], int, Callable[[NDArray[np.int64]], pl.Series]]


@dataclass(frozen=True)
class _Coding:
    """How :func:`_coding` codes a column's rows, without an array of codes: row ``r``'s offset
    ``values[r] - low`` (hashed values are their codes, ``low`` 0), which is its code, or, when ``words`` holds a
    bit per offset, its rank among the offsets present (``before``: the bits set in the words before each word,
    :func:`opendp_wgm.engines._kernel_jit.rank_offsets`). The compiled step places the offsets and ranks them
    where they land, so that no array of 10^7 codes is written for the rows (``docs/engines.md``)."""

    values: NDArray[np.integer]
    low: int
    #: a bit per offset, set where a row holds it (empty: the codes are the offsets)
    words: NDArray[np.uint64]
    #: the bits set in the words before each word
    before: NDArray[np.int64]
    size: int
    decode: Callable[[NDArray[np.int64]], pl.Series]

    def codes(self, jit: ModuleType, threads: int = 1) -> NDArray[np.int32]:
        """The code of every row (in ``threads`` chunks)."""
        return self._coded(jit, self.values, threads)

    def codes_at(self, jit: ModuleType, rows: NDArray[np.int64]) -> NDArray[np.int32]:
        """The codes of the rows ``rows``, in that order."""
        return self._coded(jit, self.values[rows], 1)

    def ranked(self, jit: ModuleType, codes: NDArray[np.int32], first: int, stop: int) -> None:
        """Turn the offsets ``codes[first:stop]`` into codes, in place."""
        if self.words.size:
            jit.rank_offsets(codes, self.words, self.before, first, stop)

    def _coded(self, jit: ModuleType, values: NDArray[np.integer], threads: int) -> NDArray[np.int32]:
        codes = np.empty(values.size, dtype=np.int32)

        def code(_: int, first: int, stop: int) -> None:
            jit.offsets_of(values, self.low, first, stop, codes)
            self.ranked(jit, codes, first, stop)

        in_threads(_even_ranges(codes.size, threads), code)
        return codes


def codes_dtype(dtype: pl.DataType) -> bool:
    """Whether :func:`_codes` codes this dtype (the others are left to the Polars plans: floats, a composite
    key's Struct, temporal, binary, ...)."""
    return dtype == pl.String or dtype.is_integer() or isinstance(dtype, (pl.Categorical, pl.Enum))


def _code_expr(column: str, dtype: pl.DataType) -> pl.Expr:
    """Text as a fresh, call-local category map (dense physical codes; no global string cache grows); other
    columns as they are. One ``select`` evaluates the user's and the item's in parallel."""
    return pl.col(column).cast(pl.Categorical(pl.Categories.random())) if dtype == pl.String else pl.col(column)


def _codes(column: pl.Series, dtype: pl.DataType, jit: ModuleType, threads: int = 1, *, compact: bool = True) -> _Codes:
    """:func:`_coding`'s codes as an array: (codes per row, number of codes, decode)."""
    coding = _coding(column, dtype, jit, threads, compact=compact)
    return coding.codes(jit, threads), coding.size, coding.decode


def _coding(
    column: pl.Series, dtype: pl.DataType, jit: ModuleType, threads: int = 1, *, compact: bool = True
) -> _Coding:
    """Exact integer codes of a column without nulls, as :func:`_code_expr` gave it (equal values, equal codes),
    and their decoding back to values of ``dtype`` (the column's dtype before :func:`_code_expr`).

    Integers (a category's physical code among them) are coded by their offset from the smallest value when they
    span fewer than about twice the rows, else through a hash table. Offsets of which at most half are taken
    (items Zipf mod 10^7: 3·10^5 values over 10^7) are renumbered ``0, 1, …`` in value order, so the per-item
    arrays of the histogram hold the values present only (they stay in cache); ``compact=False`` keeps the
    offsets (user codes: they index no per-thread array that grows with them). The passes over rows run in
    ``threads`` chunks. Codes only index arrays inside one histogram: the bound reads the Polars keys of the
    values, never the codes.
    """
    categorical = isinstance(column.dtype, (pl.Categorical, pl.Enum))
    physical = column.to_physical() if categorical else column
    values = physical.to_numpy()
    # the compiled functions read any integer dtype as it is (no int64 copy of an Int32 column); uint64 as int64
    # bits, so that subtracting the smallest value stays integer
    signed = values.view(np.int64) if values.dtype == np.uint64 else values
    chunks = _even_ranges(values.size, threads)
    bounds = np.tile(np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min]), (threads, 1))  # empty chunks
    in_threads(chunks, lambda k, first, stop: stop > first and jit.value_range(signed, first, stop, bounds[k]))
    low, high = (int(bounds[:, 0].min()), int(bounds[:, 1].max())) if values.size else (0, -1)
    value_of: Callable[[NDArray[np.int64]], NDArray[np.int64]]
    no_words = np.zeros(0, dtype=np.uint64)
    words, before = no_words, no_words.view(np.int64)
    if high - low < min(2 * values.size + 1024, 2**31):  # int32 offsets
        span = high - low + 1
        size = span
        value_of = lambda kept: kept + np.int64(low)  # noqa: E731
        if compact and span:  # a bit per offset (1/32 of int32 ranks of every offset: it stays in cache)
            marks = np.zeros((threads, (span + 63) // 64), dtype=np.uint64)  # one per thread
            in_threads(chunks, lambda k, first, stop: jit.mark_bits(signed, low, first, stop, marks[k]))
            present = np.bitwise_or.reduce(marks, axis=0)
            ranks = np.empty(present.size, dtype=np.int64)
            taken = jit.word_ranks(present, ranks)
            if 2 * taken <= span:
                offsets = np.empty(taken, dtype=np.int64)
                jit.bit_offsets(present, offsets)
                words, before, size, value_of = present, ranks, taken, (offsets + np.int64(low)).__getitem__
        values_or_codes, start_at = signed, low
    else:
        # the large arrays come from NumPy, not from inside the compiled function: NumPy asks for transparent
        # huge pages on them (a fresh 10^7-row array faults 2 MiB pages)
        values_or_codes, uniques = np.empty(values.size, dtype=np.int32), np.empty(values.size, dtype=np.int64)
        size, start_at = jit.dense_codes(signed, values_or_codes, uniques), 0
        value_of = uniques[:size].copy().__getitem__
    decode: Callable[[NDArray[np.int64]], pl.Series]
    if categorical:
        categories = column.cat.get_categories()  # in physical-code order
        decode = lambda kept: categories.gather(value_of(kept)).cast(dtype).alias(column.name)  # noqa: E731
    else:
        back = values.dtype.type
        decode = lambda kept: pl.Series(column.name, value_of(kept).astype(back), dtype=dtype)  # noqa: E731
    return _Coding(values_or_codes, start_at, words, before, size, decode)


#: From this many rows on, the compiled step runs its passes in threads (below, starting them costs more than
#: they save).
_THREAD_ROWS = 2**18


def kernel_threads(rows: int, jit: ModuleType) -> int:
    """Threads for the compiled step's passes over ``rows`` rows: one below :data:`_THREAD_ROWS`, else as many
    as Polars' pool, at most ``NUMBA_NUM_THREADS``. The step runs between two Polars collects, so its threads
    and Polars' pool do not run at once (no oversubscription). Plain Python threads calling the compiled
    functions, which release the GIL: Numba's own parallel loops would depend on its threading layer, and its
    default one on a machine without TBB or OpenMP (``workqueue``) aborts the process when two Python threads
    launch parallel loops at once."""
    if rows < _THREAD_ROWS:
        return 1
    return max(1, min(pl.thread_pool_size(), int(jit.max_threads())))


def _even_ranges(size: int, parts: int) -> NDArray[np.int64]:
    """``parts + 1`` bounds cutting ``0 … size`` into ``parts`` ranges of (nearly) equal length."""
    return np.linspace(0, size, parts + 1).astype(np.int64)


def user_ranges(offsets: NDArray[np.int64], parts: int) -> NDArray[np.int64]:
    """``parts + 1`` bounds cutting the users ``0 … offsets.size - 1`` (user ``u``'s rows
    ``offsets[u] <= r < offsets[u + 1]``) into ``parts`` ranges of whole users holding about as many rows each."""
    users = np.searchsorted(offsets, _even_ranges(int(offsets[-1]), parts)).astype(np.int64)
    users[0], users[-1] = 0, offsets.size - 1
    return users


def in_threads(bounds: NDArray[np.int64], run: Callable[[int, int, int], object]) -> None:
    """``run(k, bounds[k], bounds[k + 1])`` for each range ``k``: in this thread for one range, else one thread
    per range (the compiled functions release the GIL)."""
    if bounds.size <= 2:
        run(0, int(bounds[0]), int(bounds[-1]))
        return
    with ThreadPoolExecutor(max_workers=bounds.size - 1) as pool:
        list(pool.map(lambda k: run(k, int(bounds[k]), int(bounds[k + 1])), range(bounds.size - 1)))



def run_starts(column: pl.Series) -> NDArray[np.int64] | None:
    """The offsets of the runs of equal adjacent values (``runs + 1``, from 0 to the length), when every user's
    rows form one run: user ``u``'s rows are ``start[u] <= r < start[u + 1]``, without hashing the values. ``None``
    otherwise, or for a dtype other than text or integers (whose equality need not be the grouping's: NaN floats).

    Checked, never assumed: the runs' values must be distinct (one pass comparing neighbours, then a distinct
    count of one value per run). Files written user by user (the public data sets) pass."""
    if not (column.dtype == pl.String or column.dtype.is_integer()) or column.null_count():
        return None
    if column.len() > _PLAN_SAMPLE_ROWS and run_starts(column.slice(0, _PLAN_SAMPLE_ROWS)) is None:
        return None  # a user in two runs among the first rows (shuffled users): no pass over the whole column
    runs = column.rle()
    heads = runs.struct.field("value")
    if heads.n_unique() != heads.len():
        return None
    start = np.zeros(heads.len() + 1, dtype=np.int64)
    np.cumsum(runs.struct.field("len").to_numpy(), out=start[1:])
    return start


def _user_runs(column: pl.Series) -> NDArray[np.uint32] | None:
    """Dense user codes ``0, 1, ...`` (sorted ``uint32``): the index of each row's run, when every user's rows
    form one run (:func:`run_starts`, which checks it); ``None`` otherwise. The codes repeat each run's index
    over its length (no second pass over the values: half the CPU of ``rle_id`` on text)."""
    start = run_starts(column)
    if start is None:
        return None
    return np.repeat(np.arange(start.size - 1, dtype=np.uint32), np.diff(start))



def _text_codes(column: pl.Series, jit: ModuleType, *, runs: bool = False) -> _Codes | None:
    """Codes of a text column without nulls in order of first occurrence, the codes a fresh category map gives it
    (:func:`_code_expr`, then :func:`_codes`), without building the map (a single-threaded cast: 0.4 s on
    imdb_50k's 7·10^6 items): with ``runs``, each user's rows one run, the run index (:func:`_user_runs`); else the
    first-occurrence codes of a 64-bit hash of each value (:func:`_hashed_text`).

    Checked, never assumed: every row's hashed value must equal the value of its code's first row
    (:func:`_hash_holds`; :func:`_user_runs` checks its runs' values distinct); ``None`` (the caller casts) where
    two values share a hash, or, with ``runs``, where a user's rows are not one run."""
    codes = _user_runs(column) if runs else None
    if codes is None:
        hashed = _hashed_text(column, jit)
        if hashed is None or not _hash_holds(column, hashed, 0, column.len()):
            return None
        return hashed.codes, hashed.values.len(), hashed.values.gather
    if not codes.size:
        return None
    first = np.empty(int(codes[-1]) + 1, dtype=np.int64)  # the run indices, sorted
    jit.first_rows(codes, first)
    values = column.gather(first)
    return codes, values.len(), values.gather


class _Hashed(NamedTuple):
    """A text column coded by the public hash of each value (:func:`_hashed_text`), **unchecked** (two values
    sharing a hash share a code) until :func:`_hash_holds` holds on every row."""

    #: each row's code, in order of first occurrence
    codes: NDArray[np.int32]
    #: the value of each code's first row
    values: pl.Series
    #: each row's public hash (:func:`~opendp_wgm.engines.polars.value_hash`), which the secret keys combine
    hashes: NDArray[np.uint64]


def _hashed_text(column: pl.Series, jit: ModuleType) -> _Hashed | None:
    """The first-occurrence codes of the public 64-bit hash (:func:`~opendp_wgm.engines.polars.value_hash`) of each
    value of a text column, unchecked (:class:`_Hashed`); ``None`` without rows."""
    hashes = column.hash(*VALUE_SEEDS).to_numpy()
    if not hashes.size:
        return None
    codes, uniques = np.empty(hashes.size, dtype=np.int32), np.empty(hashes.size, dtype=np.int64)
    first = np.empty(int(jit.dense_codes(hashes.view(np.int64), codes, uniques)), dtype=np.int64)
    jit.first_rows(codes, first)  # codes come in order of first row: one pass finds each code's first
    return _Hashed(codes, column.gather(first), hashes)


def _hash_holds(column: pl.Series, hashed: _Hashed, first: int, stop: int) -> bool:
    """Whether the rows ``first <= r < stop`` of ``column`` each hold the value of their code (:func:`_hashed_text`):
    a gather from the distinct values, which stay in cache, compared with the rows. The caller checks every row
    (in one range, or in several, in threads)."""
    return bool((hashed.values.gather(hashed.codes[first:stop]) == column.slice(first, stop - first)).all())


def hashed_jit() -> ModuleType | None:
    """The compiled steps of the ``compiled-hashed`` plan (:mod:`opendp_wgm.engines._hashed_jit`), or ``None`` when
    Numba is not installed."""
    return _compiled("_hashed_jit")


def peel_jit() -> ModuleType | None:
    """The compiled stage-2 step (:mod:`opendp_wgm.engines._peel_jit`), or ``None`` when Numba is not installed."""
    return _compiled("_peel_jit")
