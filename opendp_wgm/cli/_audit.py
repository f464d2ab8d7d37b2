"""``opendp-wgm audit``: the command's arguments, the shipped mechanisms it audits, and its run function.

:mod:`opendp_wgm.cli.audit` registers the command and adds these arguments (:func:`populate`) only when the
command is parsed, so that ``opendp-wgm --help`` imports nothing heavy; :func:`run_audit` raises
``ValueError`` / ``TypeError`` / ``ImportError`` on bad input, which the command prints as one line.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypedDict

if TYPE_CHECKING:
    import opendp.prelude as dp
    import polars as pl


__all__ = ["AUDIT_HELP", "MECHANISMS", "build_mechanism", "populate", "run_audit"]

MECHANISMS = (
    "wgm", "wgm-top-k", "wgm-hitting-set", "opendp-key-release", "dp-sips", "wgm-underclaimed", "dp-sips-underclaimed"
)

AUDIT_HELP = "test a shipped mechanism's privacy claim empirically on worst-case neighbours"
AUDIT_DESCRIPTION = """\
Release many times on both sides of worst-case neighbouring datasets for user-level set union (a user with
t = 1..Δ0 unique items; a shared item held by ⌊T⌋ + 1 users), count events (item released, released set),
and compare Clopper-Pearson lower bounds on δ with the mechanism's own claim m.map(1). The family-wise error
level is --alpha: a correct mechanism is flagged with probability at most α.

  wgm                 the WGM (σ = --sigma, T = --threshold, Δ0 = --max-contributions)
  wgm-top-k           the WGM, then peeling of k items (scale --peel-scale)
  wgm-hitting-set     the WGM, then user peeling of k items (scale --peel-scale)
  opendp-key-release  OpenDP's own key release, calibrated to the WGM's (ρ, δ) at d_in = 1
  dp-sips             DP-SIPS, two rounds each at σ = --sigma, T = --threshold
  wgm-underclaimed    the WGM whose map reports half its δ: NOT private as claimed (must be flagged)
  dp-sips-underclaimed  DP-SIPS (two rounds) whose map reports half its δ (must be flagged)

Exit status: 0 when no violation is found, 1 when one is, 2 on bad input.
"""
AUDIT_EPILOG = """\
examples:
  opendp-wgm audit                                            # the WGM, σ = 4, T = 7 (δ ≈ 0.067)
  opendp-wgm audit --mechanism wgm,wgm-top-k,wgm-hitting-set,opendp-key-release,wgm-underclaimed --workers 2
  opendp-wgm audit --mechanism wgm --sigma 1 --threshold 3 --trials 20000 --plot audit.png
