r"""Compiled (Numba) parts of Policy Gaussian; imported only if Numba is installed.

- :func:`group_runs`, :func:`keep_smallest`, :func:`code_slots`, :func:`merge_codes`, :func:`relabel`: the CSR
  arrays (Δ0-bounded users in their random order) from per-row hashes, in linear time on average (a counting sort
  of each user's keys, :func:`_smallest_sorted`), in threads over ranges of users; String items compared exactly
  by their Arrow views, what the views cannot vouch for checked against the values by the caller
  (:func:`opendp_wgm.measurements.baselines._policy_csr._bounded_arrays`, :func:`~._policy_csr._hashed_csr`);
- :func:`first_appearance_codes`: dense integer codes of 64-bit values through a hash table (no sort).
- :func:`l2_policy_run`: the per-user loop of the ℓ2 descent.

The rest of this docstring is about the loop.

The loop over users is sequential by nature; in NumPy each user costs a dozen array calls (~20 µs), here a few
hundred nanoseconds. The result must be **identical** to the NumPy step of
:func:`opendp_wgm.measurements.baselines._policy_weights._l2_candidates`, which computes :math:`z^2 = \sum_x d_x^2` with
``gap @ gap`` — a BLAS dot product whose summation order is the library's (and the CPU's) business. Every other
operation (``sqrt``, ``/``, ``*``, ``floor``, integer arithmetic) is correctly rounded or exact, and monotone in
:math:`z^2`. So, per user:

- if :math:`\Gamma \le 2^{26}` and our sequential sum is below :math:`2^{53}`, every square and every partial sum
  (ours, hence the exact sum, hence any order's) is an exact integer in float64, and BLAS returns the exact sum
  whatever its order (a partial sum reaching :math:`2^{53}` would have rounded to at least :math:`2^{53}`);
- otherwise any summation order returns a value within a relative :math:`2.1\,m\,2^{-53}` of our sequential sum
  (:math:`m` nonnegative terms; Higham, *Accuracy and Stability of Numerical Algorithms*, §4.2). The increments are
  computed at both ends of a wider interval; if they agree they are the NumPy result (monotonicity); if not
  (about once in :math:`10^6` users at Δ0 = 100), the kernel returns and the caller runs the NumPy step for that
  user, then resumes.

The final integer check of ``_fit_l2`` is repeated exactly (wrap-around ``int64`` arithmetic, as ``@`` in NumPy).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from opendp_wgm.engines.compile_notice import watch_compiles
from opendp_wgm.engines.polars import peel_jit

watch_compiles()  # a first-use compile is announced, not silent (engines/compile_notice.py)
_PEEL = peel_jit()  # imported only where Numba is, so the engines' compiled module is there too
assert _PEEL is not None
#: the key of a String's Arrow view: the string itself up to 12 bytes, else its length and 4-byte prefix
_view_key = _PEEL.view_key

__all__ = [
    "code_slots",
    "first_appearance_codes",
    "group_runs",
    "keep_smallest",
    "l2_policy_run",
    "merge_codes",
    "relabel",
]

_EPS = 2.0**-53  # unit roundoff of float64
_EXACT_SUM = 2.0**53  # integers below this are exact in float64, and so are their sums below it
_EXACT_CAP = 1 << 26  # gaps below this have exact float64 squares


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]  # typed only where Numba is
def l2_policy_run(
    codes: np.ndarray, offsets: np.ndarray, weights: np.ndarray, cap: int, unit: int, first: int
) -> int:  # pragma: no cover - compiled; both paths are compared in the tests
    """Apply the ℓ2 step of users ``first, first + 1, …`` to ``weights`` in place.

    Returns the number of users when done, or the position of a user whose increments depend on the BLAS
    summation order (not applied: the caller applies it with NumPy and calls again from the next user).
    """
    n_users = offsets.size - 1
    longest = 0
    for u in range(first, n_users):
        longest = max(longest, offsets[u + 1] - offsets[u])
    index = np.empty(longest, dtype=np.int64)
    current = np.empty(longest, dtype=np.int64)
    gap = np.empty(longest, dtype=np.float64)
    increment = np.empty(longest, dtype=np.int64)
    unit_sq = unit * unit
    for u in range(first, n_users):
        m = 0
        for j in range(offsets[u], offsets[u + 1]):
            code = codes[j]
            if weights[code] < cap:
                index[m] = code
                current[m] = weights[code]
                m += 1
        if m == 0:
            continue
        total = 0.0
        for i in range(m):
            g = float(cap - current[i])
            gap[i] = g
            total += g * g
        if cap <= _EXACT_CAP and total < _EXACT_SUM:
            low = high = total
        else:
            margin = (4.0 * m + 8.0) * _EPS
            low, high = total * (1.0 - margin), total * (1.0 + margin)
        z_low, z_high = math.sqrt(low), math.sqrt(high)
        if (z_low <= unit) != (z_high <= unit):
            return u
        if z_low <= unit:  # the whole gap fits in the unit ball: every candidate reaches the cap
            for i in range(m):
                increment[i] = cap - current[i]
        else:
            f_low, f_high = unit / z_low, unit / z_high
            for i in range(m):
                a = math.floor(gap[i] * f_low)
                if a != math.floor(gap[i] * f_high):
                    return u
                increment[i] = np.int64(a)
        while True:  # _fit_l2: exact integer check of the unit ball
            norm = np.int64(0)
            for i in range(m):
                norm += increment[i] * increment[i]
            if norm <= unit_sq:
                break
            for i in range(m):
                increment[i] = max(increment[i] - 1, 0)
        for i in range(m):
            weights[index[i]] = current[i] + increment[i]
    return n_users


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio (Fibonacci hashing)
_LENGTH = np.uint64(0xFFFFFFFF)  # a view key's length bits


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def _slot(table: np.ndarray, code_at: np.ndarray, value: np.uint64, shift: np.uint64) -> int:  # pragma: no cover
    """The slot of ``value`` in an open-addressing table (linear probing), or the empty one (``code_at`` -1)
    where it goes.

    Polars' hashes of integers need not have uniform low bits: the first slot is the top bits of ``value`` times
    an odd constant (Fibonacci hashing). Unsigned arithmetic throughout (Numba types uint64 & int64 as float).
    """
    mask = np.uint64(table.size - 1)
    s = (value * _GOLDEN) >> shift
    while code_at[s] >= 0 and table[s] != value:
        s = (s + np.uint64(1)) & mask
    return int(s)


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def _table(bits: int) -> tuple[np.ndarray, np.ndarray, np.uint64]:  # pragma: no cover - compiled
    """An empty table of ``2^bits`` slots."""
    return np.zeros(1 << bits, dtype=np.uint64), np.full(1 << bits, -1, dtype=np.int64), np.uint64(64 - bits)


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def first_appearance_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Dense codes of ``values`` (uint64) in order of first appearance, and the first position of each code.

    The table starts small and doubles at half full: it stays about the size of the distinct values (cache
    resident for ~10^5 of them), not of the rows.
    """
    bits = 10
    table, code_at, shift = _table(bits)
    codes = np.empty(values.size, dtype=np.int64)
    first = np.empty(values.size, dtype=np.int64)
    n_codes = 0
    for i in range(values.size):
        s = _slot(table, code_at, values[i], shift)
        if code_at[s] >= 0:
            codes[i] = code_at[s]
        else:
            table[s], code_at[s] = values[i], n_codes
            codes[i], first[n_codes] = n_codes, i
            n_codes += 1
            if 2 * n_codes > table.size:
                bits += 1
                old_table, old_code_at = table, code_at
                table, code_at, shift = _table(bits)
                for t in range(old_table.size):
                    if old_code_at[t] >= 0:
                        s = _slot(table, code_at, old_table[t], shift)
                        table[s], code_at[s] = old_table[t], old_code_at[t]
    return codes, first[:n_codes]


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def _smallest_sorted(
    keys: np.ndarray, rows: np.ndarray, d: int, k: int, count: np.ndarray, out_keys: np.ndarray, out_rows: np.ndarray
) -> int:  # pragma: no cover - compiled
    """The ``min(k, d)`` smallest of the distinct ``keys[:d]`` in ascending order, with their ``rows``, written to
    ``out_keys`` and ``out_rows``; returns how many. No allocation (``count``: at least ``2^ceil(log2 d) + 1``).

    The keys are keyed hashes, uniform on 64 bits: a counting sort by their top ``ceil(log2 d)`` bits leaves
    about one key per bucket, and an insertion sort of the buckets that reach position ``k`` finishes the order
    (linear on average; any keys are sorted correctly, skewed ones only more slowly).
    """
    if d <= 1:
        out_keys[:d] = keys[:d]
        out_rows[:d] = rows[:d]
        return d
    bits = 1
    while (1 << bits) < d:
        bits += 1
    shift = np.uint64(64 - bits)
    count[: (1 << bits) + 1] = 0
    for t in range(d):
        count[np.int64(keys[t] >> shift) + 1] += 1
    for b in range(1 << bits):
        count[b + 1] += count[b]
    for t in range(d):  # stable scatter by bucket; count[b] ends at the end of bucket b
        b = np.int64(keys[t] >> shift)
        at = count[b]
        count[b] = at + 1
        out_keys[at], out_rows[at] = keys[t], rows[t]
    m = min(d, k)
    end = count[np.int64(out_keys[m - 1] >> shift)]  # the buckets up to the one at position m - 1
    for i in range(1, end):
        key, row = out_keys[i], out_rows[i]
        j = i
        while j > 0 and out_keys[j - 1] > key:
            out_keys[j], out_rows[j] = out_keys[j - 1], out_rows[j - 1]
            j -= 1
        out_keys[j], out_rows[j] = key, row
    return m


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def _grow(table: np.ndarray) -> tuple[np.ndarray, np.uint64]:  # pragma: no cover - compiled
    """The item table (pairs hash, code + 1; 0: empty) rebuilt at twice its slots, and its new shift."""
    slots = table.size  # twice the old slots: the new number of slots
    shift = np.uint64(64 - int(np.log2(slots)))
    grown = np.zeros(2 * slots, dtype=np.uint64)
    mask = slots - 1
    for t in range(table.size // 2):
        if table[2 * t + 1]:
            s = np.int64((table[2 * t] * _GOLDEN) >> shift)
            while grown[2 * s + 1]:
                s = (s + 1) & mask
            grown[2 * s], grown[2 * s + 1] = table[2 * t], table[2 * t + 1]
    return grown, shift


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def group_runs(
    run_start: np.ndarray, run_hash: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The users of runs of equal users (``rle``): run ``j`` is rows ``run_start[j]:run_start[j + 1]``, of user hash
    ``run_hash[j]``; runs with the same hash are taken as one user (the caller checks that their user values are
    equal).

    Returns
    -------
    first_run, user_start, rows, same_user
        Each user's first run (users in order of first run); user ``u``'s rows are ``rows[p]`` for
        ``user_start[u] <= p < user_start[u + 1]``, or the rows ``p`` themselves when every user is one run
        (``rows`` empty, ``user_start`` is ``run_start``: nothing is copied); ``same_user``: for each run, the first
        run of its user.
    """
    n_runs = run_hash.size
    user_of_run, first_run = first_appearance_codes(run_hash)
    n_users = first_run.size
    same_user = np.empty(n_runs, dtype=np.int64)
    for j in range(n_runs):
        same_user[j] = first_run[user_of_run[j]]
    if n_users == n_runs:
        return first_run, run_start, np.zeros(0, dtype=np.int64), same_user
    # rows grouped by user: a counting sort of the runs
    user_start = np.zeros(n_users + 1, dtype=np.int64)
    for j in range(n_runs):
        user_start[user_of_run[j] + 1] += run_start[j + 1] - run_start[j]
    for u in range(n_users):
        user_start[u + 1] += user_start[u]
    rows = np.empty(run_start[-1], dtype=np.int64)
    fill = user_start[:-1].copy()
    for j in range(n_runs):
        u = user_of_run[j]
        for i in range(run_start[j], run_start[j + 1]):
            rows[fill[u]] = i
            fill[u] += 1
    return first_run, user_start, rows, same_user


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def keep_smallest(
    user_start: np.ndarray,
    rows: np.ndarray,
    key: np.ndarray,
    item_hash: np.ndarray,
    views: np.ndarray,
    base: int,
    first: int,
    stop: int,
    max_contributions: int,
    slot: np.ndarray,
    count: np.ndarray,
    slot_rows: np.ndarray,
    slot_hash: np.ndarray,
    slot_views: np.ndarray,
) -> bool:  # pragma: no cover - compiled
    """The ``max_contributions`` distinct items of smallest ``key`` of the users ``first <= u < stop`` (rows as
    :func:`group_runs` gives them), in ascending ``key``: ``count[u]`` of them from ``slot[u]`` on, their rows,
    ``item_hash`` and (unless ``views`` is empty) the keys of their String views
    (:func:`opendp_wgm.engines._peel_jit.view_key`; row ``r``'s view is ``views[r - base]``: the users' rows lie
    in it) to ``slot_rows``, ``slot_hash`` and ``slot_views``.

    Rows with equal ``key`` are taken as one item; if their ``item_hash`` differs (two items with one key)
    ``False`` is returned. No allocation per user: a user's distinct keys through a small hash table (in cache),
    the smallest in ascending order by :func:`_smallest_sorted`. Users are independent: ranges of them run in
    threads (the function releases the GIL), each user's rows read where they are, in order.
    """
    contiguous = rows.size == 0
    with_views = views.shape[0] > 0
    longest = 1
    for u in range(first, stop):
        longest = max(longest, user_start[u + 1] - user_start[u])
    slots = 2 << int(np.ceil(np.log2(longest)))
    seen = np.zeros(2 * slots, dtype=np.uint64)  # pairs (key, index of the distinct key + 1; 0: empty)
    distinct_keys = np.empty(longest, dtype=np.uint64)
    distinct_rows = np.empty(longest, dtype=np.int64)
    distinct_hash = np.empty(longest, dtype=np.uint64)
    distinct_views = np.zeros((longest, 2), dtype=np.uint64)
    index = np.arange(longest)  # the payload sorted with the keys: each distinct key's index
    used = np.empty(longest, dtype=np.int64)
    buckets = np.empty(slots + 1, dtype=np.int64)
    smallest_keys = np.empty(longest, dtype=np.uint64)
    smallest = np.empty(longest, dtype=np.int64)
    a, b = np.uint64(0), np.uint64(0)
    for u in range(first, stop):
        lo, hi = user_start[u], user_start[u + 1]
        bits = 1
        while (1 << bits) < 2 * (hi - lo):
            bits += 1
        mask, shift = (1 << bits) - 1, np.uint64(64 - bits)
        d = 0
        for p in range(lo, hi):  # every row's key, item hash and view read in order (no read out of order)
            r = p if contiguous else rows[p]
            value, h = key[r], item_hash[r]
            if with_views:
                a, b = _view_key(views[r - base, 0], views[r - base, 1])
            s = np.int64((value * _GOLDEN) >> shift)
            while seen[2 * s + 1] and seen[2 * s] != value:
                s = (s + 1) & mask
            if not seen[2 * s + 1]:
                seen[2 * s], seen[2 * s + 1] = value, np.uint64(d + 1)
                used[d], distinct_keys[d], distinct_rows[d], distinct_hash[d] = s, value, r, h
                distinct_views[d, 0], distinct_views[d, 1] = a, b
                d += 1
            else:  # a repeated key: the same item, unless two items share it (a 64-bit collision)
                j = np.int64(seen[2 * s + 1]) - 1
                if h != distinct_hash[j] or a != distinct_views[j, 0] or b != distinct_views[j, 1]:
                    return False
        for t in range(d):
            seen[2 * used[t] + 1] = 0
        d = _smallest_sorted(distinct_keys, index, d, max_contributions, buckets, smallest_keys, smallest)
        at = slot[u]
        for t in range(d):
            j = smallest[t]
            slot_rows[at + t], slot_hash[at + t] = distinct_rows[j], distinct_hash[j]
            if with_views:
                slot_views[at + t, 0], slot_views[at + t, 1] = distinct_views[j, 0], distinct_views[j, 1]
        count[u] = d
    return True


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def _find(items: np.ndarray, shift: np.uint64, mask: int, h: np.uint64) -> int:  # pragma: no cover - compiled
    """The slot of item hash ``h`` in a table of pairs (item hash, code + 1; 0: empty), or the empty one where it
    goes."""
    s = np.int64((h * _GOLDEN) >> shift)
    while items[2 * s + 1] and items[2 * s] != h:
        s = (s + 1) & mask
    return int(s)


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def _same_item(
    slot_views: np.ndarray, e: int, f: int, pairs: np.ndarray, at: int, n_pairs: int
) -> int:  # pragma: no cover - compiled
    """Whether slots ``e`` and ``f`` (one item hash) hold one String, by their view keys: -1 if not (unequal keys);
    else the number of pairs, one more if both are longer than 12 bytes (equal length and 4-byte prefix only:
    the pair is written to ``pairs[at + n_pairs]`` for the caller to compare whole)."""
    if slot_views[e, 0] != slot_views[f, 0] or slot_views[e, 1] != slot_views[f, 1]:
        return -1
    if (slot_views[e, 0] & _LENGTH) > 12:
        pairs[at + n_pairs, 0], pairs[at + n_pairs, 1] = e, f
        return n_pairs + 1
    return n_pairs


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def code_slots(
    order: np.ndarray,
    slot: np.ndarray,
    count: np.ndarray,
    slot_hash: np.ndarray,
    slot_views: np.ndarray,
    first: int,
    stop: int,
    pairs: np.ndarray,
) -> tuple[bool, np.ndarray, np.ndarray, int]:  # pragma: no cover - compiled
    """Codes *local to the range* for the items :func:`keep_smallest` left in the slots of the users at positions
    ``first <= p < stop`` of their final order (user ``order[p]``; slots laid out in that order), by ``slot_hash``
    in order of first appearance, written over ``slot_hash`` (each slot read, then written: no second array);
    returns ``ok``, the first slot and the hash of each local code, and the number of pairs written.

    With String views (``slot_views`` not empty) every item is compared with its code's first one: equal keys of
    strings of up to 12 bytes are equal strings, unequal keys unequal strings (``ok`` ``False``); the slots of
    longer strings with equal keys (length and 4-byte prefix) are written in pairs to ``pairs`` from the range's
    first slot on, for the caller to compare whole. Ranges run in threads; :func:`merge_codes` numbers their
    codes as one pass over all would and :func:`relabel` writes the final arrays.
    """
    with_views = slot_views.shape[0] > 0
    at = slot[order[first]] if first < stop else 0
    firsts = np.empty(1 << 12, dtype=np.int64)
    hashes = np.empty(1 << 12, dtype=np.uint64)
    items = np.zeros(2 << 12, dtype=np.uint64)  # pairs (item hash, local code + 1), 2^12 slots to start with
    item_shift = np.uint64(64 - 12)
    item_mask = items.size // 2 - 1
    n_codes = 0
    n_pairs = 0
    for position in range(first, stop):
        u = order[position]
        for e in range(slot[u], slot[u] + count[u]):
            h = slot_hash[e]
            s = _find(items, item_shift, item_mask, h)
            if items[2 * s + 1]:
                code = np.int64(items[2 * s + 1]) - 1
                if with_views:
                    n_pairs = _same_item(slot_views, e, firsts[code], pairs, at, n_pairs)
                    if n_pairs < 0:
                        return False, firsts[:0], hashes[:0], 0
            else:
                code = n_codes
                items[2 * s], items[2 * s + 1] = h, np.uint64(n_codes + 1)
                if n_codes == firsts.size:
                    firsts, hashes = np.concatenate((firsts, firsts)), np.concatenate((hashes, hashes))
                firsts[n_codes], hashes[n_codes] = e, h
                n_codes += 1
                if 4 * n_codes > items.size:  # half full: twice the slots
                    items, item_shift = _grow(items)
                    item_mask = items.size // 2 - 1
            slot_hash[e] = code
    return True, firsts[:n_codes], hashes[:n_codes], n_pairs


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def merge_codes(
    hashes: np.ndarray, slot_views: np.ndarray, firsts: np.ndarray
) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The final code of every range's local codes (``firsts`` and ``hashes``: :func:`code_slots`' first slots and
    their hashes, range after range) and each final code's first slot: codes in order of first appearance in the
    arrays, as one pass over them would give (a range's new items come after every earlier range's, in its own
    order). Items of one hash in two ranges are compared as :func:`code_slots` compares them (``ok``; the pairs of
    slots left)."""
    with_views = slot_views.shape[0] > 0
    items = np.zeros(2 << 12, dtype=np.uint64)
    item_shift = np.uint64(64 - 12)
    item_mask = items.size // 2 - 1
    final = np.empty(firsts.size, dtype=np.int64)
    first = np.empty(firsts.size, dtype=np.int64)
    pairs = np.empty((firsts.size, 2), dtype=np.int64)
    n_codes = 0
    n_pairs = 0
    for i in range(firsts.size):
        e, h = firsts[i], hashes[i]
        s = _find(items, item_shift, item_mask, h)
        if items[2 * s + 1]:
            code = np.int64(items[2 * s + 1]) - 1
            if with_views:
                n_pairs = _same_item(slot_views, e, first[code], pairs, 0, n_pairs)
                if n_pairs < 0:
                    return False, final[:0], first[:0], pairs[:0]
        else:
            code = n_codes
            items[2 * s], items[2 * s + 1] = h, np.uint64(n_codes + 1)
            first[n_codes] = e
            n_codes += 1
            if 4 * n_codes > items.size:
                items, item_shift = _grow(items)
                item_mask = items.size // 2 - 1
        final[i] = code
    return True, final, first[:n_codes], pairs[:n_pairs]


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def relabel(
    order: np.ndarray,
    slot: np.ndarray,
    offsets: np.ndarray,
    first: int,
    stop: int,
    local: np.ndarray,
    final: np.ndarray,
    base: int,
    slot_rows: np.ndarray,
    codes: np.ndarray,
    kept: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The final arrays of the positions ``first <= p < stop``: entry ``offsets[p] + t`` gets the code
    ``final[base + local[e]]`` (``local``: :func:`code_slots`' codes) and, unless ``kept`` is empty, the row
    ``slot_rows[e]``, of user ``order[p]``'s slot ``e = slot[order[p]] + t``."""
    with_rows = kept.size > 0
    for p in range(first, stop):
        at = slot[order[p]]
        for t in range(offsets[p + 1] - offsets[p]):
            codes[offsets[p] + t] = final[base + local[at + t]]
            if with_rows:
                kept[offsets[p] + t] = slot_rows[at + t]
