r"""The Gaussian part of the WGM's privacy: the analytic Gaussian δ, ρ, the lattice's ε slack, and the WGM's map.

Pure functions of the mechanism's parameters; the derivations are in ``docs/privacy.md`` §2–4, and each
function states the rounding direction it relies on. The maps account for the lattice of
:mod:`opendp_wgm.privacy.threshold` exactly; they differ from the idealised continuous formulas by one lattice
step (:math:`2^{-20} \approx 10^{-6}`) in the threshold.
"""

from __future__ import annotations

import math
import sys
import threading
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpmath import MPContext

from opendp_wgm._validation import (
    _check_d_in,
    _check_positive,
    _check_probability,
    _check_real,
)
from opendp_wgm.privacy.threshold import (
    _LATTICE_UNIT,
    _check_threshold_arguments,
    _threshold_delta,
)

__all__ = [
    "analytic_gaussian_delta",
    "lattice_epsilon_slack",
    "rho_to_epsilon",
    "wgm_privacy_loss",
    "wgm_rho",
]


def analytic_gaussian_delta(epsilon: float, scale: float, sensitivity: float = 1.0) -> float:
    r"""The exact privacy profile of the (continuous) Gaussian mechanism (Balle & Wang 2018, Thm 8), rounded up.

    .. math:: \delta(\varepsilon) = \Phi\Big(\frac{\Delta}{2\sigma} - \frac{\varepsilon\sigma}{\Delta}\Big)
              - e^{\varepsilon}\,\Phi\Big(-\frac{\Delta}{2\sigma} - \frac{\varepsilon\sigma}{\Delta}\Big)

    The two terms nearly cancel at large σ and small ε (in float64 the difference lost up to 2e-8 of its
    value at ε = 1e-4, σ = 1e5, and no log-space rewriting removes that: the cancellation is in the
    exponents). It is therefore evaluated in ``mpmath`` from the exact float inputs, at a precision raised
    until at least 64 bits survive the cancellation, and rounded *up* to a float with an explicit bound on
    the arbitrary-precision error (``docs/privacy.md`` §3, "Floating point in the maps"). Large ε cannot
    overflow. Cost: ~0.2 ms.

    Parameters
    ----------
    epsilon
        ε, any real: the profile is the hockey-stick divergence :math:`H_{e^\varepsilon}` for every ε, and
        exceeds :math:`\delta(0)` at ε < 0, where the (ε, δ) maps evaluate it when the lattice slack exceeds ε.
    scale
        σ > 0.
    sensitivity
        ℓ2 sensitivity Δ ≥ 0 (0 gives δ = 0).
    """
    epsilon = _check_real("epsilon", epsilon)
    scale = _check_positive("scale", scale)
    sensitivity = _check_real("sensitivity", sensitivity, minimum=0.0)
    if sensitivity == 0.0:
        return 0.0
    return _gaussian_delta_up(epsilon, scale, sensitivity)


#: Beyond this |argument| the normal cdf is 0 or 1 to far more than float precision (and mpmath's erfc fails).
_HUGE_ARGUMENT = 1e100


#: One mpmath context per thread, private to this module (no global mpmath state is read or changed).
_CONTEXTS = threading.local()


def _private_context() -> MPContext:
    """This thread's private mpmath context. Building one wraps its ~200 functions (0.5 ms): a fresh one per
    evaluation was 40 ms of a calibration's 60 evaluations. Its only state is the precision, which every use
    sets first."""
    ctx: MPContext | None = getattr(_CONTEXTS, "ctx", None)
    if ctx is None:
        from mpmath import MPContext

        ctx = _CONTEXTS.ctx = MPContext()
    return ctx


@lru_cache(maxsize=4096)
def _gaussian_delta_up(epsilon: float, scale: float, sensitivity: float) -> float:
    """:func:`analytic_gaussian_delta` on checked inputs: an upper bound within 2^-50 relative of the value."""
    from mpmath.libmp import round_ceiling, to_float

    ctx = _private_context()
    prec = 128
    while True:
        ctx.prec = prec
        eps, sigma, sens = ctx.mpf(epsilon), ctx.mpf(scale), ctx.mpf(sensitivity)  # exact: floats are dyadic
        a, b = sens / (2 * sigma), eps * sigma / sens
        # mpmath's erfc fails on arguments beyond ~1e150; there δ ≤ Φ(a - b) decides (all three are sound)
        if a - b > _HUGE_ARGUMENT:
            return 1.0
        if a - b < -_HUGE_ARGUMENT:
            return math.ulp(0.0)  # δ ≤ Φ(a - b) < 2^-1074
        head = ctx.ncdf(a - b)
        if a + b > _HUGE_ARGUMENT:
            return min(1.0, float(to_float(head._mpf_, rnd=round_ceiling)))
        delta = head - ctx.exp(eps) * ctx.ncdf(-a - b)
        # each term carries a relative error far below 2^-(prec-8), and the second is at most the first
        error = head * ctx.ldexp(1, 8 - prec)
        if delta > 0 and error <= delta * ctx.ldexp(1, -56):
            return min(1.0, float(to_float((delta + error)._mpf_, rnd=round_ceiling)))
        if prec >= 1 << 14:  # more than ~4900 bits cancelled: keep the first term, itself an upper bound
            return min(1.0, float(to_float(head._mpf_, rnd=round_ceiling)))
        prec *= 2


