"""The baselines' calibrations: limited-domain top-k (Durfee & Rogers 2019), Policy Greedy, OpenDP's key release.

Two of them are the documented exceptions to :func:`~opendp_wgm.privacy.search.smallest_passing`:
:func:`limited_domain_local_epsilon` reproduces the reference implementation's bisection bit for bit (an oracle
value of the paper), and :func:`calibrate_key_release` bisects OpenDP's own (costly) map to a relative 1e-5.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import opendp.prelude as dp

from opendp_wgm._validation import _check_int, _check_positive, _check_probability
from opendp_wgm.privacy.budget import Budget
from opendp_wgm.privacy.peeling import limited_domain_epsilon
from opendp_wgm.privacy.search import smallest_passing

__all__ = [
    "LimitedDomainCalibration",
    "calibrate_key_release",
    "calibrate_limited_domain",
    "calibrate_policy_greedy",
    "limited_domain_local_epsilon",
]


def _increasing_bisection(function: Callable[[float], float], target: float, tol: float) -> float:
    """Bisection for an increasing f: the largest v with f(v) < target, erring low (returns lo), as the paper's
    reference implementation does. The one search not on ``dp.binary_search``: it reproduces the reference's
    ε' bit for bit (an oracle value), which a search to float resolution would not."""
    lo, hi = 0.0, 1.0
    while function(hi) < target:
        lo, hi = hi, 2.0 * hi
        if hi > 1e300:
            raise ValueError("bisection failed: the function never reaches the target")
    while hi - lo > tol:
        mid = (lo + hi) / 2.0
        if function(mid) < target:
            lo = mid
        else:
            hi = mid
    return lo


def limited_domain_local_epsilon(epsilon: float, delta: float, k: int, *, tol: float = 1e-6) -> float:
    r"""The per-selection ε' of limited-domain top-k: the largest ε' with :math:`E(\varepsilon') \le \varepsilon`.

    Found with the reference's increasing bisection on [0, 1] (doubling the bracket while needed), tolerance
    ``tol``, returning the lower end, so the reference implementation's result is reproduced bit for bit (
    ε = 1.1, δ' = 0.05, k = 10 gives 0.22107791900634766) and :math:`E(\varepsilon') < \varepsilon`.

    Parameters
    ----------
    epsilon
        Total ε > 0.
    delta
        δ' ∈ (0, 1), the part of δ that pays for composition (the reference uses δ/2).
    k
        Number of selections, ≥ 1.
    """
    epsilon = _check_positive("epsilon", epsilon)
    delta = _check_probability("delta", delta)
    k = _check_int("k", k, minimum=1)
    tol = _check_positive("tol", tol)
    return _increasing_bisection(lambda e: limited_domain_epsilon(e, delta, k), epsilon, tol)


@dataclass(frozen=True)
class LimitedDomainCalibration:
    """The calibrated parameters of limited-domain top-k (:func:`opendp_wgm.make_limited_domain_top_k`).

    Attributes
    ----------
    scale
        The Gumbel scale s; the ε' actually used is 1/s, at most the reference's ε'.
    epsilon
        :math:`E(1/s)`, the (ε, δ)-DP ε of one user (at most the budget's ε).
    delta_composition, delta_bottom
        The halves of δ: δ' for the composition and :math:`\\delta_\\perp` for the threshold.
    """

    scale: float
    epsilon: float
    delta_composition: float
    delta_bottom: float


def calibrate_limited_domain(*, epsilon: float, delta: float, k: int) -> LimitedDomainCalibration:
    """The Gumbel scale of limited-domain top-k for an (ε, δ) budget: δ/2 pays for composition, the rest for the
    threshold, and ε' = :func:`limited_domain_local_epsilon` (the reference's bisection)."""
    delta_composition = delta / 2.0
    delta_bottom = delta - delta_composition
    local = limited_domain_local_epsilon(epsilon, delta_composition, k)
    scale = 1.0 / local * (1.0 + 1e-12)  # the Gumbel scale; the ε' actually used is 1/scale <= local
    eps_1 = limited_domain_epsilon(1.0 / scale, delta_composition, k) * (1.0 + 1e-12)
    if eps_1 > epsilon:  # pragma: no cover - a bug guard (the bisection keeps a 1e-6 margin)
        raise AssertionError(f"limited-domain calibration gave ε = {eps_1} > {epsilon}")
    return LimitedDomainCalibration(scale, eps_1, delta_composition, delta_bottom)


