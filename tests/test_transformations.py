"""Bounding and weighted histogram: oracle values, stability maps, properties, bad input."""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2

import opendp_wgm as wgm
from opendp_wgm.accounting import LATTICE_BITS, lattice_weights
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
    return dict(zip(out["item"].to_list(), out["weight"].to_list()))


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
    for user, items in zip(kept["user"].to_list(), kept["item"].to_list()):
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
    with pytest.raises(ValueError, match="symmetric_id_distance"):
        wgm.make_bound_user_items(space[0], dp.symmetric_distance(), max_contributions=1)
    with pytest.raises(ValueError, match="`item` .* disagrees"):
        wgm.make_bound_user_items(*space, max_contributions=1, item="other")
    with pytest.raises(ValueError, match="different columns"):
        wgm.user_items_space(user="a", item="a")
    bound = wgm.make_bound_user_items(*space, max_contributions=1)
    # errors raised inside a release reach the caller wrapped by OpenDP's FFI, message intact
    with pytest.raises(dp.OpenDPException, match=r"column\(s\) \['item'\] not found"):
        bound(pl.DataFrame({"user": [1], "thing": [2]}))
    with pytest.raises(dp.OpenDPException, match="expected a polars DataFrame or LazyFrame"):
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
    before, after = np.array(t(frame(users))), np.array(t(frame(users + [extra])))
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
