"""DP-SIPS: one round is the WGM, the rounds release what a deterministic computation predicts, disjointly;
the map is the composed loss; bad input; household identifiers and String items; stage 1 of two-stage
mechanisms."""

from __future__ import annotations

import math
import secrets

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from scipy.special import ndtr

import opendp_wgm as wgm
from opendp_wgm._spaces import _prepare_frame, _resolve_space
from opendp_wgm.engines.polars import distinct_pairs_plan
from opendp_wgm.measurements import dp_sips as dp_sips_module
from opendp_wgm.measurements.dp_sips import _flag_released, _user_bins, dense_branch
from opendp_wgm.measurements.hitting_set import make_user_peeling
from opendp_wgm.measurements.top_k import make_peeling_top_k
from opendp_wgm.measurements.two_stage import make_two_stage
from opendp_wgm.privacy.calibrate import calibrate_dp_sips
from opendp_wgm.privacy.peeling import TOP_K, USER_PEELING, add_up, peeling_loss
from opendp_wgm.privacy.sips import dp_sips_privacy_loss
from tests import release_paths

#: DP-SIPS's rows of tests/release_paths.py's table (tests/test_release_failures.py runs them on adversarial data)
RELEASE_PATHS = {
    "make_dp_sips": release_paths.measure(wgm.make_dp_sips, max_contributions=3, scales=[0.5, 0.5], thresholds=[3.0, 1.5]),
    "make_dp_sips_from_budget": release_paths.from_budget(
        wgm.make_dp_sips_from_budget, max_contributions=3, epsilon=20.0, delta=1e-3
    ),
    "make_dp_sips_from_budget (auto)": release_paths.from_budget(
        wgm.make_dp_sips_from_budget, max_contributions="auto", epsilon=20.0, delta=1e-3
    ),
}
ZCDP = dp.approximate(dp.zero_concentrated_divergence())
APPROX_DP = dp.approximate(dp.max_divergence())
TINY = 1e-7  # σ with no noise to speak of: the release is the thresholded histogram


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


