"""``opendp-wgm reproduce``: the argument parser and the entry point.

The lead's ``opendp_wgm.cli`` plugs it in with::

    parser = subparsers.add_parser("reproduce", help=REPRODUCE_HELP, description=REPRODUCE_DESCRIPTION,
                                   epilog=REPRODUCE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_reproduce_arguments(parser)
    parser.set_defaults(run=run_reproduce)

and ``python -m opendp_wgm.experiments ...`` runs :func:`main_reproduce` directly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from opendp_wgm._interrupt import _exit_on_interrupt
from opendp_wgm.experiments._config import EXPERIMENTS, METHODS, parse_grid

__all__ = [
    "REPRODUCE_DESCRIPTION",
    "REPRODUCE_EPILOG",
    "REPRODUCE_HELP",
    "add_reproduce_arguments",
    "main_reproduce",
    "run_reproduce",
]

#: OpenDP features the reproduce command enables in its own process (the library only asserts them).
FEATURES = ("contrib", "honest-but-curious", "idealized-numerics")

REPRODUCE_HELP = "reproduce the paper's set-union, top-k or hitting-set experiment (tables and plots)"
REPRODUCE_DESCRIPTION = """\
Run one of the paper's experiments on the shared data sets: every method x setting x trial, with a progress
bar. Rows are appended to <out>/<experiment>/trials.csv as trials complete (an interrupted run keeps them;
--resume continues it, with the settings stored in config.json beside them: a resume with other settings is
refused; an existing trials.csv is never replaced without --force), then summary.md / summary.csv (mean ±
std over trials) and one PNG per metric are written.

  set-union    missing mass, ℓ∞ missing mass, cardinality, run time vs Δ0 (--l0): WGM, Policy Gaussian
               (ℓ2 descent and the reference's "L1"), Policy Greedy (fixed), OpenDP's built-in key release,
               DP-SIPS with R = 3, r = 0.3, with two rounds at (0.1, 0.9) and its default (adaptive), and
               partition selection (the optimal one-item-per-user selection, Δ0 = 1 at every x)
  top-k        top-k missing mass, top-k ℓ1 loss, run time vs k (--k): WGM-then-top-k (Δ0 =
               --max-contributions) and limited domain with k̄ = m·k for m in --k-bar-multipliers
  hitting-set  missed users, run time vs k (--k): WGM-then-hitting-set, non-private greedy, user peeling on
               the true domain
"""
REPRODUCE_EPILOG = f"""\
methods: set-union {', '.join(METHODS['set-union'])}; top-k {', '.join(METHODS['top-k'])};
hitting-set {', '.join(METHODS['hitting-set'])}. Optional (not run by default; extra [peers]): set-union
pipeline_dp (PipelineDP's select_partitions, truncated geometric).

This command enables OpenDP's "contrib", "honest-but-curious" and "idealized-numerics" features in its own
process: the policy baselines' maps are the published ones, which assume exact arithmetic or leave a gap
(docs/baselines.md).

examples:
  opendp-wgm reproduce set-union --data ../shared/data --out /tmp/results
  opendp-wgm reproduce top-k --data ../shared/data --out /tmp/results --k 5,10,20 --trials 2
  opendp-wgm reproduce hitting-set --data ../shared/data --out /tmp/results --datasets steam_200k
"""


def _grid(name: str) -> Callable[[str], tuple[int, ...]]:
    def parse(text: str) -> tuple[int, ...]:
        try:
            return parse_grid(name, text)
        except (TypeError, ValueError) as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def _names(text: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names")
    return names


def add_reproduce_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``reproduce`` arguments to ``parser`` (a top-level parser or a subparser)."""
    parser.add_argument("experiment", choices=EXPERIMENTS, help="which experiment to run")
    parser.add_argument("--data", required=True, type=Path, metavar="DIR", help="folder laid out like ../shared/data")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="results folder (created)")
    parser.add_argument("--datasets", type=_names, default=None, metavar="A,B", help="data sets (default: the paper's)")
    parser.add_argument("--methods", type=_names, default=None, metavar="A,B", help="methods (default: all)")
    parser.add_argument("--trials", type=int, default=5, help="trials per method and setting (default: 5)")
    parser.add_argument("--epsilon", type=float, default=1.0, help="ε of every private method (default: 1)")
    parser.add_argument("--delta", type=float, default=1e-5, help="δ of every private method (default: 1e-5)")
    parser.add_argument(
        "--l0", type=_grid("l0"), default=(1, 50, 100, 150, 200, 300), metavar="LIST",
        help="set union: Δ0 grid (default: 1,50,100,150,200,300)",
    )
    parser.add_argument(
        "--k", type=_grid("k"), default=(5, 10, 20, 50, 100, 200), metavar="LIST",
        help="top-k / hitting set: k grid (default: 5,10,20,50,100,200)",
    )
    parser.add_argument(
        "--max-contributions", type=int, default=100, metavar="D0",
        help="top-k / hitting set: Δ0 of the WGM stage (default: 100)",
    )
    parser.add_argument(
        "--k-bar-multipliers", type=_grid("k_bar_multipliers"), default=(1, 5, 10), metavar="LIST",
        help="top-k: limited domain's k̄/k (default: 1,5,10)",
    )
    parser.add_argument("--alpha", type=float, default=3.0, help="policy mechanisms' α (default: 3)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the one user-order shuffle per data set")
    parser.add_argument(
        "--resume", action="store_true",
        help="keep and skip the rows of an interrupted run (same settings only; a row cut short is redone)",
    )
    parser.add_argument(
        "--force", action="store_true",
        help="start afresh even if <out>/<experiment>/trials.csv exists (its rows are replaced; without --resume "
        "or --force an existing one is refused)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--no-plots", action="store_true", help="write tables only (plots need matplotlib)")
    return parser


def run_reproduce(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run the experiment described by parsed ``args``; print where the results are. Returns 0.

    Bad input raises ``ValueError`` / ``TypeError`` / ``FileNotFoundError`` / ``NotADirectoryError``, an
    earlier run's ``trials.csv`` without ``--resume`` or ``--force`` ``FileExistsError``, and a missing
    matplotlib ``ImportError``, all before any data is read; the caller turns them into its one-line
    error. This is the entry points' runner (``opendp-wgm reproduce``, :func:`main_reproduce`): it owns the
    process, so Ctrl-C ends it with status 130 and one line on stderr, the trials done so far kept for
    ``--resume`` (no ``KeyboardInterrupt`` is raised inside OpenDP's callbacks, which would crash the process).
    From Python, call :func:`opendp_wgm.experiments.reproduce` instead.
    """
    from opendp_wgm.experiments._runner import reproduce

    stdout = sys.stdout if stdout is None else stdout
    trials = args.out / args.experiment / "trials.csv"
    interrupted = (
        f"opendp-wgm reproduce: interrupted; the trials done so far are kept in {trials} (rerun with --resume)"
    )
    with _exit_on_interrupt(lambda: None, interrupted):
        result = reproduce(
            args.experiment,
            data_dir=args.data,
            out_dir=args.out,
            datasets=args.datasets,
            methods=args.methods,
            trials=args.trials,
            epsilon=args.epsilon,
            delta=args.delta,
            l0=args.l0,
            k=args.k,
            max_contributions=args.max_contributions,
            k_bar_multipliers=args.k_bar_multipliers,
            alpha=args.alpha,
            seed=args.seed,
            resume=args.resume,
            force=args.force,
            progress=not args.no_progress,
            plot=not args.no_plots,
        )
    print(f"{result.rows.height} trial rows in {result.trials_csv}", file=stdout)
    print(f"summary: {result.summary_md} (and {result.summary_csv.name})", file=stdout)
    for path in result.plots:
        print(f"plot: {path}", file=stdout)
    return 0


def main_reproduce(argv: list[str] | None = None) -> int:
    """``opendp-wgm reproduce`` as a standalone entry point: parse ``argv``, enable features, run.

    Returns 0 on success, 2 on bad input (one line on stderr), 130 on Ctrl-C (rows written so far are kept).
    """
    import opendp.prelude as dp

    parser = argparse.ArgumentParser(
        prog="opendp-wgm reproduce",
        description=REPRODUCE_DESCRIPTION,
        epilog=REPRODUCE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_reproduce_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0
    dp.enable_features(*FEATURES)  # this process is ours; the library only asserts features
    try:
        return run_reproduce(args)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError, NotADirectoryError, ImportError) as err:
        print(f"opendp-wgm reproduce: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("opendp-wgm reproduce: interrupted; the rows written so far are kept (use --resume)", file=sys.stderr)
        return 130
