"""The extra cost of ``max_contributions="auto"``: ``python benchmarks/bench_auto_contributions.py [--data DIR]
[--datasets a,b] [--repeats N]``.

For each data set: the choice alone (the per-user distinct-item counts, their grid histogram, the noise and the
rule: what the auto path adds to a release), one WGM call at Δ0 = 100 and one ``max_contributions="auto"`` WGM
call (both from ``make_wgm_from_budget`` at ε = 1, δ = 1e-5), each the median of ``--repeats`` calls on the
loaded frame; and the construction (calibrating the ten candidates: the nine grid points, and Δ0 = 1 at the share
after the single-item test) against one calibration. Prints the ratio
choice / WGM call (the target: at most 1.5) and the load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import opendp.prelude as dp

import opendp_wgm as wgm
from opendp_wgm.datasets import DATASETS, load
from opendp_wgm.measurements.auto_contributions import choose_from_counts, user_count_bins
from opendp_wgm.privacy.auto import DEFAULT_AUTO_FRACTION, GRID, split_auto_budget
from opendp_wgm.privacy.budget import Budget


def _median_seconds(call: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", default="../shared/data", help="the data folder (one directory per data set)")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    dp.enable_features("contrib", "honest-but-curious")
    space = wgm.user_items_space()
    split = split_auto_budget(Budget.of(epsilon=1.0, delta=1e-5), DEFAULT_AUTO_FRACTION)
    start = time.perf_counter()
    fixed = wgm.make_wgm_from_budget(*space, max_contributions=100, epsilon=1.0, delta=1e-5)
    build_fixed = time.perf_counter() - start
    start = time.perf_counter()
    auto = wgm.make_wgm_from_budget(*space, max_contributions="auto", epsilon=1.0, delta=1e-5)
    build_auto = time.perf_counter() - start
    print(f"load average before: {os.getloadavg()}")
    print(f"construction: Δ0 = 100 {build_fixed:.3f} s, auto ({len(GRID) + 1} candidates) {build_auto:.3f} s")
    print("| data set | rows | choice (s) | WGM Δ0 = 100 (s) | choice / WGM | auto WGM call (s) | chosen Δ0 |")
    print("|---|---|---|---|---|---|---|")
    for name in args.datasets.split(","):
        frame = load(name, args.data, unique=False).select("user", "item")
        fixed(frame), auto(frame)  # warm-up: compiled steps, caches

        def choice(frame: Any = frame) -> int:
            return choose_from_counts(user_count_bins(frame, *space), split)

        t_choice = _median_seconds(choice, args.repeats)
        t_fixed = _median_seconds(lambda frame=frame: fixed(frame), args.repeats)
        t_auto = _median_seconds(lambda frame=frame: auto(frame), args.repeats)
        print(
            f"| {name} | {frame.height:,} | {t_choice:.4f} | {t_fixed:.4f} | {t_choice / t_fixed:.2f} | "
            f"{t_auto:.4f} | {auto(frame).max_contributions} |"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
