r"""What a two-stage call and a DP-SIPS call cost against one WGM call on the same data: ratio tables.

Run from the repository root::

    python benchmarks/bench_two_stage.py                                   # all data sets, in-memory frames
    python benchmarks/bench_two_stage.py --datasets imdb_50k,steam_200k --inputs frame,parquet --repeats 5

For each data set (``--data-dir``, absent ones skipped) and input kind — ``frame`` (a ``pl.DataFrame``),
``parquet`` (``pl.scan_parquet`` of a temporary copy: every read scans and decodes the file) — one process
builds, at ε = 1, δ = 1e-5, Δ0 = 100, k = 100:

* ``WGM``: :func:`opendp_wgm.make_wgm_from_budget` (the baseline of every ratio);
* ``top-k``: WGM-then-top-k (``make_wgm_top_k_from_budget``);
* ``hitting set``: WGM-then-user-peeling (``make_wgm_hitting_set_from_budget``);
* ``DP-SIPS default`` (the adaptive schedule: round 1, the two-bin count, then 1 or 2 more rounds) and
  ``DP-SIPS rounds=3`` (the fixed geometric schedule): ``make_dp_sips_from_budget``;

then times their releases interleaved (one warm-up round, then ``--repeats`` rounds of every call in turn) and
prints the median wall seconds per call, its ratio to the WGM call's median, and the same ratio of the median
CPU seconds of the process (steadier when other jobs share the machine). ``steam_200k`` also runs with its
user ids as strings (``steam_200k (String users)``), the type of the raw file's ids. The targets (issues 11 and
13): two-stage ≤ 1.5× one WGM call; DP-SIPS with R rounds ≤ R×, where R is the number of rounds the call ran
(the released ``round`` column's maximum: the default schedule's sparse branch runs 2, its dense branch 3 and
the two-bin count, which is not a round). Each DP-SIPS cell says the R its calls ran (all of them, when the
branch differed between calls; the target is then taken at the smallest) and whether its CPU ratio meets R×
(a last round that released nothing is not seen: R is then under-counted, and the target stricter).
Quote ``uptime`` with the table: the machine is shared.

This is a script, not a test: nothing here runs under pytest.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import opendp.prelude as dp
import polars as pl

import opendp_wgm as wgm
from opendp_wgm import datasets
from opendp_wgm.measurements.dp_sips import ROUND
from opendp_wgm.measurements.hitting_set import make_wgm_hitting_set_from_budget
from opendp_wgm.measurements.top_k import make_wgm_top_k_from_budget

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
EPSILON, DELTA, MAX_CONTRIBUTIONS, K = 1.0, 1e-5, 100, 100
DATASETS = ("imdb_50k", "steam_200k", "fimi_retail", "amazon_magazine_subscriptions", "movielens_100k")
INPUTS = ("frame", "parquet")


def measurements() -> dict[str, dp.Measurement]:
    """The calls compared, the WGM first (the baseline)."""
    space = wgm.user_items_space()
    budget = {"max_contributions": MAX_CONTRIBUTIONS, "epsilon": EPSILON, "delta": DELTA}
    return {
        "WGM": wgm.make_wgm_from_budget(*space, **budget),
        "top-k": make_wgm_top_k_from_budget(*space, k=K, **budget),
        "hitting set": make_wgm_hitting_set_from_budget(*space, k=K, **budget),
        "DP-SIPS default": wgm.make_dp_sips_from_budget(*space, **budget),
        "DP-SIPS rounds=3": wgm.make_dp_sips_from_budget(*space, rounds=3, **budget),
    }


def time_interleaved(
    calls: dict[str, Callable[[], pl.DataFrame]], repeats: int
) -> tuple[dict[str, tuple[float, float]], dict[str, set[int]]]:
    """Median wall and CPU seconds (this process, all threads) of each call over ``repeats`` interleaved rounds,
    after one warm-up round, and the rounds each DP-SIPS call ran (its release's ``round`` maximum; empty for the
    others). CPU time is the steadier ratio on a shared machine: other jobs stretch wall time."""
    seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
    rounds: dict[str, set[int]] = {name: set() for name in calls}
    for repeat in range(repeats + 1):
        for name, call in calls.items():
            wall, cpu = time.perf_counter(), time.process_time()
            released = call()
            if repeat:  # round 0 warms up
                seconds[name].append((time.perf_counter() - wall, time.process_time() - cpu))
            if ROUND in released.columns and released.height:
                rounds[name].add(int(released.get_column(ROUND).max()))
    medians = {
        name: (statistics.median(w for w, _ in values), statistics.median(c for _, c in values))
        for name, values in seconds.items()
    }
    return medians, rounds


def cell(wall: float, cpu: float, base: tuple[float, float], rounds: set[int]) -> str:
    """A table cell: wall seconds (ratio) · CPU ratio, and for DP-SIPS the rounds run and the R× target."""
    text = f"{wall:.3f} ({wall / base[0]:.2f}×) · cpu {cpu / base[1]:.2f}×"
    if not rounds:
        return text
    target = min(rounds)
    ran = "/".join(map(str, sorted(rounds)))
    return f"{text} · R = {ran}: {'meets' if cpu / base[1] <= target else 'over'} ≤ {target}×"


def bench(name: str, frame: pl.DataFrame, inputs: list[str], repeats: int, folder: Path) -> None:
    built = measurements()
    for kind in inputs:
        if kind == "parquet":
            path = folder / f"{name.replace(' ', '_')}.parquet"
            frame.write_parquet(path)
            source: pl.DataFrame | pl.LazyFrame = pl.scan_parquet(path)
        else:
            source = frame
        print(f"{name} ({kind})...", file=sys.stderr, flush=True)
        calls = {call: functools.partial(m, source) for call, m in built.items()}
        medians, rounds = time_interleaved(calls, repeats)
        cells = " | ".join(cell(wall, cpu, medians["WGM"], rounds[call]) for call, (wall, cpu) in medians.items())
        print(f"| {name} | {kind} | {frame.height:,} | {cells} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--inputs", default="frame", help=f"comma-separated, of {INPUTS}")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    inputs = [kind for kind in args.inputs.split(",") if kind]
    unknown = [kind for kind in inputs if kind not in INPUTS]
    if unknown:
        parser.error(f"--inputs must be among {INPUTS} (found {unknown})")
    # this script is the user: it opts in to trusting the plugin's maps (docs/privacy.md)
    dp.enable_features("contrib", "honest-but-curious")
    print(f"ε = {EPSILON}, δ = {DELTA}, Δ0 = {MAX_CONTRIBUTIONS}, k = {K}; median wall seconds per call over "
          f"{args.repeats} interleaved rounds after a warm-up (ratio to the WGM call) · ratio of median CPU "
          f"seconds; load: {os.getloadavg()}")
    print("targets: two-stage ≤ 1.5× one WGM call; DP-SIPS ≤ R× with R the rounds the call ran (`round` max; "
          "the default's two-bin count is not a round), judged on the CPU ratio\n")
    names = list(measurements())
    print("| data set | input | pairs | " + " | ".join(names) + " |")
    print("|" + "---|" * (3 + len(names)))
    with tempfile.TemporaryDirectory() as folder:
        for name in args.datasets.split(","):
            path = args.data_dir / name
            if not path.exists():
                print(f"| {name} | skipped ({path} not found) |")
                continue
            frame = datasets.load(name, args.data_dir)
            bench(name, frame, inputs, args.repeats, Path(folder))
            if name == "steam_200k":  # the raw file's ids are strings
                strings = frame.with_columns(pl.col("user").cast(pl.String))
                bench(f"{name} (String users)", strings, inputs, args.repeats, Path(folder))
    print(f"\nload after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
