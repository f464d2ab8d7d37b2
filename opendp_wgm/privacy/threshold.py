r"""The WGM's weight lattice and its threshold δ.

The release path works on an integer lattice :math:`2^{-k}\mathbb{Z}` with :math:`k` = ``LATTICE_BITS``:
each kept item's weight :math:`1/\sqrt{t}` is rounded *down* to the lattice (so a user's vector keeps
:math:`\ell_2 \le 1`), exact integer sums are formed, and discrete Gaussian noise
:math:`\mathcal{N}_{\mathbb{Z}}(0, (\sigma 2^k)^2)` is added in lattice units. This module holds the lattice
(its constants, the weights and the limit on Δ0) and :math:`\delta_T`, the probability that the threshold lets
through an item only one neighbour holds, with its block bound (``docs/privacy.md`` §3).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from opendp_wgm._validation import _check_d_in, _check_int, _check_positive, _check_probability, _check_real
from opendp_wgm.privacy._normal import _normal_cdf, _normal_quantile_guess, _upper_tail_bound

__all__ = [
    "LATTICE_BITS",
    "MAX_CONTRIBUTIONS",
    "MAX_SCALE",
    "check_max_contributions",
    "lattice_weights",
    "release_probability",
    "users_for_probability",
    "wgm_threshold_delta",
]

#: Bits of the weight lattice 2^-k Z on which histograms are summed and noised.
LATTICE_BITS = 20
_LATTICE_UNIT = 2.0**-LATTICE_BITS

#: Largest Δ0 (``max_contributions``) of the WGM's maps and release: 2^20. Beyond 2^(2k) = 2^40 a user's
#: weight floor(2^k/√t) would reach 0; 2^20 keeps every weight ≥ 2^10 lattice steps, the per-Δ0 arrays at
#: 8 MB and every calibration under a few seconds (``docs/privacy.md`` §3, "Cost of the maps").
MAX_CONTRIBUTIONS = 2**LATTICE_BITS

#: Largest noise scale σ of the WGM: 2^k, so that σ in lattice units stays within the sampler's exact range
#: (0, 2^40] (``docs/noise.md`` §1).
MAX_SCALE = 2.0**LATTICE_BITS

#: Up to this Δ0 the maximum over t of δ_T is taken over every t; above it, over geometric blocks of t
#: (a sound upper bound, ``docs/privacy.md`` §3).
_EXACT_MAX_T = 2**12
_BLOCK_RATIO = 1.0 + 2.0**-12


def check_max_contributions(max_contributions: object) -> int:
    """Δ0: an integer in [1, :data:`MAX_CONTRIBUTIONS`]."""
    return _check_int("max_contributions", max_contributions, minimum=1, maximum=MAX_CONTRIBUTIONS)

# Relative inflation of every float-evaluated delta: covers the C library's erfc (a few ulp), the rounding of
# the gap (relative <= 1.6e-13, docs/privacy.md "Floating point in the maps") and log1p/expm1; no threshold moves.
_DELTA_INFLATION = 1.0 + 1e-12


def lattice_weights(max_contributions: int) -> np.ndarray:
    r"""Per-item weight of a user who keeps ``t`` items, in lattice units, for ``t = 1..max_contributions``.

    .. math:: w_{\mathrm{lat}}(t) = \lfloor 2^k / \sqrt{t} \rfloor = \mathrm{isqrt}(\lfloor 4^k / t \rfloor)

    computed in exact integer arithmetic (``floor(sqrt(floor(x))) == floor(sqrt(x))``), so
    :math:`t \cdot w_{\mathrm{lat}}(t)^2 \le 4^k`: the user's vector has :math:`\ell_2 \le 1` exactly.

    Returns
    -------
    numpy.ndarray
        int64 array whose entry ``t - 1`` is :math:`w_{\mathrm{lat}}(t)`.
    """
    max_contributions = check_max_contributions(max_contributions)
    return _lattice_weights(max_contributions)


@lru_cache(maxsize=64)
def _lattice_weights(max_contributions: int) -> np.ndarray:
    max_contributions = check_max_contributions(max_contributions)  # also guards the histogram's callers
    weights = _weights_at(np.arange(1, max_contributions + 1, dtype=np.int64))
    weights.setflags(write=False)
    return weights


def _weights_at(t: NDArray[np.int64]) -> NDArray[np.int64]:
    r"""``isqrt(4^k // t)`` for an int64 array ``t`` of values in [1, 2^40], vectorised and exact.

    The float square root is within one of the answer; the two integer corrections make it exact:
    the result w is the unique integer with :math:`t w^2 \le 4^k < t (w+1)^2` (all products < 2^62).
    """
    four_k = np.int64(1) << np.int64(2 * LATTICE_BITS)
    w: NDArray[np.int64] = np.floor(np.sqrt(four_k / t.astype(float))).astype(np.int64)
    w -= (t * w * w > four_k).astype(np.int64)
    w += (t * (w + 1) * (w + 1) <= four_k).astype(np.int64)
    return w


def _threshold_on_lattice(threshold: float) -> float:
    """Largest lattice point <= threshold: the release rule ``noisy > threshold`` is ``noisy_lat > floor(T 2^k)``."""
    return math.floor(threshold * 2.0**LATTICE_BITS) * _LATTICE_UNIT


def _release_probability_bound(weight: np.ndarray | float, scale: float, threshold: float) -> np.ndarray:
    r"""Upper bound on P[w + Z > T] for an item of weight ``w`` (a lattice point) that only one side holds.

    For :math:`Z \sim \mathcal{N}_{\mathbb{Z}}(0, s^2)` in lattice units and integer :math:`m \ge 1`,
    :math:`P[Z \ge m] \le P[\mathcal{N}(0, s^2) \ge m - 1]` (``docs/privacy.md``, Lemma 2). The item is
    released iff :math:`Z \ge F + 1 - w` with :math:`F = \lfloor T 2^k \rfloor`, hence the bound
    :math:`\bar\Phi((F 2^{-k} - w) / \sigma)`, capped at 1 where :math:`F < w`.
    """
    with np.errstate(over="ignore"):  # a tiny σ sends the gap to ±inf: q = 0 or 1, as it should
        gap = (_threshold_on_lattice(threshold) - np.asarray(weight, dtype=float)) / scale
    return np.where(gap >= 0, _upper_tail_bound(np.maximum(gap, 0.0)), 1.0)


def wgm_threshold_delta(
    *, scale: float, threshold: float, max_contributions: int, d_in: int = 1
) -> float:
    r"""The probability that WGM releases an item that only the larger of two neighbours holds.

    For ``d_in = 1`` this is exact for the worst case: the extra user keeps ``t`` unique items of weight
    :math:`w(t) = \lfloor 2^k/\sqrt t \rfloor 2^{-k}` each,

    .. math:: \delta_T = \max_{t = 1..\Delta_0} 1 - (1 - q(w(t)))^t, \qquad
              q(w) = \bar\Phi\big((\lfloor T 2^k \rfloor 2^{-k} - w)/\sigma\big).

    For ``d_in = k > 1`` (a group of users) it is the sound but looser group bound of
    ``docs/privacy.md`` §3: new items have weights :math:`w_x \le k`, at most :math:`k\Delta_0` of them, with
    :math:`\sum_x w_x \le k\sqrt{\Delta_0}`; by convexity of :math:`q` below :math:`T`,
    :math:`\delta \le k\Delta_0\, q(0) + \sqrt{\Delta_0}\,(q(k) - q(0))` (and :math:`k\Delta_0 q(k)` when
    :math:`k > T`), capped at 1.

    Parameters
    ----------
    scale
        The noise scale :math:`\sigma` in weight units.
    threshold
        The release threshold :math:`T` (an item is released when its noisy weight exceeds it).
    max_contributions
        :math:`\Delta_0`, the most distinct items kept per user.
    d_in
        Number of users added or removed.
    """
    d_in, scale, threshold, max_contributions = _check_threshold_arguments(d_in, scale, threshold, max_contributions)
    return _threshold_delta(scale, threshold, max_contributions, d_in)


def _check_threshold_arguments(
    d_in: object, scale: object, threshold: object, max_contributions: object
) -> tuple[int, float, float, int]:
    """``d_in``, σ > 0, T and Δ0 checked: the arguments of :func:`wgm_threshold_delta`, which the WGM's privacy
    loss (:func:`opendp_wgm.privacy.gaussian.wgm_privacy_loss`) takes too."""
    return (
        _check_d_in(d_in),
        _check_positive("scale", scale),
        _check_real("threshold", threshold),
        check_max_contributions(max_contributions),
    )


@lru_cache(maxsize=4096)
def _threshold_delta(scale: float, threshold: float, max_contributions: int, d_in: int) -> float:
    if d_in == 0:
        return 0.0
    if d_in == 1:
        first, last = _t_blocks(max_contributions)
        # block [first, last]: w(t) is nonincreasing in t and 1 - (1 - q)^t increases in q and t, so
        # 1 - (1 - q(w(first)))^last bounds every t of the block (exact where first == last)
        q = _release_probability_bound(_weights_at(first) * _LATTICE_UNIT, scale, threshold)
        # 1 - (1 - q)^t without cancellation
        with np.errstate(divide="ignore"):  # q = 1 gives log1p(-1) = -inf, hence delta = 1
            delta = float(np.max(-np.expm1(last * np.log1p(-np.minimum(q, 1.0)))))
    else:
        k, n_items = float(d_in), d_in * max_contributions
        q0, qk = (float(q) for q in _release_probability_bound(np.array([0.0, k]), scale, threshold))
        if k <= _threshold_on_lattice(threshold):
            delta = n_items * q0 + math.sqrt(max_contributions) * (qk - q0)
        else:
            delta = n_items * qk
    return min(1.0, delta * _DELTA_INFLATION)


@lru_cache(maxsize=64)
def _t_blocks(max_contributions: int) -> tuple[np.ndarray, np.ndarray]:
    """First and last t of the blocks covering 1..Δ0: singletons up to 2^12, then geometric blocks of ratio
    1 + 2^-12 (about 4100·ln(Δ0/2^12) blocks: 23,000 at Δ0 = 2^20)."""
    exact = np.arange(1, min(max_contributions, _EXACT_MAX_T) + 1, dtype=np.int64)
    if max_contributions <= _EXACT_MAX_T:
        first = last = exact
    else:
        n_blocks = math.ceil(math.log(max_contributions / _EXACT_MAX_T) / math.log(_BLOCK_RATIO))
        edges = np.unique(np.floor(_EXACT_MAX_T * _BLOCK_RATIO ** np.arange(n_blocks + 1)).astype(np.int64))
        edges = np.append(edges[edges < max_contributions], max_contributions)
        first = np.concatenate([exact, edges[:-1] + 1])  # blocks (edges[i], edges[i + 1]]
        last = np.concatenate([exact, edges[1:]])
    for array in (first, last):
        array.setflags(write=False)
    return first, last




# --------------------------------------------------------------------------------------------------------
# the release curve: how many users an item needs to be released (a utility statement, not a privacy map)
# --------------------------------------------------------------------------------------------------------
def _check_curve(scale: object, threshold: object, items_per_user: object) -> tuple[float, float, int]:
    return (
        _check_positive("scale", scale),
        _check_real("threshold", threshold),
        _check_int("items_per_user", items_per_user, minimum=1, maximum=MAX_CONTRIBUTIONS),
    )


def _release_probability_lat(
    weights_lat: NDArray[np.int64] | NDArray[np.float64], scale: float, threshold: float
) -> NDArray[np.float64]:
    """P[S + Z > F] for lattice sums S (units 2^-k): what :func:`release_above_threshold
    <opendp_wgm.engines.polars.release_above_threshold>` releases an item of sum S with, by
    :func:`release_probability`'s continuity-corrected normal tail (the benchmarks' expected missing mass)."""
    unit = 2.0**LATTICE_BITS
    gap = weights_lat.astype(np.float64) - (math.floor(threshold * unit) + 0.5)  # S - F - 1/2, lattice units
    result: NDArray[np.float64] = _normal_cdf(gap / (scale * unit))
    return result


def _release_probability(
    users: NDArray[np.int64], scale: float, threshold: float, items_per_user: int
) -> NDArray[np.float64]:
    weight = int(_weights_at(np.array([items_per_user], dtype=np.int64))[0])  # w_lat(t), exact
    return _release_probability_lat(users.astype(np.float64) * weight, scale, threshold)  # no int64 overflow


def release_probability(
    users: int | NDArray[np.integer] | list[int], *, scale: float, threshold: float, items_per_user: int = 1
) -> NDArray[np.float64]:
    r"""The probability that the WGM releases an item held by ``c`` users who each keep ``items_per_user`` items.

    Each such user gives the item the lattice weight :math:`w = \lfloor 2^k/\sqrt t\rfloor` (``t`` =
    ``items_per_user``; :func:`lattice_weights`), so its sum is :math:`S = c\,w` exactly and it is released iff
    :math:`S + Z > F` with :math:`F = \lfloor T 2^k \rfloor` and :math:`Z \sim \mathcal N_{\mathbb Z}(0, s^2)`,
    :math:`s = \sigma 2^k` (lattice units). The probability :math:`P[Z \ge F + 1 - S]` is evaluated as the
    normal tail with continuity correction, :math:`\Phi((S - F - 1/2)/s)`: by the midpoint rule and Poisson
    summation its absolute error is below :math:`1/(6 s^2) + 4 e^{-2\pi^2 s^2}`, i.e. below :math:`10^{-11}`
    for every :math:`\sigma \ge 2^{-4}` (the calibrated σ is far larger). Vectorised over ``users``.

    ``items_per_user = 1`` (weight 1 each) is the best case: the fewest users an item needs. A user who holds
    Δ0 or more items keeps Δ0 of them and gives each weight :math:`1/\sqrt{\Delta_0}`: ``items_per_user = Δ0``
    is the worst case. Users holding more than Δ0 items keep the item only with probability Δ0/(their count);
    this curve counts the users who *kept* it.

    Parameters
    ----------
    users
        ``c``: the number of users holding the item, an integer >= 0 or an array of them.
    scale, threshold
        σ and T of the WGM (or of one DP-SIPS round).
    items_per_user
        ``t`` in [1, 2^20]: the items each of those users keeps.

    Returns
    -------
    numpy.ndarray
        float64 probabilities, one per entry of ``users``, nondecreasing in ``c``.

    Examples
    --------
    >>> p = release_probability([1, 20, 40], scale=4.0, threshold=20.0)
    >>> [round(float(x), 3) for x in p]
    [0.0, 0.5, 1.0]
    """
    scale, threshold, items_per_user = _check_curve(scale, threshold, items_per_user)
    counts = np.atleast_1d(np.asarray(users))
    if counts.dtype.kind not in "iu" or (counts < 0).any():
        msg = f"`users` must be integers >= 0 (found {users!r})"
        raise ValueError(msg)
    return _release_probability(counts.astype(np.int64), scale, threshold, items_per_user)


def users_for_probability(
    probability: float, *, scale: float, threshold: float, items_per_user: int = 1
) -> int:
    """The fewest users ``c`` (>= 1) for which :func:`release_probability` reaches ``probability``.

    Solved from the normal quantile and checked on the two integers around it (the curve is nondecreasing).

    Examples
    --------
    >>> users_for_probability(0.5, scale=4.0, threshold=20.0), users_for_probability(0.95, scale=4.0, threshold=20.0)
    (21, 27)
    """
    probability = _check_probability("probability", probability)
    scale, threshold, items_per_user = _check_curve(scale, threshold, items_per_user)
    unit = 2.0**LATTICE_BITS
    weight = int(_weights_at(np.array([items_per_user], dtype=np.int64))[0])
    guess = (math.floor(threshold * unit) + 0.5 + scale * unit * _normal_quantile_guess(probability)) / weight
    c = max(1, math.ceil(guess) - 1)
    while _release_probability(np.array([c], dtype=np.int64), scale, threshold, items_per_user)[0] < probability:
        c += 1  # one or two steps: the guess is within rounding of the answer
    while c > 1 and (
        _release_probability(np.array([c - 1], dtype=np.int64), scale, threshold, items_per_user)[0] >= probability
    ):
        c -= 1
    return c
