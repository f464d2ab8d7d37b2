"""The Spark engine (``opendp_wgm.spark``): the same histogram, release and map as the Polars engine.

The tests share one local Spark session per process (``local[2]``, 1 GB driver: tests/engines/conftest.py) and
skip, with the reason, when pyspark or Java is missing; the "pyspark not installed" error is tested everywhere.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
import sys

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from scipy.special import ndtr

import opendp_wgm as wgm
from opendp_wgm._spaces import _Space
from opendp_wgm.engines.polars import bounded_lists_plan, lattice_histogram_plan
from opendp_wgm.measurements.hitting_set import _make_dp_sips_hitting_set
from opendp_wgm.measurements.top_k import _make_dp_sips_top_k
from opendp_wgm.privacy.sips import DEFAULT_FRACTIONS

pytestmark = pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning")

ZCDP = dp.approximate(dp.zero_concentrated_divergence())
APPROX_DP = dp.approximate(dp.max_divergence())


@pytest.fixture(scope="module")
def ws(spark):
    """The public path ``opendp_wgm.spark``: the Spark input space and the package's constructors (the same
    objects as ``opendp_wgm.make_wgm`` and the others), which run on Spark when given that space."""
    import opendp_wgm.spark as module

    return module


@pytest.fixture(scope="module")
def engine(spark):
    """The Spark engine's steps (``opendp_wgm.engines.spark``)."""
    from opendp_wgm.engines import spark as module

    return module


def to_spark(spark, frame: pl.DataFrame, ddl: str):
    return spark.createDataFrame(frame.rows(), ddl)


def polars_histogram(frame: pl.DataFrame, max_contributions: int) -> dict:
    space = _Space("user", "item", None, False)
    plan = lattice_histogram_plan(bounded_lists_plan(frame.lazy().drop_nulls(), space, max_contributions), space, max_contributions)
    return dict(plan.collect().iter_rows())


def small_users_frame() -> pl.DataFrame:
    """Users with duplicates, nulls and string items, none with more than 8 distinct items."""
    rng = np.random.default_rng(1)
    users, items = [], []
    for u in range(300):
        n = int(rng.integers(1, 9))
        users += [u] * n
        items += [f"x{int(v)}" for v in rng.zipf(1.5, size=n) % 50]
    frame = pl.DataFrame({"user": users, "item": items})
    nulls = pl.DataFrame({"user": [None, 5, None], "item": ["x1", None, None]}, schema=frame.schema)
    return pl.concat([frame, nulls])


# --------------------------------------------------------------------------------------------------------------
# no noise: the distributed plan computes the Polars plan's function


def test_histogram_equals_polars_when_no_user_is_subsampled(spark, ws, engine) -> None:
    frame = small_users_frame()
    assert frame.drop_nulls().unique().group_by("user").len()["len"].max() <= 8
    sdf = to_spark(spark, frame, "user long, item string")
    spark_hist = dict(engine.lattice_histogram_plan(sdf, ws.SparkUserItemsDescriptor(), 8).collect())
    assert spark_hist == polars_histogram(frame, 8)


def test_bound_rows_keep_a_subset_of_at_most_max_contributions(spark, ws, engine) -> None:
    frame = wgm.datasets.synthetic_zipf(n_users=200, items_per_user=30, seed=2)
    sdf = to_spark(spark, frame, "user long, item long")
    bounded = pl.DataFrame(engine.bound_plan(sdf, ws.SparkUserItemsDescriptor(), 5).collect(), schema=["user", "item"], orient="row")
    assert bounded.is_duplicated().sum() == 0
    assert bounded.join(frame.unique(), on=["user", "item"], how="anti").height == 0  # only the users' own items
    expected = frame.unique().group_by("user").agg(n=pl.len().clip(upper_bound=5))
    kept = bounded.group_by("user").agg(k=pl.len())
    assert expected.join(kept, on="user").select((pl.col("n") == pl.col("k")).all()).item()
    # the total lattice mass, sum_u t_u w(t_u), does not depend on which items are kept
    spark_hist = engine.lattice_histogram_plan(sdf, ws.SparkUserItemsDescriptor(), 5).collect()
    assert sum(r[1] for r in spark_hist) == sum(polars_histogram(frame, 5).values())


@pytest.mark.parametrize("user", ["__WGM_X", "user id"])
def test_bound_quotes_the_user_column_in_its_sql_expression(spark, ws, engine, user) -> None:
    """The per-user bound is one SQL expression naming the user column: a name with a space, or the expression's
    lambda variable in another case (which would shadow the column), still keeps min(t, Δ0) items per user."""
    frame = wgm.datasets.synthetic_zipf(n_users=50, items_per_user=30, seed=3)
    sdf = to_spark(spark, frame, "u long, item long").withColumnRenamed("u", user)
    space = ws.SparkUserItemsDescriptor(user=user)
    bounded = pl.DataFrame(engine.bound_plan(sdf, space, 5).collect(), schema=["user", "item"], orient="row")
    expected = frame.unique().group_by("user").agg(n=pl.len().clip(upper_bound=5))
    kept = bounded.group_by("user").agg(k=pl.len())
    assert expected.join(kept, on="user").select((pl.col("n") == pl.col("k")).all()).item()
    assert bounded.join(frame.unique(), on=["user", "item"], how="anti").height == 0


@pytest.mark.parametrize(("ddl", "dtype"), [("user long, item string", pl.String), ("user string, item int", pl.Int32)])
def test_no_noise_release_equals_polars(spark, ws, ddl, dtype) -> None:
    frame = small_users_frame()
    if dtype == pl.Int32:
        frame = frame.select(pl.col("user").cast(pl.String), pl.col("item").str.slice(1).cast(pl.Int32))
    sdf = to_spark(spark, frame, ddl)
    params = dict(max_contributions=8, scale=1e-7, threshold=2.5)
    released = ws.make_wgm(*ws.spark_user_items_space(), **params)(sdf)
    expected = wgm.make_wgm(*wgm.user_items_space(), **params)(frame)
    assert released.schema == pl.Schema({"item": dtype, "noisy_weight": pl.Float64})
    assert released["item"].to_list() == expected["item"].to_list() and released["item"].is_sorted()
    assert released["noisy_weight"].to_numpy() == pytest.approx(expected["noisy_weight"].to_numpy(), abs=1e-5)


