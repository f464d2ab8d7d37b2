"""Keys with statistics: a key release then OpenDP's own aggregates over the released keys, in one measurement.

The map is the sum of the stage maps under both output measures, the aggregates' charged map bounds OpenDP's
map for every number of released keys, the release has the keys, stage 1's columns and the aggregates, the
counts and sums are unbiased around the truth, the Context helper composes with OpenDP's own queries, and bad
input is refused clearly.
"""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm.measurements.group_by import _ORDER, _Aggregates
from opendp_wgm.privacy.peeling import Accounting, add_up

ZCDP = dp.approximate(dp.zero_concentrated_divergence())
APPROX_DP = dp.approximate(dp.max_divergence())
EXACT = Accounting(exact=True, zero_delta=False, cap_delta=True)
# no noise to speak of in stage 1: every item held by a user is released
WGM = dict(max_contributions=3, scale=1e-7, threshold=0.5)


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


def events() -> pl.DataFrame:
    """Five users, at most three distinct items each, with minutes (integers) and hours (floats, a null)."""
    return pl.DataFrame(
        {
            "user": [0, 0, 0, 1, 1, 2, 2, 3, 4, 4],
            "item": ["a", "b", "a", "a", "c", "a", "b", "b", "c", "a"],
            "minutes": [10, 20, 30, 40, 50, 60, 70, 80, 90, 100],
            "hours": [0.5, 1.5, None, 2.0, 3.5, 1.0, 0.25, 2.5, 1.0, 9.0],
        }
    )


def explicit(**options):
    options = {"max_contributions": 3, "scale": 2.0, "sums": {"minutes": (0, 100)}, "means": {"hours": (0.0, 3.0)},
               **options}
    key_release = options.pop("key_release", wgm.then_wgm(**WGM))
    return wgm.make_wgm_group_by(*wgm.user_items_space(), key_release=key_release, **options)


# --------------------------------------------------------------------------------------------------------------
# maps


@pytest.mark.parametrize("measure", ["approx_zcdp", "approx_dp"])
def test_map_is_the_sum_of_the_stage_maps_and_monotone(measure: str) -> None:
    if measure == "approx_zcdp":
        stage_1 = wgm.make_wgm(*wgm.user_items_space(), **WGM)
        m = explicit()
        kind, delta = "approx_zcdp", 0.0
    else:
        dp_wgm = {**WGM, "scale": 1.0, "threshold": 6.0, "output_measure": APPROX_DP, "epsilon": 1.0}
        stage_1 = wgm.make_wgm(*wgm.user_items_space(), **dp_wgm)
        m = explicit(key_release=wgm.then_wgm(**dp_wgm),
                     output_measure=APPROX_DP, delta=1e-7)
        kind, delta = "approx_dp", 1e-7
    aggregates = _Aggregates.of(("item",), 3, 1, {"minutes": (0, 100)}, {"hours": (0.0, 3.0)})
    previous = (0.0, 0.0)
    for d in (1, 2, 3):
        first, second = stage_1.map(d), aggregates.loss(d, 2.0, kind, delta)
        expected = (add_up(first[0], second[0], EXACT), min(1.0, add_up(first[1], second[1], EXACT)))
        assert m.map(d) == expected
        assert m.map(d)[0] > previous[0] and m.map(d)[1] >= previous[1]
        previous = m.map(d)
    assert m.output_measure == (ZCDP if measure == "approx_zcdp" else APPROX_DP)
    assert m.check(1, m.map(1)) and not m.check(1, (m.map(1)[0] * 0.99, m.map(1)[1]))


def test_the_charged_map_bounds_opendp_s_map_for_every_number_of_keys() -> None:
    """OpenDP's map grows with the explicit keys and stops at d·(Δ0 + 1): the charged map is its maximum."""
    aggregates = _Aggregates.of(("item",), 2, 2, {"minutes": (0, 100)}, None)
    schema = aggregates.reference_schema()
    for d in (1, 2, 3):
        charged = aggregates.loss(d, 1.5, "approx_zcdp", 0.0)
        losses = []
        for n in range(d * 3 + 4):
            keys = pl.DataFrame({"item": pl.Series(range(n), dtype=pl.Int64), _ORDER: pl.Series(range(n), dtype=pl.UInt64)})
            losses.append(aggregates.measurement(keys, schema, 1.5, "approx_zcdp", 0.0).map(d)[0])
        assert losses == sorted(losses)  # nondecreasing in the number of keys
        assert max(losses) == charged[0] == losses[d * 3]  # reached at d·(Δ0 + 1) keys, constant beyond


