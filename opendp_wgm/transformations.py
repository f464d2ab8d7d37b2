r"""Stable steps from raw (user, item) rows to the WGM's weighted histogram.

Both are OpenDP transformations whose stability maps are proved in ``docs/privacy.md`` §1:

- :func:`make_bound_user_items`: per-user dedup, then a uniform random subset of at most Δ0 distinct items
  (without replacement). ``d_in`` users in, ``d_in`` users out.
- :func:`make_candidate_counts`: the number of distinct users holding each item of a public candidate list.
  ``d_in`` users move every count by at most ``d_in``, all in the same direction (monotone ℓ∞).
- :func:`make_weighted_histogram`: each kept item of a user holding ``t`` items gets weight
  :math:`\lfloor 2^{k}/\sqrt{t}\rfloor 2^{-k}` (rounded down to the lattice, so :math:`\ell_2 \le 1`), summed
  per item. ``d_in`` users move the histogram by :math:`(\ell_0, \ell_2, \ell_\infty) \le
  (d_{in}\Delta_0, d_{in}, d_{in})`.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import opendp.prelude as dp
import polars as pl

from opendp_wgm._partial import _to_then
from opendp_wgm._validation import _check_d_in, _check_int
from opendp_wgm.privacy.threshold import LATTICE_BITS, lattice_weights
from opendp_wgm.domains import (
    UserItemsDescriptor,
    _assert_features,
    _prepare_frame,
    _resolve_space,
    _Space,
    _value_key,
    user_items_domain,
)

__all__ = [
    "WeightedHistogramDescriptor",
    "make_bound_user_items",
    "make_candidate_counts",
    "make_weighted_histogram",
    "then_bound_user_items",
    "then_candidate_counts",
    "then_weighted_histogram",
]

def _seeds() -> list[int]:
    """A fresh secret 256-bit hash seed (four 64-bit words), drawn per call of a release."""
    return [secrets.randbits(64) for _ in range(4)]


def _bounded_lists_plan(lf: pl.LazyFrame, space: _Space, max_contributions: int) -> pl.LazyFrame:
    """One row per user: the list of its ``max_contributions`` distinct items of smallest random key.

    The key is a hash of (user, item) under a fresh secret seed, so a user's kept subset is a uniform random
    subset of its distinct items and depends on no other user's rows (the stability argument conditions on
    the seed). The hash reads values only (:func:`~opendp_wgm.domains._value_key`: a Categorical is hashed as
    its string, not its code, which depends on other rows). Duplicates share a key, so after sorting they are
    adjacent and ``unique`` drops them; ``head`` then keeps at most ``max_contributions`` distinct items
    whatever the hash collisions.
    """
    user, item = space.user, space.item
    schema = lf.collect_schema()
    seeds = _seeds()
    key = pl.struct(_value_key(user, schema[user]), _value_key(item, schema[item])).hash(*seeds)
    return (
        lf.with_columns(_key=key)
        .group_by(user)
        .agg(pl.col(item).sort_by("_key").unique(maintain_order=True).head(max_contributions))
    )


def _bound_plan(lf: pl.LazyFrame, space: _Space, max_contributions: int) -> pl.LazyFrame:
    """Distinct (user, item) rows, at most ``max_contributions`` per user."""
    return _bounded_lists_plan(lf, space, max_contributions).explode(space.item)


def _lattice_histogram_plan(lists: pl.LazyFrame, space: _Space, max_contributions: int) -> pl.LazyFrame:
    """Per-item sums of the lattice weights ``floor(2^k / sqrt(t))`` (Int64, lattice units).

    ``lists`` holds one row per user with the list of its (distinct, at most ``max_contributions``) items.
    """
    weights = lattice_weights(max_contributions)
    kept = pl.col(space.item).list.len().cast(pl.Int64)
    weight = kept.replace_strict(
        old=pl.int_range(1, max_contributions + 1, eager=True),
        new=pl.Series(weights),
        return_dtype=pl.Int64,
    )
    return (
        lists.with_columns(weight_lat=weight)
        .explode(space.item)
        .group_by(space.item)
        .agg(pl.col("weight_lat").sum())
    )


def make_bound_user_items(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    item: str | None = None,
) -> dp.Transformation:
    r"""Keep a uniform random subset of at most Δ0 distinct items per user.

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or OpenDP's ``dp.lazyframe_domain`` with
        ``dp.symmetric_id_distance``.
    max_contributions
        Δ0 ≥ 1, the most distinct items a user keeps.
    item
        Item column, when the input domain is OpenDP's and holds more than one other column.

    Returns
    -------
    opendp.mod.Transformation
        Maps a frame to a ``pl.LazyFrame`` of distinct (user, item) rows, at most Δ0 per user. Rows with a
        null user or item are dropped first.

    Notes
    -----
    Stability: :math:`d_{out} = d_{in}` under ``symmetric_id_distance``. Each user's kept subset is a
    function of that user's rows and a secret per-call seed only, so adding or removing ``d_in`` users
    changes exactly those users' rows of the output (``docs/privacy.md`` §1).

    Required features: ``contrib``, ``honest-but-curious``.
    """
    _assert_features()
    max_contributions = _check_int("max_contributions", max_contributions, minimum=1)
    space = _resolve_space(input_domain, input_metric, item)
    descriptor = UserItemsDescriptor(space.user, space.item, max_contributions)

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
        return _bound_plan(_prepare_frame(frame, space), space, max_contributions)

    return dp.t.make_user_transformation(
        input_domain,
        input_metric,
        user_items_domain(descriptor),
        dp.symmetric_id_distance(pl.col(space.user)),
        function,
        _check_d_in,  # identity: only the added/removed users' rows change
    )


@dataclass(frozen=True)
class WeightedHistogramDescriptor:
    """A frame of per-item weight sums: columns ``item`` and ``weight`` (Float64, on the lattice 2^-k Z)."""

    item: str
    max_contributions: int
    lattice_bits: int = LATTICE_BITS


def make_weighted_histogram(input_domain: dp.Domain, input_metric: dp.Metric) -> dp.Transformation:
    r"""Sum each user's weight :math:`1/\sqrt{t}` (rounded down to the lattice) over the items they keep.

    Parameters
    ----------
    input_domain, input_metric
        A bounded user-items space, the output space of :func:`make_bound_user_items`.

    Returns
    -------
    opendp.mod.Transformation
        Maps a frame to a ``pl.LazyFrame`` with the item column and ``weight`` (Float64, exact
        multiples of :math:`2^{-20}`), one row per item some user keeps.

    Notes
    -----
    The bound is enforced here too, with :func:`make_bound_user_items`' rule (dedup, then at most Δ0 distinct
    items per user by a keyed hash under a fresh seed): a frame of the bounded domain passes unchanged, and a
    frame that breaks the domain's promise (a hand-built one) cannot break the map below.
    A user keeping :math:`t \le \Delta_0` items contributes :math:`w(t) = \lfloor 2^k/\sqrt t\rfloor 2^{-k}
    \le 1/\sqrt t` to each, so its vector has :math:`\ell_0 = t \le \Delta_0`, :math:`\ell_2 \le 1`,
    :math:`\ell_\infty \le 1`. By the triangle inequality ``d_in`` users give

    .. math:: d_{out} = (d_{in}\Delta_0,\ d_{in},\ d_{in})

    in ``dp.l02inf_distance(dp.absolute_distance(T=float))``. (The WGM's own map is tighter than this
    triple: it uses that the weights are tied to ``t``; see :func:`opendp_wgm.make_wgm`.)

    Required features: ``contrib``, ``honest-but-curious``.
    """
    _assert_features()
    descriptor = getattr(input_domain, "descriptor", None)
    if not isinstance(descriptor, UserItemsDescriptor) or descriptor.max_contributions is None:
        msg = (
            "`input_domain` must be a bounded user-items domain (the output of make_bound_user_items), "
            f"got {input_domain}"
        )
        raise ValueError(msg)
    space = _resolve_space(input_domain, input_metric)
    max_contributions = descriptor.max_contributions
    output_domain = dp.user_domain(
        f"WeightedHistogramDomain(item={space.item!r}, max_contributions={max_contributions})",
        lambda frame: isinstance(frame, (pl.DataFrame, pl.LazyFrame)),
        descriptor=WeightedHistogramDescriptor(space.item, max_contributions),
    )

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
        # the bound is enforced, not trusted: the domain's member check sees column names only, and on a
        # bounded frame this keeps every row (same histogram)
        lists = _bounded_lists_plan(_prepare_frame(frame, space), space, max_contributions)
        plan = _lattice_histogram_plan(lists, space, max_contributions)
        return plan.select(space.item, weight=pl.col("weight_lat").cast(pl.Float64) * 2.0**-LATTICE_BITS)

    def stability_map(d_in: int) -> tuple[int, float, float]:
        d_in = _check_d_in(d_in)
        return d_in * max_contributions, float(d_in), float(d_in)

    return dp.t.make_user_transformation(
        input_domain,
        input_metric,
        output_domain,
        dp.l02inf_distance(dp.absolute_distance(T=float)),
        function,
        stability_map,
    )


def _check_candidates(candidates: Sequence | pl.Series | np.ndarray) -> pl.Series:
    """The public candidate list as a Series: distinct, no nulls (order is kept: it indexes the output)."""
    if isinstance(candidates, (str, bytes)) or not hasattr(candidates, "__len__"):
        msg = f"`candidates` must be a sequence of items (found {type(candidates).__name__})"
        raise TypeError(msg)
    series = candidates.rename("candidate") if isinstance(candidates, pl.Series) else pl.Series("candidate", candidates)
    if series.null_count():
        msg = "`candidates` must not contain nulls"
        raise ValueError(msg)
    if series.is_duplicated().any():
        msg = f"`candidates` must be distinct ({series.is_duplicated().sum()} duplicated entries)"
        raise ValueError(msg)
    return series


_TEXT_DTYPES = (pl.String, pl.Categorical, pl.Enum)

def _cast_candidates(candidates: pl.Series, dtype: pl.DataType) -> pl.Series:
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


def _check_candidates_for(candidates: pl.Series, space: _Space) -> pl.Series:
    """Check at construction that ``candidates`` cast exactly to the item dtype the input domain states (if it
    states one: ``dp.lazyframe_domain``); the release checks again against the data's dtype
    (:func:`_cast_candidates`)."""
    dtype = space.item_dtype
    return candidates if dtype is None else _cast_candidates(candidates, dtype).rename(candidates.name)


def _candidate_counts(lf: pl.LazyFrame, space: _Space, candidates: pl.Series) -> np.ndarray:
    """Distinct-user counts of each candidate, in the candidates' order (int64; 0 for absent items)."""
    if candidates.len() == 0:
        return np.zeros(0, dtype=np.int64)
    item_dtype = lf.collect_schema()[space.item]
    # cast the public list to the data's dtype (never the data to the list's), exactly
    keys = pl.LazyFrame({space.item: _cast_candidates(candidates, item_dtype)}).with_row_index("_position")
    wanted = pl.col(space.item).is_in(keys.collect()[space.item].implode())
    # filter first (pushed into a file scan), then distinct users per item: n_unique per group holds a hash set
    # per candidate, where a frame-wide unique() of the (user, item) rows took 4x the memory (3e7 rows: 5.6 GiB
    # against 1.4 GiB) and 3x the time
    counts = lf.filter(wanted).group_by(space.item).agg(pl.col(space.user).n_unique().alias("len"))
    joined = keys.join(counts, on=space.item, how="left").sort("_position")
    return joined.select(pl.col("len").fill_null(0).cast(pl.Int64)).collect().to_series().to_numpy()


