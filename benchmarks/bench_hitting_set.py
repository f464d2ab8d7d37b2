"""k-hitting set on the paper's data sets: ``python benchmarks/bench_hitting_set.py [--data-dir DIR]``.

For steam_200k, amazon_magazine_subscriptions and movielens_100k as in the paper, at ε = 1,
δ = 1e-5, Δ0 = 100 and k ∈ {5, 10, 20, 50, 100}, prints a Markdown table of missed users (mean ± standard
error over ``--trials`` calls, the reference's np.std(ddof=0)/√trials) and seconds per call for

- ``wgm+peel``: ``make_wgm_hitting_set_from_budget`` (private; (ε/2, δ/2) per stage, as the reference);
- ``greedy``: ``greedy_hitting_set`` (not private; deterministic, one call);
- ``true-domain peel``: ``user_peeling_on_true_domain`` with the whole (ε, δ) (not private in the domain).

Then one call on imdb_50k at k = 100 (target ≤ 3 s), with a breakdown: stage 1 (WGM), building the CSR
arrays, the sequential rounds, and the cost per round. Data sets missing from ``--data-dir`` are skipped.
The reference's values at k = 100 on steam_200k: 1600 ± 28 (wgm+peel) and 1181 (greedy).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import opendp.prelude as dp
import polars as pl

from opendp_wgm import datasets
from opendp_wgm._spaces import _Space
from opendp_wgm.domains import user_items_space
from opendp_wgm.measurements.baselines import greedy_hitting_set, user_peeling_on_true_domain
from opendp_wgm.measurements.hitting_set import (
    calibrate_wgm_hitting_set,
    make_wgm_hitting_set_from_budget,
)
from opendp_wgm.measurements.hitting_set import peel as _peel
from opendp_wgm.measurements.wgm import make_wgm
from opendp_wgm.metrics import missed_users

DATASETS = ("steam_200k", "amazon_magazine_subscriptions", "movielens_100k")
KS = (5, 10, 20, 50, 100)
EPSILON, DELTA, MAX_CONTRIBUTIONS = 1.0, 1e-5, 100
DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _mean_se(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.0f}"
    se = float(np.std(values)) / np.sqrt(len(values))  # ddof = 0, as the reference
    return f"{statistics.fmean(values):.0f} ± {se:.0f}"


def _timed(call):
    start = time.perf_counter()
    out = call()
    return out, time.perf_counter() - start


def bench_dataset(name: str, data: pl.DataFrame, ks: tuple[int, ...], trials: int) -> list[str]:
    n_users = data.get_column("user").n_unique()
    rows = []
    for k in ks:
        mech = make_wgm_hitting_set_from_budget(
            *user_items_space(), k=k, max_contributions=MAX_CONTRIBUTIONS, epsilon=EPSILON, delta=DELTA
        )
        wgm_missed, wgm_times, true_missed, true_times = [], [], [], []
        for _ in range(trials):
            out, seconds = _timed(functools.partial(mech, data))
            wgm_missed.append(missed_users(data, out))
            wgm_times.append(seconds)
            out, seconds = _timed(functools.partial(user_peeling_on_true_domain, data, k, epsilon=EPSILON, delta=DELTA))
            true_missed.append(missed_users(data, out))
            true_times.append(seconds)
        greedy, greedy_time = _timed(functools.partial(greedy_hitting_set, data, k))
        rows.append(
            f"| {name} | {n_users:,} | {k} | {_mean_se(wgm_missed)} | {statistics.fmean(wgm_times):.3f} | "
            f"{missed_users(data, greedy)} | {greedy_time:.3f} | {_mean_se(true_missed)} | "
            f"{statistics.fmean(true_times):.3f} |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def rounds_row(name: str, data: pl.DataFrame, k: int) -> str:
    """Instrumented stage 2 at ``k``: build and per-round cost on the WGM's candidates and on all items."""
    cal = calibrate_wgm_hitting_set(k=k, max_contributions=MAX_CONTRIBUTIONS, epsilon=EPSILON, delta=DELTA)
    space = _Space("user", "item", None, lazyframe_domain=False)
    lf = data.lazy()
    release = make_wgm(
        *user_items_space(),
        max_contributions=cal.wgm.max_contributions,
        scale=cal.wgm.scale,
        threshold=cal.wgm.threshold,
    )
    cells = []
    for candidates in (release(lf).get_column("item"), None):
        timings: dict[str, float] = {}
        _peel(lf, space, candidates, k, cal.peel_scale, timings=timings)
        per_round = timings["rounds"] / max(1, timings["n_rounds"])
        cells.append(f"{timings['n_candidates']:,} | {timings['build']:.3f} | {per_round * 1e3:.2f}")
    return f"| {name} | {k} | " + " | ".join(cells) + " |"


