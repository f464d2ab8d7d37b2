"""``opendp-wgm top-k``: the K items held by the most users: WGM, then peeling (or the limited-domain baseline)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from opendp_wgm.cli._args import (
    _K_BAR_PER_K,
    _add_release_command,
    _add_two_stage_arguments,
    _budget,
    _execution,
    _noise,
    _positive_int,
    _split,
    _stage_1_options,
)
from opendp_wgm.cli._errors import CLIError

if TYPE_CHECKING:
    import polars as pl

    from opendp_wgm.cli._errors import _Parser

_TOP_K_DESCRIPTION = """\
Release a ranked list of at most K items held by the most users, over an unknown item domain, calibrated to
a per-user budget: (ε, δ)-DP with --epsilon (default ε = 1), or approximate (ρ, δ)-zCDP with --rho.
Neighbouring datasets differ by all rows of one user (add/remove).

--mechanism wgm (default; the paper's WGM-then-top-k): the WGM releases candidate items with --split of the
budget (σ and T calibrated as by `opendp-wgm discover`), then K rounds of exponential-mechanism peeling pick
the candidates held by the most users (exact, unclipped user counts) with the rest of the budget. With
--stage-1 dp-sips the candidates come from DP-SIPS (rounds of the WGM, each on the items not yet released:
the adaptive schedule, or --rounds/--ratio) at the same share of the budget: better where users hold many items.

--mechanism limited-domain (Durfee & Rogers 2019, the paper's baseline; (ε, δ)-DP only): the --k-bar items
of largest Δ0-bounded count compete, with Gumbel noise, against a threshold that pays for the rest of the
domain; the items ranked above the threshold are released, at most K.
"""

_TOP_K_EPILOG = """\
The release (item, rank; rank 1 = the first pick) goes to --output or stdout, in rank order. A summary goes to
stderr: the calibration (σ and T of the WGM, the peeling's per-round ε' and each stage's loss at one user),
the budget spent (the measurement's privacy map at one user), and counts of the *raw input* (rows; in the
demo also the top-K missing mass of the release). Those counts are not differentially private: they are for
the data owner and must not be published with the release.
"""

_TOP_K_EXAMPLES = """\
examples:
  opendp-wgm top-k --k 10                                    # synthetic Zipf demo
  opendp-wgm top-k ratings.parquet --user u --item x --k 100 --epsilon 1 --delta 1e-5 -o top100.csv
  opendp-wgm top-k words.csv --k 20 --rho 0.1 --delta 1e-6 --split 0.3
  opendp-wgm top-k words.csv --k 20 --mechanism limited-domain --k-bar 200
  opendp-wgm top-k baskets.parquet --k 100 --stage-1 dp-sips --rounds 3 --ratio 0.3
  opendp-wgm top-k events.parquet --k 100 --passes 4 --engine streaming
"""

_WGM_ONLY = "; --mechanism wgm only"


def add_parser(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    """Register the command's parser (its ``run`` is :func:`run`)."""
    _add_release_command(
        subparsers,
        "top-k",
        "release the K items held by the most users (WGM, then peeling; or limited-domain top-k)",
        _TOP_K_DESCRIPTION,
        _TOP_K_EPILOG,
        proofs="docs/top_k.md, docs/privacy.md",
        examples=_TOP_K_EXAMPLES,
        options=lambda parser: _add_two_stage_arguments(
            parser, "top-k", "number of items to release, >= 1 (required)", wgm_only=_WGM_ONLY,
            mechanism=_add_mechanism_arguments,
        ),
        columns="item, rank",
        run=run,
        two_stage=True,
        wgm_only=_WGM_ONLY,
        noise_delta_fraction=False,
    )


def _add_mechanism_arguments(group: argparse._ActionsContainer) -> None:
    """``--mechanism`` and the limited-domain baseline's ``--k-bar``."""
    group.add_argument(
        "--mechanism",
        choices=("wgm", "limited-domain"),
        default="wgm",
        help="WGM, then peeling on its candidates; or the limited-domain baseline (default: %(default)s)",
    )
    group.add_argument(
        "--k-bar",
        type=_positive_int,
        metavar="KBAR",
        help=f"size of the limited domain, >= K (default: {_K_BAR_PER_K}·K; --mechanism limited-domain only)",
    )


def run(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    """Release and report; the heavy imports (OpenDP, NumPy, the measurements) happen here, not at parse time."""
    import opendp.prelude as dp

    from opendp_wgm import metrics
    from opendp_wgm.cli._auto import refuse_auto
    from opendp_wgm.cli._report import _not_private, _Plan, _print_ranked, _release_and_report, _two_stage_lines
    from opendp_wgm.domains import user_items_space
    from opendp_wgm.measurements import make_dp_sips, make_limited_domain_top_k, make_wgm
    from opendp_wgm.measurements.baselines.limited_domain import LD_MAX_K_BAR
    from opendp_wgm.measurements.dp_sips import dp_sips_arguments
    from opendp_wgm.measurements.top_k import wgm_top_k_of_calibration
    from opendp_wgm.privacy.calibrate import DPSIPSCalibration, calibrate_wgm_top_k
    from opendp_wgm.privacy.peeling import TOP_K, peeling_loss

    budget = _budget(args)
    wgm = args.mechanism == "wgm"
    k_bar = _K_BAR_PER_K * args.k if args.k_bar is None else args.k_bar  # limited-domain only
    if wgm and args.k_bar is not None:
        raise CLIError("--k-bar applies only to --mechanism limited-domain")
    if not wgm:
        if budget.rho is not None:
            raise CLIError("--mechanism limited-domain is (ε, δ)-DP only: give --epsilon, not --rho")
        for option in ("split", "stage_1", "rounds", "ratio", "noise", "passes", "engine"):
            if getattr(args, option) is not None:
                raise CLIError(f"--{option.replace('_', '-')} applies only to --mechanism wgm")
        if args.k_bar is not None and args.k > args.k_bar:  # the library's check, named by the options
            raise CLIError(f"--k ({args.k}) must be <= --k-bar ({args.k_bar}): the limited domain holds --k-bar items")
        if k_bar > LD_MAX_K_BAR:  # the library's bound (the release holds k̄ + 1 scores), named by the options
            option = "--k-bar" if args.k_bar is not None else f"--k-bar (default {_K_BAR_PER_K}·K)"
            raise CLIError(f"{option} must be <= {LD_MAX_K_BAR:,} (found {k_bar:,}): the release holds k̄ + 1 scores")
    noise = _noise(args)
    execution = _execution(args)
    split = _split(args)
    stage_1_options = _stage_1_options(args) if wgm else {}

    def plan_wgm() -> _Plan:
        space = user_items_space(args.user, args.item)
        cal = calibrate_wgm_top_k(k=args.k, split=split, **budget.core_kwargs(), **stage_1_options)
        measurement = wgm_top_k_of_calibration(*space, cal, noise=noise, method="auto", item=None, **execution.kwargs())
        # each stage's loss is the map, at one user, of that stage as a measurement on its own (the composed
        # map is their sum); the peeling is charged k rounds, as in the composition
        approx_dp = budget.epsilon is not None
        measure = dp.approximate(dp.max_divergence()) if approx_dp else None
        first = cal.stage_1
        if isinstance(first, DPSIPSCalibration):
            stage_1 = make_dp_sips(*space, **dp_sips_arguments(first))
        else:
            stage_1 = make_wgm(
                *space,
                max_contributions=cal.max_contributions,
                scale=first.scale,
                threshold=first.threshold,
                output_measure=measure,
                epsilon=first.epsilon,
            )
        # the peeling's map charges k rounds whatever the candidates (its loss, not a measurement over k
        # placeholder candidates: the cost of planning does not grow with k)
        peel_loss = peeling_loss(
            1,
            k=cal.k,
            scale=cal.peel_scale,
            kind="approx_dp" if approx_dp else "approx_zcdp",
            accounting=TOP_K,
            delta=cal.peel_delta if approx_dp else 0.0,
        )
        assert isinstance(peel_loss, tuple)  # an approximate measure's (value, δ)
        peeling = f"{cal.k} rounds, ε' = {cal.peel_local_epsilon:.6g} per round (Gumbel scale {cal.peel_scale:.6g})"
        lines = _two_stage_lines(
            first,
            split=split,
            noise=noise,
            peeling=peeling,
            first="ε" if approx_dp else "ρ",
            losses=(stage_1.map(1), peel_loss),
        )
        name = "DP-SIPS-then-top-k" if isinstance(first, DPSIPSCalibration) else "WGM-then-top-k"
        return _Plan(name, measurement, [*lines, execution.line()], curve=first, released="a stage-1 candidate")

    def plan_auto() -> _Plan:
        from opendp_wgm.cli._auto import two_stage_auto_plan
        from opendp_wgm.measurements import make_wgm_top_k_from_budget

        return two_stage_auto_plan(
            budget, space=user_items_space(args.user, args.item), make=make_wgm_top_k_from_budget,
            calibrate=calibrate_wgm_top_k, k=args.k, split=split, noise=noise, stage_1=stage_1_options,
            execution=dict(execution.kwargs()), then="top-k",
        )

    def plan_limited_domain() -> _Plan:
        refuse_auto(budget, "--mechanism limited-domain")
        if budget.epsilon is None:  # pragma: no cover - --rho is refused above
            raise AssertionError("limited-domain top-k needs ε")
        measurement = make_limited_domain_top_k(
            *user_items_space(args.user, args.item),
            k=args.k,
            k_bar=k_bar,
            max_contributions=budget.kwargs()["max_contributions"],  # a fixed Δ0: auto is refused above
            epsilon=budget.epsilon,
            delta=budget.delta,
        )
        return _Plan(
            "limited-domain top-k",
            measurement,
            [f"  calibration   k̄ = {k_bar}, Δ0 = {budget.max_contributions}"],
        )

    def evaluate(data: pl.DataFrame, released: pl.DataFrame) -> list[str]:
        mm = metrics.top_k_missing_mass(data, released, args.k, user=args.user, item=args.item)
        return [_not_private("demo data", f"top-{args.k} missing mass of the release = {mm:.4f}")]

    return _release_and_report(
        args,
        stdout=stdout,
        stderr=stderr,
        budget=budget,
        plan=(plan_auto if budget.auto else plan_wgm) if wgm else plan_limited_domain,
        evaluate=evaluate,
        show=_print_ranked,
    )
