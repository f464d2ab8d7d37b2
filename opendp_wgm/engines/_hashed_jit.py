r"""Compiled (Numba) steps of the ``compiled-hashed`` plan (:func:`opendp_wgm.engines.polars.hashed_histogram`):
rows whose users interleave (logs in time order), bucketed by user code in a counting sort, each user's items
deduplicated, weighted and, above Δ0, cut to the Δ0 of smallest secret key, in one pass over each user's rows; and
stage 2's candidate pairs read from the same per-user distinct items (:func:`user_candidates`).

The user and item codes come in exact (one per distinct value: :func:`opendp_wgm.engines.polars._compiled_steps.
_text_codes`' checked hashes, or the compiled step's integer coding); the keys are the Polars plans' own secret
keys (:func:`opendp_wgm.engines.polars.bound_key`), computed by Polars and passed in. The same histogram as the
Polars plans, bit for bit: equal (user, item) rows have equal keys and equal item codes, so a user's distinct
item codes are its distinct items, and the Δ0 of smallest key are found by
:func:`keep_smallest` (a linear selection, :func:`smallest`; the sort by key where keys tie), which the other
compiled steps (:mod:`opendp_wgm.engines._kernel_jit`) use too.

Imported only if Numba is installed (``opendp-wgm[fast]``). The passes take a range (rows or users) so that the
caller runs them in threads (they release the GIL).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from opendp_wgm.engines.compile_notice import watch_compiles

__all__ = ["keep_smallest", "place_keyed", "smallest", "user_candidates", "weigh_users"]

watch_compiles()  # a first-use compile is announced, not silent (engines/compile_notice.py)


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def smallest(values: np.ndarray, count: int, k: int) -> np.uint64:  # pragma: no cover - compiled
    """The ``k``-th smallest (from 0) of ``values[:count]``, reordering ``values[:count]`` in place: a quickselect
    (median-of-three pivots), linear on average, where a full sort of the values costs ``count log count``."""
    low, high = 0, count - 1
    while high > low:
        a, b, c = values[low], values[(low + high) >> 1], values[high]
        if a > b:
            a, b = b, a
        if b > c:
            b = max(a, c)
        pivot = b
        i, j = low, high
        while i <= j:
            while values[i] < pivot:
                i += 1
            while values[j] > pivot:
                j -= 1
            if i <= j:
                values[i], values[j] = values[j], values[i]
                i += 1
                j -= 1
        if k <= j:
            high = j
        elif k >= i:
            low = i
        else:
            break
    return values[k]  # type: ignore[no-any-return]


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def keep_smallest(
    histogram: np.ndarray,
    distinct: np.ndarray,
    distinct_keys: np.ndarray,
    scratch: np.ndarray,
    t: int,
    max_contributions: int,
    weight: int,
) -> None:  # pragma: no cover - compiled
    """Add ``weight`` at the Δ0 of the distinct items ``distinct[:t]`` of smallest key (``distinct_keys[:t]``):
    the items up to the Δ0-th smallest key (:func:`smallest`, linear; ``scratch`` reordered), the Δ0 a sort by key
    keeps. Only where two share that key (a tie at the cut, a 64-bit collision) does the sort by key decide."""
    scratch[:t] = distinct_keys[:t]
    cut = smallest(scratch, t, max_contributions - 1)
    below = 0
    for k in range(t):
        below += distinct_keys[k] <= cut
    if below == max_contributions:
        for k in range(t):
            if distinct_keys[k] <= cut:
                histogram[distinct[k]] += weight
    else:  # a tie at the cut: the sort by key decides it, as it always did
        order = np.argsort(distinct_keys[:t])
        for k in range(max_contributions):
            histogram[distinct[order[k]]] += weight


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]  # typed only where Numba is
def place_keyed(
    users: np.ndarray,
    user_low: int,
    items: np.ndarray,
    item_low: int,
    keys: np.ndarray,
    first: int,
    stop: int,
    cursor: np.ndarray,
    held: np.ndarray,
    held_keys: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Place ``items[r] - item_low`` and ``keys[r]`` for the rows ``first <= r < stop`` at their user's ``cursor``
    in ``held`` and ``held_keys`` (advancing it); user ``users[r] - user_low``. Without keys (``keys`` empty), the
    items only (:func:`opendp_wgm.engines._kernel_jit.place_items`' pass)."""
    keyed = keys.size > 0
    for r in range(first, stop):
        u = users[r] - user_low
        c = cursor[u]
        held[c] = items[r] - item_low
        if keyed:
            held_keys[c] = keys[r]
        cursor[u] = c + 1


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def weigh_users(
    held: np.ndarray,
    held_keys: np.ndarray,
    start: np.ndarray,
    first: int,
    stop: int,
    max_contributions: int,
    weights: np.ndarray,
    seen: np.ndarray,
    histogram: np.ndarray,
    distinct: np.ndarray,
    above: np.ndarray,
    holders: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The lattice histogram of the users ``first <= u < stop``, added to ``histogram`` (int64 per item code).

    ``held[start[u]:start[u + 1]]`` are user ``u``'s item codes (with repeats, in row order), overwritten by its
    distinct ones (their number into ``distinct[u]``: stage 2 reads them, :func:`user_candidates`); ``seen`` (int32
    per item code, ``-1`` or a user code below ``first``) is the per-item marker of the dedup. A user with at most
    Δ0 distinct items adds ``weights[t - 1]`` to each. A user with more: with keys (``held_keys``, placed with the
    items), the Δ0 distinct items of smallest key get ``weights[Δ0 - 1]``; without (``held_keys`` empty), it is
    flagged in ``above`` for the caller to key. ``holders`` (int64 per item code, or empty: not counted) gets one
    per user holding the item: stage 2's distinct-user counts."""
    keyed, count = held_keys.size > 0, holders.size > 0
    longest = 0
    if keyed:
        for u in range(first, stop):
            longest = max(longest, start[u + 1] - start[u])
    scratch = np.empty(longest, dtype=np.uint64)
    for u in range(first, stop):
        at, end = start[u], start[u + 1]
        move_keys = keyed and end - at > max_contributions  # at most Δ0 rows: its keys are never read
        t = 0
        for j in range(at, end):
            i = held[j]
            if seen[i] != u:
                seen[i] = u
                held[at + t] = i  # the distinct items, in place (t <= j - at)
                if move_keys:
                    held_keys[at + t] = held_keys[j]
                t += 1
        distinct[u] = t
        if count:
            for j in range(at, at + t):
                holders[held[j]] += 1
        if t == 0:
            continue
        if t <= max_contributions:
            w = weights[t - 1]
            for j in range(at, at + t):
                histogram[held[j]] += w
        elif keyed:  # its distinct items and their keys, in place
            keep_smallest(histogram, held[at : at + t], held_keys[at : at + t], scratch, t, max_contributions,
                          weights[max_contributions - 1])
        else:
            above[u] = True


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def user_candidates(
    held: np.ndarray, start: np.ndarray, distinct: np.ndarray, position_of: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Stage 2's distinct (user, candidate) pairs from each user's distinct item codes
    (``held[start[u]:start[u] + distinct[u]]``, :func:`weigh_users`): the candidate positions
    (``position_of[item] >= 0``, int32) of each user's candidates, in the order of its distinct items, as CSR
    arrays (positions, offsets); users holding none are dropped. No sort and no dedup: the items are distinct."""
    n_users = distinct.size
    n = 0
    for u in range(n_users):
        for j in range(start[u], start[u] + distinct[u]):
            n += position_of[held[j]] >= 0
    positions = np.empty(n + 1, dtype=np.int32)  # one spare slot: branch-free writes, as candidate_rows
    offsets = np.zeros(n_users + 1, dtype=np.int64)
    t, holders = 0, 0
    for u in range(n_users):
        before = t
        for j in range(start[u], start[u] + distinct[u]):
            p = position_of[held[j]]
            positions[t] = p
            t += p >= 0
        if t > before:
            holders += 1
            offsets[holders] = t
    return positions[:n], offsets[: holders + 1]
