"""Peak memory (and time) of one WGM release, each in a fresh process: ``python benchmarks/bench_memory.py``.

Two measurements (issue 13):

1. ``--rows N`` (default 10^8) Zipf rows **in memory** (``synthetic_zipf``: 20 draws per user from Zipf(1.3),
   users contiguous; ``--shuffled``: users drawn uniformly, not contiguous): the child builds the frame, reads its
   size (``DataFrame.estimated_size()``), resets its peak RSS (``/proc/self/clear_refs``, Linux) and runs
   ``make_wgm_from_budget(...)(df)``; it prints the peak RSS of the release over the frame's size, both above
   the RSS before the release (what the release adds) and in all (frame and interpreter included). Modes
   ``current`` (this kernel) and ``previous`` (the kernel before issue 13, ``bench_wgm.previous_kernel``: the
   baseline, measured in the same run).
2. ``--parquet-rows N`` (e.g. 10^9): writes N rows as lz4 Parquet parts of 2·10^6 rows (20 rows per user,
   users contiguous, items with a Zipf(1.3)-like tail ``floor(U^(-1/0.3))``) under ``--data`` (default
   ``/tmp/opendp_wgm_memory``, never in the repository), releases
   ``make_wgm_from_budget(..., passes=P, engine="streaming")`` on ``pl.scan_parquet`` and prints peak RSS and
   wall time; ``--keep-data`` keeps the files (deleted otherwise).

``--return-freed-memory`` runs the children with ``_RJEM_MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0``:
Polars' allocator (jemalloc) then returns freed pages to the system at once instead of keeping them for reuse
by the thread arena that freed them, which lowers the peak of a release in passes (``docs/engines.md``). The
variable is read when Polars loads, so it cannot be set from inside a process that has imported it; it is
printed with the results (set or not).

Δ0 = 100, ε = 1, δ = 1e-5. The machine is shared: the load average is printed with the results.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

MAX_CONTRIBUTIONS = 100
EPSILON, DELTA = 1.0, 1e-5
DRAWS_PER_USER = 20
PART_ROWS = 2 * 10**6
DEFAULT_DATA = Path("/tmp/opendp_wgm_memory")
GIB = 2**30
#: Polars' jemalloc (symbols prefixed ``_rjem_``) reads its options from this variable when it loads.
MALLOC_CONF = "_RJEM_MALLOC_CONF"
RETURN_FREED = "dirty_decay_ms:0,muzzy_decay_ms:0"


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (VmHWM: peak RSS, VmRSS: current)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    msg = f"{field} not in /proc/self/status"
    raise RuntimeError(msg)


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def _measurement(passes: int = 1, engine: str = "auto"):  # type: ignore[no-untyped-def]
    import opendp.prelude as dp

    import opendp_wgm as wgm

    dp.enable_features("contrib", "honest-but-curious")  # this script is the user
    return wgm.make_wgm_from_budget(
        *wgm.user_items_space("user", "item"),
        max_contributions=MAX_CONTRIBUTIONS,
        epsilon=EPSILON,
        delta=DELTA,
        passes=passes,
        engine=engine,  # type: ignore[arg-type]
    )


def zipf_frame(rows: int, *, shuffled: bool, seed: int = 0) -> pl.DataFrame:
    """Contiguous users (``synthetic_zipf``) or users drawn uniformly (items Zipf(1.3) mod ``rows``)."""
    import opendp_wgm as wgm

    users = max(1, rows // DRAWS_PER_USER)
    if not shuffled:
        return wgm.datasets.synthetic_zipf(users, DRAWS_PER_USER, seed=seed)
    rng = np.random.default_rng(seed)
    return pl.DataFrame({"user": rng.integers(0, users, rows), "item": rng.zipf(1.3, rows) % rows})


def worker_in_memory(rows: int, shuffled: bool, mode: str) -> dict[str, float]:
    from bench_wgm import previous_kernel  # this script's folder is on sys.path

    m = _measurement()
    df = zipf_frame(rows, shuffled=shuffled)
    size = df.estimated_size()
    gc.collect()
    before = _status("VmRSS")
    _reset_peak()
    start = time.perf_counter()
    with previous_kernel() if mode == "previous" else contextlib.nullcontext():
        released = m(df)
    seconds = time.perf_counter() - start
    peak = _status("VmHWM")
    return {"frame": size, "before": before, "peak": peak, "seconds": seconds, "released": released.height}


def generate_parquet(path: Path, rows: int, *, seed: int = 0) -> float:
    """Write ``rows`` rows (20 per user, users contiguous) as parts of PART_ROWS rows; seconds taken."""
    manifest = path / "manifest.json"
    spec = {"rows": rows, "seed": seed}
    if manifest.exists() and json.loads(manifest.read_text()) == spec:
        return 0.0
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    for part, lo in enumerate(range(0, rows, PART_ROWS)):  # a loop over files, each one vectorised
        n = min(PART_ROWS, rows - lo)
        user = np.arange(lo, lo + n, dtype=np.int64) // DRAWS_PER_USER
        # a Zipf(1.3)-like tail, P(item >= x) ~ x^-0.3, much cheaper to draw than Generator.zipf at 10^9 rows
        item = np.floor(np.minimum(rng.random(n) ** (-1 / 0.3), 1e12)).astype(np.int64)
        frame = pl.DataFrame({"user": user, "item": item})
        frame.write_parquet(path / f"part-{part:05d}.parquet", compression="lz4")
    manifest.write_text(json.dumps(spec))
    return time.perf_counter() - start


def worker_parquet(path: Path, passes: int) -> dict[str, float]:
    m = _measurement(passes, "streaming")
    scan = pl.scan_parquet(path / "part-*.parquet")
    _reset_peak()
    start = time.perf_counter()
    released = m(scan)
    return {"peak": _status("VmHWM"), "seconds": time.perf_counter() - start, "released": released.height}


def child(arguments: list[str]) -> dict[str, float]:
    """Run this script's worker in a fresh interpreter and return its JSON line."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True, env=env, check=False)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=lambda s: int(float(s)), default=10**8)
    parser.add_argument("--shuffled", action="store_true", help="users drawn uniformly (not contiguous)")
    parser.add_argument("--modes", nargs="+", default=["previous", "current"], choices=["previous", "current"])
    parser.add_argument("--parquet-rows", type=lambda s: int(float(s)), default=0, help="0: skip (e.g. 1e9)")
    parser.add_argument("--passes", type=int, default=64)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--keep-data", action="store_true")
    parser.add_argument("--generate-only", action="store_true", help="write the Parquet data and stop")
    parser.add_argument(
        "--return-freed-memory", action="store_true", help=f"run the releases with {MALLOC_CONF}={RETURN_FREED}"
    )
    parser.add_argument("--worker", choices=["in-memory", "parquet"], help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="current", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "in-memory":
        print(json.dumps(worker_in_memory(args.rows, args.shuffled, args.mode)))
        return 0
    if args.worker == "parquet":
        print(json.dumps(worker_parquet(args.data, args.passes)))
        return 0

    if args.return_freed_memory:
        os.environ[MALLOC_CONF] = RETURN_FREED  # inherited by the children, which load Polars afresh
    print("## WGM release memory\n")
    print(f"Δ0 = {MAX_CONTRIBUTIONS}, ε = {EPSILON:g}, δ = {DELTA:g}; one release per fresh process; "
          f"{MALLOC_CONF}={os.environ.get(MALLOC_CONF, '(not set)')}; "
          f"load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    if args.rows:
        kind = "shuffled users" if args.shuffled else "contiguous users"
        print(f"### In memory: {args.rows:.0e} Zipf rows, {kind}\n")
        print("| kernel | frame (GiB) | RSS before (GiB) | peak RSS (GiB) | (peak − before) / frame | peak / frame | "
              "release (s) | items |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for mode in args.modes:
            extra = ["--shuffled"] if args.shuffled else []
            r = child(["--worker", "in-memory", "--rows", str(args.rows), "--mode", mode, *extra])
            print(f"| {mode} | {r['frame'] / GIB:.2f} | {r['before'] / GIB:.2f} | {r['peak'] / GIB:.2f} | "
                  f"{(r['peak'] - r['before']) / r['frame']:.2f}× | "
                  f"{r['peak'] / r['frame']:.2f}× | {r['seconds']:.1f} | {r['released']:,} |", flush=True)
        print()
    if args.parquet_rows:
        print(f"### Parquet: {args.parquet_rows:.0e} rows, passes = {args.passes}, streaming engine\n")
        written = generate_parquet(args.data, args.parquet_rows)
        on_disk = sum(f.stat().st_size for f in args.data.glob("*.parquet"))
        print(f"written in {written:.0f} s (0: reused), {on_disk / 1e9:.1f} GB on disk\n")
        if args.generate_only:
            return 0
        try:
            r = child(["--worker", "parquet", "--data", str(args.data), "--passes", str(args.passes)])
            print(f"| rows | passes | peak RSS (GiB) | release (s) | items |\n|---:|---:|---:|---:|---:|\n"
                  f"| {args.parquet_rows:.0e} | {args.passes} | {r['peak'] / GIB:.2f} | {r['seconds']:.0f} | "
                  f"{r['released']:,} |\n")
        finally:
            if not args.keep_data:
                shutil.rmtree(args.data, ignore_errors=True)
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
