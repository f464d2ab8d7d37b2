r"""The adaptive DP-SIPS schedule against the WGM: which branch the rule picks, what each gives, and how close
the default is to the WGM, as a paired difference with its standard error.

Run from the repository root::

    python benchmarks/bench_dp_sips_branches.py                     # every data set found, 5 trials
    python benchmarks/bench_dp_sips_branches.py --trials 400 --datasets movielens_100k,amazon_magazine_subscriptions
    python benchmarks/bench_dp_sips_branches.py --synthetic --fixed --trials 40   # held-out synthetic Zipf data
    python benchmarks/bench_dp_sips_branches.py --curve     # the release curves and the rule's misfire rate

Prints a Markdown table on stdout (progress on stderr); data sets absent from ``--data-dir`` are skipped.

Setting: ε = 1, δ = 1e-5, Δ0 = 100, the (ε, δ) calibration of the adaptive schedule
(:func:`opendp_wgm.privacy.calibrate.calibrate_dp_sips` with ``adaptive=True``). Each trial runs round 1 once
with the package's kernel pieces (a benchmark, not a release path), then **both** branches from that same round
1 (sparse: one round; dense: two rounds), so their difference is measured on the same first release.

**Paired, expected differences.** Every mechanism's *last* round is not sampled but averaged over its noise: given
the last round's lattice histogram (sums S) the expected missing mass is exact up to the normal-tail error of
:func:`opendp_wgm.privacy.threshold.release_probability` (< 1e-11 per item), :math:`\sum_{x \notin R} c(x)
(1 - P[S_x + Z > F]) / M` over the items ``R`` the earlier rounds released. The earlier rounds, the noisy count
and the bound of the users above Δ0 are sampled as in a release. The WGM's histogram and every last round's
bound share one hash seed per trial (common random numbers): where round 1 released nothing (the sparse data
sets), the default's last round bounds every user exactly as the WGM does and the difference is the release
curves' difference on one histogram. Both reduce the variance, neither biases the mean; the column
"sampled" is the same difference with the last rounds sampled (an unbiased check of the expected one).

Columns: the WGM's expected missing mass; the mean paired difference to the WGM (negative is better) ± its
standard error (the trials' standard deviation / √trials) of the adaptive default, of its sparse and dense
branches, and (``--fixed``) of fixed schedules; a one-sided 95% upper bound on the default's expected
difference (mean + 1.645 s.e.); how often the rule picked the dense branch; and the boosted share of the
users still holding unreleased items — the count's true value, a non-private diagnostic printed to show how far
each data set is from the rule's cut (1/4).

``--synthetic``: instead of the real data, :func:`opendp_wgm.datasets.synthetic_zipf` data (held out from the
rule's tuning) with ``--items-per-user`` draws per user and Zipf ``--exponents``, about 2·10^5 rows each
(``n_users = max(1000, 200000 // items_per_user)``, data seed 0: a data set, not a release).

``--curve``: no data; the release probability of an item held by c users who hold only it, WGM against each
branch, the sparse branch's largest loss over every weight (its bound on any data set, ``docs/dp_sips.md``) and
the probability that the rule picks the dense branch from the count's noise alone (no user boosted).

This is a script, not a test: nothing here runs under pytest.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import opendp.prelude as dp
import polars as pl
from numpy.typing import NDArray
from scipy.integrate import quad
from scipy.special import ndtr
from scipy.stats import norm

from opendp_wgm import datasets

# Private kernel pieces: the simulation runs exactly the steps make_dp_sips chains.
from opendp_wgm._spaces import _prepare_frame, _Space
from opendp_wgm.engines.polars import (
    WEIGHT_LAT,
    bounded_lists_plan,
    distinct_pairs_plan,
    fresh_seeds,
    lattice_histogram_plan,
    noisy_above_threshold,
    release_above_threshold,
)
from opendp_wgm.measurements.dp_sips import _flag_released, _user_bins, dense_branch
from opendp_wgm.metrics import Truth
from opendp_wgm.privacy.calibrate import DPSIPSCalibration, WGMCalibration, calibrate_dp_sips, calibrate_wgm
from opendp_wgm.privacy.threshold import LATTICE_BITS, _release_probability_lat, release_probability

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
EPSILON, DELTA, MAX_CONTRIBUTIONS = 1.0, 1e-5, 100
#: One-sided 95% normal quantile.
Z_95 = 1.6448536269514722
#: ``--fixed``: name -> the fixed schedule's arguments of calibrate_dp_sips.
FIXED: dict[str, dict[str, object]] = {
    "(0.05, 0.95)": {"fractions": (0.05, 0.95)},
    "(0.1, 0.9)": {"fractions": (0.1, 0.9)},
    "R=3 r=0.3": {"rounds": 3, "ratio": 0.3},
}
SPACE = _Space("user", "item", None, lazyframe_domain=False)
Plan = list[tuple[float, float]]


def histogram(frame: pl.DataFrame, seeds: tuple[int, ...] | None = None) -> pl.DataFrame:
    """One round's lattice histogram (item, WEIGHT_LAT) of ``frame``, bounded under ``seeds`` (fresh if None)."""
    return lattice_histogram_plan(bounded_lists_plan(frame.lazy(), SPACE, MAX_CONTRIBUTIONS, seeds),
                                  SPACE, MAX_CONTRIBUTIONS).collect()