def test_aggregate_map_is_opendp_s_count_and_sum_sensitivity() -> None:
    """Each aggregate's noise is the global scale s times its per-row bound (1 for a count, max|bound| for a
    sum), and its ℓ2 sensitivity is √(Δ0 + 1)·R times that bound (OpenDP charges Δ0 + 1 keys, R rows each):
    ρ = (Δ0 + 1)·R²/(2s²) per aggregate."""
    aggregates = _Aggregates.of(("item",), 4, 3, {"minutes": (0, 100)}, None)
    assert aggregates.loss(1, 2.0, "approx_zcdp", 0.0)[0] == pytest.approx(2 * 5 * 3**2 / (2 * 2.0**2), rel=1e-9)


@pytest.mark.parametrize(("mechanism", "k"), [("wgm", None), ("dp-sips", None), ("top-k", 3)])
@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_from_budget_fits_the_budget(mechanism: str, k: int | None, budget: dict[str, float]) -> None:
    m = wgm.make_wgm_group_by_from_budget(
        *wgm.user_items_space(), max_contributions=3, delta=1e-6, mechanism=mechanism, k=k, key_fraction=0.3,
        sums={"minutes": (0, 100)}, **budget,
    )
    value = next(iter(budget.values()))
    assert m.check(1, (value, 1e-6))
    assert m.output_measure == (APPROX_DP if "epsilon" in budget else ZCDP)
    assert m.map(1)[0] > 0.99 * value  # the budget is spent, not wasted
    released = m(events())
    stage_1 = {"wgm": ["noisy_weight"], "dp-sips": ["noisy_weight", "round"], "top-k": ["rank"]}[mechanism]
    assert released.columns == ["item", *stage_1, "count", "minutes_sum"]


def test_calibration_splits_the_budget() -> None:
    cal = wgm.calibrate_wgm_group_by(max_contributions=3, rho=0.5, delta=1e-6, key_fraction=0.25,
                                     sums={"minutes": (0, 100)})
    assert cal.keys.d_out == (0.125, 1e-6)
    assert cal.aggregates.rho == pytest.approx(0.375) and cal.aggregates.rho <= 0.375
    loss = _Aggregates.of(("item",), 3, 1, {"minutes": (0, 100)}, None).loss(1, cal.scale, "approx_zcdp", 0.0)
    assert loss[0] <= cal.aggregates.rho and loss[0] > cal.aggregates.rho * (1 - 1e-9)
    summary = cal.summarize(alpha=0.05)
    assert summary["column"].to_list() == ["count", "minutes_sum"]
    assert summary["scale"].to_list() == pytest.approx([cal.scale, 100 * cal.scale])
    assert (summary["accuracy"] > 1.9 * summary["scale"]).all()


def test_calibration_without_the_features_says_so() -> None:
    """Not "no finite scale": the search must not swallow OpenDP's refusal as a scale that does not fit."""
    dp.disable_features("honest-but-curious", "contrib")
    try:
        with pytest.raises(dp.OpenDPException, match=r"dp\.enable_features"):
            wgm.calibrate_wgm_group_by(max_contributions=3, rho=0.5, delta=1e-6)
        with pytest.raises(dp.OpenDPException, match=r"dp\.enable_features"):
            wgm.summarize_group_by(scale=1.0, max_contributions=3)
    finally:
        dp.enable_features("contrib", "honest-but-curious")


# --------------------------------------------------------------------------------------------------------------
# release


def test_release_columns_dtypes_and_values() -> None:
    m = explicit(scale=1e-6)  # no noise to speak of: the release is the truth
    released = m(events())
    assert released.columns == ["item", "noisy_weight", "count", "minutes_sum", "hours_mean"]
    assert released.dtypes == [pl.String, pl.Float64, pl.Int64, pl.Float64, pl.Float64]
    rows = {r["item"]: r for r in released.to_dicts()}
    assert set(rows) == {"a", "b", "c"}
    # R = 1: each user's first row of each key; counts are users
    assert [rows[x]["count"] for x in "abc"] == [4, 3, 2]
    assert rows["a"]["minutes_sum"] == pytest.approx(10 + 40 + 60 + 100, abs=1e-3)
    # hours clipped to [0, 3], nulls as 0: a's first rows 0.5, 2.0, 1.0, 9.0 -> 3.0
    assert rows["a"]["hours_mean"] == pytest.approx((0.5 + 2.0 + 1.0 + 3.0) / 4, abs=1e-3)