def frame(users: list[list]) -> pl.DataFrame:
    return pl.DataFrame(
        {"user": [i for i, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


def two_round_data() -> pl.DataFrame:
    """20 fans hold p1..p4 (weight 1/2 each: 10 per item); 6 rich users hold p1..p4 and r, of which Δ0 = 4
    keeps 4 (r's round-1 weight ≤ 6/2 = 3); 3 loners hold q only (weight 3 in every round).

    At T = 5: round 1 releases p1..p4 (weight ≥ 10) and nothing else; round 2 re-bounds the rich users to their
    remaining item r (t = 1, weight 1 each: 6 > 5) and releases it; q (3) never passes.
    """
    popular = ["p1", "p2", "p3", "p4"]
    return frame([popular] * 20 + [[*popular, "r"]] * 6 + [["q"]] * 3)


# --------------------------------------------------------------------------------------------------------------
# one round is the WGM
# --------------------------------------------------------------------------------------------------------------
def test_one_round_with_fixed_seeds_noises_make_wgms_histogram(monkeypatch) -> None:
    """With the hash seed fixed (secrets.randbits), one round noises exactly make_wgm's lattice histogram.

    The noise vector follows the histogram's row order, which a group-by leaves arbitrary, so the histograms
    (sorted) are compared, as for make_wgm against its chain (tests/test_transformations.py)."""
    from opendp_wgm.measurements import dp_sips as sips_module
    from opendp_wgm.measurements import wgm as wgm_module

    rng = np.random.default_rng(1)
    data = pl.DataFrame({"user": rng.integers(0, 300, 3000), "item": rng.zipf(1.5, 3000) % 200})
    monkeypatch.setattr(secrets, "randbits", lambda bits: 0x5EED)
    seen: dict[str, pl.DataFrame] = {}
    for name, module in (("wgm", wgm_module), ("sips", sips_module)):
        release = module.release_above_threshold

        def spy(h, *a, name=name, release=release, **k):
            seen[name] = h
            return release(h, *a, **k)

        monkeypatch.setattr(module, "release_above_threshold", spy)
    space = wgm.user_items_space()
    expected = wgm.make_wgm(*space, max_contributions=3, scale=1.0, threshold=2.0)(data)
    got = wgm.make_dp_sips(*space, max_contributions=3, scales=[1.0], thresholds=[2.0])(data)
    assert seen["sips"].height > 100 and seen["sips"].sort("item").equals(seen["wgm"].sort("item"))
    assert got.columns == [*expected.columns, "round"] and got.schema["item"] == expected.schema["item"]
    assert got["round"].to_list() == [1] * got.height


def test_one_round_has_the_wgm_release_distribution() -> None:
    """1500 items each held by 9 users, T at the weight − 1/2: each released with probability Φ(0.25)."""
    n_items, holders = 1500, 9
    data = pl.DataFrame({"user": np.arange(n_items * holders), "item": np.repeat(np.arange(n_items), holders)})
    m = wgm.make_dp_sips(*wgm.user_items_space(), max_contributions=1, scales=[2.0], thresholds=[holders - 0.5])
    p = ndtr(0.5 / 2.0)
    assert abs(m(data).height / n_items - p) < 5 * math.sqrt(p * (1 - p) / n_items)


def test_maps_are_the_composed_loss_and_one_round_is_the_wgms() -> None:
    scales, thresholds = (6.0, 3.0, 2.0), (30.0, 15.0, 9.0)
    for measure, epsilon in ((None, None), (APPROX_DP, 1.5)):
        m = wgm.make_dp_sips(
            *wgm.user_items_space(), max_contributions=20, scales=scales, thresholds=thresholds,
            output_measure=measure, epsilon=epsilon,
        )
        assert m.output_measure == (measure or ZCDP)
        for d in (0, 1, 2, 5):
            assert m.map(d) == dp_sips_privacy_loss(
                d, scales=scales, thresholds=thresholds, max_contributions=20, epsilon=epsilon
            )
        one = wgm.make_dp_sips(*wgm.user_items_space(), max_contributions=20, scales=[3.0], thresholds=[15.0], output_measure=measure, epsilon=epsilon)
        same = wgm.make_wgm(*wgm.user_items_space(), max_contributions=20, scale=3.0, threshold=15.0, output_measure=measure, epsilon=epsilon)
        assert one.map(1) == pytest.approx(same.map(1), rel=1e-12)


def test_from_budget_checks_at_the_budget_and_composes_in_a_context() -> None:
    for budget in ({"epsilon": 1.0, "delta": 1e-5}, {"rho": 0.1, "delta": 1e-6}):
        m = wgm.make_dp_sips_from_budget(*wgm.user_items_space(), max_contributions=100, **budget)
        assert m.check(1, tuple(v for k, v in budget.items()))
    lf = pl.LazyFrame({"user": np.repeat(np.arange(400), 3), "item": np.tile(["a", "b", "c"], 400)})
    ctx = dp.Context.compositor(
        data=lf,
        privacy_unit=dp.unit_of(contributions=1, identifier="user"),
        privacy_loss=dp.loss_of(rho=0.2, delta=1e-6),
        split_evenly_over=2,
    )
    m = wgm.make_dp_sips_from_budget(*ctx.accountant.input_space, max_contributions=3, rho=0.1, delta=5e-7, rounds=2)
    released = ctx(m)
    assert set(released["item"].to_list()) == {"a", "b", "c"}  # 400 users each: released in round 1 or 2


# --------------------------------------------------------------------------------------------------------------
# the rounds
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [pl.String, pl.Categorical])
def test_round_two_releases_what_re_bounding_makes_heavy(dtype) -> None:
    space = wgm.user_items_space()
    m = wgm.make_dp_sips(*space, max_contributions=4, scales=[TINY, TINY], thresholds=[5.0, 5.0])
    for _ in range(5):  # every kept subset gives the same release
        out = m(two_round_data().with_columns(pl.col("item").cast(dtype)).lazy())
        assert out.columns == ["item", "noisy_weight", "round"]
        assert out.schema["item"] == dtype
        assert (out.schema["noisy_weight"], out.schema["round"]) == (pl.Float64, pl.Int16)
        assert out.with_columns(pl.col("item").cast(pl.String)).rows() == [
            ("p1", pytest.approx(13.0, abs=3.01), 1), ("p2", pytest.approx(13.0, abs=3.01), 1),
            ("p3", pytest.approx(13.0, abs=3.01), 1), ("p4", pytest.approx(13.0, abs=3.01), 1),
            ("r", pytest.approx(6.0, abs=1e-4), 2),
        ]
    # the WGM (one round) never releases r: its weight is at most 3
    assert "r" not in wgm.make_wgm(*space, max_contributions=4, scale=TINY, threshold=5.0)(two_round_data())["item"]
    # a third round at a low threshold releases q, and nothing twice
    three = wgm.make_dp_sips(*space, max_contributions=4, scales=[TINY] * 3, thresholds=[5.0, 5.0, 2.5])(two_round_data())
    assert dict(zip(three["item"], three["round"], strict=True)) == {"p1": 1, "p2": 1, "p3": 1, "p4": 1, "r": 2, "q": 3}


@pytest.mark.parametrize("passes", [1, 3])
def test_released_items_are_disjoint_across_rounds(passes: int) -> None:
    rng = np.random.default_rng(7)
    data = pl.DataFrame({"user": rng.integers(0, 500, 6000), "item": rng.zipf(1.3, 6000) % 300})
    m = wgm.make_dp_sips(
        *wgm.user_items_space(), max_contributions=5, scales=[2.0, 1.0, 0.5, 0.5], thresholds=[4.0, 3.0, 2.0, 2.0],
        passes=passes,
    )
    out = m(data)
    assert out["item"].is_unique().all() and out["item"].is_sorted()
    assert set(out["round"].unique()) <= {1, 2, 3, 4} and out["round"].min() == 1
    assert set(out["item"]) <= set(data["item"])
    assert out.filter(pl.col("round") > 1).height > 0  # later rounds release something here


def test_empty_data_releases_an_empty_frame_of_the_right_schema() -> None:
    empty = pl.DataFrame({"user": [], "item": []}, schema={"user": pl.Int64, "item": pl.Int32})
    out = wgm.make_dp_sips(*wgm.user_items_space(), max_contributions=2, scales=[1.0, 1.0], thresholds=[5.0, 5.0])(empty)
    assert out.height == 0
    assert out.schema == pl.Schema({"item": pl.Int32, "noisy_weight": pl.Float64, "round": pl.Int16})


def test_household_identifier_and_string_items() -> None:
    """Users are households (person // 2): a household with two persons holding different items is one user
    of t = 2, weight 1/√2 on each; 8 such households on (x, y), 3 single-person households on z."""
    domain = dp.lazyframe_domain(
        [dp.series_domain("person", dp.atom_domain(T=dp.i64)), dp.series_domain("item", dp.atom_domain(T=str))]
    )
    metric = dp.symmetric_id_distance(pl.col("person") // 2)
    persons = [2 * h for h in range(8)] + [2 * h + 1 for h in range(8)] + [100, 102, 104]
    items = ["x"] * 8 + ["y"] * 8 + ["z"] * 3
    data = pl.LazyFrame({"person": persons, "item": items})
    m = wgm.make_dp_sips(domain, metric, max_contributions=2, scales=[TINY, TINY], thresholds=[5.0, 2.5])
    out = m(data)
    assert out["item"].to_list() == ["x", "y", "z"] and out["round"].to_list() == [1, 1, 2]
    assert out["noisy_weight"].to_list() == pytest.approx([8 / math.sqrt(2), 8 / math.sqrt(2), 3.0], abs=1e-4)


# --------------------------------------------------------------------------------------------------------------
# stage 1 of the two-stage mechanisms
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("peeling", "accounting"), [(make_peeling_top_k, TOP_K), (make_user_peeling, USER_PEELING)])
def test_stage_1_of_a_two_stage_mechanism(peeling, accounting) -> None:
    stage_1 = wgm.then_dp_sips(max_contributions=4, scales=[TINY, TINY], thresholds=[5.0, 5.0])

    def stage_2(domain, metric, candidates):
        return peeling(domain, metric, candidates=candidates, k=3, scale=1e-3)

    def stage_2_map(d: int) -> tuple[float, float]:
        return peeling_loss(d, k=3, scale=1e-3, kind="approx_zcdp", accounting=accounting)

    m = make_two_stage(
        *wgm.user_items_space(), stage_1=stage_1, stage_2=stage_2, stage_2_map=stage_2_map, accounting=accounting
    )
    first = stage_1(*wgm.user_items_space())
    rho_1, delta_1 = first.map(1)
    rho_2, delta_2 = stage_2_map(1)
    assert m.map(1)[0] == add_up(rho_1, rho_2, accounting)
    assert m.map(1)[1] == pytest.approx(delta_1 + delta_2)
    out = m(two_round_data())
    assert out.columns == ["item", "rank"]
    # the candidates are p1..p4 and r (q is never released): three of them, distinct
    assert out.height == 3 and set(out["item"]) <= {"p1", "p2", "p3", "p4", "r"} and out["item"].is_unique().all()


# --------------------------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"scales": [1.0, 2.0], "thresholds": [3.0]}, ValueError, r"`thresholds` must have one entry per round, as many as `scales` \(2\) \(found 1\)"),
        ({"scales": [], "thresholds": []}, ValueError, r"`scales` must hold at least one round"),
        ({"scales": [1.0, 0.0], "thresholds": [3.0, 3.0]}, ValueError, r"`scales` must be in \(0.0, inf\) \(found 0.0\)"),
        ({"scales": [-1.0], "thresholds": [3.0]}, ValueError, r"`scales` must be in"),
        ({"scales": [2.0**21], "thresholds": [3.0]}, ValueError, r"`scales` must be <= 2\*\*20"),
        ({"scales": 1.0, "thresholds": [3.0]}, TypeError, r"`scales` must be a sequence of numbers"),
        ({"scales": "12", "thresholds": [3.0]}, TypeError, r"`scales` must be a sequence of numbers"),
        ({"scales": [1.0], "thresholds": [math.nan]}, ValueError, r"`thresholds` must be finite"),
        ({"scales": [1.0], "thresholds": [3.0], "max_contributions": 0}, ValueError, r"`max_contributions` must be"),
        ({"scales": [1.0], "thresholds": [3.0], "epsilon": 1.0}, ValueError, r"`epsilon` must be None unless"),
        ({"scales": [1.0], "thresholds": [3.0], "output_measure": APPROX_DP}, ValueError, r"`epsilon` must be given"),
        ({"scales": [1.0, 1e-9], "thresholds": [3.0, 3.0], "output_measure": APPROX_DP, "epsilon": 1.0}, ValueError, r"needs `scales` >= 2\*\*-20"),
        ({"scales": [1.0], "thresholds": [3.0], "noise": "numpy"}, ValueError, r"`noise` must be one of"),
        ({"scales": [1.0], "thresholds": [3.0], "passes": 0}, ValueError, r"`passes` must be an integer >= 1"),
    ],
)
def test_make_dp_sips_rejects_bad_input(kwargs, error, match) -> None:
    arguments = {"max_contributions": 3, **kwargs}
    with pytest.raises(error, match=match):
        wgm.make_dp_sips(*wgm.user_items_space(), **arguments)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fractions": [0.5, 0.4]}, r"`fractions` must"),
        ({"fractions": [1.2, -0.2]}, r"`fractions\[1\]` must be in \(0.0, inf\) \(found -0.2\)"),
        ({"rounds": 0}, r"`rounds` must be an integer >= 1"),
        ({"ratio": 0.0}, r"`ratio` must be in"),
        ({"rho": 0.1}, r"exactly one of `epsilon` and `rho`"),
        ({"delta": 0.0}, r"`delta` must be in"),
    ],
)
def test_from_budget_rejects_bad_budgets(kwargs, match) -> None:
    arguments = {"max_contributions": 10, "epsilon": 1.0, "delta": 1e-5, **kwargs}
    with pytest.raises(ValueError, match=match):
        wgm.make_dp_sips_from_budget(*wgm.user_items_space(), **arguments)


