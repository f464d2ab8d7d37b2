"""``opendp-wgm discover``: release the items that many users hold, with the Weighted Gaussian Mechanism (or
DP-SIPS, its multi-round form: ``--mechanism dp-sips``; or the optimal partition selection at one item per user:
``--mechanism partition-selection``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from opendp_wgm.cli._args import (
    _add_release_command,
    _add_sips_arguments,
    _budget,
    _execution,
    _noise,
    _sips_options,
)

if TYPE_CHECKING:
    import polars as pl

    from opendp_wgm.cli._errors import _Parser

_DISCOVER_DESCRIPTION = """\
Release the items that many users hold, with the Weighted Gaussian Mechanism (WGM) calibrated to a per-user
budget: (ε, δ)-DP with --epsilon (default ε = 1), or approximate (ρ, δ)-zCDP with --rho. Neighbouring
datasets differ by all rows of one user (add/remove).

Each user keeps a uniform random subset of at most --max-contributions distinct items; each kept item gets
weight 1/sqrt(t) (t = the user's kept items), weights are summed per item, discrete Gaussian noise is added,
and the items above the calibrated threshold are released with their noisy weight.

With --mechanism dp-sips (DP-SIPS, multi-round set union) this runs in rounds, each on the items not yet
released: by default the adaptive schedule (round 1 at 1% of the budget, then one round, or two when a noisy
count of the users round 1 boosted says so), or with --rounds/--ratio R rounds with the budget split
geometrically over them (fractions proportional to ratio^(R-i)); the release adds the round that released
each item.

With --mechanism partition-selection ((ε, δ)-DP only) each user keeps one of its items, uniformly at random
(--max-contributions does not apply), and an item kept by n users is released with the largest probability
π(n) that (ε, δ)-DP allows (Desfontaines et al. 2022); the release is the items only. It beats the WGM where
users hold about one item each.
"""

_DISCOVER_EPILOG = """\
The release goes to --output or stdout. A summary goes to stderr: σ, T, the budget spent (the measurement's
privacy map at one user), Δ0, and counts of the *raw input* (rows; in the demo also the missing mass and
the number of distinct items). Those counts are not differentially private: they are for the data owner and
must not be published with the release.
"""

_DISCOVER_EXAMPLES = """\
examples:
  opendp-wgm discover                                        # synthetic Zipf demo
  opendp-wgm discover ratings.parquet --user u --item x --epsilon 1 --delta 1e-5 -o released.parquet
  opendp-wgm discover words.csv.gz --rho 0.1 --delta 1e-6 --max-contributions 50
  opendp-wgm discover events.parquet --passes 8 -o released.parquet    # input larger than memory
  opendp-wgm discover ratings.parquet --user u --item x --mechanism dp-sips --rounds 3 --ratio 0.3
  opendp-wgm discover reviews.csv --user u --item x --mechanism partition-selection --epsilon 1 --delta 1e-5
  opendp-wgm discover events.ndjson.gz -o - > released.csv            # CSV on stdout, summary on stderr
  opendp-wgm discover --uri sqlite://events.db --query "select user, item from events" -o released.json
  opendp-wgm discover --dry-run --epsilon 0.5 --plot curve.png        # σ, T and the release curve only
"""


def add_parser(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    """Register the command's parser (its ``run`` is :func:`run`)."""
    _add_release_command(
        subparsers,
        "discover",
        "release frequent items with the Weighted Gaussian Mechanism (DP set union)",
        _DISCOVER_DESCRIPTION,
        _DISCOVER_EPILOG,
        proofs="docs/privacy.md",
        examples=_DISCOVER_EXAMPLES,
        options=_add_mechanism_arguments,
        columns="item, noisy_weight; and round with dp-sips; item only with partition-selection",
        run=run,
    )


_MECHANISMS = ("wgm", "dp-sips", "partition-selection")


def _add_mechanism_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("mechanism")
    group.add_argument(
        "--mechanism",
        choices=_MECHANISMS,
        default="wgm",
        help="wgm: one round (default); dp-sips: several rounds, each on the items not yet released "
        "(default: the adaptive schedule, 2 or 3 rounds); partition-selection: one item per user, released "
        "with the optimal (ε, δ) probability of its count (--epsilon only)",
    )
    _add_sips_arguments(group, "--mechanism dp-sips")


def run(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    """Release and report; the heavy imports (OpenDP, NumPy, the measurements) happen here, not at parse time."""
    from opendp_wgm.cli._auto import refuse_auto
    from opendp_wgm.cli._errors import CLIError
    from opendp_wgm.cli._report import (
        _not_private,
        _Plan,
        _print_head,
        _release_and_report,
        _sips_lines,
        _sips_name,
        _sips_outcome,
        _wgm_line,
    )
    from opendp_wgm.domains import user_items_space
    from opendp_wgm.privacy.calibrate import DPSIPSCalibration, WGMCalibration, calibrate_dp_sips, calibrate_wgm

    budget = _budget(args)
    noise = _noise(args)
    execution = _execution(args)
    rounds, ratio = _sips_options(args, sips=args.mechanism == "dp-sips", when="--mechanism dp-sips")

    # each plan imports its own mechanism (the facade imports its module only): a release imports only the one it runs
    def plan_sips() -> _Plan:
        from opendp_wgm.measurements import make_dp_sips
        from opendp_wgm.measurements.dp_sips import dp_sips_arguments

        # calibrate once: the measurement is built from this calibration, which the report also prints
        # the constructor's default: the adaptive schedule unless --rounds/--ratio give one
        calibration = calibrate_dp_sips(**budget.kwargs(), rounds=rounds, ratio=ratio, adaptive=None)
        measurement = make_dp_sips(
            *user_items_space(args.user, args.item),
            **dp_sips_arguments(calibration, noise=noise, **execution.kwargs()),
        )
        lines = _sips_lines(calibration, noise=noise, label="calibration")
        name = _sips_name(calibration)
        outcome = _sips_outcome if calibration.statistic_scale is not None else None
        return _Plan(name, measurement, [*lines, execution.line()], curve=calibration, outcome=outcome)

    def plan_partition_selection() -> _Plan:
        from opendp_wgm.measurements import make_partition_selection

        refuse_auto(budget, "--mechanism partition-selection (one item per user)")
        if budget.epsilon is None:
            raise CLIError("--mechanism partition-selection needs --epsilon: it is (ε, δ)-DP, with no zCDP statement")
        if args.noise is not None or budget.noise_delta_fraction is not None:
            raise CLIError("--noise and --noise-delta-fraction do not apply to --mechanism partition-selection")
        measurement = make_partition_selection(
            *user_items_space(args.user, args.item), epsilon=budget.epsilon, delta=budget.delta, **execution.kwargs()
        )
        line = "  mechanism     one uniformly chosen item per user (Δ0 = 1), released w.p. π(count)"
        return _Plan("partition selection", measurement, [line, execution.line()])

    def plan_auto() -> _Plan:
        from opendp_wgm.cli._auto import auto_plan
        from opendp_wgm.measurements import make_dp_sips_from_budget, make_wgm_from_budget
        from opendp_wgm.privacy.budget import Budget

        sips = args.mechanism == "dp-sips"
        assert budget.auto_fraction is not None  # set with --max-contributions auto
        fraction = 0.5 if budget.noise_delta_fraction is None else budget.noise_delta_fraction
        space = user_items_space(args.user, args.item)
        if sips:
            measurement = make_dp_sips_from_budget(
                *space, max_contributions="auto", delta=budget.delta, epsilon=budget.epsilon, rho=budget.rho,
                rounds=rounds, ratio=ratio, auto_fraction=budget.auto_fraction, noise_delta_fraction=fraction,
                noise=noise, **execution.kwargs(),
            )
        else:
            measurement = make_wgm_from_budget(
                *space, max_contributions="auto", delta=budget.delta, epsilon=budget.epsilon, rho=budget.rho,
                auto_fraction=budget.auto_fraction, noise_delta_fraction=fraction, noise=noise, **execution.kwargs(),
            )

        def curve_at(max_contributions: int, rest: Budget) -> WGMCalibration | DPSIPSCalibration:
            if sips:
                return calibrate_dp_sips(
                    max_contributions=max_contributions, delta=rest.delta, epsilon=rest.epsilon, rho=rest.rho,
                    rounds=rounds, ratio=ratio, noise_delta_fraction=fraction,
                )
            return calibrate_wgm(
                max_contributions=max_contributions, delta=rest.delta, epsilon=rest.epsilon, rho=rest.rho,
                noise_delta_fraction=fraction,
            )

        note = "at Δ0 = 1 (ε, δ): the optimal partition selection instead" if budget.epsilon is not None else None
        return auto_plan(
            budget, name="DP-SIPS" if sips else "WGM", measurement=measurement, curve_at=curve_at,
            outcome=_sips_outcome if sips and rounds is None and ratio is None else None, note=note,
        )

    def plan() -> _Plan:
        if budget.auto and args.mechanism != "partition-selection":
            return plan_auto()
        if args.mechanism == "dp-sips":
            return plan_sips()
        if args.mechanism == "partition-selection":
            return plan_partition_selection()
        from opendp_wgm.measurements import make_wgm
        from opendp_wgm.measurements.wgm import wgm_arguments

        calibration = calibrate_wgm(**budget.kwargs())
        measurement = make_wgm(
            *user_items_space(args.user, args.item), **wgm_arguments(calibration, noise=noise, **execution.kwargs())
        )
        line = _wgm_line(calibration.scale, calibration.threshold, calibration.max_contributions, noise)
        return _Plan("WGM", measurement, [f"  calibration   {line}", execution.line()], curve=calibration)

    def evaluate(data: pl.DataFrame, released: pl.DataFrame) -> list[str]:
        from opendp_wgm import metrics  # the demo's only

        distinct = data.get_column(args.item).n_unique()
        mm = metrics.missing_mass(data, released, user=args.user, item=args.item)
        return [_not_private("demo data", f"{distinct:,} distinct items; missing mass of the release = {mm:.4f}")]

    return _release_and_report(
        args, stdout=stdout, stderr=stderr, budget=budget, plan=plan, evaluate=evaluate, show=_print_head
    )
