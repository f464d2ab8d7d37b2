"""DP-SIPS's accounting: the schedule, the composed map (zCDP and (ε, δ)) and its calibration (docs/privacy.md §4)."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opendp_wgm.privacy.calibrate import calibrate_dp_sips, calibrate_wgm
from opendp_wgm.privacy.gaussian import analytic_gaussian_delta, wgm_privacy_loss, wgm_rho
from opendp_wgm.privacy.sips import (
    ADAPTIVE_FIRST_FRACTION,
    DEFAULT_FRACTIONS,
    check_fractions,
    combined_scale,
    dp_sips_privacy_loss,
    schedule,
    sips_fractions,
)
from opendp_wgm.privacy.threshold import wgm_threshold_delta

# --- the schedule ---------------------------------------------------------------------------------------------


def test_fractions_oracle() -> None:
    fractions = sips_fractions(3, 0.3)
    assert tuple(round(f, 3) for f in fractions) == (0.065, 0.216, 0.719)
    assert fractions == pytest.approx(tuple(p / 1.39 for p in (0.09, 0.3, 1.0)), rel=1e-14)
    assert math.fsum(fractions) == pytest.approx(1.0, abs=1e-15)
    assert sips_fractions(1, 0.3) == (1.0,)
    assert sips_fractions(4, 1.0) == pytest.approx((0.25,) * 4)
    assert sips_fractions(3, 1 / 0.3) == pytest.approx(tuple(reversed(fractions)), rel=1e-14)
    assert sips_fractions(3, 1e160)[:2] == (1.0, 1e-160)  # r^(R-1) would overflow


@pytest.mark.parametrize(
    ("fractions", "error", "message"),
    [
        ((0.5, 0.4), ValueError, r"`fractions` must sum to 1 within 1e-09 \(found a sum of 0.9\)"),
        ((1.5, -0.5), ValueError, r"`fractions\[1\]` must be in \(0.0, inf\) \(found -0.5\)"),
        ((0.5, 0.0, 0.5), ValueError, r"`fractions\[1\]` must be in \(0.0, inf\) \(found 0.0\)"),
        ((math.nan, 1.0), ValueError, r"`fractions\[0\]` must be finite \(found nan\)"),
        ((), ValueError, r"`fractions` must be a non-empty sequence of positive numbers summing to 1 \(found \(\)\)"),
        ("1", TypeError, r"`fractions` must be a non-empty sequence"),
        (1.0, TypeError, r"`fractions` must be a non-empty sequence"),
        (("a",), TypeError, r"`fractions\[0\]` must be a real number \(found 'a'\)"),
    ],
)
def test_check_fractions_errors(fractions: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        check_fractions(fractions)


def test_check_fractions_tolerance() -> None:
    normalised = check_fractions([0.3, 0.7 + 5e-10])
    assert normalised == pytest.approx((0.3, 0.7), rel=1e-9)
    assert math.fsum(normalised) == pytest.approx(1.0, abs=1e-15)
    assert check_fractions((1.0,)) == (1.0,)
    # a schedule just within the tolerance still calibrates, and its map passes the budget
    cal = calibrate_dp_sips(max_contributions=10, rho=0.5, delta=1e-6, fractions=[0.3, 0.7 + 9e-10])
    loss = dp_sips_privacy_loss(1, scales=cal.scales, thresholds=cal.thresholds, max_contributions=10)
    assert loss[0] <= 0.5
    assert loss[1] <= 1e-6
    with pytest.raises(ValueError, match="must sum to 1"):
        check_fractions([0.3, 0.7 + 2e-9])


def test_sips_fractions_errors() -> None:
    with pytest.raises(ValueError, match=r"`rounds` must be an integer >= 1 \(found 0\)"):
        sips_fractions(0, 0.3)
    with pytest.raises(ValueError, match=r"`ratio` must be in \(0.0, inf\) \(found 0.0\)"):
        sips_fractions(3, 0.0)
    with pytest.raises(ValueError, match=r"`ratio` must give positive, finite fractions over 400 rounds"):
        sips_fractions(400, 1e-300)  # ratio**399 underflows to 0


def test_map_errors() -> None:
    with pytest.raises(ValueError, match=r"`thresholds` must have one entry per round, as `scales` \(2\) \(found 1\)"):
        dp_sips_privacy_loss(1, scales=[1.0, 2.0], thresholds=[3.0], max_contributions=10)
    with pytest.raises(TypeError, match=r"`scales` must be a non-empty sequence of numbers, one per round"):
        dp_sips_privacy_loss(1, scales=[], thresholds=[], max_contributions=10)
    with pytest.raises(ValueError, match=r"`scales\[1\]` must be in \(0.0, inf\) \(found -2.0\)"):
        dp_sips_privacy_loss(1, scales=[1.0, -2.0], thresholds=[3.0, 3.0], max_contributions=10)
    with pytest.raises(ValueError, match=r"`max_contributions` must be an integer >= 1"):
        dp_sips_privacy_loss(1, scales=[1.0, 2.0], thresholds=[3.0, 3.0], max_contributions=0)


# --- one round is the WGM -------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [None, 0.3, 1.0])
@pytest.mark.parametrize("d_in", [0, 1, 2, 5])
def test_one_round_map_is_the_wgm(d_in: int, epsilon: float | None) -> None:
    kwargs = {"scale": 3.884, "threshold": 20.79, "max_contributions": 100, "epsilon": epsilon}
    expected = wgm_privacy_loss(d_in, **kwargs)  # type: ignore[arg-type]
    got = dp_sips_privacy_loss(d_in, scales=[3.884], thresholds=[20.79], max_contributions=100, epsilon=epsilon)
    assert got == expected


@pytest.mark.parametrize(("epsilon", "rho"), [(1.0, None), (0.2, None), (None, 0.5), (None, 0.01)])
def test_one_round_calibration_is_the_wgm(epsilon: float | None, rho: float | None) -> None:
    wgm = calibrate_wgm(max_contributions=100, epsilon=epsilon, rho=rho, delta=1e-6)
    sips = calibrate_dp_sips(max_contributions=100, epsilon=epsilon, rho=rho, delta=1e-6, fractions=(1.0,))
    assert sips.scales == (wgm.scale,)
    assert sips.thresholds == (wgm.threshold,)
    assert sips.scale == wgm.scale
    assert sips.noise_delta == wgm.noise_delta
    assert sips.budget == wgm.budget
    # the one-round schedule of the geometric family is the same
    assert calibrate_dp_sips(max_contributions=100, epsilon=epsilon, rho=rho, delta=1e-6, rounds=1).scales == (
        wgm.scale,
    )


# --- the composed map -----------------------------------------------------------------------------------------


def test_gaussian_parts_compose_to_one_gaussian() -> None:
    # thresholds so high that δ_T underflows to 0: δ is the analytic profile of the combined σ
    sigma = 3.0
    scales = [sigma * math.sqrt(2.0), sigma * math.sqrt(2.0)]
    assert combined_scale(scales) == pytest.approx(sigma, rel=1e-14)
    assert combined_scale(scales) <= sigma * (1 + 2**-52)
    eps, delta = dp_sips_privacy_loss(1, scales=scales, thresholds=[1e6, 1e6], max_contributions=100, epsilon=1.0)
    assert eps == 1.0
    # the WGM's map at the combined σ, whose lattice slack 2√Δ0/(σ²2^20) is the sum of the rounds'
    one = wgm_privacy_loss(1, scale=sigma, threshold=1e6, max_contributions=100, epsilon=1.0)
    assert delta == pytest.approx(one[1], rel=1e-12)
    assert delta >= one[1]
    assert delta == pytest.approx(analytic_gaussian_delta(1.0, sigma), rel=1e-4)  # the slack moves δ by 2e-5
    rho, delta_t = dp_sips_privacy_loss(3, scales=scales, thresholds=[1e6, 1e6], max_contributions=100)
    assert rho == pytest.approx(wgm_rho(3, sigma), rel=1e-14)
    assert rho >= 2 * wgm_rho(3, scales[0])
    assert delta_t == 0.0


def test_threshold_deltas_add() -> None:
    scales, thresholds = [5.0, 4.0, 3.0], [30.0, 25.0, 20.0]
    parts = [wgm_threshold_delta(scale=s, threshold=t, max_contributions=50) for s, t in zip(scales, thresholds, strict=True)]
    _, delta_t = dp_sips_privacy_loss(1, scales=scales, thresholds=thresholds, max_contributions=50)
    assert delta_t == pytest.approx(sum(parts), rel=1e-15)
    assert delta_t >= sum(parts)
    eps, delta = dp_sips_privacy_loss(1, scales=scales, thresholds=thresholds, max_contributions=50, epsilon=1.0)
    noise = wgm_privacy_loss(1, scale=combined_scale(scales), threshold=1e6, max_contributions=50, epsilon=1.0)[1]
    assert eps == 1.0
    assert delta == pytest.approx(noise + sum(parts), rel=1e-12)
    assert delta >= noise + sum(parts)


@pytest.mark.parametrize("epsilon", [None, 0.5, 2.0])
def test_map_monotone_in_d_in(epsilon: float | None) -> None:
    kwargs = {"scales": [9.0, 5.0, 3.0], "thresholds": [50.0, 30.0, 20.0], "max_contributions": 30}
    losses = [dp_sips_privacy_loss(d, epsilon=epsilon, **kwargs) for d in range(8)]  # type: ignore[arg-type]
    assert losses[0] == (0.0, 0.0)
    for smaller, larger in pairwise(losses):
        assert smaller[0] <= larger[0]
        assert smaller[1] <= larger[1]


@pytest.mark.parametrize("round_index", [0, 1, 2])
def test_map_monotone_in_each_scale(round_index: int) -> None:
    """More noise in any round lowers ρ and the Gaussian δ; at a fixed threshold it raises δ_T (an item only one
    side holds crosses T more easily), so the δ_T part is nondecreasing in σ_i."""
    base, high = [9.0, 5.0, 3.0], [1e6] * 3  # high thresholds: δ_T = 0, δ is the Gaussian part
    thresholds = [50.0, 30.0, 20.0]
    previous = None
    for factor in (0.8, 1.0, 1.3, 2.0, 5.0):
        scales = list(base)
        scales[round_index] *= factor
        rho, delta_t = dp_sips_privacy_loss(1, scales=scales, thresholds=thresholds, max_contributions=30)
        _, gaussian = dp_sips_privacy_loss(1, scales=scales, thresholds=high, max_contributions=30, epsilon=0.5)
        if previous is not None:
            assert rho < previous[0]
            assert gaussian < previous[1]
            assert delta_t >= previous[2]
        previous = (rho, gaussian, delta_t)


@pytest.mark.parametrize("split", ["fractions", "equal", "last"])
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_tighter_than_naive_composition(epsilon: float, split: str) -> None:
    """The exact Gaussian composition never charges more than adding the rounds' own (ε_i, δ_i) maps."""
    fractions = sips_fractions(3, 0.3)
    scales = [4.0 / math.sqrt(f) for f in fractions]
    thresholds = [60.0, 35.0, 22.0]
    shares = {"fractions": fractions, "equal": (1 / 3,) * 3, "last": (0.05, 0.05, 0.9)}[split]
    eps, delta = dp_sips_privacy_loss(
        1, scales=scales, thresholds=thresholds, max_contributions=100, epsilon=epsilon
    )
    naive = [
        wgm_privacy_loss(1, scale=s, threshold=t, max_contributions=100, epsilon=share * epsilon)
        for s, t, share in zip(scales, thresholds, shares, strict=True)
    ]
    assert eps == epsilon
    assert delta <= sum(d for _, d in naive)
    # the Gaussian parts alone (thresholds so high that δ_T = 0), at the natural split: markedly tighter
    high = [1e6] * 3
    _, gaussian = dp_sips_privacy_loss(1, scales=scales, thresholds=high, max_contributions=100, epsilon=epsilon)
    naive_gaussian = sum(
        wgm_privacy_loss(1, scale=s, threshold=1e6, max_contributions=100, epsilon=share * epsilon)[1]
        for s, share in zip(scales, fractions, strict=True)
    )
    assert gaussian < 0.5 * naive_gaussian


