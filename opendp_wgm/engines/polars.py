r"""The release kernel on Polars: the plan functions every Polars measurement runs.

The WGM (:func:`opendp_wgm.make_wgm` = ``make_bound_user_items >> make_weighted_histogram >>
make_noisy_threshold``), its two-stage uses and the baselines build their releases from these steps only:

- :func:`bounded_lists_plan` / :func:`bound_plan`: per user, a uniform random subset of at most Δ0 distinct items
  (keyed hash of the values under a secret seed);
- :func:`lattice_histogram_plan` / :func:`lattice_histogram`: per-item sums of the lattice weights
  :math:`\lfloor 2^{20}/\sqrt t\rfloor`, in one plan or over disjoint user buckets (``passes``), or by the
  compiled steps of :mod:`opendp_wgm.engines._kernel_jit` when Numba is installed (:func:`coded_histogram`,
  :func:`runs_histogram`: the same sums); :func:`opendp_wgm.kernel.plan_for` chooses which;
- :func:`coded_pairs` / :class:`CodedPairs`: the distinct (user, item) pairs coded once for the compiled step, for
  steps that bound the same users several times (DP-SIPS's rounds, flags and count);
- :func:`noisy_above_threshold` / :func:`release_above_threshold`: exact discrete Gaussian noise on the integer
  sums and the threshold, in integers (the Spark executors call :func:`noisy_above_threshold` too);
- :func:`candidate_pairs` / :func:`candidate_counts`: the distinct (user, candidate) pairs of a public candidate
  list and its distinct-user counts (stage 2 of top-k and of user peeling), on the compiled step's codes of the
  same frame, or the users' runs its route on runs found, when a two-stage release kept them (:class:`Prepared`).

The names are public within the engines package (the Spark engine implements the same steps); they are not part
of the package's top-level API.
"""

from __future__ import annotations

import importlib
import itertools
import math
import secrets
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl
from numpy.typing import NDArray

from opendp_wgm._spaces import _prepare_frame, _PreparedFrame, _Space, _value_key
from opendp_wgm._validation import _Engine
from opendp_wgm.privacy.threshold import LATTICE_BITS, lattice_weights
from opendp_wgm.samplers import sample_discrete_gaussian

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

__all__ = [
    "WEIGHT_LAT",
    "BoundedLists",
    "CodedPairs",
    "Prepared",
    "bound_key",
    "bound_plan",
    "bounded_lists_plan",
    "candidate_counts",
    "candidate_csr",
    "candidate_pairs",
    "cast_candidates",
    "chunk_views",
    "coded_histogram",
    "coded_pairs",
    "codes_dtype",
    "collect_once",
    "distinct_pairs_plan",
    "fresh_seeds",
    "holders_by_item",
    "in_threads",
    "item_counts",
    "kernel_jit",
    "kernel_threads",
    "lattice_histogram",
    "lattice_histogram_plan",
    "mostly_above",
    "noisy_above_threshold",
    "peel_jit",
    "prepared_input",
    "release_above_threshold",
    "run_offsets",
    "runs_histogram",
    "shared_of",
    "string_views",
    "user_ranges",
    "weights_frame",
]

#: The column of a lattice histogram: per-item sums of the integer weights (Int64, units of 2^-LATTICE_BITS).
WEIGHT_LAT = "weight_lat"

#: ``(users) -> per-user lists plan``: the bounded lists of the users a filter keeps (``None``: every user).
ListsOf = Callable[[pl.Expr | None], pl.LazyFrame]


def fresh_seeds() -> tuple[int, ...]:
    """A fresh secret 256-bit hash seed (four 64-bit words), drawn per release."""
    return tuple(secrets.randbits(64) for _ in range(4))


# --------------------------------------------------------------------------------------------------------------
# the prepared frame, read by several steps


