"""Start-up time of the ``opendp-wgm`` command: ``python benchmarks/bench_startup.py [--runs N] [--rows R]``.

Prints the median wall time over N runs (default 5) of ``--version``, ``--help``, ``reproduce --help`` (whose
arguments the experiments package declares) and an argument error, each a
fresh ``python -m opendp_wgm.cli`` process, and its ratio to ``python -c pass`` (the interpreter's own start).
None of them should import OpenDP, NumPy, Polars or the measurements.

Then a real release (:func:`release_cases`): ``discover`` on a Parquet file of R rows (default 10^5; String user
ids in shuffled order), ``python -c "import polars"``, and the same job measured in this process (warm: its
imports done), interleaved, with each target's ratio beside its goal.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
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
        subprocess.run([sys.executable, *argv], env=env, capture_output=True, check=False, cwd=ROOT)  # -m: this package
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# --------------------------------------------------------------------------------------------------------
# a real release: discover on a Parquet file, against `import polars` and the job itself
# --------------------------------------------------------------------------------------------------------
#: Goals of a release from the shell (issue 23): seconds end to end, and its ratio to `import polars` + the job.
RELEASE_SECONDS_GOAL, RELEASE_RATIO_GOAL = 1.5, 2.0


def _write_release_data(path: Path, rows: int) -> None:
    """``rows`` rows of (String user, Int64 item): 5 rows per user on average, Zipf items, users shuffled."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(0)
    users = rng.integers(0, max(1, rows // 5), rows)
    items = rng.zipf(1.3, rows) % 50_000
    frame = pl.DataFrame({"user": pl.Series(users).cast(pl.String), "item": items.astype(np.int64)})
    frame.sample(fraction=1.0, shuffle=True, seed=1).write_parquet(path)


def _seconds(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], env=env, capture_output=True, check=False, cwd=ROOT)  # -m: this package
    return time.perf_counter() - start


def _bytecode() -> str:
    """Whether the processes reuse the package's compiled bytecode, as an installed package does (pip compiles
    it at install): with ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every process compiles each of
    the package's modules it imports again (0.05-0.15 s of a release; other packages have theirs)."""
    import importlib.util

    cached = Path(importlib.util.cache_from_source(str(ROOT / "opendp_wgm" / "cli" / "__init__.py"))).exists()
    if cached or not sys.flags.dont_write_bytecode:
        return "package bytecode cached"
    return "package bytecode not cached (PYTHONDONTWRITEBYTECODE): compiled from source in every process"


def release_cases(runs: int, rows: int) -> None:
    """Median wall time of ``discover`` on a Parquet file of ``rows`` rows (a fresh process), of
    ``python -c "import polars"`` and of the job in this process (``main`` after a warm-up), interleaved."""
    sys.path.insert(0, str(ROOT))
    from opendp_wgm.cli import main as cli

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as folder:
        data, output = Path(folder) / "data.parquet", Path(folder) / "released.parquet"
        _write_release_data(data, rows)
        argv = ["discover", str(data), "-o", str(output), "--force"]

        def job() -> float:
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = cli(argv)
            assert code == 0, code
            return time.perf_counter() - start

        job()  # warm-up: the imports
        _seconds(["-m", "opendp_wgm.cli", *argv], env)  # and the bytecode, where it is cached (see _bytecode)
        times: dict[str, list[float]] = {"discover": [], "import polars": [], "job": []}
        for _ in range(runs):
            times["discover"].append(_seconds(["-m", "opendp_wgm.cli", *argv], env))
            times["import polars"].append(_seconds(["-c", "import polars"], env))
            times["job"].append(job())
    med = {name: statistics.median(values) for name, values in times.items()}
    floor = med["import polars"] + med["job"]
    print(f"\na release: discover on {rows:,} Parquet rows (String users, shuffled); median over {runs} runs "
          f"(load average {os.getloadavg()[0]:.2f}); {_bytecode()}")
    lines = [
        ("opendp-wgm discover data.parquet", f"{med['discover']:>8.3f}   goal <= {RELEASE_SECONDS_GOAL} s"),
        ('python -c "import polars"', f"{med['import polars']:>8.3f}"),
        ("the job in this process (warm)", f"{med['job']:>8.3f}"),
        ("discover / (import polars + job)", f"{med['discover'] / floor:>8.2f}x  goal <= {RELEASE_RATIO_GOAL}x"),
    ]
    print(f"{'case':<42} {'seconds':>8}")
    for name, value in lines:
        print(f"{name:<42} {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="processes per case (default: %(default)s)")
    parser.add_argument("--rows", type=float, default=1e5, help="rows of the release's file (default: 1e5)")
    parser.add_argument("--release-only", action="store_true", help="only the release's cases")
    args = parser.parse_args()
    runs = args.runs
    if not args.release_only:
        _help_cases(runs)
    release_cases(runs, int(args.rows))


def _help_cases(runs: int) -> None:
    medians = {name: median_seconds(argv, runs) for name, argv in CASES.items()}
    baseline = medians["python -c pass (baseline)"]
    print(f"median wall time over {runs} runs (load average {os.getloadavg()[0]:.2f})")
    print(f"{'command':<42} {'seconds':>8} {'x baseline':>11}")
    for name, seconds in medians.items():
        print(f"{name:<42} {seconds:>8.3f} {seconds / baseline:>11.1f}")


if __name__ == "__main__":
    main()
