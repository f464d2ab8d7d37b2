"""The WGM measurement: end to end, Context composition, statistical audits, bad input."""

from __future__ import annotations

import math
import secrets

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import ndtr

import opendp_wgm as wgm
from opendp_wgm.privacy.threshold import wgm_threshold_delta

ZCDP = dp.approximate(dp.zero_concentrated_divergence())
APPROX_DP = dp.approximate(dp.max_divergence())


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


def frame(users: list[list]) -> pl.DataFrame:
    return pl.DataFrame(
        {"user": [i for i, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


def test_no_noise_end_to_end() -> None:
    """Oracle values of the paper's reference code: with (almost) no noise, [[1,4]]×10 + [[2,3],[1,2,3]] at T = 4 releases {1, 4}."""
    data = frame([[1, 4]] * 10 + [[2, 3], [1, 2, 3]])
    m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=5, scale=1e-5, threshold=4.0)
    out = m(data)
    assert out["item"].to_list() == [1, 4]
    assert out["noisy_weight"].to_list() == pytest.approx([10 / math.sqrt(2) + 1 / math.sqrt(3), 10 / math.sqrt(2)], abs=1e-4)


@settings(max_examples=25, deadline=None)
@given(
    users=st.lists(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6), min_size=1, max_size=40),
    threshold=st.floats(0.0, 5.0),
)
def test_no_noise_release_is_exactly_the_thresholded_histogram(users, threshold) -> None:
    data = frame(users)
    space = wgm.user_items_space()
    hist = (space >> wgm.then_bound_user_items(max_contributions=10) >> wgm.then_weighted_histogram())(data).collect()
    expected = sorted(hist.filter(pl.col("weight") > threshold + 1e-4)["item"].to_list())
    near = set(hist.filter((pl.col("weight") - threshold).abs() <= 1e-4)["item"].to_list())
    out = wgm.make_wgm(*space, max_contributions=10, scale=1e-7, threshold=threshold)(data)
    released = set(out["item"].to_list())
    assert released - near == set(expected) - near
    assert released <= {x for u in users for x in u}


@pytest.mark.parametrize(
    "dtype", [pl.Int64, pl.Int32, pl.UInt16, pl.String, pl.Categorical]
)
def test_output_schema_and_order(dtype) -> None:
    data = pl.DataFrame({"user": list(range(60)) * 2, "item": ["7"] * 60 + ["3"] * 60}).with_columns(
        pl.col("item").cast(pl.Int64).cast(dtype) if dtype != pl.Categorical else pl.col("item").cast(dtype)
    )
    before = data.clone()
    out = wgm.make_wgm(*wgm.user_items_space(), max_contributions=2, scale=1.0, threshold=10.0)(data)
    assert out.schema == pl.Schema({"item": data.schema["item"], "noisy_weight": pl.Float64})
    assert out.height == 2 and out["item"].is_sorted()
    assert data.equals(before)


def test_empty_and_null_data_release_nothing() -> None:
    m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=2, scale=1.0, threshold=5.0)
    empty = pl.DataFrame({"user": [], "item": []}, schema={"user": pl.Int64, "item": pl.String})
    assert m(empty).schema == pl.Schema({"item": pl.String, "noisy_weight": pl.Float64})
    assert m(empty).height == 0
    nulls = pl.DataFrame({"user": [None] * 50 + list(range(50)), "item": ["a"] * 50 + [None] * 50})
    assert m(nulls).height == 0


def test_maps_for_both_measures() -> None:
    space = wgm.user_items_space()
    m = wgm.make_wgm(*space, max_contributions=100, scale=3.884141, threshold=20.7898)
    assert m.output_measure == ZCDP
    rho, delta = m.map(1)
    assert rho == pytest.approx(1 / (2 * 3.884141**2))
    assert delta == pytest.approx(5e-6, rel=1e-3)
    e = wgm.make_wgm(*space, max_contributions=100, scale=3.884141, threshold=20.7898, output_measure=APPROX_DP, epsilon=1.0)
    assert e.output_measure == APPROX_DP
    eps, delta = e.map(1)
    assert eps == 1.0 and delta == pytest.approx(1e-5, rel=1e-3)
    assert e.map(0) == (0.0, 0.0)
    assert e.map(2)[0] == 2.0 and e.map(2)[1] > e.map(1)[1]