def wgm_rho(d_in: int, scale: float) -> float:
    r"""zCDP of the noise on items both neighbours hold: :math:`\rho = d_{in}^2 / (2\sigma^2)`.

    A group of ``d_in`` users moves the (lattice-rounded-down) histogram by at most ``d_in`` in ℓ2, and the
    multivariate discrete Gaussian with integer shifts is :math:`\Delta_2^2/(2\sigma^2)`-zCDP
    (Canonne, Kamath & Steinke 2020, Prop. 5 with additivity over coordinates).
    """
    d_in = _check_d_in(d_in)
    scale = _check_positive("scale", scale)
    return _over_squared_scale(d_in**2 / 2.0, scale)


def _over_squared_scale(numerator: float, scale: float) -> float:
    """``numerator / scale**2`` for ``numerator >= 0``, and ∞ when σ² underflows below the normal floats
    (σ < 1.5e-154: the quotient exceeds 1e308 anyway), instead of a ZeroDivisionError or a subnormal."""
    square = scale * scale
    if square < sys.float_info.min:
        return math.inf if numerator > 0 else 0.0
    return numerator / square  # overflows to inf, soundly


def _up(value: float) -> float:
    """``value`` moved one float up: a correctly rounded sum (``+`` of two floats, or ``math.fsum``) becomes an
    upper bound (a sum of 0 is exact: every term is 0)."""
    return math.nextafter(value, math.inf) if value > 0.0 else value


#: Relative margin by which the lattice slack is raised before it shifts ε: its float error (√Δ0, σ², the
#: quotient) is below 2 ulp (2^-51 relative), 2^-50 covers it.
_SLACK_MARGIN = 1.0 + 2.0**-50


def _noise_delta(eps_out: float, scale: float, d_in: int, max_contributions: int) -> float:
    r"""The Gaussian term of the (ε, δ) maps: :math:`\delta_{\mathcal N}(\varepsilon' - a;\ \sigma, \Delta = d_{in})`.

    Evaluated as ``docs/privacy.md`` §3 proves it, also where the lattice slack :math:`a` exceeds
    :math:`\varepsilon'` (the argument is then negative and δ above :math:`\delta_{\mathcal N}(0)`), at an
    argument rounded down (δ_N decreases in it), so the result is an upper bound. ``d_in >= 1``.
    """
    slack = lattice_epsilon_slack(d_in, scale, max_contributions) * _SLACK_MARGIN
    argument = math.nextafter(eps_out - slack, -math.inf)
    if not math.isfinite(argument):  # σ² underflowed: the slack is infinite
        return 1.0
    return _gaussian_delta_up(argument, scale, float(d_in))


def lattice_epsilon_slack(d_in: int, scale: float, max_contributions: int) -> float:
    r"""ε lost by comparing the *discrete* Gaussian's privacy profile with the continuous one.

    Coordinate-wise :math:`Z \preceq N + 2` (lattice units; ``docs/privacy.md`` Lemma 3), so the privacy loss
    :math:`\langle v, Z\rangle/\sigma_{lat}^2 + \|v\|_2^2/(2\sigma_{lat}^2)` is dominated by the continuous one
    shifted by :math:`2\|v\|_1/\sigma_{lat}^2 \le 2 d_{in}\sqrt{\Delta_0}\,/(\sigma^2 2^k)`.
    """
    return _over_squared_scale(2.0 * d_in * math.sqrt(max_contributions) * _LATTICE_UNIT, scale)


def wgm_privacy_loss(
    d_in: int,
    *,
    scale: float,
    threshold: float,
    max_contributions: int,
    epsilon: float | None = None,
) -> tuple[float, float]:
    r"""The WGM's privacy loss for ``d_in`` users added or removed.

    Without ``epsilon``: approximate zCDP :math:`(\rho, \delta_T)` with :math:`\rho = d_{in}^2/(2\sigma^2)`.
    With ``epsilon`` (ε at ``d_in = 1``): the :math:`(\varepsilon', \delta)`-DP pair at
    :math:`\varepsilon' = d_{in}\,\varepsilon`,

    .. math:: \delta = \delta_{\mathcal{N}}(\varepsilon' - a;\ \sigma, \Delta = d_{in}) + \delta_T(d_{in}),

    where :math:`\delta_{\mathcal N}` is :func:`analytic_gaussian_delta` and :math:`a` the lattice slack
    (< 1e-6 at the paper's parameters), evaluated at :math:`\varepsilon' - a` even when that is negative
    (no clamp at 0: at σ = 0.7, Δ0 = 2^20, ε = 0 the clamp would under-report δ by 9.5e-4). The sum is
    rounded up.
    """
    d_in, scale, threshold, max_contributions = _check_threshold_arguments(d_in, scale, threshold, max_contributions)
    delta_t = _threshold_delta(scale, threshold, max_contributions, d_in)
    if epsilon is None:
        return wgm_rho(d_in, scale), delta_t
    epsilon = _check_real("epsilon", epsilon, minimum=0.0)
    if d_in == 0:
        return 0.0, 0.0
    eps_out = d_in * epsilon
    return eps_out, min(1.0, _up(_noise_delta(eps_out, scale, d_in, max_contributions) + delta_t))



def rho_to_epsilon(rho: float, delta: float) -> float:
    r"""The (ε, δ)-DP implied by ρ-zCDP with the standard conversion (Bun & Steinke 2016, Prop. 1.3).

    .. math:: \varepsilon = \rho + 2\sqrt{\rho \ln(1/\delta)}

    This is the conversion the paper's reference implementation uses for peeling; OpenDP's own
    ``make_zCDP_to_approxDP`` is tighter.
    """
    rho = _check_real("rho", rho, minimum=0.0)
    delta = _check_probability("delta", delta)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))

