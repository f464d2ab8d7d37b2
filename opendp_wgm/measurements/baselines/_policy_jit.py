r"""Compiled (Numba) per-user loop of Policy Gaussian's ℓ2 descent; imported only if Numba is installed.

The loop over users is sequential by nature; in NumPy each user costs a dozen array calls (~20 µs), here a few
hundred nanoseconds. The result must be **identical** to the NumPy step of
:func:`opendp_wgm.measurements.baselines.policy._l2_candidates`, which computes :math:`z^2 = \sum_x d_x^2` with
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

__all__ = ["l2_policy_run"]

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