def test_a_null_value_is_zero_clipped_into_the_bounds() -> None:
    """A null or NaN is 0, then clipped: 0 within the bounds, else the bound nearest 0; its row still counts."""
    data = pl.DataFrame({"user": [0, 1, 2], "item": ["a"] * 3, "v": [7.0, None, float("nan")]})
    for bounds, null_value in (((-10, 10), 0.0), ((5, 10), 5.0), ((-10, -5), -5.0)):
        released = explicit(scale=1e-6, sums={"v": bounds}, means={"v": bounds})(data)
        row = released.row(0, named=True)
        clipped = min(max(7.0, bounds[0]), bounds[1])
        assert row["count"] == 3
        assert row["v_sum"] == pytest.approx(clipped + 2 * null_value, abs=1e-3), bounds
        assert row["v_mean"] == pytest.approx((clipped + 2 * null_value) / 3, abs=1e-3), bounds


def test_rows_per_key_and_keys_per_user_are_truncated() -> None:
    """User 0 holds three rows of a; user 1 one row each of a and b: R = 2 rows per key, Δ0 keys per user."""
    data = pl.DataFrame({"user": [0, 0, 0, 1, 1], "item": ["a"] * 4 + ["b"], "minutes": [1, 2, 3, 4, 5]})
    for keys, expected in ((1, 2 + 1), (2, 2 + 2)):
        m = explicit(scale=1e-6, max_rows_per_key=2, max_contributions=keys, means=None)
        assert m(data)["count"].sum() == expected


def test_kept_keys_are_a_uniform_subset_independent_across_users() -> None:
    """2000 users hold the same 10 keys, Δ0 = 3, no noise to speak of: each key's count is the number of users
    keeping it, Binomial-like around 2000·3/10 = 600 (χ², α = 1e-4; a key-only order kept the same 3 keys for
    every user: counts 2000, 2000, 2000, 0, ...). Then 41 users × 11 keys at Δ0 = 2 (the review's case, where
    the key-only order gave mean counts 2.7–12.3): the sum of 30 releases' counts per key, χ² at α = 1e-4."""
    from scipy.stats import chi2

    def statistic(n_users: int, n_keys: int, keep: int, releases: int) -> float:
        data = pl.DataFrame({"user": np.repeat(np.arange(n_users), n_keys), "item": np.tile(np.arange(n_keys), n_users)})
        m = explicit(key_release=wgm.then_wgm(max_contributions=n_keys, scale=1e-7, threshold=0.5),
                     max_contributions=keep, scale=1e-6, sums=None, means=None)
        runs = pl.concat([m(data).select("item", "count") for _ in range(releases)])
        counts = runs.group_by("item").agg(pl.col("count").sum()).sort("item")["count"].to_numpy()
        assert counts.size == n_keys and counts.sum() == releases * n_users * keep
        expected = releases * n_users * keep / n_keys
        return float(((counts - expected) ** 2 / expected).sum())

    assert statistic(2000, 10, 3, 1) < chi2.ppf(1 - 1e-4, 9)
    assert statistic(41, 11, 2, 30) < chi2.ppf(1 - 1e-4, 10)


def test_integer_keys_and_categorical_keep_their_dtype() -> None:
    data = events().with_columns(pl.col("item").cast(pl.Categorical))
    assert explicit(scale=1e-6)(data)["item"].dtype == pl.Categorical
    numbers = events().with_columns(pl.col("item").replace_strict({"a": 7, "b": 8, "c": 9}, return_dtype=pl.Int32))
    released = explicit(scale=1e-6)(numbers)
    assert released["item"].dtype == pl.Int32 and sorted(released["item"]) == [7, 8, 9]


def test_top_k_ranks_with_counts_in_rank_order() -> None:
    top = wgm.then_wgm_top_k(k=2, max_contributions=3, wgm_scale=1e-7, wgm_threshold=0.5, peel_scale=1e-3)
    released = explicit(key_release=top, scale=1e-6)(events())
    assert released.columns == ["item", "rank", "count", "minutes_sum", "hours_mean"]
    assert released["item"].to_list() == ["a", "b"] and released["count"].to_list() == [4, 3]


