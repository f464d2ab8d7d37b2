"""The first release after a fresh install: ``python benchmarks/bench_first_release.py --data DIR [--runs N]``.

The README's command (``pip install -e . && opendp-wgm discover``) installs the package and runs a release; a
person then points it at their data. This measures that first release on steam_200k (1.3·10^5 rows, written to a
Parquet file first), each case a fresh ``python -m opendp_wgm.cli <command> steam.parquet`` process (wall time,
the process's start to its exit), for ``discover`` (WGM), ``discover --mechanism dp-sips``, ``top-k`` and
``hitting-set``:

- *cold cache*: Numba installed, its cache empty (``NUMBA_CACHE_DIR`` a fresh folder), as after
  ``pip install -e ".[fast]"``: the first release of each command in a fresh folder;
- *warm cache*: the same folder, a second process (the median of N);
- *no Numba*: ``numba`` not importable (as the default install, ``pip install -e .``);
- *compiled, cold* / *compiled, warm*: the compiled steps forced on this small input (``COMPILED_FROM_ROWS`` set
  to 0 in the process: what a release of steam took before the small-input rule), cold and warm.

Each row prints its seconds beside the goal (a first release ≤ 5 s) and whether the compile notice was printed;
the load average is printed before and after. ``--large R`` adds the same cases on a synthetic frame of R rows
(shuffled Int64 users, Zipf items; above the small-input threshold, so the compiled steps run by default there).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Goal of issue 23: the first release after a fresh install of the README's command, on steam_200k.
FIRST_RELEASE_GOAL = 5.0

#: The commands measured (the arguments after ``opendp-wgm``; the data path is appended).
COMMANDS = {
    "discover (WGM)": ["discover"],
    "discover --mechanism dp-sips": ["discover", "--mechanism", "dp-sips"],
    "top-k --k 10": ["top-k", "--k", "10"],
    "hitting-set --k 10": ["hitting-set", "--k", "10"],
}

#: How each case runs the command: ``numba`` unimportable, or the compiled steps forced on a small input.
_RUNNER = """
import sys
mode = sys.argv[1]
if mode == "no-numba":
    sys.modules["numba"] = None  # import numba raises ImportError, find_spec returns None: as without it
elif mode == "compiled":
    from opendp_wgm.kernel import _small_inputs, plans
    _small_inputs.COMPILED_FROM_ROWS = plans.COMPILED_FROM_ROWS = 0  # the compiled steps on any input
from opendp_wgm.cli import main
sys.exit(main(sys.argv[2:]))
"""

#: (label, runner mode, cache: "cold" = a fresh folder per command, "warm" = that folder again).
CASES = [
    ("cold cache (after pip install -e '.[fast]')", "default", "cold"),
    ("warm cache", "default", "warm"),
    ("no Numba (pip install -e .)", "no-numba", "warm"),
    ("compiled forced, cold cache", "compiled", "cold"),
    ("compiled forced, warm cache", "compiled", "warm"),
]


def _release(mode: str, argv: list[str], cache: Path) -> tuple[float, bool]:
    """Wall seconds of one fresh process running ``opendp-wgm *argv`` in ``mode``, and whether it printed the
    compile notice."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "NUMBA_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", _RUNNER, mode, *argv], env=env, capture_output=True, text=True,
                            check=False)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"opendp-wgm {' '.join(argv)} failed:\n{result.stderr}")
    return seconds, "compiling the fast path" in result.stderr


def _table(title: str, data: Path, runs: int, folder: Path) -> None:
    print(f"\n{title} (load average {os.getloadavg()[0]:.2f} at the start)")
    print(f"{'command':<30} {'case':<45} {'seconds':>8} {'goal':>7} {'met':>4} {'notice':>7}")
    folder.mkdir(exist_ok=True)
    for number, (name, command) in enumerate(COMMANDS.items()):
        for label, mode, cache_state in CASES:
            cache = folder / f"cache-{mode}-{number}"
            argv = [*command, str(data), "-o", str(folder / "released.parquet"), "--force"]
            if cache_state == "cold":
                times, notices = zip(*[_release(mode, argv, cache)], strict=True)  # the first run fills the cache
            else:
                times, notices = zip(*[_release(mode, argv, cache) for _ in range(runs)], strict=True)
            seconds = statistics.median(times)
            met = "yes" if seconds <= FIRST_RELEASE_GOAL else "no"
            print(f"{name:<30} {label:<45} {seconds:>8.2f} {FIRST_RELEASE_GOAL:>6.1f}s {met:>4} "
                  f"{'yes' if any(notices) else '-':>7}")
    print(f"(load average {os.getloadavg()[0]:.2f} at the end)")


def _write_steam(directory: Path, path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from opendp_wgm.datasets import loaders

    loaders.load_steam_200k(directory).write_parquet(path)


def _write_large(path: Path, rows: int) -> None:
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(0)
    users = rng.integers(0, max(1, rows // 20), rows)
    pl.DataFrame({"user": users, "item": (rng.zipf(1.3, rows) % 10**6).astype(np.int64)}).write_parquet(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="processes per warm case (default: %(default)s)")
    default = os.environ.get("OPENDP_WGM_DATA")
    parser.add_argument("--data", type=Path, default=default, required=default is None,
                        help="the data sets' folder, holding steam_200k/ (default: $OPENDP_WGM_DATA)")
    parser.add_argument("--large", type=float, default=0, help="also a synthetic frame of this many rows")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        steam = folder / "steam.parquet"
        _write_steam(args.data / "steam_200k", steam)
        _table("first release on steam_200k (128,804 rows), a fresh process each", steam, args.runs, folder)
        if args.large:
            large = folder / "large.parquet"
            _write_large(large, int(args.large))
            _table(f"the same on {int(args.large):,} synthetic rows (Int64 users shuffled, Zipf items)", large,
                   args.runs, folder / "large")


if __name__ == "__main__":
    main()