ITEM_TYPES = {
    "date": ([datetime.date(2020, 1, 1), datetime.date(2021, 5, 3)], pl.Date),
    "timestamp": ([datetime.datetime(2020, 1, 1, 10), datetime.datetime(2021, 5, 3, 1, 2, 3)], pl.Datetime("us")),
    "binary": ([b"ab", b"\x00\x01"], pl.Binary),
    "decimal(10,2)": ([decimal.Decimal("1.50"), decimal.Decimal("2.25")], pl.Decimal(10, 2)),
    "boolean": ([True, False], pl.Boolean),
    "smallint": ([3, 4], pl.Int16),
}


@pytest.mark.parametrize("ddl", list(ITEM_TYPES))
def test_item_types_round_trip(spark, ws, ddl) -> None:
    values, dtype = ITEM_TYPES[ddl]
    sdf = spark.createDataFrame([(u, values[u % 2]) for u in range(10)], f"user int, item {ddl}")
    out = ws.make_wgm(*ws.spark_user_items_space(), max_contributions=2, scale=1e-7, threshold=0.5)(sdf)
    assert out.schema["item"] == dtype
    assert out["item"].to_list() == sorted(values)


# --------------------------------------------------------------------------------------------------------------
# with noise: release frequencies and the noise law


def counts_frame(levels: tuple[int, ...], per_level: int) -> pl.DataFrame:
    """Item (c, j) held by exactly c single-item users, so its weight is exactly c (t = 1)."""
    users, items, u = [], [], 0
    for c in levels:
        for j in range(per_level):
            users += list(range(u, u + c))
            items += [c * 10_000 + j] * c
            u += c
    return pl.DataFrame({"user": users, "item": items})


def test_release_frequencies_agree_with_the_exact_law_and_polars(spark, ws) -> None:
    levels, per_level, runs, sigma, threshold = (3, 4, 5, 6, 7), 300, 2, 1.0, 5.0
    frame = counts_frame(levels, per_level)
    sdf = to_spark(spark, frame, "user long, item long").cache()
    spark_m = ws.make_wgm(*ws.spark_user_items_space(), max_contributions=1, scale=sigma, threshold=threshold)
    polars_m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=1, scale=sigma, threshold=threshold)
    n = per_level * runs
    spark_hits = np.zeros(len(levels))
    polars_hits = np.zeros(len(levels))
    for _ in range(runs):
        for hits, out in ((spark_hits, spark_m(sdf)), (polars_hits, polars_m(frame))):
            level = (out["item"] // 10_000).to_numpy()
            hits += [np.count_nonzero(level == c) for c in levels]
    for i, c in enumerate(levels):
        # released iff c 2^20 + Z > T 2^20, Z ~ N_Z(0, (σ 2^20)^2): P ≈ Φ̄((T - c)/σ) (lattice error < 1e-6)
        p = float(ndtr((c - threshold) / sigma))
        tolerance = 5 * math.sqrt(p * (1 - p) / n) + 1e-6
        assert abs(spark_hits[i] / n - p) <= tolerance, (c, spark_hits[i] / n, p)
        assert abs(spark_hits[i] / n - polars_hits[i] / n) <= math.sqrt(2) * tolerance, c


def ks_statistic(sample: np.ndarray, sigma: float) -> float:
    x = np.sort(sample) / sigma
    cdf = ndtr(x)
    n = x.size
    return float(max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n)))


def test_noise_is_gaussian_with_the_claimed_scale(spark, ws) -> None:
    """All items released (T far below): noisy - exact weight passes a KS test at σ and fails at σ(1 ± 20%)."""
    n, sigma = 8000, 2.0
    frame = counts_frame((1,), n)  # n items of weight exactly 1
    sdf = to_spark(spark, frame, "user long, item long")
    out = ws.make_wgm(*ws.spark_user_items_space(), max_contributions=1, scale=sigma, threshold=-1e3)(sdf)
    assert out.height == n
    noise = out["noisy_weight"].to_numpy() - 1.0
    bound = 2.3 / math.sqrt(n)  # P[D > bound] < 1e-4 under the null
    assert ks_statistic(noise, sigma) < bound
    assert ks_statistic(noise, sigma * 0.8) > bound
    assert ks_statistic(noise, sigma * 1.2) > bound


# --------------------------------------------------------------------------------------------------------------
# privacy maps: the Polars measurement's


def test_map_is_the_polars_map(ws) -> None:
    params = dict(max_contributions=64, scale=3.884141, threshold=20.4975)
    for measure, extra in ((ZCDP, {}), (APPROX_DP, {"epsilon": 1.0})):
        m = ws.make_wgm(*ws.spark_user_items_space(), output_measure=measure, **extra, **params)
        reference = wgm.make_wgm(*wgm.user_items_space(), output_measure=measure, **extra, **params)
        assert m.output_measure == reference.output_measure
        for d_in in range(4):
            assert m.map(d_in) == reference.map(d_in)


def test_from_budget_matches_the_polars_calibration(ws) -> None:
    m = ws.make_wgm_from_budget(*ws.spark_user_items_space(), max_contributions=100, epsilon=1.0, delta=1e-5)
    assert m.check(1, (1.0, 1e-5))
    reference = wgm.make_wgm_from_budget(*wgm.user_items_space(), max_contributions=100, epsilon=1.0, delta=1e-5)
    assert m.map(2) == reference.map(2)
    z = ws.make_wgm_from_budget(*ws.spark_user_items_space(), max_contributions=10, rho=0.5, delta=1e-6)
    assert z.output_measure == ZCDP and z.check(1, (0.5, 1e-6))


def test_then_partial_chains(ws) -> None:
    m = ws.spark_user_items_space() >> ws.then_wgm(max_contributions=3, scale=1.0, threshold=5.0)
    assert m.map(1)[0] == pytest.approx(0.5)


# --------------------------------------------------------------------------------------------------------------
# two-stage mechanisms: stage 1 on Spark, stage 2 on the driver