def test_no_key_released_gives_an_empty_frame() -> None:
    empty = explicit(key_release=wgm.then_wgm(max_contributions=3, scale=1e-7, threshold=1e6))(events())
    assert empty.height == 0 and empty.columns == ["item", "noisy_weight", "count", "minutes_sum", "hours_mean"]


def test_counts_and_sums_are_unbiased() -> None:
    """n = 40 releases at global scale 2: the count's noise has σ = 2 and the minutes sum's σ = 2·100; each
    mean of n is within 4.5 standard errors of the truth (Bonferroni over 6 checks: false alarm < 4e-5)."""
    rng = np.random.default_rng(7)
    users = np.repeat(np.arange(300), 2)
    items = np.where(np.arange(600) % 2 == 0, "x", rng.choice(["y", "z"], 600))
    data = pl.DataFrame({"user": users, "item": items, "minutes": rng.integers(0, 120, 600)})
    truth = data.with_columns(pl.col("minutes").clip(0, 100)).group_by("item").agg(
        pl.len().alias("count"), pl.col("minutes").sum().alias("minutes_sum")
    )
    m = explicit(sums={"minutes": (0, 100)}, means=None, max_contributions=2)
    n = 40
    runs = pl.concat([m(data).select("item", "count", "minutes_sum") for _ in range(n)])
    means = runs.group_by("item").agg(pl.len().alias("n"), pl.col("count", "minutes_sum").mean()).join(
        truth, on="item", suffix="_true"
    )
    assert means["n"].to_list() == [n] * 3
    for column, sigma in (("count", 2.0), ("minutes_sum", 200.0)):
        error = (means[column] - means[f"{column}_true"]).abs()
        assert (error <= 4.5 * sigma / math.sqrt(n)).all(), (column, means)


# --------------------------------------------------------------------------------------------------------------
# the Context helper


@pytest.mark.slow
@pytest.mark.parametrize("budget", [{"rho": 0.5}, {"epsilon": 1.0}])
def test_discover_keys_then_opendp_counts_in_one_context(budget: dict[str, float]) -> None:
    data = pl.concat([events()] * 1).with_columns(pl.col("user") + 0)
    data = pl.concat([data.with_columns(pl.col("user") + 10 * i) for i in range(100)])  # 500 users
    ctx = dp.Context.compositor(
        data=data.lazy(),
        privacy_unit=dp.unit_of(contributions=1, identifier="user"),
        privacy_loss=dp.loss_of(delta=1e-6, **budget),
        split_evenly_over=2,
        margins=[dp.polars.Margin(by=["item"], max_length=2**32 - 1)],
    )
    slot = ctx.remaining_privacy_loss()[0]
    keys = wgm.discover_keys(ctx, max_contributions=3, item="item")
    assert keys.columns == ["item"] and keys.dtypes == [pl.String] and set(keys["item"]) == {"a", "b", "c"}
    assert ctx.current_privacy_loss() == [slot]
    query = (
        ctx.query()
        .truncate_per_group(2, by=["item"])
        .truncate_num_groups(4, by=["item"], keep="last")
        .group_by("item")
        .agg(dp.len(signed=True), pl.col("minutes").fill_null(0).dp.sum((0, 100)))
        .with_keys(keys)
    )
    summary = query.summarize(alpha=0.05)
    assert summary["column"].to_list() == ["len", "minutes"] and (summary["accuracy"] > 0).all()
    released = query.release().collect()
    assert set(released["item"]) == {"a", "b", "c"} and released.columns == ["item", "len", "minutes"]
    assert ctx.remaining_privacy_loss() == []


def test_discover_keys_with_top_k() -> None:
    ctx = dp.Context.compositor(
        data=events().lazy(), privacy_unit=dp.unit_of(contributions=1, identifier="user"),
        privacy_loss=dp.loss_of(rho=1e6, delta=1e-3), split_evenly_over=1,
    )
    keys = wgm.discover_keys(ctx, max_contributions=3, item="item", mechanism="top-k", k=2)
    assert keys["item"].to_list() == ["a", "b"]


