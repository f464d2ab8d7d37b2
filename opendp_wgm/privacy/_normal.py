r"""The standard normal tails the WGM's maps and release curve need, from the C library's ``erfc`` (no SciPy).

:func:`_upper_tail_bound` is :math:`\bar\Phi(g) = \tfrac12\operatorname{erfc}(g/\sqrt2)` evaluated so that its
only error *below* the exact value is ``math.erfc``'s own (a few ulp; ``docs/privacy.md``, "Floating point in
the maps"): the argument :math:`g/\sqrt2` is rounded toward zero, and erfc decreases. :func:`_normal_cdf` is the
curve's :math:`\Phi` (a utility statement, no bound needed); :func:`_normal_quantile_guess` is only a start for
a search that checks its answer (:func:`users_for_probability
<opendp_wgm.privacy.threshold.users_for_probability>`), so its accuracy never matters for correctness.

SciPy's ``ndtr`` is 0.1 ms per 10^4 points and this 0.7 ms, but importing ``scipy.special`` costs 0.2 s of every
release from the command (``docs/performance.md``, "Start-up").
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

#: 1/√2 rounded down: ``math.sqrt(0.5)`` is correctly rounded, one step toward zero is below the exact value.
_SQRT_HALF_DOWN = math.nextafter(math.sqrt(0.5), 0.0)


def _erfc(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """``math.erfc`` (the C library's) over a float array, elementwise."""
    flat = np.ascontiguousarray(x, dtype=np.float64).ravel()
    return np.fromiter(map(math.erfc, flat.tolist()), dtype=np.float64, count=flat.size).reshape(np.shape(x))


def _upper_tail_bound(gap: NDArray[np.float64]) -> NDArray[np.float64]:
    r""":math:`\bar\Phi(g) = P[\mathcal N(0, 1) > g]` for ``gap`` :math:`g \ge 0` (or ``+inf``), never below the
    exact value by more than ``math.erfc``'s relative error.

    The argument is ``nextafter(fl(g · c), 0)`` with ``c`` = 1/√2 rounded down: ``fl(g·c)`` exceeds the exact
    product by at most half an ulp, so one step toward zero is at most :math:`g/\sqrt2`; erfc decreases, so
    erfc at it is at least erfc at :math:`g/\sqrt2`. Halving is exact (down to the subnormals, where
    :math:`\bar\Phi < 2^{-1022}`).
    """
    scaled = np.nextafter(np.asarray(gap, dtype=np.float64) * _SQRT_HALF_DOWN, 0.0)
    return 0.5 * _erfc(scaled)


def _normal_cdf(z: NDArray[np.float64]) -> NDArray[np.float64]:
    r""":math:`\Phi(z) = \tfrac12\operatorname{erfc}(-z/\sqrt2)`, accurate in both tails (erfc of a negative
    argument is ``2 - erfc(|x|)``, with no cancellation below 1/2)."""
    return 0.5 * _erfc(-np.asarray(z, dtype=np.float64) * math.sqrt(0.5))


# Acklam's rational approximation of the normal quantile (relative error < 1.2e-9 on (0, 1)).
_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
      -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
      -1.328068155288572e01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
      4.374664141464968e00, 2.938163982698783e00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
_P_LOW = 0.02425


def _polynomial(coefficients: tuple[float, ...], x: float) -> float:
    value = 0.0
    for c in coefficients:
        value = value * x + c
    return value


def _normal_quantile_guess(p: float) -> float:
    r"""An approximation of :math:`\Phi^{-1}(p)` for ``p`` in (0, 1) (Acklam's, relative error < 1.2e-9), then
    one Halley step on :func:`math.erfc`; ``±inf`` at 0 and 1. Only a starting point: callers verify."""
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    if p < _P_LOW or p > 1.0 - _P_LOW:
        q = math.sqrt(-2.0 * math.log(min(p, 1.0 - p)))
        x = _polynomial(_C, q) / (_polynomial(_D, q) * q + 1.0)
        x = x if p < _P_LOW else -x
    else:
        q = p - 0.5
        r = q * q
        x = _polynomial(_A, r) * q / (_polynomial(_B, r) * r + 1.0)
    error = 0.5 * math.erfc(-x * math.sqrt(0.5)) - p
    step = error * math.sqrt(2.0 * math.pi) * math.exp(0.5 * x * x)
    refined = x - step / (1.0 + 0.5 * x * step)
    return refined if math.isfinite(refined) else x
