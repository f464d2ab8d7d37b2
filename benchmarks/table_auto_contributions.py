"""The results table of ``max_contributions="auto"`` (``docs/results.md``) from ``reproduce`` runs:
``python benchmarks/table_auto_contributions.py FIXED/set-union/trials.csv AUTO/set-union/trials.csv``, where
each argument may list several runs' files separated by commas (their trials are pooled).

FIXED: methods ``wgm,dp_sips_default`` over the grid ``--l0 1,2,5,10,20,50,100,200,500,1000``; AUTO: methods
``wgm_auto,dp_sips_auto``. For each data set and mechanism: the auto path's mean missing mass (± std, ddof 0) and
the Δ0 it chose, the fixed Δ0 = 100, and the best fixed Δ0 in hindsight (the grid point of least mean).
"""

from __future__ import annotations

import sys
from collections import Counter

import polars as pl

_PAIRS = (("wgm", "wgm_auto", "WGM"), ("dp_sips_default", "dp_sips_auto", "DP-SIPS"))


def main() -> None:
    fixed, auto = (pl.concat([pl.read_csv(path) for path in argument.split(",")]) for argument in sys.argv[1:3])
    means = fixed.group_by("dataset", "method", "x").agg(
        pl.col("missing_mass").mean().alias("mm"),
        (pl.col("missing_mass").var(ddof=1) / pl.len()).alias("var_of_mean"),
        pl.len().alias("trials"),
    )
    columns = ("data set", "mechanism", "auto (mean ± std)", "chosen Δ0 (trials)", "Δ0 = 100", "best fixed Δ0",
               "auto − best", "auto − Δ0 = 100 (± s.e.)")
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|---|")
    totals: Counter[str] = Counter()
    for dataset in sorted(fixed["dataset"].unique()):
        for method, auto_method, name in _PAIRS:
            curve = means.filter((pl.col("dataset") == dataset) & (pl.col("method") == method)).sort("x")
            best = curve.sort("mm").row(0, named=True)
            at_100, var_100 = curve.filter(pl.col("x") == 100).select("mm", "var_of_mean").row(0)
            runs = auto.filter((pl.col("dataset") == dataset) & (pl.col("method") == auto_method))
            mean, std = runs["missing_mass"].mean(), runs["missing_mass"].std(ddof=0)
            chosen = ", ".join(f"{g}×{n}" for g, n in sorted(Counter(runs["max_contributions"].to_list()).items()))
            gap, versus = mean - best["mm"], mean - at_100  # type: ignore[operator]
            error = (runs["missing_mass"].var(ddof=1) / runs.height + var_100) ** 0.5  # type: ignore[operator]
            totals[f"{name} within 0.01 of the best"] += gap <= 0.01
            totals[f"{name} worse than Δ0 = 100 by > 0.005"] += versus > 0.005
            print(
                f"| {dataset} | {name} | {mean:.4f} ± {std:.4f} | {chosen} | {at_100:.4f} | {best['mm']:.4f} "
                f"(Δ0 = {best['x']}) | {gap:+.4f} | {versus:+.4f} ± {error:.4f} |"
            )
    print()
    per_cell = (frame.group_by("dataset", "method", "x").len()["len"] for frame in (auto, fixed))
    print("- trials per cell: auto {}, fixed {}".format(*(f"{cells.min()}–{cells.max()}" for cells in per_cell)))
    for key, value in totals.items():
        print(f"- {key}: {value} of {fixed['dataset'].n_unique()}")


if __name__ == "__main__":
    main()
