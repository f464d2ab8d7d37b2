"""The Polars plans of the kernel: the bound (per user, a uniform random subset of at most Δ0 distinct items
under a secret keyed hash) and the lattice histogram, in one plan or over ``passes`` buckets of users."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import polars as pl
from numpy.typing import NDArray

from opendp_wgm._spaces import _Space, _value_key
from opendp_wgm._validation import _Engine
from opendp_wgm.privacy.threshold import lattice_weights

if TYPE_CHECKING:

    from opendp_wgm.engines.polars._compiled_histogram import CodedPairs
    from opendp_wgm.engines.polars._prepared import Prepared


__all__ = [
    "VALUE_SEEDS",
    "WEIGHT_LAT",
    "BoundedLists",
    "bound_key",
    "bound_plan",
    "bounded_lists_plan",
    "distinct_pairs_plan",
    "fresh_seeds",
    "keys_of_hashes",
    "lattice_histogram",
    "lattice_histogram_plan",
    "mostly_above",
    "value_hash",
]


#: The column of a lattice histogram: per-item sums of the integer weights (Int64, units of 2^-LATTICE_BITS).
WEIGHT_LAT = "weight_lat"

#: ``(users) -> per-user lists plan``: the bounded lists of the users a filter keeps (``None``: every user).
ListsOf = Callable[[pl.Expr | None], pl.LazyFrame]


def fresh_seeds() -> tuple[int, ...]:
    """A fresh secret 256-bit hash seed (four 64-bit words), drawn per release."""
    return tuple(secrets.randbits(64) for _ in range(4))




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


#: Seeds of each value's public 64-bit hash (:func:`value_hash`; no secret: the secret keys hash a combination of
#: two of them under secret seeds, and the text codes that use them are checked on every row).
VALUE_SEEDS = (0x5EED, 0xC0DE, 0xFACE, 0xBEEF)


def value_hash(column: str, dtype: pl.DataType) -> pl.Expr:
    """The public 64-bit hash of each value of ``column`` (of dtype ``dtype``), by its value only (a Categorical
    by its string, not its code, which depends on other rows)."""
    return _value_key(column, dtype).hash(*VALUE_SEEDS)


def bound_key(lf: pl.LazyFrame, space: _Space, seeds: tuple[int, ...]) -> pl.Expr:
    """The secret key of each (user, item) row: the hash under ``seeds`` of the xor of the user's and the item's
    public hashes (:func:`value_hash`). Equal rows get equal keys, and a user's distinct items distinct inputs to
    the secret hash unless their public hashes collide (then their keys tie, in every plan alike). The compiled
    plan that hashed text to code it reuses those hashes (:func:`keys_of_hashes`): no value is hashed twice."""
    schema = lf.collect_schema()
    return (value_hash(space.user, schema[space.user]) ^ value_hash(space.item, schema[space.item])).hash(*seeds)


def keys_of_hashes(
    user_hashes: NDArray[np.uint64], item_hashes: NDArray[np.uint64], seeds: tuple[int, ...]
) -> NDArray[np.uint64]:
    """:func:`bound_key` of the rows whose users' and items' public hashes (:func:`value_hash`) are given."""
    keys: NDArray[np.uint64] = pl.Series(user_hashes ^ item_hashes).hash(*seeds).to_numpy()
    return keys


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
