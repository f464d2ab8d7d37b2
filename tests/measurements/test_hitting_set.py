"""k-hitting set: user peeling, WGM-then-peeling, the greedy baseline (oracle values of the paper's reference code).

Oracles are the reference's tests run with (almost) no noise: a scale of 1e-3 makes a difference of one user
in a round's scores a factor e^1000 in probability, so the exponential mechanism is an argmax (ties are
resolved at random, and the oracles below are stated up to ties).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import opendp_wgm as wgm
from opendp_wgm.measurements import _peeling_rounds as peeling_rounds_module
from opendp_wgm.measurements._peeling_rounds import _Coverage
from opendp_wgm.measurements._user_items import user_item_csr
from opendp_wgm.measurements.baselines import greedy_hitting_set, user_peeling_on_true_domain
from opendp_wgm.measurements.hitting_set import (
    calibrate_user_peeling,
    calibrate_wgm_hitting_set,
    make_user_peeling,
    make_user_peeling_from_budget,
    make_wgm_hitting_set,
    make_wgm_hitting_set_from_budget,
    then_user_peeling,
    then_wgm_hitting_set_from_budget,
)
from opendp_wgm.metrics import coverage, missed_users
from opendp_wgm.privacy.calibrate import calibrate_wgm
from opendp_wgm.privacy.gaussian import rho_to_epsilon
from opendp_wgm.privacy.peeling import peeling_epsilon

ZCDP = dp.approximate(dp.zero_concentrated_divergence())
APPROX_DP = dp.approximate(dp.max_divergence())
NO_NOISE = 1e-3


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


def frame(users: list[list]) -> pl.DataFrame:
    return pl.DataFrame(
        {"user": [i for i, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


def space() -> tuple[dp.Domain, dp.Metric]:
    return wgm.user_items_space()  # needs the features: build it inside each test


def peel(users, candidates, k, scale=NO_NOISE) -> list:
    return make_user_peeling(*space(), candidates=candidates, k=k, scale=scale)(frame(users))["item"].to_list()


# --------------------------------------------------------------------------------------------------------
# oracles (oracle values of the paper's reference code, "Peeling", "Greedy hitting set", "Metrics")
# --------------------------------------------------------------------------------------------------------
def test_user_peeling_no_noise_oracles() -> None:
    assert set(peel([[1, 2, 3], [1, 2, 4], [1, 5], [6, 7], [6, 9]], list(range(1, 10)), k=2)) == {1, 6}
    data = [[1, 2, 3], [1, 2, 4, 5], [1, 5], [6, 7], [6, 9]]
    assert set(peel(data, [5, 6, 7], k=2)) == {5, 6}
    assert set(peel(data, [5, 6, 7], k=5)) == {5, 6, 7}  # min(k, n) rounds, whatever the coverage
    assert peel([[1, 2, 3], [1, 2, 3], [1], [1, 2]], [1, 2, 3], k=1) == [1]


def test_user_peeling_no_noise_picks_in_greedy_order() -> None:
    # no ties: round 1 covers 3 users with 1, round 2 two users with 6, then 8 (one user) and 2 (none left)
    assert peel([[1, 2, 3], [1, 2, 4], [1, 5], [6, 7], [6, 9], [8]], [1, 2, 6, 8], k=4) == [1, 6, 8, 2]


def test_wgm_hitting_set_no_noise_oracles() -> None:
    # oracle values of the paper's reference code, wgm_then_peel with no noise (reference: ε = 1e6 per stage)
    users = [[1, 2, 3], [1, 2, 4], [1, 5], [2, 7], [2, 9]] + [[1]] * 10 + [[2]] * 10
    m = make_wgm_hitting_set(
        *space(), k=2, max_contributions=10, wgm_scale=1e-4, wgm_threshold=5.0, peel_scale=NO_NOISE
    )
    assert set(m(frame(users))["item"].to_list()) == {1, 2}
    items = [[1]] * 10 + [[2, 3], [1, 4, 5]]
    m = make_wgm_hitting_set(
        *space(), k=1, max_contributions=5, wgm_scale=1e-4, wgm_threshold=5.0, peel_scale=NO_NOISE
    )
    assert m(frame(items))["item"].to_list() == [1]


def test_greedy_oracle_and_tie_rule() -> None:
    data = frame([[1, 2, 3], [1, 2, 4], [1, 5], [6, 7], [6, 9]])
    out = greedy_hitting_set(data, 2)
    assert out["item"].to_list() == [1, 6]
    assert out["rank"].to_list() == [1, 2] and out["newly_covered"].to_list() == [3, 2]
    # ties go to the smallest item, whatever the row order
    tied = frame([[9, 4], [4, 9], [7]])
    assert greedy_hitting_set(tied, 2)["item"].to_list() == [4, 7]
    assert greedy_hitting_set(tied.reverse(), 2)["item"].to_list() == [4, 7]
    words = pl.DataFrame({"user": [0, 1, 2], "item": ["b", "a", "c"]})
    assert greedy_hitting_set(words, 2)["item"].to_list() == ["a", "b"]


def test_greedy_never_repeats_and_stops_when_all_covered() -> None:
    """The paper's reference code re-picks a chosen item once every user is covered."""
    data = frame([[1, 2], [1], [3]])
    out = greedy_hitting_set(data, 10)
    assert out["item"].to_list() == [1, 3]
    assert missed_users(data, out) == 0


