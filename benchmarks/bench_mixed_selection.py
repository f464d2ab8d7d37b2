"""A mixed design, partition selection then the WGM: ``python benchmarks/bench_mixed_selection.py [--data-dir D]``.

Round 1 is the optimal partition selection (``make_partition_selection``, Δ0 = 1) with a share f of (ε, δ); round 2
is the WGM (``make_wgm_from_budget``) or DP-SIPS (``make_dp_sips_from_budget``, its adaptive default) at a fixed
Δ0 = g with the rest, run on the data without the items round 1 released (an anti-join: round 1's output is public,
so dropping those items is post-processing of it, and the restriction keeps two neighbours one user apart). The
release is the union of both rounds. Basic adaptive composition makes it (ε, δ)-DP: the script asserts that the two
measurements' maps at d_in = 1 sum to at most (ε, δ) before any release.

For each data set of the shared data folder that is present (the others are listed as absent), at ε = 1,
δ = 1e-5, over ``--trials`` trials: the missing mass (mean ± standard error, ddof = 0) of partition selection
alone, the WGM and DP-SIPS at Δ0 = g alone, and both mixed designs for each f of ``--fractions``. g is the data
set's best fixed Δ0 for the WGM (:data:`BEST_L0`) unless ``--l0`` gives one for all. Within a trial the two mixed
designs at one f share round 1's release (each union is still a valid release; sharing it only makes their
difference less noisy). Prints a markdown table, the wall time and the load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import opendp.prelude as dp
import polars as pl

import opendp_wgm as wgm

EPSILON, DELTA = 1.0, 1e-5
#: The best fixed Δ0 of the WGM on each data set (the grid {1, 2, 5, …, 1000} of docs/results.md, "Δ0 chosen
#: privately"), in the order the table lists them.
BEST_L0: dict[str, int] = {
    "amazon_magazine_subscriptions": 2,
    "steam_200k": 200,
    "fimi_retail": 50,
    "imdb_50k": 500,
    "movielens_100k": 500,
    "anime_caserec": 500,
    "lastfm_hetrec2011": 50,
}
FRACTIONS = (0.05, 0.1, 0.2, 0.3)
DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

Release = Callable[[pl.DataFrame], pl.DataFrame]


@dataclass(frozen=True)
class MixedDesign:
    """Round 1 (partition selection at a share of the budget) and the two round-2 measurements with the rest."""

    fraction: float
    selection: dp.Measurement
    wgm: dp.Measurement
    dp_sips: dp.Measurement


def _rest(used: float, total: float) -> float:
    """``total - used``, stepped down by ulps until ``used + rest ≤ total`` in floating point."""
    rest = total - used
    while used + rest > total:
        rest = math.nextafter(rest, 0.0)
    return rest


def _check_composed(first: dp.Measurement, second: dp.Measurement) -> None:
    """The two rounds' maps at d_in = 1 sum to at most (ε, δ) (basic composition)."""
    (eps1, delta1), (eps2, delta2) = first.map(1), second.map(1)
    assert eps1 + eps2 <= EPSILON, (eps1, eps2)
    assert delta1 + delta2 <= DELTA, (delta1, delta2)


def make_mixed(fraction: float, max_contributions: int) -> MixedDesign:
    """Partition selection at (fε, fδ), and the WGM and DP-SIPS at Δ0 = ``max_contributions`` with the rest."""
    space = wgm.user_items_space()
    selection = wgm.make_partition_selection(*space, epsilon=fraction * EPSILON, delta=fraction * DELTA)
    eps1, delta1 = selection.map(1)
    rest = {"epsilon": _rest(eps1, EPSILON), "delta": _rest(delta1, DELTA), "max_contributions": max_contributions}
    design = MixedDesign(
        fraction, selection, wgm.make_wgm_from_budget(*space, **rest), wgm.make_dp_sips_from_budget(*space, **rest)
    )
    _check_composed(selection, design.wgm)
    _check_composed(selection, design.dp_sips)
    return design