def test_discover_keys_refuses_what_it_cannot_serve() -> None:
    def context(**options):
        options = {"privacy_unit": dp.unit_of(contributions=1, identifier="user"),
                   "privacy_loss": dp.loss_of(rho=0.5, delta=1e-6), "split_evenly_over": 1, **options}
        return dp.Context.compositor(data=events().lazy(), **options)

    with pytest.raises(TypeError, match=r"`context` must be a dp\.Context"):
        wgm.discover_keys(events(), max_contributions=3)
    with pytest.raises(ValueError, match=r"`context` must have dp.unit_of\(contributions=1"):
        wgm.discover_keys(context(privacy_unit=dp.unit_of(contributions=2, identifier="user")),
                          max_contributions=3, item="item")
    with pytest.raises(ValueError, match="`output_measure` must be"):
        wgm.discover_keys(context(privacy_loss=dp.loss_of(rho=0.5)), max_contributions=3, item="item")
    with pytest.raises(ValueError, match="pass `item=`"):
        wgm.discover_keys(context(), max_contributions=3)
    spent = context()
    wgm.discover_keys(spent, max_contributions=3, item="item")
    with pytest.raises(ValueError, match="`context` must have a budget slot left"):
        wgm.discover_keys(spent, max_contributions=3, item="item")


# --------------------------------------------------------------------------------------------------------------
# errors


def test_errors_on_bad_input() -> None:
    space = wgm.user_items_space()
    stage_1 = wgm.then_wgm(**WGM)
    base = {"key_release": stage_1, "max_contributions": 3, "scale": 1.0}
    with pytest.raises(ValueError, match=r"`sums\['minutes'\]` must be finite bounds with lower < upper"):
        wgm.make_wgm_group_by(*space, **base, sums={"minutes": (5, 1)})
    with pytest.raises(ValueError, match=r"`means\['h'\]` must be a pair"):
        wgm.make_wgm_group_by(*space, **base, means={"h": 3.0})
    with pytest.raises(ValueError, match=r"must be within ±2\*\*30"):
        wgm.make_wgm_group_by(*space, **base, sums={"m": (0, 2.0**31)})
    with pytest.raises(TypeError, match="`sums` must be a mapping"):
        wgm.make_wgm_group_by(*space, **base, sums=[("m", (0, 1))])
    with pytest.raises(ValueError, match="`sums`/`means` must not name a key column"):
        wgm.make_wgm_group_by(*space, **base, sums={"item": (0, 1)})
    with pytest.raises(ValueError, match="`sums`/`means` must not name the user column"):
        wgm.make_wgm_group_by(*space, **base, sums={"user": (0, 1)})
    with pytest.raises(ValueError, match="`max_rows_per_key` must be an integer >= 1"):
        wgm.make_wgm_group_by(*space, **base, max_rows_per_key=0)
    with pytest.raises(ValueError, match="`scale` must be in"):
        wgm.make_wgm_group_by(*space, **{**base, "scale": 0.0})
    with pytest.raises(ValueError, match="`delta` must be given with"):
        wgm.make_wgm_group_by(*space, **base, output_measure=APPROX_DP)
    with pytest.raises(ValueError, match="`delta` must be None unless"):
        wgm.make_wgm_group_by(*space, **base, delta=1e-6)
    with pytest.raises(ValueError, match="`key_release` must measure privacy in"):
        wgm.make_wgm_group_by(*space, **base, output_measure=APPROX_DP, delta=1e-6)
    with pytest.raises(TypeError, match="`key_release` must be a partial constructor"):
        wgm.make_wgm_group_by(*space, **{**base, "key_release": "wgm"})
    budget = {"max_contributions": 3, "rho": 0.5, "delta": 1e-6}
    for fraction in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"`key_fraction` must be in \(0.0, 1.0\)"):
            wgm.make_wgm_group_by_from_budget(*space, **budget, key_fraction=fraction)
    with pytest.raises(ValueError, match="`mechanism` must be one of"):
        wgm.make_wgm_group_by_from_budget(*space, **budget, mechanism="policy")
    with pytest.raises(ValueError, match="`k` must be given with mechanism='top-k'"):
        wgm.make_wgm_group_by_from_budget(*space, **budget, mechanism="top-k")
    with pytest.raises(ValueError, match="`k` must be None unless mechanism='top-k'"):
        wgm.make_wgm_group_by_from_budget(*space, **budget, k=3)


