"""The partition selection measurement: release frequencies, dtypes, edge cases, composition, bad input."""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from scipy import stats

import opendp_wgm as wgm
from opendp_wgm.privacy.partition import release_table

APPROX_DP = dp.approximate(dp.max_divergence())
ZCDP = dp.approximate(dp.zero_concentrated_divergence())


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


def _held_by(counts: dict[int, int]) -> pl.DataFrame:
    """``counts[n]`` items held by exactly ``n`` users each, every user holding one item; item ids encode n."""
    items = np.concatenate([np.repeat(n * 100_000 + np.arange(m), n) for n, m in counts.items()])
    return pl.DataFrame({"user": np.arange(items.size), "item": items})


def test_release_frequencies_are_the_table() -> None:
    # 3000 items per count, one release: each count's number of released items is in the central 1 − 2e-7 of
    # Binomial(3000, π(n)) (exact tails: a false failure ≤ 2e-7 per count; π(1) = δ = 1e-5 is too small for a
    # normal approximation); counts ≥ n* = 23 are always released
    epsilon, delta, m = 1.0, 1e-5, 3000
    table = release_table(epsilon, delta)
    counts = {1: m, 9: m, 10: m, 11: m, 12: m, 13: m, 23: m, 40: m}
    released = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=epsilon, delta=delta)(_held_by(counts))
    share = released.group_by(n=pl.col("item") // 100_000).len()
    got = dict(zip(share["n"].to_list(), share["len"].to_list(), strict=True))
    for n in counts:
        p = float(table.probability(n))
        low, high = stats.binom.interval(1 - 2e-7, m, p)
        assert low <= got.get(n, 0) <= high, (n, got.get(n, 0), p)
    assert got[23] == got[40] == m


def test_each_user_counts_once() -> None:
    # 30 users each holding the same 3 items (and duplicates): one uniformly chosen item each, so no item reaches
    # n* = 23 unless the choices pile up (at most 30 on one item, 10 on average): with ε = 1, δ = 1e-5 an item
    # counted 10 times is released w.p. 0.13; had every user counted for every item (30 ≥ 23), all three would be
    frame = pl.DataFrame({"user": np.repeat(np.arange(30), 4), "item": np.tile([1, 2, 3, 3], 30)})
    m = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=1.0, delta=1e-5)
    sizes = [m(frame).height for _ in range(20)]
    assert sum(sizes) < 60  # all three in all 20 releases has probability < 1e-9 under the bound


@pytest.mark.parametrize("dtype", [pl.String, pl.Int32, pl.UInt16])
def test_item_dtype_and_order(dtype: pl.DataType) -> None:
    frame = pl.DataFrame({"user": range(60), "item": [str(i % 2 + 1) for i in range(60)]}).cast({"item": dtype})
    out = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=1.0, delta=1e-5)(frame)
    assert out.schema == pl.Schema({"item": dtype}) and out["item"].cast(pl.String).to_list() == ["1", "2"]


def test_composite_key() -> None:
    frame = pl.DataFrame({"user": range(50), "a": [1, 2] * 25, "b": ["x"] * 50, "value": [0] * 50})
    space = dp.lazyframe_domain([dp.series_domain(c, dp.atom_domain(T=t)) for c, t in
                                 [("user", dp.i64), ("a", dp.i64), ("b", dp.String), ("value", dp.i64)]])
    m = wgm.make_partition_selection(space, dp.symmetric_id_distance(pl.col("user")), epsilon=1.0, delta=1e-5,
                                     item=["a", "b"])
    assert m(frame.lazy()).sort("a").rows() == [(1, "x"), (2, "x")]


def test_empty_and_single_user() -> None:
    m = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=0.5, delta=0.3)
    empty = pl.DataFrame({"user": [], "item": []}, schema={"user": pl.Int64, "item": pl.Int64})
    assert m(empty).height == 0 and m(empty).schema == pl.Schema({"item": pl.Int64})
    one = pl.DataFrame({"user": [7, 7], "item": [4, None]})
    sizes = [m(one).height for _ in range(300)]  # δ = 0.3: 300 releases, 90 ± 5·7.9
    assert abs(sum(sizes) - 90) <= 40 and set(sizes) <= {0, 1}


def test_map() -> None:
    m = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=1.0, delta=1e-5)
    assert m.output_measure == APPROX_DP and m.map(1) == (1.0, 1e-5) and m.check(1, (1.0, 1e-5))
    eps, delta = m.map(2)
    assert eps == pytest.approx(2.0) and delta == pytest.approx(1e-5 * (1 + math.e), rel=1e-8)
    assert m.map(0) == (0.0, 0.0)
    assert wgm.make_partition_selection(*wgm.user_items_space(), epsilon=1.0, delta=1e-5,
                                        output_measure=APPROX_DP).map(1) == (1.0, 1e-5)