def test_missed_users_oracle() -> None:
    data = frame([[1, 2, 3], [1, 2, 4], [1, 5], [6, 7], [8, 9], [5, 3, 2]])
    assert missed_users(data, [1, 6]) == 2
    assert missed_users(frame([[1, 2, 3], [1, 2, 4], [1, 5], [6, 7]]), [1, 6]) == 0
    assert missed_users(data, greedy_hitting_set(data, 2)) == 2  # greedy picks {1, 2}: also 2 missed
    # users with no item are missed: pass their total
    assert missed_users(data, [1, 6], n_users=8) == 4
    assert coverage(data, [1, 6], n_users=8) == 0.5


# --------------------------------------------------------------------------------------------------------
# hypothesis
# --------------------------------------------------------------------------------------------------------
user_sets = st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=6), min_size=1, max_size=30)


@settings(max_examples=30, deadline=None)
@given(
    users=user_sets,
    candidates=st.lists(st.integers(-2, 15), max_size=10, unique=True),
    k=st.integers(1, 12),
    scale=st.sampled_from([NO_NOISE, 0.5, 5.0, 1e3]),
)
def test_peeling_output_is_distinct_candidates(users, candidates, k, scale) -> None:
    out = make_user_peeling(*space(), candidates=candidates, k=k, scale=scale)(frame(users))
    chosen = out["item"].to_list()
    assert len(chosen) == len(set(chosen)) == min(k, len(candidates))
    assert set(chosen) <= set(candidates)
    assert out["rank"].to_list() == list(range(1, len(chosen) + 1))
    assert out.schema == pl.Schema({"item": pl.Int64, "rank": pl.UInt32})


def _brute_greedy(users: list[list[int]], k: int) -> list[int]:
    """The paper's greedy on Python sets, ties to the smallest item, no repeats."""
    uncovered = [set(u) for u in users]
    chosen: list[int] = []
    for _ in range(k):
        counts: dict[int, int] = {}
        for items in uncovered:
            for x in items:
                counts[x] = counts.get(x, 0) + 1
        if not counts:
            break
        best = min(counts, key=lambda x: (-counts[x], x))
        chosen.append(best)
        uncovered = [items for items in uncovered if best not in items]
    return chosen


@settings(max_examples=40, deadline=None)
@given(users=user_sets, k=st.integers(1, 8))
def test_greedy_matches_brute_force_and_is_monotone(users, k) -> None:
    data = frame(users)
    out = greedy_hitting_set(data, k)
    chosen = out["item"].to_list()
    assert chosen == _brute_greedy(users, k)
    assert len(chosen) == len(set(chosen)) <= k
    assert all(n > 0 for n in out["newly_covered"].to_list())
    covered = sum(out["newly_covered"].to_list())
    assert covered == len(users) - missed_users(data, chosen)
    # coverage is monotone in k, and greedy with k+1 extends greedy with k
    longer = greedy_hitting_set(data, k + 1)["item"].to_list()
    assert longer[: len(chosen)] == chosen
    assert missed_users(data, longer) <= missed_users(data, chosen)


@settings(max_examples=40, deadline=None)
@given(users=user_sets, picks=st.lists(st.integers(0, 12), max_size=8))
def test_incremental_counts_equal_recomputed_counts(users, picks) -> None:
    pairs = sorted({(u, x) for u, items in enumerate(users) for x in items})
    csr = user_item_csr(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]), 13, item_index=True)
    state = _Coverage(csr)
    covered: set[int] = set()
    for j in picks:
        holders = {u for u, x in pairs if x == j}
        assert state.pick(j) == len(holders - covered)
        covered |= holders
        expected = np.bincount([x for u, x in pairs if u not in covered], minlength=13)
        np.testing.assert_array_equal(state.counts, expected)


# --------------------------------------------------------------------------------------------------------
# statistics of the exponential-mechanism rounds
# --------------------------------------------------------------------------------------------------------
def test_one_round_frequency() -> None:
    """The paper's reference code: counts (1, 0), ε' = 1.1, no factor 1/2: Pr[first] = e^1.1 / (1 + e^1.1) = 0.7503."""
    trials = 2000
    m = make_user_peeling(*space(), candidates=["a", "b"], k=1, scale=1 / 1.1)
    data = pl.DataFrame({"user": [0], "item": ["a"]})
    wins = sum(m(data)["item"][0] == "a" for _ in range(trials))
    p = math.exp(1.1) / (1 + math.exp(1.1))
    assert p == pytest.approx(0.7503, abs=1e-4)
    tolerance = 4.5 * math.sqrt(p * (1 - p) / trials)  # false failure rate < 1e-5
    assert abs(wins / trials - p) < tolerance
    # the same sample rejects the halved exponent (the factor 1/2 of a non-monotone analysis)
    halved = math.exp(0.55) / (1 + math.exp(0.55))
    assert abs(wins / trials - halved) > tolerance


