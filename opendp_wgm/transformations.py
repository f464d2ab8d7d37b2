r"""Stable steps from raw (user, item) rows to the WGM's weighted histogram.

Both are OpenDP transformations whose stability maps are proved in ``docs/privacy.md`` §1:

- :func:`make_bound_user_items`: per-user dedup, then a uniform random subset of at most Δ0 distinct items
  (without replacement). ``d_in`` users in, ``d_in`` users out.
- :func:`make_candidate_counts`: the number of distinct users holding each item of a public candidate list.
  ``d_in`` users move every count by at most ``d_in``, all in the same direction (monotone ℓ∞).
- :func:`make_weighted_histogram`: each kept item of a user holding ``t`` items gets weight
  :math:`\lfloor 2^{k}/\sqrt{t}\rfloor 2^{-k}` (rounded down to the lattice, so :math:`\ell_2 \le 1`), summed
  per item. Its output metric counts users (:func:`user_distance`, ``d_out = d_in``): the WGM's map
  (:func:`opendp_wgm.make_noisy_threshold`) uses that each user's weights are tied to its ``t``. The
  (ℓ0, ℓ2, ℓ∞) bound :math:`(d_{in}\Delta_0, d_{in}, d_{in})` is :func:`weighted_histogram_l02inf`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import opendp.prelude as dp
import polars as pl
from numpy.typing import NDArray

from opendp_wgm._partial import _to_then
from opendp_wgm._spaces import (
    _BOUND_STEP,
    _assert_features,
    _check_candidates,
    _check_candidates_for,
    _prepare_frame,
    _resolve_space,
    _Space,
)
from opendp_wgm._validation import _MAX_PASSES, _check_d_in, _check_execution, _check_int, _Engine
from opendp_wgm.domains import BoundedUserItems, UserItemsDescriptor, user_items_domain
from opendp_wgm.engines.polars import (
    WEIGHT_LAT,
    BoundedLists,
    candidate_counts,
    fresh_seeds,
    prepared_input,
    shared_of,
)
from opendp_wgm.kernel import Plan, histogram
from opendp_wgm.kernel.plans import checked_plan, refuse
from opendp_wgm.privacy.threshold import LATTICE_BITS, check_max_contributions

__all__ = [
    "BoundedUserItems",
    "UserDistanceDescriptor",
    "WeightedHistogramDescriptor",
    "make_bound_user_items",
    "make_candidate_counts",
    "make_weighted_histogram",
    "then_bound_user_items",
    "then_candidate_counts",
    "then_weighted_histogram",
    "user_distance",
    "weighted_histogram_l02inf",
]

#: Most ``passes``: each pass re-scans the input, so beyond ~10^3 the scans, not memory, dominate.
MAX_PASSES = _MAX_PASSES

def make_bound_user_items(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    item: str | Sequence[str] | None = None,
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
        Item column, when the input domain is OpenDP's and holds more than one other column; a list of
        columns for a composite key (``docs/api.md``).

    Returns
    -------
    opendp.mod.Transformation
        Maps a frame to a :class:`~opendp_wgm.domains.BoundedUserItems`: the distinct (user, item) rows, at most
        Δ0 per user, as a plan (``.lazy()`` gives the ``pl.LazyFrame``, ``.collect()`` the ``pl.DataFrame``).
        Rows with a null user or item are dropped first. :func:`make_weighted_histogram` reads it without
        materialising the rows.

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
    descriptor = UserItemsDescriptor(space.user, space.composite or space.item, max_contributions)

    def function(frame: pl.DataFrame | pl.LazyFrame) -> BoundedUserItems:
        # the seed is drawn per call; the rows are computed when read (by the histogram, or .lazy()/.collect())
        prepared = _prepare_frame(frame, space)  # with the release's shared Prepared value, if it passes one
        return BoundedUserItems(prepared, space, max_contributions, fresh_seeds(), _BOUND_STEP, shared_of(frame))

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
    """A frame of per-item weight sums: columns ``item`` and ``weight`` (Float64, on the lattice 2^-k Z).

    With a composite key (``composite``: its key columns), ``item`` is the Struct of the key columns (named by
    the keys joined by commas), which :func:`opendp_wgm.make_noisy_threshold` unnests in its release."""

    item: str
    max_contributions: int
    lattice_bits: int = LATTICE_BITS
    composite: tuple[str, ...] = ()


@dataclass(frozen=True)
class UserDistanceDescriptor:
    r"""What the user distance between two weighted histograms promises: each user adds the weight
    :math:`\lfloor 2^k/\sqrt t\rfloor 2^{-k}` to each of the ``t`` ≤ ``max_contributions`` items it keeps."""

    max_contributions: int
    lattice_bits: int = LATTICE_BITS


def user_distance(max_contributions: int) -> dp.Metric:
    r"""The output metric of :func:`make_weighted_histogram`: the number of users whose contributions differ.

    Two histograms are at distance ``d`` when they are the histograms of datasets differing by the rows of ``d``
    users (added or removed), each contributing :math:`w(t) = \lfloor 2^{20}/\sqrt t\rfloor 2^{-20}` to each of
    its :math:`t \le \Delta_0` kept items. A distance in users, not in a norm: the WGM's map
    (:func:`opendp_wgm.make_noisy_threshold`) uses that the weights are tied to ``t``, which no (ℓ0, ℓ2, ℓ∞)
    triple expresses.

    Parameters
    ----------
    max_contributions
        Δ0 ≥ 1.

    Returns
    -------
    opendp.mod.Metric
        ``dp.user_distance`` whose descriptor is :class:`UserDistanceDescriptor` (Δ0, lattice bits).
    """
    descriptor = UserDistanceDescriptor(_check_int("max_contributions", max_contributions, minimum=1))
    name = f"WeightedUserDistance(max_contributions={descriptor.max_contributions})"
    return dp.user_distance(name, descriptor=descriptor)


def histogram_space(
    input_domain: dp.Domain, input_metric: dp.Metric, *, single: bool = False
) -> WeightedHistogramDescriptor:
    """The descriptor of a weighted-histogram input space (:func:`make_weighted_histogram`'s output), its user
    distance checked against it: the input of :func:`opendp_wgm.make_noisy_threshold` (any Δ0) or, with
    ``single``, of :func:`opendp_wgm.make_partition_selection` (Δ0 = 1 only). Raises ``ValueError`` naming what
    was expected otherwise."""
    histogram = getattr(input_domain, "descriptor", None)
    if not isinstance(histogram, WeightedHistogramDescriptor) or (single and histogram.max_contributions != 1):
        what = (
            "with max_contributions=1 (the output of make_weighted_histogram after "
            "make_bound_user_items(max_contributions=1))"
            if single
            else "(the output of make_weighted_histogram)"
        )
        msg = f"`input_domain` must be a weighted-histogram domain {what} (found {input_domain})"
        raise ValueError(msg)
    if getattr(input_metric, "descriptor", None) != UserDistanceDescriptor(
        histogram.max_contributions, histogram.lattice_bits
    ):
        at = "at max_contributions=1" if single else f"with max_contributions={histogram.max_contributions}"
        msg = f"`input_metric` must be the user distance of make_weighted_histogram {at} (found {input_metric})"
        raise ValueError(msg)
    return histogram


def weighted_histogram_l02inf(d_in: int, max_contributions: int) -> tuple[int, float, float]:
    r"""The (ℓ0, ℓ2, ℓ∞) distance between the weighted histograms of datasets ``d_in`` users apart.

    A user keeping :math:`t \le \Delta_0` items contributes :math:`w(t) \le 1/\sqrt t` to each, so its vector
    has :math:`\ell_0 = t \le \Delta_0`, :math:`\ell_2 \le 1`, :math:`\ell_\infty \le 1`; by the triangle
    inequality, :math:`(d_{in}\Delta_0,\ d_{in},\ d_{in})` in ``dp.l02inf_distance(dp.absolute_distance(T=float))``
    (``docs/privacy.md`` §1). For chaining :func:`make_weighted_histogram` into a mechanism on that metric; the
    WGM's own map is tighter.
    """
    d_in = _check_d_in(d_in)
    max_contributions = _check_int("max_contributions", max_contributions, minimum=1)
    return d_in * max_contributions, float(d_in), float(d_in)


def _lists_of(frame: object, space: _Space, max_contributions: int) -> BoundedLists:
    """The bounded per-user lists of the histogram's input: the bound step's own plan when ``frame`` is its
    output with at most Δ0 items per user (fast path: no second bound, no exploded frame), else the bound
    applied here, with :func:`make_bound_user_items`' rule, to whatever frame came (so the map holds for any
    input)."""
    shared = None  # the release's Prepared value of the rows bounded here, when its later steps read them
    if isinstance(frame, BoundedUserItems):
        if frame.names != (space.user, space.item):
            msg = f"`frame` must have columns {(space.user, space.item)} (found {frame.names})"
            raise ValueError(msg)
        if frame.max_contributions <= max_contributions:
            return BoundedLists(frame.prepared, space, frame.max_contributions, frame.seeds, shared=frame.shared)
        # bounded to a larger Δ0: bound again, on its prepared rows (a composite key still as one Struct)
        lf = frame.lists().explode(space.item)
    else:
        lf, shared = _prepare_frame(frame, space), shared_of(frame)  # type: ignore[arg-type]
    return BoundedLists(lf, space, max_contributions, fresh_seeds(), shared=shared)


def make_weighted_histogram(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    passes: int = 1,
    engine: _Engine = "auto",
    plan: Plan | str = "auto",
) -> dp.Transformation:
    r"""Sum each user's weight :math:`1/\sqrt{t}` (rounded down to the lattice) over the items they keep.

    Parameters
    ----------
    input_domain, input_metric
        A bounded user-items space, the output space of :func:`make_bound_user_items`.
    passes
        Aggregate the users in this many disjoint hash buckets, one lazy plan each, and add up the partial
        histograms: the same histogram, with peak memory about 1/``passes`` of one pass (at most 1024; each
        pass re-scans the input; ``docs/engines.md``).
    engine : {'auto', 'in-memory', 'streaming'}
        Polars engine that collects each pass. With one pass and ``"auto"`` the output is a lazy plan.
    plan
        Which :class:`opendp_wgm.kernel.Plan` computes the histogram (or its name): ``"auto"`` lets
        :func:`opendp_wgm.kernel.plan_for` choose (``docs/engines.md``, *Which plan computes the histogram*). Every
        plan gives the same histogram; a plan that cannot run on the input (a compiled one without Numba, with
        ``passes > 1``, the streaming engine or a dtype it does not code) is refused with a ``ValueError``: here
        when Numba, ``passes`` or ``engine`` rule it out, else when the transformation first runs (from the
        frame's schema), before anything is computed. None falls back to another.

    Returns
    -------
    opendp.mod.Transformation
        Maps a bounded input (a :class:`~opendp_wgm.domains.BoundedUserItems`, or any frame with the two
        columns) to a ``pl.LazyFrame`` with the item column and ``weight`` (Float64, exact multiples of
        :math:`2^{-20}`), one row per item some user keeps (a composite key as one Struct column, named by its
        key columns joined by commas). The output metric is :func:`user_distance` (Δ0):
        a distance in users, ``d_out = d_in``.

    Notes
    -----
    The output of :func:`make_bound_user_items` is aggregated as it is (its per-user lists). Any other input
    is bounded here, with :func:`make_bound_user_items`' rule (dedup, then at most Δ0 distinct items per user by
    a keyed hash under a fresh seed): a frame of the bounded domain keeps every row (same histogram), and a
    frame that breaks the domain's promise (a hand-built one) cannot break the map.

    A user keeping :math:`t \le \Delta_0` items contributes :math:`w(t) = \lfloor 2^k/\sqrt t\rfloor 2^{-k}
    \le 1/\sqrt t` to each. The output metric counts users (``d_out = d_in``), so that a mechanism on it may use
    that the weights are tied to ``t``: :func:`opendp_wgm.make_noisy_threshold` does (the WGM's map). Earlier
    versions stated :math:`(d_{in}\Delta_0, d_{in}, d_{in})` in ``dp.l02inf_distance``; that bound is
    :func:`weighted_histogram_l02inf`.

    Required features: ``contrib``, ``honest-but-curious``.
    """
    _assert_features()
    descriptor = getattr(input_domain, "descriptor", None)
    if not isinstance(descriptor, UserItemsDescriptor) or descriptor.max_contributions is None:
        msg = (
            "`input_domain` must be a bounded user-items domain (the output of make_bound_user_items) "
            f"(found {input_domain})"
        )
        raise ValueError(msg)
    passes, engine = _check_execution(passes, engine)
    chosen = checked_plan(plan)
    refuse(chosen, passes=passes, engine=engine, dtypes=None)
    space = _resolve_space(input_domain, input_metric)
    # Δ0 within the lattice weights' range (make_bound_user_items takes any Δ0 ≥ 1): refused here, not at release
    max_contributions = check_max_contributions(descriptor.max_contributions)
    output_domain = dp.user_domain(
        f"WeightedHistogramDomain(item={space.item!r}, max_contributions={max_contributions})",
        lambda frame: isinstance(frame, (pl.DataFrame, pl.LazyFrame)),
        descriptor=WeightedHistogramDescriptor(space.item, max_contributions, composite=space.composite),
    )

    def function(frame: object) -> pl.LazyFrame:
        lists_of = _lists_of(frame, space, max_contributions)
        lattice = histogram(chosen, lists_of, max_contributions, passes=passes, engine=engine)
        return lattice.select(space.item, weight=pl.col(WEIGHT_LAT).cast(pl.Float64) * 2.0**-LATTICE_BITS)

    return dp.t.make_user_transformation(
        input_domain,
        input_metric,
        output_domain,
        user_distance(max_contributions),
        function,
        _check_d_in,  # identity: d_in users in, the same d_in users' contributions out
    )


def make_candidate_counts(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    candidates: Sequence[Any] | pl.Series | pl.DataFrame | NDArray[Any],
    item: str | Sequence[str] | None = None,
) -> dp.Transformation:
    r"""Count the distinct users holding each item of a public candidate list.

    Parameters
    ----------
    input_domain, input_metric
        As for :func:`make_bound_user_items`.
    candidates
        The public candidate items (distinct, no nulls), e.g. the items released by a WGM. They are cast to
        the item column's dtype (at construction when a ``dp.lazyframe_domain`` states it, else when the
        transformation runs); a cast that changes a candidate or merges two raises an error. With a composite
        key, a ``pl.DataFrame`` with the key columns (one row per candidate), or a Struct Series of them.
    item
        Item column, when the input domain is OpenDP's and holds more than one other column; a list of
        columns for a composite key.

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
        counts: list[int] = candidate_counts(prepared_input(frame, space), space, series).tolist()
        return counts

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