def test_a_key_release_for_group_by() -> None:
    frame = _held_by({30: 4}).with_columns(minutes=pl.col("user") % 60)
    m = wgm.make_wgm_group_by(
        *wgm.user_items_space(), key_release=wgm.then_partition_selection(epsilon=1.0, delta=1e-6),
        max_contributions=1, scale=2.0, sums={"minutes": (0, 60)}, output_measure=APPROX_DP, delta=1e-6,
    )
    out = m(frame)
    assert out.height == 4 and {"item", "count", "minutes_sum"} <= set(out.columns)
    eps, delta = m.map(1)
    assert eps > 1.0 and delta > 1e-6


def test_group_by_from_budget_and_discover_keys() -> None:
    # the keys get (ε/2, δ/2) = (0.5, 5e-7) (key_fraction; the Context's even split): n* = 54, so the items of 70
    # holders are released, a single holder's w.p. 5e-7
    frame = _held_by({70: 3, 1: 5}).with_columns(minutes=pl.col("user") % 60)
    options = {"max_contributions": 1, "delta": 1e-6, "sums": {"minutes": (0, 60)}, "mechanism": "partition-selection"}
    m = wgm.make_wgm_group_by_from_budget(*wgm.user_items_space(), epsilon=1.0, **options)
    assert m.check(1, (1.0, 1e-6))
    assert release_table(0.5, 5e-7).n_star == 54
    assert m(frame)["item"].to_list() == [70 * 100_000 + i for i in range(3)]
    with pytest.raises(ValueError, match="`mechanism` must not be 'partition-selection' under approximate zCDP"):
        wgm.make_wgm_group_by_from_budget(*wgm.user_items_space(), rho=0.5, **options)
    context = dp.Context.compositor(
        data=frame.select("user", "item").lazy(), privacy_unit=dp.unit_of(contributions=1, identifier="user"),
        privacy_loss=dp.loss_of(epsilon=1.0, delta=1e-6), split_evenly_over=2,
    )
    keys = wgm.discover_keys(context, max_contributions=1, mechanism="partition-selection")
    assert keys.columns == ["item"] and set(keys["item"]) >= {70 * 100_000 + i for i in range(3)}


def test_stage_1_of_a_two_stage_top_k() -> None:
    # partition selection, then 2 rounds of peeling on its released items, under (ε, δ): the maps add
    from opendp_wgm.measurements.two_stage import make_two_stage
    from opendp_wgm.privacy.peeling import TOP_K, peeling_loss

    def stage_2(domain: dp.Domain, metric: dp.Metric, candidates: pl.Series) -> dp.Measurement:
        return wgm.make_peeling_top_k(
            domain, metric, candidates=candidates, k=2, scale=1.0, output_measure=APPROX_DP, delta=1e-6
        )

    def stage_2_map(d_in: int) -> tuple[float, float]:
        return peeling_loss(d_in, k=2, scale=1.0, kind="approx_dp", accounting=TOP_K, delta=1e-6)

    m = make_two_stage(
        *wgm.user_items_space(), stage_1=wgm.then_partition_selection(epsilon=1.0, delta=1e-6), stage_2=stage_2,
        stage_2_map=stage_2_map, accounting=TOP_K,
    )
    out = m(_held_by({100: 1, 60: 1, 30: 1}))
    assert out["item"].to_list() == [100 * 100_000, 60 * 100_000]  # 100 and 60 holders: ranked first and second
    eps, delta = m.map(1)
    assert eps >= 1.0 + stage_2_map(1)[0] and delta >= 1e-6 + stage_2_map(1)[1]


def test_bad_input() -> None:
    space = wgm.user_items_space()
    with pytest.raises(ValueError, match=r"`output_measure` must be dp.approximate\(dp.max_divergence\(\)\)"):
        wgm.make_partition_selection(*space, epsilon=1.0, delta=1e-5, output_measure=ZCDP)
    with pytest.raises(ValueError, match="`epsilon` must be"):
        wgm.make_partition_selection(*space, epsilon=-1.0, delta=1e-5)
    with pytest.raises(ValueError, match="`delta` must be"):
        wgm.make_partition_selection(*space, epsilon=1.0, delta=1.5)
    with pytest.raises(ValueError, match="`passes` must be"):
        wgm.make_partition_selection(*space, epsilon=1.0, delta=1e-5, passes=0)
    bound = wgm.make_bound_user_items(*space, max_contributions=2)
    histogram = wgm.make_weighted_histogram(bound.output_domain, bound.output_metric)
    with pytest.raises(ValueError, match="`input_domain` must be a weighted-histogram domain with max_contributions=1"):
        wgm.make_partition_release(histogram.output_domain, histogram.output_metric, epsilon=1.0, delta=1e-5)