#: The rounds' paths: compiled (Numba), compiled with the float pass's margin forced to 2^-2 (most rounds left
#: open and settled exactly by ``selection._race`` on the same words), and the NumPy loop.
ROUNDS_PATHS = {
    "compiled": {},
    "compiled, floats forced open": {"em_float_bounds": lambda: (2.0**-2, 2.0**1000)},
    "numpy": {"peel_jit": lambda: None},
}


@pytest.mark.parametrize("path", list(ROUNDS_PATHS))
def test_two_rounds_follow_uncovered_counts(monkeypatch, path: str) -> None:
    """Round 2's scores count only the users round 1 left uncovered: χ² over the 6 ordered outcomes."""
    if path != "numpy":
        pytest.importorskip("numba")
    for name, value in ROUNDS_PATHS[path].items():
        monkeypatch.setattr(peeling_rounds_module, name, value)
    # a: users {0, 1, 2}; b: {0, 1}; c: {3}
    data = frame([["a", "b"], ["a", "b"], ["a"], ["c"]])
    holders = {"a": {0, 1, 2}, "b": {0, 1}, "c": {3}}
    scale = 1.0

    def law(s: float) -> dict[tuple[str, str], float]:
        def em(scores: dict[str, int]) -> dict[str, float]:
            z = sum(math.exp(v / s) for v in scores.values())
            return {x: math.exp(v / s) / z for x, v in scores.items()}

        first = em({x: len(h) for x, h in holders.items()})
        out = {}
        for x1, h1 in holders.items():
            second = em({x: len(h - h1) for x, h in holders.items() if x != x1})
            out.update({(x1, x2): first[x1] * q for x2, q in second.items()})
        return out

    trials = 1200
    m = make_user_peeling(*space(), candidates=["a", "b", "c"], k=2, scale=scale)
    seen = [tuple(m(data)["item"].to_list()) for _ in range(trials)]
    outcomes = sorted(law(scale))
    observed = np.array([seen.count(o) for o in outcomes])
    critical = stats.chi2.ppf(1 - 1e-5, df=len(outcomes) - 1)
    expected = np.array([law(scale)[o] for o in outcomes]) * trials
    assert ((observed - expected) ** 2 / expected).sum() < critical
    # power: the law with stale (not uncovered) counts in round 2, or with a halved exponent, is rejected
    stale = {(x1, x2): p for (x1, x2), p in law(scale).items()}
    first = {x: sum(p for (y, _), p in stale.items() if y == x) for x in holders}
    for x1 in holders:
        rest = {x: math.exp(len(holders[x]) / scale) for x in holders if x != x1}
        z = sum(rest.values())
        for x2, w in rest.items():
            stale[(x1, x2)] = first[x1] * w / z
    for wrong in (stale, law(2 * scale)):
        expected = np.array([wrong[o] for o in outcomes]) * trials
        assert ((observed - expected) ** 2 / expected).sum() > critical


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compiled_rounds_pick_what_the_loop_picks_on_the_same_words(monkeypatch, seed: int) -> None:
    """On the same CSPRNG stream (a fixed key: test scaffolding), the compiled rounds pick exactly the NumPy loop's
    candidates: both take the exact arg min of the same uniforms' keys (users above and below, repeated rows)."""
    pytest.importorskip("numba")
    from randomgen import AESCounter

    rng = np.random.default_rng(seed)  # test data only
    users = [[f"i{x}" for x in rng.zipf(1.5, rng.integers(1, 12)) if x < 80] or ["i1"] for _ in range(600)]
    candidates = [f"i{x}" for x in range(1, 60)]
    releases = []
    for patches in ({}, {"peel_jit": lambda: None}):
        with monkeypatch.context() as patched:
            for name, value in patches.items():
                patched.setattr(peeling_rounds_module, name, value)
            patched.setattr(peeling_rounds_module, "csprng", lambda: np.random.Generator(AESCounter(key=seed)))
            m = make_user_peeling(*space(), candidates=candidates, k=40, scale=3.0)
            releases.append(m(frame(users)))
    assert releases[0].height == 40
    assert releases[0].equals(releases[1])