def test_from_budget_checks_at_the_budget() -> None:
    space = wgm.user_items_space()
    e = wgm.make_wgm_from_budget(*space, max_contributions=100, epsilon=1.0, delta=1e-5)
    assert e.check(1, (1.0, 1e-5))
    assert not e.check(1, (1.0, 9e-6))
    r = wgm.make_wgm_from_budget(*space, max_contributions=100, rho=0.1, delta=1e-6)
    assert r.output_measure == ZCDP and r.check(1, (0.1, 1e-6))
    c = wgm.calibrate_wgm(max_contributions=100, rho=0.1, delta=1e-6)
    assert r.map(1) == wgm.make_wgm(*space, max_contributions=100, scale=c.scale, threshold=c.threshold).map(1)


def test_composes_in_a_context_with_opendp_queries() -> None:
    """The issue's scenario: ctx(make_wgm(*ctx.accountant.input_space, ...)) beside an OpenDP Polars query."""
    rng = np.random.default_rng(0)
    lf = pl.LazyFrame({"user": np.repeat(np.arange(400), 3), "item": rng.choice(["a", "b", "c", "d"], 1200)})
    ctx = dp.Context.compositor(
        data=lf,
        privacy_unit=dp.unit_of(contributions=1, identifier="user"),
        privacy_loss=dp.loss_of(rho=0.2, delta=1e-6),
        split_evenly_over=2,
    )
    m = wgm.make_wgm_from_budget(*ctx.accountant.input_space, max_contributions=3, rho=0.1, delta=5e-7)
    released = ctx(m)
    assert set(released["item"].to_list()) <= {"a", "b", "c", "d"} and released.height >= 1
    count = ctx.query().truncate_per_group(3).select(dp.len(signed=False)).release().collect()
    assert count.height == 1
    with pytest.raises(dp.OpenDPException):  # both shares of the budget are spent
        ctx(m)


def test_opendp_noise_gives_the_same_release_distribution() -> None:
    """noise='opendp' vs 'lattice': 1500 items each held by 9 users, T at the median → release rate 1/2 each."""
    n_items, holders = 1500, 9
    data = pl.DataFrame({"user": np.arange(n_items * holders), "item": np.repeat(np.arange(n_items), holders)})
    rates = {}
    for noise in ("lattice", "opendp"):
        m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=1, scale=2.0, threshold=holders - 0.5, noise=noise)
        rates[noise] = m(data).height / n_items
    p = ndtr(0.5 / 2.0)  # P[N(0, 4) > -0.5]
    se = math.sqrt(p * (1 - p) / n_items)
    for rate in rates.values():
        assert abs(rate - p) < 5 * se
    assert abs(rates["lattice"] - rates["opendp"]) < 5 * math.sqrt(2) * se


