"""``--max-contributions auto``: the plan of a command whose Δ0 is chosen privately, its summary lines, and the
release curve of every candidate Δ0 for ``--dry-run`` (the curve depends on the private choice)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opendp_wgm.cli._args import _Budget
from opendp_wgm.cli._errors import CLIError

if TYPE_CHECKING:
    import opendp.prelude as dp
    import polars as pl

    from opendp_wgm.cli._report import _Plan
    from opendp_wgm.privacy.budget import Budget
    from opendp_wgm.privacy.calibrate import DPSIPSCalibration, WGMCalibration

    #: A candidate's thresholded stage at a grid point and the mechanism's share of the budget.
    CurveAt = Callable[[int, Budget], WGMCalibration | DPSIPSCalibration]


def refuse_auto(budget: _Budget, what: str) -> None:
    """A command (or mechanism) ``what`` that has no ``--max-contributions auto``."""
    if budget.auto:
        raise CLIError(f"--max-contributions auto does not apply to {what}")


def auto_plan(
    budget: _Budget,
    *,
    name: str,
    measurement: dp.Measurement,
    curve_at: CurveAt,
    released: str = "released",
    outcome: Callable[[pl.DataFrame], list[str]] | None = None,
    note: str | None = None,
) -> _Plan:
    """The plan of ``measurement`` (a ``*_from_budget`` constructor's, with ``max_contributions="auto"``): a line on
    the choice, the chosen Δ0 read from the release, and for ``--dry-run`` the release curves of the candidates
    (``curve_at`` calibrates a candidate's thresholded stage at a grid point); ``note``: one more line on the
    choice."""
    from opendp_wgm.cli._report import _Plan
    from opendp_wgm.privacy.auto import GRID, split_auto_budget
    from opendp_wgm.privacy.budget import Budget

    assert budget.auto_fraction is not None  # set with --max-contributions auto
    total = Budget.of(epsilon=budget.epsilon, rho=budget.rho, delta=budget.delta)
    auto = split_auto_budget(total, budget.auto_fraction)
    grid = ", ".join(str(g) for g in GRID)
    noise = "discrete Laplace" if auto.laplace else "discrete Gaussian"
    lines = [
        f"  Δ0            auto: {budget.auto_fraction:g} of the budget buys a private choice of Δ0 in {{{grid}}}: "
        f"a single-item test (users holding one item against the others, {noise} of scale {auto.test_scale:.4g} "
        f"users) chooses 1 at a fifteenth of it, else a noisy histogram of the users' distinct-item counts (scale "
        f"{auto.histogram_scale:.4g} users) chooses; the rest calibrates {name} at the chosen Δ0",
        *([f"                {note}"] if note else []),
    ]

    def chosen(release: pl.DataFrame) -> list[str]:
        value = getattr(release, "max_contributions", None)
        single = value == 1 and budget.epsilon is not None  # discover's partition selection: no rounds to read
        more = outcome(release) if outcome is not None and not single else []
        by = "the single-item test" if getattr(release, "single_item_test", False) else "the histogram"
        return [f"  chosen Δ0     {value} (private: part of the release; chosen by {by})", *more]

    def candidates() -> dict[int, WGMCalibration | DPSIPSCalibration]:
        # Δ0 = 1 at the share it mostly runs at where it is right: after the single-item test
        return {g: curve_at(g, auto.single if g == GRID[0] else auto.rest) for g in GRID}

    return _Plan(
        f"{name} (Δ0 auto)", measurement, lines, released=released, outcome=chosen, candidates=candidates
    )


def two_stage_auto_plan(
    budget: _Budget,
    *,
    space: tuple[dp.Domain, dp.Metric],
    make: Callable[..., dp.Measurement],
    calibrate: Callable[..., Any],
    k: int,
    split: float,
    noise: str,
    stage_1: dict[str, Any],
    execution: dict[str, Any],
    then: str,
    **options: Any,
) -> _Plan:
    """The ``--max-contributions auto`` plan of a two-stage command (top-k, hitting set): ``make``, its
    ``*_from_budget`` constructor, at ``max_contributions="auto"``, and for ``--dry-run`` stage 1's curve at each
    grid point by ``calibrate``, the constructor's calibration. ``stage_1`` (``stage_1``, ``rounds``, ``ratio``)
    and ``options`` (e.g. ``noise_delta_fraction``) go to both, ``execution`` to the constructor only; ``then``
    names stage 2 in the plan's name (``WGM-then-<then>``, or ``DP-SIPS-then-<then>``)."""
    assert budget.auto_fraction is not None  # set with --max-contributions auto
    measurement = make(
        *space, k=k, max_contributions="auto", delta=budget.delta, epsilon=budget.epsilon, rho=budget.rho,
        auto_fraction=budget.auto_fraction, split=split, noise=noise, **options, **stage_1, **execution,
    )

    def curve_at(max_contributions: int, rest: Budget) -> WGMCalibration | DPSIPSCalibration:
        calibration = calibrate(
            k=k, split=split, max_contributions=max_contributions, delta=rest.delta, epsilon=rest.epsilon,
            rho=rest.rho, **options, **stage_1,
        )
        first: WGMCalibration | DPSIPSCalibration = calibration.stage_1
        return first

    first = "DP-SIPS" if stage_1["stage_1"] == "dp-sips" else "WGM"
    return auto_plan(
        budget, name=f"{first}-then-{then}", measurement=measurement, curve_at=curve_at,
        released="a stage-1 candidate",
    )
