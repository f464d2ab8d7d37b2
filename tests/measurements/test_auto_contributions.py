"""max_contributions="auto": the composed map, the choice rule (exact and under noise), the release, the checks."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opendp_wgm as wgm
from opendp_wgm.measurements.auto_contributions import choose_from_counts, noisy_count_bins, user_count_bins
from opendp_wgm.privacy.auto import (
    BINS,
    GRID,
    auto_loss,
    bin_of,
    choice_loss,
    choose_max_contributions,
    passes_single_item_test,
    single_item_threshold,
    split_auto_budget,
)
from opendp_wgm.privacy.budget import Budget
from opendp_wgm.privacy.partition import partition_selection_loss


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


def _users_with(sizes: dict[int, int]) -> pl.DataFrame:
    """``sizes[s]`` users holding ``s`` distinct items each (items drawn from a shared pool of 2000)."""
    counts = np.concatenate([np.full(n, s) for s, n in sizes.items()])
    users = np.repeat(np.arange(counts.size), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    offsets = np.arange(users.size) - starts
    return pl.DataFrame({"user": users, "item": (users * 7 + offsets) % 2000})


# ---------------------------------------------------------------------------------------------------------------
# the map


BUDGETS: list[dict[str, float]] = [
    {"epsilon": 0.5, "delta": 1e-6},
    {"epsilon": 1.0, "delta": 1e-5},
    {"epsilon": 4.0, "delta": 1e-3},
    {"rho": 0.05, "delta": 1e-6},
    {"rho": 0.5, "delta": 1e-5},
]


def _candidate_loss(g: int, d_in: int, share: Budget) -> tuple[float, float]:
    """The WGM's candidate at Δ0 = g and ``share``: the optimal partition selection at Δ0 = 1 under (ε, δ)-DP."""
    if g == 1 and share.epsilon is not None:
        return partition_selection_loss(d_in, epsilon=share.value, delta=share.delta)
    c = wgm.make_wgm_from_budget(
        *wgm.user_items_space(), max_contributions=g, delta=share.delta, epsilon=share.epsilon, rho=share.rho
    )
    return c.map(d_in)


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: ",".join(f"{k}={v:g}" for k, v in b.items()))
@pytest.mark.parametrize("fraction", [0.02, 0.1])
def test_map_composes_the_choice_and_the_largest_candidate(budget: dict[str, float], fraction: float) -> None:
    m = wgm.make_wgm_from_budget(*wgm.user_items_space(), max_contributions="auto", auto_fraction=fraction, **budget)
    total = Budget.of(**budget)
    assert m.output_measure == total.measure
    assert m.check(1, total.d_out)
    auto = split_auto_budget(total, fraction)
    # the test costs f/15 and the histogram 14f/15 of ε or ρ, and no δ (pure DP or zCDP); the rest after each, with
    # all of δ, is the mechanism's
    test = choice_loss(1, scale=auto.test_scale, laplace=auto.laplace)
    choice = choice_loss(1, scale=auto.histogram_scale, laplace=auto.laplace)
    assert auto.laplace == (total.epsilon is not None)
    assert test[0] <= fraction / 15 * total.value * (1 + 1e-12) and test[1] == 0.0
    assert choice[0] <= 14 * fraction / 15 * total.value * (1 + 1e-12) and choice[1] == 0.0
    assert test[0] + auto.single.value <= total.value and choice[0] + test[0] + auto.rest.value <= total.value
    assert total.delta * (1 - 1e-11) < auto.rest.delta == auto.single.delta < total.delta
    for d_in in (1, 2, 5):
        candidates = [_candidate_loss(g, d_in, auto.rest) for g in GRID]
        single = _candidate_loss(1, d_in, auto.single)
        test_d = choice_loss(d_in, scale=auto.test_scale, laplace=auto.laplace)
        choice_d = choice_loss(d_in, scale=auto.histogram_scale, laplace=auto.laplace)
        expected = auto_loss(d_in, test_d, [single, auto_loss(d_in, choice_d, candidates)])
        got = m.map(d_in)
        assert got == expected
        if auto.laplace:  # the discrete Laplace's pure-DP map: d_in / b
            assert choice_d == (pytest.approx(d_in / auto.histogram_scale, rel=1e-12), 0.0)
            assert test_d == (pytest.approx(d_in / auto.test_scale, rel=1e-12), 0.0)
        # each part at least the test's plus the single-item candidate's, and the test's plus the histogram's plus
        # every candidate's (adaptive composition)
        assert got[0] >= test_d[0] + single[0] - 1e-15 and got[1] >= min(1.0, single[1]) - 1e-20
        for loss in candidates:
            assert got[0] >= test_d[0] + choice_d[0] + loss[0] - 1e-15
            assert got[1] >= min(1.0, loss[1]) - 1e-20
    assert m.map(0) == (0.0, 0.0)