# --------------------------------------------------------------------------------------------------------
# privacy maps and calibration
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("d_in", [0, 1, 2, 5])
def test_peeling_maps(d_in) -> None:
    k, scale = 7, 3.0
    rho = k * d_in**2 / (8 * scale**2)
    m = make_user_peeling(*space(), candidates=list(range(k)), k=k, scale=scale)
    assert m.output_measure == ZCDP
    assert m.map(d_in) == (pytest.approx(rho, rel=1e-15), 0.0) and m.map(d_in)[0] >= rho
    zcdp = make_user_peeling(*space(), candidates=list(range(k)), k=k, scale=scale, output_measure=dp.zero_concentrated_divergence())
    assert zcdp.map(d_in) == pytest.approx(rho, rel=1e-15)
    pure = make_user_peeling(*space(), candidates=list(range(k)), k=k, scale=scale, output_measure=dp.max_divergence())
    assert pure.map(d_in) == pytest.approx(k * d_in / scale, rel=1e-15)
    approx = make_user_peeling(*space(), candidates=list(range(k)), k=k, scale=scale, output_measure=APPROX_DP, delta=1e-5)
    eps, delta = approx.map(d_in)
    if d_in == 0:
        assert (eps, delta) == (0.0, 0.0)
    else:
        converted = rho_to_epsilon(rho, 1e-5)
        assert eps == pytest.approx(min(k * d_in / scale, converted), rel=1e-11)
        assert delta == (1e-5 if converted < k * d_in / scale else 0.0)
    basic = make_user_peeling(*space(), candidates=list(range(k)), k=k, scale=scale, output_measure=APPROX_DP, delta=0.0)
    assert basic.map(d_in) == (pytest.approx(k * d_in / scale, rel=1e-15), 0.0)


def test_map_charges_min_k_candidates_rounds() -> None:
    maps = [make_user_peeling(*space(), candidates=c, k=5, scale=2.0).map(1) for c in ([], [1], list(range(50)))]
    assert maps == [(0.0, 0.0), (1 / 32, 0.0), (5 / 32, 0.0)]
    m = make_user_peeling_from_budget(*space(), candidates=[1, 2], k=10, epsilon=1.0)  # 2 rounds share ε
    assert m.map(1) == pytest.approx(1.0) and m.map(1) <= 1.0


@pytest.mark.parametrize(
    ("epsilon", "delta", "k", "expected"),
    [(1.1, None, 10, 0.11), (1.1, 0.1, 1, 1.1), (1.1, 0.1, 10, 0.29264), (0.5, 5e-6, 100, None), (1.0, 1e-5, 5, None)],
)
def test_calibration_reproduces_em_epsilon_cdp(epsilon, delta, k, expected) -> None:
    """Oracle values of the paper's reference code: em_epsilon_cdp (1.1, 0, 10) → 0.11; (1.1, 0.1, 1) → 1.1; (1.1, 0.1, 10) → 0.29264."""
    round_epsilon = 1 / calibrate_user_peeling(k=k, epsilon=epsilon, delta=delta)
    reference = peeling_epsilon(epsilon, 0.0 if delta is None else delta, k)
    assert round_epsilon == pytest.approx(reference, rel=1e-9)
    if expected is not None:
        assert round_epsilon == pytest.approx(expected, abs=5e-5)
    m = make_user_peeling_from_budget(*space(), candidates=list(range(k)), k=k, epsilon=epsilon, delta=delta)
    assert m.check(1, epsilon if delta is None else (epsilon, delta))
    if delta is None:
        assert m.map(1) == pytest.approx(epsilon)
    else:  # δ is spent only when the zCDP conversion beats basic composition
        assert m.map(1)[0] == pytest.approx(epsilon) and m.map(1)[1] in (0.0, delta)


def test_rho_calibration() -> None:
    m = make_user_peeling_from_budget(*space(), candidates=list(range(10)), k=10, rho=0.25)
    assert m.output_measure == ZCDP and m.check(1, (0.25, 0.0))
    assert 1 / calibrate_user_peeling(k=10, rho=0.25) == pytest.approx(math.sqrt(8 * 0.25 / 10), rel=1e-9)


@pytest.mark.parametrize("d_in", [0, 1, 2, 3])
@pytest.mark.parametrize("measure", ["zcdp", "approx_dp"])
def test_composition_map_is_sum_of_stage_maps(d_in, measure) -> None:
    params = dict(max_contributions=20, scale=4.0, threshold=30.0)
    extra = {} if measure == "zcdp" else dict(output_measure=APPROX_DP, epsilon=0.4)
    stage1 = wgm.make_wgm(*space(), **params, **extra)
    peel_extra = {} if measure == "zcdp" else dict(output_measure=APPROX_DP, delta=2e-6)
    stage2 = make_user_peeling(*space(), candidates=list(range(12)), k=12, scale=25.0, **peel_extra)
    composed = make_wgm_hitting_set(
        *space(),
        k=12,
        max_contributions=20,
        wgm_scale=4.0,
        wgm_threshold=30.0,
        peel_scale=25.0,
        **({} if measure == "zcdp" else dict(output_measure=APPROX_DP, wgm_epsilon=0.4, peel_delta=2e-6)),
    )
    assert composed.output_measure == (ZCDP if measure == "zcdp" else APPROX_DP)
    got, a, b = composed.map(d_in), stage1.map(d_in), stage2.map(d_in)
    for i in range(2):
        assert got[i] == pytest.approx(a[i] + b[i], rel=1e-15, abs=0.0)
        assert got[i] >= a[i] + b[i]  # rounded up