# --- calibration ----------------------------------------------------------------------------------------------


def test_calibration_oracle() -> None:
    cal = calibrate_dp_sips(max_contributions=100, epsilon=1.0, delta=1e-5, rounds=3, ratio=0.3)
    assert cal.rounds == 3
    assert cal.scales == pytest.approx((15.264448, 8.360683, 4.579334), abs=1e-6)
    assert cal.thresholds == pytest.approx((88.69503, 46.90991, 24.76546), abs=1e-5)
    assert cal.scale == calibrate_wgm(max_contributions=100, epsilon=1.0, delta=1e-5).scale  # 3.884141
    # the shares are float products f_i·(δ − δ_N): they fit the budget to a few ulp; the map below is the bound
    assert math.fsum(cal.round_deltas) + cal.noise_delta <= 1e-5 * (1 + 2.0**-50)
    loss = dp_sips_privacy_loss(1, scales=cal.scales, thresholds=cal.thresholds, max_contributions=100, epsilon=1.0)
    assert loss[0] == 1.0
    assert 0.9999e-5 <= loss[1] <= 1e-5  # the whole δ is used


def test_default_schedule() -> None:
    """Without fractions, rounds or ratio: two rounds, 5% then 95% of the budget, σ_i = σ/√f_i."""
    cal = calibrate_dp_sips(max_contributions=100, epsilon=1.0, delta=1e-5)
    assert cal.fractions == DEFAULT_FRACTIONS == (0.05, 0.95)
    sigma = calibrate_wgm(max_contributions=100, epsilon=1.0, delta=1e-5).scale
    assert cal.scales == pytest.approx(tuple(sigma / math.sqrt(f) for f in DEFAULT_FRACTIONS), rel=1e-12)
    assert schedule(rounds=2) == sips_fractions(2, 0.3)
    assert schedule(ratio=0.5) == sips_fractions(3, 0.5)