def make_candidate_counts(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    candidates: Sequence | pl.Series | np.ndarray,
    item: str | None = None,
) -> dp.Transformation:
    r"""Count the distinct users holding each item of a public candidate list.

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or OpenDP's ``dp.lazyframe_domain`` with
        ``dp.symmetric_id_distance``.
    candidates
        The public candidate items (distinct, no nulls), e.g. the items released by a WGM. They are cast to
        the item column's dtype (at construction when a ``dp.lazyframe_domain`` states it, else when the
        transformation runs); a cast that changes a candidate or merges two raises an error.
    item
        Item column, when the input domain is OpenDP's and holds more than one other column.

    Returns
    -------
    opendp.mod.Transformation
        Maps a frame to a list of ``len(candidates)`` integer counts, in the candidates' order, in
        ``dp.vector_domain(dp.atom_domain(T=dp.i64), size=len(candidates))`` with
        ``dp.linf_distance(T=dp.i64, monotonic=True)``: chain it with ``dp.m.then_noisy_top_k`` or
        ``dp.m.then_noisy_max``.

    Notes
    -----
    Counts are of *distinct* users (a user's duplicate rows count once) and are not clipped, so no Δ0 is
    needed. Adding ``d_in`` users raises each count by at most ``d_in`` and lowers none (removing lowers
    only): the counts move monotonically, :math:`d_{out} = d_{in}` in monotone ℓ∞ (``docs/privacy.md`` §1).

    Required features: ``contrib``, ``honest-but-curious``.
    """
    _assert_features()
    space = _resolve_space(input_domain, input_metric, item)
    series = _check_candidates_for(_check_candidates(candidates), space)

    def function(frame: pl.DataFrame | pl.LazyFrame) -> list[int]:
        return _candidate_counts(_prepare_frame(frame, space), space, series).tolist()

    return dp.t.make_user_transformation(
        input_domain,
        input_metric,
        dp.vector_domain(dp.atom_domain(T=dp.i64), size=series.len()),
        dp.linf_distance(T=dp.i64, monotonic=True),
        function,
        _check_d_in,
    )


then_bound_user_items = _to_then(make_bound_user_items)
then_candidate_counts = _to_then(make_candidate_counts)
then_weighted_histogram = _to_then(make_weighted_histogram)
