"""WGM end to end on 10^8 (user, item) Parquet rows with Polars' engines: ``python benchmarks/bench_streaming.py``.

Writes synthetic Zipf data as Parquet in chunks (default ``/tmp/opendp_wgm_bench``; never in the repository,
reused when present), then runs one release per mode, each in a fresh subprocess, and prints wall time and the
subprocess's peak RSS (``os.wait4`` → ``ru_maxrss``):

- ``in-memory``: ``make_wgm(...)(pl.scan_parquet(...))`` as the library runs it today (``collect()``);
- ``streaming``: the same plan collected with ``engine="streaming"``;
- ``in-memory-pN`` / ``streaming-pN``: the plan run in N passes over disjoint hash buckets of users (each pass
  filters the scan), partial histograms summed: memory ~ 1/N of the dedup state (docs/engines.md).

Data: users' row counts are log-normal (σ = 1.2), items Zipf(1.3); duplicates within a user are kept (the
plan removes them). Options: ``--rows``, ``--users``, ``--max-contributions``, ``--modes``, ``--data``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

DEFAULT_DATA = Path("/tmp/opendp_wgm_bench")
DEFAULT_MODES = ("in-memory", "streaming", "in-memory-p4", "streaming-p4", "in-memory-p8", "streaming-p8")
CHUNK_USERS = 200_000


def generate(path: Path, rows: int, users: int, *, seed: int = 0, exponent: float = 1.3) -> float:
    """Write ``rows`` rows of ``users`` users as Parquet parts under ``path``; return seconds taken."""
    manifest = path / "manifest.json"
    spec = {"rows": rows, "users": users, "seed": seed, "exponent": exponent}
    if manifest.exists() and json.loads(manifest.read_text()) == spec:
        return 0.0
    start = time.perf_counter()
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("part-*.parquet"):
        old.unlink()
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(mean=0.0, sigma=1.2, size=users)
    sizes = np.maximum(1, np.floor(sizes * rows / sizes.sum())).astype(np.int64)
    while sizes.sum() != rows:  # exact total: trim or pad the largest users
        excess = int(sizes.sum() - rows)
        order = np.argsort(sizes)[::-1][: abs(excess)]
        sizes[order] -= np.sign(excess)
    for part, lo in enumerate(range(0, users, CHUNK_USERS)):
        chunk = sizes[lo : lo + CHUNK_USERS]
        user = np.repeat(np.arange(lo, lo + chunk.shape[0], dtype=np.int64), chunk)
        item = rng.zipf(exponent, size=int(chunk.sum())).astype(np.int64)
        pl.DataFrame({"user": user, "item": item}).write_parquet(path / f"part-{part:05d}.parquet")
    manifest.write_text(json.dumps(spec))
    return time.perf_counter() - start


def _bucketed_release(
    lf: pl.LazyFrame, space, max_contributions: int, scale: float, threshold: float, passes: int, engine: str
):
    """The proposed ``_wgm_function`` body: the plan over ``passes`` disjoint user buckets, one at a time."""
    import secrets

    from opendp_wgm.engines.polars import bounded_lists_plan, lattice_histogram_plan, release_above_threshold

    seed = secrets.randbits(64)  # only spreads users over passes; each user is in exactly one
    parts = []
    for bucket in range(passes):
        users = lf if passes == 1 else lf.filter(pl.col(space.user).hash(seed) % passes == bucket)
        lists = bounded_lists_plan(users, space, max_contributions)
        plan = lattice_histogram_plan(lists, space, max_contributions)
        parts.append(plan.collect(engine=engine))
    histogram = parts[0] if passes == 1 else pl.concat(parts).group_by(space.item).agg(pl.col("weight_lat").sum())
    return release_above_threshold(histogram, space.item, scale=scale, threshold=threshold, noise="lattice")


def worker(mode: str, data: Path, max_contributions: int) -> dict:
    """One release in this process (the parent measures its peak RSS)."""
    import opendp.prelude as dp

    import opendp_wgm as wgm
    from opendp_wgm._spaces import _prepare_frame, _resolve_space

    dp.enable_features("contrib", "honest-but-curious")  # this script is the user
    calibration = wgm.calibrate_wgm(max_contributions=max_contributions, epsilon=1.0, delta=1e-5)
    scan = pl.scan_parquet(data / "part-*.parquet")
    start = time.perf_counter()
    if mode == "in-memory":
        m = wgm.make_wgm(
            *wgm.user_items_space(),
            max_contributions=max_contributions,
            scale=calibration.scale,
            threshold=calibration.threshold,
        )
        released = m(scan)
    else:
        engine, _, passes = mode.partition("-p")
        space = _resolve_space(*wgm.user_items_space())
        released = _bucketed_release(
            _prepare_frame(scan, space),
            space,
            max_contributions,
            calibration.scale,
            calibration.threshold,
            int(passes or 1),
            "streaming" if engine == "streaming" else "in-memory",
        )
    return {"seconds": time.perf_counter() - start, "released": released.height}


def run(mode: str, data: Path, max_contributions: int) -> dict:
    """Run ``worker`` in a fresh interpreter; add its wall time and peak RSS (GiB)."""
    command = [
        sys.executable, __file__, "--worker", mode, "--data", str(data), "--max-contributions", str(max_contributions)
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (ru_maxrss in KiB on Linux)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        return {"mode": mode, "error": f"exit {proc.returncode}", "peak_rss_gib": usage.ru_maxrss / 2**20}
    result = json.loads(out.strip().splitlines()[-1])
    result.update(mode=mode, wall=time.perf_counter() - start, peak_rss_gib=usage.ru_maxrss / 2**20)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=float, default=1e8)
    parser.add_argument("--users", type=float, default=2e6)
    parser.add_argument("--max-contributions", type=int, default=100)
    parser.add_argument("--modes", nargs="+", default=list(DEFAULT_MODES))
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.data, args.max_contributions)))
        return

    rows, users = int(args.rows), int(args.users)
    data = args.data or DEFAULT_DATA / f"zipf_{rows}_{users}"
    seconds = generate(data, rows, users)
    size = sum(p.stat().st_size for p in data.glob("part-*.parquet")) / 2**20
    made = f"written in {seconds:.0f} s" if seconds else "reused"
    print(f"data: {rows:,} rows, {users:,} users, {size:,.0f} MiB of Parquet at {data} ({made})")
    gib = rows * 16 / 2**30
    print(f"in memory as two Int64 columns: {gib:.2f} GiB; cores: {os.cpu_count()}; Δ0 = {args.max_contributions}")
    header = f"{'mode':<14} | {'release (s)':>11} | {'wall (s)':>8} | {'peak RSS (GiB)':>14} | {'released':>8}"
    print(header)
    print("-" * len(header))
    for mode in args.modes:
        r = run(mode, data, args.max_contributions)
        if "error" in r:
            print(f"{mode:<14} | {'failed: ' + r['error']:>11} | {'':>8} | {r['peak_rss_gib']:>14.2f} | {'':>8}")
            continue
        print(
            f"{mode:<14} | {r['seconds']:>11.1f} | {r['wall']:>8.1f} | {r['peak_rss_gib']:>14.2f} | "
            f"{r['released']:>8,}"
        )


if __name__ == "__main__":
    main()
