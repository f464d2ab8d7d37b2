"""Start-up time of the ``opendp-wgm`` command: ``python benchmarks/bench_startup.py [--runs N]``.

Prints the median wall time over N runs (default 5) of ``--version``, ``--help``, ``reproduce --help`` (whose
arguments the experiments package declares) and an argument error, each a
fresh ``python -m opendp_wgm.cli`` process, and its ratio to ``python -c pass`` (the interpreter's own start).
None of them should import OpenDP, NumPy, Polars or the measurements.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "python -c pass (baseline)": ["-c", "pass"],
    "opendp-wgm --version": ["-m", "opendp_wgm.cli", "--version"],
    "opendp-wgm --help": ["-m", "opendp_wgm.cli", "--help"],
    "opendp-wgm reproduce --help": ["-m", "opendp_wgm.cli", "reproduce", "--help"],
    "opendp-wgm discover --epsilon 0 (error)": ["-m", "opendp_wgm.cli", "discover", "--epsilon", "0"],
}


def median_seconds(argv: list[str], runs: int) -> float:
    """Median wall time of ``python *argv`` over ``runs`` fresh processes (the package from this checkout)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, *argv], env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="processes per case (default: %(default)s)")
    runs = parser.parse_args().runs
    medians = {name: median_seconds(argv, runs) for name, argv in CASES.items()}
    baseline = medians["python -c pass (baseline)"]
    print(f"median wall time over {runs} runs (load average {os.getloadavg()[0]:.2f})")
    print(f"{'command':<42} {'seconds':>8} {'x baseline':>11}")
    for name, seconds in medians.items():
        print(f"{name:<42} {seconds:>8.3f} {seconds / baseline:>11.1f}")


if __name__ == "__main__":
    main()
