r"""Privacy accounting for the Weighted Gaussian Mechanism (WGM).

Pure functions of the mechanism's parameters: the numbers behind every privacy map of the package, and the
calibration of (scale, threshold) from a budget by searching on those maps. The derivations are in
``docs/privacy.md``; each function states the rounding direction it relies on.

The release path works on an integer lattice :math:`2^{-k}\mathbb{Z}` with :math:`k` = ``LATTICE_BITS``:
each kept item's weight :math:`1/\sqrt{t}` is rounded *down* to the lattice (so a user's vector keeps
:math:`\ell_2 \le 1`), exact integer sums are formed, and discrete Gaussian noise
:math:`\mathcal{N}_{\mathbb{Z}}(0, (\sigma 2^k)^2)` is added in lattice units. The maps below account for
that lattice exactly; they differ from the idealised continuous formulas by one lattice step
(:math:`2^{-20} \approx 10^{-6}`) in the threshold.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import log_ndtr, ndtr

from opendp_wgm._validation import (
    _check_d_in,
    _check_int,
    _check_positive,
    _check_probability,
    _check_real,
)

__all__ = [
    "LATTICE_BITS",
    "WGMCalibration",
    "analytic_gaussian_delta",
    "calibrate_wgm",
    "lattice_weights",
    "peeling_epsilon",
    "rho_to_epsilon",
    "wgm_privacy_loss",
    "wgm_rho",
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


def _check_max_contributions(max_contributions: object) -> int:
    """Δ0: an integer in [1, :data:`MAX_CONTRIBUTIONS`]."""
    return _check_int("max_contributions", max_contributions, minimum=1, maximum=MAX_CONTRIBUTIONS)

# Relative inflation of every float-evaluated delta. scipy's ndtr / log_ndtr are accurate to a few ulp
# (~1e-15 relative); 1e-12 covers them with a factor >100 and changes no threshold visibly.
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
    max_contributions = _check_max_contributions(max_contributions)
    return _lattice_weights(max_contributions)


@lru_cache(maxsize=64)
def _lattice_weights(max_contributions: int) -> np.ndarray:
    max_contributions = _check_max_contributions(max_contributions)  # also guards the histogram's callers
    weights = _weights_at(np.arange(1, max_contributions + 1, dtype=np.int64))
    weights.setflags(write=False)
    return weights


def _weights_at(t: np.ndarray) -> np.ndarray:
    r"""``isqrt(4^k // t)`` for an int64 array ``t`` of values in [1, 2^40], vectorised and exact.

    The float square root is within one of the answer; the two integer corrections make it exact:
    the result w is the unique integer with :math:`t w^2 \le 4^k < t (w+1)^2` (all products < 2^62).
    """
    four_k = np.int64(1) << np.int64(2 * LATTICE_BITS)
    w = np.floor(np.sqrt(four_k / t.astype(float))).astype(np.int64)
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
    return np.where(gap >= 0, ndtr(-gap), 1.0)


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
    scale = _check_positive("scale", scale)
    threshold = _check_real("threshold", threshold)
    max_contributions = _check_max_contributions(max_contributions)
    d_in = _check_d_in(d_in)
    return _threshold_delta(scale, threshold, max_contributions, d_in)


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
        ε ≥ 0.
    scale
        σ > 0.
    sensitivity
        ℓ2 sensitivity Δ ≥ 0 (0 gives δ = 0).
    """
    epsilon = _check_real("epsilon", epsilon, minimum=0.0)
    scale = _check_positive("scale", scale)
    sensitivity = _check_real("sensitivity", sensitivity, minimum=0.0)
    if sensitivity == 0.0:
        return 0.0
    return _gaussian_delta_up(epsilon, scale, sensitivity)


#: Beyond this |argument| the normal cdf is 0 or 1 to far more than float precision (and mpmath's erfc fails).
_HUGE_ARGUMENT = 1e100


@lru_cache(maxsize=4096)
def _gaussian_delta_up(epsilon: float, scale: float, sensitivity: float) -> float:
    """:func:`analytic_gaussian_delta` on checked inputs: an upper bound within 2^-50 relative of the value."""
    from mpmath import MPContext
    from mpmath.libmp import round_ceiling, to_float

    ctx = MPContext()  # private context: no global mpmath state
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
            return min(1.0, to_float(head._mpf_, rnd=round_ceiling))
        delta = head - ctx.exp(eps) * ctx.ncdf(-a - b)
        # each term carries a relative error far below 2^-(prec-8), and the second is at most the first
        error = head * ctx.ldexp(1, 8 - prec)
        if delta > 0 and error <= delta * ctx.ldexp(1, -56):
            return min(1.0, to_float((delta + error)._mpf_, rnd=round_ceiling))
        if prec >= 1 << 14:  # more than ~4900 bits cancelled: keep the first term, itself an upper bound
            return min(1.0, to_float(head._mpf_, rnd=round_ceiling))
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


def _lattice_epsilon_slack(d_in: int, scale: float, max_contributions: int) -> float:
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
    (< 1e-6 at the paper's parameters).
    """
    d_in = _check_d_in(d_in)
    scale = _check_positive("scale", scale)
    threshold = _check_real("threshold", threshold)
    max_contributions = _check_max_contributions(max_contributions)
    delta_t = _threshold_delta(scale, threshold, max_contributions, d_in)
    if epsilon is None:
        return wgm_rho(d_in, scale), delta_t
    epsilon = _check_real("epsilon", epsilon, minimum=0.0)
    if d_in == 0:
        return 0.0, 0.0
    eps_out = d_in * epsilon
    eps_noise = max(0.0, eps_out - _lattice_epsilon_slack(d_in, scale, max_contributions))
    delta = analytic_gaussian_delta(eps_noise, scale, float(d_in)) + delta_t
    return eps_out, min(1.0, delta)


@dataclass(frozen=True)
class WGMCalibration:
    """The WGM parameters calibrated to a budget, and the budget they were calibrated to.

    Attributes
    ----------
    scale, threshold
        σ and T to pass to :func:`opendp_wgm.make_wgm`.
    max_contributions
        Δ0.
    epsilon, rho, delta
        The budget for one user (exactly one of ``epsilon`` and ``rho`` is set).
    noise_delta
        The part of δ spent on the Gaussian noise (0 under zCDP); the rest pays for the threshold.
    """

    scale: float
    threshold: float
    max_contributions: int
    delta: float
    epsilon: float | None = None
    rho: float | None = None
    noise_delta: float = 0.0


def _check_epsilon_or_rho(epsilon: float | None, rho: float | None) -> None:
    """A budget is given by exactly one of ε and ρ."""
    given = [name for name, v in (("epsilon", epsilon), ("rho", rho)) if v is not None]
    if len(given) != 1:
        msg = f"pass exactly one of `epsilon` and `rho` (got {given or 'neither'})"
        raise ValueError(msg)


def _prepare_budget(
    epsilon: float | None, rho: float | None, delta: float
) -> tuple[float | None, float | None, float]:
    """Normalise the alternative ways of giving a budget: exactly one of ε and ρ, plus δ ∈ (0, 1)."""
    _check_epsilon_or_rho(epsilon, rho)
    delta = _check_probability("delta", delta)
    if epsilon is not None:
        return _check_positive("epsilon", epsilon), None, delta
    return None, _check_positive("rho", rho), delta


class _BudgetTooSmall(ValueError):
    """A budget whose noise scale would exceed :data:`MAX_SCALE`, with the smallest ε or ρ that fits.

    Two-stage calibrations catch it and restate the bound for the total budget the user gave
    (:func:`_restated`).
    """

    def __init__(self, name: str, value: float, minimum: float, context: str) -> None:
        self.name, self.value, self.minimum = name, value, minimum
        super().__init__(_too_small_message(name, value, minimum, context))


def _too_small_message(name: str, value: float, minimum: float, context: str) -> str:
    from decimal import Decimal

    exponent = math.floor(math.log10(minimum)) - 2  # three significant digits, rounded up
    shown = float(Decimal(math.ceil(minimum / 10.0**exponent)).scaleb(exponent))
    return (
        f"`{name}` must be >= {shown:.3g} at {context} (found {value!r}): a smaller budget needs a noise scale "
        f"above the WGM's limit 2**{LATTICE_BITS}"
    )


def _restated(error: _BudgetTooSmall, total: float, split: float, context: str) -> ValueError:
    """``error`` (raised for a stage given ``split`` of the budget) in terms of the ``total`` the user gave."""
    return ValueError(_too_small_message(error.name, total, error.minimum / split, context))


def _check_scale_fits(scale: float, epsilon: float | None, rho: float | None, delta: float, fraction: float) -> None:
    """Raise :class:`_BudgetTooSmall`, in terms of the budget, when the calibrated σ exceeds :data:`MAX_SCALE`."""
    if scale <= MAX_SCALE:
        return
    if epsilon is not None:
        minimum = _smallest_passing(lambda e: analytic_gaussian_delta(e, MAX_SCALE) <= fraction * delta, 0.0)
        raise _BudgetTooSmall("epsilon", epsilon, minimum, f"`delta` = {delta!r}")
    raise _BudgetTooSmall("rho", rho, wgm_rho(1, MAX_SCALE), "any `delta`")


def _smallest_passing(predicate, lower: float) -> float:
    """Smallest x >= lower with predicate(x) True, for a predicate monotone increasing in x."""
    import opendp.prelude as dp

    upper = max(1.0, lower)
    while not predicate(upper):
        upper *= 2.0
        if upper > 1e300:
            raise ValueError("calibration failed: no finite parameter satisfies the budget")
    return float(dp.binary_search(predicate, bounds=(lower, upper)))


def calibrate_wgm(
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    noise_delta_fraction: float = 0.5,
) -> WGMCalibration:
    r"""Calibrate the WGM's (scale, threshold) to a budget, by searching on the privacy maps.

    - ``epsilon`` given, (ε, δ)-DP: σ is the smallest scale whose analytic-Gaussian δ at ε is at most
      ``noise_delta_fraction · δ`` (the paper's reference uses 1/2); T is the smallest threshold whose
      :math:`\delta_T` fits in what is left. At ε = 1, δ = 1e-5, Δ0 = 100 this gives σ = 3.88414,
      T = 20.7898 (the paper's calibration with an exact σ).
    - ``rho`` given, approximate zCDP (ρ, δ): σ is the smallest scale with :math:`1/(2\sigma^2) \le \rho` and T
      the smallest threshold with :math:`\delta_T \le \delta`.

    Both results are then checked against the map itself, so the returned parameters always pass
    ``measurement.check(1, budget)``.

    Parameters
    ----------
    max_contributions
        Δ0 ≥ 1.
    delta
        δ ∈ (0, 1).
    epsilon, rho
        Exactly one of them, > 0.
    noise_delta_fraction
        Share of δ given to the Gaussian noise under (ε, δ)-DP, in (0, 1).
    """
    max_contributions = _check_max_contributions(max_contributions)
    epsilon, rho, delta = _prepare_budget(epsilon, rho, delta)
    fraction = _check_probability("noise_delta_fraction", noise_delta_fraction)

    if epsilon is not None:
        scale = _smallest_passing(
            lambda s: analytic_gaussian_delta(epsilon, s) <= fraction * delta, 1e-12
        )
        _check_scale_fits(scale, epsilon, rho, delta, fraction)
        scale = max(scale, 1.0 / MAX_SCALE)  # the (ε, δ) map needs a lattice step of noise; more only helps
        noise_delta = analytic_gaussian_delta(
            max(0.0, epsilon - _lattice_epsilon_slack(1, scale, max_contributions)), scale
        )
    else:
        scale = _smallest_passing(lambda s: wgm_rho(1, s) <= rho, 1e-12)
        _check_scale_fits(scale, epsilon, rho, delta, fraction)
        noise_delta = 0.0
    threshold_budget = delta - noise_delta
    threshold = _smallest_passing(
        lambda t: _threshold_delta(scale, t, max_contributions, 1) <= threshold_budget, 0.0
    )
    d_out = wgm_privacy_loss(
        1, scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=epsilon
    )
    budget = (epsilon if epsilon is not None else rho, delta)
    if not (d_out[0] <= budget[0] and d_out[1] <= budget[1]):  # pragma: no cover - a bug guard
        raise AssertionError(f"calibration produced {d_out}, over the budget {budget}")
    return WGMCalibration(
        scale=scale,
        threshold=threshold,
        max_contributions=max_contributions,
        delta=delta,
        epsilon=epsilon,
        rho=rho,
        noise_delta=noise_delta,
    )


def rho_to_epsilon(rho: float, delta: float) -> float:
    r"""The (ε, δ)-DP implied by ρ-zCDP with the standard conversion (Bun & Steinke 2016, Prop. 1.3).

    .. math:: \varepsilon = \rho + 2\sqrt{\rho \ln(1/\delta)}

    This is the conversion the paper's reference implementation uses for peeling; OpenDP's own
    ``make_zCDP_to_approxDP`` is tighter.
    """
    rho = _check_real("rho", rho, minimum=0.0)
    delta = _check_probability("delta", delta)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def peeling_epsilon(epsilon: float, delta: float, k: int) -> float:
    r"""Per-step ε' of ``k`` adaptive ε'-bounded-range exponential-mechanism steps that are (ε, δ)-DP.

    Each step is ε'-BR, hence :math:`\varepsilon'^2/8`-zCDP; ``k`` steps compose to :math:`k\varepsilon'^2/8`,
    converted with :func:`rho_to_epsilon`. Solving for ε' (the reference implementation's ``em_epsilon_cdp``):

    .. math:: \varepsilon' = \max\Big(\frac{\varepsilon}{k},\
              \sqrt{\tfrac{8\ln(1/\delta) + 8\varepsilon}{k}} - \sqrt{\tfrac{8\ln(1/\delta)}{k}}\Big)

    (the first term is basic composition). The result is rounded down by a relative 1e-12 so that the
    composed guarantee never exceeds ε in floating point.

    Parameters
    ----------
    epsilon
        Total ε > 0 of the ``k`` steps.
    delta
        δ ∈ [0, 1) of the conversion; δ = 0 gives basic composition, ε/k.
    k
        Number of steps, ≥ 1.
    """
    epsilon = _check_positive("epsilon", epsilon)
    delta = _check_real("delta", delta, minimum=0.0, maximum=1.0, maximum_inclusive=False)
    k = _check_int("k", k, minimum=1)
    if delta == 0.0:
        return epsilon / k * (1.0 - 1e-12)
    log_term = 8.0 * math.log(1.0 / delta)
    zcdp = math.sqrt((log_term + 8.0 * epsilon) / k) - math.sqrt(log_term / k)
    return max(epsilon / k, zcdp) * (1.0 - 1e-12)


# ==============================================================================================================
# Top-k: peeling (exponential mechanism / permute-and-flip), WGM-then-top-k, limited domain (Durfee & Rogers)
# ==============================================================================================================

#: Relative upward rounding applied to every float-evaluated loss of the top-k maps below (a handful of
#: roundings of at most 2^-53 each; 2^-50 covers them).
_LOSS_INFLATION = 1.0 + 2.0**-50


def peeling_rho(d_in: int, *, k: int, scale: float) -> float:
    r"""zCDP of ``k`` exponential-mechanism (Gumbel) peeling rounds on monotone counts.

    Each round selects with :math:`\Pr[i] \propto e^{x_i/s}`; with monotone ℓ∞ sensitivity ``d_in`` it is
    :math:`(d_{in}/s)`-bounded-range, hence :math:`(d_{in}/s)^2/8`-zCDP (Cesar & Rogers 2021), and ``k``
    rounds compose to

    .. math:: \rho = \frac{k\, d_{in}^2}{8 s^2}

    (OpenDP's ``make_noisy_top_k`` map under ``zero_concentrated_divergence``). ``scale = 0`` gives ∞ for
    ``d_in > 0``. Rounded up.
    """
    return _peeling_loss_up(lambda d, k, s: k * (d / s) ** 2 / 8.0, d_in, k, scale)


def peeling_pure_epsilon(d_in: int, *, k: int, scale: float) -> float:
    r"""Pure ε of ``k`` peeling rounds on monotone counts: :math:`\varepsilon = k\, d_{in} / s`.

    Holds for both samplers (exponential mechanism and permute-and-flip): with monotone scores each round is
    :math:`(d_{in}/s)`-DP, with no factor 2 (McSherry & Talwar 2007; McKenna & Sheldon 2020). This is
    OpenDP's ``make_noisy_top_k`` map under ``max_divergence``. Rounded up.
    """
    return _peeling_loss_up(lambda d, k, s: k * d / s, d_in, k, scale)


def _peeling_loss_up(formula, d_in: int, k: int, scale: float) -> float:
    """``formula(d_in, k, scale)`` rounded up, after the checks and the cases it does not cover: 0 without users
    or rounds, ∞ without noise."""
    d_in = _check_d_in(d_in)
    k = _check_int("k", k, minimum=0)
    scale = _check_real("scale", scale, minimum=0.0)
    if d_in == 0 or k == 0:
        return 0.0
    if scale == 0.0:
        return math.inf
    try:
        return formula(d_in, k, scale) * _LOSS_INFLATION
    except OverflowError:  # (d/s)**2 beyond the floats at tiny s: the loss is above 1.8e308
        return math.inf


def peeling_approx_epsilon(d_in: int, *, k: int, scale: float, delta: float) -> float:
    r"""The ε at which ``k`` exponential-mechanism peeling rounds are (ε, δ)-DP (the reference's accounting).

    .. math:: \varepsilon(\delta) = \min\big(k\,d_{in}/s,\ \rho + 2\sqrt{\rho\ln(1/\delta)}\big),
              \qquad \rho = \frac{k\,d_{in}^2}{8 s^2}

    i.e. the better of basic composition and the zCDP conversion of :func:`peeling_epsilon`: with
    :math:`s = 1/\varepsilon'` and ε' = :func:`peeling_epsilon` (ε, δ, k) this returns at most ε.
    Rounded up.
    """
    delta = _check_probability("delta", delta)
    rho = peeling_rho(d_in, k=k, scale=scale)
    pure = peeling_pure_epsilon(d_in, k=k, scale=scale)
    if rho == 0.0:
        return 0.0
    if math.isinf(rho):
        return math.inf
    return min(pure, (rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))) * _LOSS_INFLATION)


def limited_domain_epsilon(local_epsilon: float, delta: float, k: int) -> float:
    r"""Total ε of ``k`` ε'-DP, ε'-bounded-range selections at slack δ (Durfee & Rogers 2019, arXiv 1905.04273).

    .. math::
        E(\varepsilon') = \min\Big\{k\varepsilon',\
            \frac{k\varepsilon'(e^{\varepsilon'} - 1)}{e^{\varepsilon'} + 1} + \varepsilon'\sqrt{2k\ln(1/\delta)},\
            \frac{k\varepsilon'^2}{2} + \varepsilon'\sqrt{\tfrac12 k\ln(1/\delta)}\Big\}

    (basic composition; advanced composition of ε'-DP steps (Kairouz et al. form); bounded-range composition,
    conservative in its first term). Increasing in ε'. Not rounded (the oracle values of §12 are exact
    floats); :func:`limited_domain_local_epsilon` keeps a relative margin instead.

    Parameters
    ----------
    local_epsilon
        ε' ≥ 0 per selection.
    delta
        δ' ∈ (0, 1), the composition's slack.
    k
        Number of selections, ≥ 1.
    """
    eps = _check_real("local_epsilon", local_epsilon, minimum=0.0)
    delta = _check_probability("delta", delta)
    k = _check_int("k", k, minimum=1)
    log_term = math.log(1.0 / delta)
    basic = k * eps
    # (e^x - 1)/(e^x + 1) = tanh(x/2), which does not overflow
    advanced = k * eps * math.tanh(eps / 2.0) + eps * math.sqrt(2.0 * k * log_term)
    bounded_range = k * eps**2 / 2.0 + eps * math.sqrt(0.5 * k * log_term)
    return min(basic, advanced, bounded_range)


def _increasing_bisection(function, target: float, tol: float) -> float:
    """Bisection for an increasing f: the largest v with f(v) < target, erring low (returns lo), as the paper's
    reference implementation does."""
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


def limited_domain_h_bottom(
    next_count: int | float,
    *,
    k_bar: int,
    max_contributions: int | None,
    delta: float,
    local_epsilon: float,
) -> float:
    r"""The threshold score :math:`h_\perp` of limited-domain top-k (Durfee & Rogers 2019, Algorithm 1).

    .. math:: h_\perp = c_{(\bar k + 1)} + 1 + \frac{\ln(\min(\Delta_0, \bar k)/\delta)}{\varepsilon'}

    where :math:`c_{(\bar k+1)}` (``next_count``) is the (k̄+1)-th largest count, 0 when there are at most k̄
    items, and :math:`\Delta_0 = \infty` when ``max_contributions`` is ``None``. Evaluated in float (see
    :func:`limited_domain_threshold_offset` for the conservatively rounded offset the mechanism uses).
    """
    return float(next_count) + 1.0 + _h_bottom_log_term(k_bar, max_contributions, delta, local_epsilon)


def _h_bottom_log_term(k_bar: int, max_contributions: int | None, delta: float, local_epsilon: float) -> float:
    k_bar = _check_int("k_bar", k_bar, minimum=1)
    if max_contributions is not None:
        max_contributions = _check_max_contributions(max_contributions)
    delta = _check_probability("delta", delta)
    local_epsilon = _check_positive("local_epsilon", local_epsilon)
    width = k_bar if max_contributions is None else min(max_contributions, k_bar)
    return math.log(width / delta) / local_epsilon


def limited_domain_threshold_offset(
    *, k_bar: int, max_contributions: int | None, delta: float, scale: float, lattice_bits: int = 20
) -> int:
    r"""The offset :math:`h_\perp - c_{(\bar k+1)}`, rounded *up* onto the lattice :math:`2^{-b}\mathbb{Z}` (lattice units).

    With the Gumbel scale :math:`s = 1/\varepsilon'` of the mechanism, returns the integer

    .. math:: \Big\lceil 2^b \big(1 + s \ln(\min(\Delta_0, \bar k)/\delta)\big) \Big\rceil,

    computed with ``mpmath`` interval arithmetic (outward rounding, 128 bits) and the ceiling of the interval's
    upper end, so the result is at least the exact real offset. A larger offset only lowers the probability
    that an item is released past :math:`\perp` (``docs/top_k.md`` §4), and it puts every score of the
    mechanism on one integer lattice, where the selection is sampled exactly.

    Examples
    --------
    >>> from opendp_wgm.accounting import limited_domain_threshold_offset
    >>> limited_domain_threshold_offset(k_bar=2, max_contributions=5, delta=0.1, scale=1 / 1.1, lattice_bits=0)
    4
    """
    from mpmath.ctx_iv import MPIntervalContext
    from mpmath.libmp import round_ceiling, to_int

    scale = _check_positive("scale", scale)
    _h_bottom_log_term(k_bar, max_contributions, delta, 1.0)  # validation of k_bar, max_contributions, delta
    lattice_bits = _check_int("lattice_bits", lattice_bits, minimum=0)
    width = k_bar if max_contributions is None else min(max_contributions, k_bar)
    ctx = MPIntervalContext()  # private context: no global mpmath state
    ctx.prec = 128
    offset = (1 + ctx.log(ctx.mpf(width) / ctx.mpf(delta)) * ctx.mpf(scale)) * ctx.mpf(2) ** lattice_bits
    return int(to_int(offset._mpi_[1], round_ceiling))


@dataclass(frozen=True)
class WGMTopKCalibration:
    r"""The calibrated parameters of WGM-then-top-k (:func:`opendp_wgm.make_wgm_top_k_from_budget`).

    Attributes
    ----------
    k, max_contributions, split
        k, Δ0, and the share of the budget given to stage 1 (the WGM).
    delta, epsilon, rho
        The total budget for one user (exactly one of ``epsilon`` and ``rho`` is set).
    wgm
        Stage 1: the :class:`WGMCalibration` (σ, T) at its share of the budget.
    peel_scale
        Stage 2: the Gumbel scale s of the peeling; ``peel_local_epsilon`` = 1/s is the reference's ε'.
    peel_epsilon, peel_rho, peel_delta
        Stage 2's budget: (ε₂, δ₂) under (ε, δ)-DP, or ρ₂ (and δ₂ = 0) under approximate zCDP.
    """

    k: int
    max_contributions: int
    split: float
    delta: float
    wgm: WGMCalibration
    peel_scale: float
    peel_delta: float
    epsilon: float | None = None
    rho: float | None = None
    peel_epsilon: float | None = None
    peel_rho: float | None = None

    @property
    def peel_local_epsilon(self) -> float:
        """ε' = 1/s, the per-round parameter of the peeling (the reference's ``em_epsilon_cdp``)."""
        return 1.0 / self.peel_scale


def _smallest_scale(passes, start: float) -> float:
    """Nudge ``start`` up by ulps until ``passes(scale)`` (absorbs float rounding of closed forms)."""
    scale = start
    for step in range(10_000):
        if passes(scale):
            return scale
        scale = math.nextafter(scale, math.inf) if step < 64 else scale * (1.0 + 1e-12)
    raise AssertionError(f"calibration failed to pass its own map near scale {start!r}")  # pragma: no cover


def calibrate_wgm_top_k(
    *,
    k: int,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    split: float = 0.5,
) -> WGMTopKCalibration:
    r"""Calibrate WGM-then-top-k to a total per-user budget, split between its two stages.

    - ``epsilon`` given, (ε, δ)-DP (the paper's accounting): stage 1 gets
      (split·ε, split·δ) and is :func:`calibrate_wgm` there (half of its δ to the noise, half to the
      threshold); stage 2 gets the rest, (ε₂, δ₂), and peels with :math:`s = 1/\varepsilon'`,
      ε' = :func:`peeling_epsilon` (ε₂, δ₂, k). At ε = 1, δ = 1e-5, Δ0 = 100, k = 100 and the default
      split 1/2 this is σ = 7.6611, T = 41.86 and ε' = 0.020036.
    - ``rho`` given, approximate zCDP: stage 1 gets (split·ρ, δ) (the peeling needs no δ) and stage 2
      ρ₂ = (1 − split)·ρ, :math:`s = \sqrt{k/(8\rho_2)}`.

    Every parameter is then checked against the privacy maps, so the composed measurement passes
    ``check(1, budget)``.

    Parameters
    ----------
    k
        Number of items to release, ≥ 1.
    max_contributions
        Δ0 ≥ 1 of the WGM stage.
    delta
        Total δ ∈ (0, 1).
    epsilon, rho
        Exactly one, > 0.
    split
        Share of the budget given to stage 1, in (0, 1); default 1/2 (the reference's split).
    """
    k = _check_int("k", k, minimum=1)
    max_contributions = _check_max_contributions(max_contributions)
    epsilon, rho, delta = _prepare_budget(epsilon, rho, delta)
    split = _check_probability("split", split)
    if epsilon is not None:
        eps_1 = split * epsilon
        delta_1 = split * delta
        eps_2 = (epsilon - eps_1) * (1.0 - 1e-12)
        delta_2 = (delta - delta_1) * (1.0 - 1e-12)
        try:
            wgm = calibrate_wgm(max_contributions=max_contributions, delta=delta_1, epsilon=eps_1)
        except _BudgetTooSmall as error:
            raise _restated(error, epsilon, split, f"`delta` = {delta!r} and `split` = {split!r}") from None
        local = peeling_epsilon(eps_2, delta_2, k)
        scale = _smallest_scale(
            lambda s: peeling_approx_epsilon(1, k=k, scale=s, delta=delta_2) <= eps_2, 1.0 / local
        )
        return WGMTopKCalibration(
            k=k, max_contributions=max_contributions, split=split, delta=delta, wgm=wgm,
            peel_scale=scale, peel_delta=delta_2, epsilon=epsilon, peel_epsilon=eps_2,
        )
    rho_1 = split * rho
    rho_2 = (rho - rho_1) * (1.0 - 1e-12)
    try:
        wgm = calibrate_wgm(max_contributions=max_contributions, delta=delta, rho=rho_1)
    except _BudgetTooSmall as error:
        raise _restated(error, rho, split, f"`split` = {split!r}") from None
    scale = _smallest_scale(
        lambda s: peeling_rho(1, k=k, scale=s) <= rho_2, math.sqrt(k / (8.0 * rho_2))
    )
    return WGMTopKCalibration(
        k=k, max_contributions=max_contributions, split=split, delta=delta, wgm=wgm,
        peel_scale=scale, peel_delta=0.0, rho=rho, peel_rho=rho_2,
    )


__all__ += [
    "WGMTopKCalibration",
    "calibrate_wgm_top_k",
    "limited_domain_epsilon",
    "limited_domain_h_bottom",
    "limited_domain_local_epsilon",
    "limited_domain_threshold_offset",
    "peeling_approx_epsilon",
    "peeling_pure_epsilon",
    "peeling_rho",
]
