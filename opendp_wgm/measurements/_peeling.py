r"""What private top-k and the k-hitting set share: peeling's measures and map, and "WGM, then peeling".

:mod:`opendp_wgm.measurements.top_k` and :mod:`opendp_wgm.measurements.hitting_set` both run ``k`` rounds of
the exponential mechanism on monotone user counts (``docs/top_k.md`` §2, ``docs/hitting_set.md`` §2), and both
compose such a stage adaptively after a WGM that discovers the candidates (``docs/top_k.md`` §3,
``docs/hitting_set.md`` §3). This module holds the common part:

- the output measures of a peeling stage (:data:`_PeelingKind`, :func:`_measures`, :func:`_peeling_kind`);
- the map of ``k`` rounds (:func:`_peeling_loss`) and the rounded-up sum of two stage maps (:func:`_add_up`);
- the output measure of WGM-then-peeling (:func:`_two_stage_measure`); the two-stage combinator itself is
  :mod:`opendp_wgm.measurements.two_stage`.

The two modules round their maps differently, and their published maps pin the difference (a few ulps), so it
is spelled out once, in :class:`_Accounting`: :data:`_TOP_K` and :data:`_USER_PEELING`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import opendp.prelude as dp

from opendp_wgm._validation import _check_d_in, _check_positive, _check_probability, _check_real
from opendp_wgm.accounting import peeling_approx_epsilon, peeling_pure_epsilon, peeling_rho
from opendp_wgm.measurements.wgm import _approx_dp, _zcdp

__all__: list[str] = []

_PeelingKind = Literal["approx_zcdp", "zcdp", "approx_dp", "pure_dp"]

@dataclass(frozen=True)
class _Accounting:
    """How a module's peeling maps round, and which conversion δ they accept. Every choice is conservative.

    Attributes
    ----------
    exact
        ``True`` (user peeling, ``docs/hitting_set.md`` §2): ρ and ε are rationals rounded up once to a float,
        sums are rounded up exactly, and the zCDP → (ε, δ) conversion is inflated by a relative 1e-12.
        ``False`` (top-k, ``docs/top_k.md`` §2): the float formulas of :func:`opendp_wgm.accounting.peeling_rho`,
        :func:`~opendp_wgm.accounting.peeling_pure_epsilon` and
        :func:`~opendp_wgm.accounting.peeling_approx_epsilon` (inflated by 2^-50), and sums bumped one ulp up.
    zero_delta
        Whether the conversion δ may be 0 (it then means basic composition); otherwise δ ∈ (0, 1).
    cap_delta
        Whether the two-stage map caps its δ at 1.
    """

    exact: bool
    zero_delta: bool
    cap_delta: bool


_TOP_K = _Accounting(exact=False, zero_delta=False, cap_delta=True)
_USER_PEELING = _Accounting(exact=True, zero_delta=True, cap_delta=False)


# --------------------------------------------------------------------------------------------------------------
# measures


def _measures() -> dict[_PeelingKind, dp.Measure]:
    return {
        "approx_zcdp": _zcdp(),
        "zcdp": dp.zero_concentrated_divergence(),
        "approx_dp": _approx_dp(),
        "pure_dp": dp.max_divergence(),
    }


def _check_conversion_delta(name: str, value: Any, accounting: _Accounting) -> float:
    """The δ of the zCDP → (ε, δ) conversion: in [0, 1) or (0, 1), as ``accounting`` allows."""
    if accounting.zero_delta:
        return _check_real(name, value, minimum=0.0, maximum=1.0, maximum_inclusive=False)
    return _check_probability(name, value)


def _peeling_kind(
    output_measure: dp.Measure | None, delta: float | None, accounting: _Accounting
) -> tuple[_PeelingKind, float]:
    """The output measure as a kind, with the δ of the zCDP → (ε, δ) conversion (approx_dp only)."""
    measures = _measures()
    if output_measure is None:
        output_measure = measures["approx_zcdp"]
    kind = next((name for name, measure in measures.items() if output_measure == measure), None)
    if kind is None:
        msg = (
            "`output_measure` must be one of dp.approximate(dp.zero_concentrated_divergence()), "
            "dp.zero_concentrated_divergence(), dp.approximate(dp.max_divergence()) or dp.max_divergence(), "
            f"got {output_measure}"
        )
        raise ValueError(msg)
    if kind == "approx_dp":
        if delta is None:
            basic = "; 0 gives basic composition" if accounting.zero_delta else ""
            msg = (
                "output_measure=dp.approximate(dp.max_divergence()) needs `delta` (the δ at which the peeling's "
                f"zCDP is converted to (ε, δ){basic})"
            )
            raise ValueError(msg)
        return kind, _check_conversion_delta("delta", delta, accounting)
    if delta is not None:
        msg = f"`delta` applies only to output_measure=dp.approximate(dp.max_divergence()) (got {output_measure})"
        raise ValueError(msg)
    return kind, 0.0


# --------------------------------------------------------------------------------------------------------------
# maps


def _float_up(value: Fraction) -> float:
    """The smallest float >= an exact rational (∞ above the largest float)."""
    try:
        out = float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    if Fraction(out) < value:
        out = math.nextafter(out, math.inf)
    return out


def _add_up(a: float, b: float, accounting: _Accounting) -> float:
    """a + b rounded toward +inf: exactly (OpenDP's compositors add the same way), or one ulp above the float sum."""
    if accounting.exact and math.isfinite(a) and math.isfinite(b):
        return _float_up(Fraction(a) + Fraction(b))
    total = a + b
    return math.nextafter(total, math.inf) if total != 0.0 and math.isfinite(total) else total


def _pure_epsilon(d_in: int, k: int, scale: float, accounting: _Accounting) -> float:
    if accounting.exact:
        return _float_up(k * (Fraction(d_in) / Fraction(scale)))
    return peeling_pure_epsilon(d_in, k=k, scale=scale)


def _rho(d_in: int, k: int, scale: float, accounting: _Accounting) -> float:
    if accounting.exact:
        return _float_up(k * (Fraction(d_in) / Fraction(scale)) ** 2 / 8)
    return peeling_rho(d_in, k=k, scale=scale)


# Relative inflation of the exact accounting's zCDP → (ε, δ) conversion, which uses sqrt and log (each within
# 1 ulp).
_CONVERSION_INFLATION = 1.0 + 1e-12


def _peeling_loss(
    d_in: int, *, k: int, scale: float, kind: _PeelingKind, accounting: _Accounting, delta: float = 0.0
) -> Any:
    r"""Privacy loss of ``k`` peeling rounds whose scores move monotonically by at most ``d_in``.

    Each round selects with :math:`\Pr[x] \propto e^{c(x)/s}` (or permute-and-flip under pure DP): it is
    :math:`\varepsilon_r = d_{in}/s`-DP and, for the exponential mechanism, :math:`\varepsilon_r`-bounded-range,
    hence :math:`\varepsilon_r^2/8`-zCDP; ``k`` adaptive rounds add (``docs/top_k.md`` §2,
    ``docs/hitting_set.md`` §2). Under (ε, δ): the tighter of basic composition (reported with δ = 0) and the
    zCDP conversion :math:`\rho + 2\sqrt{\rho\ln(1/\delta)}` (Bun & Steinke 2016) at ``delta`` (none at δ = 0).
    Rounded up as ``accounting`` says.
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


# --------------------------------------------------------------------------------------------------------------
# WGM, then peeling: the output measure (the combinator is opendp_wgm.measurements.two_stage)


def _two_stage_measure(
    output_measure: dp.Measure | None, wgm_epsilon: Any, peel_delta: Any, accounting: _Accounting
) -> tuple[dp.Measure, _PeelingKind, float | None, float]:
    """The output measure of WGM-then-peeling, its peeling kind, and the checked ``wgm_epsilon`` and
    ``peel_delta`` (0 under approximate zCDP)."""
    measures = _measures()
    output_measure = measures["approx_zcdp"] if output_measure is None else output_measure
    if output_measure == measures["approx_zcdp"]:
        for name, value in (("wgm_epsilon", wgm_epsilon), ("peel_delta", peel_delta)):
            if value is not None:
                msg = f"`{name}` applies only to output_measure=dp.approximate(dp.max_divergence())"
                raise ValueError(msg)
        return output_measure, "approx_zcdp", None, 0.0
    if output_measure == measures["approx_dp"]:
        missing = [n for n, v in (("wgm_epsilon", wgm_epsilon), ("peel_delta", peel_delta)) if v is None]
        if missing:
            msg = f"output_measure=dp.approximate(dp.max_divergence()) needs {' and '.join(f'`{n}`' for n in missing)}"
            raise ValueError(msg)
        wgm_epsilon = _check_positive("wgm_epsilon", wgm_epsilon)
        return output_measure, "approx_dp", wgm_epsilon, _check_conversion_delta("peel_delta", peel_delta, accounting)
    msg = (
        "`output_measure` must be dp.approximate(dp.zero_concentrated_divergence()) or "
        f"dp.approximate(dp.max_divergence()), got {output_measure}"
    )
    raise ValueError(msg)