# --------------------------------------------------------------------------------------------------------------
# the adaptive default: round 1, a noisy two-bin count, then the sparse or the dense branch
# --------------------------------------------------------------------------------------------------------------
def test_dense_branch_rule() -> None:
    # dense when more than a quarter of the remaining users are boosted, by the noisy counts clamped at 0
    assert dense_branch(26.0, 74.0) and dense_branch(1.0, 0.0) and dense_branch(1e6, -5.0) and dense_branch(5.0, 10.0)
    assert not dense_branch(25.0, 75.0)  # exactly a quarter: not more
    assert not dense_branch(0.0, 0.0) and not dense_branch(-3.0, -2.0) and not dense_branch(24.0, 76.0)
    assert not dense_branch(-1.0, 5.0)


def test_user_bins_count_boosted_and_other_remaining_users() -> None:
    released = pl.DataFrame({"item": ["a", "b"]})
    data = frame([
        ["a", "x1"],  # 1 of 2 released: boosted
        ["a", "b"],  # everything released: in no bin
        [f"y{i}" for i in range(10)],  # nothing released: other
        ["b", *(f"w{i}" for i in range(30))],  # 1 of 31 released: boosted
        ["a", "a", "b", "b"],  # duplicates: everything released, in no bin
        ["x1", "x1", "y1"],  # duplicates, nothing released: other
    ])
    space = _resolve_space(*wgm.user_items_space(), None)
    pairs = distinct_pairs_plan(_prepare_frame(data, space), space)
    bins = _user_bins(_flag_released(pairs, released, "item"), space)
    assert bins.tolist() == [2, 2]


