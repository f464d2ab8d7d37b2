"""User peeling's rounds: the coverage state (CSR arrays, incremental uncovered-user counts) and :func:`peel`, the
exponential-mechanism rounds on it (NumPy, or compiled by :mod:`opendp_wgm.engines._peel_jit`), behind
:func:`opendp_wgm.measurements.hitting_set.make_user_peeling`."""

from __future__ import annotations

import time
from types import ModuleType

import numpy as np
import polars as pl

from opendp_wgm._spaces import (
    _Space,
)
from opendp_wgm.engines.polars import Prepared, candidate_csr, cast_candidates, peel_jit
from opendp_wgm.measurements._user_items import UserItemCSR, csr_of_offsets
from opendp_wgm.measurements.two_stage import (
    ranked_frame,
)
from opendp_wgm.samplers import csprng, noisy_max
from opendp_wgm.samplers.selection import em_float_bounds, em_winner_on_words


def _slices(ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Concatenated positions ``ptr[r]:ptr[r+1]`` of every ``r`` in ``rows`` (vectorised, no Python loop)."""
    starts = ptr[rows]
    lengths = ptr[rows + 1] - starts
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(ends[-1] if ends.size else 0)


class _Coverage:
    """Uncovered-user counts of ``n_items`` items while items are picked one at a time.

    ``csr`` holds the distinct (user, item) pairs (:func:`~opendp_wgm.measurements._user_items.csr_of_offsets`
    with ``item_index=True``): user → items and item → holders, built once in O(pairs). Picking item ``j`` marks its
    not-yet-covered holders as covered and subtracts, in one ``bincount``, one from every item those users
    hold: afterwards ``counts[x]`` is the number of *uncovered* users holding ``x`` (the reference's
    ``remove_users_with_item`` of the paper's reference code, without its set copies). Each user is covered once, so
    all picks together cost O(pairs + picks · n_items).
    """

    def __init__(self, csr: UserItemCSR) -> None:
        if csr.item_offsets is None or csr.item_users is None:
            msg = "`csr` must be built with item_index=True (found no item -> users index)"
            raise ValueError(msg)
        self.n_items = csr.n_items
        self.user_items, self.user_ptr = csr.items, csr.offsets  # user -> items
        self.item_users, self.item_ptr = csr.item_users, csr.item_offsets  # item -> holders
        self.counts = np.diff(csr.item_offsets)  # uncovered holders per item
        self.covered = np.zeros(csr.n_users, dtype=bool)

    def pick(self, j: int) -> int:
        """Cover the holders of item ``j``; return how many were newly covered."""
        holders = self.item_users[self.item_ptr[j] : self.item_ptr[j + 1]]
        new = holders[~self.covered[holders]]
        if new.size:
            self.covered[new] = True
            self.counts -= np.bincount(self.user_items[_slices(self.user_ptr, new)], minlength=self.n_items)
        return int(new.size)


def coverage(
    data: pl.LazyFrame | Prepared, space: _Space, candidates: pl.Series | None
) -> tuple[_Coverage, pl.Series]:
    """The coverage state of ``data`` (a prepared plan, or the release's :class:`~opendp_wgm.engines.polars.Prepared`)
    over ``candidates`` (or over all its items, sorted, when ``None``).

    Returns the state and the items in code order (a Series of the data's item dtype). Pairs whose item is
    not a candidate are dropped (they can never be picked), then (user, item) duplicates; users are coded
    densely and each user's pairs are contiguous (:func:`opendp_wgm.engines.polars.candidate_csr`). The
    layout carries nothing: every count the rounds read is a function of the set of pairs.
    """
    item, lf = space.item, data.lf if isinstance(data, Prepared) else data
    item_dtype = lf.collect_schema()[item]
    if candidates is None:
        items = lf.select(item).unique().sort(item).collect().get_column(item)
    else:
        # cast the public list to the data's dtype (never the data to the list's), exactly, before any noise
        items = cast_candidates(candidates, item_dtype).rename(item)
    if items.len() == 0:
        return _Coverage(csr_of_offsets(np.zeros(1, np.int64), np.zeros(0, np.int64), 0, item_index=True)), items
    offsets, codes = candidate_csr(data, space, items)
    return _Coverage(csr_of_offsets(offsets, codes, items.len(), item_index=True)), items


def _compiled_rounds(
    kernels: ModuleType,
    state: _Coverage,
    alive: np.ndarray,
    chosen: np.ndarray,
    scale: float,
    source: np.random.Generator,
) -> None:
    """:func:`peel`'s rounds by the compiled step (:func:`opendp_wgm.engines._peel_jit.em_rounds`), in place.

    Round ``r`` races the ``m = n - r`` remaining candidates on ``m`` words of ``source`` (none when ``m = 1``),
    as :func:`opendp_wgm.samplers.noisy_max` does, with the same float64 bounds; the words of every round are
    drawn at once, consecutive words of the same stream. A round whose float pass certifies no winner (near-ties
    within ~2^-35: rare) is settled here exactly on the same words
    (:func:`~opendp_wgm.samplers.selection.em_winner_on_words`: interval arithmetic, fresh words for the
    refinement), then the compiled rounds go on. Each round is therefore an exact EM draw
    among the remaining candidates, as in :func:`peel`'s loop."""
    n, rounds, raw = alive.size, chosen.size, source.bit_generator
    words = np.asarray(raw.random_raw(sum(m for m in range(n - rounds + 1, n + 1) if m > 1)), dtype=np.uint64)
    r, cursor, forced = 0, 0, -1
    arrays = (state.counts, alive, chosen, state.covered, state.user_items, state.user_ptr, state.item_users)
    margin, clamp = em_float_bounds()
    while r < rounds:
        r, cursor = kernels.em_rounds(r, rounds, *arrays, state.item_ptr, words, cursor, forced, scale, margin, clamp)
        if r < rounds:  # round r left open by the floats: settle it exactly on its words
            m = n - r
            forced = em_winner_on_words(state.counts[alive[:m]], scale, raw, words[cursor : cursor + m])
            cursor += m


def peel(
    lf: pl.LazyFrame | Prepared,
    space: _Space,
    candidates: pl.Series | None,
    k: int,
    scale: float,
    timings: dict[str, float] | None = None,
) -> pl.DataFrame:
    r"""User peeling (the paper's reference code): ``min(k, |candidates|)`` exponential-mechanism rounds.

    Round ``r`` draws candidate ``x`` among those not chosen yet with probability
    :math:`\propto \exp(c_r(x)/\text{scale})`, :math:`c_r(x)` = users holding ``x`` that no earlier pick covers
    (exact sampler: :func:`opendp_wgm.samplers.noisy_max`, Gumbel/EM form). The number of rounds is
    ``min(k, |candidates|)`` whatever the data: once everyone is covered, rounds go on choosing uniformly
    among the remaining candidates (stopping early would make the output length depend on the data).
    ``timings`` (benchmarks only) receives the seconds spent building the arrays and in the rounds.
    """
    start = time.perf_counter()
    state, items = coverage(lf, space, candidates)
    built = time.perf_counter()
    n = state.n_items
    rounds = min(k, n)
    alive = np.arange(n, dtype=np.int64)  # alive[:n - r]: candidates not chosen in rounds < r
    chosen = np.empty(rounds, dtype=np.int64)
    source = csprng()  # keyed once for all the rounds: keying per round cost about as much as a draw
    compiled = peel_jit()
    if compiled is not None:  # the same rounds, compiled (same draws: same picks)
        _compiled_rounds(compiled, state, alive, chosen, scale, source)
    else:
        for r in range(rounds):  # inherently sequential: round r's scores depend on the picks of rounds < r
            m = n - r
            # exact EM draw (Gumbel form: one item per key, the sampler's bounds, exact fallback)
            position = noisy_max(state.counts[alive[:m]], scale, measure="zcdp", method="fast", generator=source)
            j = alive[position]
            alive[position] = alive[m - 1]  # swap-remove: O(1), order of the alive list carries nothing
            alive[m - 1] = j
            chosen[r] = j
            state.pick(j)
    if timings is not None:
        timings.update(build=built - start, rounds=time.perf_counter() - built, n_rounds=rounds, n_candidates=n)
    return ranked_frame(items, chosen, items.name)