@settings(max_examples=25, deadline=None)
@given(
    epsilon=st.floats(0.1, 8.0),
    delta=st.floats(1e-9, 1e-2),
    fraction=st.floats(0.002, 0.5),
    zcdp=st.booleans(),
)
def test_map_fits_the_budget_and_grows_with_d_in(epsilon: float, delta: float, fraction: float, zcdp: bool) -> None:
    # any budget and share: the composed map at one user fits the budget (along either branch the shares sum to
    # it), and it grows with the number of users, part by part
    budget = {"rho": epsilon / 10, "delta": delta} if zcdp else {"epsilon": epsilon, "delta": delta}
    total = Budget.of(**budget)
    m = wgm.make_wgm_from_budget(*wgm.user_items_space(), max_contributions="auto", auto_fraction=fraction, **budget)
    assert m.check(1, total.d_out)
    losses = [m.map(d) for d in (1, 2, 3)]
    assert all(a[0] < b[0] and a[1] <= b[1] for a, b in itertools.pairwise(losses))
    auto = split_auto_budget(total, fraction)
    assert auto.test.value + auto.single.value <= total.value
    assert auto.test.value + auto.histogram.value + auto.rest.value <= total.value
    assert math.isclose(auto.fraction, fraction, rel_tol=1e-9)


@pytest.mark.parametrize(
    ("make", "options"),
    [
        (wgm.make_dp_sips_from_budget, {}),
        (wgm.make_wgm_top_k_from_budget, {"k": 10}),
        (wgm.make_wgm_hitting_set_from_budget, {"k": 10}),
    ],
    ids=["dp-sips", "top-k", "hitting-set"],
)
@pytest.mark.parametrize("budget", [BUDGETS[1], BUDGETS[4]], ids=["approx-dp", "zcdp"])
def test_every_constructor_fits_the_budget(
    make: Callable[..., dp.Measurement], options: dict[str, Any], budget: dict[str, float]
) -> None:
    m = make(*wgm.user_items_space(), max_contributions="auto", **options, **budget)
    total = Budget.of(**budget)
    assert m.output_measure == total.measure
    assert m.check(1, total.d_out)
    rho_or_eps, delta = m.map(2)
    assert rho_or_eps > total.value and delta > 0.0  # the group map grows


def test_the_choice_costs_the_stated_fraction() -> None:
    total = Budget.of(epsilon=1.0, delta=1e-5)
    auto = split_auto_budget(total, 0.03)
    assert math.isclose(auto.fraction, 0.03, rel_tol=1e-9)
    assert math.isclose(auto.test.value, 0.002) and math.isclose(auto.histogram.value, 0.028)
    assert auto.test.delta == auto.histogram.delta == 0.0
    assert math.isclose(auto.single.value, 0.998) and math.isclose(auto.rest.value, 0.97)
    assert math.isclose(auto.rest.delta, 1e-5) and math.isclose(auto.single.delta, 1e-5)
    for scale, share in ((auto.histogram_scale, auto.histogram), (auto.test_scale, auto.test)):
        eps, delta = choice_loss(1, scale=scale, laplace=True)
        assert eps <= share.value and delta == 0.0
        # b is the smallest passing scale: 1/(sε) users, and one ulp less does not pass
        assert math.isclose(scale, 1.0 / share.value, rel_tol=1e-12)
        assert choice_loss(1, scale=math.nextafter(scale, 0.0), laplace=True)[0] > share.value
    rho = split_auto_budget(Budget.of(rho=0.5, delta=1e-5), 0.15)
    assert not rho.laplace and choice_loss(1, scale=rho.histogram_scale, laplace=False)[0] <= 0.07
    assert choice_loss(1, scale=rho.test_scale, laplace=False)[0] <= 0.005
    assert math.isclose(rho.rest.delta, 1e-5)


