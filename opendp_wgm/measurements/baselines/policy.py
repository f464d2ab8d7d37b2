r"""Set-union baselines: the policy mechanisms of the paper's experiments.

- :func:`make_policy_gaussian` — Gopi et al. (2020) Policy Gaussian: users, in a random order, move the
  weights of their (Δ0-bounded) items toward a cap Γ = T + ασ by a step of ℓ2 length at most 1; Gaussian
  noise and the WGM's threshold T are then applied. Default update: Gopi's ℓ2 descent.
  ``descent="reference_l1"`` is the paper reference's key-ordered "max-sum" rule, kept for comparison only.
- :func:`make_policy_greedy` — Carvalho et al. (2022) Policy Greedy: no Δ0, each user spends an ℓ1
  budget of 1 greedily on its most frequent items; Laplace noise and threshold. The reference's privacy bug
  (noising and releasing items that no user gave weight to, a quirk of the paper's reference code) is fixed.

Everything that is noised lives on the lattice :math:`2^{-20}\mathbb{Z}` (integers in code) and is noised
by exact samplers, as in :mod:`opendp_wgm.measurements.wgm`. The policies are sequential over users by
nature: the input is turned into CSR arrays (user → item codes) with Polars, and a Python loop over users
applies a vectorised NumPy update to an ``int64`` weight vector; with Numba installed (extra ``[fast]``) the ℓ2
descent's loop and Policy Gaussian's preparation are compiled, with identical results
(:mod:`opendp_wgm.measurements.baselines._policy_jit`). The
privacy arguments, and the places where they are *not* complete, are in ``docs/baselines.md``.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from types import ModuleType
from typing import Any, Literal, cast

import numpy as np
import opendp.prelude as dp
import polars as pl

from opendp_wgm._partial import _to_then
from opendp_wgm._spaces import _assert_features, _prepare_frame, _released, _resolve_space, _Space, _value_key
from opendp_wgm._validation import _check_choice, _check_d_in, _check_positive, _check_real
from opendp_wgm.engines.polars import (
    bound_key,
    bounded_lists_plan,
    chunk_views,
    fresh_seeds,
    in_threads,
    kernel_jit,
    kernel_threads,
    mostly_above,
    release_above_threshold,
    user_ranges,
)
from opendp_wgm.measurements._user_items import user_item_csr
from opendp_wgm.measurements.wgm import check_noise, wgm_arguments, wgm_privacy_map
from opendp_wgm.privacy.budget import Budget, check_gaussian_measure, measure_of
from opendp_wgm.privacy.calibrate import calibrate_policy_greedy, calibrate_wgm
from opendp_wgm.privacy.threshold import LATTICE_BITS, check_max_contributions
from opendp_wgm.samplers import NoiseMethod

__all__ = [
    "make_policy_gaussian",
    "make_policy_gaussian_from_budget",
    "make_policy_greedy",
    "make_policy_greedy_from_budget",
    "then_policy_gaussian",
    "then_policy_gaussian_from_budget",
    "then_policy_greedy",
    "then_policy_greedy_from_budget",
]

Descent = Literal["l2", "reference_l1"]
_DESCENTS: tuple[Descent, ...] = ("l2", "reference_l1")

#: One unit of weight on the lattice 2^-k Z, and its square (a user's squared-ℓ2 budget in lattice units).
_UNIT = 1 << LATTICE_BITS
_UNIT_SQ = 1 << (2 * LATTICE_BITS)


def assert_idealized() -> None:
    """The policy mechanisms' maps rest on published proofs that our implementation meets only ideally."""
    _assert_features()
    try:
        dp.assert_features("idealized-numerics")
    except dp.OpenDPException as err:
        msg = (
            'the policy baselines need dp.enable_features("idealized-numerics") as well: their privacy maps '
            "are the published ones (Gopi et al. 2020; Carvalho et al. 2022), which assume exact arithmetic "
            "(the ℓ2 contraction of the policy update) or leave a gap (support changes of Policy Greedy); "
            "see docs/baselines.md. Use them to compare, not to publish."
        )
        raise dp.OpenDPException("FailedFunction", msg) from err


def _check_descent(descent: Any) -> Descent:
    return _check_choice("descent", descent, _DESCENTS)


