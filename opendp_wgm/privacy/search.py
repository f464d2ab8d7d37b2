r"""The one calibration search, and what every calibration shares.

:func:`smallest_passing` is the search (on ``dp.binary_search``); :func:`smallest_fitting` runs it on a map's own
parameter: given a privacy map and which of its parameters to search, the smallest value whose loss at one user
fits a bound. The rest are the calibrations' shared private helpers: the WGM's noise and threshold searches and
the "budget too small" errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import opendp.prelude as dp

from opendp_wgm.privacy.budget import Budget, Loss, MeasureKind
from opendp_wgm.privacy.gaussian import _noise_delta, analytic_gaussian_delta, wgm_rho
from opendp_wgm.privacy.threshold import LATTICE_BITS, MAX_SCALE, _threshold_delta

__all__ = ["smallest_fitting", "smallest_passing"]


_Number = TypeVar("_Number", int, float)


def smallest_passing(
    predicate: Callable[[_Number], bool], *, lower: _Number, parameter: str, budget: Budget
) -> _Number:
    """The smallest ``x >= lower`` with ``predicate(x)``, for a predicate monotone increasing in ``x``.

    ``lower`` is a float or an int, and so is the result. The upper end is the first of 1, 2, 4, … (from
    ``lower`` when it exceeds 1) that passes; ``dp.binary_search`` then bisects to the type's resolution (one
    ulp, or 1) and returns a passing value. A predicate that passes nowhere below 1e300 is refused, naming the
    ``parameter`` searched and the ``budget`` it was searched for.
    """
    if predicate(lower):
        return lower
    upper = max(type(lower)(1), lower)
    while not predicate(upper):
        upper *= 2
        if upper > 1e300:
            msg = f"calibration failed: no finite `{parameter}` satisfies the budget {budget.description}"
            raise ValueError(msg)
    # OpenDP annotates binary_search for floats; it searches the type of the bounds (int or float)
    search: Callable[..., Any] = dp.binary_search
    found: _Number = search(predicate, bounds=(lower, upper))
    return found


def smallest_fitting(
    privacy_map: Callable[..., Loss],
    bound: float,
    *,
    parameter: str,
    budget: Budget,
    lower: float = 1e-12,
    name: str | None = None,
    **fixed: Any,
) -> float:
    """The smallest value of ``privacy_map``'s keyword ``parameter`` (its other arguments ``fixed``) whose loss at
    ``d_in = 1`` is at most ``bound`` (its first part, ε or ρ, for an approximate measure's pair).

    The one calibration of a constructor's scale where the search is the same: :func:`smallest_passing` on the
    constructor's own map. ``name`` (default ``parameter``) and ``budget`` name the search in its errors.
    """

    def fits(value: float) -> bool:
        return _first(privacy_map(1, **{parameter: value}, **fixed)) <= bound

    return smallest_passing(fits, lower=lower, parameter=name or parameter, budget=budget)


class _Calibrated:
    """The ``budget`` of a calibration with fields ``epsilon`` (or ``rho``) and ``delta``."""

    epsilon: float | None
    rho: float | None
    delta: float

    @property
    def budget(self) -> Budget:
        """The budget the parameters were calibrated to."""
        kind: MeasureKind = "approx_dp" if self.epsilon is not None else "approx_zcdp"
        return Budget(kind, self.epsilon if self.epsilon is not None else self.rho, self.delta)  # type: ignore[arg-type]

class _BudgetTooSmall(ValueError):
    """A budget whose noise scale would exceed :data:`~opendp_wgm.privacy.threshold.MAX_SCALE`, with the smallest
    ε or ρ that fits.

    Two-stage calibrations catch it and restate the bound for the total budget the user gave (:func:`_restated`).
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


def _restated(error: _BudgetTooSmall, total: Budget, split: float, context: str) -> ValueError:
    """``error`` (raised for a stage given ``split`` of the budget) in terms of the ``total`` the user gave."""
    return ValueError(_too_small_message(error.name, total.value, error.minimum / split, context))


def _check_scale_fits(scale: float, budget: Budget, fraction: float, limit: float = MAX_SCALE) -> None:
    """Raise :class:`_BudgetTooSmall`, in terms of the budget, when the calibrated σ exceeds ``limit``
    (``MAX_SCALE``; lower for DP-SIPS, whose rounds' scales σ/√f_i must each stay within ``MAX_SCALE``)."""
    if scale <= limit:
        return
    if budget.epsilon is not None:
        minimum = smallest_passing(
            lambda e: analytic_gaussian_delta(e, limit) <= fraction * budget.delta,
            lower=0.0, parameter="epsilon", budget=budget,
        )
        raise _BudgetTooSmall("epsilon", budget.value, minimum, f"`delta` = {budget.delta!r}")
    raise _BudgetTooSmall("rho", budget.value, wgm_rho(1, limit), "any `delta`")


def _noise_scale(
    budget: Budget, max_contributions: int, fraction: float, limit: float = MAX_SCALE
) -> tuple[float, float]:
    """The WGM's noise search: the smallest σ whose analytic-Gaussian δ at ε is at most ``fraction · δ`` (at
    least 2^-20), or with ``1/(2σ²) <= ρ``; and the δ its noise spends at one user (0 under zCDP)."""
    if budget.kind == "approx_dp":
        epsilon = budget.value
        scale = smallest_passing(
            lambda s: analytic_gaussian_delta(epsilon, s) <= fraction * budget.delta,
            lower=1e-12, parameter="scale", budget=budget,
        )
        _check_scale_fits(scale, budget, fraction, limit)
        scale = max(scale, 1.0 / MAX_SCALE)  # the (ε, δ) map needs a lattice step of noise; more only helps
        return scale, _noise_delta(epsilon, scale, 1, max_contributions)
    scale = _rho_scale(budget.value, budget)
    _check_scale_fits(scale, budget, fraction, limit)
    return scale, 0.0


def _rho_scale(rho: float, budget: Budget) -> float:
    r"""The smallest σ with :math:`1/(2\sigma^2) \le \rho` (``budget`` names the search in its errors)."""
    return smallest_fitting(wgm_rho, rho, parameter="scale", budget=budget)


def _smallest_threshold(scale: float, max_contributions: int, threshold_delta: float, budget: Budget) -> float:
    r"""The smallest T whose threshold δ at one user, :math:`\delta_T(\sigma, T, \Delta_0)`, is at most
    ``threshold_delta``."""
    return smallest_passing(
        lambda t: _threshold_delta(scale, t, max_contributions, 1) <= threshold_delta,
        lower=0.0, parameter="threshold", budget=budget,
    )


def _first(d_out: Loss) -> float:
    return d_out[0] if isinstance(d_out, tuple) else d_out


def _pair(d_out: Loss) -> tuple[float, float]:
    """The ``(value, delta)`` of an approximate measure's loss."""
    if not isinstance(d_out, tuple):  # pragma: no cover - a bug guard: the approximate kinds give pairs
        raise AssertionError(f"expected a (value, delta) loss (found {d_out!r})")
    return d_out