def test_fractions_and_a_geometric_schedule_are_exclusive() -> None:
    cal = calibrate_dp_sips(max_contributions=10, epsilon=1.0, delta=1e-6, fractions=[0.1, 0.9])
    assert cal.fractions == (0.1, 0.9)
    assert cal.rounds == 2
    with pytest.raises(ValueError, match=r"`rounds` must be None when `fractions` is given \(found 5\)"):
        calibrate_dp_sips(max_contributions=10, epsilon=1.0, delta=1e-6, fractions=[0.1, 0.9], rounds=5)


def test_calibration_errors() -> None:
    with pytest.raises(ValueError, match=r"`fractions` must sum to 1"):
        calibrate_dp_sips(max_contributions=10, epsilon=1.0, delta=1e-6, fractions=[0.1, 0.8])
    with pytest.raises(ValueError, match=r"exactly one of `epsilon` and `rho` must be given"):
        calibrate_dp_sips(max_contributions=10, delta=1e-6)
    with pytest.raises(ValueError, match=r"`delta` must be in \(0.0, 1.0\)"):
        calibrate_dp_sips(max_contributions=10, epsilon=1.0, delta=0.0)


def test_calibration_budget_too_small_in_the_users_terms() -> None:
    """The widest round (σ/√f_min) must stay within the sampler's limit: the error names the smallest budget."""
    # ρ = 5e-12 fits the WGM (its minimum is 1/(2·4^20) = 4.5e-13) but not a round with f_1 = 0.065:
    # σ_1 = 1/√(2 f_1 ρ) > 2^20 below ρ = 4.5e-13/0.065 = 7.0e-12
    calibrate_wgm(max_contributions=10, rho=5e-12, delta=1e-6)
    with pytest.raises(ValueError, match=r"`rho` must be >= 7.0\de-12 at any `delta` \(found 5e-12\)"):
        calibrate_dp_sips(max_contributions=10, rho=5e-12, delta=1e-6, rounds=3, ratio=0.3)
    with pytest.raises(ValueError, match=r"`epsilon` must be >= .* at `delta` = 1e-07 \(found 1e-09\)"):
        calibrate_dp_sips(max_contributions=10, epsilon=1e-9, delta=1e-7)


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(
    value=st.floats(0.1, 10.0),
    measure=st.sampled_from(["epsilon", "rho"]),
    delta=st.floats(1e-8, 1e-3),
    max_contributions=st.integers(1, 300),
    rounds=st.integers(1, 4),
    ratio=st.floats(0.1, 1.0),
)
def test_calibration_passes_its_map(
    value: float, measure: str, delta: float, max_contributions: int, rounds: int, ratio: float
) -> None:
    """ε ∈ [0.1, 10] under (ε, δ); ρ = value/2 ∈ [0.05, 5] under approximate zCDP."""
    budget = {"epsilon": value} if measure == "epsilon" else {"rho": value / 2}
    epsilon = budget.get("epsilon")
    cal = calibrate_dp_sips(max_contributions=max_contributions, delta=delta, rounds=rounds, ratio=ratio, **budget)
    loss = dp_sips_privacy_loss(
        1, scales=cal.scales, thresholds=cal.thresholds, max_contributions=max_contributions, epsilon=epsilon
    )
    assert loss[0] <= cal.budget.value
    assert loss[1] <= delta
    assert cal.budget.d_out == (next(iter(budget.values())), delta)
    wgm = calibrate_wgm(max_contributions=max_contributions, delta=delta, **budget)
    if epsilon is not None:  # the combined σ is the WGM's, exactly
        assert cal.scale == wgm.scale
        assert combined_scale(cal.scales) == pytest.approx(cal.scale, rel=1e-13)
    else:  # the whole ρ is used, and the rounds compose to the WGM's σ
        assert loss[0] == pytest.approx(value / 2, rel=1e-8)
        assert combined_scale(cal.scales) == pytest.approx(wgm.scale, rel=1e-8)