@pytest.mark.parametrize("split", [0.5, 0.2, 0.9])
def test_budget_calibration_split(split) -> None:
    cal = calibrate_wgm_hitting_set(k=50, max_contributions=100, epsilon=1.0, delta=1e-5, split=split)
    ref = calibrate_wgm(max_contributions=100, epsilon=split * 1.0, delta=split * 1e-5)
    assert (cal.wgm.scale, cal.wgm.threshold) == (ref.scale, ref.threshold)
    assert cal.peel_round_epsilon == pytest.approx(peeling_epsilon((1 - split) * 1.0, (1 - split) * 1e-5, 50), rel=1e-9)
    assert cal.wgm_loss[0] + cal.peel_loss[0] <= 1.0 and cal.wgm_loss[1] + cal.peel_loss[1] <= 1e-5
    m = make_wgm_hitting_set_from_budget(*space(), k=50, max_contributions=100, epsilon=1.0, delta=1e-5, split=split)
    assert m.output_measure == APPROX_DP and m.check(1, (1.0, 1e-5))
    assert m.map(1) == pytest.approx((1.0, 1e-5), rel=1e-6)


def test_budget_calibration_rho() -> None:
    cal = calibrate_wgm_hitting_set(k=20, max_contributions=50, rho=0.5, delta=1e-6, split=0.25)
    assert cal.wgm.scale == pytest.approx(math.sqrt(1 / (2 * 0.125)), rel=1e-9)
    assert cal.peel_delta == 0.0 and cal.peel_loss[1] == 0.0
    m = make_wgm_hitting_set_from_budget(*space(), k=20, max_contributions=50, rho=0.5, delta=1e-6, split=0.25)
    assert m.output_measure == ZCDP and m.check(1, (0.5, 1e-6))


def test_context_composition() -> None:
    data = frame([[1, 2]] * 50 + [[3]] * 30)
    ctx = dp.Context.compositor(
        data=data.lazy(),
        privacy_unit=dp.unit_of(contributions=1, identifier="user"),
        privacy_loss=dp.loss_of(rho=1.0, delta=1e-5),
        split_evenly_over=2,
    )
    space = ctx.accountant.input_space
    out = ctx(make_wgm_hitting_set_from_budget(*space, k=3, max_contributions=5, rho=0.5, delta=5e-6))
    assert out.schema["item"] == pl.Int64 and out.height <= 3
    out = ctx(make_user_peeling_from_budget(*space, candidates=[1, 3, 7], k=2, rho=0.5))
    assert out.height == 2


# --------------------------------------------------------------------------------------------------------
# behaviour
# --------------------------------------------------------------------------------------------------------
def test_second_stage_uses_unclipped_counts() -> None:
    """With Δ0 = 1 a clipped count of a or b would be ~20 < 25 users of c; unclipped it is 40 > 25."""
    data = frame([["a", "b"]] * 40 + [["c"]] * 25)
    m = make_wgm_hitting_set(*space(), k=2, max_contributions=1, wgm_scale=1e-4, wgm_threshold=5.0, peel_scale=NO_NOISE)
    for _ in range(3):
        out = m(data)["item"].to_list()
        assert out[0] in ("a", "b") and out[1] == "c"


@pytest.mark.parametrize("dtype", [pl.Int64, pl.Int32, pl.UInt16, pl.String, pl.Categorical])
def test_dtypes_preserved_and_input_unchanged(dtype) -> None:
    data = pl.DataFrame({"user": list(range(60)) * 2 + [99], "item": ["7"] * 60 + ["3"] * 60 + ["5"]})
    data = data.with_columns(pl.col("item").cast(pl.Int64).cast(dtype) if dtype.is_integer() else pl.col("item").cast(dtype))
    before = data.clone()
    candidates = data["item"].unique()
    outputs = [
        make_user_peeling(*space(), candidates=candidates, k=2, scale=1.0)(data),
        make_wgm_hitting_set(*space(), k=2, max_contributions=2, wgm_scale=1.0, wgm_threshold=10.0, peel_scale=1.0)(data),
        greedy_hitting_set(data, 3),
        user_peeling_on_true_domain(data, 2, epsilon=1.0, delta=1e-5),
        make_user_peeling(*space(), candidates=candidates, k=2, scale=1.0)(data.lazy()),
    ]
    for out in outputs:
        assert out.schema["item"] == data.schema["item"] and out.schema["rank"] == pl.UInt32
        assert set(out["item"].to_list()) <= set(data["item"].to_list())
    assert greedy_hitting_set(data, 3)["item"].cast(pl.String).to_list() == ["3", "5"]
    assert data.equals(before)


