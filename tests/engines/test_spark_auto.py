"""``max_contributions="auto"`` and the optimal partition selection on Spark: the Polars engine's bins, choice,
maps and outputs.

The tests share the process's local Spark session (tests/engines/conftest.py) and skip, with the reason, when
pyspark or Java is missing.
"""

from __future__ import annotations

import datetime
import decimal
import math

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm import spark as ws
from opendp_wgm.measurements.auto_contributions import user_count_bins
from opendp_wgm.privacy.auto import BINS, GRID
from opendp_wgm.privacy.partition import release_table

pytest.importorskip("pyspark", reason='pyspark is not installed: pip install "opendp-wgm[spark]"')
pytestmark = pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning")

APPROX_DP = dp.approximate(dp.max_divergence())


def to_spark(spark, frame: pl.DataFrame, ddl: str):
    return spark.createDataFrame(frame.rows(), ddl)


def users_of_sizes(sizes: list[int], *, offset: int = 0) -> list[tuple[int, str]]:
    """One user per size, holding that many distinct items (shared between users: item ``i`` is ``"x{i}"``)."""
    return [(offset + u, f"x{i}") for u, size in enumerate(sizes) for i in range(size)]


def expected_bins(frame: pl.DataFrame, keys: list[str]) -> np.ndarray:
    """The bins by hand: each user's distinct non-null keys counted in Python, binned by the grid's definition."""
    held: dict[object, set[tuple[object, ...]]] = {}
    for row in frame.iter_rows(named=True):
        key = tuple(row[k] for k in keys)
        if row["user"] is not None and None not in key:
            held.setdefault(row["user"], set()).add(key)
    bins = np.zeros(BINS, dtype=np.int64)
    for items in held.values():
        bins[sum(len(items) > g for g in GRID[:-1])] += 1
    return bins


def mixed_users() -> pl.DataFrame:
    """Users on every bin edge (1, 2, 3, 5, 6, …, 200, 201, 250 distinct items), duplicates, null users and items."""
    sizes = [1, 1, 2, 3, 5, 6, 10, 11, 20, 21, 50, 51, 100, 101, 200, 201, 250]
    rows: list[tuple[int | None, str | None]] = list(users_of_sizes(sizes))
    rows += [(0, "x0"), (0, "x0"), (2, "x1")]  # duplicates: still one and two distinct items
    rows += [(None, "x5"), (None, None), (1, None), (40, None)]  # null users and items: dropped (user 40 with them)
    return pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String}, orient="row")


# --------------------------------------------------------------------------------------------------------------
# the bins of the choice


@pytest.mark.parametrize(
    ("user_dtype", "item_dtype", "ddl"),
    [
        (pl.Int64, pl.String, "user bigint, item string"),
        (pl.String, pl.Int32, "user string, item int"),
    ],
)
def test_spark_bins_equal_the_polars_bins(spark, user_dtype, item_dtype, ddl: str) -> None:
    frame = mixed_users()
    frame = frame.with_columns(
        pl.col("user").cast(user_dtype),
        pl.col("item").str.strip_prefix("x").cast(pl.Int32).cast(item_dtype) if item_dtype != pl.String else pl.col("item"),
    )
    expected = expected_bins(frame, ["item"])
    assert expected.tolist() == [2, 1, 2, 2, 2, 2, 2, 2, 2]  # every bin: its two edges, and user 1's single item
    spark_bins = user_count_bins(to_spark(spark, frame, ddl), *ws.spark_user_items_space())
    polars_bins = user_count_bins(frame, *wgm.user_items_space())
    assert spark_bins.dtype == polars_bins.dtype == np.int64
    assert spark_bins.tolist() == polars_bins.tolist() == expected.tolist()