def _branch_data(dense: bool) -> pl.DataFrame:
    """40 users hold "p" and one item of their own; round 1 (T = 10) releases "p" only. Dense: each user then
    holds one unreleased item of two (boosted). Sparse: 200 more users hold 30 items each, none released (40 of
    240 remaining users boosted: less than a quarter)."""
    users = [["p", f"own{u}"] for u in range(40)]
    if not dense:
        users += [[f"s{u}_{j}" for j in range(30)] for u in range(200)]
    return frame(users)


@pytest.mark.parametrize("dense", [True, False])
def test_the_rule_chooses_the_branch_from_round_one_and_the_count(dense: bool) -> None:
    # no noise to speak of: round 1 releases "p" (weight 40/√2 > 10); the branches differ in their rounds: the
    # sparse branch releases the remaining heavy items in round 2, the dense one releases nothing in round 2
    # (T = 1e6) and everything left with weight above 0.5 in round 3
    m = wgm.make_dp_sips(
        *wgm.user_items_space(), max_contributions=40, scales=[TINY, TINY], thresholds=[10.0, 0.5],
        statistic_scale=TINY, branch_scales=[TINY, TINY], branch_thresholds=[1e6, 0.5],
    )
    released = m(_branch_data(dense))
    rounds = dict(zip(released["item"].to_list(), released["round"].to_list(), strict=True))
    assert rounds.pop("p") == 1
    assert set(rounds.values()) == ({3} if dense else {2})
    assert sorted(rounds) == sorted(f"own{u}" for u in range(40))  # weight 1 each; the s items 1/√30 each


