"""Bounding and weighted histogram: oracle values, stability maps, properties, bad input."""

from __future__ import annotations

import math
import secrets

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2

import opendp_wgm as wgm
from opendp_wgm.domains import BoundedUserItems, UserItemsDescriptor, user_items_domain
from opendp_wgm.privacy.gaussian import wgm_privacy_loss
from opendp_wgm.privacy.threshold import LATTICE_BITS, lattice_weights
from opendp_wgm.transformations import user_distance, weighted_histogram_l02inf

LATTICE = 2.0**-LATTICE_BITS


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


def frame(users: list[list]) -> pl.DataFrame:
    return pl.DataFrame(
        {"user": [i for i, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


def histogram(users: list[list], max_contributions: int = 100) -> dict:
    t = wgm.user_items_space() >> wgm.then_bound_user_items(max_contributions=max_contributions)
    out = (t >> wgm.then_weighted_histogram())(frame(users)).collect()
    return dict(zip(out["item"].to_list(), out["weight"].to_list(), strict=False))


def test_weighted_histogram_oracle() -> None:
    """Oracle values of the paper's reference code: weights 1/√|W_i| summed per item (within one lattice step per user)."""
    h = histogram([[1, 2, 3], [1, 2, 4], [5], [1, 5, 6], [7, 8]])
    r3, r2 = 1 / math.sqrt(3), 1 / math.sqrt(2)
    expected = {1: 3 * r3, 2: 2 * r3, 3: r3, 4: r3, 5: 1 + r3, 6: r3, 7: r2, 8: r2}
    assert h.keys() == expected.keys()
    for x, w in expected.items():
        assert w - 3 * LATTICE <= h[x] <= w  # rounded down, never up


def test_weighted_histogram_dedups_first() -> None:
    h = histogram([[1, 1, 3], [2, 2, 2], [1, 2, 3]])
    r2, r3 = 1 / math.sqrt(2), 1 / math.sqrt(3)
    for x, w in {1: r2 + r3, 2: 1 + r3, 3: r2 + r3}.items():
        assert h[x] == pytest.approx(w, abs=3 * LATTICE)


def test_stability_maps() -> None:
    bound = wgm.make_bound_user_items(*wgm.user_items_space(), max_contributions=7)
    assert [bound.map(d) for d in range(4)] == [0, 1, 2, 3]
    hist = bound >> wgm.then_weighted_histogram()
    # a distance in users (the WGM's map needs the weights tied to t); the (ℓ0, ℓ2, ℓ∞) bound is a function
    assert hist.output_metric == user_distance(7)
    assert hist.map(1) == 1 and hist.map(3) == 3
    assert weighted_histogram_l02inf(1, 7) == (7, 1.0, 1.0)
    assert weighted_histogram_l02inf(3, 7) == (21, 3.0, 3.0)
    with pytest.raises(ValueError, match="not representable by u32"):  # OpenDP rejects it before our map
        hist.map(-1)


@settings(max_examples=40, deadline=None)
@given(
    users=st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=25), min_size=1, max_size=30),
    max_contributions=st.integers(1, 12),
)
def test_bounded_users_properties(users: list[list[int]], max_contributions: int) -> None:
    """ℓ0 ≤ Δ0, kept ⊆ input, distinct, all kept when |W_i| ≤ Δ0; per-user ℓ2 ≤ 1 exactly on the lattice."""
    bound = wgm.make_bound_user_items(*wgm.user_items_space(), max_contributions=max_contributions)
    out = bound(frame(users)).collect()
    assert out.is_duplicated().sum() == 0
    kept = out.group_by("user").agg(pl.col("item"))
    for user, items in zip(kept["user"].to_list(), kept["item"].to_list(), strict=False):
        distinct = set(users[user])
        assert set(items) <= distinct
        assert len(items) == min(len(distinct), max_contributions)
        w = int(lattice_weights(max_contributions)[len(items) - 1])
        assert len(items) * w * w <= 4**LATTICE_BITS
    assert kept.height == len(users)


def test_subsample_is_uniform_and_independent_across_users() -> None:
    """2000 users hold the same 10 items, Δ0 = 3: each item kept with probability 3/10 (χ², α = 1e-4)."""
    n_users, n_items, keep = 2000, 10, 3
    data = pl.DataFrame({"user": np.repeat(np.arange(n_users), n_items), "item": np.tile(np.arange(n_items), n_users)})
    out = wgm.make_bound_user_items(*wgm.user_items_space(), max_contributions=keep)(data).collect()
    counts = out.group_by("item").len().sort("item")["len"].to_numpy()
    expected = n_users * keep / n_items
    statistic = float(((counts - expected) ** 2 / expected).sum())
    assert statistic < chi2.ppf(1 - 1e-4, n_items - 1)
    # independence: the share of users keeping user 0's exact subset is about 1 / C(10, 3) = 1/120
    subsets = out.group_by("user").agg(pl.col("item").sort().cast(pl.String)).with_columns(pl.col("item").list.join(","))
    same = (subsets["item"] == subsets.filter(pl.col("user") == 0)["item"][0]).sum()
    assert same < n_users / 120 + 6 * math.sqrt(n_users / 120)


def test_dtypes_lazyframes_nulls_and_no_mutation() -> None:
    data = pl.DataFrame({"u": ["a", "a", None, "b", "b"], "x": ["p", "q", "p", None, "p"]})
    before = data.clone()
    space = wgm.user_items_space(user="u", item="x")
    t = space >> wgm.then_bound_user_items(max_contributions=5) >> wgm.then_weighted_histogram()
    out = t(data.lazy()).collect().sort("x")
    assert out.schema == pl.Schema({"x": pl.String, "weight": pl.Float64})
    assert out["x"].to_list() == ["p", "q"]  # the null user's and the null item's rows are dropped
    assert data.equals(before)


def test_works_on_opendp_lazyframe_domain() -> None:
    domain = dp.lazyframe_domain([dp.series_domain("user", dp.atom_domain(T=int)), dp.series_domain("item", dp.atom_domain(T=str))])
    bound = wgm.make_bound_user_items(domain, dp.symmetric_id_distance(pl.col("user")), max_contributions=2)
    out = bound(pl.LazyFrame({"user": [1, 1, 1], "item": ["a", "b", "c"]})).collect()
    assert out.height == 2


def test_bad_input() -> None:
    space = wgm.user_items_space()
    with pytest.raises(ValueError, match="`max_contributions` must be an integer >= 1"):
        wgm.make_bound_user_items(*space, max_contributions=0)
    with pytest.raises(TypeError, match="`max_contributions` must be an integer"):
        wgm.make_bound_user_items(*space, max_contributions=1.5)
    with pytest.raises(ValueError, match="bounded user-items domain"):
        wgm.make_weighted_histogram(*space)
    # the bound takes any Δ0; the histogram, whose lattice weights stop at 2^20, refuses more when built (it used
    # to build, then raise at every release)
    wide = wgm.make_bound_user_items(*space, max_contributions=2**20 + 1)
    with pytest.raises(ValueError, match=r"`max_contributions` must be an integer <= 1048576 \(found 1048577\)"):
        wgm.make_weighted_histogram(wide.output_domain, wide.output_metric)
    with pytest.raises(ValueError, match="symmetric_id_distance"):
        wgm.make_bound_user_items(space[0], dp.symmetric_distance(), max_contributions=1)
    with pytest.raises(ValueError, match=r"`item` .* disagrees"):
        wgm.make_bound_user_items(*space, max_contributions=1, item="other")
    with pytest.raises(ValueError, match="different columns"):
        wgm.user_items_space(user="a", item="a")
    bound = wgm.make_bound_user_items(*space, max_contributions=1)
    # errors raised inside a release reach the caller wrapped by OpenDP's FFI, message intact
    with pytest.raises(dp.OpenDPException, match=r"column\(s\) \['item'\] not found"):
        bound(pl.DataFrame({"user": [1], "thing": [2]}))
    with pytest.raises(dp.OpenDPException, match="`frame` must be a polars DataFrame or LazyFrame"):
        bound([(1, 2)])


def test_features_must_be_enabled() -> None:
    dp.disable_features("honest-but-curious")
    try:
        with pytest.raises(dp.OpenDPException, match="enable_features"):
            wgm.make_bound_user_items(*wgm.user_items_space(), max_contributions=1)
    finally:
        dp.enable_features("honest-but-curious")


def test_candidate_counts() -> None:
    """Distinct-user counts over a public list, in its order; monotone ℓ∞ stability d_in → d_in."""
    data = pl.DataFrame({"user": [1, 1, 1, 2, 2, 3], "item": ["a", "a", "b", "a", "c", "d"]})
    t = wgm.make_candidate_counts(*wgm.user_items_space(), candidates=["c", "a", "zz", "b"])
    assert t(data) == [1, 2, 0, 1]
    assert t.output_metric == dp.linf_distance(T=dp.i64, monotonic=True)
    assert [t.map(d) for d in range(3)] == [0, 1, 2]
    assert wgm.make_candidate_counts(*wgm.user_items_space(), candidates=[])(data) == []
    chained = t >> dp.m.then_noisy_top_k(dp.max_divergence(), k=1, scale=1e-3)
    assert chained(data) == [1]  # index of "a"


@settings(max_examples=30, deadline=None)
@given(
    users=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=6), min_size=1, max_size=20),
    extra=st.lists(st.integers(0, 9), min_size=1, max_size=6),
)
def test_candidate_counts_move_monotonically(users, extra) -> None:
    t = wgm.make_candidate_counts(*wgm.user_items_space(), candidates=list(range(10)))
    before, after = np.array(t(frame(users))), np.array(t(frame([*users, extra])))
    assert np.all((after - before >= 0) & (after - before <= 1))