def test_spark_bins_of_a_composite_key_and_of_empty_data(spark) -> None:
    """A composite key's users count their distinct key tuples, a null in any key column dropping the row."""
    frame = pl.DataFrame(
        {"user": [0, 0, 0, 1, 1, 1, 2, 2], "a": ["u", "u", "v", "u", "u", None, "w", "w"], "b": [1, 2, 1, 1, 1, 2, 3, None]},
        schema={"user": pl.Int64, "a": pl.String, "b": pl.Int64},
    )
    sdf = to_spark(spark, frame, "user bigint, a string, b bigint")
    spark_bins = user_count_bins(sdf, *ws.spark_user_items_space("user", ["a", "b"]))
    polars_bins = user_count_bins(frame, *wgm.user_items_space("user", ["a", "b"]))
    assert spark_bins.tolist() == polars_bins.tolist() == expected_bins(frame, ["a", "b"]).tolist()
    assert spark_bins.tolist() == [2, 0, 1, 0, 0, 0, 0, 0, 0]  # users 1 and 2 hold one tuple, user 0 three
    empty = spark.createDataFrame([], "user bigint, item string")
    assert user_count_bins(empty, *ws.spark_user_items_space()).tolist() == [0] * BINS


# --------------------------------------------------------------------------------------------------------------
# the choice and the maps


def single_items() -> pl.DataFrame:
    """300 users with one item each, 30 users on each of 10 items."""
    return pl.DataFrame({"user": list(range(300)), "item": [f"i{u % 10}" for u in range(300)]})


def ten_items() -> pl.DataFrame:
    """200 users holding the same 10 items each."""
    return pl.DataFrame(users_of_sizes([10] * 200), schema={"user": pl.Int64, "item": pl.String}, orient="row")


@pytest.mark.parametrize(("data", "chosen"), [(single_items, 1), (ten_items, 10)])
@pytest.mark.parametrize("budget", [{"epsilon": 500.0}, {"rho": 500.0}])
def test_spark_chooses_the_polars_max_contributions(spark, data, chosen: int, budget: dict[str, float]) -> None:
    """With negligible noise on the bins (half of a huge budget), both engines choose the Δ0 the data call for:
    1 where every user holds one item, 10 where every user holds ten."""
    frame = data()
    options = dict(max_contributions="auto", delta=1e-6, auto_fraction=0.5, **budget)
    spark_release = wgm.make_wgm_from_budget(*ws.spark_user_items_space(), **options)(
        to_spark(spark, frame, "user bigint, item string")
    )
    polars_release = wgm.make_wgm_from_budget(*wgm.user_items_space(), **options)(frame)
    assert spark_release.max_contributions == polars_release.max_contributions == chosen
    assert spark_release.schema == polars_release.schema
    assert set(spark_release["item"]) == set(frame["item"])  # every item held by ≥ 20 users, at a huge budget


AUTO_CONSTRUCTORS = {
    "wgm": (wgm.make_wgm_from_budget, {}),
    "dp-sips": (wgm.make_dp_sips_from_budget, {}),
    "top-k": (wgm.make_wgm_top_k_from_budget, {"k": 3}),
    "hitting set": (wgm.make_wgm_hitting_set_from_budget, {"k": 3}),
    "group_by": (wgm.make_wgm_group_by_from_budget, {"sums": {"minutes": (0, 100)}}),
}


@pytest.mark.parametrize("name", sorted(AUTO_CONSTRUCTORS))
@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_spark_auto_maps_equal_the_polars_maps(spark, name: str, budget: dict[str, float]) -> None:
    make, extra = AUTO_CONSTRUCTORS[name]
    options = dict(max_contributions="auto", delta=1e-6, **budget, **extra)
    spark_m = make(*ws.spark_user_items_space(), **options)
    polars_m = make(*wgm.user_items_space(), **options)
    assert spark_m.output_measure == polars_m.output_measure
    maps = [spark_m.map(d) for d in (1, 2, 3)]
    assert maps == [polars_m.map(d) for d in (1, 2, 3)]
    assert spark_m.check(1, (budget.get("epsilon") or budget["rho"], 1e-6))
    if name == "group_by":  # a composite key's space: the same map
        composite = make(*ws.spark_user_items_space("user", ["a", "b"]), **options)
        assert [composite.map(d) for d in (1, 2, 3)] == maps