@dataclass(frozen=True)
class _CodedRows:
    """The compiled step's coding of a prepared frame's rows (:func:`coded_histogram`): a user code and an
    item code per row (exact: equal values, equal codes), and the item values of codes (``decode``)."""

    users: NDArray[np.integer]
    n_users: int
    items: NDArray[np.integer]
    n_items: int
    decode: Callable[[NDArray[np.int64]], pl.Series]

    def positions_of(self, values: pl.Series) -> NDArray[np.int32]:
        """Per item code, the position among ``values`` (distinct, in the data's item dtype) of the code's value,
        -1 where it is none of them. Integer items are matched in NumPy (a sorted search: exact, and no Polars
        query's fixed cost, which was most of stage 2's lookup on steam_200k's 5·10^3 items); others by a join."""
        decoded = self.decode(np.arange(self.n_items, dtype=np.int64))
        position_of = np.full(self.n_items, -1, dtype=np.int32)
        if values.len() == 0:
            return position_of
        if decoded.dtype.is_integer():
            wanted = values.to_numpy()
            order = np.argsort(wanted, kind="stable")
            ranked, present = wanted[order], decoded.to_numpy()
            at = np.minimum(np.searchsorted(ranked, present), ranked.size - 1)
            hit = ranked[at] == present
            position_of[hit] = order[at[hit]]
            return position_of
        position = pl.int_range(values.len(), eager=True, dtype=pl.Int32).alias("position")
        table = pl.DataFrame([values.rename("value"), position])
        found = pl.DataFrame([decoded.rename("value")]).join(table, on="value", how="left", maintain_order="left")
        position_of[:] = found.get_column("position").fill_null(-1).to_numpy()
        return position_of


@dataclass(frozen=True)
class _UserRuns:
    """The route on runs' reading of a prepared frame's rows (:func:`runs_histogram`): each user's rows are one
    run, user ``u``'s rows ``start[u] <= r < start[u + 1]`` (checked by :func:`_run_starts`; no item codes)."""

    start: NDArray[np.int64]


@dataclass(eq=False)
class Prepared:
    """A prepared frame (:func:`opendp_wgm._spaces._prepare_frame`) as the steps of one release read it, passed to
    each of them explicitly: made once per release by the code that prepares the input (:func:`collect_once`).

    ``in_memory``: ``lf`` was collected (no file scan that a filter could reach: :func:`_candidate_rows` looks its
    rows up without filtering first). ``coding``: a slot the WGM's compiled step fills with its coding of ``lf``'s
    rows (:class:`_CodedRows`, or the users' runs of its route on runs, :class:`_UserRuns`) when the bounded lists
    it reads carry this value (:attr:`BoundedLists.shared`), so that a later step of the same release (a two-stage
    release's stage 2: :func:`candidate_pairs`) reads it instead of the rows. The coding is a deterministic
    function of the rows: no seed, no noise.
    """

    lf: pl.LazyFrame
    in_memory: bool = False
    coding: _CodedRows | _UserRuns | None = None


def _as_prepared(data: pl.LazyFrame | Prepared) -> Prepared:
    """``data`` as a :class:`Prepared` (a bare plan: not in memory, no coding)."""
    return data if isinstance(data, Prepared) else Prepared(data)


def shared_of(frame: object) -> Prepared | None:
    """The :class:`Prepared` value a release's preparation passes with its prepared frame (a
    :class:`~opendp_wgm._spaces._PreparedFrame`'s ``source``: its steps share it), or ``None``."""
    return frame.source if isinstance(frame, _PreparedFrame) else None


def prepared_input(frame: Any, space: _Space) -> Prepared:
    """A step's input prepared for ``space`` (:func:`~opendp_wgm._spaces._prepare_frame`), as the release's
    :class:`Prepared` when its preparation passed one (:func:`shared_of`), else as a bare plan."""
    lf = _prepare_frame(frame, space)
    shared = shared_of(frame)
    return Prepared(lf) if shared is None else shared


def _shared_codes(data: Prepared) -> _CodedRows | None:
    return data.coding if isinstance(data.coding, _CodedRows) else None


def _shared_runs(data: Prepared) -> _UserRuns | None:
    return data.coding if isinstance(data.coding, _UserRuns) else None


def collect_once(lf: pl.LazyFrame, *, passes: int, engine: _Engine) -> Prepared:
    """A prepared frame that several steps of one release read (two stages, DP-SIPS rounds), collected once
    when its histograms run in one in-memory pass, as it was.

    The collected frame is the same rows as the plan (a deterministic function of the input), so every step
    computes what it computed on the plan, without scanning, parsing and preparing the input again. With
    ``passes > 1`` or the streaming engine the plan is kept unchanged: those bound the memory of inputs
    larger than memory, and each step re-scans the input instead (``docs/engines.md``).
    """
    if passes == 1 and engine != "streaming":
        return Prepared(lf.collect().lazy(), in_memory=True)
    return Prepared(lf)