def sampled_round(frame: pl.DataFrame, scale: float, threshold: float) -> pl.Series:
    """One round released as in a release: fresh seed, exact lattice noise."""
    out = release_above_threshold(histogram(frame), "item", scale=scale, threshold=threshold, noise="lattice")
    return out.get_column("item")


class Trial:
    """One data set's trial: the shared last-round seed, and the expected and sampled missing masses."""

    def __init__(self, frame: pl.DataFrame, counts: pl.DataFrame, total: int) -> None:
        self.frame, self.counts, self.total = frame, counts, total
        self.seeds = fresh_seeds()  # common to the WGM and every mechanism's last round

    def remaining(self, released: pl.Series) -> pl.DataFrame:
        return self.frame.filter(~pl.col("item").is_in(released.implode()))

    def last_round(self, released: pl.Series, scale: float, threshold: float) -> tuple[float, float]:
        """(expected, sampled) missing mass when a last round at (σ, T) follows the release ``released``."""
        hist = histogram(self.remaining(released), self.seeds).join(self.counts, on="item", how="left")
        p = _release_probability_lat(hist.get_column(WEIGHT_LAT).to_numpy(), scale, threshold)
        c = hist.get_column("c").to_numpy().astype(np.float64)
        before = float(self.counts.filter(pl.col("item").is_in(released.implode())).get_column("c").sum())
        _, keep = noisy_above_threshold(hist.get_column(WEIGHT_LAT).to_numpy(), scale=scale, threshold=threshold)
        expected = (self.total - before - float(np.dot(c, p))) / self.total
        sampled = (self.total - before - float(c[keep].sum())) / self.total
        return expected, sampled

    def schedule(self, first: pl.Series, plan: Plan) -> tuple[float, float]:
        """Rounds ``plan`` after the release ``first``: all but the last sampled, the last one expected."""
        released = first
        for scale, threshold in plan[:-1]:
            released = pl.concat([released, sampled_round(self.remaining(released), scale, threshold)])
        return self.last_round(released, *plan[-1])