# ----------------------------------------------------------------------------------------------------------
# per-user update rules: pure functions of one user's current lattice weights (int64 arrays)
# ----------------------------------------------------------------------------------------------------------
def _fit_l2(increment: np.ndarray) -> np.ndarray:
    """Shrink nonnegative lattice increments until their ℓ2 norm is <= 1 (one unit), in exact integers.

    Subtracting one unit from every positive entry keeps equal entries equal (the threshold argument of
    ``docs/baselines.md`` §2 needs that). The float computations upstream already floor every entry, so
    this loop runs only if float rounding pushed a vector over the unit sphere by a few ulp.
    """
    while int(increment @ increment) > _UNIT_SQ:
        increment = np.maximum(increment - 1, 0)
    return increment


def _l2_increment(weights: np.ndarray, cap: int) -> np.ndarray:
    r"""Gopi et al.'s ℓ2-descent step for one user, on the lattice.

    With candidates :math:`S = \{x : H_x < \Gamma\}`, gaps :math:`d_x = \Gamma - H_x` and :math:`z = \|d\|_2`
    (all in lattice units), each candidate gets :math:`\lfloor \min(1, z)\, d_x / z \rfloor`: a step of
    ℓ2 length at most one unit toward the cap, rounded *down* (toward zero) onto the lattice.

    Parameters
    ----------
    weights
        ``int64`` lattice weights :math:`H_x` of the user's distinct items.
    cap
        :math:`\Gamma` in lattice units.

    Returns
    -------
    numpy.ndarray
        ``int64`` increments, 0 on non-candidates; their ℓ2 norm is at most one unit.
    """
    increment = np.zeros(weights.shape[0], dtype=np.int64)
    candidates = weights < cap
    if not candidates.any():
        return increment
    increment[candidates] = _l2_candidates(weights[candidates], cap)
    return increment


def _l2_candidates(weights: np.ndarray, cap: int) -> np.ndarray:
    """The ℓ2-descent increments of candidates only (all ``weights < cap``)."""
    gap = (cap - weights).astype(np.float64)
    z = math.sqrt(float(gap @ gap))
    # z <= one unit: the whole gap fits in the unit ball and every candidate reaches the cap
    increment = cap - weights if z <= _UNIT else np.floor(gap * (_UNIT / z)).astype(np.int64)
    return _fit_l2(increment)


def _reference_l1_increment(weights: np.ndarray, cap: int) -> np.ndarray:
    r"""The reference's default "L1" (heyyjudes max-sum) step for one user, on the lattice.

    ``weights`` are the user's distinct items *in ascending item-key order* (the reference orders candidates
    by key, not by gap). With candidates :math:`x_0, \dots, x_{r-1}`, gaps :math:`g_i` and a squared budget
    :math:`b = 1`: while :math:`g_i^2 (r - i) < b`, fill :math:`x_i` to the cap and set :math:`b \leftarrow b -
    g_i^2`; at the first :math:`i` where this fails, add :math:`b / \sqrt{r - i}` to *every* remaining candidate
    and stop (as the paper's reference code does, quirks included: it under-spends, and it can overshoot the
    cap). The spread increment is rounded down onto the lattice; the user's squared ℓ2 is
    :math:`(1 - b) + b^2 \le 1`.
    No proof that this rule is contractive is known.
    """
    increment = np.zeros(weights.shape[0], dtype=np.int64)
    candidates = np.flatnonzero(weights < cap)
    r = candidates.shape[0]
    if r == 0:
        return increment
    gap = cap - weights[candidates]
    gap_f = gap.astype(np.float64)
    square = gap_f * gap_f
    # budget left before position i, in squared lattice units (float64: entries are < 2^53 wherever it matters)
    budget = _UNIT_SQ - np.concatenate(([0.0], np.cumsum(square[:-1])))
    fill = square * (r - np.arange(r)) < budget
    stop = int(np.argmin(fill)) if not fill.all() else r
    increment[candidates[:stop]] = gap[:stop]
    if stop < r:
        spread = math.floor(budget[stop] / (_UNIT * math.sqrt(r - stop)))
        increment[candidates[stop:]] = max(spread, 0)
    return _fit_l2(increment)


