"""Top-k utility and run time: ``python benchmarks/bench_top_k.py [--data-dir ../shared/data]``.

For each of steam_200k, amazon_magazine_subscriptions and movielens_100k (skipped when absent), at ε = 1,
δ = 1e-5, Δ0 = 100 and k ∈ {5, 10, 20, 50, 100, 200}, over 5 trials: the top-k missing mass (mean ± standard
error, ddof = 0 as the reference) and the mean run time of one call of

* WGM-then-top-k (``make_wgm_top_k_from_budget``, split 1/2: the reference's (ε/2, δ/2) per stage), and
* limited-domain top-k (``make_limited_domain_top_k``) with k̄ ∈ {k, 5k, 10k}.

Then one WGM-then-top-k call on imdb_50k (~7·10^6 pairs) at k = 100 (target ≤ 3 s). Measurements are built
once per setting; only the release is timed (metrics excluded), as in the reference. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import opendp.prelude as dp
import polars as pl

import opendp_wgm as wgm
from opendp_wgm.measurements.baselines import make_limited_domain_top_k
from opendp_wgm.measurements.top_k import make_wgm_top_k_from_budget

EPSILON, DELTA, MAX_CONTRIBUTIONS = 1.0, 1e-5, 100
KS = (5, 10, 20, 50, 100, 200)
MULTIPLIERS = (1, 5, 10)
DATASETS = {
    "steam_200k": wgm.datasets.load_steam_200k,
    "amazon_magazine_subscriptions": wgm.datasets.load_amazon_magazine_subscriptions,
    "movielens_100k": wgm.datasets.load_movielens_100k,
}


def run(measurement: dp.Measurement, data: pl.DataFrame, k: int, trials: int) -> tuple[float, float, float]:
    """Mean and standard error (ddof = 0) of the top-k missing mass, and the mean seconds per release."""
    losses, seconds = [], []
    for _ in range(trials):
        start = time.perf_counter()
        released = measurement(data)
        seconds.append(time.perf_counter() - start)
        losses.append(wgm.metrics.top_k_missing_mass(data, released, k))
    return float(np.mean(losses)), float(np.std(losses) / math.sqrt(trials)), float(np.mean(seconds))


def bench_dataset(name: str, data: pl.DataFrame, trials: int, ks: tuple[int, ...]) -> None:
    space = wgm.user_items_space()
    users, items = data["user"].n_unique(), data["item"].n_unique()
    print(f"\n### {name}: {data.height:,} pairs, {users:,} users, {items:,} items\n")
    header = "| k | WGM-then-top-k | " + " | ".join(f"LD k̄={m}k" for m in MULTIPLIERS) + " | time WGM-top-k (s) | "
    header += " | ".join(f"time LD {m}k (s)" for m in MULTIPLIERS) + " |"
    print(header)
    print("|" + "---|" * (2 + 2 * len(MULTIPLIERS) + 1))
    for k in ks:
        ours = make_wgm_top_k_from_budget(
            *space, k=k, max_contributions=MAX_CONTRIBUTIONS, epsilon=EPSILON, delta=DELTA
        )
        rows = [run(ours, data, k, trials)]
        for multiplier in MULTIPLIERS:
            ld = make_limited_domain_top_k(
                *space, k=k, k_bar=k * multiplier, max_contributions=MAX_CONTRIBUTIONS, epsilon=EPSILON, delta=DELTA
            )
            rows.append(run(ld, data, k, trials))
        masses = " | ".join(f"{mean:.4f} ± {se:.4f}" for mean, se, _ in rows)
        times = " | ".join(f"{sec:.3f}" for _, _, sec in rows)
        print(f"| {k} | {masses} | {times} |", flush=True)


def bench_imdb(path: Path) -> None:
    start = time.perf_counter()
    data = wgm.datasets.load_imdb_50k(path)
    load = time.perf_counter() - start
    m = make_wgm_top_k_from_budget(
        *wgm.user_items_space(), k=100, max_contributions=MAX_CONTRIBUTIONS, epsilon=EPSILON, delta=DELTA
    )
    start = time.perf_counter()
    released = m(data)
    seconds = time.perf_counter() - start
    mass = wgm.metrics.top_k_missing_mass(data, released, 100)
    print(f"\n### imdb_50k: {data.height:,} pairs (loaded in {load:.1f} s)\n")
    print("| k | WGM-then-top-k time (s) | released | top-k missing mass |")
    print("|---|---|---|---|")
    print(f"| 100 | {seconds:.2f} | {released.height} | {mass:.4f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    parser.add_argument("--data-dir", type=Path, default=default)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--k", type=int, nargs="+", default=list(KS))
    parser.add_argument("--skip-imdb", action="store_true")
    args = parser.parse_args()
    # this script is the user: it opts in to trusting the plugin's maps (docs/top_k.md)
    dp.enable_features("contrib", "honest-but-curious")
    print(f"ε = {EPSILON}, δ = {DELTA}, Δ0 = {MAX_CONTRIBUTIONS}, {args.trials} trials; "
          "top-k missing mass mean ± s.e. (ddof = 0); time = mean seconds per release")
    for name, loader in DATASETS.items():
        path = args.data_dir / name
        if not path.exists():
            print(f"\n### {name}: skipped ({path} not found)")
            continue
        bench_dataset(name, loader(path), args.trials, tuple(args.k))
    imdb = args.data_dir / "imdb_50k"
    if args.skip_imdb:
        pass
    elif imdb.exists():
        bench_imdb(imdb)
    else:
        print(f"\n### imdb_50k: skipped ({imdb} not found)")


if __name__ == "__main__":
    main()