# ---------------------------------------------------------------------------------------------------------------
# the rule


def test_bins_round_counts_up_to_the_grid() -> None:
    counts = np.array([1, 2, 3, 5, 6, 200, 201, 500, 501, 10**6])
    assert bin_of(counts).tolist() == [0, 1, 2, 2, 3, 7, 8, 8, 8, 8]  # one bin above 200
    data = _users_with({1: 5, 3: 2, 201: 1})
    assert user_count_bins(data, *wgm.user_items_space()).tolist() == [5, 0, 2, 0, 0, 0, 0, 0, 1]


@pytest.mark.parametrize(
    ("bins", "expected"),
    [
        ([75, 25, 0, 0, 0, 0, 0, 0, 0], 1),  # three quarters hold one item
        ([74, 26, 0, 0, 0, 0, 0, 0, 0], 2),  # nobody above 2
        # a step from g to g' pays when more than ROOT_COST·(√g' − √g) of the users are in between:
        ([500, 497, 3, 0, 0, 0, 0, 0, 0], 2),  # 0.3% above 2, below 0.0045·(√5 − √2) = 0.37%
        ([500, 496, 4, 0, 0, 0, 0, 0, 0], 5),  # 0.4% above 2
        ([0, 0, 0, 0, 0, 0, 0, 97, 3], 200),  # 3% above 200, below 0.0045·(√500 − √200) = 3.7%
        ([0, 0, 0, 0, 0, 0, 0, 96, 4], 500),  # 4% above 200
        ([0] * 9, 1),  # no users: Δ0 = 1
        ([-5, -3, 0, 0, 0, 0, 0, 0, -1], 1),  # noise below 0 everywhere
        # tails sum the noisy bins as drawn: the -20 makes the tails above 100 and 200 negative (n sums the
        # clamped bins: 80), and 200 scores least
        ([10, 10, 10, 10, 10, 10, 10, 10, -20], 200),
        ([-30, 10, 10, 10, 10, 10, 10, 10, 10], 500),  # a negative bin 0 counts as 0 in the single share
    ],
)
def test_rule_on_exact_bins(bins: list[int], expected: int) -> None:
    assert choose_max_contributions(bins) == expected


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ({1: 100_000, 2: 10_000}, 1),  # 91% hold one item
        ({3: 90_000, 40: 10_000}, 50),  # 10% above 20, none above 50
        ({1: 100_000, 2: 80_000, 7: 19_800, 15: 200}, 10),  # 0.1% above 10, 10% above 5
    ],
)
def test_rule_under_the_default_noise(sizes: dict[int, int], expected: int) -> None:
    # the bins of 10^5 to 2·10^5 users at the default budget (discrete Laplace of scale b = 50 users per bin, a
    # standard deviation of about 71; a tail sums at most 7 bins, about 190): the rule returns the noise-free answer
    # in at least 195 of 200 draws (the score of the answer is below every other by at least 980 users' share, over
    # 10 standard deviations of the bins between the two tails)
    bins = np.zeros(BINS, dtype=np.int64)
    np.add.at(bins, bin_of(np.array(list(sizes))), np.array(list(sizes.values())))
    assert choose_max_contributions(bins) == expected
    auto = split_auto_budget(Budget.of(epsilon=1.0, delta=1e-5), 0.02)
    chosen = [choose_max_contributions(noisy_count_bins(bins, auto.histogram_scale, laplace=auto.laplace)) for _ in range(200)]
    assert sum(c == expected for c in chosen) >= 195, np.unique(chosen, return_counts=True)