@pytest.mark.parametrize("kept", [1, 4, 16])
def test_audit_threshold_delta_at_worst_case_neighbours(kept: int) -> None:
    """Empirical δ_T at a worst-case neighbour: a user whose `kept` items nobody else holds.

    40 000 such users share one run: each user's event "one of my items is released" depends only on the
    noise of its own items, so the events are independent and the release frequency estimates the map's
    δ_T for t = kept. The map's bound is tight up to one lattice step, so we test both directions.
    """
    n_users, max_contributions, scale = 40_000, kept, 1.0
    threshold = float(
        dp.binary_search(
            lambda t: wgm_threshold_delta(scale=scale, threshold=t, max_contributions=max_contributions) <= 1e-2,
            bounds=(0.0, 100.0),
        )
    )
    data = pl.DataFrame(
        {"user": np.repeat(np.arange(n_users), kept), "item": np.arange(n_users * kept)}
    )
    m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=max_contributions, scale=scale, threshold=threshold)
    _rho, delta = m.map(1)
    released_users = np.unique(m(data)["item"].to_numpy() // kept).size
    rate = released_users / n_users
    se = math.sqrt(delta * (1 - delta) / n_users)
    assert rate <= delta + 5 * se
    assert rate >= delta - 5 * se


def test_audit_group_bound_two_colluding_users() -> None:
    """d_in = 2: pairs of users holding the same 4 unique items; the release rate stays under map(2)'s δ."""
    pairs, kept, scale, threshold, max_contributions = 20_000, 4, 1.0, 3.3, 4
    data = pl.DataFrame(
        {
            "user": np.repeat(np.arange(2 * pairs), kept),
            "item": np.tile(np.arange(kept), 2 * pairs) + kept * np.repeat(np.arange(2 * pairs) // 2, kept),
        }
    )
    m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=max_contributions, scale=scale, threshold=threshold)
    rate = np.unique(m(data)["item"].to_numpy() // kept).size / pairs
    exact = 1 - (1 - ndtr(-(threshold - 2 / math.sqrt(kept)) / scale)) ** kept
    se = math.sqrt(exact * (1 - exact) / pairs)
    assert abs(rate - exact) < 5 * se
    assert rate <= m.map(2)[1] + 5 * se


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_contributions": 0}, ValueError, "`max_contributions` must be an integer >= 1"),
        ({"max_contributions": 1.0}, TypeError, "`max_contributions` must be an integer"),
        ({"scale": 0.0}, ValueError, "`scale` must be in"),
        ({"scale": float("nan")}, ValueError, "`scale` must be finite"),
        ({"scale": 2.0**21}, ValueError, r"`scale` must be <= 2\*\*20"),
        ({"scale": 1e-7, "output_measure": APPROX_DP, "epsilon": 1.0}, ValueError, "needs `scale` >= 2"),
        ({"threshold": float("inf")}, ValueError, "`threshold` must be finite"),
        ({"noise": "numpy"}, ValueError, "`noise` must be one of"),
        ({"output_measure": dp.max_divergence()}, ValueError, "`output_measure` must be"),
        ({"output_measure": APPROX_DP}, ValueError, "`epsilon` must be given with"),
        ({"output_measure": APPROX_DP, "epsilon": 0.0}, ValueError, "`epsilon` must be in"),
        ({"epsilon": 1.0}, ValueError, "`epsilon` must be None unless"),
    ],
)
def test_make_wgm_rejects_bad_input(kwargs, error, match) -> None:
    kwargs = {"max_contributions": 10, "scale": 1.0, "threshold": 5.0} | kwargs
    with pytest.raises(error, match=match):
        wgm.make_wgm(*wgm.user_items_space(), **kwargs)


def test_bad_spaces_and_frames() -> None:
    with pytest.raises(ValueError, match="`input_domain` must come from"):
        wgm.make_wgm(dp.atom_domain(T=int), dp.symmetric_id_distance(pl.col("user")), max_contributions=1, scale=1.0, threshold=1.0)
    domain = dp.lazyframe_domain(
        [dp.series_domain(c, dp.atom_domain(T=str)) for c in ("user", "a", "b")]
    )
    with pytest.raises(ValueError, match="pass `item=`"):
        wgm.make_wgm(domain, dp.symmetric_id_distance(pl.col("user")), max_contributions=1, scale=1.0, threshold=1.0)
    with pytest.raises(ValueError, match="item column 'c' not found"):
        wgm.make_wgm(domain, dp.symmetric_id_distance(pl.col("user")), max_contributions=1, scale=1.0, threshold=1.0, item="c")
    with pytest.raises(ValueError, match="user column 'id' not found"):
        wgm.make_wgm(domain, dp.symmetric_id_distance(pl.col("id")), max_contributions=1, scale=1.0, threshold=1.0, item="a")
    m = wgm.make_wgm(domain, dp.symmetric_id_distance(pl.col("user")), max_contributions=1, scale=1.0, threshold=1.0, item="b")
    assert m.map(1)[0] == 0.5
    with pytest.raises(dp.OpenDPException, match=r"column\(s\) \['user'\] not found"):
        wgm.make_wgm(*wgm.user_items_space(), max_contributions=1, scale=1.0, threshold=1.0)(pl.DataFrame({"item": [1]}))


def test_from_budget_rejects_bad_budgets() -> None:
    space = wgm.user_items_space()
    with pytest.raises(ValueError, match="exactly one of"):
        wgm.make_wgm_from_budget(*space, max_contributions=10, epsilon=1.0, rho=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="`delta` must be in"):
        wgm.make_wgm_from_budget(*space, max_contributions=10, epsilon=1.0, delta=2.0)
    with pytest.raises(ValueError, match="`rho` must be in"):
        wgm.make_wgm_from_budget(*space, max_contributions=10, rho=-1.0, delta=1e-5)