def test_missing_or_non_numeric_columns() -> None:
    data = events()
    domain = dp.lazyframe_domain(
        [dp.series_domain(c, dp.atom_domain(T=t)) for c, t in
         (("user", dp.i64), ("item", dp.String), ("minutes", dp.i64), ("hours", dp.f64))]
    )
    metric = dp.symmetric_id_distance(pl.col("user"))
    with pytest.raises(ValueError, match=r"column\(s\) \['plays'\] not found in `input_domain`"):
        wgm.make_wgm_group_by(domain, metric, key_release=wgm.then_wgm(**WGM), max_contributions=3, scale=1.0,
                              item="item", sums={"plays": (0, 1)})
    with pytest.raises(ValueError, match="column 'item' must be numeric"):
        wgm.make_wgm_group_by(domain, metric, key_release=wgm.then_wgm(**WGM), max_contributions=3, scale=1.0,
                              item="minutes", sums={"item": (0, 1)})
    # the light space learns the columns at release: the schema's error, before any noise
    m = explicit(sums={"plays": (0, 1)}, means=None)
    with pytest.raises(dp.OpenDPException, match=r"column\(s\) \['plays'\] not found in the data"):
        m(data)
    released = wgm.make_wgm_group_by(domain, metric, key_release=wgm.then_wgm(**WGM), max_contributions=3,
                                     scale=1e-6, item="item", sums={"minutes": (0, 100)})(data.lazy())
    assert released.columns == ["item", "noisy_weight", "count", "minutes_sum"]


