r"""Exact private selection on integer scores: noisy top-k and noisy max.

:func:`noisy_top_k` samples *exactly* the distribution of OpenDP's ``make_noisy_top_k`` on a vector of
integer scores with ``dp.linf_distance(T=dp.i64, monotonic=True)``, for both of its output measures:

- ``measure="zcdp"``: Gumbel noise. The released sequence has the law of exponential-mechanism peeling,
  :math:`\Pr[i] \propto e^{x_i/\text{scale}}` among the items not yet selected, in every round (no factor 1/2:
  the scores are monotone). OpenDP's map: :math:`\rho = k\,\Delta_\infty^2 / (8\,\text{scale}^2)`.
- ``measure="max_divergence"``: exponential noise, i.e. peeled *permute-and-flip* (McKenna & Sheldon 2020):
  in every round, the remaining items are visited in a uniformly random order and item ``i`` is accepted
  with probability :math:`e^{(x_i - x_{\max})/\text{scale}}`. OpenDP's map:
  :math:`\varepsilon = k\,\Delta_\infty / \text{scale}`.

Two implementations draw the same distribution:

- ``method="opendp"``: OpenDP's own exact samplers (``dp.m.make_noisy_top_k``; about 0.2 s for 10^3 scores at
  k = 100, 4 s for 10^4, 30 s for 10^5). Requires ``dp.enable_features("contrib")``.
- ``method="fast"``: this module's exact sampler, which groups equal scores into *levels* and runs one race
  between levels per round (vectorised float64 with proven error bounds, an exact ``mpmath`` interval
  fallback for near-ties, randomness from :func:`opendp_wgm.samplers.csprng`). Cost O(k · #distinct scores).
  The Gumbel form with ``scale > 0`` draws every round in one shot: one key per score, the same float64 bounds
  and exact fallback, the k smallest keys in order (O(n log n), a few NumPy calls whatever k).
- ``method="auto"`` (default): ``"fast"`` for the Gumbel form with ``scale > 0`` (the one-shot draw: cheaper
  than OpenDP's at every size, 0.05 ms against 14 ms for 107 scores at k = 100); otherwise ``"opendp"`` when
  ``len(scores) * k <= 20_000`` and OpenDP's ``"contrib"`` feature is enabled, ``"fast"`` otherwise. Scores
  spread over 2^52 or more always go to OpenDP (the fast path refuses them).

The exactness argument is in ``docs/top_k.md`` ("Exact selection").
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Literal

import numpy as np
from mpmath.ctx_iv import MPIntervalContext
from numpy.typing import NDArray

from opendp_wgm._validation import _check_choice, _check_int, _check_real
from opendp_wgm.samplers.discrete_gaussian import _RawSource, csprng

if TYPE_CHECKING:
    from mpmath.ctx_iv import ivmpf

__all__ = [
    "SELECTION_MEASURES",
    "SELECTION_METHODS",
    "SelectionMeasure",
    "SelectionMethod",
    "em_float_bounds",
    "em_winner_on_words",
    "noisy_max",
    "noisy_top_k",
]

SelectionMeasure = Literal["zcdp", "max_divergence"]
SelectionMethod = Literal["auto", "opendp", "fast"]
#: The values of ``measure`` (:data:`SelectionMeasure`) and ``method`` (:data:`SelectionMethod`).
SELECTION_MEASURES: tuple[SelectionMeasure, ...] = ("zcdp", "max_divergence")
SELECTION_METHODS: tuple[SelectionMethod, ...] = ("auto", "opendp", "fast")

#: ``method="auto"`` uses OpenDP when ``len(scores) * k`` is at most this (≲ 0.1 s there).
_OPENDP_MAX_WORK = 20_000
#: Bits of each uniform the float64 fast path reads: cells [r 2^-52, (r+1) 2^-52) have exact float endpoints.
_CELL_BITS = 52
#: Relative error margin of the fast path (see docs/top_k.md, "Fast path"): >= 4x the proven float error.
_MARGIN = 2.0**-38
#: Scores whose spread exceeds this are not exact in float64: the fast path refuses them.
_MAX_SPREAD = 2**52
#: Clamp of the level offset a = d/scale used in lower bounds (any a >= 2^1000 loses to the top level).
_A_CLAMP = 2.0**1000


# --------------------------------------------------------------------------------------------------------------
# validation


def _as_scores(scores: object) -> np.ndarray:
    arr = np.asarray(scores)
    if arr.ndim != 1:
        msg = f"`scores` must be one-dimensional (found shape {arr.shape})"
        raise ValueError(msg)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.int64:  # the usual case, without NumPy's slower dtype queries (noisy_max runs per round)
        return arr
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        msg = f"`scores` must hold integers (found dtype {arr.dtype})"
        raise TypeError(msg)
    if arr.dtype == np.uint64 and arr.max() > np.iinfo(np.int64).max:
        msg = "`scores` must fit in int64"
        raise ValueError(msg)
    return arr.astype(np.int64, copy=False)


def _contrib_enabled() -> bool:
    import opendp.prelude as dp

    try:
        dp.assert_features("contrib")
    except dp.OpenDPException:
        return False
    return True


# --------------------------------------------------------------------------------------------------------------
# public functions


def noisy_top_k(
    scores: np.ndarray,
    k: int,
    scale: float,
    *,
    measure: SelectionMeasure = "max_divergence",
    method: SelectionMethod = "auto",
    generator: np.random.Generator | None = None,
) -> np.ndarray:
    r"""Indices of a private top-k of integer ``scores``, best first.

    Samples exactly what ``dp.m.make_noisy_top_k`` samples on
    ``dp.vector_domain(dp.atom_domain(T=dp.i64), size=len(scores))`` with the same ``k``, ``scale`` and
    output measure (see the module docstring for the two distributions).

    Parameters
    ----------
    scores
        One-dimensional array of integers (any integer dtype that fits in int64). Not modified.
    k
        Number of indices to select, ``>= 1``; ``min(k, len(scores))`` are returned.
    scale
        Noise scale ``>= 0`` (0 selects the true top-k, ties broken uniformly at random).
    measure : {'max_divergence', 'zcdp'}
        ``'max_divergence'``: peeled permute-and-flip (OpenDP's exponential noise), ε = k Δ / scale.
        ``'zcdp'``: exponential-mechanism peeling (OpenDP's Gumbel noise), ρ = k Δ² / (8 scale²).
    method : {'auto', 'opendp', 'fast'}
        Which exact sampler to use (same distribution); see the module docstring.
    generator
        The fast sampler's randomness: a :func:`opendp_wgm.samplers.csprng` generator (default: a fresh one
        per call). A caller that selects many times in one release (user peeling's rounds) passes one, keyed
        once (keying costs about as much as a small selection). OpenDP's sampler draws its own.

    Returns
    -------
    numpy.ndarray
        ``int64`` indices into ``scores``, distinct, in selection order (best first); empty for empty
        ``scores``.

    Raises
    ------
    TypeError
        If ``scores`` does not hold integers, or ``k`` is not an integer.
    ValueError
        On a bad ``k``, ``scale``, ``measure`` or ``method``, on multi-dimensional ``scores``, or when
        ``method='fast'`` gets scores spread over more than 2^52.
    RuntimeError
        If ``method='opendp'`` and OpenDP's ``"contrib"`` feature is not enabled.

    Notes
    -----
    With monotone scores (counts under add/remove of users) both distributions are
    :math:`\Delta_\infty/\text{scale}`-DP per round, and the Gumbel one is
    :math:`\Delta_\infty/\text{scale}`-bounded-range, hence :math:`\Delta_\infty^2/(8\,\text{scale}^2)`-zCDP per
    round. The privacy maps are OpenDP's; this function only samples.

    Examples
    --------
    >>> import numpy as np
    >>> from opendp_wgm.samplers import noisy_top_k
    >>> noisy_top_k(np.array([1000, 0, 2000, 5]), 2, 1e-3, measure="zcdp", method="fast").tolist()
    [2, 0]
    """
    arr = _as_scores(scores)
    k = _check_int("k", k, minimum=1)
    scale = _check_real("scale", scale, minimum=0.0)
    measure = _check_choice("measure", measure, SELECTION_MEASURES)
    method = _check_choice("method", method, SELECTION_METHODS)
    n = int(arr.shape[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    k = min(k, n)
    spread = int(arr.max()) - int(arr.min())
    if method == "auto":
        # OpenDP's sampler where the fast path's rounds cost more; the one-shot Gumbel draw never does
        small = n * k <= _OPENDP_MAX_WORK and not (measure == "zcdp" and scale > 0.0)
        method = "opendp" if (small or spread >= _MAX_SPREAD) and _contrib_enabled() else "fast"
    if method == "opendp":
        return _opendp_top_k(arr, k, scale, measure)
    if spread >= _MAX_SPREAD:
        msg = f"method='fast' needs scores spread over less than 2**52 (found a spread of {spread})"
        raise ValueError(msg)
    return _fast_top_k(arr, k, scale, measure, csprng() if generator is None else generator)


def noisy_max(
    scores: np.ndarray,
    scale: float,
    *,
    measure: SelectionMeasure = "max_divergence",
    method: SelectionMethod = "auto",
    generator: np.random.Generator | None = None,
) -> int:
    r"""Index of a private argmax of integer ``scores``: :func:`noisy_top_k` with ``k = 1``.

    ``measure='max_divergence'`` is permute-and-flip (OpenDP's ``make_noisy_max`` with exponential noise),
    ``measure='zcdp'`` the exponential mechanism :math:`\Pr[i] \propto e^{x_i/\text{scale}}`. ``generator`` as
    for :func:`noisy_top_k`.

    Raises
    ------
    ValueError
        If ``scores`` is empty, or as :func:`noisy_top_k`.

    Examples
    --------
    >>> from opendp_wgm.samplers import noisy_max
    >>> noisy_max([3, 7000, 5], 1.0, method="fast")
    1
    """
    arr = _as_scores(scores)
    if arr.shape[0] == 0:
        msg = "`scores` must not be empty for noisy_max"
        raise ValueError(msg)
    return int(noisy_top_k(arr, 1, scale, measure=measure, method=method, generator=generator)[0])


# --------------------------------------------------------------------------------------------------------------
# method="opendp"


def _opendp_top_k(scores: np.ndarray, k: int, scale: float, measure: str) -> np.ndarray:
    import opendp.prelude as dp

    if not _contrib_enabled():
        msg = (
            "method='opendp' uses dp.m.make_noisy_top_k, which requires the \"contrib\" feature: call "
            "`dp.enable_features(\"contrib\")` (with `import opendp.prelude as dp`) first"
        )
        raise RuntimeError(msg)
    space = (
        dp.vector_domain(dp.atom_domain(T=dp.i64), size=int(scores.shape[0])),
        dp.linf_distance(T=dp.i64, monotonic=True),
    )
    out_measure = dp.zero_concentrated_divergence() if measure == "zcdp" else dp.max_divergence()
    meas = dp.m.make_noisy_top_k(*space, output_measure=out_measure, k=k, scale=scale)
    return np.asarray(meas(scores.tolist()), dtype=np.int64)


# --------------------------------------------------------------------------------------------------------------
# method="fast": levels and rounds


def em_float_bounds() -> tuple[float, float]:
    """The float64 pass's relative margin and offset clamp (``docs/top_k.md`` §5.2), for a compiled race that
    forms :func:`_key_bounds`' bounds with the same operations (user peeling's rounds)."""
    return _MARGIN, _A_CLAMP


def em_winner_on_words(scores: np.ndarray, scale: float, source: np.random.BitGenerator, words: np.ndarray) -> int:
    """The exact exponential-mechanism winner among integer ``scores`` (one item per key) on the given ``words``
    (one per score, already drawn), refined with fresh words of ``source`` where the floats leave it open
    (:func:`_race`)."""
    offsets = (scores.max() - scores).astype(np.float64)
    return _race(offsets, np.ones(scores.shape[0], dtype=np.int64), scale, "zcdp", source, words=words)


def _gumbel_top_k(scores: np.ndarray, k: int, scale: float, source: np.random.BitGenerator) -> np.ndarray:
    r"""Exponential-mechanism peeling of ``k`` rounds in one shot (``scale > 0``): the ``k`` smallest keys
    :math:`K_i = d_i/\text{scale} + \log(-\log V_i)`, one independent uniform per item, in increasing order.

    Each key is :func:`_race`'s with a level of one item, so :math:`e^{K_i}` is an exponential variable of rate
    :math:`e^{-d_i/\text{scale}}`: the smallest is item ``i`` with probability
    :math:`\propto e^{x_i/\text{scale}}` and, by memorylessness, the next smallest is the same draw among the
    others (the Gumbel-max trick, which OpenDP's ``make_noisy_top_k`` uses): the order of the ``k`` smallest has
    the law of ``k`` peeling rounds (``docs/top_k.md`` §5.3). The keys are bounded in float64
    (:func:`_key_bounds`) and sorted by lower bound; consecutive items whose bounds overlap form *clusters*,
    whose order the floats leave open: the clusters within the first ``k`` are ordered exactly
    (:func:`_exact_order`, the same uniforms refined). A cluster's items all come before the next cluster's.
    """
    n = scores.shape[0]
    offsets = (scores.max() - scores).astype(np.float64)  # exact: spread < 2^52
    if k == 1:
        return np.array([_race(offsets, np.ones(n, dtype=np.int64), scale, "zcdp", source)], dtype=np.int64)
    words = np.asarray(source.random_raw(n), dtype=np.uint64)
    k_lo, k_hi = _key_bounds(offsets, np.ones(n, dtype=np.int64), words, scale, "zcdp")
    order = np.argsort(k_lo, kind="stable")
    # a cluster ends before position p + 1 when every key up to p is certainly below the lower bound at p + 1
    ends = np.maximum.accumulate(k_hi[order])[:-1] < k_lo[order][1:]
    if ends[: k].all():  # the usual case: the first k keys are certainly in this order, and below the rest
        return order[:k].astype(np.int64)
    starts = [0, *(np.flatnonzero(ends) + 1).tolist(), n]
    for start, stop in itertools.pairwise(starts):  # clusters: few, and rarely more than one item
        if start >= k:
            break
        if stop - start > 1:
            members = order[start:stop]
            exact = _exact_order(
                [int(offsets[i]) for i in members],
                [1] * (stop - start),
                [int(words[i]) for i in members],
                scale,
                "zcdp",
                source,
                min(stop, k) - start,
            )
            order[start : start + len(exact)] = members[exact]
    return order[:k].astype(np.int64)


def _fast_top_k(
    scores: np.ndarray, k: int, scale: float, measure: str, gen: np.random.Generator
) -> np.ndarray:
    """Peeling over *levels* (equal scores): each round picks a level exactly, then a uniform item in it.

    Items with equal scores are exchangeable under both distributions, so a round can first select the level
    of the chosen item (a race between levels, :func:`_race`) and then the item uniformly among the level's
    remaining items (``Generator.integers``: Lemire's exact method on raw CSPRNG words). The exponential
    mechanism with ``scale > 0`` draws all its rounds in one shot instead (:func:`_gumbel_top_k`).
    """
    if measure == "zcdp" and scale > 0.0:
        return _gumbel_top_k(scores, k, scale, gen.bit_generator)
    n = scores.shape[0]
    order = np.argsort(-scores, kind="stable")  # descending; levels become contiguous slices
    ranked = scores[order]
    new_level = np.empty(n, dtype=bool)
    new_level[0] = True
    np.not_equal(ranked[1:], ranked[:-1], out=new_level[1:])
    starts = np.flatnonzero(new_level)  # first position of each level in `order`
    remaining = np.empty_like(starts)  # items of each level not yet selected
    remaining[:-1] = starts[1:] - starts[:-1]
    remaining[-1] = n - starts[-1]
    # d_j = v_max - v_j >= 0, exact in float64 (spread < 2^52); the race uses a_j = d_j / scale
    offsets = (ranked[0] - ranked[starts]).astype(np.float64)
    source = gen.bit_generator
    out = np.empty(k, dtype=np.int64)
    for step in range(k):
        # the true top when scale = 0 (ties inside the level are broken uniformly below)
        level = 0 if scale == 0.0 else _race(offsets, remaining, scale, measure, source)
        size = int(remaining[level])
        first = int(starts[level])
        pick = first + int(gen.integers(size))
        order[first], order[pick] = order[pick], order[first]  # partial Fisher-Yates inside the level
        out[step] = order[first]
        if size == 1:  # level exhausted: drop it (levels stay in descending order)
            starts = np.delete(starts, level)
            remaining = np.delete(remaining, level)
            offsets = np.delete(offsets, level)
        else:
            starts[level] += 1
            remaining[level] -= 1
    return out


def _race(
    offsets: NDArray[np.int64],
    counts: NDArray[np.int64],
    scale: float,
    measure: str,
    source: np.random.BitGenerator,
    words: NDArray[np.uint64] | None = None,
) -> int:
    r"""The winning level of one round: :math:`\arg\min_j K_j`, exactly.

    For level ``j`` with offset :math:`d_j` (score below the top) and :math:`c_j` remaining items,
    :math:`K_j = d_j/\text{scale} + g_j(V_j)` with :math:`V_j` uniform on [0, 1) and

    - Gumbel / exponential mechanism: :math:`g_j(V) = \log(-\log V) - \log c_j`
      (:math:`e^{K_j} = E_j e^{d_j/\text{scale}} / c_j`, the first arrival of :math:`c_j` exponential clocks
      of rate :math:`e^{-d_j/\text{scale}}`);
    - permute-and-flip: :math:`g_j(V) = \log(1 - V^{1/c_j})` (:math:`e^{K_j}` is the first time, in a uniform
      random visiting order, at which one of the level's items is accepted, divided by its acceptance
      probability :math:`e^{-d_j/\text{scale}}`).

    Each :math:`K_j` is decreasing in :math:`V_j`. The float64 pass bounds every :math:`K_j` on the 52-bit
    cell of its uniform; if one level is certainly the minimum it wins, otherwise the contenders go to
    :func:`_exact_race` with the same uniforms. ``words``: the round's ``len(offsets)`` words, when the caller
    drew them (the compiled user peeling, for a round its float pass left open); by default drawn here.
    """
    m = offsets.shape[0]
    if m == 1:
        return 0
    if words is None:
        words = np.asarray(source.random_raw(m), dtype=np.uint64)
    k_lo, k_hi = _key_bounds(offsets, counts, words, scale, measure)
    contenders = np.flatnonzero(k_lo <= k_hi.min())
    if contenders.shape[0] == 1:
        return int(contenders[0])
    winner = _exact_race(
        [int(offsets[i]) for i in contenders],
        [int(counts[i]) for i in contenders],
        [int(words[i]) for i in contenders],
        scale,
        measure,
        source,
    )
    return int(contenders[winner])


def _key_bounds(
    offsets: np.ndarray, counts: NDArray[np.int64], words: NDArray[np.uint64], scale: float, measure: str
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Float64 lower and upper bounds of every key :math:`K_j` of :func:`_race` on the 52-bit cell of its uniform
    (the top 52 bits of ``words[j]``), widened by the proven margin (``docs/top_k.md`` §5.2): the real key lies
    between them. Infinite ends give ±∞ bounds."""
    m = offsets.shape[0]
    cell = (words >> np.uint64(64 - _CELL_BITS)).astype(np.float64)
    # both ends of every cell in one array: [top ends | bottom ends]; exact (cell < 2^52)
    ends = np.concatenate((cell + 1.0, cell))
    ends *= 2.0**-_CELL_BITS
    a = offsets / scale
    a_both = np.concatenate((np.minimum(a, _A_CLAMP), a))  # clamped only where a lower bound is formed
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        g = _g(ends, np.concatenate((counts, counts)).astype(np.float64), measure)
        margin = np.abs(g)
        margin += a_both
        margin += 4.0
        margin *= _MARGIN
        g += a_both
        margin[:m] *= -1.0  # K is decreasing in V: lower bound at the cell's top end, upper at its bottom
        g += margin
    k_lo = g[:m]
    k_hi = g[m:]
    k_lo[np.isnan(k_lo)] = -np.inf
    k_hi[np.isnan(k_hi)] = np.inf
    return k_lo, k_hi


def _g(v: NDArray[np.float64], c: NDArray[np.int64], measure: str) -> NDArray[np.float64]:
    """The level's key minus its offset, in float64 (see :func:`_race`); ``v`` may be 0 or 1."""
    g: NDArray[np.float64] = np.log(-np.log(v)) - np.log(c) if measure == "zcdp" else np.log(-np.expm1(np.log(v) / c))
    return g


# --------------------------------------------------------------------------------------------------------------
# method="fast": exact fallback


def _exact_race(
    offsets: list[int], counts: list[int], words: list[int], scale: float, measure: str, source: _RawSource
) -> int:
    r"""Exact :math:`\arg\min_j K_j` among contenders, with lazily refined uniforms and interval arithmetic
    (:func:`_exact_order`'s first)."""
    return _exact_order(offsets, counts, words, scale, measure, source, 1)[0]


def _exact_order(
    offsets: list[int], counts: list[int], words: list[int], scale: float, measure: str, source: _RawSource, first: int
) -> list[int]:
    r"""The ``first`` contenders of smallest key :math:`K_j`, in increasing order of key, exactly.

    Uniform ``j`` is known to lie in the cell :math:`[r_j 2^{-n}, (r_j + 1) 2^{-n})`, starting from the 64
    bits of the word the fast path read (whose top 52 bits it used). :math:`K_j` is bounded on the cell with
    ``mpmath`` interval arithmetic (outward rounding) at ``n + 64`` bits. When one contender's upper bound is
    below every other's lower bound, it is the minimum: it is taken and the others race on; otherwise every
    remaining cell is refined by 64 fresh bits (each uniform stays one real number: its cell only narrows). The
    keys are continuous and distinct with probability 1, so this ends with probability 1 (after one refinement,
    typically).
    """
    ctx = MPIntervalContext()  # a private context: no global mpmath state is touched
    alive = list(range(len(offsets)))
    cells = dict(enumerate(words))
    bits = 64
    order: list[int] = []
    while len(order) < first:
        if len(alive) == 1:
            order.append(alive.pop())
            continue
        ctx.prec = bits + 64
        scale_iv = ctx.mpf(scale)  # exact: a float has 53 bits
        lows, highs = {}, {}
        for j in alive:
            a = ctx.mpf(offsets[j]) / scale_iv
            lows[j] = (a + _g_exact(ctx, cells[j] + 1, bits, counts[j], measure)).a
            highs[j] = (a + _g_exact(ctx, cells[j], bits, counts[j], measure)).b
        best = min(alive, key=highs.__getitem__)
        if all(highs[best] < lows[j] for j in alive if j != best):
            order.append(best)
            alive.remove(best)
            continue
        for j in alive:
            cells[j] = (cells[j] << 64) | int(source.random_raw())
        bits += 64
    return order


def _g_exact(ctx: MPIntervalContext, numerator: int, bits: int, count: int, measure: str) -> ivmpf:
    r"""An interval containing :math:`g(V)` at :math:`V = \text{numerator} \cdot 2^{-\text{bits}}` exactly."""
    if numerator == 0:
        return ctx.inf if measure == "zcdp" else ctx.mpf(0)  # -log 0 = inf; 1 - 0^(1/c) = 1
    if numerator == 1 << bits:
        return -ctx.inf  # V = 1: the key is -inf
    v = ctx.mpf(numerator) / ctx.mpf(2) ** bits  # exact at precision bits + 64
    if measure == "zcdp":
        return ctx.log(-ctx.log(v)) - ctx.log(ctx.mpf(count))
    return ctx.log(-ctx.expm1(ctx.log(v) / ctx.mpf(count)))