@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 6), st.sampled_from("abcdef")), max_size=40),
    candidates=st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8),
)
def test_candidate_counts_are_distinct_user_counts(rows, candidates) -> None:
    """Each candidate's count is the number of distinct users holding it, duplicate rows included once."""
    data = pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String}, orient="row")
    t = wgm.make_candidate_counts(*wgm.user_items_space(), candidates=candidates)
    assert t(data) == [len({u for u, x in rows if x == c}) for c in candidates]


def test_candidate_counts_bad_input() -> None:
    space = wgm.user_items_space()
    with pytest.raises(ValueError, match="must be distinct"):
        wgm.make_candidate_counts(*space, candidates=["a", "a"])
    with pytest.raises(ValueError, match="must not contain nulls"):
        wgm.make_candidate_counts(*space, candidates=["a", None])
    with pytest.raises(TypeError, match="must be a sequence"):
        wgm.make_candidate_counts(*space, candidates="abc")
    t = wgm.make_candidate_counts(*space, candidates=["x"])
    with pytest.raises(dp.OpenDPException, match=r"`candidates` must have the item column's type Int64 \(found String\)"):
        t(pl.DataFrame({"user": [1], "item": [5]}))  # a string candidate cannot be cast to an integer column


# ---------------------------------------------------------------------------------------------------------
# the kernel: make_wgm is make_bound_user_items >> make_weighted_histogram >> make_noisy_threshold
# ---------------------------------------------------------------------------------------------------------
def mixed_frame() -> pl.DataFrame:
    """String items; users above Δ0 = 3 (6 and 9 distinct items, with duplicates) and below it (1 and 2)."""
    users = {"u0": [f"s{i}" for i in range(6)] * 2, "u1": [f"s{i}" for i in range(3, 12)], "u2": ["s0"], "u3": ["s1", "s7", "s1"]}
    return pl.DataFrame([(u, x) for u, items in users.items() for x in items], schema={"user": pl.String, "item": pl.String}, orient="row")