def _greedy_increment(weights: np.ndarray, cap: int) -> np.ndarray:
    r"""Carvalho et al.'s greedy step for one user, on the lattice (exact integer arithmetic).

    ``weights`` are the user's distinct items in priority order (multiplicity in the user's raw list,
    descending; ties by first occurrence). With a budget :math:`b = 1`: for each candidate (:math:`H_x <
    \Gamma`) in order, if its gap :math:`\Gamma - H_x < b` it is filled to the cap and :math:`b` decreases by the
    gap; otherwise it gets :math:`b` and the user stops. The increments sum to at most one unit (ℓ1).
    """
    increment = np.zeros(weights.shape[0], dtype=np.int64)
    candidates = np.flatnonzero(weights < cap)
    if candidates.shape[0] == 0:
        return increment
    gap = cap - weights[candidates]
    budget = _UNIT - np.concatenate(([0], np.cumsum(gap[:-1])))
    fill = gap < budget
    if fill.all():
        increment[candidates] = gap
    else:
        stop = int(np.argmin(fill))
        increment[candidates[:stop]] = gap[:stop]
        increment[candidates[stop]] = budget[stop]
    return increment


# ----------------------------------------------------------------------------------------------------------
# CSR input: user -> item codes, users in a uniformly random order
# ----------------------------------------------------------------------------------------------------------
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


def _bounded_csr(lf: pl.LazyFrame, space: _Space, max_contributions: int, *, key_order: bool) -> _UserItems:
    """The CSR arrays of Policy Gaussian: Δ0-bounded lists (one row per user), ordered by the user's keyed hash.

    When most users hold more than Δ0 items (the keyed plan's case), without ``key_order``, with Numba and at
    least :data:`_JIT_MIN_ROWS` rows: :func:`_hashed_csr`. Otherwise (and whenever that cannot vouch for its
    arrays) Polars builds the lists; the order (and, for ``key_order``, sorting) is decided on the users' list
    rows — one per user, not one per item — and applied to the flat item codes; the users' offsets are the
    lists' lengths. Both keep the same items for the same seeds, in the same user order.
    """
    user, item = space.user, space.item
    bound_seeds, order_seeds = fresh_seeds(), fresh_seeds()
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


# ----------------------------------------------------------------------------------------------------------
# the sequential loops (one iteration per user: Python with NumPy inside, or compiled for the ℓ2 descent)
# ----------------------------------------------------------------------------------------------------------
#: below this many users the NumPy loop (< ~0.3 s) beats importing Numba (and compiling, once per machine)
_JIT_MIN_USERS = 20_000


def _policy_weights(data: _UserItems, cap: int, rule: str) -> np.ndarray:
    """Run the policy over the users in CSR order; return the ``int64`` lattice weight of every code."""
    weights = np.zeros(data.n_codes, dtype=np.int64)
    codes = data.codes
    bounds = data.offsets.tolist()
    if rule == "l2":
        kernel = _l2_kernel() if len(bounds) > _JIT_MIN_USERS else None
        if kernel is None:
            _l2_steps(codes, bounds, weights, cap)
            return weights
        user = 0
        while (user := kernel(codes, data.offsets, weights, cap, _UNIT, user)) < len(bounds) - 1:
            # this user's increments depend on the BLAS summation order of `gap @ gap`: NumPy's own step
            _l2_steps(codes, bounds[user : user + 2], weights, cap)
            user += 1
        return weights
    step = _reference_l1_increment if rule == "reference_l1" else _greedy_increment
    for start, end in itertools.pairwise(bounds):
        idx = codes[start:end]
        current = weights[idx]
        if (current >= cap).all():
            continue
        weights[idx] = current + step(current, cap)
    return weights


def _l2_steps(codes: np.ndarray, bounds: list[int], weights: np.ndarray, cap: int) -> None:
    """The ℓ2 steps of the users delimited by ``bounds`` (CSR offsets), in NumPy, on ``weights`` in place."""
    for start, end in itertools.pairwise(bounds):
        idx = codes[start:end]
        current = weights[idx]
        candidates = current < cap
        if not candidates.all():
            if not candidates.any():
                continue  # every item already at the cap: nothing to do
            idx, current = idx[candidates], current[candidates]
        weights[idx] = current + _l2_candidates(current, cap)


#: the compiled loop's signature: (codes, offsets, weights, cap, unit, first user) -> where it stopped
_L2Kernel = Callable[[np.ndarray, np.ndarray, np.ndarray, int, int, int], int]
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