# --------------------------------------------------------------------------------------------------------------
# bound


#: Rows read to choose the per-user plan (:func:`bounded_lists_plan`): a speed choice only.
_PLAN_SAMPLE_ROWS = 1 << 16


def mostly_above(lf: pl.LazyFrame, user: str, max_contributions: int) -> bool:
    """Whether most of the first :data:`_PLAN_SAMPLE_ROWS` rows belong to users with more than
    ``max_contributions`` of them: then sorting every list by the key is faster than building the lists and
    cutting the long ones again (imdb_50k, 61% of users above Δ0: 0.63 s against 1.05 s). Both plans keep the
    same subsets, so the choice changes the time only, never the release. :func:`bounded_lists_plan`'s
    ``plan="auto"`` reads it, and callers that pick their own plan from the same reading (the policy
    baselines)."""
    # the streaming engine stops reading once it has the rows: the in-memory engine read every file of a pass's
    # filtered scan (a whole bucket, 1.1 GiB and a full scan per pass at 5·10^7 rows per pass) for these rows
    sizes = lf.head(_PLAN_SAMPLE_ROWS).group_by(user).agg(pl.len()).collect(engine="streaming").get_column("len")
    return 2 * int(sizes.filter(sizes > max_contributions).sum()) > int(sizes.sum())


def distinct_pairs_plan(lf: pl.LazyFrame, space: _Space) -> pl.LazyFrame:
    """The distinct (user, item) rows of a prepared frame, each user's rows adjacent and the user column flagged
    sorted, for steps that bound the same users several times (DP-SIPS's rounds): their
    :func:`bounded_lists_plan` (``distinct=True``) then slices each user's run without hashing its items again.

    One ``group_by`` (the one a bound builds anyway), then a sort of one row per user, exploded. A filter on the
    user column (a pass's bucket) reaches a file scan through it.
    """
    user, item = space.user, space.item
    return lf.group_by(user).agg(pl.col(item).unique()).sort(user).explode(item)


def bound_key(lf: pl.LazyFrame, space: _Space, seeds: tuple[int, ...]) -> pl.Expr:
    """The secret key of each (user, item) row: a hash of their values under ``seeds`` (equal rows, equal keys)."""
    schema = lf.collect_schema()
    values = (_value_key(column, schema[column]) for column in (space.user, space.item))
    return pl.struct(*values).hash(*seeds)


def bounded_lists_plan(
    lf: pl.LazyFrame,
    space: _Space,
    max_contributions: int,
    seeds: tuple[int, ...] | None = None,
    *,
    plan: Literal["auto", "split", "keyed"] = "auto",
    distinct: bool = False,
) -> pl.LazyFrame:
    """One row per user: the list of its ``max_contributions`` distinct items of smallest random key.

    ``lf`` is a prepared frame (:func:`opendp_wgm._spaces._prepare_frame`). The key is a hash of (user, item)
    under ``seeds`` (fresh ones when ``None``), so a user's kept subset is a uniform random subset of its
    distinct items and depends on no other user's rows (the stability argument conditions on the seed). The
    hash reads values only (a Categorical is hashed as its string, not its code, which depends on other rows).

    The plan builds each user's list of distinct items in one ``group_by`` (which slices contiguous runs when
    the user column is flagged sorted: :func:`opendp_wgm._spaces._prepare_frame` flags an in-memory frame whose
    users are sorted). A user with at most ``max_contributions`` distinct items keeps them all: no key is
    needed. Only the longer lists are exploded, keyed and cut to the ``max_contributions`` items of smallest
    key: the same kept subset as sorting every list by the key (``docs/engines.md``, *Speed and memory of the
    per-user step*). That is ``plan="split"``; ``plan="keyed"`` sorts every user's rows by the key instead (faster
    when most users hold more than ``max_contributions`` items); ``"auto"`` chooses from the first rows
    (:func:`mostly_above`). Every plan keeps the same items for the same seeds.

    ``distinct=True`` promises that ``lf``'s (user, item) rows are distinct (:func:`distinct_pairs_plan`): the
    plans then skip their ``unique``, and keep the same items.
    """
    user, item = space.user, space.item
    key = bound_key(lf, space, fresh_seeds() if seeds is None else seeds)
    if plan == "keyed" or (plan == "auto" and mostly_above(lf, user, max_contributions)):
        by_key = pl.col(item).sort_by("_key")
        return (
            lf.with_columns(_key=key)
            .group_by(user)
            .agg((by_key if distinct else by_key.unique(maintain_order=True)).head(max_contributions))
        )
    # cached: both branches below read the lists, which Polars would otherwise build twice
    lists = lf.group_by(user).agg(pl.col(item) if distinct else pl.col(item).unique()).cache()
    size = pl.col(item).list.len()
    longer = (
        lists.filter(size > max_contributions)
        .sort(user)  # one row per user: cheap; the exploded rows then stay flagged sorted, and group_by slices
        .explode(item)
        .with_columns(_key=key)
        .group_by(user)
        .agg(pl.col(item).bottom_k_by("_key", max_contributions))
    )
    return pl.concat([lists.filter(size <= max_contributions), longer])