def test_make_wgm_histogram_is_the_chains_bit_for_bit(monkeypatch) -> None:
    """With one fixed seed, the histogram make_wgm noises is the chain's histogram, exactly (lattice integers)."""
    from opendp_wgm.measurements import wgm as wgm_module

    monkeypatch.setattr(secrets, "randbits", lambda bits: 0x5EED)
    seen: list[pl.DataFrame] = []
    release = wgm_module.release_above_threshold
    monkeypatch.setattr(wgm_module, "release_above_threshold", lambda h, *a, **k: seen.append(h) or release(h, *a, **k))
    space = wgm.user_items_space()
    wgm.make_wgm(*space, max_contributions=3, scale=1.0, threshold=0.0)(mixed_frame())
    chain = space >> wgm.then_bound_user_items(max_contributions=3) >> wgm.then_weighted_histogram()
    expected = chain(mixed_frame()).collect().select("item", weight_lat=(pl.col("weight") * 2**LATTICE_BITS).cast(pl.Int64))
    (histogram,) = seen
    assert histogram.sort("item").equals(expected.sort("item"))
    assert histogram["weight_lat"].dtype == pl.Int64
    bounded = wgm.make_bound_user_items(*space, max_contributions=3)(mixed_frame()).collect()
    assert dict(bounded.group_by("user").len().iter_rows()) == {"u0": 3, "u1": 3, "u2": 1, "u3": 2}
    w = lattice_weights(3)  # every kept item of a user with t items weighs w[t - 1] lattice units
    t = dict(bounded.group_by("user").len().iter_rows())
    sums = bounded.with_columns(w=pl.col("user").replace_strict(t).map_elements(lambda n: int(w[n - 1]), return_dtype=pl.Int64))
    assert dict(histogram.iter_rows()) == dict(sums.group_by("item").agg(pl.col("w").sum()).iter_rows())