def _l2_kernel() -> _L2Kernel | None:
    """The compiled ℓ2 loop, or ``None`` without Numba. Its results are identical to :func:`_l2_steps`
    (``_policy_jit`` says why; the tests compare both)."""
    module = _jit()
    return None if module is None else cast("_L2Kernel", module.l2_policy_run)


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


def _positive_histogram(data: _UserItems, weights: np.ndarray, item: str) -> pl.DataFrame:
    """The items with positive weight (only these are ever noised or released) and their lattice weight."""
    positive = np.flatnonzero(weights > 0)
    histogram = pl.DataFrame({item: data.decode(positive), "weight_lat": weights[positive]})
    # by item value, not by code: the noise is drawn row by row, and codes are only a relabelling
    return histogram.sort(_value_key(item, histogram.schema[item]))


def _cap_on_lattice(cap: float) -> int:
    return math.floor(cap * _UNIT)


# ----------------------------------------------------------------------------------------------------------
# Policy Gaussian
# ----------------------------------------------------------------------------------------------------------
def make_policy_gaussian(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    scale: float,
    threshold: float,
    alpha: float = 3.0,
    descent: Descent = "l2",
    output_measure: dp.Measure | None = None,
    epsilon: float | None = None,
    noise: NoiseMethod = "lattice",
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Policy Gaussian set union (Gopi et al. 2020): a sequential ℓ2 policy, then noise and the WGM threshold.

    1. Each user keeps a uniform random subset of at most Δ0 distinct items (as in the WGM).
    2. Users are processed in a uniformly random order drawn at call time. Each moves the weights of its
       items that are below the cap :math:`\Gamma = T + \alpha\sigma` toward it, by a step of ℓ2 length at most
       1 (``descent``), rounded down onto the lattice :math:`2^{-20}\mathbb{Z}`.
    3. Every item with positive weight gets discrete Gaussian noise of scale σ and is released if its noisy
       weight exceeds T.

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with
        ``dp.symmetric_id_distance``.
    max_contributions
        Δ0 ≥ 1, the most distinct items a user keeps.
    scale
        σ > 0 of the Gaussian noise.
    threshold
        T, the release threshold (the WGM's).
    alpha
        α ≥ 0: the cap is :math:`\Gamma = T + \alpha\sigma` (the paper: 3).
    descent : {'l2', 'reference_l1'}
        ``'l2'`` (default): Gopi et al.'s ℓ2 descent, which they prove contractive. ``'reference_l1'``: the
        paper reference's default "L1" rule (heyyjudes' key-ordered max-sum), **for comparison only: no proof
        that it is contractive is known**, so its map below is not established (needs Γ ≥ 1).
    output_measure, epsilon
        As in :func:`opendp_wgm.make_wgm`: approximate zCDP (default) or, with ``epsilon``, (ε, δ)-DP.
    noise : {'lattice', 'opendp'}
        Sampler of the discrete Gaussian, as in :func:`opendp_wgm.make_wgm`.
    item
        Item column, when the input domain is OpenDP's and holds more than one other column; a list of
        columns for a composite key (``docs/api.md``: the release has those columns in place of the item's).

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column (input dtype) and ``noisy_weight``, sorted
        by item — the WGM's output shape.

    Notes
    -----
    The map is the WGM's (:func:`opendp_wgm.privacy.gaussian.wgm_privacy_loss`): for ``d_in = 1``,
    :math:`\rho = 1/(2\sigma^2)` and :math:`\delta_T = \max_{t \le \Delta_0} 1 - (1 - q(w(t)))^t`; for
    ``d_in > 1`` the WGM's group bound. Why the same map (``docs/baselines.md`` §2): (a) every user's increment
    has ℓ2 ≤ 1 exactly (rounded down, checked in integers); (b) with a contractive update the histograms
    of neighbours differ by at most 1 in ℓ2 (Gopi et al. 2020, §5, policy Gaussian theorem and the
    contractivity of ℓ2 descent); (c) the items that only the extra user holds all receive the same
    increment, at most :math:`\lfloor 2^{20}/\sqrt t\rfloor 2^{-20}` for ``t`` such items — the WGM's worst case.

    **Caveat** — (b) is proved for exact real arithmetic. Rounding increments down keeps (a) and (c) exact but
    does not preserve the ℓ2 contraction exactly (two histograms can round differently, by up to one lattice
    step per coordinate and later user). Hence the ``"idealized-numerics"`` feature is required, as OpenDP
    does for maps that assume exact arithmetic. This is a comparison baseline; publish with
    :func:`opendp_wgm.make_wgm`.

    Required features: ``contrib``, ``honest-but-curious``, ``idealized-numerics``.

    References
    ----------
    Gopi, Gulhane, Kulkarni, Shen, Shokouhi, Yekhanin (2020), Differentially Private Set Union, arXiv 2002.09745.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> from opendp_wgm.measurements.baselines import make_policy_gaussian
    >>> dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")
    >>> m = make_policy_gaussian(*wgm.user_items_space(), max_contributions=100, scale=3.88414, threshold=20.7898)
    >>> w = wgm.make_wgm(*wgm.user_items_space(), max_contributions=100, scale=3.88414, threshold=20.7898)
    >>> m.map(1) == w.map(1)
    True
    """
    assert_idealized()
    max_contributions = check_max_contributions(max_contributions)
    scale = _check_positive("scale", scale)
    threshold = _check_real("threshold", threshold)
    alpha = _check_real("alpha", alpha, minimum=0.0)
    descent = _check_descent(descent)
    noise = check_noise(noise)
    output_measure, epsilon = check_gaussian_measure(output_measure, epsilon)
    cap = _cap_on_lattice(threshold + alpha * scale)
    if cap < 1:
        msg = f"the cap `threshold + alpha * scale` must be > 0 (found {threshold + alpha * scale!r})"
        raise ValueError(msg)
    if descent == "reference_l1" and cap < _UNIT:
        msg = (
            "descent='reference_l1' needs a cap `threshold + alpha * scale` >= 1 (its threshold argument "
            f"does; found {threshold + alpha * scale!r})"
        )
        raise ValueError(msg)
    space = _resolve_space(input_domain, input_metric, item)

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        data = _csr(
            frame, space, max_contributions=max_contributions, key_order=descent == "reference_l1", priority_order=False
        )
        weights = _policy_weights(data, cap, descent)
        histogram = _positive_histogram(data, weights, space.item)
        released = release_above_threshold(histogram, space.item, scale=scale, threshold=threshold, noise=noise)
        return _released(released, space)

    privacy_map = wgm_privacy_map(
        scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=epsilon
    )
    return dp.m.make_user_measurement(input_domain, input_metric, output_measure, function, privacy_map)


def make_policy_gaussian_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    alpha: float = 3.0,
    descent: Descent = "l2",
    noise_delta_fraction: float = 0.5,
    noise: NoiseMethod = "lattice",
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Policy Gaussian with the WGM's σ and T for the same budget (:func:`opendp_wgm.calibrate_wgm`).

    The two mechanisms share one map, so the WGM's calibration passes ``m.check(1, budget)`` here too and the
    comparison is at equal noise and threshold, as in the paper. See :func:`make_policy_gaussian`.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> from opendp_wgm.measurements.baselines import make_policy_gaussian_from_budget
    >>> dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")
    >>> m = make_policy_gaussian_from_budget(*wgm.user_items_space(), max_contributions=100, epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    """
    assert_idealized()
    calibration = calibrate_wgm(
        max_contributions=max_contributions,
        delta=delta,
        epsilon=epsilon,
        rho=rho,
        noise_delta_fraction=noise_delta_fraction,
    )
    return make_policy_gaussian(
        input_domain,
        input_metric,
        **wgm_arguments(calibration, alpha=alpha, descent=descent, noise=noise, item=item),
    )


# ----------------------------------------------------------------------------------------------------------
# Policy Greedy
# ----------------------------------------------------------------------------------------------------------
def _laplace_tail(m: int, lattice_scale: float) -> float:
    r""":math:`P[Z \ge m]` for the discrete Laplace :math:`P[Z = z] \propto e^{-|z|/s}` on the integers.

    :math:`q^m/(1 + q)` for :math:`m \ge 1` with :math:`q = e^{-1/s}` (and :math:`1 - q^{1-m}/(1+q)` below),
    evaluated in floats and inflated by a relative 1e-12 (exp is accurate to a few ulp).
    """
    q = math.exp(-1.0 / lattice_scale)
    tail = math.exp(-m / lattice_scale) / (1.0 + q) if m >= 1 else 1.0 - math.exp(-(1 - m) / lattice_scale) / (1.0 + q)
    return min(1.0, tail * (1.0 + 1e-12))


def greedy_threshold_delta(*, scale: float, threshold: float, alpha: float = 3.0, d_in: int = 1) -> float:
    r"""The probability that Policy Greedy releases an item only the larger neighbour's extra users hold.

    With the fix (zero-weight items are never noised), each of ``d_in`` extra users gives positive weight to
    at most one item nobody else holds, provided the cap is at least ``d_in`` (``docs/baselines.md`` §3).
    Their total weight is at most ``d_in``; the release probability :math:`f(w) = P[Z \ge F + 1 - w]`
    (:math:`F = \lfloor T 2^{20}\rfloor`) is convex in ``w``, so

    .. math:: \delta_T(k) \le f(k) + (k - 1) f(0), \qquad \delta_T(1) = f(1).

    Returns 1 when the cap :math:`\max(T + \alpha\lambda, 1)` is below ``d_in`` (no bound is claimed).
    """
    scale = _check_positive("scale", scale)
    threshold = _check_real("threshold", threshold)
    alpha = _check_real("alpha", alpha, minimum=0.0)
    d_in = _check_d_in(d_in)
    return _greedy_threshold_delta(scale, threshold, alpha, d_in)


@lru_cache(maxsize=1024)
def _greedy_threshold_delta(scale: float, threshold: float, alpha: float, d_in: int) -> float:
    if d_in == 0:
        return 0.0
    if _greedy_cap(threshold, alpha, scale) < d_in * _UNIT:
        return 1.0
    floor_t = math.floor(threshold * _UNIT)
    lattice_scale = scale * _UNIT
    delta = _laplace_tail(floor_t + 1 - d_in * _UNIT, lattice_scale)
    if d_in > 1:
        delta += (d_in - 1) * _laplace_tail(floor_t + 1, lattice_scale)
    return min(1.0, delta)


def _greedy_cap(threshold: float, alpha: float, scale: float) -> int:
    """Γ = max(T + αλ, 1) on the lattice (the cap of the paper's reference code)."""
    return max(_cap_on_lattice(threshold + alpha * scale), _UNIT)


def _sample_discrete_laplace(lattice_scale: float, values: np.ndarray) -> np.ndarray:
    """``values`` + exact discrete Laplace noise of scale ``lattice_scale``: OpenDP's ``make_laplace`` on i64."""
    if values.size == 0:
        return np.zeros(0, dtype=np.int64)
    space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64")
    noisy: list[int] = dp.m.make_laplace(*space, scale=lattice_scale)(values.tolist())
    return np.asarray(noisy, dtype=np.int64)


def make_policy_greedy(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    scale: float,
    threshold: float,
    alpha: float = 3.0,
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Policy Greedy set union (Carvalho et al. 2022, "GW"), with the reference's privacy bug fixed.

    1. No Δ0 and no dedup: each user's raw rows define its distinct items and their multiplicities.
    2. Users are processed in a uniformly random order drawn at call time. Each spends an ℓ1 budget of 1 on
       its items below the cap :math:`\Gamma = \max(T + \alpha\lambda, 1)`, most frequent first: an item whose gap
       to the cap is below the remaining budget is filled; the first one that is not gets the rest.
       Weights live on the lattice :math:`2^{-20}\mathbb{Z}` and the update is exact integer arithmetic.
    3. **Only items with positive weight** get discrete Laplace noise (scale λ, OpenDP's exact sampler) and are
       released if the noisy weight exceeds T. (The reference also noises and releases items that a user held
       but gave no weight to: with no Δ0 a user can add unboundedly many, and its δ fails.)

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with
        ``dp.symmetric_id_distance``.
    scale
        λ > 0, the Laplace scale in weight units (ε = 1/λ per user).
    threshold
        T. The paper: :math:`1 + \ln(1/(2\delta))/\varepsilon`; :func:`make_policy_greedy_from_budget`
        computes the smallest lattice T for a δ.
    alpha
        α ≥ 0 of the cap.
    item
        Item column, when the input domain is OpenDP's and holds more than one other column; a list of
        columns for a composite key (``docs/api.md``: the release has those columns in place of the item's).

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column and ``noisy_weight``, sorted by item.

    Notes
    -----
    Output measure ``dp.approximate(dp.max_divergence())``; ``m.map(d_in) = (d_in/λ, δ_T(d_in))`` with
    :func:`greedy_threshold_delta`. The ε part rests on the ℓ1 contraction of the greedy policy, on which
    Carvalho et al. (2022) build, following Gopi et al. (2020, §5): neighbouring histograms differ by at
    most ``d_in`` in ℓ1, and the
    discrete Laplace is ``d_in/λ``-DP for such shifts. The δ part covers the items only the extra users hold
    (at most one positive item each). **Caveat** (``docs/baselines.md`` §3): an item held by others can have
    zero weight in one neighbour and positive weight in the other (later users' greedy walks shift); it is
    then noised in only one of them. The published argument does not cover these support changes and we
    have no data-independent bound on their number, so the map is not established for this variant either;
    the ``"idealized-numerics"`` feature is required as an explicit opt-in.

    Required features: ``contrib``, ``honest-but-curious``, ``idealized-numerics``.

    References
    ----------
    R. S. Carvalho et al. (2022), Incorporating Item Frequency for Differentially Private Set Union, AAAI.
    Gopi et al. (2020), arXiv 2002.09745.
    """
    assert_idealized()
    scale = _check_positive("scale", scale)
    threshold = _check_real("threshold", threshold)
    alpha = _check_real("alpha", alpha, minimum=0.0)
    space = _resolve_space(input_domain, input_metric, item)
    cap = _greedy_cap(threshold, alpha, scale)
    floor_t = math.floor(threshold * _UNIT)
    lattice_scale = scale * _UNIT

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        data = _csr(frame, space, max_contributions=None, key_order=False, priority_order=True)
        weights = _policy_weights(data, cap, "greedy")
        histogram = _positive_histogram(data, weights, space.item)
        noisy = _sample_discrete_laplace(lattice_scale, histogram["weight_lat"].to_numpy())
        keep = noisy > floor_t
        released = (
            histogram.select(space.item)
            .filter(pl.Series(keep))
            .with_columns(noisy_weight=pl.Series(noisy[keep], dtype=pl.Int64).cast(pl.Float64) / _UNIT)
            .sort(space.item)
        )
        return _released(released, space)

    def privacy_map(d_in: int) -> tuple[float, float]:
        d_in = _check_d_in(d_in)
        if d_in == 0:
            return 0.0, 0.0
        return d_in / scale, _greedy_threshold_delta(scale, threshold, alpha, d_in)

    return dp.m.make_user_measurement(input_domain, input_metric, measure_of("approx_dp"), function, privacy_map)


def make_policy_greedy_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    epsilon: float,
    delta: float,
    alpha: float = 3.0,
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Policy Greedy calibrated to (ε, δ): λ = 1/ε and the smallest lattice T with :math:`\delta_T(1) \le \delta`.

    The paper's threshold is :math:`1 + \ln(1/(2\delta))/\varepsilon` (11.8198 at ε = 1, δ = 1e-5); the discrete
    Laplace's tail :math:`q^m/(1+q)` moves it by about one lattice step.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> from opendp_wgm.measurements.baselines import make_policy_greedy_from_budget
    >>> dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")
    >>> m = make_policy_greedy_from_budget(*wgm.user_items_space(), epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    """
    assert_idealized()
    budget = Budget.of(epsilon=epsilon, delta=delta)
    alpha = _check_real("alpha", alpha, minimum=0.0)
    scale, floor_t = calibrate_policy_greedy(
        budget,
        lattice_bits=LATTICE_BITS,
        threshold_delta=lambda scale, floor_t: _greedy_threshold_delta(scale, floor_t / _UNIT, alpha, 1),
    )
    return make_policy_greedy(
        input_domain, input_metric, scale=scale, threshold=floor_t / _UNIT, alpha=alpha, item=item
    )


then_policy_gaussian = _to_then(make_policy_gaussian)
then_policy_gaussian_from_budget = _to_then(make_policy_gaussian_from_budget)
then_policy_greedy = _to_then(make_policy_greedy)
then_policy_greedy_from_budget = _to_then(make_policy_greedy_from_budget)
