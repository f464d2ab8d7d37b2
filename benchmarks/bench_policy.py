"""Run time of Policy Gaussian (ℓ2 descent) against a reference-shaped implementation timed beside it.

Run from the repository root::

    python benchmarks/bench_policy.py                 # imdb_50k, fimi_retail (if found) and a synthetic Zipf
    python benchmarks/bench_policy.py --runs 5 --data /path/to/data

At ε = 1, δ = 1e-5, Δ0 = 100 (the WGM's σ and T, cap Γ = T + 3σ), three implementations are timed in
turn, ``--runs`` rounds interleaved (medians are printed):

- **reference-shaped**: the paper reference's code shape in pure Python (a dict of float weights; per user a
  ``set``, ``np.random.choice`` for the Δ0 subsample, a list of gaps, ``np.linalg.norm`` and a Python loop of
  dict updates; one scalar ``np.random.normal`` per item). **Not private** (float Gaussian, legacy RNG): a speed
  reference only. Its input is a list of item lists per user, built from the frame outside the timing (the
  reference's own input);
- **this project**: ``make_policy_gaussian_from_budget(...)`` called on the Polars frame (the whole release:
  Δ0 bounding, random order, CSR, the ℓ2 loop, exact noise and threshold) with the compiled parts when Numba
  is installed (``pip install 'opendp-wgm[fast]'``): the preparation from per-row hashes when most users hold
  more than Δ0 items (else item codes by hash table) and the loop;
- **this project, no Numba**: the same with every compiled part switched off (the pure fallback: Polars
  preparation, NumPy loop).

A second table splits one call of this project into building the CSR arrays and the loop, NumPy and
Numba side by side on the same CSR. The machine's load (``os.getloadavg``) is printed before and after: on a
shared machine the absolute times move with it, the ratios much less. This is a script, not a test.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import opendp.prelude as dp
import polars as pl

import opendp_wgm as wgm
from opendp_wgm import datasets
from opendp_wgm._spaces import _Space
from opendp_wgm.measurements.baselines import _policy_csr as policy_csr
from opendp_wgm.measurements.baselines import _policy_weights as policy_weights
from opendp_wgm.measurements.baselines import policy as bl

DATASETS = ("imdb_50k", "fimi_retail")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TARGET_SPEEDUP = 5.0  # the target: this project >= 5x faster than the reference-shaped implementation
MAX_CONTRIBUTIONS = 100
BUDGET = {"epsilon": 1.0, "delta": 1e-5}
ALPHA = 3.0


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


# --------------------------------------------------------------------------------------------------------
# the reference's shape, in pure Python. NOT PRIVATE: a speed reference only.
# --------------------------------------------------------------------------------------------------------
def reference_policy_gaussian_NOT_PRIVATE(
    data: list[list[Any]], *, max_contributions: int, scale: float, threshold: float, alpha: float = ALPHA
) -> set[Any]:
    """Policy Gaussian (ℓ2 descent) in the shape of the paper's reference code: users in the given order, a
    ``defaultdict(float)`` of weights updated item by item. Not differentially private; a speed reference only."""
    cap = threshold + alpha * scale
    weights: defaultdict[Any, float] = defaultdict(float)
    for items in data:
        kept = list(set(items))
        if len(kept) > max_contributions:
            # the reference code's own legacy-RNG calls, timed as they are (this function is not private anyway)
            kept = np.random.choice(kept, max_contributions, replace=False).tolist()  # noqa: NPY002
        candidates = [x for x in kept if weights[x] < cap]
        if not candidates:
            continue
        gaps = np.asarray([cap - weights[x] for x in candidates])
        z = float(np.linalg.norm(gaps, ord=2))
        step = min(1.0, z)
        for x, gap in zip(candidates, gaps, strict=True):
            weights[x] += step * gap / z
    return {x for x, w in weights.items() if w + np.random.normal(0.0, scale) > threshold}  # noqa: NPY002


# --------------------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------------------
def zipf_frame(n_users: int = 100_000, seed: int = 0) -> pl.DataFrame:
    """Synthetic: users with geometric(1/20) numbers of Zipf(1.3) item draws (repeats kept), ~2·10^6 rows."""
    rng = np.random.default_rng(seed)
    sizes = rng.geometric(1 / 20, n_users)
    return pl.DataFrame({"user": np.repeat(np.arange(n_users), sizes), "item": rng.zipf(1.3, int(sizes.sum()))})


def frames(data_dir: Path) -> dict[str, pl.DataFrame]:
    out = {}
    for name in DATASETS:
        try:
            out[name] = datasets.load(name, data_dir, unique=False)
        except (FileNotFoundError, OSError) as err:
            print(f"skipping {name}: {err}", file=sys.stderr)
    out["zipf (synthetic)"] = zipf_frame()
    return out


# --------------------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------------------
def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def without_numba(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with every compiled part switched off (as when Numba is not installed)."""

    def run() -> object:
        saved = policy_csr._jit, policy_csr._numba_installed
        policy_csr._jit, policy_csr._numba_installed = (lambda: None), (lambda: False)  # type: ignore[assignment]
        try:
            return fn()
        finally:
            policy_csr._jit, policy_csr._numba_installed = saved  # type: ignore[method-assign]

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("OPENDP_WGM_DATA", DEFAULT_DATA)))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    # this script is the user: it opts in to the plugin's measurements and to the baselines' idealised maps
    dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")

    start = time.perf_counter()
    compiled = policy_csr._jit() is not None  # imports Numba; compiling (or loading the disk cache) is in the warm-up
    import_time = time.perf_counter() - start

    space = wgm.user_items_space()
    m = bl.make_policy_gaussian_from_budget(*space, max_contributions=MAX_CONTRIBUTIONS, **BUDGET)
    calibration = wgm.calibrate_wgm(max_contributions=MAX_CONTRIBUTIONS, **BUDGET)
    scale, threshold = calibration.scale, calibration.threshold
    cap = policy_weights._cap_on_lattice(threshold + ALPHA * scale)

    print(f"load average at start: {load()}; cores: {os.cpu_count()}; ε = 1, δ = 1e-5, Δ0 = {MAX_CONTRIBUTIONS}; "
          f"median of {args.runs} interleaved runs")
    print(f"compiled parts (Numba): {'yes' if compiled else 'no (NumPy fallback)'}; importing it took "
          f"{import_time:.2f} s (once per process; not in the times below)")
    print()
    header = (f"| data set | users | rows | reference-shaped (s) | this project (s) | speed-up | "
              f"no Numba (s) | speed-up | target ≥ {TARGET_SPEEDUP:.0f}× |")
    print(header)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    loaded = frames(args.data)
    splits = []
    for name, frame in loaded.items():
        lists = frame.group_by("user").agg("item")["item"].to_list()  # the reference's input, untimed
        reference = functools.partial(
            reference_policy_gaussian_NOT_PRIVATE,
            lists,
            max_contributions=MAX_CONTRIBUTIONS,
            scale=scale,
            threshold=threshold,
        )
        ours = functools.partial(m, frame)
        contenders = {"reference": reference, "ours": ours, "numpy": without_numba(ours)}
        ours()  # warm-up (imports, categorical dictionary, page faults)
        times: dict[str, list[float]] = {key: [] for key in contenders}
        for _ in range(args.runs):
            for key, fn in contenders.items():
                times[key].append(timed(fn))
        med = {key: statistics.median(value) for key, value in times.items()}
        speedup, speedup_numpy = med["reference"] / med["ours"], med["reference"] / med["numpy"]
        status = "ok" if speedup >= TARGET_SPEEDUP else "MISSED"
        print(f"| {name} | {len(lists)} | {frame.height} | {med['reference']:.2f} | {med['ours']:.2f} | "
              f"{speedup:.1f}× | {med['numpy']:.2f} | {speedup_numpy:.1f}× | {status} |")
        splits.append((name, frame))

    print()
    print("| one call, split | users | CSR arrays (s) | loop, NumPy (s) | loop, Numba (s) | Numba speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    own = _Space("user", "item", None, lazyframe_domain=False)
    for name, frame in splits:
        build, data = [], None
        loops: dict[str, list[float]] = {"numpy": [], "numba": []}
        for _ in range(args.runs):
            begin = time.perf_counter()
            data = policy_csr._csr(
                frame, own, max_contributions=MAX_CONTRIBUTIONS, key_order=False, priority_order=False
            )
            build.append(time.perf_counter() - begin)
            loop = functools.partial(policy_weights._policy_weights, data, cap, "l2")
            loops["numpy"].append(timed(without_numba(loop)))
            if compiled:
                loops["numba"].append(timed(loop))
        assert data is not None
        numpy_loop = statistics.median(loops["numpy"])
        numba_loop = statistics.median(loops["numba"]) if compiled else math.nan
        print(f"| {name} | {data.offsets.size - 1} | {statistics.median(build):.2f} | {numpy_loop:.2f} | "
              f"{numba_loop:.3f} | {numpy_loop / numba_loop:.0f}× |")
    print()
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
