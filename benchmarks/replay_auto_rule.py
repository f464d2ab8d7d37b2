"""Replay the choice of ``max_contributions="auto"`` against measured fixed-Δ0 curves (``docs/auto.md``):
``python benchmarks/replay_auto_rule.py [--data DIR] [--fixed CSV] [--reduced CSV] [--fractions 0.01,0.015,0.02]
[--draws N] [--designs current,histogram,tail,previous,earlier,gaussian,single@0.005]``.

A 5-trial results table (``docs/results.md``) is itself noisy; this replay estimates how often each design of the
choice misses the issue's targets without rerunning the mechanisms. For each data set it takes the exact
histogram of the users' distinct-item counts (computed once and cached under ``--cache``) and the fixed-Δ0
curves of ``--fixed`` (``reproduce`` rows of ``wgm`` and ``dp_sips_default`` over the grid, e.g.
``docs/results/auto-grid_trials.csv``: mean and per-trial spread at each grid point). Each of ``--draws`` draws
noises the histogram with the package's own sampler, applies the rule, and reads the chosen Δ0's curve, plus
the cost of the choice's share of ε and a normal draw of the per-trial spread there. The cost is f times the
measured slope of each data set and mechanism: the mean, over the grid points of ``--reduced`` (the same rows at
a smaller ε, e.g. ``docs/results/auto-eps090_trials.csv`` at ε = 0.9), of the missing mass added per unit of ε
lost; draws are grouped by five into simulated tables. At Δ0 = 1 the curve is the optimal
partition selection's on amazon_magazine_subscriptions (0.0831, 60 trials, ``docs/results.md``) and the mechanism's
elsewhere.

Printed per design and fraction: the expected number of data sets within 0.01 of the best fixed Δ0 (of 11), the
worst expected excess over Δ0 = 100, and the expected number of (data set) failures per 5-trial table of each
target ("gap": more than 0.01 above the best; "vs 100": more than 0.005 above Δ0 = 100), for the WGM and DP-SIPS.
Designs: ``current`` (the package's: the single-item test at f/15, then where it fails the histogram at 14f/15, 9
bins, the last above 200, candidates up to 500, the least score), ``histogram`` (the release before: the same
histogram and rule at all of f, no test), ``tail`` (that histogram, the smallest grid point with at most 3% of the
users above it, 500 when none up to 200 is), ``previous`` (the release before that: the tail rule over 10 bins, the
last above 500, candidates up to 1000) and ``earlier`` (the first release: the discrete Gaussian at (fε, fδ), 11
bins, tails of the bins clamped at 0). ``gaussian`` is a design not built (``docs/auto.md``): the package's bins
and rule with discrete Gaussian noise of the σ_h that, composed with the WGM's own Gaussian part (1/σ² adding, as
DP-SIPS's rounds do), costs the WGM what (1 − f)ε does, 1/σ_h² = 1/σ(ε)² − 1/σ((1 − f)ε)²: the same cost, far less
noise. ``single@F1`` (or ``single@F1@Z``), not built either, adds what ``gaussian`` needs for Δ0 = 1, where
partition selection has no Gaussian part: two counts first (the users holding one item, and the others) with
discrete Laplace noise at F1·ε of pure DP, Δ0 = 1 when the noisy one-item count is at least 3/4 of the clamped
total (plus Z standard deviations of that test), which charges F1 only; otherwise ``gaussian``'s histogram at f and
the least score over 2–500, which charges F1 + f.
The last column is amazon_magazine_subscriptions' expected missing mass
(its best peer, PipelineDP's partition selection, measured 0.0830 ± 0.0001 in ``docs/results.md``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import opendp.prelude as dp
import polars as pl
from numpy.typing import NDArray

from opendp_wgm.datasets import DATASETS, load
from opendp_wgm.measurements.auto_contributions import choose_from_counts, noisy_count_bins
from opendp_wgm.privacy.auto import (
    GRID,
    ROOT_COST,
    SINGLE_SHARE,
    bin_of,
    calibrate_choice,
    choose_max_contributions,
    split_auto_budget,
)
from opendp_wgm.privacy.budget import Budget
from opendp_wgm.privacy.calibrate import calibrate_wgm
from opendp_wgm.privacy.gaussian import _noise_delta
from opendp_wgm.privacy.search import smallest_passing

_MECHANISMS = ("wgm", "dp_sips_default")
#: The grid of the measured curves (and of the earlier designs' candidates): the package's, and 1000.
_CURVE_GRID = (*GRID, 1000)
#: The tail rules' share: Δ0 cuts at most this share of the users.
_TAIL_SHARE = 0.03
_PARTITION_SELECTION = {"amazon_magazine_subscriptions": 0.0831}
#: A design's choice from the exact bins: Δ0, and the share of ε it charged.
Rule = Callable[[NDArray[np.int64]], tuple[int, float]]


def _user_counts(data: str, cache: Path) -> dict[str, NDArray[np.int64]]:
    if cache.exists():
        stored = np.load(cache)
        return {name: stored[name] for name in stored.files}
    counts = {}
    for name in DATASETS:
        frame = load(name, data, unique=False).select("user", "item")
        counts[name] = frame.group_by("user").agg(pl.col("item").n_unique())["item"].to_numpy().astype(np.int64)
    np.savez(cache, **counts)  # type: ignore[arg-type]
    return counts


def _tail_rule(noisy: NDArray[np.float64], grid: tuple[int, ...], *, clamp: bool) -> int:
    # the tail rules over `grid`: the tails of the noisy bins as drawn (tail, previous) or clamped at 0 (earlier,
    # with 11 bins: the last above 1000), the last grid point when none fits
    clamped = np.maximum(noisy, 0.0)
    total = float(clamped.sum())
    if total <= 0.0 or clamped[0] >= SINGLE_SHARE * total:
        return grid[0]
    tails = np.cumsum((clamped if clamp else noisy)[::-1])[::-1][2 : len(grid)]
    fitting = np.flatnonzero(tails <= _TAIL_SHARE * total)
    return grid[1 + int(fitting[0])] if fitting.size else grid[-1]


def _gaussian_scale(fraction: float) -> float:
    """σ_h of a Gaussian histogram charged inside the WGM's Gaussian part at the cost of ``fraction`` of ε."""
    full, reduced = (calibrate_wgm(max_contributions=100, delta=1e-5, epsilon=e).scale for e in (1.0, 1 - fraction))
    return float((1.0 / full**2 - 1.0 / reduced**2) ** -0.5)