def test_empty_candidates_release_nothing() -> None:
    m = make_user_peeling(*space(), candidates=[], k=3, scale=2.0)
    out = m(frame([[1, 2], [3]]))
    assert out.height == 0 and out.schema == pl.Schema({"item": pl.Int64, "rank": pl.UInt32})
    assert m.map(1) == (0.0, 0.0)  # no round runs
    m = make_user_peeling_from_budget(*space(), candidates=[], k=3, epsilon=1.0, delta=1e-5)
    assert m(frame([[1]])).height == 0 and m.check(1, (1.0, 1e-5))
    # the WGM releases nothing (threshold out of reach): empty output, but stage 2 is charged k rounds
    m = make_wgm_hitting_set(*space(), k=3, max_contributions=5, wgm_scale=1.0, wgm_threshold=1e6, peel_scale=2.0)
    assert m(frame([[1, 2], [3]])).height == 0
    assert m.map(1)[0] == pytest.approx(1 / 2 + 3 / 32)


def test_empty_and_null_data() -> None:
    m = make_user_peeling(*space(), candidates=["x", "y", "z"], k=2, scale=1.0)
    empty = pl.DataFrame({"user": [], "item": []}, schema={"user": pl.Int64, "item": pl.String})
    out = m(empty)  # nothing to cover: the rounds still run, uniformly over the candidates
    assert out.height == 2 and set(out["item"].to_list()) <= {"x", "y", "z"}
    nulls = pl.DataFrame({"user": [None, 1, 2], "item": ["x", None, "y"]})
    assert greedy_hitting_set(nulls, 3)["item"].to_list() == ["y"]
    assert greedy_hitting_set(empty, 3).height == 0


def test_partials_chain() -> None:
    out = (space() >> then_user_peeling(candidates=[1, 2], k=1, scale=NO_NOISE))(frame([[1], [1], [2]]))
    assert out["item"].to_list() == [1]
    m = space() >> then_wgm_hitting_set_from_budget(k=2, max_contributions=5, epsilon=1.0, delta=1e-5)
    assert m.check(1, (1.0, 1e-5))


def test_true_domain_peeling_covers_like_greedy_without_noise() -> None:
    data = frame([[1, 2, 3], [1, 2, 4], [1, 5], [6, 7], [6, 9]])
    out = user_peeling_on_true_domain(data, 2, epsilon=1e6)
    assert set(out["item"].to_list()) == {1, 6}


def test_reference_quality_on_steam(shared_data) -> None:
    """The paper's reference code: steam_200k at ε = 1, δ = 1e-5, Δ0 = 100, k = 100: greedy misses 1181 users."""
    data = wgm.datasets.load("steam_200k", shared_data)
    assert missed_users(data, greedy_hitting_set(data, 100)) == 1181
    m = make_wgm_hitting_set_from_budget(*space(), k=100, max_contributions=100, epsilon=1.0, delta=1e-5)
    missed = missed_users(data, m(data))
    assert 1181 < missed < 1800  # the reference: 1600 ± 28 (standard error over its trials)


# --------------------------------------------------------------------------------------------------------
# bad input: every message
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(k=0), ValueError, "`k` must be an integer >= 1 (found 0)"),
        (dict(k=2.0), TypeError, "`k` must be an integer >= 1 (found 2.0)"),
        (dict(scale=0.0), ValueError, "`scale` must be in (0.0, inf) (found 0.0)"),
        (dict(scale=float("nan")), ValueError, "`scale` must be finite"),
        (dict(candidates="abc"), TypeError, "`candidates` must be a sequence of items (found str)"),
        (dict(candidates=[1, None]), ValueError, "`candidates` must not contain nulls"),
        (dict(candidates=[1, 1, 2]), ValueError, "`candidates` must be distinct (2 duplicated entries)"),
        (dict(output_measure=dp.smoothed_max_divergence()), ValueError, "`output_measure` must be one of"),
        (dict(output_measure=APPROX_DP), ValueError, "`delta` must be given with output_measure=dp.approximate(dp.max_divergence()) (the δ at which the peeling's zCDP is converted to (ε, δ); 0 gives basic composition) (found None)"),
        (dict(delta=1e-5), ValueError, "`delta` must be None unless output_measure=dp.approximate(dp.max_divergence()) (found 1e-05)"),
        (dict(output_measure=APPROX_DP, delta=1.0), ValueError, "`delta` must be in [0.0, 1.0) (found 1.0)"),
        (dict(item="other"), ValueError, "`item` ('other') disagrees with `input_domain`'s item column ('item')"),
    ],
)
def test_user_peeling_errors(kwargs, error, message) -> None:
    params = dict(candidates=[1, 2], k=2, scale=1.0) | kwargs
    with pytest.raises(error) as info:
        make_user_peeling(*space(), **params)
    assert message in str(info.value)


