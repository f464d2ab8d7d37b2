r"""A privacy budget as one value, and the one reading of the package's output measures.

:class:`Budget` is what a user asks for, like ``dp.loss_of``'s ``(measure, d_out)`` pair: an OpenDP output
measure and its distance. It is built from the arguments of the ``*_from_budget`` constructors (``epsilon`` or
``rho``, with ``delta``) with their checks and messages, and gives what calibrations need: the measure, ε or ρ,
δ, :meth:`Budget.split` for two-stage mechanisms and :attr:`Budget.description` for reports.

The output measures the package's measurements accept are read in one place, :func:`measure_kind`, and the
constructors' measure arguments are checked by :func:`check_gaussian_measure` (the WGM and the baselines that
share its map), :func:`check_peeling_measure` (a peeling stage) and :func:`check_two_stage_measure`
(WGM-then-peeling).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import opendp.prelude as dp

from opendp_wgm._validation import (
    _check_absent,
    _check_exactly_one,
    _check_given,
    _check_positive,
    _check_probability,
    _check_real,
)

__all__ = [
    "Budget",
    "Loss",
    "MeasureKind",
    "check_gaussian_measure",
    "check_peeling_measure",
    "check_two_stage_measure",
    "describe_measure",
    "measure_kind",
    "measure_of",
]

#: The output measures of the package: approximate zCDP (the default), zCDP, (ε, δ)-DP and pure ε-DP.
MeasureKind = Literal["approx_zcdp", "zcdp", "approx_dp", "pure_dp"]

#: A distance in one of those measures: ε or ρ, or ``(ε, δ)`` / ``(ρ, δ)`` for the approximate kinds.
Loss = float | tuple[float, float]

#: How each kind's measure is written in messages (OpenDP's constructors).
#: The output measure that some parameters apply to only (as the messages spell it).
_APPROX_DP = "output_measure=dp.approximate(dp.max_divergence())"

_SPELLING: dict[MeasureKind, str] = {
    "approx_zcdp": "dp.approximate(dp.zero_concentrated_divergence())",
    "zcdp": "dp.zero_concentrated_divergence()",
    "approx_dp": "dp.approximate(dp.max_divergence())",
    "pure_dp": "dp.max_divergence()",
}

#: Readable name of each kind's measure in reports, and the symbol of its first budget parameter.
_DESCRIPTION: dict[MeasureKind, tuple[str, str]] = {
    "approx_zcdp": ("approximate zCDP, approximate(zero_concentrated_divergence)", "ρ"),
    "zcdp": ("zCDP, zero_concentrated_divergence", "ρ"),
    "approx_dp": ("(ε, δ)-DP, approximate(max_divergence)", "ε"),
    "pure_dp": ("ε-DP, max_divergence", "ε"),
}


@functools.cache
def measure_of(kind: MeasureKind) -> dp.Measure:
    """The OpenDP output measure of ``kind``: one object per kind, built once (a measure is immutable; building
    one through OpenDP's FFI cost about as much as checking it, and :func:`measure_kind` runs on every release of a
    two-stage call's stage 2)."""
    if kind == "approx_zcdp":
        return dp.approximate(dp.zero_concentrated_divergence())
    if kind == "zcdp":
        return dp.zero_concentrated_divergence()
    if kind == "approx_dp":
        return dp.approximate(dp.max_divergence())
    return dp.max_divergence()


def measure_kind(
    output_measure: dp.Measure | None, allowed: Sequence[MeasureKind] = tuple(_SPELLING)
) -> MeasureKind:
    """The kind of ``output_measure`` (approximate zCDP when ``None``), refused unless it is one of ``allowed``."""
    if output_measure is None:
        return "approx_zcdp"
    for kind in allowed:  # the object measure_of gave (a two-stage call's stage 2, every release): no FFI compare
        if output_measure is measure_of(kind):
            return kind
    for kind in allowed:
        if output_measure == measure_of(kind):
            return kind
    spelled = [_SPELLING[kind] for kind in allowed]
    choices = spelled[0] if len(spelled) == 1 else f"{', '.join(spelled[:-1])} or {spelled[-1]}"
    msg = f"`output_measure` must be {'one of ' if len(spelled) > 2 else ''}{choices} (found {output_measure})"
    raise ValueError(msg)


def describe_measure(measure: object) -> tuple[str, str]:
    """A readable name of an output measure and the symbol of its first budget parameter (``"ε"``, ``"ρ"``;
    ``"d_out"`` for a measure the package does not produce). The CLI's reports print these."""
    for kind, description in _DESCRIPTION.items():
        if measure == measure_of(kind):
            return description
    return str(measure), "d_out"


# --------------------------------------------------------------------------------------------------------------
# the measure arguments of the explicit constructors


def check_gaussian_measure(
    output_measure: dp.Measure | None, epsilon: float | None
) -> tuple[dp.Measure, float | None]:
    """The output measure (approximate zCDP by default, or (ε, δ)-DP, which needs ``epsilon``) and ``epsilon``
    checked: the WGM and the baselines that share its map (:mod:`opendp_wgm.measurements.baselines`)."""
    kind = measure_kind(output_measure, ("approx_zcdp", "approx_dp"))
    if kind == "approx_zcdp":
        _check_absent("epsilon", epsilon, unless=_APPROX_DP)
    else:
        _check_given("epsilon", epsilon, when=f"with {_APPROX_DP} (the ε reported at d_in=1)")
        epsilon = _check_positive("epsilon", epsilon)
    return measure_of(kind), epsilon


def check_conversion_delta(name: str, value: Any, *, zero_delta: bool) -> float:
    """The δ of a zCDP → (ε, δ) conversion: in [0, 1) with ``zero_delta`` (0 means basic composition), else (0, 1)."""
    if zero_delta:
        return _check_real(name, value, minimum=0.0, maximum=1.0, maximum_inclusive=False)
    return _check_probability(name, value)


def check_peeling_measure(
    output_measure: dp.Measure | None, delta: float | None, *, zero_delta: bool
) -> tuple[MeasureKind, float]:
    """A peeling stage's output measure (any of the four kinds) with the δ of its zCDP → (ε, δ) conversion
    (approx_dp only; 0 otherwise)."""
    kind = measure_kind(output_measure)
    if kind == "approx_dp":
        basic = "; 0 gives basic composition" if zero_delta else ""
        when = f"with {_APPROX_DP} (the δ at which the peeling's zCDP is converted to (ε, δ){basic})"
        _check_given("delta", delta, when=when)
        return kind, check_conversion_delta("delta", delta, zero_delta=zero_delta)
    _check_absent("delta", delta, unless=_APPROX_DP)
    return kind, 0.0


def check_two_stage_measure(
    output_measure: dp.Measure | None,
    wgm_epsilon: Any,
    peel_delta: Any,
    *,
    zero_delta: bool,
    stage_1_epsilon: str = "wgm_epsilon",
) -> tuple[dp.Measure, MeasureKind, float | None, float]:
    """The output measure of WGM-then-peeling (or DP-SIPS-then-peeling), its peeling kind, and the checked stage-1
    ε (named ``stage_1_epsilon`` in errors) and ``peel_delta`` (0 under approximate zCDP)."""
    kind = measure_kind(output_measure, ("approx_zcdp", "approx_dp"))
    arguments = ((stage_1_epsilon, wgm_epsilon), ("peel_delta", peel_delta))
    if kind == "approx_zcdp":
        for name, value in arguments:
            _check_absent(name, value, unless=_APPROX_DP)
        return measure_of(kind), kind, None, 0.0
    for name, value in arguments:
        _check_given(name, value, when=f"with {_APPROX_DP}")
    wgm_epsilon = _check_positive(stage_1_epsilon, wgm_epsilon)
    return measure_of(kind), kind, wgm_epsilon, check_conversion_delta("peel_delta", peel_delta, zero_delta=zero_delta)


# --------------------------------------------------------------------------------------------------------------
# the budget


def _check_epsilon_or_rho(epsilon: float | None, rho: float | None) -> None:
    """A budget is given by exactly one of ε and ρ."""
    _check_exactly_one(epsilon=epsilon, rho=rho)


@dataclass(frozen=True)
class Budget:
    r"""A per-user privacy budget: an OpenDP output measure and its distance ``d_out`` (as ``dp.loss_of``).

    Build it with :meth:`of` (ε or ρ, with δ: the ``*_from_budget`` constructors) or :meth:`of_peeling` (ρ, ε
    with δ, or ε alone: the peeling constructors); the fields are then checked.

    Attributes
    ----------
    kind
        ``"approx_dp"`` ((ε, δ)-DP), ``"approx_zcdp"`` ((ρ, δ)), ``"pure_dp"`` (ε) or ``"zcdp"`` (ρ).
    value
        ε or ρ, > 0.
    delta
        δ: in (0, 1) when the user gave it; 0 for the pure kinds, and for the rest of a zCDP budget after
        :meth:`split` (the peeling spends no δ).

    Examples
    --------
    >>> import opendp.prelude as dp
    >>> from opendp_wgm.privacy.budget import Budget
    >>> budget = Budget.of(epsilon=1.0, delta=1e-5)
    >>> budget.measure == dp.approximate(dp.max_divergence()), budget.d_out
    (True, (1.0, 1e-05))
    >>> budget.description
    'ε = 1, δ = 1e-05 per user [(ε, δ)-DP, approximate(max_divergence)]'
    """

    kind: MeasureKind
    value: float
    delta: float

    @classmethod
    def of(cls, *, epsilon: float | None = None, rho: float | None = None, delta: float) -> Budget:
        """ε with δ ∈ (0, 1) ((ε, δ)-DP) or ρ with δ (approximate zCDP): exactly one of ε and ρ, > 0."""
        _check_epsilon_or_rho(epsilon, rho)
        delta = _check_probability("delta", delta)
        if epsilon is not None:
            return cls("approx_dp", _check_positive("epsilon", epsilon), delta)
        return cls("approx_zcdp", _check_positive("rho", rho), delta)

    @classmethod
    def of_peeling(
        cls, *, epsilon: float | None = None, rho: float | None = None, delta: float | None = None
    ) -> Budget:
        """A peeling budget: ρ (approximate zCDP, no δ), ε with δ ((ε, δ)-DP) or ε alone (pure DP)."""
        _check_epsilon_or_rho(epsilon, rho)
        if rho is not None:
            _check_absent("delta", delta, unless="`epsilon` is given (peeling spends no δ under zCDP)")
            return cls("approx_zcdp", _check_positive("rho", rho), 0.0)
        epsilon = _check_positive("epsilon", epsilon)
        if delta is None:
            return cls("pure_dp", epsilon, 0.0)
        return cls("approx_dp", epsilon, _check_probability("delta", delta))

    @property
    def measure(self) -> dp.Measure:
        """The OpenDP output measure."""
        return measure_of(self.kind)

    @property
    def d_out(self) -> Loss:
        """The distance in :attr:`measure`: ``(value, delta)`` for the approximate kinds, ``value`` otherwise."""
        return (self.value, self.delta) if self.kind in ("approx_dp", "approx_zcdp") else self.value

    @property
    def epsilon(self) -> float | None:
        """ε under (ε, δ)-DP and pure DP, else ``None``."""
        return self.value if self.kind in ("approx_dp", "pure_dp") else None

    @property
    def rho(self) -> float | None:
        """ρ under (approximate) zCDP, else ``None``."""
        return self.value if self.kind in ("approx_zcdp", "zcdp") else None

    @property
    def name(self) -> str:
        """The argument that gave :attr:`value`: ``"epsilon"`` or ``"rho"``."""
        return "epsilon" if self.epsilon is not None else "rho"

    @property
    def description(self) -> str:
        """The budget for a report, e.g. ``"ε = 1, δ = 1e-05 per user [(ε, δ)-DP, approximate(max_divergence)]"``."""
        measure, symbol = _DESCRIPTION[self.kind]
        delta = f", δ = {self.delta:g}" if self.kind in ("approx_dp", "approx_zcdp") else ""
        return f"{symbol} = {self.value:g}{delta} per user [{measure}]"

    def split(self, fraction: float) -> tuple[Budget, Budget]:
        r"""The budgets of two stages composed in sequence: ``fraction`` of the budget, then the rest.

        Under (ε, δ)-DP the first stage gets (f·ε, f·δ) and the second
        :math:`((\varepsilon - f\varepsilon)(1 - 10^{-12}), (\delta - f\delta)(1 - 10^{-12}))`; under approximate
        zCDP the first gets (f·ρ, δ) (a WGM spends δ on its threshold) and the second
        :math:`((\rho - f\rho)(1 - 10^{-12}), 0)`. The relative 1e-12 keeps the sum of the two stages' rounded-up
        maps within the budget. Only the approximate kinds split.
        """
        fraction = _check_probability("split", fraction)
        shrink = 1.0 - 1e-12
        first_value = fraction * self.value
        rest_value = (self.value - first_value) * shrink
        if self.kind == "approx_dp":
            first_delta = fraction * self.delta
            return Budget(self.kind, first_value, first_delta), Budget(
                self.kind, rest_value, (self.delta - first_delta) * shrink
            )
        if self.kind == "approx_zcdp":
            return Budget(self.kind, first_value, self.delta), Budget(self.kind, rest_value, 0.0)
        msg = f"only an approximate budget splits between two stages (found {self.kind})"
        raise ValueError(msg)
