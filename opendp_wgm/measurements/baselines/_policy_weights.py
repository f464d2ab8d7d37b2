"""The policy baselines' weights: the per-user update rules (pure functions of one user's lattice weights) and
the sequential loops that apply them over the users (Python with NumPy inside, or compiled for the ℓ2 descent)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import cast

import numpy as np
import polars as pl

from opendp_wgm._spaces import _value_key
from opendp_wgm.measurements.baselines._policy_csr import _jit, _UserItems
from opendp_wgm.privacy.threshold import LATTICE_BITS

#: One unit of weight on the lattice 2^-k Z, and its square (a user's squared-ℓ2 budget in lattice units).
_UNIT = 1 << LATTICE_BITS
_UNIT_SQ = 1 << (2 * LATTICE_BITS)

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


def _l2_kernel() -> _L2Kernel | None:
    """The compiled ℓ2 loop, or ``None`` without Numba. Its results are identical to :func:`_l2_steps`
    (``_policy_jit`` says why; the tests compare both)."""
    module = _jit()
    return None if module is None else cast("_L2Kernel", module.l2_policy_run)


def _positive_histogram(data: _UserItems, weights: np.ndarray, item: str) -> pl.DataFrame:
    """The items with positive weight (only these are ever noised or released) and their lattice weight."""
    positive = np.flatnonzero(weights > 0)
    histogram = pl.DataFrame({item: data.decode(positive), "weight_lat": weights[positive]})
    # by item value, not by code: the noise is drawn row by row, and codes are only a relabelling
    return histogram.sort(_value_key(item, histogram.schema[item]))


def _cap_on_lattice(cap: float) -> int:
    return math.floor(cap * _UNIT)
