r"""The maps of top-k selection: peeling (exponential mechanism / permute-and-flip) and limited domain.

- float maps of ``k`` peeling rounds on monotone counts (:func:`peeling_rho`, :func:`peeling_pure_epsilon`,
  :func:`peeling_approx_epsilon`) and the reference's per-round ε' (:func:`peeling_epsilon`);
- the peeling map of the measurements, :func:`peeling_loss`, in each output measure, and the rounded-up sum of
  two stage maps, :func:`add_up`; both round as an :class:`Accounting` policy says;
- limited-domain top-k (Durfee & Rogers 2019): its composition (:func:`limited_domain_epsilon`), threshold
  (:func:`limited_domain_h_bottom`, :func:`limited_domain_threshold_offset`) and group map
  (:func:`limited_domain_group_loss`).

Derivations: ``docs/top_k.md`` §2–4 and ``docs/hitting_set.md`` §2–3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from opendp_wgm._validation import (
    _check_d_in,
    _check_int,
    _check_positive,
    _check_probability,
    _check_real,
)
from opendp_wgm.privacy.budget import MeasureKind
from opendp_wgm.privacy.threshold import check_max_contributions

__all__ = [
    "TOP_K",
    "USER_PEELING",
    "Accounting",
    "add_up",
    "limited_domain_epsilon",
    "limited_domain_group_loss",
    "limited_domain_h_bottom",
    "limited_domain_threshold_offset",
    "peeling_approx_epsilon",
    "peeling_epsilon",
    "peeling_loss",
    "peeling_pure_epsilon",
    "peeling_rho",
]


def peeling_epsilon(epsilon: float, delta: float, k: int) -> float:
    r"""Per-step ε' of ``k`` adaptive ε'-bounded-range exponential-mechanism steps that are (ε, δ)-DP.

    Each step is ε'-BR, hence :math:`\varepsilon'^2/8`-zCDP; ``k`` steps compose to :math:`k\varepsilon'^2/8`,
    converted with :func:`opendp_wgm.privacy.gaussian.rho_to_epsilon`. Solving for ε' (the reference implementation's ``em_epsilon_cdp``):

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
    floats); :func:`opendp_wgm.privacy.calibrate.limited_domain_local_epsilon` keeps a relative margin instead.

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
        max_contributions = check_max_contributions(max_contributions)
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
    >>> from opendp_wgm.privacy.peeling import limited_domain_threshold_offset
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


def limited_domain_group_loss(d_in: int, epsilon: float, delta: float) -> tuple[float, float]:
    r"""Group privacy of an (ε, δ)-DP map at ``d_in``: :math:`(d\varepsilon,\ \delta \sum_{i<d} e^{i\varepsilon})`,
    rounded up (the map of limited-domain top-k beyond one user)."""
    if d_in == 0:
        return 0.0, 0.0
    if d_in == 1:
        return epsilon, delta
    eps = d_in * epsilon * (1.0 + 2.0**-50)
    try:
        growth = math.expm1(d_in * epsilon) / math.expm1(epsilon)
    except OverflowError:
        return eps, 1.0
    return eps, min(1.0, delta * growth * (1.0 + 1e-12))


# ==============================================================================================================
# The peeling map of the measurements, and its two rounding policies
# ==============================================================================================================


@dataclass(frozen=True)
class Accounting:
    """How a module's peeling maps round, and which conversion δ they accept. Every choice is conservative.

    The two policies stay apart because unifying them moves a published map: under the float policy the
    hitting set's exact map values change (``tests/test_hitting_set.py::test_map_charges_min_k_candidates_rounds``
    pins them), and under the exact policy top-k's (ε, δ) map would grow by the conversion's relative 1e-12
    (thousands of ulps) instead of 2^-50.

    Attributes
    ----------
    exact
        ``True`` (user peeling, ``docs/hitting_set.md`` §2): ρ and ε are rationals rounded up once to a float,
        sums are rounded up exactly, and the zCDP → (ε, δ) conversion is inflated by a relative 1e-12.
        ``False`` (top-k, ``docs/top_k.md`` §2): the float formulas of :func:`peeling_rho`,
        :func:`peeling_pure_epsilon` and :func:`peeling_approx_epsilon` (inflated by 2^-50), and sums bumped
        one ulp up.
    zero_delta
        Whether the conversion δ may be 0 (it then means basic composition); otherwise δ ∈ (0, 1).
    cap_delta
        Whether the two-stage map caps its δ at 1.
    """

    exact: bool
    zero_delta: bool
    cap_delta: bool