def test_spark_auto_releases_at_one_item_by_partition_selection(spark) -> None:
    """Users holding one item: Δ0 = 1 is chosen and, under (ε, δ)-DP, the release is the optimal partition
    selection's, given the mechanism's columns (a null ``noisy_weight``; DP-SIPS's round 1), as on Polars."""
    frame = single_items()
    sdf = to_spark(spark, frame, "user bigint, item string")
    options = dict(max_contributions="auto", epsilon=500.0, delta=1e-6, auto_fraction=0.5)
    for make in (wgm.make_wgm_from_budget, wgm.make_dp_sips_from_budget):
        released = make(*ws.spark_user_items_space(), **options)(sdf)
        expected = make(*wgm.user_items_space(), **options)(frame)
        assert released.max_contributions == expected.max_contributions == 1
        assert released.equals(expected), (released, expected)  # each of the 10 items: 30 users ≥ n*
        assert released["noisy_weight"].null_count() == released.height == 10


def test_spark_group_by_auto_on_a_composite_key(spark) -> None:
    """Keys with statistics, ``max_contributions="auto"``, a composite key on Spark: one (country, code) per user,
    so Δ0 = 1 and the key release is the partition selection on the packed key; the keys and columns are the
    Polars release's."""
    frame = pl.DataFrame(
        {"user": list(range(200)), "country": ["fr", "de"] * 100, "code": [1, 2, 3, 4] * 50, "minutes": [10] * 200},
        schema={"user": pl.Int64, "country": pl.String, "code": pl.Int32, "minutes": pl.Int64},
    )
    options = dict(max_contributions="auto", epsilon=500.0, delta=1e-6, auto_fraction=0.5, sums={"minutes": (0, 100)})
    keys = ["country", "code"]
    sdf = to_spark(spark, frame, "user bigint, country string, code int, minutes bigint")
    released = wgm.make_wgm_group_by_from_budget(*ws.spark_user_items_space("user", keys), **options)(sdf)
    expected = wgm.make_wgm_group_by_from_budget(*wgm.user_items_space("user", keys), **options)(frame)
    assert released.max_contributions == expected.max_contributions == 1
    assert released.schema == expected.schema
    assert released.columns == ["country", "code", "count", "minutes_sum"]
    assert sorted(released.select(keys).rows()) == sorted(expected.select(keys).rows()) == [("de", 2), ("de", 4), ("fr", 1), ("fr", 3)]
    assert released.sort(keys)["count"].to_list() == pytest.approx([50] * 4, abs=1.0)  # σ ≪ 1 at ε = 250


@pytest.mark.parametrize(
    ("ddl", "error"),
    [("user bigint, item string", r"column\(s\) \['minutes'\] not found"),
     ("user bigint, item string, minutes string", "must be numeric to be summed")],
)
def test_spark_group_by_auto_refuses_a_schema_before_the_choice_draws_noise(spark, monkeypatch, ddl, error) -> None:
    """A value column missing or not numeric is refused by the candidates' own check, before the choice's noise
    (a failure after noise would be an output)."""
    import opendp_wgm.measurements.auto_contributions as auto

    def noise_drawn(*_, **__):
        raise AssertionError("the choice drew noise")

    monkeypatch.setattr(auto, "noisy_count_bins", noise_drawn)
    m = wgm.make_wgm_group_by_from_budget(
        *ws.spark_user_items_space(), max_contributions="auto", epsilon=1.0, delta=1e-6, sums={"minutes": (0, 120)}
    )
    rows = [(1, "a"), (2, "b")] if "minutes" not in ddl else [(1, "a", "x"), (2, "b", "y")]
    with pytest.raises(dp.OpenDPException, match=error) as raised:
        m(spark.createDataFrame(rows, ddl))
    assert "the choice drew noise" not in str(raised.value)


def test_spark_auto_refuses_polars_options(spark) -> None:
    candidate = lambda d0, b: wgm.make_wgm_from_budget(  # noqa: E731
        *ws.spark_user_items_space(), max_contributions=d0, epsilon=b.epsilon, delta=b.delta
    )
    with pytest.raises(ValueError, match="`engine='streaming'` is a Polars option"):
        wgm.make_auto_contributions(
            *ws.spark_user_items_space(), candidate=candidate, epsilon=1.0, delta=1e-6, engine="streaming"
        )
    with pytest.raises(ValueError, match="`passes=2` is a Polars option"):
        wgm.make_wgm_from_budget(*ws.spark_user_items_space(), max_contributions="auto", epsilon=1.0, delta=1e-6, passes=2)
    with pytest.raises(ValueError, match="disagrees with the Spark input space's item column"):
        wgm.make_auto_contributions(
            *ws.spark_user_items_space(), candidate=candidate, epsilon=1.0, delta=1e-6, item="other"
        )