def _least_score(noisy: NDArray[np.float64]) -> int:
    """The package rule's choice among the grid points from 2 on (its score, without the single-item branch)."""
    total = float(np.maximum(noisy, 0.0).sum())
    if total <= 0.0:
        return GRID[1]
    tails = np.append(np.cumsum(noisy[::-1])[::-1][2:], 0.0)
    return GRID[1 + int(np.argmin(tails / total + ROOT_COST * np.sqrt(np.array(GRID[1:], dtype=np.float64))))]


def _single_first(fraction: float, single: float, margin: float) -> Rule:
    """``single@f1[@z]``: Δ0 = 1 decided first from two counts (one item, more) with discrete Laplace noise at
    f1·ε (pure DP), Δ0 = 1 when the noisy one-item count is at least 3/4 of the clamped total plus ``margin``
    standard deviations of that test; otherwise the Gaussian histogram of ``gaussian`` at ``fraction`` and the
    least score over 2–500."""
    laplace, sigma_h = 1.0 / single, _gaussian_scale(fraction)
    spread = laplace * np.sqrt(2.0) * np.hypot(1 - SINGLE_SHARE, SINGLE_SHARE)  # of n1 - 3/4 (n1 + n_more)

    def rule(bins: NDArray[np.int64]) -> tuple[int, float]:
        two = noisy_count_bins(np.array([bins[0], bins[1:].sum()]), laplace, laplace=True)
        if two[0] - SINGLE_SHARE * np.maximum(two, 0.0).sum() >= margin * spread:
            return GRID[0], single
        return _least_score(noisy_count_bins(bins, sigma_h)), single + fraction

    return rule