def calibrate_policy_greedy(
    budget: Budget, *, lattice_bits: int, threshold_delta: Callable[[float, int], float]
) -> tuple[float, int]:
    r"""Policy Greedy's Laplace scale λ and threshold for an (ε, δ) budget: λ = 1/ε (rounded so that
    1/λ ≤ ε) and the smallest lattice threshold :math:`F \ge 2^b` (in units :math:`2^{-b}`) with
    ``threshold_delta(λ, F)`` ≤ δ (its map at one user, nonincreasing in F)."""
    scale = 1.0 / budget.value
    while 1.0 / scale > budget.value:  # float rounding: never report more than ε
        scale = math.nextafter(scale, math.inf)
    floor_t = smallest_passing(
        lambda f: threshold_delta(scale, f) <= budget.delta, lower=1 << lattice_bits, parameter="threshold",
        budget=budget,
    )
    return scale, floor_t


def calibrate_key_release(
    budget: Budget,
    *,
    noise_delta: float,
    threshold_delta: Callable[[float, int], float],
    loss: Callable[[float, int], tuple[float, float]],
) -> tuple[float, int]:
    """The smallest global scale of OpenDP's key release (to a relative 1e-5), and for it the smallest integer
    threshold > 1, whose map at d_in = 1 meets ``budget``.

    ``threshold_delta(scale, threshold)`` is the δ of OpenDP's threshold alone (it gets ``budget.delta −
    noise_delta``: all of δ under zCDP), ``loss(scale, threshold)`` the measurement's map at one user; either
    may raise where OpenDP refuses the parameters, which then do not fit.

    The second exception to :func:`smallest_passing`: every evaluation builds OpenDP measurements (~10 ms), so
    the scale is bisected to a relative 1e-5 (about 20 evaluations, where a search to one ulp needs 60 and took
    8 times as long), and the threshold is searched from the previous answer.
    """
    threshold_budget = budget.delta - noise_delta
    hint = [2]

    def threshold_for(scale: float) -> int:
        """Smallest integer threshold > 1 whose δ fits, by exponential search from the last answer."""
        lo, hi = max(1, hint[0] - 1), hint[0]
        if threshold_delta(scale, hi) <= threshold_budget:
            step = 1
            while lo > 1 and threshold_delta(scale, lo) <= threshold_budget:  # the answer is lower
                hi, lo = lo, max(1, lo - step)
                step *= 2
        else:
            step = 1
            while threshold_delta(scale, hi) > threshold_budget:
                lo, hi = hi, hi + step
                step *= 2
                if hi > 2**31:
                    msg = f"calibration failed: no finite `threshold` satisfies the budget {budget.description}"
                    raise ValueError(msg)
        while hi - lo > 1:  # invariant: lo fails (or is 1, which OpenDP refuses), hi fits
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if threshold_delta(scale, mid) <= threshold_budget else (mid, hi)
        hint[0] = hi
        return hi

    def fits(scale: float) -> bool:
        try:
            d_out = loss(scale, threshold_for(scale))
        except (dp.OpenDPException, ValueError):
            return False
        return float(d_out[0]) <= budget.value and float(d_out[1]) <= budget.delta

    lo, hi = 0.0, 1.0
    while not fits(hi):
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            msg = f"calibration failed: no finite `scale` satisfies the budget {budget.description}"
            raise ValueError(msg)
    while hi - lo > 1e-5 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi, threshold_for(hi)
