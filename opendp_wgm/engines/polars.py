r"""The release kernel on Polars: the plan functions every Polars measurement runs.

The WGM (:func:`opendp_wgm.make_wgm` = ``make_bound_user_items >> make_weighted_histogram >>
make_noisy_threshold``), its two-stage uses and the baselines build their releases from these steps only:

- :func:`bounded_lists_plan` / :func:`bound_plan`: per user, a uniform random subset of at most Δ0 distinct items
  (keyed hash of the values under a secret seed);
- :func:`lattice_histogram_plan` / :func:`lattice_histogram`: per-item sums of the lattice weights
  :math:`\lfloor 2^{20}/\sqrt t\rfloor`, in one plan or over disjoint user buckets (``passes``);
- :func:`noisy_above_threshold` / :func:`release_above_threshold`: exact discrete Gaussian noise on the integer
  sums and the threshold, in integers (the Spark executors call :func:`noisy_above_threshold` too);
- :func:`candidate_counts`: distinct-user counts of a public candidate list (stage 2 of top-k).

The names are public within the engines package (the Spark engine implements the same steps); they are not part
of the package's top-level API.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable

import numpy as np
import polars as pl
from numpy.typing import NDArray

from opendp_wgm._spaces import _Space, _value_key
from opendp_wgm._validation import _Engine
from opendp_wgm.privacy.threshold import LATTICE_BITS, lattice_weights
from opendp_wgm.samplers import sample_discrete_gaussian

__all__ = [
    "WEIGHT_LAT",
    "bound_plan",
    "bounded_lists_plan",
    "candidate_counts",
    "cast_candidates",
    "fresh_seeds",
    "lattice_histogram",
    "lattice_histogram_plan",
    "noisy_above_threshold",
    "release_above_threshold",
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
# bound


def bounded_lists_plan(
    lf: pl.LazyFrame, space: _Space, max_contributions: int, seeds: tuple[int, ...] | None = None
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
    per-user step*).
    """
    user, item = space.user, space.item
    schema = lf.collect_schema()
    seeds = fresh_seeds() if seeds is None else seeds
    key = pl.struct(_value_key(user, schema[user]), _value_key(item, schema[item])).hash(*seeds)
    # cached: both branches below read the lists, which Polars would otherwise build twice
    lists = lf.group_by(user).agg(pl.col(item).unique()).cache()
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
    """The lattice histogram (item, :data:`WEIGHT_LAT`) of the users' bounded lists, over ``passes`` disjoint
    buckets of users.

    ``lists_of(filter)`` gives the bounded lists of the users ``filter`` keeps (a filter on the prepared
    frame's user-key column). With one pass and the default engine the result is the lazy plan itself (the
    caller collects it once); otherwise each bucket's plan is collected with ``engine`` and the partial
    histograms are added up. Bounding is per user, so the buckets' sums are the same function of the data and
    the seed; each pass holds about 1/``passes`` of the users in memory (``docs/engines.md``). The bucket hash
    needs no secrecy: it only decides which pass handles a user.
    """
    if passes == 1:
        plan = lattice_histogram_plan(lists_of(None), space, max_contributions)
        return plan if engine == "auto" else plan.collect(engine=engine).lazy()
    bucket_seed = secrets.randbits(64)
    parts = []
    for bucket in range(passes):  # a loop over passes, not rows: each pass is one lazy plan
        users = pl.col(space.user).hash(bucket_seed) % passes == bucket
        plan = lattice_histogram_plan(lists_of(users), space, max_contributions)
        parts.append(plan.collect(engine=engine))
    return pl.concat(parts).group_by(space.item).agg(pl.col(WEIGHT_LAT).sum()).lazy()


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
    Text and numbers never match each other. Raises before any data is read or any noise drawn.
    """
    source = candidates.dtype
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
    if cast.is_duplicated().any():
        examples = candidates.filter(cast.is_duplicated()).head(4).to_list()
        msg = f"`candidates` must stay distinct in the item column's type {dtype} (found {examples})"
        raise ValueError(msg)
    return cast


def candidate_counts(lf: pl.LazyFrame, space: _Space, candidates: pl.Series) -> NDArray[np.int64]:
    """Distinct-user counts of each candidate on a prepared frame, in the candidates' order (int64; 0 for
    absent items)."""
    if candidates.len() == 0:
        return np.zeros(0, dtype=np.int64)
    item_dtype = lf.collect_schema()[space.item]
    # cast the public list to the data's dtype (never the data to the list's), exactly
    keys = pl.LazyFrame({space.item: cast_candidates(candidates, item_dtype)}).with_row_index("_position")
    wanted = pl.col(space.item).is_in(keys.collect()[space.item].implode())
    # filter first (pushed into a file scan), then distinct users per item: n_unique per group holds a hash set
    # per candidate, where a frame-wide unique() of the (user, item) rows took 4x the memory (3e7 rows: 5.6 GiB
    # against 1.4 GiB) and 3x the time
    counts = lf.filter(wanted).group_by(space.item).agg(pl.col(space.user).n_unique().alias("len"))
    joined = keys.join(counts, on=space.item, how="left").sort("_position")
    return joined.select(pl.col("len").fill_null(0).cast(pl.Int64)).collect().to_series().to_numpy()