def bound_plan(
    lf: pl.LazyFrame, space: _Space, max_contributions: int, seeds: tuple[int, ...] | None = None
) -> pl.LazyFrame:
    """Distinct (user, item) rows, at most ``max_contributions`` per user (:func:`bounded_lists_plan`, exploded)."""
    return bounded_lists_plan(lf, space, max_contributions, seeds).explode(space.item)


@dataclass(frozen=True)
class BoundedLists:
    """The bounded lists of a prepared frame under a seed: ``lists(users)`` is :func:`bounded_lists_plan` of the
    users ``users`` keeps (a filter on the user key; ``None``: every user).

    A :data:`ListsOf` that also carries its inputs, so that the kernel's compiled plans (:mod:`opendp_wgm.kernel`)
    may compute the same histogram from the rows directly (:func:`coded_histogram`, :func:`runs_histogram`).
    """

    lf: pl.LazyFrame
    space: _Space
    max_contributions: int
    seeds: tuple[int, ...]
    #: ``lf``'s (user, item) rows are distinct (:func:`distinct_pairs_plan`): the Polars plans skip their ``unique``
    distinct: bool = False
    #: the same rows as the compiled step's arrays, coded once per call (:func:`coded_pairs`): with one in-memory
    #: pass, the kernel's ``coded-pairs`` plan reads them instead of running or coding ``lf``
    coded: CodedPairs | None = None
    #: the :class:`Prepared` value ``lf`` is the frame of, when later steps of the release read it: the compiled
    #: step leaves its coding of the rows in its slot (``None``: no step reads it)
    shared: Prepared | None = None

    def __call__(self, users: pl.Expr | None) -> pl.LazyFrame:
        lf = self.lf if users is None else self.lf.filter(users)
        return bounded_lists_plan(lf, self.space, self.max_contributions, self.seeds, distinct=self.distinct)


# --------------------------------------------------------------------------------------------------------------
# histogram


def lattice_histogram_plan(lists: pl.LazyFrame, space: _Space, max_contributions: int) -> pl.LazyFrame:
    """Per-item sums of the lattice weights ``floor(2^k / sqrt(t))`` (column :data:`WEIGHT_LAT`, Int64).

    ``lists`` holds one row per user with the list of its (distinct, at most ``max_contributions``) items. The
    weights (at most 2^k = 2^20) are exploded as Int32, a quarter less memory than Int64 rows, and summed in
    Int64.
    """
    weights = lattice_weights(max_contributions)
    kept = pl.col(space.item).list.len().cast(pl.Int64)
    weight = kept.replace_strict(
        old=pl.int_range(1, max_contributions + 1, eager=True),
        new=pl.Series(weights, dtype=pl.Int32),
        return_dtype=pl.Int32,
    )
    return (
        lists.with_columns(**{WEIGHT_LAT: weight})
        .explode(space.item)
        .group_by(space.item)
        .agg(pl.col(WEIGHT_LAT).cast(pl.Int64).sum())
    )


