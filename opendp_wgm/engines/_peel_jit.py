r"""Compiled (Numba) stage 2 of the two-stage releases: the candidates' rows among the WGM's coded rows
(:func:`candidate_rows`; their distinct pairs then come from the per-user step's counting sort,
:func:`opendp_wgm.engines._kernel_jit.distinct_items_by_user`; read by
:func:`opendp_wgm.engines.polars.candidate_csr`), the distinct candidates of each run of users the WGM's keyed
route found (:func:`run_candidates`; their text items looked up by their Arrow views, :func:`view_table` and
:func:`view_positions`) and the rounds of user peeling (:func:`em_rounds`, with :func:`cover`).

Imported only if Numba is installed (``opendp-wgm[fast]``); :func:`opendp_wgm.measurements.hitting_set.peel`
runs its NumPy loop without it, with the same picks on the same words.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from opendp_wgm.engines.compile_notice import watch_compiles

__all__ = ["candidate_rows", "cover", "em_rounds", "run_candidates", "view_key", "view_positions", "view_table"]

watch_compiles()  # a first-use compile is announced, not silent (engines/compile_notice.py)


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]  # typed only where Numba is
def candidate_rows(
    users: np.ndarray, items: np.ndarray, position_of: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The user code and the candidate position (``position_of[item]``, int32) of every row whose item is a
    candidate (``position_of[item] >= 0``), in row order: one pass counts them, one copies them. Branch-free (every
    row is written at the cursor, which only kept rows advance): a third of steam_200k's rows are kept, and the
    branch on each row cost three times the passes."""
    n = 0
    for r in range(items.size):
        n += position_of[items[r]] >= 0
    kept = np.empty(n + 1, dtype=users.dtype)  # one spare slot: rows after the last kept one are written there
    positions = np.empty(n + 1, dtype=np.int32)
    t = 0
    for r in range(items.size):
        p = position_of[items[r]]
        kept[t] = users[r]
        positions[t] = p
        t += p >= 0
    return kept[:n], positions[:n]


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def run_candidates(
    start: np.ndarray, positions: np.ndarray, n_items: int, first: int, stop: int, held: np.ndarray, at: int,
    counts: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """The distinct candidates of the users ``first <= u < stop``, whose rows are ``start[u] <= r < start[u + 1]``
    (each user's rows one run) and whose candidate positions are ``positions[r - start[first]]`` (the range's
    rows only; -1 or any value ``>= n_items``: no candidate): written one user after the other (each in order of
    first row) to ``held`` from ``at`` on, ``counts[u]`` of user ``u``; return where the range's pairs end. A
    per-candidate marker drops repeats. One pass over the rows, no user code per row and no filtered copy of
    them (:func:`candidate_rows`). ``held`` may hold ``positions`` at ``at``: a row is read before any write
    reaches its slot."""
    seen = np.full(n_items, -1, dtype=np.int32)  # user codes are below 2^31 (as many as rows at most)
    base = start[first]
    t = at
    for u in range(first, stop):
        begin = t
        for r in range(start[u] - base, start[u + 1] - base):
            p = positions[r]
            if 0 <= p < n_items and seen[p] != u:
                seen[p] = u
                held[t] = p
                t += 1
        counts[u] = t - begin
    return t


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator, unused-ignore]
def view_key(w0: np.uint64, w1: np.uint64) -> tuple[np.uint64, np.uint64]:  # pragma: no cover - compiled
    """The key of a string from its 16-byte Arrow view (two words: ``w0`` = length | 4-byte prefix << 32, ``w1``
    = the next 8 bytes, or a long string's buffer and offset): up to 12 bytes the view holds the whole string,
    and the key is the view with the bytes past the length cleared (equal strings, equal keys; unequal, unequal);
    a longer string's key is its length and prefix only (``w1`` cleared): equal for equal strings, possibly for
    unequal ones too."""
    n = w0 & np.uint64(0xFFFFFFFF)
    # bits kept of each word, branch-free (word lengths vary row to row): a shift by 64 is split in two halves
    bits0 = np.uint64(32) + np.uint64(8) * min(n, np.uint64(4))
    bits1 = np.uint64(0) if n > 12 else np.uint64(8) * (max(n, np.uint64(4)) - np.uint64(4))
    one = np.uint64(1)
    mask0 = ((one << (bits0 >> one)) << (bits0 - (bits0 >> one))) - one
    mask1 = ((one << (bits1 >> one)) << (bits1 - (bits1 >> one))) - one
    return w0 & mask0, w1 & mask1


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator, unused-ignore]
def _view_slot(a: np.uint64, b: np.uint64, shift: np.uint64) -> Any:  # pragma: no cover - compiled
    """The first slot of key ``(a, b)`` in a table of ``2^(64 - shift)`` slots (multiplicative hashing: top bits)."""
    return ((a * np.uint64(0x9E3779B97F4A7C15)) ^ (b * np.uint64(0xC2B2AE3D27D4EB4F))) >> shift


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def view_table(views: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """An open-addressing table (``2^bits`` slots, at least twice the candidates) of the candidates' string views
    (:func:`view_key`; distinct candidates): the key of each slot and its candidate's position, -2 for a key of
    candidates longer than 12 bytes (a key that does not tell them apart), -1 for an empty slot."""
    size, shift = 1 << bits, np.uint64(64 - bits)
    k0, k1 = np.zeros(size, dtype=np.uint64), np.zeros(size, dtype=np.uint64)
    slot = np.full(size, -1, dtype=np.int32)
    for j in range(views.shape[0]):
        a, b = view_key(views[j, 0], views[j, 1])
        i = _view_slot(a, b, shift)
        while slot[i] != -1 and not (k0[i] == a and k1[i] == b):
            i = (i + np.uint64(1)) & np.uint64(size - 1)
        k0[i], k1[i] = a, b
        slot[i] = -2 if (a & np.uint64(0xFFFFFFFF)) > 12 else j
    return k0, k1, slot


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def view_positions(
    views: np.ndarray, first: int, stop: int, k0: np.ndarray, k1: np.ndarray, slot: np.ndarray, out: np.ndarray,
    at: int, unsure: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """The candidate position of the strings ``views[first:stop]`` (Arrow views) by the table of
    :func:`view_table`, into ``out`` from ``at`` on: -1 for no candidate, exactly (a string of up to 12 bytes is
    its key; a longer one whose length and prefix no candidate has is no candidate), -2 where a longer string
    shares its length and prefix with a candidate: those rows' indices in ``out`` are written to ``unsure`` from
    ``at`` on (the caller compares them whole); return how many."""
    shift = np.uint64(64 - int(np.log2(k0.size)))
    mask = np.uint64(k0.size - 1)
    n = 0
    for r in range(first, stop):
        a, b = view_key(views[r, 0], views[r, 1])
        i = _view_slot(a, b, shift)
        p = -1
        while slot[i] != -1:
            if k0[i] == a and k1[i] == b:
                p = slot[i]
                break
            i = (i + np.uint64(1)) & mask
        t = at + r - first
        out[t] = p
        if p == -2:
            unsure[at + n] = t
            n += 1
    return n


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