@pytest.mark.parametrize(
    ("counts", "laplace", "expected"),
    [
        # Laplace of b = 10: the threshold is 3·√2·10·√(1/16 + 9/16) = 33.54 users
        ([1000, 200], True, True),  # 1000 − 900 = 100
        ([1000, 288], True, True),  # 34
        ([1000, 289], True, False),  # 33.25
        ([100, -50], True, False),  # a negative count is clamped: 100 − 75 = 25
        ([200, -50], True, True),  # 50
        ([-5, 100], True, False),
        ([0, 0], True, False),  # no users
        # Gaussian of σ = 10: 3·10·√(10/16) = 23.72 users
        ([1000, 301], False, True),  # 24.25
        ([1000, 302], False, False),  # 23.5
    ],
)
def test_single_item_test_on_exact_counts(counts: list[int], laplace: bool, expected: bool) -> None:
    assert single_item_threshold(10.0, laplace=laplace) == pytest.approx(
        3 * (math.sqrt(2) if laplace else 1.0) * 10 * math.sqrt(10 / 16), rel=1e-12
    )
    assert passes_single_item_test(counts, 10.0, laplace=laplace) is expected


@pytest.mark.parametrize(("sizes", "passes"), [({1: 60_000, 2: 10_000}, True), ({1: 50_000, 2: 20_000}, False)])
def test_single_item_test_under_the_default_noise(sizes: dict[int, int], passes: bool) -> None:
    # the default budget (ε = 1, f = 0.015: the test at 0.001, a discrete Laplace of b = 1000 users per count; the
    # threshold is 3354 users). 86% holding one item: the statistic is 7500, 3.7 deviations of 1118 above the
    # threshold; 71%: −2500, 5.2 below it. The Laplace tails beyond 3.7 deviations weigh about 0.3%: at least 195 of
    # 200 draws give the noise-free answer
    auto = split_auto_budget(Budget.of(epsilon=1.0, delta=1e-5), 0.015)
    assert auto.test_scale == pytest.approx(1000.0, rel=1e-9)
    bins = np.zeros(BINS, dtype=np.int64)
    np.add.at(bins, bin_of(np.array(list(sizes))), np.array(list(sizes.values())))
    choices = [choose_from_counts(bins, auto) for _ in range(200)]
    assert sum(c.single_item_test == passes for c in choices) >= 195
    # where the test fails, the histogram decides, Δ0 = 1 included (86% hold one item)
    assert all(c.max_contributions == 1 for c in choices if passes or c.single_item_test)


def test_the_release_says_which_step_chose_and_runs_at_its_share() -> None:
    # candidates that release their Δ0 and the ε they were calibrated to; at ε = 1000 and half of it on the choice
    # the test's threshold is 0.1 user and its counts are exact but with probability e^-33: the test passes where
    # every user holds one item, and fails at exactly 3/4 (the statistic is 0), where the histogram still chooses
    # Δ0 = 1, at its own share of the budget
    def candidate(g: int, budget: Budget) -> dp.Measurement:
        return dp.m.make_user_measurement(
            *wgm.user_items_space(), budget.measure,
            lambda _: pl.DataFrame({"g": [g], "epsilon": [budget.value]}), lambda d: (d * budget.value, budget.delta),
        )

    m = wgm.make_auto_contributions(
        *wgm.user_items_space(), candidate=candidate, epsilon=1000.0, delta=1e-3, auto_fraction=0.5
    )
    auto = split_auto_budget(Budget.of(epsilon=1000.0, delta=1e-3), 0.5)
    for sizes, by_test, g, epsilon in [
        ({1: 300}, True, 1, auto.single.value),
        ({1: 300, 2: 100}, False, 1, auto.rest.value),
        ({3: 300}, False, 5, auto.rest.value),
    ]:
        release = m(_users_with(sizes))
        assert (release.single_item_test, release.max_contributions) == (by_test, g)
        assert release.row(0) == (g, epsilon)
    assert math.isclose(auto.single.value, 1000 * (1 - 0.5 / 15)) and math.isclose(auto.rest.value, 500.0)