def _design(name: str, fraction: float, counts: NDArray[np.int64]) -> tuple[NDArray[np.int64], Rule]:
    budget = Budget.of(epsilon=1.0, delta=1e-5)
    bins = np.bincount(bin_of(counts), minlength=len(GRID)).astype(np.int64)
    if name == "current":
        auto = split_auto_budget(budget, fraction)

        def current(b: NDArray[np.int64]) -> tuple[int, float]:
            choice = choose_from_counts(b, auto)
            return choice.max_contributions, auto.test.value if choice.single_item_test else auto.fraction

        return bins, current
    if name == "gaussian":
        sigma_h = _gaussian_scale(fraction)
        return bins, lambda b: (choose_max_contributions(noisy_count_bins(b, sigma_h)), fraction)
    if name.startswith("single@"):
        single, margin = [*map(float, name.split("@")[1:]), 0.0][:2]
        return bins, _single_first(fraction, single, margin)
    bins, rule = _older_design(name, fraction, counts, budget)
    return bins, lambda b: (rule(b), fraction)


def _older_design(
    name: str, fraction: float, counts: NDArray[np.int64], budget: Budget
) -> tuple[NDArray[np.int64], Callable[[NDArray[np.int64]], int]]:
    if name != "earlier":
        scale = calibrate_choice(Budget(budget.kind, fraction * budget.value, 0.0))  # the histogram at all of f

        def noisy(b: NDArray[np.int64]) -> NDArray[np.float64]:
            return noisy_count_bins(b, scale, laplace=True)

        if name == "previous":
            bins = np.bincount(np.searchsorted(np.array(GRID), counts, side="left"), minlength=len(_CURVE_GRID))
            return bins.astype(np.int64), lambda b: _tail_rule(noisy(b), _CURVE_GRID, clamp=False)
        bins = np.bincount(bin_of(counts), minlength=len(GRID)).astype(np.int64)
        if name == "tail":
            return bins, lambda b: _tail_rule(noisy(b), GRID, clamp=False)
        if name == "histogram":
            return bins, lambda b: choose_max_contributions(noisy(b))
        raise SystemExit(f"unknown design {name!r}")
    _, choice = budget.split(1.0 - fraction)  # the earlier split: (fε, fδ) to the choice
    sigma: float = smallest_passing(  # the analytic Gaussian at (fε, fδ): the WGM's noise term at Δ0 = 1
        lambda s: _noise_delta(choice.value, s, 1, 1) <= choice.delta, lower=1e-6, parameter="σ", budget=choice
    )
    bins = np.bincount(np.searchsorted(np.array(_CURVE_GRID), counts, side="left"), minlength=len(_CURVE_GRID) + 1)
    return bins.astype(np.int64), lambda b: _tail_rule(noisy_count_bins(b, sigma), _CURVE_GRID, clamp=True)