def coverage_frame() -> pl.DataFrame:
    """Items with distinct user counts and greedy gains: A 30 users, B 25 (inside A's), C 20, D 10, E 5."""
    holders = {"A": range(30), "B": range(25), "C": range(30, 50), "D": range(50, 60), "E": range(60, 65)}
    rows = [(u, item) for item, users in holders.items() for u in users]
    return pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String}, orient="row")


TWO_STAGE = dict(k=3, max_contributions=3, wgm_scale=1e-6, wgm_threshold=1.5, peel_scale=1e-3)


def test_top_k_on_spark_equals_polars(spark, ws) -> None:
    from opendp_wgm.measurements.top_k import make_wgm_top_k

    frame = coverage_frame()
    released = ws.make_wgm_top_k(*ws.spark_user_items_space(), **TWO_STAGE)(to_spark(spark, frame, "user long, item string"))
    expected = make_wgm_top_k(*wgm.user_items_space(), **TWO_STAGE)(frame)
    assert released.equals(expected)
    assert released["item"].to_list() == ["A", "B", "C"] and released["rank"].to_list() == [1, 2, 3]


def test_hitting_set_on_spark_equals_polars(spark, ws) -> None:
    from opendp_wgm.measurements.hitting_set import make_wgm_hitting_set

    frame = coverage_frame()
    released = ws.make_wgm_hitting_set(*ws.spark_user_items_space(), **TWO_STAGE)(to_spark(spark, frame, "user long, item string"))
    expected = make_wgm_hitting_set(*wgm.user_items_space(), **TWO_STAGE)(frame)
    assert released.equals(expected)
    assert released["item"].to_list() == ["A", "C", "D"]  # B covers nobody new after A


def test_two_stage_with_no_candidates(spark, ws) -> None:
    sdf = to_spark(spark, coverage_frame(), "user long, item string")
    params = {**TWO_STAGE, "wgm_threshold": 1e3}
    for make in (ws.make_wgm_top_k, ws.make_wgm_hitting_set):
        out = make(*ws.spark_user_items_space(), **params)(sdf)
        assert out.height == 0 and out.schema["item"] == pl.String


def test_two_stage_maps_are_the_polars_maps(ws) -> None:
    from opendp_wgm.measurements import hitting_set, top_k

    space, polars_space = ws.spark_user_items_space(), wgm.user_items_space()
    for spark_make, polars_make in ((ws.make_wgm_top_k, top_k.make_wgm_top_k), (ws.make_wgm_hitting_set, hitting_set.make_wgm_hitting_set)):
        for extra in ({}, {"output_measure": APPROX_DP, "wgm_epsilon": 1.0, "peel_delta": 1e-6}):
            params = {**TWO_STAGE, "wgm_scale": 4.0, "wgm_threshold": 25.0, "peel_scale": 10.0, **extra}
            m, reference = spark_make(*space, **params), polars_make(*polars_space, **params)
            assert m.output_measure == reference.output_measure
            assert [m.map(d) for d in range(3)] == [reference.map(d) for d in range(3)]
    budget = dict(k=10, max_contributions=50, epsilon=1.0, delta=1e-5)
    for spark_make, polars_make in (
        (ws.make_wgm_top_k_from_budget, top_k.make_wgm_top_k_from_budget),
        (ws.make_wgm_hitting_set_from_budget, hitting_set.make_wgm_hitting_set_from_budget),
    ):
        m, reference = spark_make(*space, **budget), polars_make(*polars_space, **budget)
        assert m.map(1) == reference.map(1) and m.check(1, (1.0, 1e-5))
    with pytest.raises(ValueError, match=r"`k` must be an integer >= 1 \(found 0\)"):
        ws.make_wgm_top_k(*space, **{**TWO_STAGE, "k": 0})


# --------------------------------------------------------------------------------------------------------------
# DP-SIPS: the rounds on Spark, the Polars twin's map