# --------------------------------------------------------------------------------------------------------------
# partition selection on Spark


def test_partition_selection_map_equals_the_polars_map() -> None:
    for epsilon, delta in ((1.0, 1e-5), (0.3, 1e-9)):
        spark_m = wgm.make_partition_selection(*ws.spark_user_items_space(), epsilon=epsilon, delta=delta)
        polars_m = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=epsilon, delta=delta)
        assert spark_m.output_measure == polars_m.output_measure == APPROX_DP
        assert [spark_m.map(d) for d in range(5)] == [polars_m.map(d) for d in range(5)]
        assert spark_m.map(1) == (epsilon, delta)


def test_partition_selection_releases_with_the_release_probabilities(spark) -> None:
    """One item per user: 2000 items held by one user each, 300 by 4 users, 10 by n* = 9 users. The last are always
    released; the others with π(1) = δ and π(4), counted within 5 standard deviations of their binomials (the
    tolerance of a fixed sample size: a correct engine fails with probability below 1e-6)."""
    epsilon, delta = 0.5, 0.05
    table = release_table(epsilon, delta)
    assert table.n_star == 9
    rows = [(u, f"s{u}") for u in range(2000)]
    rows += [(2000 + 4 * i + j, f"f{i}") for i in range(300) for j in range(4)]
    rows += [(4000 + 9 * i + j, f"c{i}") for i in range(10) for j in range(9)]
    frame = pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String}, orient="row")
    released = wgm.make_partition_selection(*ws.spark_user_items_space(), epsilon=epsilon, delta=delta)(
        to_spark(spark, frame, "user bigint, item string").repartition(4)
    )
    assert released.columns == ["item"] and released["item"].is_sorted()
    items = set(released["item"])
    assert {f"c{i}" for i in range(10)} <= items
    for prefix, n, count in (("s", 1, 2000), ("f", 4, 300)):
        p = float(table.probability(n))
        found = sum(item.startswith(prefix) for item in items)
        assert abs(found - count * p) <= 5 * math.sqrt(count * p * (1 - p)), (prefix, found, count * p)


def test_partition_selection_keeps_one_item_per_user(spark) -> None:
    """Each user keeps one of its items. At (1, 1e-9), n* = 41: 42 users holding the same three items would
    release all three for certain if each counted all its items; keeping one each, the three counts sum to 42 and
    all three are released with probability 3.4e-10 (the multinomial's expectation of π(a)π(b)π(c)). An item
    of 42 users holding only it is certain."""
    table = release_table(1.0, 1e-9)
    assert table.n_star == 41
    rows = [(u, f"x{i}") for u in range(42) for i in range(3)] + [(100 + u, "solo") for u in range(42)]
    frame = pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String}, orient="row")
    m = wgm.make_partition_selection(*ws.spark_user_items_space(), epsilon=1.0, delta=1e-9)
    released = set(m(to_spark(spark, frame, "user bigint, item string"))["item"])
    assert "solo" in released
    assert not {"x0", "x1", "x2"} <= released


@pytest.mark.parametrize(
    ("values", "ddl", "dtype"),
    [
        ([3, -1, 7], "int", pl.Int32),
        ([3, -1, 7], "bigint", pl.Int64),
        ([3, -1, 7], "smallint", pl.Int16),
        (["b", "a", "é"], "string", pl.String),
        ([True, False], "boolean", pl.Boolean),
        ([datetime.date(2020, 1, 2), datetime.date(1999, 12, 31)], "date", pl.Date),
        ([decimal.Decimal("1.50"), decimal.Decimal("-2.25")], "decimal(6,2)", pl.Decimal(6, 2)),
        ([b"\x00a", b"b"], "binary", pl.Binary),
    ],
)
def test_partition_selection_output_equals_the_polars_output(spark, values: list, ddl: str, dtype) -> None:
    """Items held by n* users or more are released with probability 1 on both engines: the same frame, in the
    item's Polars dtype (the Spark WGM's mapping), sorted."""
    n = release_table(1.0, 1e-5).n_star
    rows = [(u, value) for i, value in enumerate(values) for u in range(i * 100, i * 100 + n)]
    frame = pl.DataFrame(rows, schema={"user": pl.Int64, "item": dtype}, orient="row")
    released = wgm.make_partition_selection(*ws.spark_user_items_space(), epsilon=1.0, delta=1e-5)(
        to_spark(spark, frame, f"user bigint, item {ddl}")
    )
    expected = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=1.0, delta=1e-5)(frame)
    assert released.schema == expected.schema == pl.Schema({"item": dtype})
    assert released.equals(expected), (released, expected)
    assert released.height == len(values)