def test_make_wgm_release_is_the_chains_in_distribution() -> None:
    """2000 users with one item each (weight 1), σ = 1, T = 1: each item is released with probability 1/2 (minus
    half the discrete Gaussian's mass at 0, < 2e-7) by make_wgm and by the explicit chain; 6 sd = 0.067."""
    n = 2000
    data = pl.DataFrame({"user": np.arange(n), "item": [f"x{i}" for i in range(n)]})
    space = wgm.user_items_space()
    chain = space >> wgm.then_bound_user_items(max_contributions=4) >> wgm.then_weighted_histogram()
    chain = chain >> wgm.then_noisy_threshold(scale=1.0, threshold=1.0)
    m = wgm.make_wgm(*space, max_contributions=4, scale=1.0, threshold=1.0)
    assert m.map(1) == chain.map(1) and m.output_measure == chain.output_measure
    for release in (m(data), chain(data)):
        assert abs(release.height / n - 0.5) < 6 * math.sqrt(0.25 / n)
        assert release.schema == pl.Schema({"item": pl.String, "noisy_weight": pl.Float64})
        assert (release["noisy_weight"] > 1.0).all() and release["item"].is_sorted()


def test_histogram_bounds_any_input_but_reads_the_carrier_as_is() -> None:
    """A frame or LazyFrame is bounded by the histogram; a BoundedUserItems of a larger Δ0 is bounded again."""
    space = user_items_domain(UserItemsDescriptor("user", "item", 2)), dp.symmetric_id_distance(pl.col("user"))
    histogram = wgm.make_weighted_histogram(*space)
    wide = wgm.make_bound_user_items(*wgm.user_items_space(), max_contributions=5)
    frame = pl.DataFrame({"user": [0] * 5, "item": list("abcde")})
    for data in (frame, frame.lazy(), wide(frame)):
        weights = histogram(data).collect()["weight"].to_list()
        assert len(weights) == 2 and math.fsum(x * x for x in weights) <= 1.0
    with pytest.raises(TypeError, match="must be built by make_bound_user_items"):
        BoundedUserItems(frame.lazy(), None, 2, (1, 2, 3, 4))


def test_noisy_threshold_needs_the_histograms_space() -> None:
    bound = wgm.make_bound_user_items(*wgm.user_items_space(), max_contributions=3)
    hist = bound >> wgm.then_weighted_histogram()
    with pytest.raises(ValueError, match="user distance of make_weighted_histogram with max_contributions=3"):
        wgm.make_noisy_threshold(hist.output_domain, user_distance(4), scale=1.0, threshold=1.0)
    with pytest.raises(ValueError, match="weighted-histogram domain"):
        wgm.make_noisy_threshold(*wgm.user_items_space(), scale=1.0, threshold=1.0)
    with pytest.raises(ValueError, match="`passes` must be"):
        wgm.make_weighted_histogram(bound.output_domain, bound.output_metric, passes=0)
    m = wgm.make_noisy_threshold(hist.output_domain, hist.output_metric, scale=3.0, threshold=10.0)
    assert m.map(2) == wgm_privacy_loss(2, scale=3.0, threshold=10.0, max_contributions=3)


def test_weighted_histogram_runs_the_plan_it_is_given(monkeypatch) -> None:
    """``plan=`` chooses the kernel's plan without monkeypatching: every runnable plan gives the same histogram for
    the same seed; a plan that cannot run on the input is refused from public information, never replaced."""
    from opendp_wgm.kernel import Plan

    monkeypatch.setattr(secrets, "randbits", lambda bits: 0x5EED)  # the same seed in every call
    frame = pl.DataFrame({"user": [1, 1, 1, 2, 3, 3, 3, 3], "item": ["a", "b", "c", "a", "c", "a", "d", "b"]})
    bound = wgm.make_bound_user_items(*wgm.user_items_space(), max_contributions=2)
    numba = pytest.importorskip("numba")
    assert numba is not None
    found = {}
    for plan in ["auto", *Plan]:
        step = wgm.make_weighted_histogram(bound.output_domain, bound.output_metric, plan=plan)
        found[plan] = dict((bound >> step)(frame).collect().iter_rows())
    assert all(histogram == found["auto"] for histogram in found.values()) and found["auto"]
    with pytest.raises(ValueError, match="one pass and an in-memory engine"):
        wgm.make_weighted_histogram(bound.output_domain, bound.output_metric, plan="compiled-coded", passes=2)
    with pytest.raises(ValueError, match="computes the histogram in one pass"):
        wgm.make_weighted_histogram(bound.output_domain, bound.output_metric, plan=Plan.POLARS_SPLIT, passes=2)
    with pytest.raises(ValueError, match="`plan` must be 'auto' or one of"):
        wgm.make_weighted_histogram(bound.output_domain, bound.output_metric, plan="fast")
    floats = frame.with_columns(pl.col("user").cast(pl.Float64))
    step = wgm.make_weighted_histogram(bound.output_domain, bound.output_metric, plan="compiled-runs")
    with pytest.raises((ValueError, dp.OpenDPException), match="codes integer, String, Categorical and Enum"):
        step(floats)  # OpenDP wraps the function's error