def sips_frame() -> pl.DataFrame:
    """tests/measurements/test_dp_sips.py's two-round example: 20 fans hold p1..p4 (10 per item at Δ0 = 4), 6
    rich users p1..p4 and r (r ≤ 3 in round 1, 6 in round 2), 3 loners q (3 in every round)."""
    popular = ["p1", "p2", "p3", "p4"]
    users = [popular] * 20 + [[*popular, "r"]] * 6 + [["q"]] * 3
    return pl.DataFrame(
        {"user": [u for u, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


SIPS = dict(max_contributions=4, scales=[1e-7, 1e-7, 1e-7], thresholds=[5.0, 5.0, 2.5])


@pytest.mark.parametrize(("ddl", "dtype"), [("user long, item string", pl.String), ("user long, item binary", pl.Binary)])
def test_dp_sips_rounds_equal_polars(spark, ws, ddl, dtype) -> None:
    frame = sips_frame().with_columns(pl.col("item").cast(dtype))
    sdf = to_spark(spark, frame, ddl)
    m = ws.make_dp_sips(*ws.spark_user_items_space(), **SIPS)
    expected = wgm.make_dp_sips(*wgm.user_items_space(), **SIPS)(frame)
    for _ in range(2):  # every kept subset (a fresh seed per round) gives the same rounds
        released = m(sdf)
        assert released.schema == pl.Schema({"item": dtype, "noisy_weight": pl.Float64, "round": pl.Int16})
        assert released.select("item", "round").rows() == expected.select("item", "round").rows()
        assert dict(zip(released["item"].cast(pl.String), released["round"], strict=True)) == {
            "p1": 1, "p2": 1, "p3": 1, "p4": 1, "r": 2, "q": 3
        }
        assert released.filter(pl.col("item").cast(pl.String) == "r")["noisy_weight"].item() == pytest.approx(6.0, abs=1e-4)
    # one round is the Spark WGM: r never passes
    one = ws.make_dp_sips(*ws.spark_user_items_space(), max_contributions=4, scales=[1e-7], thresholds=[5.0])(sdf)
    assert one["item"].cast(pl.String).to_list() == ["p1", "p2", "p3", "p4"] and one["round"].to_list() == [1] * 4


def test_dp_sips_releases_nothing_then_something(spark, ws) -> None:
    """A round that releases nothing leaves the data as it is; an empty release keeps the schema."""
    sdf = to_spark(spark, sips_frame(), "user long, item string")
    params = dict(max_contributions=4, scales=[1e-7, 1e-7], thresholds=[100.0, 5.0])
    released = ws.make_dp_sips(*ws.spark_user_items_space(), **params)(sdf)
    assert released.select("item", "round").rows() == [("p1", 2), ("p2", 2), ("p3", 2), ("p4", 2)]
    empty = ws.make_dp_sips(*ws.spark_user_items_space(), max_contributions=4, scales=[1e-7], thresholds=[100.0])(sdf)
    assert empty.height == 0 and empty.schema == pl.Schema({"item": pl.String, "noisy_weight": pl.Float64, "round": pl.Int16})


def test_dp_sips_map_is_the_polars_map(ws) -> None:
    params = dict(max_contributions=20, scales=(6.0, 3.0, 2.0), thresholds=(30.0, 15.0, 9.0))
    for measure, extra in ((ZCDP, {}), (APPROX_DP, {"epsilon": 1.5})):
        m = ws.make_dp_sips(*ws.spark_user_items_space(), output_measure=measure, **extra, **params)
        reference = wgm.make_dp_sips(*wgm.user_items_space(), output_measure=measure, **extra, **params)
        assert m.output_measure == reference.output_measure
        for d_in in range(4):
            assert m.map(d_in) == reference.map(d_in)
    for schedule in ({"fractions": DEFAULT_FRACTIONS}, {"fractions": [0.1, 0.9]}, {"rounds": 3}, {"ratio": 0.5}):
        budget = dict(max_contributions=10, epsilon=1.0, delta=1e-5, **schedule)
        m = ws.make_dp_sips_from_budget(*ws.spark_user_items_space(), **budget)
        assert m.map(1) == wgm.make_dp_sips_from_budget(*wgm.user_items_space(), **budget).map(1)
    chained = ws.spark_user_items_space() >> ws.then_dp_sips(max_contributions=3, scales=[1.0, 1.0], thresholds=[5.0, 5.0])
    assert chained.map(1)[0] == pytest.approx(1.0)


ADAPTIVE_BUDGETS = (
    {"epsilon": 1.0, "delta": 1e-5},
    {"epsilon": 0.3, "delta": 1e-7, "max_contributions": 10},
    {"epsilon": 4.0, "delta": 1e-4, "noise_delta_fraction": 0.3},
    {"rho": 0.1, "delta": 1e-6},
    {"rho": 2.0, "delta": 1e-5, "max_contributions": 5},
)


@pytest.mark.parametrize("budget", ADAPTIVE_BUDGETS)
def test_dp_sips_default_is_the_adaptive_schedule_with_the_polars_map(ws, budget) -> None:
    """Without a schedule the Spark DP-SIPS is the adaptive one: its map is the Polars default's and the
    adaptive calibration's, at every d_in (the fixed (0.05, 0.95) map differs)."""
    from opendp_wgm.privacy.calibrate import calibrate_dp_sips

    budget = {"max_contributions": 100, **budget}
    m = ws.make_dp_sips_from_budget(*ws.spark_user_items_space(), **budget)
    reference = wgm.make_dp_sips_from_budget(*wgm.user_items_space(), **budget)
    cal = calibrate_dp_sips(**budget, adaptive=True)
    assert cal.statistic_scale is not None
    assert m.output_measure == reference.output_measure
    assert [m.map(d) for d in range(5)] == [reference.map(d) for d in range(5)] == [cal.loss(d) for d in range(5)]
    fixed = calibrate_dp_sips(**budget, fractions=DEFAULT_FRACTIONS)
    assert m.map(1) != fixed.loss(1)
    value = budget.get("epsilon", budget.get("rho"))
    assert m.check(1, (value, budget["delta"]))
    # the explicit constructor takes the adaptive parameters, as the Polars one
    from opendp_wgm.measurements.dp_sips import dp_sips_arguments

    explicit = dp_sips_arguments(cal)
    assert {"statistic_scale", "branch_scales", "branch_thresholds"} <= set(explicit)
    m = ws.make_dp_sips(*ws.spark_user_items_space(), **explicit)
    assert [m.map(d) for d in range(5)] == [wgm.make_dp_sips(*wgm.user_items_space(), **explicit).map(d) for d in range(5)]


def branch_frame(dense: bool) -> pl.DataFrame:
    """tests/measurements/test_dp_sips.py's branch data: 40 users hold "p" and one item of their own; round 1
    (T = 10) releases "p" only. Dense: each of the 40 then holds one unreleased item of two (all boosted).
    Sparse: 200 more users hold 30 items each, none released (40 of 240 remaining users boosted)."""
    users = [["p", f"own{u}"] for u in range(40)]
    if not dense:
        users += [[f"s{u}_{j}" for j in range(30)] for u in range(200)]
    return pl.DataFrame(
        {"user": [u for u, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


#: The branches differ in their rounds: the sparse one releases the own items in round 2, the dense one nothing
#: in round 2 (T = 1e6) and the own items in round 3; no noise to speak of anywhere (σ = 1e-7, and σ_s = 1e-7 on
#: the counts 40 vs 0 or 40 vs 200: the rule's outcome cannot change).
ADAPTIVE_SIPS = dict(
    max_contributions=40, scales=[1e-7, 1e-7], thresholds=[10.0, 0.5],
    statistic_scale=1e-7, branch_scales=[1e-7, 1e-7], branch_thresholds=[1e6, 0.5],
)


@pytest.mark.parametrize("dense", [True, False])
def test_dp_sips_adaptive_release_takes_the_branch_the_count_chooses(spark, ws, dense) -> None:
    frame = branch_frame(dense)
    sdf = to_spark(spark, frame, "user long, item string")
    released = ws.make_dp_sips(*ws.spark_user_items_space(), **ADAPTIVE_SIPS)(sdf)
    expected = wgm.make_dp_sips(*wgm.user_items_space(), **ADAPTIVE_SIPS)(frame)
    assert released.schema == pl.Schema({"item": pl.String, "noisy_weight": pl.Float64, "round": pl.Int16})
    assert released.select("item", "round").rows() == expected.select("item", "round").rows()
    rounds = dict(zip(released["item"].to_list(), released["round"].to_list(), strict=True))
    assert rounds.pop("p") == 1
    assert sorted(rounds) == sorted(f"own{u}" for u in range(40))  # weight 1 each; the s items 1/√30 each
    assert set(rounds.values()) == ({3} if dense else {2})


def test_spark_user_bins_are_the_polars_bins(spark, ws, engine) -> None:
    """The two-bin count on Spark: users still holding an unreleased item, boosted or not, each in one bin."""
    from opendp_wgm._spaces import _prepare_frame, _resolve_space
    from opendp_wgm.engines.polars import distinct_pairs_plan
    from opendp_wgm.measurements.dp_sips import _flag_released, _user_bins

    rows = [
        (1, "a"), (1, "x1"),  # 1 of 2 released: boosted
        (2, "a"), (2, "b"), (2, "a"),  # everything released (a duplicate): in no bin
        *((3, f"y{i}") for i in range(10)),  # nothing released: other
        (4, "b"), *((4, f"w{i}") for i in range(30)),  # 1 of 31 released: boosted
        (5, "x1"), (5, "x1"), (5, None),  # a duplicate and a null item, nothing released: other
        (None, "x1"), (None, "a"),  # a null user: dropped
        (6, None),  # only a null item: in no bin
    ]
    frame = pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String}, orient="row")
    space = _resolve_space(*wgm.user_items_space(), None)
    sdf = to_spark(spark, frame, "user long, item string")
    descriptor = ws.SparkUserItemsDescriptor("user", "item")
    for released in (["a", "b"], [], ["zz"]):
        keys = pl.Series("item", released, dtype=pl.String)
        pairs = distinct_pairs_plan(_prepare_frame(frame, space), space)
        expected = _user_bins(_flag_released(pairs, keys.to_frame(), "item"), space)
        assert engine.user_bins(sdf, descriptor, keys).tolist() == expected.tolist()
    assert engine.user_bins(sdf, descriptor, pl.Series("item", ["a", "b"])).tolist() == [2, 2]
    assert engine.user_bins(sdf, descriptor, pl.Series("item", [], dtype=pl.String)).tolist() == [0, 5]


def test_dp_sips_adaptive_count_is_noised_on_the_driver_at_the_statistic_scale(spark, ws, monkeypatch) -> None:
    """The Spark count goes through the WGM kernel's sampler (``noisy_above_threshold``, on the 2^-20 lattice)
    at σ_s, as on Polars, and the noisy counts choose the branch."""
    from opendp_wgm.measurements import dp_sips as dp_sips_module

    calls = []

    def fake(bins, *, scale, threshold, noise):
        calls.append((bins.tolist(), scale, threshold, noise))
        return np.array([0, 1]), np.array([False, True])  # noisy: boosted 0 of 1: sparse

    monkeypatch.setattr(dp_sips_module, "noisy_above_threshold", fake)
    sdf = to_spark(spark, branch_frame(dense=True), "user long, item string")
    released = ws.make_dp_sips(*ws.spark_user_items_space(), **{**ADAPTIVE_SIPS, "statistic_scale": 7.5})(sdf)
    assert calls == [([40 << 20, 0], 7.5, 0.0, "lattice")]
    assert released["round"].max() == 2  # the noisy count, not the true one (40 to 0), chose the sparse branch


def test_dp_sips_adaptive_from_budget_takes_both_branches(spark, ws, monkeypatch) -> None:
    """The calibrated default, with its real noise, at ρ = 50 (σ_s = 1/√(2·0.0025·50) = 2): Spark counts the
    bins exactly ([40, 0] on the dense data, [40, 200] on the sparse), the driver noises them at σ_s, and the
    rule takes the dense branch on the first and the sparse one on the second. It could go the other way only if
    the noise moved boosted − (boosted + others)/4 by more than 26 (standard deviation 2·√(0.75² + 0.25²) ≈ 1.6,
    so over 16 standard deviations: probability below 1e-50)."""
    from opendp_wgm.privacy.calibrate import calibrate_dp_sips

    budget = dict(max_contributions=2, rho=50.0, delta=1e-6)
    cal = calibrate_dp_sips(**budget, adaptive=True)
    from opendp_wgm.measurements import dp_sips as dp_sips_module

    m = ws.make_dp_sips_from_budget(*ws.spark_user_items_space(), **budget)
    real, calls = dp_sips_module.noisy_dense_branch, []

    def spy(bins, statistic_scale):
        calls.append((bins.tolist(), statistic_scale, real(bins, statistic_scale)))
        return calls[-1][2]

    monkeypatch.setattr(dp_sips_module, "noisy_dense_branch", spy)
    for dense in (True, False):
        released = m(to_spark(spark, branch_frame(dense), "user long, item string"))
        assert released.filter(pl.col("item") == "p")["round"].to_list() == [1]
        if not dense:  # the sparse branch has two rounds
            assert released["round"].max() <= 2
    assert calls == [([40, 0], cal.statistic_scale, True), ([40, 200], cal.statistic_scale, False)]


def test_dp_sips_bad_parameters_give_the_polars_messages(ws) -> None:
    space, polars_space = ws.spark_user_items_space(), wgm.user_items_space()
    cases = [
        dict(max_contributions=0, scales=[1.0], thresholds=[5.0]),
        dict(max_contributions=2, scales=[1.0, 2.0], thresholds=[5.0]),
        dict(max_contributions=2, scales=[], thresholds=[]),
        dict(max_contributions=2, scales=[-1.0], thresholds=[5.0]),
        dict(max_contributions=2, scales=[1.0], thresholds=[5.0], output_measure=APPROX_DP),
        dict(max_contributions=2, scales=[1.0, 1.0], thresholds=[5.0, 5.0], statistic_scale=1.0),
        dict(max_contributions=2, scales=[1.0], thresholds=[5.0], statistic_scale=1.0, branch_scales=[1.0],
             branch_thresholds=[3.0]),
    ]
    for params in cases:
        with pytest.raises(ValueError, match="must") as polars_error:
            wgm.make_dp_sips(*polars_space, **params)
        with pytest.raises(ValueError, match=re.escape(str(polars_error.value))):
            ws.make_dp_sips(*space, **params)
    with pytest.raises(ValueError, match="`delta` must be in"):
        ws.make_dp_sips_from_budget(*space, max_contributions=2, epsilon=1.0, delta=2.0)


# --------------------------------------------------------------------------------------------------------------
# DP-SIPS as stage 1 of the two-stage mechanisms (stage_1="dp-sips")


def polars_dp_sips_two_stage(mechanism: str, **params):
    """The Polars combinator behind ``_make_dp_sips_top_k`` / ``_make_dp_sips_hitting_set``: what
    ``make_*_from_budget(stage_1="dp-sips")`` builds from its calibration."""
    import functools

    from opendp_wgm.measurements.hitting_set import make_user_peeling
    from opendp_wgm.measurements.top_k import make_peeling_top_k
    from opendp_wgm.measurements.two_stage import make_dp_sips_then_peeling
    from opendp_wgm.privacy.peeling import TOP_K, USER_PEELING

    peeling, accounting = {
        "top-k": (functools.partial(make_peeling_top_k, method=params.pop("method", "auto")), TOP_K),
        "hitting-set": (make_user_peeling, USER_PEELING),
    }[mechanism]
    options = dict(output_measure=None, sips_epsilon=None, peel_delta=None, noise="lattice", item=None, passes=1, engine="auto")
    return make_dp_sips_then_peeling(*wgm.user_items_space(), **{**options, **params}, peeling=peeling, accounting=accounting)


# SIPS's rounds (p1..p4 in round 1, r in round 2, q in round 3), then peeling with no noise to speak of
SIPS_TWO_STAGE = dict(max_contributions=4, sips_scales=[1e-7] * 3, sips_thresholds=[5.0, 5.0, 2.5], peel_scale=1e-3)


def test_dp_sips_two_stage_releases_candidates_of_every_round(spark, ws) -> None:
    """Stage 2 ranks the candidates of all DP-SIPS rounds: r (6 users) is a candidate only from round 2 and q (3
    users) only from round 3; the release is the Polars twin's (item, rank)."""
    frame = sips_frame()
    sdf = to_spark(spark, frame, "user long, item string")
    popular = {"p1", "p2", "p3", "p4"}
    for _ in range(2):  # p1..p4 tie (26 users each): their order is the peeling's draw
        top = _make_dp_sips_top_k(*ws.spark_user_items_space(), k=6, **SIPS_TWO_STAGE)(sdf)
        expected = polars_dp_sips_two_stage("top-k", k=6, **SIPS_TWO_STAGE)(frame)
        for released in (top, expected):
            assert released.schema == pl.Schema({"item": pl.String, "rank": pl.UInt32})
            assert set(released["item"][:4]) == popular and released["item"][4:].to_list() == ["r", "q"]
            assert released["rank"].to_list() == [1, 2, 3, 4, 5, 6]
        cover = _make_dp_sips_hitting_set(*ws.spark_user_items_space(), k=2, **SIPS_TWO_STAGE)(sdf)
        expected = polars_dp_sips_two_stage("hitting-set", k=2, **SIPS_TWO_STAGE)(frame)
        for released in (cover, expected):  # a popular item covers 26 users, then q the 3 loners (r covers no one new)
            assert released.schema == pl.Schema({"item": pl.String, "rank": pl.UInt32})
            assert released["item"][0] in popular and released["item"][1] == "q"
    # one round at T = 5 (the WGM's candidates) has neither r nor q
    one = dict(SIPS_TWO_STAGE, sips_scales=[1e-7], sips_thresholds=[5.0])
    assert set(_make_dp_sips_top_k(*ws.spark_user_items_space(), k=6, **one)(sdf)["item"]) == popular
    # no candidate: an empty release with the item's type
    none = dict(SIPS_TWO_STAGE, sips_scales=[1e-7, 1e-7], sips_thresholds=[1e3, 1e3])
    for make in (_make_dp_sips_top_k, _make_dp_sips_hitting_set):
        out = make(*ws.spark_user_items_space(), k=2, **none)(sdf)
        assert out.height == 0 and out.schema == pl.Schema({"item": pl.String, "rank": pl.UInt32})


def many_holders_frame() -> pl.DataFrame:
    """400 users each hold a..e and one item of their own: a..e are candidates at ε = 1 (ρ = 0.5)."""
    users = [["a", "b", "c", "d", "e", f"solo{u}"] for u in range(400)]
    return pl.DataFrame(
        {"user": [u for u, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_dp_sips_two_stage_from_budget_releases_k_ranked_items(spark, ws, budget) -> None:
    sdf = to_spark(spark, many_holders_frame(), "user long, item string")
    for make in (ws.make_wgm_top_k_from_budget, ws.make_wgm_hitting_set_from_budget):
        m = make(*ws.spark_user_items_space(), k=3, max_contributions=10, delta=1e-5, stage_1="dp-sips", **budget)
        released = m(sdf)
        assert released.schema == pl.Schema({"item": pl.String, "rank": pl.UInt32})
        assert released["rank"].to_list() == [1, 2, 3] and released["item"].n_unique() == 3
        assert set(released["item"]) <= {"a", "b", "c", "d", "e"}


def test_dp_sips_two_stage_maps_are_the_polars_maps(ws) -> None:
    from opendp_wgm.measurements import hitting_set, top_k

    space, polars_space = ws.spark_user_items_space(), wgm.user_items_space()
    pairs = (
        (ws.make_wgm_top_k_from_budget, top_k.make_wgm_top_k_from_budget),
        (ws.make_wgm_hitting_set_from_budget, hitting_set.make_wgm_hitting_set_from_budget),
    )
    budgets = (
        {"epsilon": 1.0, "delta": 1e-5},
        {"epsilon": 0.25, "delta": 1e-8, "split": 0.3},
        {"rho": 0.1, "delta": 1e-6},
        {"rho": 2.0, "delta": 1e-4},
    )
    schedules = ({}, {"rounds": 2, "ratio": 0.5}, {"rounds": 4})
    for spark_make, polars_make in pairs:
        for budget in budgets:
            for schedule in schedules:
                params = dict(k=10, max_contributions=50, stage_1="dp-sips", **budget, **schedule)
                m, reference = spark_make(*space, **params), polars_make(*polars_space, **params)
                assert m.output_measure == reference.output_measure
                assert [m.map(d) for d in range(4)] == [reference.map(d) for d in range(4)]
                assert m.check(1, (budget.get("epsilon", budget.get("rho")), budget["delta"]))
    # the explicit constructors' maps are the Polars combinator's, in both output measures
    for mechanism, make in (("top-k", _make_dp_sips_top_k), ("hitting-set", _make_dp_sips_hitting_set)):
        for extra in ({}, {"output_measure": APPROX_DP, "sips_epsilon": 1.0, "peel_delta": 1e-6}):
            params = dict(k=5, max_contributions=20, sips_scales=(6.0, 3.0), sips_thresholds=(30.0, 15.0), peel_scale=10.0, **extra)
            m, reference = make(*space, **params), polars_dp_sips_two_stage(mechanism, **params)
            assert m.output_measure == reference.output_measure
            assert [m.map(d) for d in range(4)] == [reference.map(d) for d in range(4)]


def test_dp_sips_two_stage_bad_options_give_the_polars_messages(ws) -> None:
    from opendp_wgm.measurements import hitting_set, top_k

    space, polars_space = ws.spark_user_items_space(), wgm.user_items_space()
    budget = dict(k=3, max_contributions=10, epsilon=1.0, delta=1e-5)
    cases = [
        {"stage_1": "sips"},
        {"stage_1": None},
        {"rounds": 2},
        {"stage_1": "wgm", "ratio": 0.5},
        {"stage_1": "dp-sips", "rounds": 0},
        {"stage_1": "dp-sips", "ratio": -1.0},
    ]
    for spark_make, polars_make in (
        (ws.make_wgm_top_k_from_budget, top_k.make_wgm_top_k_from_budget),
        (ws.make_wgm_hitting_set_from_budget, hitting_set.make_wgm_hitting_set_from_budget),
    ):
        for options in cases:
            with pytest.raises(ValueError, match="must") as polars_error:
                polars_make(*polars_space, **budget, **options)
            with pytest.raises(ValueError, match=re.escape(str(polars_error.value))):
                spark_make(*space, **budget, **options)
    with pytest.raises(ValueError, match=re.escape("`stage_1` must be one of {'wgm', 'dp-sips'} (found 'sips')")):
        ws.make_wgm_top_k_from_budget(*space, **budget, stage_1="sips")
    with pytest.raises(ValueError, match=re.escape("`method` must be one of")):
        ws.make_wgm_top_k_from_budget(*space, **budget, stage_1="dp-sips", method="slow")
    with pytest.raises(ValueError, match=re.escape("`sips_thresholds` must") + "|" + re.escape("`thresholds` must")):
        _make_dp_sips_top_k(*space, k=3, **{**SIPS_TWO_STAGE, "sips_thresholds": [5.0]})


# --------------------------------------------------------------------------------------------------------------
# bad input


def test_bad_frames(spark, ws) -> None:
    m = ws.make_wgm(*ws.spark_user_items_space(), max_contributions=2, scale=1.0, threshold=5.0)
    # OpenDP wraps errors raised inside a release in an OpenDPException that carries the original message
    polars_frame = r"TypeError: `data` must be a pyspark.sql.DataFrame \(found polars.*\).*opendp_wgm.user_items_space"
    with pytest.raises(dp.OpenDPException, match=polars_frame):
        m(pl.DataFrame({"user": [1], "item": [2]}))
    with pytest.raises(dp.OpenDPException, match=r"ValueError: column\(s\) \['item'\] not found in the data \(columns: \['user', 'thing'\]\)"):
        m(spark.createDataFrame([(1, "a")], "user long, thing string"))
    with pytest.raises(dp.OpenDPException, match="TypeError: column 'item' has Spark type double, which is not supported"):
        m(spark.createDataFrame([(1, 0.5)], "user long, item double"))
    with pytest.raises(dp.OpenDPException, match="column 'user' has Spark type array<int>"):
        m(spark.createDataFrame([([1], "a")], "user array<int>, item string"))


def test_stopped_session(spark, ws, monkeypatch) -> None:
    m = ws.make_wgm(*ws.spark_user_items_space(), max_contributions=2, scale=1.0, threshold=5.0)
    sdf = spark.createDataFrame([(1, "a")], "user long, item string")
    monkeypatch.setattr(spark.sparkContext, "_jsc", None)  # what SparkContext.stop() leaves behind
    with pytest.raises(dp.OpenDPException, match="RuntimeError: the Spark session of this DataFrame is not running"):
        m(sdf)


def test_bad_spaces_and_parameters(ws) -> None:
    domain, _ = ws.spark_user_items_space(user="u")
    with pytest.raises(ValueError, match="identifies users by 'user' but `input_domain` by 'u'"):
        ws.make_wgm(domain, dp.symmetric_id_distance(pl.col("user")), max_contributions=2, scale=1.0, threshold=5.0)
    with pytest.raises(ValueError, match=r"must be dp\.symmetric_id_distance"):
        ws.make_wgm(domain, dp.symmetric_distance(), max_contributions=2, scale=1.0, threshold=5.0)
    # an identifier expression (a household of persons) is refused, not read as its root column
    with pytest.raises(ValueError, match="must identify users by a column"):
        ws.make_wgm(domain, dp.symmetric_id_distance(pl.col("u") // 2), max_contributions=2, scale=1.0, threshold=5.0)
    space = ws.spark_user_items_space()
    with pytest.raises(ValueError, match=r"`max_contributions` must be an integer >= 1 \(found 0\)"):
        ws.make_wgm(*space, max_contributions=0, scale=1.0, threshold=5.0)
    with pytest.raises(ValueError, match="`epsilon` must be given with"):
        ws.make_wgm(*space, max_contributions=2, scale=1.0, threshold=5.0, output_measure=APPROX_DP)
    with pytest.raises(ValueError, match="`user` and `item` must be different columns"):
        ws.spark_user_items_space(user="a", item="a")


def test_features_must_be_enabled(ws) -> None:
    dp.disable_features("honest-but-curious")
    try:
        with pytest.raises(dp.OpenDPException, match="enable_features"):
            ws.make_wgm(*ws.spark_user_items_space(), max_contributions=2, scale=1.0, threshold=5.0)
    finally:
        dp.enable_features("honest-but-curious")


def test_missing_pyspark_names_the_extra(monkeypatch) -> None:
    """Runs everywhere: with pyspark hidden (or absent), every entry point says what to install."""
    from opendp_wgm.engines import spark as module

    for name in [m for m in sys.modules if m == "pyspark" or m.startswith("pyspark.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # makes `import pyspark` raise ImportError
    with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[spark\]"'):
        module.spark_user_items_space()
    with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[spark\]"'):
        module.check_frame(object(), module.SparkUserItemsDescriptor())


def test_public_import_paths_re_export_the_engines() -> None:
    """Runs everywhere: ``opendp_wgm.spark`` and ``opendp_wgm.tumult`` are the documented paths of the engines;
    ``opendp_wgm.spark`` re-exports the Spark space and the package's own constructors (one API)."""
    import opendp_wgm.engines.spark as engine
    import opendp_wgm.engines.tumult as adapter
    import opendp_wgm.spark as spark_path
    import opendp_wgm.tumult as tumult_path

    assert set(engine.__all__) <= set(spark_path.__all__) and tumult_path.__all__ == adapter.__all__
    assert all(getattr(spark_path, name) is getattr(engine, name) for name in engine.__all__)
    constructors = [name for name in spark_path.__all__ if name not in engine.__all__]
    assert sorted(constructors) == [
        "make_dp_sips", "make_dp_sips_from_budget", "make_partition_selection", "make_peeling_top_k",
        "make_user_peeling", "make_wgm", "make_wgm_from_budget", "make_wgm_hitting_set",
        "make_wgm_hitting_set_from_budget", "make_wgm_top_k", "make_wgm_top_k_from_budget", "then_dp_sips",
        "then_dp_sips_from_budget", "then_partition_selection", "then_wgm", "then_wgm_from_budget",
        "then_wgm_hitting_set", "then_wgm_hitting_set_from_budget", "then_wgm_top_k", "then_wgm_top_k_from_budget",
    ]
    assert all(getattr(spark_path, name) is getattr(wgm, name) for name in constructors)
    assert all(getattr(tumult_path, name) is getattr(adapter, name) for name in adapter.__all__)
    # the engine module declares no constructor: they live in the measurements only (one API)
    assert not any(name.startswith(("make_", "then_")) for name in vars(engine))


# --------------------------------------------------------------------------------------------------------------
# one API: the engine is a property of the input space


def test_polars_options_are_refused_on_spark_with_the_reason(ws) -> None:
    space = ws.spark_user_items_space()
    params = dict(max_contributions=2, scale=1.0, threshold=5.0)
    sips = dict(max_contributions=2, scales=[1.0], thresholds=[5.0])
    cases = [
        (wgm.make_wgm, params, {"passes": 2}, "`passes=2` is a Polars option.*Spark partitions the users itself"),
        (wgm.make_wgm, params, {"engine": "streaming"}, "`engine='streaming'` is a Polars option"),
        (wgm.make_wgm, params, {"noise": "opendp"}, "`noise='opendp'` is a Polars option.*executors draw"),
        (wgm.make_wgm, params, {"item": "thing"}, r"`item` \('thing'\) disagrees with the Spark input space"),
        (wgm.make_dp_sips, sips, {"passes": 3}, "`passes=3` is a Polars option"),
        (wgm.make_wgm_from_budget, dict(max_contributions=2, epsilon=1.0, delta=1e-5), {"engine": "in-memory"},
         "`engine='in-memory'` is a Polars option"),
        (wgm.make_wgm_top_k, TWO_STAGE, {"passes": 2}, "`passes=2` is a Polars option"),
        (wgm.make_wgm_hitting_set, TWO_STAGE, {"noise": "opendp"}, "`noise='opendp'` is a Polars option"),
    ]
    for make, base, option, message in cases:
        with pytest.raises(ValueError, match=message):
            make(*space, **base, **option)
        if "item" not in option:
            make(*wgm.user_items_space(), **base, **option)  # the same options run on Polars
    assert wgm.make_wgm(*space, **params, item="item").map(1) == wgm.make_wgm(*space, **params).map(1)


def test_polars_only_constructors_refuse_a_spark_space_with_the_reason(ws) -> None:
    """Every constructor without a Spark plan says so, and names the ones that run on Spark."""
    from opendp_wgm.transformations import make_bound_user_items, make_candidate_counts

    dp.enable_features("idealized-numerics")  # the policy baselines ask for it first
    space = ws.spark_user_items_space()
    refusals = [
        lambda: make_bound_user_items(*space, max_contributions=2),
        lambda: make_candidate_counts(*space, candidates=["a"]),
        lambda: wgm.make_policy_gaussian(*space, max_contributions=2, scale=1.0, threshold=5.0),
        lambda: wgm.make_policy_gaussian_from_budget(*space, max_contributions=2, epsilon=1.0, delta=1e-5),
        lambda: wgm.make_limited_domain_top_k(*space, k=2, k_bar=2, max_contributions=2, epsilon=1.0, delta=1e-5),
        lambda: wgm.make_opendp_key_release(*space, max_contributions=2, epsilon=1.0, delta=1e-5),
    ]
    for refuse in refusals:
        with pytest.raises(ValueError, match=r"runs on Polars frames only: it has no Spark plan.*use make_wgm, make_dp_sips"):
            refuse()


def test_known_domain_peelings_run_on_spark_with_the_polars_maps(spark, ws) -> None:
    """``make_peeling_top_k`` and ``make_user_peeling`` on a Spark space: Spark computes the candidates' exact
    statistics, the driver selects as on Polars; with almost no noise the release is the Polars one."""
    frame = small_users_frame()
    sdf = to_spark(spark, frame, "user long, item string")
    candidates = ["x1", "x2", "x3", "x4", "nowhere"]
    for make in (wgm.make_peeling_top_k, wgm.make_user_peeling):
        m = make(*ws.spark_user_items_space(), candidates=candidates, k=3, scale=1e-6)
        reference = make(*wgm.user_items_space(), candidates=candidates, k=3, scale=1e-6)
        assert [m.map(d) for d in range(3)] == [reference.map(d) for d in range(3)]
        assert m(sdf).equals(reference(frame))
    with pytest.raises(dp.OpenDPException, match="candidate"):  # cast exactly to the item's type, before noise
        wgm.make_peeling_top_k(*ws.spark_user_items_space(), candidates=[1.5], k=1, scale=1.0)(sdf)
