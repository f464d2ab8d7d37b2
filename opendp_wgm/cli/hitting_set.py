"""``opendp-wgm hitting-set``: K items that together cover many users: WGM, then user peeling."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from opendp_wgm.cli._args import (
    _add_release_command,
    _add_two_stage_arguments,
    _budget,
    _execution,
    _noise,
    _split,
    _stage_1_options,
)

if TYPE_CHECKING:
    import polars as pl

    from opendp_wgm.cli._errors import _Parser

_HITTING_SET_DESCRIPTION = """\
Release at most K items that together cover many users (a k-hitting set: as many users as possible hold at
least one of them), over an unknown item domain, calibrated to a per-user budget: (ε, δ)-DP with --epsilon
(default ε = 1), or approximate (ρ, δ)-zCDP with --rho. Neighbouring datasets differ by all rows of one user
(add/remove).

The paper's WGM-then-peeling: the WGM releases candidate items with --split of the budget, then K rounds of
the exponential mechanism each pick a candidate held by many users not covered by the earlier picks
(user peeling, on the unclipped data) with the rest of the budget. With --stage-1 dp-sips the candidates
come from DP-SIPS (rounds of the WGM, each on the items not yet released: the adaptive schedule, or
--rounds/--ratio) at the same share of the budget: better where users hold many items.
"""

_HITTING_SET_EPILOG = """\
The release (item, rank; rank = the round that picked the item) goes to --output or stdout. A summary
goes to stderr: the calibration (σ and T of the WGM, the peeling's per-round ε' and each stage's loss at one
user), the budget spent (the measurement's privacy map at one user), and counts of the *raw input* (rows;
in the demo also the users the release misses, its coverage, and the users that the non-private greedy
algorithm misses). Those counts are not differentially private: they are for the data owner and must not
be published with the release.
"""

_HITTING_SET_EXAMPLES = """\
examples:
  opendp-wgm hitting-set --k 10                              # synthetic Zipf demo
  opendp-wgm hitting-set ratings.parquet --user u --item x --k 100 --epsilon 1 --delta 1e-5 -o picks.csv
  opendp-wgm hitting-set words.csv --k 20 --rho 0.1 --delta 1e-6 --split 0.3
  opendp-wgm hitting-set events.parquet --k 100 --passes 4
  opendp-wgm hitting-set baskets.parquet --k 100 --stage-1 dp-sips --rounds 3 --ratio 0.3
"""


def add_parser(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    """Register the command's parser (its ``run`` is :func:`run`)."""
    _add_release_command(
        subparsers,
        "hitting-set",
        "release K items that together cover many users (WGM, then user peeling)",
        _HITTING_SET_DESCRIPTION,
        _HITTING_SET_EPILOG,
        proofs="docs/hitting_set.md, docs/privacy.md",
        examples=_HITTING_SET_EXAMPLES,
        options=lambda parser: _add_two_stage_arguments(
            parser, "hitting set", "number of items (peeling rounds), >= 1 (required)"
        ),
        columns="item, rank",
        run=run,
        two_stage=True,
    )


def run(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    """Release and report; the heavy imports (OpenDP, NumPy, the measurements) happen here, not at parse time."""
    from opendp_wgm import metrics
    from opendp_wgm.cli._report import _not_private, _Plan, _print_ranked, _release_and_report, _two_stage_lines
    from opendp_wgm.domains import user_items_space
    from opendp_wgm.measurements import calibrate_wgm_hitting_set, greedy_hitting_set
    from opendp_wgm.measurements.hitting_set import wgm_hitting_set_of_calibration

    budget = _budget(args)
    noise = _noise(args)
    execution = _execution(args)
    split = _split(args)
    stage_1 = _stage_1_options(args)

    def plan() -> _Plan:
        cal = calibrate_wgm_hitting_set(k=args.k, split=split, **budget.kwargs(), **stage_1)
        space = user_items_space(args.user, args.item)
        measurement = wgm_hitting_set_of_calibration(*space, cal, noise=noise, item=None, **execution.kwargs())
        lines = _two_stage_lines(
            cal.stage_1,
            split=split,
            noise=noise,
            peeling=f"{cal.k} rounds, ε' = {cal.peel_round_epsilon:.6g} per round",
            first="ε" if budget.epsilon is not None else "ρ",
            losses=(cal.wgm_loss, cal.peel_loss),
        )
        name = "WGM-then-peeling" if cal.sips is None else "DP-SIPS-then-peeling"
        return _Plan(
            name, measurement, [*lines, execution.line()], curve=cal.stage_1, released="a stage-1 candidate"
        )

    def plan_auto() -> _Plan:
        from opendp_wgm.cli._auto import two_stage_auto_plan
        from opendp_wgm.measurements import make_wgm_hitting_set_from_budget

        fraction = 0.5 if budget.noise_delta_fraction is None else budget.noise_delta_fraction
        return two_stage_auto_plan(
            budget, space=user_items_space(args.user, args.item), make=make_wgm_hitting_set_from_budget,
            calibrate=calibrate_wgm_hitting_set, k=args.k, split=split, noise=noise, stage_1=stage_1,
            execution=dict(execution.kwargs()), then="peeling", noise_delta_fraction=fraction,
        )

    def evaluate(data: pl.DataFrame, released: pl.DataFrame) -> list[str]:
        columns = {"user": args.user, "item": args.item}
        missed = metrics.missed_users(data, released, **columns)
        share = metrics.coverage(data, released, **columns)
        greedy = metrics.missed_users(data, greedy_hitting_set(data, args.k, **columns), **columns)
        users = data.get_column(args.user).n_unique()
        return [
            _not_private("demo data", f"{users:,} users; the release misses {missed:,} (coverage {share:.4f})"),
            _not_private("", f"the non-private greedy {args.k}-set misses {greedy:,}"),
        ]

    return _release_and_report(
        args, stdout=stdout, stderr=stderr, budget=budget, plan=plan_auto if budget.auto else plan, evaluate=evaluate,
        show=_print_ranked,
    )