"""


class _Stage1(TypedDict):
    """The WGM stage of the two-stage mechanisms the audit builds (keyword arguments)."""

    max_contributions: int
    wgm_scale: float
    wgm_threshold: float


def build_mechanism(
    name: str, *, sigma: float, threshold: float, max_contributions: int, k: int, peel_scale: float
) -> dp.Measurement:
    """One of :data:`MECHANISMS` on ``wgm.user_items_space()`` (a module-level function: it pickles)."""
    import opendp_wgm as wgm
    from opendp_wgm._validation import _check_choice
    from opendp_wgm.audit import make_underclaimed

    _check_choice("mechanism", name, MECHANISMS)
    space = wgm.user_items_space()
    stage_1 = _Stage1(max_contributions=max_contributions, wgm_scale=sigma, wgm_threshold=threshold)
    base = wgm.make_wgm(*space, max_contributions=max_contributions, scale=sigma, threshold=threshold)
    if name == "wgm":
        return base
    if name == "wgm-underclaimed":
        return make_underclaimed(base, 0.5)
    if name in ("dp-sips", "dp-sips-underclaimed"):
        sips = wgm.make_dp_sips(
            *space, max_contributions=max_contributions, scales=[sigma] * 2, thresholds=[threshold] * 2
        )
        return sips if name == "dp-sips" else make_underclaimed(sips, 0.5)
    if name == "wgm-top-k":
        return wgm.make_wgm_top_k(*space, k=k, peel_scale=peel_scale, **stage_1)
    if name == "wgm-hitting-set":
        return wgm.make_wgm_hitting_set(*space, k=k, peel_scale=peel_scale, **stage_1)
    rho, delta = base.map(1)
    return wgm.make_opendp_key_release(*space, max_contributions=max_contributions, rho=rho, delta=delta)


def _names(text: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [n for n in names if n not in MECHANISMS]
    if not names or unknown:
        msg = f"expected a comma-separated list among {', '.join(MECHANISMS)} (found {text!r})"
        raise argparse.ArgumentTypeError(msg)
    return names


def populate(parser: argparse.ArgumentParser) -> None:
    """Add the ``audit`` command's description and arguments to ``parser``."""
    from opendp_wgm.cli._args import _positive_int

    parser.description = AUDIT_DESCRIPTION
    parser.epilog = AUDIT_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--mechanism", type=_names, default=("wgm",), metavar="NAME[,NAME]",
                        help="mechanisms to audit, comma-separated (default: wgm)")
    parser.add_argument("--trials", type=_positive_int, default=5000,
                        help="releases per side and neighbouring pair (default: 5000)")
    parser.add_argument("--sigma", type=float, default=4.0, help="σ of the WGM stage (default: 4)")
    parser.add_argument("--threshold", type=float, default=7.0, help="T of the WGM stage (default: 7)")
    parser.add_argument("--max-contributions", type=_positive_int, default=1, metavar="D0",
                        help="Δ0 of the WGM stage; pairs with t = 1..Δ0 unique items (default: 1)")
    parser.add_argument("--k", type=_positive_int, default=None,
                        help="two-stage mechanisms' k (default: --shared-items + Δ0, so every candidate is picked)")
    parser.add_argument("--peel-scale", type=float, default=2.0, help="two-stage peeling scale (default: 2)")
    parser.add_argument("--users", type=_positive_int, default=200, help="users of the base dataset (default: 200)")
    parser.add_argument("--shared-items", type=_positive_int, default=2,
                        help="items the base users share (default: 2)")
    parser.add_argument("--alpha", type=float, default=1e-3, help="family-wise error level (default: 1e-3)")
    parser.add_argument("--workers", type=_positive_int, default=1, help="worker processes (default: 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the base dataset (default: 0)")
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG",
                        help="save the privacy-region plot (needs matplotlib; one file per mechanism when several)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _plot_path(path: Path, name: str, several: bool) -> Path:
    return path.with_name(f"{path.stem}-{name}{path.suffix}") if several else path


def _show(table: pl.DataFrame) -> pl.DataFrame:
    """The report's columns for a terminal: rates with their intervals, the bounds, the verdict."""
    import polars as pl

    def rate(p: str) -> pl.Expr:
        return pl.format(
            "{} [{}, {}]", *(pl.col(c).round(4) for c in (p, f"{p}_low", f"{p}_high"))
        ).alias(f"P[{'D' if p == 'p_d' else 'D′'}]")

    return table.select(
        "pair", "event", rate("p_d"), rate("p_d_prime"),
        pl.col("epsilon_lower").round(3).alias("ε ≥"),
        pl.col("delta_lower").round(5).alias("δ ≥"),
        pl.col("delta_claimed").round(5).alias("δ claimed"),
        pl.when(pl.col("violation")).then(pl.lit("VIOLATION")).otherwise(pl.lit("ok")).alias("verdict"),
    )


def run_audit(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    """Audit each ``--mechanism``; print a table and a verdict line per mechanism. 0 if none is flagged, else 1."""
    import polars as pl

    from opendp_wgm._validation import _check_positive, _check_probability
    from opendp_wgm.audit import audit, worst_case_pairs

    _check_probability("alpha", args.alpha)
    _check_positive("peel_scale", args.peel_scale)
    if args.plot is not None:
        import matplotlib  # noqa: F401 - fail before the releases, not after

    k = args.k if args.k is not None else args.shared_items + args.max_contributions
    pairs = worst_case_pairs(
        args.max_contributions, args.threshold, users=args.users, shared_items=args.shared_items, seed=args.seed
    )
    flagged = False
    for name in args.mechanism:
        build = functools.partial(
            build_mechanism, name, sigma=args.sigma, threshold=args.threshold,
            max_contributions=args.max_contributions, k=k, peel_scale=args.peel_scale,
        )
        report = audit(build, pairs, trials=args.trials, alpha=args.alpha, workers=args.workers,
                       progress=not args.no_progress)
        with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=220, fmt_str_lengths=60, tbl_hide_dataframe_shape=True,
                       tbl_hide_column_data_types=True):
            print(f"{name}:", file=stdout)
            print(_show(report.table()), file=stdout)
        print(f"{name}: {report.verdict()}; {report.releases_per_second:.0f} releases/s", file=stdout)
        if args.plot is not None:
            path = _plot_path(args.plot, name, len(args.mechanism) > 1)
            report.plot(str(path))
            print(f"plot: {path}", file=stdout)
        flagged |= not report.passed
    return 1 if flagged else 0