def lattice_histogram(
    lists_of: ListsOf,
    space: _Space,
    max_contributions: int,
    *,
    passes: int = 1,
    engine: _Engine = "auto",
) -> pl.LazyFrame:
    """The lattice histogram (item, :data:`WEIGHT_LAT`) of the users' bounded lists by the Polars plans, over
    ``passes`` disjoint buckets of users.

    ``lists_of(filter)`` gives the bounded lists of the users ``filter`` keeps (a filter on the prepared
    frame's user-key column). With one pass and the default engine the result is the lazy plan itself (the
    caller collects it once); otherwise each bucket's plan is collected with ``engine`` and its partial
    histogram added into a running sum at once (:func:`_add_histograms`), so that the passes never hold every
    partial histogram. Bounding is per user, so the buckets' sums are the same function of the data and the
    seed; each pass holds about 1/``passes`` of the users in memory (``docs/engines.md``). The bucket hash
    needs no secrecy: it only decides which pass handles a user.

    The Polars plans only: which plan computes a release's histogram (this one, or a compiled step) is chosen
    by :func:`opendp_wgm.kernel.plan_for`.
    """
    if passes == 1:
        plan = lattice_histogram_plan(lists_of(None), space, max_contributions)
        return plan if engine == "auto" else plan.collect(engine=engine).lazy()
    bucket_seed = secrets.randbits(64)

    def bucket_histogram(bucket: int) -> pl.DataFrame:
        users = pl.col(space.user).hash(bucket_seed) % passes == bucket
        return lattice_histogram_plan(lists_of(users), space, max_contributions).collect(engine=engine)

    histogram = bucket_histogram(0)
    for bucket in range(1, passes):  # a loop over passes, not rows: each pass is one lazy plan
        # folded in at once: no pass's partial histogram outlives its fold (only the running sum does)
        histogram = _add_histograms(histogram, bucket_histogram(bucket), space.item)
    return histogram.lazy()


def _add_histograms(histogram: pl.DataFrame, part: pl.DataFrame, item: str) -> pl.DataFrame:
    """The sum of two lattice histograms (item, :data:`WEIGHT_LAT`): one row per item of either, Int64 sums.

    :func:`lattice_histogram` folds each pass's histogram into the running sum as soon as it is collected, so
    it holds one running histogram (at most the distinct items of the passes so far) instead of every pass's
    partial histogram until the end (an item held by users of several buckets has a row in each). Integer sums
    are exact and associative: the same histogram as adding all the parts at once, bit for bit.
    """
    return pl.concat([histogram, part]).group_by(item).agg(pl.col(WEIGHT_LAT).sum())


#: Inside :func:`no_cold_compiled_import`: the compiled modules not imported yet stay so.
_cold_import_deferred = False


@contextmanager
def no_cold_compiled_import() -> Iterator[None]:
    """Within this block, :func:`kernel_jit` and :func:`peel_jit` return ``None`` (the Polars plans run: the same
    release, bit for bit) unless their module is imported already: Numba and the compiled steps' cached code
    are not loaded. Importing them costs 0.4 to 0.9 s, more than the compiled steps save on a small input
    (10^5 rows: 0.04 s either way). For a caller that owns its process and knows its input is small: the
    ``opendp-wgm`` command (:mod:`opendp_wgm.cli._startup`). Which path runs is decided as always otherwise."""
    global _cold_import_deferred  # noqa: PLW0603 - one process-wide switch, restored on exit
    before, _cold_import_deferred = _cold_import_deferred, True
    try:
        yield
    finally:
        _cold_import_deferred = before


def _compiled(module: str) -> ModuleType | None:
    """The compiled module ``opendp_wgm.engines.<module>``, or ``None`` when Numba is not installed (or, inside
    :func:`no_cold_compiled_import`, when the module is not imported yet). Imported on first use (importing
    Numba takes a few tenths of a second)."""
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