def test_bad_space() -> None:
    with pytest.raises(ValueError, match=r"`input_metric` must be dp\.symmetric_id_distance"):
        make_user_peeling(space()[0], dp.symmetric_distance(), candidates=[1], k=1, scale=1.0)


def test_features_are_required() -> None:
    dp.disable_features("honest-but-curious")
    try:
        for build in (
            lambda: make_user_peeling(*space(), candidates=[1], k=1, scale=1.0),
            lambda: make_user_peeling_from_budget(*space(), candidates=[1], k=1, rho=1.0),
            lambda: make_wgm_hitting_set_from_budget(*space(), k=1, max_contributions=1, rho=1.0, delta=1e-5),
        ):
            with pytest.raises(dp.OpenDPException, match="honest-but-curious"):
                build()
    finally:
        dp.enable_features("contrib", "honest-but-curious")


def test_candidates_of_another_dtype_fail_at_release() -> None:
    m = make_user_peeling(*space(), candidates=["a"], k=1, scale=1.0)
    with pytest.raises(dp.OpenDPException):
        m(frame([[1]]))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, ValueError, "exactly one of `epsilon` and `rho` must be given (found neither)"),
        (dict(epsilon=1.0, rho=1.0), ValueError, "exactly one of `epsilon` and `rho` must be given (found epsilon, rho)"),
        (dict(rho=1.0, delta=1e-5), ValueError, "`delta` must be None unless `epsilon` is given"),
        (dict(epsilon=0.0), ValueError, "`epsilon` must be in (0.0, inf) (found 0.0)"),
        (dict(rho=-1.0), ValueError, "`rho` must be in (0.0, inf) (found -1.0)"),
        (dict(epsilon=1.0, delta=0.0), ValueError, "`delta` must be in (0.0, 1.0) (found 0.0)"),
        (dict(epsilon=1.0, k=0), ValueError, "`k` must be an integer >= 1 (found 0)"),
    ],
)
def test_peeling_budget_errors(kwargs, error, message) -> None:
    params = dict(k=3) | kwargs
    for call in (
        lambda: calibrate_user_peeling(**params),
        lambda: make_user_peeling_from_budget(*space(), candidates=[1], **params),
        lambda: user_peeling_on_true_domain(frame([[1]]), **params),
    ):
        with pytest.raises(error) as info:
            call()
        assert message in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(k=0), ValueError, "`k` must be an integer >= 1 (found 0)"),
        (dict(peel_scale=-1.0), ValueError, "`peel_scale` must be in (0.0, inf) (found -1.0)"),
        (dict(max_contributions=0), ValueError, "`max_contributions` must be an integer >= 1 (found 0)"),
        (dict(wgm_scale=0.0), ValueError, "`wgm_scale` must be in (0.0, inf) (found 0.0)"),
        (dict(wgm_threshold=float("inf")), ValueError, "`wgm_threshold` must be finite (found inf)"),
        (dict(output_measure=APPROX_DP, wgm_epsilon=0.0, peel_delta=0.0), ValueError, "`wgm_epsilon` must be in (0.0, inf) (found 0.0)"),
        (dict(noise="fast"), ValueError, "`noise` must be one of {'lattice', 'opendp'} (found 'fast')"),
        (dict(wgm_epsilon=1.0), ValueError, "`wgm_epsilon` must be None unless output_measure=dp.approximate(dp.max_divergence()) (found 1.0)"),
        (dict(peel_delta=1e-6), ValueError, "`peel_delta` must be None unless output_measure=dp.approximate(dp.max_divergence()) (found 1e-06)"),
        (dict(output_measure=APPROX_DP), ValueError, "`wgm_epsilon` must be given with output_measure=dp.approximate(dp.max_divergence()) (found None)"),
        (dict(output_measure=APPROX_DP, wgm_epsilon=1.0), ValueError, "`peel_delta` must be given with output_measure=dp.approximate(dp.max_divergence()) (found None)"),
        (dict(output_measure=APPROX_DP, wgm_epsilon=1.0, peel_delta=2.0), ValueError, "`peel_delta` must be in [0.0, 1.0) (found 2.0)"),
        (dict(output_measure=dp.max_divergence()), ValueError, "`output_measure` must be dp.approximate(dp.zero_concentrated_divergence()) or"),
        (dict(passes=0), ValueError, "`passes` must be an integer >= 1 (found 0)"),
        (dict(passes="2"), TypeError, "`passes` must be an integer >= 1 (found '2')"),
        (dict(engine="gpu"), ValueError, "`engine` must be one of {'auto', 'in-memory', 'streaming'} (found 'gpu')"),
    ],
)
def test_wgm_hitting_set_errors(kwargs, error, message) -> None:
    params = dict(k=2, max_contributions=5, wgm_scale=1.0, wgm_threshold=5.0, peel_scale=1.0) | kwargs
    with pytest.raises(error) as info:
        make_wgm_hitting_set(*space(), **params)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(split=0.0), ValueError, "`split` must be in (0.0, 1.0) (found 0.0)"),
        (dict(split=1.0), ValueError, "`split` must be in (0.0, 1.0) (found 1.0)"),
        (dict(split="half"), TypeError, "`split` must be a real number (found 'half')"),
        (dict(epsilon=None), ValueError, "exactly one of `epsilon` and `rho` must be given (found neither)"),
        (dict(delta=1.5), ValueError, "`delta` must be in (0.0, 1.0) (found 1.5)"),
        (dict(k=-1), ValueError, "`k` must be an integer >= 1 (found -1)"),
        (dict(max_contributions=0), ValueError, "`max_contributions` must be an integer >= 1 (found 0)"),
        (dict(noise_delta_fraction=1.0), ValueError, "`noise_delta_fraction` must be in (0.0, 1.0)"),
    ],
)
def test_wgm_hitting_set_budget_errors(kwargs, error, message) -> None:
    params = dict(k=2, max_contributions=5, epsilon=1.0, delta=1e-5) | kwargs
    for call in (
        lambda: calibrate_wgm_hitting_set(**params),
        lambda: make_wgm_hitting_set_from_budget(*space(), **params),
    ):
        with pytest.raises(error) as info:
            call()
        assert message in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(passes=0), ValueError, "`passes` must be an integer >= 1 (found 0)"),
        (dict(engine="Streaming"), ValueError, "`engine` must be one of {'auto', 'in-memory', 'streaming'} (found 'Streaming')"),
    ],
)
def test_wgm_hitting_set_budget_execution_errors(kwargs, error, message) -> None:
    params = dict(k=2, max_contributions=5, epsilon=1.0, delta=1e-5) | kwargs
    with pytest.raises(error) as info:
        make_wgm_hitting_set_from_budget(*space(), **params)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("data", "kwargs", "error", "message"),
    [
        ([[1]], dict(k=0), ValueError, "`k` must be an integer >= 1 (found 0)"),
        ({"user": [1]}, {}, TypeError, "`data` must be a polars DataFrame or LazyFrame (found dict)"),
        ([[1]], dict(user="item"), ValueError, "`user` and `item` must name different columns (both are 'item')"),
        ([[1]], dict(item=3), TypeError, "`item` must be a column name (str) (found 3)"),
        ([[1]], dict(item="word"), ValueError, "column(s) ['word'] not found in the data (columns: ['user', 'item'])"),
    ],
)
def test_baseline_errors(data, kwargs, error, message) -> None:
    data = frame(data) if isinstance(data, list) else data
    params = dict(k=1) | kwargs
    for call in (
        lambda: greedy_hitting_set(data, **params),
        lambda: user_peeling_on_true_domain(data, **params, epsilon=1.0),
    ):
        with pytest.raises(error) as info:
            call()
        assert message in str(info.value)