def test_noise_is_centred_at_the_counts() -> None:
    # 4000 draws of σ = 100 noise on 11 bins: each bin's mean within 6 standard errors (6 · 100/√4000 ≈ 9.5)
    bins = np.arange(11, dtype=np.int64) * 1000
    draws = np.stack([noisy_count_bins(bins, 100.0) for _ in range(4000)])
    assert np.all(np.abs(draws.mean(axis=0) - bins) < 6 * 100 / math.sqrt(4000))
    assert np.all(np.abs(draws.std(axis=0) - 100.0) < 6.0)


def test_laplace_noise_is_centred_at_the_counts() -> None:
    # 4000 draws of discrete Laplace noise of scale 50 on 10 bins: integers; each bin's mean within 6 standard errors
    # (the standard deviation is about √2·50 ≈ 70.7) and its spread within 10% of that
    bins = np.arange(10, dtype=np.int64) * 1000
    draws = np.stack([noisy_count_bins(bins, 50.0, laplace=True) for _ in range(4000)])
    assert np.array_equal(draws, np.round(draws))
    sd = math.sqrt(2) * 50
    assert np.all(np.abs(draws.mean(axis=0) - bins) < 6 * sd / math.sqrt(4000))
    assert np.all(np.abs(draws.std(axis=0) - sd) < 0.1 * sd)


# ---------------------------------------------------------------------------------------------------------------
# the release


@pytest.mark.parametrize(
    ("sizes", "expected"), [({1: 3000}, 1), ({3: 3000}, 5), ({30: 1000, 1: 10}, 50)]
)
def test_release_carries_the_chosen_max_contributions(sizes: dict[int, int], expected: int) -> None:
    # a large budget and half of it on the choice: σ ≈ 0.1 user, the choice is the noise-free one
    m = wgm.make_wgm_from_budget(
        *wgm.user_items_space(), max_contributions="auto", auto_fraction=0.5, epsilon=100.0, delta=1e-3
    )
    release = m(_users_with(sizes))
    assert isinstance(release, wgm.AutoRelease) and isinstance(release, pl.DataFrame)
    assert release.max_contributions == expected
    assert release.columns == ["item", "noisy_weight"]
    if expected == 1:  # the optimal partition selection released: no weights
        assert release.height > 0 and release["noisy_weight"].null_count() == release.height
    else:
        assert release["noisy_weight"].null_count() == 0


def test_zcdp_runs_the_wgm_at_one_item() -> None:
    m = wgm.make_wgm_from_budget(
        *wgm.user_items_space(), max_contributions="auto", auto_fraction=0.5, rho=1000.0, delta=1e-3
    )
    release = m(_users_with({1: 3000}))
    assert release.max_contributions == 1 and release.height > 0
    assert release["noisy_weight"].null_count() == 0


def test_dp_sips_and_two_stage_releases_carry_it() -> None:
    data = _users_with({3: 3000})
    options: dict[str, Any] = {"max_contributions": "auto", "auto_fraction": 0.5, "epsilon": 100.0, "delta": 1e-3}
    sips = wgm.make_dp_sips_from_budget(*wgm.user_items_space(), **options)(data)
    assert sips.max_contributions == 5 and sips.columns == ["item", "noisy_weight", "round"]
    one = wgm.make_dp_sips_from_budget(*wgm.user_items_space(), **options)(_users_with({1: 3000}))
    assert one.max_contributions == 1 and set(one["round"].to_list()) <= {1}
    top = wgm.make_wgm_top_k_from_budget(*wgm.user_items_space(), k=5, **options)(data)
    assert top.max_contributions == 5 and top.height == 5


