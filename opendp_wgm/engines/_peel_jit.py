r"""Compiled (Numba) steps of the two-stage mechanisms' stage 2: the distinct (user, candidate) pairs of the
candidates' rows, in linear passes, and user peeling's rounds (:func:`em_rounds`).

Imported only if Numba is installed (``opendp-wgm[fast]``); :func:`opendp_wgm.engines.polars.candidate_pairs`
falls back to its Polars plans without it, with the same set of pairs. Users and candidates come in as exact
integer codes (one per distinct value); the pairs carry no randomness and no order that a release reads.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["cover", "distinct_pairs", "em_rounds"]


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]  # typed only where Numba is
def distinct_pairs(
    users: np.ndarray, positions: np.ndarray, n_users: int, n_candidates: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The distinct (user, candidate) pairs of rows ``(users[r], positions[r])`` with ``positions[r] >= 0`` (a
    negative position: the row's item is no candidate), grouped by user in increasing user code (each user's
    candidates in order of first row) and coded densely ``0, 1, ...``:
    a counting sort of the rows by user (one pass to count, one to place),
    then each user's repeats dropped with a per-candidate marker. No comparison sort."""
    start = np.zeros(n_users + 1, dtype=np.int64)
    for r in range(users.size):
        if positions[r] >= 0:
            start[users[r] + 1] += 1
    for u in range(n_users):
        start[u + 1] += start[u]
    cursor = start[:-1].copy()
    held = np.empty(start[n_users], dtype=np.int64)
    for r in range(users.size):
        if positions[r] >= 0:
            u = users[r]
            held[cursor[u]] = positions[r]
            cursor[u] += 1
    seen = np.full(n_candidates, -1, dtype=np.int64)
    pair_users = np.empty(held.size, dtype=np.int64)
    pair_positions = np.empty(held.size, dtype=np.int64)
    t = 0
    v = 0  # the dense code of the next user with a candidate row
    for u in range(n_users):
        if start[u + 1] == start[u]:
            continue
        for j in range(start[u], start[u + 1]):
            p = held[j]
            if seen[p] != u:
                seen[p] = u
                pair_users[t] = v
                pair_positions[t] = p
                t += 1
        v += 1
    return pair_users[:t].copy(), pair_positions[:t].copy()


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def cover(
    j: int,
    counts: np.ndarray,
    covered: np.ndarray,
    user_items: np.ndarray,
    user_ptr: np.ndarray,
    item_users: np.ndarray,
    item_ptr: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Mark the holders of item ``j`` covered and take each newly covered user's items off ``counts`` (user
    peeling's ``_Coverage.pick``, in place)."""
    for h in range(item_ptr[j], item_ptr[j + 1]):
        u = item_users[h]
        if not covered[u]:
            covered[u] = True
            for x in range(user_ptr[u], user_ptr[u + 1]):
                counts[user_items[x]] -= 1


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def _race_bounds(
    counts: np.ndarray, alive: np.ndarray, m: int, words: np.ndarray, cursor: int, scale: float, margin: float,
    clamp: float, low: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """The exponential mechanism's race among ``alive[:m]`` (one item per level: ``_race`` with c = 1) in float64
    with the sampler's proven bounds (``selection._key_bounds``, the same operations in the same order): the
    position of the certified winner, or -1 when more than one item's lower bound reaches the smallest upper
    bound (the caller settles that round exactly, on the same words)."""
    top = counts[alive[0]]
    for i in range(1, m):
        top = max(top, counts[alive[i]])
    smallest_high = np.inf
    for i in range(m):
        cell = np.float64(words[cursor + i] >> np.uint64(12))
        a = np.float64(top - counts[alive[i]]) / scale
        a_low = min(a, clamp)
        g_top = np.log(-np.log((cell + 1.0) * 2.0**-52)) - 0.0  # log c = log 1 = 0, as NumPy forms it
        g_bottom = np.log(-np.log(cell * 2.0**-52)) - 0.0
        lo = (g_top + a_low) + -(((abs(g_top) + a_low) + 4.0) * margin)
        hi = (g_bottom + a) + ((abs(g_bottom) + a) + 4.0) * margin
        low[i] = -np.inf if np.isnan(lo) else lo
        smallest_high = min(smallest_high, np.inf if np.isnan(hi) else hi)
    winner = -1
    for i in range(m):
        if low[i] <= smallest_high:
            if winner >= 0:
                return -1
            winner = i
    return winner


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def em_rounds(
    r: int,
    rounds: int,
    counts: np.ndarray,
    alive: np.ndarray,
    chosen: np.ndarray,
    covered: np.ndarray,
    user_items: np.ndarray,
    user_ptr: np.ndarray,
    item_users: np.ndarray,
    item_ptr: np.ndarray,
    words: np.ndarray,
    cursor: int,
    forced: int,
    scale: float,
    margin: float,
    clamp: float,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """User peeling's rounds ``r, r + 1, ...`` (``hitting_set.peel``'s loop, in place): each races the
    ``m = len(alive) - r`` remaining candidates on the next ``m`` words (none when ``m = 1``), swap-removes the
    winner from ``alive[:m]``, records it in ``chosen`` and covers its holders. Stops at ``rounds``, or at a round
    whose float pass certifies no winner: returns that round and the cursor of its words. ``forced >= 0``: round
    ``r``'s winner, settled by the caller (its words already past ``cursor``)."""
    n = alive.size
    low = np.empty(n, dtype=np.float64)
    while r < rounds:
        m = n - r
        position = 0
        if forced >= 0:
            position, forced = forced, -1
        elif m > 1:
            position = _race_bounds(counts, alive, m, words, cursor, scale, margin, clamp, low)
            if position < 0:
                return r, cursor
            cursor += m
        j = alive[position]
        alive[position] = alive[m - 1]
        alive[m - 1] = j
        chosen[r] = j
        cover(j, counts, covered, user_items, user_ptr, item_users, item_ptr)
        r += 1
    return r, cursor