def test_partition_selection_on_empty_data(spark) -> None:
    m = wgm.make_partition_selection(*ws.spark_user_items_space(), epsilon=1.0, delta=1e-5)
    released = m(spark.createDataFrame([], "user bigint, item int"))
    assert released.schema == pl.Schema({"item": pl.Int32}) and released.height == 0


def test_partition_selection_refuses_polars_options_and_composite_keys() -> None:
    space = ws.spark_user_items_space()
    for option, message in (({"passes": 2}, "`passes=2` is a Polars option"), ({"engine": "in-memory"}, "`engine='in-memory'`")):
        with pytest.raises(ValueError, match=message):
            wgm.make_partition_selection(*space, epsilon=1.0, delta=1e-5, **option)
    with pytest.raises(ValueError, match="must be one column on the Spark engine for this mechanism"):
        wgm.make_partition_selection(*ws.spark_user_items_space("user", ["a", "b"]), epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="disagrees with the Spark input space"):
        wgm.make_partition_selection(*space, epsilon=1.0, delta=1e-5, item="other")


def test_partition_selection_as_a_spark_key_release(spark) -> None:
    """``then_partition_selection`` is a Spark key release of ``make_wgm_group_by``, and ``mechanism=
    "partition-selection"`` of its ``_from_budget`` runs on Spark: the keys held by n* users or more, with their
    statistics, and the Polars maps."""
    n = release_table(1.0, 1e-5).n_star
    frame = pl.DataFrame(
        {"user": list(range(2 * n)), "item": ["a"] * n + ["b"] * n, "minutes": [10] * (2 * n)},
        schema={"user": pl.Int64, "item": pl.String, "minutes": pl.Int64},
    )
    sdf = to_spark(spark, frame, "user bigint, item string, minutes bigint")
    options = dict(max_contributions=1, scale=0.05, sums={"minutes": (0, 100)}, output_measure=APPROX_DP, delta=1e-6)
    spark_m = wgm.make_wgm_group_by(
        *ws.spark_user_items_space(), key_release=ws.then_partition_selection(epsilon=1.0, delta=1e-5), **options
    )
    polars_m = wgm.make_wgm_group_by(
        *wgm.user_items_space(), key_release=wgm.then_partition_selection(epsilon=1.0, delta=1e-5), **options
    )
    assert [spark_m.map(d) for d in (1, 2)] == [polars_m.map(d) for d in (1, 2)]
    released, expected = spark_m(sdf), polars_m(frame)
    assert released.schema == expected.schema == pl.Schema({"item": pl.String, "count": pl.Int64, "minutes_sum": pl.Float64})
    assert released["item"].to_list() == expected["item"].to_list() == ["a", "b"]
    # noise of scale 0.05 on the counts (abs 1: 20σ) and 0.05·100 = 5 on the sums (abs 30: 6σ)
    assert released["count"].to_list() == pytest.approx([n, n], abs=1)
    assert released["minutes_sum"].to_list() == pytest.approx([10.0 * n] * 2, abs=30)
    budget = dict(max_contributions=1, epsilon=1.0, delta=1e-6, mechanism="partition-selection", sums={"minutes": (0, 100)})
    from_budget = wgm.make_wgm_group_by_from_budget(*ws.spark_user_items_space(), **budget)
    assert [from_budget.map(d) for d in (1, 2)] == [
        wgm.make_wgm_group_by_from_budget(*wgm.user_items_space(), **budget).map(d) for d in (1, 2)
    ]
    assert from_budget(sdf).columns == ["item", "count", "minutes_sum"]