def second_round(measurement: Release, data: pl.DataFrame, first: pl.DataFrame) -> pl.DataFrame:
    """The union of ``first`` (round 1's released items) and ``measurement``'s release on the data without them."""
    rest = data.join(first.select("item"), on="item", how="anti")
    return pl.concat([first.select("item"), measurement(rest).select("item")])


def _mean_se(losses: Sequence[float]) -> tuple[float, float]:
    return float(np.mean(losses)), float(np.std(losses) / math.sqrt(len(losses)))


def columns(fractions: Sequence[float]) -> list[str]:
    """The table's method columns."""
    mixed = [f"PS {f:g} → {name}" for f in fractions for name in ("WGM", "DP-SIPS")]
    return ["partition selection", "WGM", "DP-SIPS", *mixed]


def measure(
    data: pl.DataFrame, max_contributions: int, fractions: Sequence[float], trials: int
) -> list[tuple[float, float]]:
    """Mean and standard error of the missing mass of each column of :func:`columns`, over ``trials`` trials."""
    space = wgm.user_items_space()
    budget = {"epsilon": EPSILON, "delta": DELTA}
    alone: list[Release] = [
        wgm.make_partition_selection(*space, **budget),
        wgm.make_wgm_from_budget(*space, max_contributions=max_contributions, **budget),
        wgm.make_dp_sips_from_budget(*space, max_contributions=max_contributions, **budget),
    ]
    designs = [make_mixed(f, max_contributions) for f in fractions]
    truth = wgm.metrics.Truth.of(data)
    losses: list[list[float]] = [[] for _ in columns(fractions)]
    for _ in range(trials):
        trial = [wgm.metrics.missing_mass(truth, release(data)) for release in alone]
        for design in designs:
            first = design.selection(data)
            for second in (design.wgm, design.dp_sips):
                trial.append(wgm.metrics.missing_mass(truth, second_round(second, data, first)))
        for column, loss in zip(losses, trial, strict=True):
            column.append(loss)
    return [_mean_se(column) for column in losses]


def _load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help=f"data folder (default: {DEFAULT_DATA})")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--fractions", default=",".join(f"{f:g}" for f in FRACTIONS), help="round 1's shares f")
    parser.add_argument("--l0", type=int, default=None, help="round 2's Δ0 on every data set (default: BEST_L0)")
    parser.add_argument("--datasets", default=",".join(BEST_L0), help="comma-separated names")
    args = parser.parse_args(argv)
    fractions = [float(f) for f in args.fractions.split(",")]
    if args.trials < 1 or not all(0.0 < f < 1.0 for f in fractions) or (args.l0 is not None and args.l0 < 1):
        parser.error("--trials and --l0 must be ≥ 1, and every fraction in (0, 1)")
    dp.enable_features("contrib", "honest-but-curious")
    start = time.perf_counter()
    heads = columns(fractions)
    print(f"missing mass at ε = {EPSILON:g}, δ = {DELTA:g}, mean ± s.e. of {args.trials} trials", end="; ")
    print(f"load average {_load_average()}\n")
    print("| data set | items per user | Δ0 = g | " + " | ".join(heads) + " |")
    print("|---|---|---|" + "---|" * len(heads))
    for name in args.datasets.split(","):
        l0 = args.l0 if args.l0 is not None else BEST_L0.get(name, 100)
        try:
            data = wgm.datasets.load(name, args.data_dir)
        except FileNotFoundError:
            print(f"| {name} | (absent) | {l0} |" + " |" * len(heads))
            continue
        per_user = data.height / data["user"].n_unique()
        cells = measure(data, l0, fractions, args.trials)
        text = " | ".join(f"{m:.4f} ± {s:.4f}" for m, s in cells)
        print(f"| {name} | {per_user:.2f} | {l0} | {text} |", flush=True)
    print(f"\nwall time {time.perf_counter() - start:.0f} s; load average {_load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