# --- the adaptive schedule (docs/privacy.md §4, "Two phases") -------------------------------------------------

ADAPTIVE_FRACTIONS = (ADAPTIVE_FIRST_FRACTION, 1.0 - ADAPTIVE_FIRST_FRACTION)
BUDGETS = (
    {"epsilon": 1.0, "delta": 1e-5},
    {"epsilon": 0.3, "delta": 1e-7},
    {"epsilon": 4.0, "delta": 1e-6},
    {"rho": 0.1, "delta": 1e-5},
    {"rho": 2.0, "delta": 1e-8},
)


def _path_loss(cal, d_in: int, dense: bool) -> tuple[float, float]:
    """One branch's path as a fixed schedule: round 1, the statistic (a Gaussian term with no threshold) and the
    branch's rounds."""
    scales = (cal.scales[0], *(cal.branch_scales if dense else cal.scales[1:]))
    thresholds = (cal.thresholds[0], *(cal.branch_thresholds if dense else cal.thresholds[1:]))
    return dp_sips_privacy_loss(d_in, scales=scales, thresholds=thresholds, max_contributions=cal.max_contributions,
                                epsilon=cal.epsilon, statistic_scale=cal.statistic_scale)


@pytest.mark.parametrize("budget", BUDGETS)
def test_adaptive_spends_what_the_fixed_two_round_schedule_spends(budget) -> None:
    adaptive = calibrate_dp_sips(max_contributions=100, adaptive=True, **budget)
    fixed = calibrate_dp_sips(max_contributions=100, fractions=ADAPTIVE_FRACTIONS, **budget)
    assert adaptive.fractions == fixed.fractions == ADAPTIVE_FRACTIONS == (0.01, 0.99)
    # the Gaussian part: round 1 + statistic + either branch compose to the fixed schedule's (the WGM's) σ
    extra = (adaptive.statistic_scale,)
    assert combined_scale(adaptive.scales + extra) == pytest.approx(combined_scale(fixed.scales), rel=1e-14)
    assert combined_scale((adaptive.scales[0], *adaptive.branch_scales, *extra)) == pytest.approx(
        combined_scale(fixed.scales), rel=1e-14)
    if "epsilon" in budget:
        assert adaptive.scale == fixed.scale == calibrate_wgm(max_contributions=100, **budget).scale
        assert adaptive.noise_delta == pytest.approx(fixed.noise_delta, rel=1e-12)
    # the threshold part: round 1 and each branch share out the fixed schedule's (0.01, 0.99) of δ_T
    assert adaptive.round_deltas == pytest.approx(fixed.round_deltas, rel=1e-12)
    assert math.fsum(adaptive.branch_round_deltas) == pytest.approx(adaptive.round_deltas[1], rel=1e-12)
    assert adaptive.scales[1:] == fixed.scales[1:] and adaptive.thresholds[1:] == fixed.thresholds[1:]
    # the map: the larger of the two paths' sums, within the budget (which the fixed schedule's also meets)
    for d_in in (1, 2, 3):
        loss = adaptive.loss(d_in)
        sparse, dense = _path_loss(adaptive, d_in, False), _path_loss(adaptive, d_in, True)
        assert loss[0] == max(sparse[0], dense[0]) and loss[1] >= max(sparse[1], dense[1])
    value = budget.get("epsilon", budget.get("rho"))
    assert adaptive.loss(1)[0] <= value and adaptive.loss(1)[1] <= budget["delta"]
    assert fixed.loss(1)[1] <= budget["delta"]
    assert adaptive.loss(1)[1] == pytest.approx(fixed.loss(1)[1], rel=1e-3)  # both spend the budget's δ


