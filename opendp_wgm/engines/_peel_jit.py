r"""Compiled (Numba) steps of the two-stage mechanisms' stage 2: the distinct (user, candidate) pairs of the
candidates' rows, in linear passes.

Imported only if Numba is installed (``opendp-wgm[fast]``); :func:`opendp_wgm.engines.polars.candidate_pairs`
falls back to its Polars plans without it, with the same set of pairs. Users and candidates come in as exact
integer codes (one per distinct value); the pairs carry no randomness and no order that a release reads.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["distinct_pairs"]


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]  # typed only where Numba is
def distinct_pairs(
    users: np.ndarray, positions: np.ndarray, n_users: int, n_candidates: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The distinct (user, candidate) pairs of rows ``(users[r], positions[r])`` with ``positions[r] >= 0`` (a
    negative position: the row's item is no candidate), grouped by user in increasing user code (each user's
    candidates in order of first row) and coded densely ``0, 1, ...``: a counting sort of the rows by user (one pass to count, one to place),
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