def test_group_by_release_carries_it() -> None:
    data = _users_with({3: 3000}).with_columns(value=pl.lit(1.0))
    m = wgm.make_wgm_group_by_from_budget(
        *wgm.user_items_space(), max_contributions="auto", auto_fraction=0.5, epsilon=50.0, delta=1e-3,
        sums={"value": (0.0, 1.0)},
    )
    release = m(data)
    assert release.max_contributions == 5 and release.columns == ["item", "noisy_weight", "count", "value_sum"]
    # at Δ0 = 1 the keys are the optimal partition selection's: no weight column
    single = m(_users_with({1: 3000}).with_columns(value=pl.lit(1.0)))
    assert single.max_contributions == 1 and single.columns == ["item", "count", "value_sum"]


def test_composite_keys() -> None:
    data = _users_with({3: 2000}).with_columns(a=pl.col("item") % 7, b=pl.col("item") // 7).drop("item")
    m = wgm.make_wgm_from_budget(
        *wgm.user_items_space("user", ["a", "b"]), max_contributions="auto", auto_fraction=0.5, epsilon=100.0,
        delta=1e-3,
    )
    release = m(data)
    assert release.max_contributions == 5 and release.columns == ["a", "b", "noisy_weight"]


# ---------------------------------------------------------------------------------------------------------------
# checks, from public information only


@pytest.mark.parametrize("fraction", [0.0, -0.1, 0.51, 1.0, math.nan])
def test_auto_fraction_is_checked(fraction: float) -> None:
    with pytest.raises(ValueError, match="auto_fraction"):
        wgm.make_wgm_from_budget(
            *wgm.user_items_space(), max_contributions="auto", auto_fraction=fraction, epsilon=1.0, delta=1e-5
        )


@pytest.mark.parametrize("value", ["Auto", "100", ""])
def test_only_auto_is_a_string(value: str) -> None:
    with pytest.raises(ValueError, match=r"max_contributions.*'auto'"):
        wgm.make_wgm_from_budget(*wgm.user_items_space(), max_contributions=value, epsilon=1.0, delta=1e-5)


def test_a_budget_too_small_for_a_candidate_raises_at_construction() -> None:
    with pytest.raises(ValueError, match="noise scale above 2"):
        wgm.make_wgm_from_budget(*wgm.user_items_space(), max_contributions="auto", epsilon=1e-9, delta=1e-12)


def test_empty_data_releases_an_empty_frame() -> None:
    m = wgm.make_wgm_from_budget(*wgm.user_items_space(), max_contributions="auto", epsilon=1.0, delta=1e-5)
    release = m(pl.DataFrame({"user": [], "item": []}, schema={"user": pl.Int64, "item": pl.Int64}))
    assert release.height == 0 and release.max_contributions in GRID


@pytest.mark.parametrize(
    ("columns", "error"),
    [
        ({}, r"column\(s\) \['minutes'\] not found"),
        ({"minutes": ["x", "y", "z"]}, "must be numeric to be summed"),
    ],
)
def test_a_schema_a_candidate_refuses_is_refused_before_the_choice_draws_noise(
    monkeypatch: pytest.MonkeyPatch, columns: dict[str, list[str]], error: str
) -> None:
    # a group-by's value columns are checked by its candidates' preparation: "auto" runs that check first, so a
    # frame they refuse never reaches the choice's noise (a failure after noise would be an output)
    import opendp_wgm.measurements.auto_contributions as auto

    def noise_drawn(*_: Any, **__: Any) -> None:
        raise AssertionError("the choice drew noise")

    monkeypatch.setattr(auto, "noisy_count_bins", noise_drawn)
    m = wgm.make_wgm_group_by_from_budget(
        *wgm.user_items_space(), max_contributions="auto", epsilon=1.0, delta=1e-6, sums={"minutes": (0, 120)}
    )
    data = pl.DataFrame({"user": [1, 2, 3], "item": ["a", "b", "c"], **columns})
    with pytest.raises(dp.OpenDPException, match=error) as raised:
        m(data)
    assert "the choice drew noise" not in str(raised.value)


def test_check_must_be_callable() -> None:
    with pytest.raises(TypeError, match="`check` must be a function"):
        wgm.make_auto_contributions(
            *wgm.user_items_space(), candidate=lambda g, b: None, epsilon=1.0, delta=1e-6, check=3  # type: ignore[arg-type,return-value]
        )