def bench_imdb(data: pl.DataFrame, k: int = 100) -> list[str]:
    """One end-to-end call, then one instrumented call (stage 1, build, rounds)."""
    mech = make_wgm_hitting_set_from_budget(
        *user_items_space(), k=k, max_contributions=MAX_CONTRIBUTIONS, epsilon=EPSILON, delta=DELTA
    )
    out, total = _timed(lambda: mech(data))
    missed = missed_users(data, out)
    cal = calibrate_wgm_hitting_set(k=k, max_contributions=MAX_CONTRIBUTIONS, epsilon=EPSILON, delta=DELTA)
    space = _Space("user", "item", None, lazyframe_domain=False)
    lf = data.lazy()
    release = make_wgm(
        *user_items_space(),
        max_contributions=cal.wgm.max_contributions,
        scale=cal.wgm.scale,
        threshold=cal.wgm.threshold,
    )
    candidates, stage1 = _timed(lambda: release(lf).get_column("item"))
    timings: dict[str, float] = {}
    _peel(lf, space, candidates, k, cal.peel_scale, timings=timings)
    per_round = timings["rounds"] / max(1, timings["n_rounds"])
    return [
        f"imdb_50k ({data.height:,} pairs), k = {k}: one call {total:.2f} s (target ≤ 3 s), {missed:,} missed users "
        f"of {data.get_column('user').n_unique():,}.",
        f"Instrumented call: stage 1 (WGM) {stage1:.2f} s, {candidates.len():,} candidates; stage 2 build "
        f"{timings['build']:.2f} s; {timings['n_rounds']} rounds {timings['rounds']:.2f} s "
        f"({per_round * 1e3:.2f} ms per round).",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("OPENDP_WGM_DATA", DEFAULT_DATA)))
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--datasets", nargs="*", default=list(DATASETS))
    parser.add_argument("--k", type=int, nargs="*", default=list(KS))
    parser.add_argument("--skip-imdb", action="store_true")
    args = parser.parse_args()
    dp.enable_features("contrib", "honest-but-curious")  # this script is the user: it trusts the plugin's maps

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"# k-hitting set: ε = {EPSILON:g}, δ = {DELTA:g}, Δ0 = {MAX_CONTRIBUTIONS}, {args.trials} trials; "
        f"{cpus} cores; missed users mean ± s.e.; seconds per call\n"
    )
    header = (
        "| data set | users | k | wgm+peel missed | s | greedy missed (not private) | s | "
        "true-domain peel missed (not private) | s |"
    )
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rounds = [
        "| data set | k | WGM candidates | build s | ms / round | all items (true domain) | build s | ms / round |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in args.datasets:
        if not (args.data_dir / name).is_dir():
            print(f"skipping {name}: not found in {args.data_dir}", file=sys.stderr)
            continue
        data = datasets.load(name, args.data_dir)
        lines += bench_dataset(name, data, tuple(args.k), args.trials)
        rounds.append(rounds_row(name, data, max(args.k)))
    print("\n".join(lines))
    print("\nStage 2 (user peeling) instrumented: array build, then the sequential rounds\n")
    print("\n".join(rounds))
    if not args.skip_imdb:
        if (args.data_dir / "imdb_50k").is_dir():
            print()
            print("\n".join(bench_imdb(datasets.load("imdb_50k", args.data_dir))))
        else:
            print(f"skipping imdb_50k: not found in {args.data_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