def _slopes(stats: pl.DataFrame, reduced: pl.DataFrame) -> dict[tuple[str, str], float]:
    """Missing mass per unit of ε lost, per data set and mechanism: the mean over the common grid points."""
    epsilon = float(reduced["epsilon"][0])
    at = reduced.group_by("dataset", "method", "x").agg(pl.col("missing_mass").mean().alias("reduced"))
    joined = at.join(stats, on=["dataset", "method", "x"]).with_columns(
        slope=(pl.col("reduced") - pl.col("mean")) / (1.0 - epsilon)
    )
    rows = joined.group_by("dataset", "method").agg(pl.col("slope").mean()).iter_rows()
    return {(name, method): float(slope) for name, method, slope in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--fixed", default="docs/results/auto-grid_trials.csv")
    parser.add_argument("--cache", default="/tmp/opendp_wgm_user_counts.npz")
    parser.add_argument("--fractions", default="0.01,0.015,0.02")
    parser.add_argument("--designs", default="current,histogram,tail,previous,earlier")
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--by-dataset", action="store_true", help="also print each data set's failures per table")
    parser.add_argument("--reduced", default="docs/results/auto-eps090_trials.csv", help="the rows at a smaller ε")
    args = parser.parse_args()
    dp.enable_features("contrib")
    counts = _user_counts(args.data, Path(args.cache))
    stats = (
        pl.read_csv(args.fixed)
        .group_by("dataset", "method", "x")
        .agg(pl.col("missing_mass").mean().alias("mean"), pl.col("missing_mass").std(ddof=0).alias("sd"))
    )
    slopes = _slopes(stats, pl.read_csv(args.reduced))
    rng = np.random.default_rng(0)
    by_dataset: list[str] = []
    print(f"load average before: {os.getloadavg()}; {args.draws} draws per data set")
    print("measured slopes (missing mass per unit of ε):", {k: round(v, 3) for k, v in sorted(slopes.items())})
    print("| design | f | mechanism | within 0.01 (expected, of 11) | worst excess over Δ0 = 100 | "
          "gap failures per table | vs-100 failures per table | amazon (expected) |")
    print("|---|---|---|---|---|---|---|---|")
    for design in args.designs.split(","):
        for fraction in (float(f) for f in args.fractions.split(",")):
            chosen, charged = {}, {}
            for name, user_counts in counts.items():
                bins, rule = _design(design, fraction, user_counts)
                picks = [rule(bins) for _ in range(args.draws)]
                chosen[name] = np.array([_CURVE_GRID.index(g) for g, _ in picks])
                charged[name] = np.array([share for _, share in picks])
            for mechanism in _MECHANISMS:
                within, worst, gap_fails, vs_fails, amazon = 0, -1.0, 0.0, 0.0, float("nan")
                for name, picks in chosen.items():
                    curve = stats.filter((pl.col("dataset") == name) & (pl.col("method") == mechanism)).sort("x")
                    mean, sd = curve["mean"].to_numpy().copy(), curve["sd"].to_numpy().copy()
                    if name in _PARTITION_SELECTION:
                        mean[0], sd[0] = _PARTITION_SELECTION[name], 0.0005
                    best, at_100 = mean.min(), mean[_CURVE_GRID.index(100)]
                    cost = slopes[(name, mechanism)] * charged[name]
                    values = mean[picks] + cost + rng.normal(size=picks.size) * sd[picks]
                    tables = values[: picks.size // 5 * 5].reshape(-1, 5).mean(axis=1)
                    within += values.mean() - best <= 0.01
                    worst = max(worst, values.mean() - at_100)
                    gap, vs = float((tables - best > 0.01).mean()), float((tables - at_100 > 0.005).mean())
                    gap_fails, vs_fails = gap_fails + gap, vs_fails + vs
                    if args.by_dataset and gap + vs > 0:
                        by_dataset.append(f"| {design} | {fraction:g} | {mechanism} | {name} | {gap:.2f} | {vs:.2f} |")
                    amazon = float(values.mean()) if name in _PARTITION_SELECTION else amazon
                print(f"| {design} | {fraction:g} | {mechanism} | {within} | {worst:+.4f} | {gap_fails:.2f} | "
                      f"{vs_fails:.2f} | {amazon:.4f} |")
    if args.by_dataset:
        print("\n| design | f | mechanism | data set | gap failures per table | vs-100 failures per table |")
        print("|---|---|---|---|---|---|")
        print("\n".join(by_dataset))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