#: Top-k's policy (:mod:`opendp_wgm.measurements.top_k`).
TOP_K = Accounting(exact=False, zero_delta=False, cap_delta=True)
#: User peeling's policy (:mod:`opendp_wgm.measurements.hitting_set`).
USER_PEELING = Accounting(exact=True, zero_delta=True, cap_delta=False)


def _float_up(value: Fraction) -> float:
    """The smallest float >= an exact rational (∞ above the largest float)."""
    try:
        out = float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    if Fraction(out) < value:
        out = math.nextafter(out, math.inf)
    return out


def add_up(a: float, b: float, accounting: Accounting) -> float:
    """a + b rounded toward +inf: exactly (OpenDP's compositors add the same way), or one ulp above the float sum."""
    if accounting.exact and math.isfinite(a) and math.isfinite(b):
        return _float_up(Fraction(a) + Fraction(b))
    total = a + b
    return math.nextafter(total, math.inf) if total != 0.0 and math.isfinite(total) else total


def _pure_epsilon(d_in: int, k: int, scale: float, accounting: Accounting) -> float:
    if accounting.exact:
        return _float_up(k * (Fraction(d_in) / Fraction(scale)))
    return peeling_pure_epsilon(d_in, k=k, scale=scale)


def _rho(d_in: int, k: int, scale: float, accounting: Accounting) -> float:
    if accounting.exact:
        return _float_up(k * (Fraction(d_in) / Fraction(scale)) ** 2 / 8)
    return peeling_rho(d_in, k=k, scale=scale)


# Relative inflation of the exact accounting's zCDP → (ε, δ) conversion, which uses sqrt and log (each within
# 1 ulp).
_CONVERSION_INFLATION = 1.0 + 1e-12


def peeling_loss(
    d_in: int, *, k: int, scale: float, kind: MeasureKind, accounting: Accounting, delta: float = 0.0
) -> Any:
    r"""Privacy loss of ``k`` peeling rounds whose scores move monotonically by at most ``d_in``.

    Each round selects with :math:`\Pr[x] \propto e^{c(x)/s}` (or permute-and-flip under pure DP): it is
    :math:`\varepsilon_r = d_{in}/s`-DP and, for the exponential mechanism, :math:`\varepsilon_r`-bounded-range,
    hence :math:`\varepsilon_r^2/8`-zCDP; ``k`` adaptive rounds add (``docs/top_k.md`` §2,
    ``docs/hitting_set.md`` §2). Under (ε, δ): the tighter of basic composition (reported with δ = 0) and the
    zCDP conversion :math:`\rho + 2\sqrt{\rho\ln(1/\delta)}` (Bun & Steinke 2016) at ``delta`` (none at δ = 0).
    Rounded up as ``accounting`` says (:class:`Accounting`).
    """
    d_in = _check_d_in(d_in)
    if kind == "pure_dp":
        return _pure_epsilon(d_in, k, scale, accounting)
    rho = _rho(d_in, k, scale, accounting)
    if kind == "zcdp":
        return rho
    if kind == "approx_zcdp":
        return rho, 0.0
    if rho == 0.0:  # no user moved, or no round
        return 0.0, 0.0
    basic = _pure_epsilon(d_in, k, scale, accounting)
    if delta > 0.0:
        if accounting.exact:
            converted = (rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))) * _CONVERSION_INFLATION
        else:  # min(basic, conversion), rounded up
            converted = peeling_approx_epsilon(d_in, k=k, scale=scale, delta=delta)
        if converted < basic:
            return converted, delta
    return basic, 0.0