@pytest.mark.parametrize(("passes", "engine"), [(1, "streaming"), (3, "in-memory"), (4, "streaming")])
def test_passes_and_engines_give_the_same_release(passes: int, engine: str, tmp_path) -> None:
    """Bucketed passes and the streaming engine compute the same histogram (here on a Parquet scan)."""
    rng = np.random.default_rng(3)
    data = pl.DataFrame({"user": rng.integers(0, 300, 3000), "item": rng.integers(0, 40, 3000)})
    path = tmp_path / "data.parquet"
    data.write_parquet(path)
    space = wgm.user_items_space()
    expected = wgm.make_wgm(*space, max_contributions=50, scale=1e-7, threshold=1.0)(data)
    m = wgm.make_wgm(*space, max_contributions=50, scale=1e-7, threshold=1.0, passes=passes, engine=engine)
    out = m(pl.scan_parquet(path))
    assert out["item"].to_list() == expected["item"].to_list()
    assert out["noisy_weight"].to_list() == pytest.approx(expected["noisy_weight"].to_list(), abs=1e-5)


def test_execution_options_are_checked() -> None:
    space = wgm.user_items_space()
    with pytest.raises(ValueError, match="`passes` must be an integer >= 1"):
        wgm.make_wgm(*space, max_contributions=1, scale=1.0, threshold=1.0, passes=0)
    with pytest.raises(ValueError, match="`engine` must be one of"):
        wgm.make_wgm(*space, max_contributions=1, scale=1.0, threshold=1.0, engine="gpu")


def test_passes_upper_bound() -> None:
    import opendp_wgm as wgm

    dp.enable_features("contrib", "honest-but-curious")
    with pytest.raises(ValueError, match=r"`passes` must be an integer <= 1024 \(found 1025\)"):
        wgm.make_wgm(*wgm.user_items_space(), max_contributions=3, scale=1.0, threshold=5.0, passes=1025)


def _shapes() -> dict[str, pl.DataFrame]:
    """Integer ids with every user at most Δ0 = 6 items; String ids with most users above Δ0 (subsampled, with
    duplicate rows); users not contiguous, ids mixed below and above Δ0."""
    rng = np.random.default_rng(11)
    sizes = rng.integers(1, 7, 400)
    below = pl.DataFrame({"user": np.repeat(np.arange(400), sizes), "item": rng.zipf(1.5, int(sizes.sum())) % 60})
    sizes = rng.integers(1, 30, 300)
    items = rng.zipf(1.3, int(sizes.sum())) % 90
    above = pl.DataFrame({"user": [f"u{u}" for u in np.repeat(np.arange(300), sizes)], "item": [f"s{v}" for v in items]})
    mixed = pl.DataFrame({"user": rng.integers(0, 250, 2000), "item": rng.zipf(1.4, 2000) % 120}).sample(fraction=1.0, shuffle=True, seed=2)
    return {"int-below": below, "string-above": above, "shuffled-mixed": mixed}


@pytest.mark.parametrize(("passes", "engine"), [(3, "in-memory"), (7, "streaming"), (4, "auto")])
@pytest.mark.parametrize("shape", ["int-below", "string-above", "shuffled-mixed"])
def test_passes_give_the_one_pass_release_for_fixed_seeds(shape: str, passes: int, engine: str, monkeypatch) -> None:
    """With every random word fixed (bound seed, bucket seed, noise key), the release in passes is the one-pass
    release, noisy weight for noisy weight: the histograms are the same integers, and one noise draw per item.

    The noise is drawn in the histogram's row order, which a group-by leaves arbitrary: the spy hands the
    release the histogram sorted by item, so that both runs draw item i's noise at the same position."""
    from opendp_wgm.measurements import wgm as wgm_module

    monkeypatch.setattr(secrets, "randbits", lambda bits: 0x5EED)
    release = wgm_module.release_above_threshold
    histograms: list[pl.DataFrame] = []

    def sorted_release(histogram: pl.DataFrame, item: str, **options: object) -> pl.DataFrame:
        histograms.append(histogram.sort(item))
        return release(histograms[-1], item, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(wgm_module, "release_above_threshold", sorted_release)
    data = _shapes()[shape]
    space = wgm.user_items_space()
    # σ = 1, T = 1: real noise on weights of 1/√6 .. tens, so about half of the items are released
    params = dict(max_contributions=6, scale=1.0, threshold=1.0)
    one_pass = wgm.make_wgm(*space, **params)(data)
    released = wgm.make_wgm(*space, **params, passes=passes, engine=engine)(data)
    one, many = histograms
    assert many.equals(one) and one.height > 50
    assert released.equals(one_pass)
    assert 0 < released.height < one.height  # the noise decided: neither every item nor none