def data_sets(args: argparse.Namespace) -> Iterator[tuple[str, pl.DataFrame]]:
    if args.synthetic:
        for exponent in (float(e) for e in args.exponents.split(",")):
            for t in (int(v) for v in args.items_per_user.split(",")):
                users = args.users if args.users is not None else max(1000, 200_000 // t)
                df = datasets.synthetic_zipf(users, t, exponent=exponent, seed=0)
                yield f"zipf s={exponent:g}, {t} per user, {users} users", df
        return
    for name in sorted(datasets.DATASETS) if args.datasets == "all" else args.datasets.split(","):
        try:
            yield name, datasets.load(name, args.data_dir)
        except FileNotFoundError:
            print(f"{name}: absent, skipped", file=sys.stderr)


def mean_se(values: list[float]) -> tuple[float, float]:
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return statistics.fmean(values), se


def curve(cal: DPSIPSCalibration, w: WGMCalibration) -> int:
    """The release probability of an item held by c users who each hold it alone (weight c), WGM against the
    adaptive default's sparse branch (round 1, then the last round if round 1 did not release it) and dense
    branch, and the differences; then the largest loss of each branch and its integral over the weight."""
    def p(c: NDArray[np.int64], scale: float, threshold: float) -> NDArray[np.float64]:
        return release_probability(c, scale=scale, threshold=threshold)

    c = np.arange(0, 200, dtype=np.int64)
    wgm = p(c, w.scale, w.threshold)
    first = p(c, cal.scales[0], cal.thresholds[0])
    sparse = first + (1 - first) * p(c, cal.scales[1], cal.thresholds[1])
    second = p(c, cal.branch_scales[0], cal.branch_thresholds[0])
    dense = first + (1 - first) * (second + (1 - second) * p(c, cal.branch_scales[1], cal.branch_thresholds[1]))
    print(f"WGM (σ, T) = ({w.scale:.4f}, {w.threshold:.3f}); sparse branch: round 1 ({cal.scales[0]:.2f}, "
          f"{cal.thresholds[0]:.1f}), last round ({cal.scales[1]:.4f}, {cal.thresholds[1]:.3f}); dense branch: "
          + ", ".join(f"({s:.3f}, {t:.2f})" for s, t in zip(cal.branch_scales, cal.branch_thresholds, strict=True))
          + "\n")
    print("| c | WGM | sparse branch | WGM − sparse | dense branch | WGM − dense |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i in (10, 14, 17, 19, 20, 21, 22, 23, 25, 28, 32, 40):
        print(f"| {i} | {wgm[i]:.4f} | {sparse[i]:.4f} | {wgm[i] - sparse[i]:+.4f} | {dense[i]:.4f} | "
              f"{wgm[i] - dense[i]:+.4f} |")
    for name, other in (("sparse", sparse), ("dense", dense)):
        loss = wgm - other
        print(f"\n{name} branch: largest loss {loss.max():.4f} at c = {int(c[np.argmax(loss)])}, "
              f"sum over c {loss.sum():.4f}", end="")
    print(f"\nT_last − T_WGM = {cal.thresholds[1] - w.threshold:.4f}")
    # the sparse branch's bound for any data: the largest gap between the WGM's curve and its last round's, over
    # every weight S (not only whole numbers of users)
    weight = np.linspace(0.0, 100.0, 1_000_001)
    gap = ndtr((weight - w.threshold) / w.scale) - ndtr((weight - cal.thresholds[1]) / cal.scales[1])
    print(f"largest gap over every weight S: {gap.max():.4f} at S = {weight[np.argmax(gap)]:.2f}")
    # the rule on data with no boosted user and n users still holding unreleased items: noisy counts
    # (Z1, n + Z2), dense iff Z1 > 0 and 3 Z1 > n + Z2, i.e. P = ∫_0^∞ φ(z) Φ((3 σ_s z − n)/σ_s) dz
    sigma = cal.statistic_scale
    assert sigma is not None
    for n in (30, 100, 200, 300, 500, 1000, 2000):
        p_dense, _ = quad(lambda z, n=n: float(norm.pdf(z) * ndtr((3.0 * sigma * z - n) / sigma)), 0.0, np.inf)
        print(f"P(dense | no boosted user, {n} users still holding items) = {p_dense:.2g}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder of the data sets")
    parser.add_argument("--trials", type=int, default=5, help="trials per data set (default: 5)")
    parser.add_argument("--datasets", default="all", help="comma-separated names, or 'all' (default)")
    parser.add_argument("--synthetic", action="store_true", help="synthetic Zipf data instead of --datasets")
    parser.add_argument("--items-per-user", default="1,2,5,20,100,300", help="--synthetic: draws per user")
    parser.add_argument("--exponents", default="1.1,1.5,2", help="--synthetic: Zipf exponents (> 1)")
    parser.add_argument("--users", type=int, default=None, help="--synthetic: users (default: about 2e5 rows)")
    parser.add_argument("--curve", action="store_true", help="print the release curves' table (no data) and exit")
    parser.add_argument("--fixed", action="store_true", help="also the fixed schedules " + ", ".join(FIXED))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    dp.enable_features("contrib", "honest-but-curious")
    budget = {"max_contributions": MAX_CONTRIBUTIONS, "epsilon": EPSILON, "delta": DELTA}
    cal = calibrate_dp_sips(**budget, adaptive=True)  # type: ignore[arg-type]
    assert cal.statistic_scale is not None
    first_round = (cal.scales[0], cal.thresholds[0])
    sparse: Plan = list(zip(cal.scales[1:], cal.thresholds[1:], strict=True))
    dense: Plan = list(zip(cal.branch_scales, cal.branch_thresholds, strict=True))
    w = calibrate_wgm(**budget)  # type: ignore[arg-type]
    if args.curve:
        return curve(cal, w)
    fixed: dict[str, Plan] = {}
    if args.fixed:
        for name, schedule in FIXED.items():
            c = calibrate_dp_sips(**budget, **schedule)  # type: ignore[arg-type]
            fixed[name] = list(zip(c.scales, c.thresholds, strict=True))
    differences = ["adaptive", "sparse", "dense", *fixed]
    print(f"trials: {args.trials}; ε = {EPSILON:g}, δ = {DELTA:g}, Δ0 = {MAX_CONTRIBUTIONS}; "
          "differences to the WGM: mean ± s.e. (paired, expected over the last round's noise)\n")
    print("| data set | rows | WGM | " + " | ".join(f"{k} − WGM" for k in differences)
          + " | adaptive − WGM, 95% upper bound | adaptive − WGM, sampled | dense picked | boosted share |")
    print("|---|---:|---:|" + "---:|" * (len(differences) + 4))
    empty = pl.Series("item", [], dtype=pl.Int64)
    for name, df in data_sets(args):
        start = time.perf_counter()
        truth = Truth.of(df)
        frame = _prepare_frame(df, SPACE).collect()
        pairs = distinct_pairs_plan(frame.lazy(), SPACE).collect().lazy()  # the count reads distinct pairs
        counts = truth.counts.rename({truth.counts.columns[1]: "c"}).with_columns(pl.col("c").cast(pl.Int64))
        none = empty.cast(frame.schema["item"])
        rows: dict[str, list[float]] = {k: [] for k in ("wgm", *differences, "sampled", "picked", "share")}
        for _ in range(args.trials):
            trial = Trial(frame, counts, truth.total_mass)
            wgm_mm, wgm_sampled = trial.last_round(none, w.scale, w.threshold)
            first = sampled_round(frame, *first_round)
            bins = _user_bins(_flag_released(pairs, first.to_frame(), SPACE.item), SPACE)
            noisy, _ = noisy_above_threshold(bins << LATTICE_BITS, scale=cal.statistic_scale, threshold=0.0)
            picked = dense_branch(float(noisy[0]), float(noisy[1]))
            branch = {k: trial.schedule(first, plan) for k, plan in (("sparse", sparse), ("dense", dense))}
            chosen = branch["dense" if picked else "sparse"]
            rows["wgm"].append(wgm_mm)
            rows["adaptive"].append(chosen[0] - wgm_mm)
            rows["sampled"].append(chosen[1] - wgm_sampled)
            for k in ("sparse", "dense"):
                rows[k].append(branch[k][0] - wgm_mm)
            for k, plan in fixed.items():
                rows[k].append(trial.schedule(sampled_round(frame, *plan[0]), plan[1:])[0] - wgm_mm)
            rows["picked"].append(float(picked))
            rows["share"].append(float(bins[0] / max(int(np.sum(bins)), 1)))
        m = {k: mean_se(v) for k, v in rows.items()}
        cells = " | ".join(f"{m[k][0]:+.4f} ± {m[k][1]:.4f}" for k in differences)
        upper = m["adaptive"][0] + Z_95 * m["adaptive"][1]
        print(f"| {name} | {df.height} | {m['wgm'][0]:.4f} | {cells} | {upper:+.4f}"
              f" | {m['sampled'][0]:+.4f} ± {m['sampled'][1]:.4f} | {m['picked'][0]:.0%} | {m['share'][0]:.2f} |",
              flush=True)
        print(f"{name}: done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
