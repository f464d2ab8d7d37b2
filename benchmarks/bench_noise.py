"""Throughput of the discrete Gaussian samplers: ``python benchmarks/bench_noise.py``.

Prints values/s for ``method="lattice"`` at several σ for 10^6 and 10^7 values (median of 3 runs), and for
``method="opendp"`` on 10^4 values (median of 3), with the ratio lattice(10^7) / opendp.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import opendp.prelude as dp

from opendp_wgm.samplers import sample_discrete_gaussian
from opendp_wgm.samplers.discrete_gaussian import _workers

SIGMAS = (1.0, 100.0, 4000.0, 1e6)


def rate(sigma: float, size: int, method: str, runs: int) -> float:
    """Median values/s over ``runs`` calls."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sample_discrete_gaussian(sigma, size, method=method)
        times.append(time.perf_counter() - start)
    return size / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--opendp-size", type=int, default=10_000)
    args = parser.parse_args()
    dp.enable_features("contrib")  # this script is the user: it opts in to OpenDP's make_gaussian

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"cores available: {cpus}; lattice threads at 10^7: {_workers(10**7)}; median of {args.runs} runs")
    header = f"{'sigma':>8} | {'lattice 1e6 (/s)':>17} | {'lattice 1e7 (/s)':>17} | "
    header += f"{'opendp 1e4 (/s)':>16} | {'ratio':>8}"
    print(header)
    print("-" * len(header))
    sample_discrete_gaussian(4000.0, 10**5)  # warm-up (imports, page faults)
    for sigma in SIGMAS:
        r6 = rate(sigma, 10**6, "lattice", args.runs)
        r7 = rate(sigma, 10**7, "lattice", args.runs)
        ro = rate(sigma, args.opendp_size, "opendp", args.runs)
        print(f"{sigma:>8g} | {r6:>17.3e} | {r7:>17.3e} | {ro:>16.3e} | {r7 / ro:>7.0f}x")


if __name__ == "__main__":
    main()
