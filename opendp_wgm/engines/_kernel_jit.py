r"""Compiled (Numba) per-user step of the WGM: dedup, bound and lattice histogram in linear passes over the rows.

Imported only if Numba is installed (``opendp-wgm[fast]``); without it, :func:`opendp_wgm.kernel.plan_for`
chooses a Polars plan and refuses the compiled ones. The result is **identical** to the Polars plans' for the
same seeds: users and items come in as exact integer codes (one per distinct value: a value's offset from the
smallest, or its rank in a bitmap of the offsets present, or a hashed code), a user with at most Δ0 distinct items
keeps them all, and a user with more keeps the Δ0 distinct items of smallest key, where the keys are the
Polars plans' own secret keyed hashes of (user, item) (`bound_key`, or `keys_of_hashes`), passed in.

No comparison sort of the rows: the rows are bucketed by user (a counting sort), each user's items deduplicated
with a per-item marker, and the Δ0-th smallest key of a user above Δ0 found by a linear selection
(:func:`smallest`). :func:`keyed_weights` weighs each user's run of rows from their keys alone (no item codes).

The passes over rows take a range (``first``, ``stop``) so that the caller may run them on disjoint chunks in
threads (the functions release the GIL): chunks of rows for the coding and the counting sort, ranges of users
with one marker and one histogram each for the rest. The histogram sums integers, so their order does not
change them; the counting sort places each chunk's rows after the previous chunk's, so each user's rows keep
their row order whatever the number of chunks.
"""

from __future__ import annotations

import numpy as np
from numba import config, njit

from opendp_wgm.engines._hashed_jit import keep_smallest, smallest
from opendp_wgm.engines.compile_notice import watch_compiles

__all__ = [
    "bit_offsets",
    "boosted_users",
    "count_users",
    "dense_codes",
    "distinct_items_by_user",
    "drop_items",
    "first_rows",
    "histogram_above",
    "histogram_distinct",
    "histogram_user_range",
    "items_by_user",
    "keep_smallest",
    "keyed_weights",
    "mark_bits",
    "max_threads",
    "offsets_of",
    "pairs_of",
    "place_holders",
    "place_items",
    "rank_offsets",
    "rows_above",
    "smallest",
    "user_cursors",
    "value_range",
    "word_ranks",
]

watch_compiles()  # a first-use compile is announced, not silent (engines/compile_notice.py)