def test_adaptive_map_is_the_largest_path_sum() -> None:
    # a branch that spends more than the main path raises the map to the branch's sums (the proof's bound)
    main = dp_sips_privacy_loss(1, scales=[8.0, 4.0], thresholds=[45.0, 24.0], max_contributions=100,
                                statistic_scale=50.0)
    cheap = dp_sips_privacy_loss(1, scales=[8.0, 4.0], thresholds=[45.0, 24.0], max_contributions=100,
                                 statistic_scale=50.0, branch_scales=[10.0, 5.0], branch_thresholds=[200.0, 200.0])
    costly = dp_sips_privacy_loss(1, scales=[8.0, 4.0], thresholds=[45.0, 24.0], max_contributions=100,
                                  statistic_scale=50.0, branch_scales=[3.0], branch_thresholds=[10.0])
    alone = dp_sips_privacy_loss(1, scales=[8.0, 3.0], thresholds=[45.0, 10.0], max_contributions=100,
                                 statistic_scale=50.0)
    assert cheap == main and costly == alone and costly[0] > main[0] and costly[1] > main[1]
    # the statistic is one more Gaussian term: ρ grows by 1/(2σ_s²), no threshold δ
    plain = dp_sips_privacy_loss(1, scales=[8.0, 4.0], thresholds=[45.0, 24.0], max_contributions=100)
    assert main[0] == pytest.approx(plain[0] + 1 / (2 * 50.0**2), rel=1e-12) and main[1] == plain[1]


def test_adaptive_rejects_an_explicit_schedule() -> None:
    for kwargs in ({"fractions": (0.5, 0.5)}, {"rounds": 2}, {"ratio": 0.3}):
        name = next(iter(kwargs))
        with pytest.raises(ValueError, match=f"`{name}` must be None when `adaptive` is True"):
            calibrate_dp_sips(max_contributions=10, epsilon=1.0, delta=1e-5, adaptive=True, **kwargs)
