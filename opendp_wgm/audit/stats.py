r"""The statistics of an audit: Clopper–Pearson intervals and the privacy bounds they imply.

For an event E, write :math:`P_1 = \Pr[M(D) \in E]` and :math:`P_0 = \Pr[M(D') \in E]` for neighbours D, D'.
(ε, δ)-DP requires :math:`P_1 \le e^{\varepsilon} P_0 + \delta` in both directions and for the complement of
E as well. With a lower confidence bound :math:`L_1 \le P_1` and an upper one :math:`U_0 \ge P_0`,

.. math::
    \delta \ \ge\ L_1 - e^{\varepsilon} U_0, \qquad
    \varepsilon \ \ge\ \ln\frac{L_1 - \delta}{U_0} \quad (L_1 > \delta).

Approximate (ρ, δ)-zCDP implies :math:`(\varepsilon, \delta + \delta_\rho(\varepsilon))`-DP for every
ε ≥ 0, with the conversion :math:`\delta_\rho` of Canonne, Kamath and Steinke (2020, Prop. 12; the one OpenDP
uses), so the δ of an approximate-zCDP claim is at least
:math:`\max_{\varepsilon} L_1 - e^{\varepsilon} U_0 - \delta_\rho(\varepsilon)`. All of these hold
simultaneously for every ε once the intervals cover, which is what the family-wise level controls
(``docs/audit.md``).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

FloatArray = NDArray[np.float64]

__all__ = [
    "clopper_pearson",
    "delta_lower_bound",
    "epsilon_lower_bound",
    "flag_power",
    "zcdp_delta",
    "zcdp_delta_lower_bound",
]

#: Orders α > 1 at which the zCDP → (ε, δ) conversion is minimised: any α gives a valid (larger) δ.
_ORDERS = 1.0 + np.geomspace(1e-4, 1e4, 4001)
#: ε values at which the δ lower bound of an approximate-zCDP claim is maximised (any ε is a valid test).
_EPSILONS = np.concatenate([np.linspace(0.0, 2.0, 401), np.linspace(2.0, 60.0, 2901)[1:]])


def clopper_pearson(successes: ArrayLike, trials: ArrayLike, alpha: float) -> tuple[FloatArray, FloatArray]:
    """Two-sided Clopper–Pearson interval for a binomial proportion, at confidence ``1 - alpha``.

    Each tail has probability at most ``alpha / 2``; the interval is exact (conservative) for every
    sample size. Vectorised over ``successes`` and ``trials``.

    Examples
    --------
    >>> lo, hi = clopper_pearson(0, 100, 0.05)
    >>> float(lo), round(float(hi), 4)
    (0.0, 0.0362)
    """
    k = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
        hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)


def zcdp_delta(rho: float, epsilon: ArrayLike) -> FloatArray:
    r"""The δ of ρ-zCDP at ε: :math:`\inf_{\alpha>1} \frac{e^{(\alpha-1)(\alpha\rho-\varepsilon)}}{\alpha-1}
    (1-1/\alpha)^{\alpha}`, capped at 1 (Canonne, Kamath, Steinke 2020, Prop. 12).

    The infimum is taken over a fixed grid of orders, so the value is an upper bound on the exact one (a
    lenient claim: an audit against it can only flag less). ``rho = 0`` gives δ = 0.

    Examples
    --------
    >>> round(float(zcdp_delta(0.5, 3.0)), 4)
    0.0051
    """
    shape = np.shape(epsilon)
    eps = np.atleast_1d(np.asarray(epsilon, dtype=float)).ravel()
    if rho == 0:
        return np.zeros(shape)
    a = _ORDERS[:, None]
    log_delta = (a - 1) * (a * rho - eps[None, :]) - np.log(a - 1) + a * np.log1p(-1 / a)
    delta: FloatArray = np.minimum(1.0, np.exp(log_delta.min(axis=0))).reshape(shape)
    return delta


def delta_lower_bound(p1_low: ArrayLike, p0_high: ArrayLike, epsilon: float) -> FloatArray:
    """The δ that (ε, δ)-DP needs when ``P1 >= p1_low`` and ``P0 <= p0_high``: ``max(0, p1_low − e^ε p0_high)``."""
    return np.maximum(0.0, np.asarray(p1_low) - math.exp(epsilon) * np.asarray(p0_high))


def epsilon_lower_bound(p1_low: ArrayLike, p0_high: ArrayLike, delta: float) -> FloatArray:
    """The ε that (ε, δ)-DP needs when ``P1 >= p1_low`` and ``P0 <= p0_high``: ``ln((p1_low − δ)/p0_high)``,
    0 when ``p1_low <= δ`` or the ratio is below 1, ``inf`` when ``p0_high`` is 0."""
    p1, p0 = np.broadcast_arrays(np.asarray(p1_low, float), np.asarray(p0_high, float))
    gap = p1 - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(gap > 0, np.log(gap / p0), 0.0)
    return np.maximum(0.0, eps)


def zcdp_delta_lower_bound(p1_low: ArrayLike, p0_high: ArrayLike, rho: float) -> FloatArray:
    r"""The δ that approximate (ρ, δ)-zCDP needs: :math:`\max(0, \max_\varepsilon L_1 - e^{\varepsilon} U_0 -
    \delta_\rho(\varepsilon))`, over a fixed grid of ε (each ε is a valid bound, so the maximum is too)."""
    p1 = np.atleast_1d(np.asarray(p1_low, float))[:, None]
    p0 = np.atleast_1d(np.asarray(p0_high, float))[:, None]
    bound = p1 - np.exp(_EPSILONS)[None, :] * p0 - zcdp_delta(rho, _EPSILONS)[None, :]
    lower: FloatArray = np.maximum(0.0, bound.max(axis=1))
    return lower


def flag_power(p1: float, claimed_delta: float, rho: float, *, trials: int, events: int, alpha: float = 1e-3) -> float:
    r"""The probability that an audit flags an approximate (ρ, ``claimed_delta``)-zCDP claim through one event of
    probability ``p1`` on D and 0 on D′ (a differing user's unique items), with ``trials`` releases per side,
    ``events`` (pair, event) rows and family-wise level ``alpha`` (``docs/audit.md``, "Power").

    Exact: the binomial tail of the smallest count of hits on D whose lower bound on δ exceeds the claim
    (D′ has 0 hits: its interval is fixed). 0 when no count flags.
    """
    k = np.arange(trials + 1)
    low, _ = clopper_pearson(k, trials, alpha / (2 * events))
    _, high = clopper_pearson(0, trials, alpha / (2 * events))
    flags = zcdp_delta_lower_bound(low, np.full(low.shape, high), rho) > claimed_delta
    if not flags.any():
        return 0.0
    return float(stats.binom.sf(k[flags].min() - 1, trials, p1))