def test_refuses_a_polars_whose_rows_are_not_bounded_by_uint32(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenDP's max_length (2^32 - 1) is enforced by Polars' UInt32 row index only: otherwise refuse."""
    monkeypatch.setattr(pl, "get_index_type", lambda: pl.UInt64)
    with pytest.raises(ValueError, match="Polars' row index must be UInt32"):
        explicit()


# --------------------------------------------------------------------------------------------------------------
# composite keys

KEYS = ["country", "query"]


def pairs(users: int = 6) -> pl.DataFrame:
    """Each user holds ('fr', 'a') and ('fr', 'b') (one country, two pairs); user u also holds ('de', 'a')
    when u is even; minutes u + 1 on every row."""
    rows = [(u, "fr", q) for u in range(users) for q in ("a", "b")] + [(u, "de", "a") for u in range(0, users, 2)]
    frame = pl.DataFrame(rows, schema={"user": pl.Int64, "country": pl.String, "query": pl.String}, orient="row")
    return frame.with_columns(minutes=pl.col("user") + 1)


def composite(item: object, **options):
    options = {"max_contributions": 3, "scale": 1e-9, "sums": {"minutes": (0, 100)}, **options}
    return wgm.make_wgm_group_by(*wgm.user_items_space("user", item), key_release=wgm.then_wgm(**WGM), **options)


def test_composite_release_equals_the_concatenated_key_release() -> None:
    """At noise scales that draw 0 and Δ0 ≥ every user's pairs, both releases are the exact aggregates; the
    composite one has the key columns in place of the item, the same rows, and the same map."""
    data = pairs()
    m = composite(KEYS, means={"minutes": (0.0, 10.0)})
    released = m(data)
    joined = data.select("user", "minutes", item=pl.concat_str(KEYS, separator="|"))
    single = composite("item", means={"minutes": (0.0, 10.0)})
    parts = pl.col("item").str.split_exact("|", 1).struct.rename_fields(KEYS)
    expected = single(joined).with_columns(parts).unnest("item")
    assert released.columns == [*KEYS, "noisy_weight", "count", "minutes_sum", "minutes_mean"]
    assert released.equals(expected) and m.map(1) == single.map(1)
    rows = {(r["country"], r["query"]): (r["count"], r["minutes_sum"]) for r in released.to_dicts()}
    assert rows == {("fr", "a"): (6, 21.0), ("fr", "b"): (6, 21.0), ("de", "a"): (3, 9.0)}


def test_composite_truncation_keeps_max_contributions_pairs_per_user() -> None:
    """Δ0 = 1 pair per user in the aggregates, with pairs of one country: each user is counted once in all
    (a truncation by country would keep both of its 'fr' pairs), and the data-typed key columns come back."""
    data = pairs().with_columns(pl.col("query").replace_strict({"a": 7, "b": 8}, return_dtype=pl.Int32))
    released = composite(KEYS, max_contributions=1)(data)
    assert released.schema[KEYS[1]] == pl.Int32 and released.height == 3
    assert released["count"].sum() == 6


def pairs_domain() -> tuple[dp.Domain, dp.Metric]:
    """OpenDP's space of :func:`pairs`."""
    domain = dp.lazyframe_domain(
        [dp.series_domain(c, dp.atom_domain(T=t)) for c, t in
         (("user", dp.i64), ("country", dp.String), ("query", dp.String), ("minutes", dp.i64))]
    )
    return domain, dp.symmetric_id_distance(pl.col("user"))


@pytest.mark.parametrize(("mechanism", "k", "stage_1"), [("wgm", None, ["noisy_weight"]),
                                                      ("dp-sips", None, ["noisy_weight", "round"]),
                                                      ("top-k", 2, ["rank"])])
def test_composite_on_an_opendp_domain_from_budget(mechanism: str, k: int | None, stage_1: list[str]) -> None:
    data = pairs()
    m = wgm.make_wgm_group_by_from_budget(
        *pairs_domain(), max_contributions=3, rho=1e6, delta=1e-3, sums={"minutes": (0, 100)}, item=KEYS,
        mechanism=mechanism, k=k,
    )
    released = m(data.lazy())
    assert released.columns == [*KEYS, *stage_1, "count", "minutes_sum"]
    assert m.check(1, (1e6, 1e-3)) and set(released.select(KEYS).rows()) <= {("fr", "a"), ("fr", "b"), ("de", "a")}


def test_composite_counts_are_unbiased() -> None:
    """n = 30 releases at global scale 2 of 300 users' pairs: the count's noise has σ = 2; each mean of n is
    within 4.5 standard errors of the truth (Bonferroni over 3 pairs: false alarm < 3·6.8e-6 = 2.1e-5)."""
    rng = np.random.default_rng(11)
    users = np.repeat(np.arange(300), 2)
    country = np.where(np.arange(600) % 2 == 0, "fr", rng.choice(["fr", "de"], 600))
    query = np.where(np.arange(600) % 2 == 0, "a", "b")
    data = pl.DataFrame({"user": users, "country": country, "query": query, "minutes": np.zeros(600, np.int64)})
    truth = data.group_by(KEYS).agg(pl.len().alias("truth"))
    m = composite(KEYS, scale=2.0, max_contributions=2)
    n = 30
    runs = pl.concat([m(data).select(*KEYS, "count") for _ in range(n)])
    means = runs.group_by(KEYS).agg(pl.len().alias("n"), pl.col("count").mean()).join(truth, on=KEYS)
    assert means.height == 3 and means["n"].to_list() == [n] * 3
    assert ((means["count"] - means["truth"]).abs() <= 4.5 * 2.0 / math.sqrt(n)).all(), means


@pytest.mark.slow
def test_discover_keys_with_a_composite_key_then_opendp_counts() -> None:
    data = pl.concat([pairs().with_columns(pl.col("user") + 10 * i) for i in range(50)])  # 300 users
    ctx = dp.Context.compositor(
        data=data.lazy(),
        privacy_unit=dp.unit_of(contributions=1, identifier="user"),
        privacy_loss=dp.loss_of(rho=1e4, delta=1e-6),
        split_evenly_over=2,
    )
    keys = wgm.discover_keys(ctx, max_contributions=3, item=KEYS)
    assert keys.columns == KEYS and keys.dtypes == [pl.String, pl.String]
    assert set(keys.rows()) == {("fr", "a"), ("fr", "b"), ("de", "a")}
    query = (
        ctx.query()
        .truncate_per_group(1, by=KEYS)
        .truncate_num_groups(4, by=KEYS, keep="last")
        .group_by(KEYS)
        .agg(dp.len(signed=True))
        .with_keys(keys)
    )
    released = query.release().collect().sort(KEYS)
    assert released.columns == [*KEYS, "len"] and released.height == 3
    assert ((released["len"] - pl.Series([150, 300, 300])).abs() < 5).all()  # ρ = 5e3 for the query: σ far below 1


def test_composite_errors() -> None:
    with pytest.raises(ValueError, match="`sums`/`means` must not name a key column"):
        composite(KEYS, sums={"query": (0, 1)})
    with pytest.raises(ValueError, match=r"the released columns must have distinct names \(found \['count'\]"):
        composite(["count", "query"])
    with pytest.raises(ValueError, match="`item` must differ from the user column"):
        wgm.make_wgm_group_by(*pairs_domain(), key_release=wgm.then_wgm(**WGM), max_contributions=3, scale=1.0,
                              item=["user", "query"])
    m = composite(KEYS)
    with pytest.raises(dp.OpenDPException, match=r"column\(s\) \['query'\] not found in the data"):
        m(pairs().drop("query"))
