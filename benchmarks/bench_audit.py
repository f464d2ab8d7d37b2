"""Throughput of the auditor: ``python benchmarks/bench_audit.py [--trials N] [--workers 1,2]``.

Audits the WGM (σ = 4, T = 7, Δ0 = 1) on the worst-case pairs of a 200-user base dataset
(:func:`opendp_wgm.audit.worst_case_pairs`) and prints releases per second for each worker count, with the
machine's load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import functools
import os

import opendp.prelude as dp

from opendp_wgm.audit import audit, worst_case_pairs
from opendp_wgm.cli._audit import build_mechanism


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    dp.enable_features("contrib", "honest-but-curious")
    build = functools.partial(
        build_mechanism, "wgm", sigma=4.0, threshold=7.0, max_contributions=1, k=1, peel_scale=1.0
    )
    pairs = worst_case_pairs(1, 7.0, users=200)
    print(f"load average before: {os.getloadavg()}")
    for workers in (int(w) for w in args.workers.split(",")):
        report = audit(build, pairs, trials=args.trials, workers=workers, progress=False)
        print(
            f"workers={workers}: {2 * args.trials * len(pairs)} releases in {report.seconds:.1f} s = "
            f"{report.releases_per_second:.0f} releases/s ({report.verdict()})"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