def _histogram_below(
    jit: ModuleType, users: _Coding, items: _Coding, bound: int, weights: NDArray[np.int64], threads: int = 1
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """The histogram of the users with at most ``bound`` distinct items, and the rows (grouped by user) and
    offsets of the others: a counting sort of the item codes by user, then each user's distinct items. The codes
    are computed as the rows are read (``users`` uncompacted: a user code is an offset or a hashed code).

    In ``threads`` threads: each counts and then places a chunk of the rows (after the previous chunks' rows
    of each user: the same order as in one pass), then each takes a range of users holding about as many rows,
    with its own per-item marker and histogram (one per thread: the item codes are compact, :func:`_coding`),
    and the histograms are added up: integer sums, the same whatever their order.
    """
    n_users, n_items, rows = users.size, items.size, users.values.size
    chunks = _even_ranges(rows, threads)
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


def coded_histogram(lists: BoundedLists, frame: pl.DataFrame, max_contributions: int, jit: ModuleType) -> pl.DataFrame:
    """The lattice histogram of ``lists`` by the compiled step on coded columns (``frame``: ``lists.lf``
    collected, below 2^31 rows; columns of dtypes :func:`codes_dtype` accepts).

    The same histogram as :func:`lattice_histogram_plan` of ``lists(None)``, bit for bit: the columns are coded
    (:func:`_coding`) and the rows bucketed by user (:func:`_histogram_below`); a user with at most Δ0 distinct
    items keeps them all; a user with more keeps the Δ0 distinct items of smallest key, the keys being
    :func:`bounded_lists_plan`'s (the same Polars expression, on those users' rows only). Which frames it runs
    on is :func:`opendp_wgm.kernel.plan_for`'s choice.
    """
    space = lists.space
    schema = frame.schema
    user_dtype, item_dtype = schema[space.user], schema[space.item]
    bound = lists.max_contributions
    frame = frame.select(_code_expr(space.user, user_dtype), _code_expr(space.item, item_dtype))
    threads = kernel_threads(frame.height, jit)
    users = _coding(frame.get_column(space.user), user_dtype, jit, threads, compact=False)
    items = _coding(frame.get_column(space.item), item_dtype, jit, threads)
    slot = lists.shared
    if slot is not None:  # a later step of the release reads the same rows (Prepared): their codes, written
        user_codes, item_codes = users.codes(jit, threads), items.codes(jit, threads)
        slot.coding = _CodedRows(user_codes, users.size, item_codes, items.size, items.decode)
    weights = lattice_weights(max_contributions)
    histogram, rows, offsets = _histogram_below(jit, users, items, bound, weights, threads)
    if rows.size:  # the users above Δ0 keep their Δ0 distinct items of smallest key, keyed on their rows only
        # on the coded values: a fresh category hashes as its string, as the value did
        keys = frame[rows].select(bound_key(frame.lazy(), space, lists.seeds)).to_series().to_numpy()
        positions = np.arange(rows.size, dtype=np.int64)  # of the rows' codes, in rows' order
        weight = int(weights[bound - 1])
        jit.histogram_above(histogram, items.codes_at(jit, rows), positions, offsets, keys, bound, weight)
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
    """:func:`coded_histogram` where each user's rows form one run (``start``: :func:`_run_starts`), with no
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


# --------------------------------------------------------------------------------------------------------------
# the distinct pairs coded once, for steps that bound the same users several times (DP-SIPS's rounds)


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


#: Seeds of :func:`_text_codes`' hash (no secret: the codes only index arrays, and every row is checked).
_TEXT_SEEDS = (0x5EED, 0xC0DE, 0xFACE, 0xBEEF)


def _text_codes(column: pl.Series, jit: ModuleType, *, runs: bool = False) -> _Codes | None:
    """Codes of a text column without nulls in order of first occurrence, the codes a fresh category map gives it
    (:func:`_code_expr`, then :func:`_codes`), without building the map (a single-threaded cast: 0.4 s on
    imdb_50k's 7·10^6 items): with ``runs``, each user's rows one run, the run index (:func:`_user_runs`); else the
    first-occurrence codes of a 64-bit hash of each value (:func:`opendp_wgm.engines._kernel_jit.dense_codes`).

    Checked, never assumed: every row's hashed value must equal the value of its code's first row (a gather from
    the distinct values, which stay in cache; :func:`_user_runs` checks its runs' values distinct); ``None`` (the
    caller casts) where two values share a hash, or, with ``runs``, where a user's rows are not one run."""
    codes: NDArray[np.integer] | None = _user_runs(column) if runs else None
    hashed = codes is None
    if codes is None:
        hashes = column.hash(*_TEXT_SEEDS).to_numpy().view(np.int64)
        codes, uniques = np.empty(hashes.size, dtype=np.int32), np.empty(hashes.size, dtype=np.int64)
        jit.dense_codes(hashes, codes, uniques)
    if not codes.size:
        return None
    # codes come in increasing order: a code's first row is where the codes exceed all before
    first = np.empty(codes.size, dtype=np.bool_)
    first[0] = True
    np.greater(codes[1:], np.maximum.accumulate(codes)[:-1], out=first[1:])
    values = column.gather(np.flatnonzero(first))
    if hashed and not (values.gather(codes) == column).all():  # runs are checked by _user_runs (distinct heads)
        return None
    return codes, values.len(), values.gather


# --------------------------------------------------------------------------------------------------------------
# release


def noisy_above_threshold(
    weights_lat: np.ndarray, *, scale: float, threshold: float, noise: str = "lattice"
) -> tuple[np.ndarray, np.ndarray]:
    """The integer sums (units 2^-k) plus discrete Gaussian noise, and which exceed T.

    ``noisy_lat > floor(T 2^k)`` is exactly ``noisy > T`` on the lattice; integers only. The Polars release
    and the Spark executors (:mod:`opendp_wgm.engines.spark`) both call this.
    """
    unit = 2.0**LATTICE_BITS
    noisy = weights_lat + sample_discrete_gaussian(scale * unit, weights_lat.shape[0], method=noise)  # type: ignore[arg-type]
    return noisy, noisy > math.floor(threshold * unit)


def weights_frame(items: pl.Series, noisy_lat: pl.Series) -> pl.DataFrame:
    """The released frame: ``items`` and ``noisy_weight`` (Float64, the noisy lattice sums ``noisy_lat`` times
    2^-k, exactly), sorted by item."""
    return (
        items.to_frame()
        .with_columns(noisy_weight=noisy_lat.cast(pl.Float64) / 2.0**LATTICE_BITS)
        .sort(items.name)  # the group-by's row order is arbitrary: sort so that order carries nothing
    )


def release_above_threshold(
    histogram: pl.DataFrame, item: str, *, scale: float, threshold: float, noise: str
) -> pl.DataFrame:
    """Noise the lattice sums (column :data:`WEIGHT_LAT`) and keep the items above the threshold."""
    noisy, keep = noisy_above_threshold(
        histogram[WEIGHT_LAT].to_numpy(), scale=scale, threshold=threshold, noise=noise
    )
    return weights_frame(histogram.get_column(item).filter(pl.Series(keep)), pl.Series(noisy[keep], dtype=pl.Int64))


# --------------------------------------------------------------------------------------------------------------
# candidate counts

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


def _run_starts(column: pl.Series) -> NDArray[np.int64] | None:
    """The offsets of the runs of equal adjacent values (``runs + 1``, from 0 to the length), when every user's
    rows form one run: user ``u``'s rows are ``start[u] <= r < start[u + 1]``, without hashing the values. ``None``
    otherwise, or for a dtype other than text or integers (whose equality need not be the grouping's: NaN floats).

    Checked, never assumed: the runs' values must be distinct (one pass comparing neighbours, then a distinct
    count of one value per run). Files written user by user (the public data sets) pass."""
    if not (column.dtype == pl.String or column.dtype.is_integer()) or column.null_count():
        return None
    if column.len() > _PLAN_SAMPLE_ROWS and _run_starts(column.slice(0, _PLAN_SAMPLE_ROWS)) is None:
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
    form one run (:func:`_run_starts`, which checks it); ``None`` otherwise. The codes repeat each run's index
    over its length (no second pass over the values: half the CPU of ``rle_id`` on text)."""
    start = _run_starts(column)
    if start is None:
        return None
    return np.repeat(np.arange(start.size - 1, dtype=np.uint32), np.diff(start))


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


def peel_jit() -> ModuleType | None:
    """The compiled stage-2 step (:mod:`opendp_wgm.engines._peel_jit`), or ``None`` when Numba is not installed."""
    return _compiled("_peel_jit")


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
    (:func:`_compiled_candidate_pairs`: users grouped and coded ``0, 1, ...``; no read of the rows); where its keyed
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
    positions = _candidate_pairs(lf, space, items, contiguous=False).positions  # no user code per pair
    return np.bincount(positions, minlength=items.len()).astype(np.int64)