def test_the_count_is_noised_at_the_statistic_scale(monkeypatch) -> None:
    # the two bins are noised by the WGM kernel's sampler at σ_s on the 2^-20 lattice, and only then compared
    calls = []

    def fake(bins, *, scale, threshold, noise):
        calls.append((bins.tolist(), scale, noise))
        return np.array([0, 1]), np.array([False, True])  # noisy: boosted 0 of 1 → sparse

    monkeypatch.setattr(dp_sips_module, "noisy_above_threshold", fake)
    m = wgm.make_dp_sips(
        *wgm.user_items_space(), max_contributions=40, scales=[TINY, TINY], thresholds=[10.0, 0.5],
        statistic_scale=7.5, branch_scales=[TINY, TINY], branch_thresholds=[1e6, 0.5],
    )
    released = m(_branch_data(dense=True))
    assert calls == [([40 << 20, 0], 7.5, "lattice")]
    assert released["round"].max() == 2  # the noisy count, not the true one (40 to 0), chose the sparse branch


def test_adaptive_default_from_budget() -> None:
    for budget in ({"epsilon": 1.0, "delta": 1e-5}, {"rho": 0.1, "delta": 1e-6}):
        m = wgm.make_dp_sips_from_budget(*wgm.user_items_space(), max_contributions=100, **budget)
        cal = calibrate_dp_sips(max_contributions=100, adaptive=True, **budget)
        assert m.map(1) == cal.loss(1) and m.check(1, tuple(budget.values()))
        for d_in in (2, 5):
            assert m.map(d_in) == cal.loss(d_in)
        fixed = wgm.make_dp_sips_from_budget(*wgm.user_items_space(), max_contributions=100, fractions=(0.01, 0.99), **budget)
        assert fixed.map(1) == calibrate_dp_sips(max_contributions=100, fractions=(0.01, 0.99), **budget).loss(1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"statistic_scale": 1.0}, r"`branch_scales` must be given with `statistic_scale`"),
        ({"branch_scales": [1.0], "branch_thresholds": [3.0]}, r"`statistic_scale` must be given with"),
        ({"statistic_scale": 1.0, "branch_scales": [1.0, 2.0], "branch_thresholds": [3.0]}, r"one entry per round"),
        ({"statistic_scale": 0.0, "branch_scales": [1.0], "branch_thresholds": [3.0]}, r"`statistic_scale` must be"),
    ],
)
def test_make_dp_sips_rejects_a_half_given_branch(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        wgm.make_dp_sips(*wgm.user_items_space(), max_contributions=3, scales=[1.0, 1.0], thresholds=[3.0, 3.0], **kwargs)


def test_the_branch_needs_a_second_round() -> None:
    with pytest.raises(ValueError, match=r"`rounds` must be an integer >= 2"):
        wgm.make_dp_sips(*wgm.user_items_space(), max_contributions=3, scales=[1.0], thresholds=[3.0],
                         statistic_scale=1.0, branch_scales=[1.0], branch_thresholds=[3.0])
