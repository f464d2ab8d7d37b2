r"""The adaptive DP-SIPS schedule's two branches on the real data: which one the rule picks, and what each gives.

Run from the repository root::

    python benchmarks/bench_dp_sips_branches.py                     # every data set found, 5 trials
    python benchmarks/bench_dp_sips_branches.py --trials 20 --datasets reddit_pushshift,lastfm_hetrec2011

Prints a Markdown table on stdout (progress on stderr); data sets absent from ``--data-dir`` are skipped.

Setting: ε = 1, δ = 1e-5, Δ0 = 100, the (ε, δ) calibration of the adaptive schedule
(:func:`opendp_wgm.privacy.calibrate.calibrate_dp_sips` with ``adaptive=True``). Each trial runs round 1 once
with the package's kernel pieces (a benchmark, not a release path), then **both** branches from that same round
1 (sparse: one round; dense: two rounds), so their difference is measured on the same first release. Columns:
the WGM (:func:`opendp_wgm.make_wgm_from_budget`), the sparse and the dense branch, the adaptive mechanism (the
branch its rule picks from round 1's release and the noisy two-bin count), how often it picked the dense branch,
and the boosted share of the users still holding unreleased items — the count's true value, a non-private
diagnostic printed to show how far each data set is from the rule's cut (1/4).

This is a script, not a test: nothing here runs under pytest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np
import opendp.prelude as dp
import polars as pl

import opendp_wgm as wgm
from opendp_wgm import datasets

# Private kernel pieces: the simulation runs exactly the steps make_dp_sips chains.
from opendp_wgm._spaces import _prepare_frame, _Space
from opendp_wgm.engines.polars import (
    bounded_lists_plan,
    distinct_pairs_plan,
    lattice_histogram_plan,
    noisy_above_threshold,
    release_above_threshold,
)
from opendp_wgm.measurements.dp_sips import _flag_released, _user_bins, dense_branch
from opendp_wgm.metrics import Truth, missing_mass
from opendp_wgm.privacy.calibrate import calibrate_dp_sips
from opendp_wgm.privacy.threshold import LATTICE_BITS

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
EPSILON, DELTA, MAX_CONTRIBUTIONS = 1.0, 1e-5, 100


def one_round(frame: pl.DataFrame, space: _Space, scale: float, threshold: float) -> pl.Series:
    lists = bounded_lists_plan(frame.lazy(), space, MAX_CONTRIBUTIONS)
    histogram = lattice_histogram_plan(lists, space, MAX_CONTRIBUTIONS).collect()
    out = release_above_threshold(histogram, space.item, scale=scale, threshold=threshold, noise="lattice")
    return out.get_column(space.item)


def rounds_after(frame: pl.DataFrame, space: _Space, first: pl.Series, plan: list[tuple[float, float]]) -> pl.Series:
    released = [first]
    for scale, threshold in plan:
        remaining = frame.filter(~pl.col(space.item).is_in(pl.concat(released).implode()))
        released.append(one_round(remaining, space, scale, threshold))
    return pl.concat(released)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder of the data sets")
    parser.add_argument("--trials", type=int, default=5, help="trials per data set (default: 5)")
    parser.add_argument("--datasets", default="all", help="comma-separated names, or 'all' (default)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    dp.enable_features("contrib", "honest-but-curious")
    cal = calibrate_dp_sips(max_contributions=MAX_CONTRIBUTIONS, epsilon=EPSILON, delta=DELTA, adaptive=True)
    assert cal.statistic_scale is not None
    sparse = list(zip(cal.scales[1:], cal.thresholds[1:], strict=True))
    dense = list(zip(cal.branch_scales, cal.branch_thresholds, strict=True))
    measurement = wgm.make_wgm_from_budget(
        *wgm.user_items_space("user", "item"), max_contributions=MAX_CONTRIBUTIONS, epsilon=EPSILON, delta=DELTA
    )
    space = _Space("user", "item", None, lazyframe_domain=False)
    names = sorted(datasets.DATASETS) if args.datasets == "all" else args.datasets.split(",")
    print(f"trials: {args.trials}; ε = {EPSILON:g}, δ = {DELTA:g}, Δ0 = {MAX_CONTRIBUTIONS}\n")
    print("| data set | WGM | sparse branch | dense branch | adaptive | dense picked | boosted share |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        try:
            df = datasets.load(name, args.data_dir)
        except FileNotFoundError:
            print(f"{name}: absent, skipped", file=sys.stderr)
            continue
        truth = Truth.of(df)
        frame = _prepare_frame(df, space).collect()
        pairs = distinct_pairs_plan(frame.lazy(), space).collect().lazy()  # the count reads distinct pairs
        rows: dict[str, list[float]] = {k: [] for k in ("wgm", "sparse", "dense", "adaptive", "picked", "share")}
        for _ in range(args.trials):
            rows["wgm"].append(missing_mass(truth, measurement(df)))
            first = one_round(frame, space, cal.scales[0], cal.thresholds[0])
            bins = _user_bins(_flag_released(pairs, first.to_frame(), space.item), space)
            noisy, _ = noisy_above_threshold(bins << LATTICE_BITS, scale=cal.statistic_scale, threshold=0.0)
            picked = dense_branch(float(noisy[0]), float(noisy[1]))
            mm = {k: missing_mass(truth, rounds_after(frame, space, first, plan))
                  for k, plan in (("sparse", sparse), ("dense", dense))}
            rows["sparse"].append(mm["sparse"])
            rows["dense"].append(mm["dense"])
            rows["adaptive"].append(mm["dense" if picked else "sparse"])
            rows["picked"].append(float(picked))
            rows["share"].append(float(bins[0] / max(int(np.sum(bins)), 1)))
        m = {k: statistics.fmean(v) for k, v in rows.items()}
        print(f"| {name} | {m['wgm']:.3f} | {m['sparse']:.3f} | {m['dense']:.3f} | {m['adaptive']:.3f} | "
              f"{m['picked']:.0%} | {m['share']:.2f} |", flush=True)
        print(f"{name}: done", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