def max_threads() -> int:
    """Numba's thread count setting (``NUMBA_NUM_THREADS``; default: the machine's cores): the most threads
    the caller runs these functions in."""
    return int(config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined, unused-ignore]  # set at import from the env


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]  # typed only where Numba is
def _popcount(x: np.uint64) -> int:  # pragma: no cover - compiled
    """The number of bits set in ``x`` (branch-free)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return int((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def mark_bits(
    values: np.ndarray, low: int, first: int, stop: int, words: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Set the bit of offset ``values[r] - low`` in ``words`` for the rows ``first <= r < stop`` (one array of
    words per thread: setting a bit reads and writes its whole word)."""
    for r in range(first, stop):
        c = values[r] - low
        words[c >> 6] |= np.uint64(1) << np.uint64(c & 63)


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def word_ranks(words: np.ndarray, before: np.ndarray) -> int:  # pragma: no cover - compiled
    """``before[w]``: the bits set in the words before word ``w``; return the number of bits set."""
    k = 0
    for w in range(words.size):
        before[w] = k
        k += _popcount(words[w])
    return k


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def bit_offsets(words: np.ndarray, offsets: np.ndarray) -> None:  # pragma: no cover - compiled
    """``offsets``: the offsets of the bits set, in order (as many as are set: the offset of each compact code)."""
    k = 0
    for w in range(words.size):
        x = words[w]
        while x:
            rest = x & (x - np.uint64(1))  # x without its lowest bit
            offsets[k] = 64 * w + _popcount((x ^ rest) - np.uint64(1))  # the lowest bit's position
            k += 1
            x = rest


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def value_range(values: np.ndarray, first: int, stop: int, bounds: np.ndarray) -> None:  # pragma: no cover - compiled
    """``bounds = (min, max)`` of ``values[first:stop]`` (a non-empty range, ``first < stop``), in one pass."""
    low = high = values[first]
    for r in range(first + 1, stop):
        v = values[r]
        if v < low:
            low = v
        elif v > high:
            high = v
    bounds[0], bounds[1] = low, high


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def offsets_of(
    values: np.ndarray, low: int, first: int, stop: int, codes: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``codes[r] = values[r] - low`` for the rows ``first <= r < stop``."""
    for r in range(first, stop):
        codes[r] = values[r] - low


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def rank_offsets(
    codes: np.ndarray, words: np.ndarray, before: np.ndarray, first: int, stop: int
) -> None:  # pragma: no cover - compiled
    """In place, for ``first <= j < stop``: ``codes[j]``, an offset whose bit is set in ``words``
    (:func:`mark_bits`), becomes its rank among the offsets set (``before[w]``: the bits set in the words before
    word ``w``, :func:`word_ranks`)."""
    for j in range(first, stop):
        c = codes[j]
        w = c >> 6
        codes[j] = before[w] + _popcount(words[w] & ((np.uint64(1) << np.uint64(c & 63)) - np.uint64(1)))


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def dense_codes(values: np.ndarray, codes: np.ndarray, uniques: np.ndarray) -> int:  # pragma: no cover - compiled
    """Dense codes ``0, 1, …`` of integer ``values`` into ``codes`` (equal values, equal codes; in order of first
    occurrence) and the value of each code into ``uniques`` (int64, as large as ``values``: the caller allocates
    both); return the number of codes. Through an open-addressing table kept at most half full (it doubles as
    codes come: its size follows the distinct values, not the rows, and stays in cache for a few of them)."""
    n = values.size
    size, shift = 1 << 12, np.uint64(64 - 12)
    table = np.full((size, 2), -1, dtype=np.int64)  # (value, code) per slot: a probe reads one cache line
    next_code = 0
    for r in range(n):
        v = values[r]
        i = (np.uint64(v) * np.uint64(0x9E3779B97F4A7C15)) >> shift  # Fibonacci hashing: the top bits
        while True:
            c = table[i, 1]
            if c < 0:
                c = next_code
                table[i, 0], table[i, 1] = v, c
                uniques[c] = v
                next_code += 1
                break
            if table[i, 0] == v:
                break
            i = (i + np.uint64(1)) & np.uint64(size - 1)
        codes[r] = c
        if 2 * next_code > size:  # rehash into a table twice the size
            size *= 2
            shift -= np.uint64(1)
            table = np.full((size, 2), -1, dtype=np.int64)
            for k in range(next_code):
                j = (np.uint64(uniques[k]) * np.uint64(0x9E3779B97F4A7C15)) >> shift
                while table[j, 1] >= 0:
                    j = (j + np.uint64(1)) & np.uint64(size - 1)
                table[j, 0], table[j, 1] = uniques[k], k
    return next_code


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def first_rows(codes: np.ndarray, rows: np.ndarray) -> None:  # pragma: no cover - compiled
    """``rows[c]``: the first row of code ``c``, for codes numbered ``0, 1, …`` in order of first row
    (:func:`dense_codes`' numbering; ``rows`` holds one slot per code): code ``c`` first appears where the codes
    seen so far number ``c``."""
    next_code = 0
    for r in range(codes.size):
        if codes[r] == next_code:
            rows[next_code] = r
            next_code += 1


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def place_holders(
    items: np.ndarray, offsets: np.ndarray, first: int, stop: int, cursor: np.ndarray, holders: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Place each user ``first <= u < stop`` at the ``cursor`` of every item it holds (``items[offsets[u]:offsets[u
    + 1]]``) in ``holders``, advancing it: the second pass of the item → users index
    (:func:`opendp_wgm.engines.polars.holders_by_item`), over one range of users."""
    for u in range(first, stop):
        for r in range(offsets[u], offsets[u + 1]):
            x = items[r]
            holders[cursor[x]] = u
            cursor[x] += 1


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def items_by_user(
    users: np.ndarray, items: np.ndarray, n_users: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """A counting sort of the rows' items by user: ``held[start[u]:start[u + 1]]`` are user ``u``'s item codes
    (with repeats, in row order). One pass counts, one places; no comparison sort. (In one chunk:
    :func:`count_users`, :func:`user_cursors` and :func:`place_items` run it in several.)"""
    counts = np.zeros((1, n_users), dtype=np.int64)
    count_users(users, 0, 0, users.size, counts[0])
    start = np.empty(n_users + 1, dtype=np.int64)
    user_cursors(counts, start)
    held = np.empty(users.size, dtype=items.dtype)
    place_items(users, 0, items, 0, 0, users.size, counts[0], held)
    return held, start


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def count_users(
    users: np.ndarray, low: int, first: int, stop: int, counts: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Add to ``counts[u]`` the rows ``first <= r < stop`` of each user ``u = users[r] - low``."""
    for r in range(first, stop):
        counts[users[r] - low] += 1


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def user_cursors(counts: np.ndarray, start: np.ndarray) -> None:  # pragma: no cover - compiled
    """From the rows of each user in each chunk (``counts[chunk, u]``): the start of each user's rows into
    ``start`` (``n_users + 1`` offsets), and, in place of the counts, where each chunk places its first row of
    each user (the chunks in order, so each user's rows stay in row order)."""
    n_chunks, n_users = counts.shape
    at = 0
    for u in range(n_users):
        start[u] = at
        for c in range(n_chunks):
            rows = counts[c, u]
            counts[c, u] = at
            at += rows
    start[n_users] = at


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def place_items(
    users: np.ndarray,
    user_low: int,
    items: np.ndarray,
    item_low: int,
    first: int,
    stop: int,
    cursor: np.ndarray,
    held: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Place ``items[r] - item_low`` for the rows ``first <= r < stop`` at their user's ``cursor`` in ``held``
    (advancing it); user ``users[r] - user_low``."""
    for r in range(first, stop):
        u = users[r] - user_low
        held[cursor[u]] = items[r] - item_low
        cursor[u] += 1


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def histogram_user_range(
    held: np.ndarray,
    start: np.ndarray,
    first: int,
    stop: int,
    max_contributions: int,
    weights: np.ndarray,
    above: np.ndarray,
    seen: np.ndarray,
    histogram: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The lattice histogram (int64 per item code) of the users ``first <= u < stop`` with at most Δ0 distinct
    items, added to ``histogram``; marks the others in ``above``. ``held[start[u]:start[u + 1]]`` are user ``u``'s
    item codes (with repeats; overwritten by its distinct ones); ``weights[t - 1]`` is the lattice weight of a
    user keeping ``t`` items; ``seen`` (int32 per item code, ``-1`` or a user code below ``first``) is the
    per-item marker of the dedup."""
    for u in range(first, stop):
        t = 0
        for j in range(start[u], start[u + 1]):
            i = held[j]
            if seen[i] != u:
                seen[i] = u
                held[start[u] + t] = i  # the distinct items, in place (t <= j - start[u])
                t += 1
        if t > max_contributions:
            above[u] = True
        elif t:
            w = weights[t - 1]
            for j in range(start[u], start[u] + t):
                histogram[held[j]] += w


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def rows_above(
    users: np.ndarray, low: int, start: np.ndarray, above: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The rows of the users marked ``above`` (user ``users[r] - low``; grouped by user in code order, each
    user's in row order) and the offsets of each such user's rows in that array."""
    n_users = above.size
    n_above = 0
    for u in range(n_users):
        n_above += above[u]
    offsets = np.zeros(n_above + 1, dtype=np.int64)
    slot = np.full(n_users, -1, dtype=np.int64)
    a = 0
    for u in range(n_users):
        if above[u]:
            slot[u] = offsets[a]
            offsets[a + 1] = offsets[a] + start[u + 1] - start[u]
            a += 1
    rows = np.empty(offsets[n_above], dtype=np.int64)
    if n_above:
        for r in range(users.size):
            u = users[r] - low
            k = slot[u]
            if k >= 0:
                rows[k] = r
                slot[u] = k + 1
    return rows, offsets


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def histogram_above(
    histogram: np.ndarray,
    items: np.ndarray,
    rows: np.ndarray,
    offsets: np.ndarray,
    keys: np.ndarray,
    max_contributions: int,
    weight: int,
) -> None:  # pragma: no cover - compiled
    """Add to ``histogram`` (in place) the users above Δ0: each keeps its ``max_contributions`` distinct items of
    smallest key, with weight ``weight``. ``rows[offsets[a]:offsets[a + 1]]`` are user ``a``'s rows and
    ``keys`` their keys, in the same order (equal (user, item) rows have equal keys); each user's distinct items
    are cut by :func:`keep_smallest` (a linear selection)."""
    n_items = histogram.size
    seen = np.full(n_items, -1, dtype=np.int32)
    longest = 0
    for a in range(offsets.size - 1):
        longest = max(longest, offsets[a + 1] - offsets[a])
    distinct = np.empty(longest, dtype=np.int64)
    distinct_keys = np.empty(longest, dtype=np.uint64)
    scratch = np.empty(longest, dtype=np.uint64)
    for a in range(offsets.size - 1):
        t = 0
        for j in range(offsets[a], offsets[a + 1]):
            i = items[rows[j]]
            if seen[i] != a:
                seen[i] = a
                distinct[t] = i
                distinct_keys[t] = keys[j]
                t += 1
        keep_smallest(histogram, distinct, distinct_keys, scratch, t, max_contributions, weight)


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def keyed_weights(
    start: np.ndarray,
    keys: np.ndarray,
    first: int,
    stop: int,
    max_contributions: int,
    weights: np.ndarray,
    out: np.ndarray,
    twins: np.ndarray,
    above: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """The lattice weight of each row of the users ``first <= u < stop``, whose rows are
    ``start[u] <= r < start[u + 1]`` (each user's rows adjacent), from the rows' keys alone: ``out[r]`` is the
    weight ``weights[t - 1]`` of the row's user (``t``: the items it keeps) where the row is kept, else 0.

    Equal (user, item) rows have equal keys, so a user's distinct keys stand for its distinct items (a per-user
    hash set of the keys drops the repeats); then a user with at most ``max_contributions`` of them keeps all.
    A user with more keeps the ``max_contributions`` of smallest key (:func:`smallest`: distinct keys, no ties)
    when the keys are the bound's secret keys (``above`` empty); when they only identify the items (the items'
    values or hashes: ``above`` holds a flag per user), its rows get 0 and it is flagged, for the caller to key.

    Where the keys are hashes, a repeat is taken for the same item, which the caller checks: the pairs of rows
    (first row of the key, the repeat) are written to ``twins`` from the range's first row on, and their number
    returned. If two distinct items of a user share a key (a 64-bit collision), the check fails and the caller
    keeps the Polars plans. Exact keys (integer values) need no check: ``twins`` is then empty and nothing is
    written to it."""
    longest = 0
    for u in range(first, stop):
        longest = max(longest, start[u + 1] - start[u])
    bits = 4
    while (1 << bits) < 2 * longest:
        bits += 1
    owner = np.full(1 << bits, -1, dtype=np.int64)  # the user whose key a slot holds (no clearing between users)
    slot = np.empty(1 << bits, dtype=np.int64)  # the index of that key among the user's distinct keys
    distinct_keys = np.empty(longest, dtype=np.uint64)
    distinct_rows = np.empty(longest, dtype=np.int64)
    scratch = np.empty(longest, dtype=np.uint64)
    check, flag = twins.shape[0] > 0, above.size > 0
    at = start[first]
    n_twins = 0
    for u in range(first, stop):
        size = 4
        while (1 << size) < 2 * (start[u + 1] - start[u]):  # at most half full: short probes
            size += 1
        shift, mask = np.uint64(64 - size), (1 << size) - 1
        t = 0
        for r in range(start[u], start[u + 1]):
            k = np.uint64(keys[r])  # an integer value as its 64 bits (distinct values, distinct keys)
            out[r] = 0
            # the high bits of a multiplicative hash: integer values spread too (1, 2, 3, ..., multiples of 2^40)
            i = np.int64((k * np.uint64(0x9E3779B97F4A7C15)) >> shift)
            while True:
                if owner[i] != u:
                    owner[i], slot[i] = u, t
                    distinct_keys[t], distinct_rows[t] = k, r
                    t += 1
                    break
                if distinct_keys[slot[i]] == k:
                    if check:
                        twins[at + n_twins, 0], twins[at + n_twins, 1] = distinct_rows[slot[i]], r
                        n_twins += 1
                    break
                i = (i + 1) & mask
        if t == 0:
            continue
        if t > max_contributions and flag:
            above[u] = True
            continue
        w = weights[min(t, max_contributions) - 1]
        if t <= max_contributions:
            for j in range(t):
                out[distinct_rows[j]] = w
        else:
            scratch[:t] = distinct_keys[:t]
            cut = smallest(scratch, t, max_contributions - 1)
            for j in range(t):
                if distinct_keys[j] <= cut:
                    out[distinct_rows[j]] = w
    return n_twins


# --------------------------------------------------------------------------------------------------------------
# steps that bound the same users several times (DP-SIPS's rounds): the distinct pairs grouped by user once, then
# every round over them, the items a round released dropped from the arrays


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def distinct_items_by_user(
    users: np.ndarray, items: np.ndarray, n_users: int, n_items: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Each user's distinct item codes: ``held[start[u]:start[u + 1]]`` (int32). Rows whose user codes are sorted
    (files written user by user) are each user's run already; other rows go through the counting sort of
    :func:`items_by_user`. Each user's repeats are then dropped in place with a per-item marker."""
    ordered = True
    for r in range(1, users.size):
        if users[r] < users[r - 1]:
            ordered = False
            break
    if ordered:
        held = items.astype(np.int32)
        start = np.zeros(n_users + 1, dtype=np.int64)
        for r in range(users.size):
            start[users[r] + 1] += 1
        for u in range(n_users):
            start[u + 1] += start[u]
    else:
        held, start = items_by_user(users, items, n_users)
    seen = np.full(n_items, -1, dtype=np.int32)  # user codes are below 2^31 (as many as rows at most)
    distinct_start = np.zeros(n_users + 1, dtype=np.int64)
    t = 0
    for u in range(n_users):
        for j in range(start[u], start[u + 1]):
            i = held[j]
            if seen[i] != u:
                seen[i] = u
                held[t] = i  # t <= j: compacted in place
                t += 1
        distinct_start[u + 1] = t
    return held[:t].astype(np.int32), distinct_start


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def histogram_distinct(
    held: np.ndarray, start: np.ndarray, n_items: int, max_contributions: int, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """:func:`histogram_user_range` over every user, on distinct items (``held``, ``start`` of
    :func:`distinct_items_by_user`), with no marker pass: the lattice histogram of the users with at most Δ0
    items, and which users hold more."""
    histogram = np.zeros(n_items, dtype=np.int64)
    above = np.zeros(start.size - 1, dtype=np.bool_)
    for u in range(start.size - 1):
        t = start[u + 1] - start[u]
        if t > max_contributions:
            above[u] = True
        elif t:
            w = weights[t - 1]
            for j in range(start[u], start[u + 1]):
                histogram[held[j]] += w
    return histogram, above


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def pairs_of(
    held: np.ndarray, start: np.ndarray, above: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The (user code, item code) pairs of the users marked ``above``, grouped by user, and the offsets of each
    such user's pairs (the rows :func:`histogram_above` reads)."""
    n_pairs, n_above = 0, 0
    for u in range(start.size - 1):
        if above[u]:
            n_above += 1
            n_pairs += start[u + 1] - start[u]
    users = np.empty(n_pairs, dtype=np.int64)
    items = np.empty(n_pairs, dtype=np.int64)
    offsets = np.zeros(n_above + 1, dtype=np.int64)
    p, a = 0, 0
    for u in range(start.size - 1):
        if above[u]:
            for j in range(start[u], start[u + 1]):
                users[p] = u
                items[p] = held[j]
                p += 1
            a += 1
            offsets[a] = p
    return users, items, offsets


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def boosted_users(held: np.ndarray, start: np.ndarray, flags: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """The two-bin count of the users holding an item that ``flags`` (per item code) does not flag: those also
    holding a flagged item (boosted), then the others (int64, two entries)."""
    bins = np.zeros(2, dtype=np.int64)
    for u in range(start.size - 1):
        r = 0
        for j in range(start[u], start[u + 1]):
            r += flags[held[j]]
        if start[u + 1] - start[u] > r:
            bins[0 if r else 1] += 1
    return bins


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator, unused-ignore]
def drop_items(
    held: np.ndarray, start: np.ndarray, flags: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """``held`` and ``start`` without the item codes ``flags`` flags (new arrays; each user's order kept)."""
    kept = np.empty(held.size, dtype=held.dtype)
    kept_start = np.zeros(start.size, dtype=np.int64)
    t = 0
    for u in range(start.size - 1):
        for j in range(start[u], start[u + 1]):
            if not flags[held[j]]:
                kept[t] = held[j]
                t += 1
        kept_start[u + 1] = t
    return kept[:t], kept_start
