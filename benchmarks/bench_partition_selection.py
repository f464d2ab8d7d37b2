"""Partition selection against the WGM: ``python benchmarks/bench_partition_selection.py [--data-dir ../shared/data]``.

For amazon_magazine_subscriptions and steam_200k (skipped when absent), at ε = 1, δ = 1e-5, over 5 trials: the
missing mass (mean ± standard error, ddof = 0) of

* the optimal partition selection at Δ0 = 1 (``make_partition_selection``),
* the WGM (``make_wgm_from_budget``, the (ε, δ) calibration) at Δ0 = 1 and Δ0 = 5,
* DP-SIPS (``make_dp_sips_from_budget``, its adaptive default) at Δ0 = 1.

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import opendp.prelude as dp
import polars as pl

import opendp_wgm as wgm

EPSILON, DELTA = 1.0, 1e-5
DATASETS = ("amazon_magazine_subscriptions", "steam_200k")


def _mechanisms() -> dict[str, Callable[[], dp.Measurement]]:
    space = wgm.user_items_space()
    budget = {"epsilon": EPSILON, "delta": DELTA}
    return {
        "partition selection (Δ0 = 1)": lambda: wgm.make_partition_selection(*space, **budget),
        "WGM Δ0 = 1": lambda: wgm.make_wgm_from_budget(*space, max_contributions=1, **budget),
        "WGM Δ0 = 5": lambda: wgm.make_wgm_from_budget(*space, max_contributions=5, **budget),
        "DP-SIPS Δ0 = 1": lambda: wgm.make_dp_sips_from_budget(*space, max_contributions=1, **budget),
    }


def missing_mass(measurement: dp.Measurement, data: pl.DataFrame, trials: int) -> tuple[float, float]:
    """Mean and standard error (ddof = 0) of the missing mass over ``trials`` releases."""
    losses = [wgm.metrics.missing_mass(data, measurement(data)) for _ in range(trials)]
    return float(np.mean(losses)), float(np.std(losses) / math.sqrt(trials))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    dp.enable_features("contrib", "honest-but-curious")
    mechanisms = _mechanisms()
    print(f"missing mass at ε = {EPSILON:g}, δ = {DELTA:g}, mean ± s.e. of {args.trials} trials\n")
    print("| data set | items per user | " + " | ".join(mechanisms) + " |")
    print("|---|---|" + "---|" * len(mechanisms))
    for name in DATASETS:
        try:
            data = wgm.datasets.load(name, args.data_dir)
        except FileNotFoundError:
            print(f"| {name} | (absent) |" + " |" * len(mechanisms))
            continue
        per_user = data.height / data["user"].n_unique()
        cells = [missing_mass(make(), data, args.trials) for make in mechanisms.values()]
        print(f"| {name} | {per_user:.2f} | " + " | ".join(f"{m:.4f} ± {s:.4f}" for m, s in cells) + " |")


if __name__ == "__main__":
    main()