def test_outputs_are_sets_of_candidates_for_all_orders() -> None:
    """Every ordered pair of distinct candidates can be released (the output is a list, not a set)."""
    data = frame([[1], [2], [3]])
    m = make_user_peeling(*space(), candidates=[1, 2, 3], k=2, scale=1e3)
    seen = {tuple(m(data)["item"].to_list()) for _ in range(200)}
    assert seen == set(itertools.permutations([1, 2, 3], 2))


@pytest.mark.parametrize(
    ("candidates", "error", "match"),
    [
        ([1.2, 1.7], ValueError, r"`candidates` must be exactly representable in the item column's type Int64"),
        (["7"], TypeError, r"`candidates` must have the item column's type Int64 \(found String\)"),
    ],
)
def test_user_peeling_rejects_lossy_candidates(candidates, error, match) -> None:
    """Floats [1.2, 1.7] on an Int64 column became [1, 1] (one item picked twice); "7" matched 7."""
    domain = dp.lazyframe_domain(
        [dp.series_domain("user", dp.atom_domain(T=dp.i64)), dp.series_domain("item", dp.atom_domain(T=dp.i64))]
    )
    with pytest.raises(error, match=match):  # at construction: the domain states the dtype
        make_user_peeling(domain, dp.symmetric_id_distance(pl.col("user")), candidates=candidates, k=2, scale=1.0)
    m = make_user_peeling(*space(), candidates=candidates, k=2, scale=1.0)
    with pytest.raises(dp.OpenDPException, match=match):  # at release, before the rounds
        m(frame([[1, 7], [1]]))
    text = make_user_peeling(*space(), candidates=[7], k=1, scale=1.0)
    with pytest.raises(dp.OpenDPException, match=r"`candidates` must have the item column's type String"):
        text(frame([["7"], ["8"]]))
