r"""Benchmark the Spark WGM against a bare Spark ``groupBy(item).count()`` on the same data, in the same session.

Run from the repository root in an environment with pyspark 3.5 and Java 17 (the engines venv)::

    python benchmarks/bench_spark.py                      # steam_200k, 10^7 Zipf rows, then a 10^8-row Parquet release
    python benchmarks/bench_spark.py --repeats 2 --parquet-rows 0       # the ratios only
    python benchmarks/bench_spark.py --zipf-rows 1e6 --parquet-rows 1e7  # a quick run

On ``local[2]`` (two cores) it prints markdown tables on stdout (progress on stderr):

1. for steam_200k (``../shared/data`` beside the checkout, or ``--data``; skipped with the reason when absent) and
   a Zipf frame of ``--zipf-rows`` rows (20 draws per user, exponent 1.3, the users contiguous), each read from a
   Parquet file and **cached** (``DataFrame.cache()`` and one count): the median over ``--repeats`` interleaved
   runs of a full WGM release ``m(sdf)`` (``opendp_wgm.spark.make_wgm_from_budget`` at ε = 1, δ = 1e-5, built
   once) and of the bare ``sdf.groupBy(item).count()`` run to completion (Spark's ``noop`` sink), the ratio, and
   the goal (issue 23: ≤ 2×), and the CPU seconds of the Spark process tree (the driver JVM and its Python
   workers) for both, which other processes' load changes less than wall time; and, as the floor of any exact
   per-user bound, a bare ``sdf.repartition(user)`` (every row moved to its user's partition) run the same way,
   and Spark's own distinct (user, item) pairs (``sdf.groupBy(user, item).count()``, the data such a bound starts
   from);
   and the extra cost of ``max_contributions="auto"`` on Spark, its choice alone (the per-user distinct counts
   binned by a Spark plan, the noise and the rule) against the WGM release (issue 24: ≤ 1.5×);
2. a release on ``--parquet-rows`` rows (Zipf as above, 10^7 rows per file), written by Polars to a temporary
   folder one file at a time (the generator never holds more than one file's rows) and read lazily by Spark (not
   cached): its wall time, the rows released, and the memory used, as the peak resident memory (``VmHWM``) of
   the driver JVM (in ``local`` mode the driver runs the executors too; its heap is capped by
   ``--driver-memory``) and of this Python process.

This is a script, not a test: nothing here runs under pytest.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import opendp.prelude as dp
import polars as pl

import opendp_wgm as wgm
from opendp_wgm import spark as wgm_spark
from opendp_wgm.measurements.auto_contributions import choose_from_counts, user_count_bins
from opendp_wgm.privacy.auto import DEFAULT_AUTO_FRACTION, split_auto_budget
from opendp_wgm.privacy.budget import Budget

ROOT = Path(__file__).resolve().parents[1]
EPSILON, DELTA = 1.0, 1e-5
DRAWS_PER_USER, ZIPF_EXPONENT = 20, 1.3
ROWS_PER_FILE = 10**7
#: Issue 23's goal: a WGM release within this multiple of a bare groupBy(item).count().
GOAL = 2.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def session(driver_memory: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' Python workers import this checkout
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("opendp-wgm-bench-spark")
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def zipf_file(path: Path, rows: int, first_user: int, seed: int) -> None:
    """``rows`` Zipf draws, ``DRAWS_PER_USER`` per user from ``first_user`` on, written to ``path``."""
    frame = wgm.datasets.synthetic_zipf(rows // DRAWS_PER_USER, DRAWS_PER_USER, exponent=ZIPF_EXPONENT, seed=seed)
    frame.with_columns(pl.col("user") + first_user).write_parquet(path)


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) used so far by process ``root`` and its descendants: the driver JVM and its
    Python workers (Linux ``/proc``). Less sensitive to other processes' load than wall time."""
    ticks = os.sysconf("SC_CLK_TCK")
    processes: dict[int, tuple[int, float]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        processes[int(stat.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += processes.get(pid, (0, 0.0))[1]
        stack += [child for child, (parent, _) in processes.items() if parent == pid]
    return total


def measured(function: Callable[[], object], jvm: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the Spark process tree) of one call."""
    cpu, start = tree_cpu_s(jvm), time.perf_counter()
    function()
    return time.perf_counter() - start, tree_cpu_s(jvm) - cpu


def jvm_pid(spark: Any) -> int:
    pid: int = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    return pid


def peak_rss_mib(pid: int | str = "self") -> float:
    """Peak resident memory (VmHWM) of a process, in MiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ratio_row(spark: Any, m: Any, name: str, path: Path, repeats: int) -> str:
    """One row of the ratio table: the WGM release and the bare count on the same cached frame, interleaved."""
    sdf = spark.read.parquet(str(path)).select("user", "item").cache()
    n = sdf.count()

    def bare() -> None:
        sdf.groupBy("item").count().write.format("noop").mode("overwrite").save()

    def shuffle() -> None:  # every row moved to its user's partition: what any exact per-user bound pays
        sdf.repartition("user").write.format("noop").mode("overwrite").save()

    def pairs() -> None:  # Spark's own distinct (user, item) pairs: the data any exact per-user bound starts from
        sdf.groupBy("user", "item").count().write.format("noop").mode("overwrite").save()

    space = wgm_spark.spark_user_items_space()
    auto = split_auto_budget(Budget.of(epsilon=EPSILON, delta=DELTA), DEFAULT_AUTO_FRACTION)

    def choice() -> None:  # what max_contributions="auto" adds to a release: its bins, noise and rule
        choose_from_counts(user_count_bins(sdf, *space), auto)

    log(f"{name}: {n:,} rows cached; warming up")
    released = m(sdf)  # warm-up (JIT, Python workers)
    bare()
    jvm = jvm_pid(spark)
    runs: dict[str, list[tuple[float, float]]] = {"wgm": [], "bare": [], "shuffle": [], "pairs": [], "choice": []}
    for repeat in range(repeats):
        for key, function in (
            ("wgm", lambda: m(sdf)), ("bare", bare), ("shuffle", shuffle), ("pairs", pairs), ("choice", choice)
        ):
            runs[key].append(measured(function, jvm))
        log(
            f"  repeat {repeat + 1}: "
            + ", ".join(f"{k} {v[-1][0]:.2f} s ({v[-1][1]:.1f} CPU s)" for k, v in runs.items())
        )
    sdf.unpersist()
    wall = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r[1] for r in v) for k, v in runs.items()}
    ratio = wall["wgm"] / wall["bare"]
    verdict = "PASS" if ratio <= GOAL else f"MISS by {ratio / GOAL:.1f}×"
    return (
        f"| {name} | {n:,} | {released.height:,} | {wall['wgm']:.2f} | {wall['bare']:.2f} | **{ratio:.1f}×** "
        f"| ≤ {GOAL:g}× | {verdict} | {cpu['wgm'] / cpu['bare']:.1f}× ({cpu['wgm']:.1f} / {cpu['bare']:.1f}) "
        f"| {wall['shuffle']:.2f} s, {wall['shuffle'] / wall['bare']:.1f}× ({cpu['shuffle'] / cpu['bare']:.1f}× CPU) "
        f"| {wall['pairs']:.2f} s, {wall['pairs'] / wall['bare']:.1f}× "
        f"| {wall['choice']:.2f} s, {wall['choice'] / wall['wgm']:.2f}× (≤ 1.5×) |"
    )


def parquet_release(spark: Any, folder: Path, rows: int, max_contributions: int) -> str:
    start = time.perf_counter()
    for part, first in enumerate(range(0, rows, ROWS_PER_FILE)):
        size = min(ROWS_PER_FILE, rows - first)
        zipf_file(folder / f"part-{part:04d}.parquet", size, first // DRAWS_PER_USER, seed=part)
    log(f"wrote {rows:,} rows in {time.perf_counter() - start:.0f} s; releasing")
    m = wgm_spark.make_wgm_from_budget(
        *wgm_spark.spark_user_items_space(), max_contributions=max_contributions, epsilon=EPSILON, delta=DELTA
    )
    sdf = spark.read.parquet(str(folder))
    start = time.perf_counter()
    released = m(sdf)
    seconds = time.perf_counter() - start
    jvm = jvm_pid(spark)
    driver = spark.sparkContext.getConf().get("spark.driver.memory")
    return (
        f"| {rows:,} rows, {len(list(folder.glob('*.parquet')))} Parquet files | {seconds:.0f} | {released.height:,} "
        f"| {peak_rss_mib(jvm):,.0f} (heap cap {driver}) | {peak_rss_mib():,.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--zipf-rows", type=float, default=1e7)
    parser.add_argument("--parquet-rows", type=float, default=1e8, help="0 skips the large release")
    parser.add_argument("--max-contributions", type=int, default=100)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument(
        "--data", type=Path, default=Path(os.environ.get("OPENDP_WGM_DATA", ROOT.parent / "shared" / "data"))
    )
    args = parser.parse_args()

    dp.enable_features("contrib", "honest-but-curious")  # this script is the user
    spark = session(args.driver_memory)
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs; `uptime` load at start: {os.getloadavg()}")
    print(f"Spark {spark.version} on local[2], driver memory {args.driver_memory}; Δ0 = {args.max_contributions}, "
          f"ε = {EPSILON}, δ = {DELTA}; medians of {args.repeats} interleaved repeats\n")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_spark_") as tmp:
        folder = Path(tmp)
        cases = []
        steam = args.data / "steam_200k"
        if steam.is_dir():
            wgm.datasets.load("steam_200k", args.data).select("user", "item").write_parquet(folder / "steam.parquet")
            cases.append(("steam_200k", folder / "steam.parquet"))
        else:
            print(f"steam_200k skipped: {steam} not found (set --data or OPENDP_WGM_DATA)\n")
        zipf_rows = int(args.zipf_rows)
        if zipf_rows:
            zipf_file(folder / "zipf.parquet", zipf_rows, 0, seed=0)
            cases.append((f"zipf 10^{np.log10(zipf_rows):g}", folder / "zipf.parquet"))
        m = wgm_spark.make_wgm_from_budget(
            *wgm_spark.spark_user_items_space(), max_contributions=args.max_contributions, epsilon=EPSILON, delta=DELTA
        )
        print(
            "| data | rows | released | WGM (s) | bare groupBy(item).count() (s) | ratio | goal | | CPU ratio "
            "(CPU s) | floor: repartition(user), vs bare | distinct (user, item) pairs, vs bare "
            "| auto's choice, vs WGM |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, path in cases:
            print(ratio_row(spark, m, name, path, args.repeats), flush=True)
        if args.parquet_rows:
            (folder / "large").mkdir()
            print("\n| Parquet release | wall (s) | released | driver JVM peak RSS (MiB) | Python peak RSS (MiB) |")
            print("|---|---|---|---|---|")
            print(parquet_release(spark, folder / "large", int(args.parquet_rows), args.max_contributions), flush=True)
    print(f"\n`uptime` load at end: {os.getloadavg()}; Python peak RSS (ru_maxrss) "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")  # fmt: skip
    spark.stop()


if __name__ == "__main__":
    main()
