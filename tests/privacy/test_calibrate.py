"""Calibration of the WGM: oracle values of the paper, the check against its own map, budget errors."""

from __future__ import annotations

import math

import opendp.prelude as dp
import pytest

from opendp_wgm.privacy.budget import Budget
from opendp_wgm.privacy.calibrate import (
    calibrate_wgm,
    calibrate_wgm_top_k,
    smallest_fitting,
    smallest_passing,
)
from opendp_wgm.privacy.gaussian import (
    wgm_privacy_loss,
)
from opendp_wgm.privacy.peeling import USER_PEELING, peeling_approx_epsilon, peeling_epsilon, peeling_loss, peeling_rho

# --- the calibration oracles (ε = 1, δ = 1e-5: δ/2 to noise, δ/2 to threshold) -----------------


@pytest.mark.parametrize(("max_contributions", "threshold"), [(100, 20.7897), (64, 20.4975), (1, 18.1569)])
def test_calibration_matches_the_paper(max_contributions: int, threshold: float) -> None:
    c = calibrate_wgm(max_contributions=max_contributions, epsilon=1.0, delta=1e-5)
    assert c.scale == pytest.approx(3.88414, abs=1e-4)
    assert c.threshold == pytest.approx(threshold, abs=2e-3)
    assert c.noise_delta == pytest.approx(5e-6, rel=1e-3)


def test_calibration_passes_its_own_map() -> None:
    for kwargs in ({"epsilon": 1.0}, {"epsilon": 0.1}, {"rho": 0.05}, {"rho": 2.0}):
        c = calibrate_wgm(max_contributions=50, delta=1e-6, **kwargs)
        eps = kwargs.get("epsilon")
        d_out = wgm_privacy_loss(
            1, scale=c.scale, threshold=c.threshold, max_contributions=50, epsilon=eps
        )
        assert d_out[0] <= kwargs.get("epsilon", kwargs.get("rho"))
        assert d_out[1] <= 1e-6
        # tight: a 1% smaller scale or threshold would exceed the budget
        smaller = wgm_privacy_loss(
            1, scale=c.scale * 0.99, threshold=c.threshold * 0.99, max_contributions=50, epsilon=eps
        )
        assert smaller[0] > d_out[0] or smaller[1] > 1e-6


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_calibration_on_another_constructors_map(budget: dict) -> None:
    """``privacy_map``: the WGM's σ search, then the smallest T that fits the given map. A map that prices a
    threshold one lower (its release is the WGM's at T - 1) gets the WGM's σ and a T one higher, to the lattice."""

    def shifted(d_in: int, *, threshold: float, **fixed: object) -> tuple[float, float]:
        return wgm_privacy_loss(d_in, threshold=threshold - 1.0, **fixed)  # type: ignore[arg-type]

    wgm = calibrate_wgm(max_contributions=100, delta=1e-5, **budget)
    assert calibrate_wgm(max_contributions=100, delta=1e-5, privacy_map=wgm_privacy_loss, **budget) == wgm
    other = calibrate_wgm(max_contributions=100, delta=1e-5, privacy_map=shifted, **budget)
    assert other.scale == wgm.scale and other.noise_delta == wgm.noise_delta
    assert other.threshold == pytest.approx(wgm.threshold + 1.0, abs=2 * 2.0**-20)
    loss = shifted(1, scale=other.scale, threshold=other.threshold, max_contributions=100, epsilon=other.epsilon)
    assert loss[0] <= next(iter(budget.values())) and loss[1] <= 1e-5
    below = shifted(1, scale=other.scale, threshold=other.threshold - 2.0**-19, max_contributions=100, epsilon=other.epsilon)
    assert below[1] > 1e-5  # the smallest: two lattice steps lower does not fit


def test_calibration_noise_split() -> None:
    a = calibrate_wgm(max_contributions=100, epsilon=1.0, delta=1e-5, noise_delta_fraction=0.9)
    b = calibrate_wgm(max_contributions=100, epsilon=1.0, delta=1e-5, noise_delta_fraction=0.1)
    assert a.scale < b.scale and a.threshold > b.threshold - 10 * b.scale


# --- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"epsilon": 0.0, "delta": 1e-5}, ValueError, "`epsilon` must be in"),
        ({"epsilon": -1.0, "delta": 1e-5}, ValueError, "`epsilon` must be in"),
        ({"epsilon": float("nan"), "delta": 1e-5}, ValueError, "`epsilon` must be finite"),
        ({"epsilon": float("inf"), "delta": 1e-5}, ValueError, "`epsilon` must be finite"),
        ({"rho": 0.0, "delta": 1e-5}, ValueError, "`rho` must be in"),
        ({"epsilon": 1.0, "delta": 0.0}, ValueError, "`delta` must be in"),
        ({"epsilon": 1.0, "delta": 1.0}, ValueError, "`delta` must be in"),
        ({"epsilon": 1.0, "rho": 1.0, "delta": 1e-5}, ValueError, "exactly one of `epsilon` and `rho`"),
        ({"delta": 1e-5}, ValueError, "exactly one of `epsilon` and `rho`"),
        ({"epsilon": 1.0, "delta": 1e-5, "max_contributions": 0}, ValueError, "`max_contributions` must be an integer >= 1"),
        ({"epsilon": 1.0, "delta": 1e-5, "max_contributions": 2.5}, TypeError, "`max_contributions` must be an integer"),
        ({"epsilon": 1.0, "delta": 1e-5, "noise_delta_fraction": 1.0}, ValueError, "`noise_delta_fraction`"),
        ({"epsilon": "1", "delta": 1e-5}, TypeError, "`epsilon` must be a real number"),
    ],
)
def test_calibration_rejects_bad_input(kwargs, error, match) -> None:
    kwargs = {"max_contributions": 10} | kwargs
    with pytest.raises(error, match=match):
        calibrate_wgm(**kwargs)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (dict(epsilon=1e-9, delta=1e-7), r"`epsilon` must be >= 1.18e-06 at `delta` = 1e-07 \(found 1e-09\)"),
        (dict(rho=1e-15, delta=1e-7), r"`rho` must be >= 4.55e-13 at any `delta` \(found 1e-15\)"),
    ],
)
def test_budget_errors_name_the_budget(call: dict, match: str) -> None:
    """ε = 1e-9 used to fail in make_wgm with "`scale` must be <= 2**20", a parameter the user never passed."""
    import opendp_wgm as wgm
    from opendp_wgm.privacy.calibrate import calibrate_wgm_hitting_set

    dp.enable_features("contrib", "honest-but-curious")
    with pytest.raises(ValueError, match=match):
        wgm.make_wgm_from_budget(*wgm.user_items_space(), max_contributions=10, **call)
    total = r"`epsilon` must be >= 2.96e-06 at `delta` = 1e-07 and `split` = 0.5 \(found 1e-09\)"
    if "rho" in call:
        total = r"`rho` must be >= 9.1e-13 at `split` = 0.5 \(found 1e-15\)"
    with pytest.raises(ValueError, match=total):
        calibrate_wgm_top_k(k=5, max_contributions=10, **call)
    with pytest.raises(ValueError, match=total):
        calibrate_wgm_hitting_set(k=5, max_contributions=10, **call)
    # the stated bound is a real one: at it, calibration succeeds within the limit
    at_bound = {"rho": 4.55e-13} if "rho" in call else {"epsilon": 1.18e-6}
    assert calibrate_wgm(max_contributions=10, delta=1e-7, **at_bound).scale <= 2.0**20


def test_wgm_then_peel_reference_parameters() -> None:
    """§7.3 at ε = 1, δ = 1e-5, Δ0 = 100: σ ≈ 7.661 and T ≈ 41.863 (reference: 7.6611, 41.8632), and ε'."""
    cal = calibrate_wgm_top_k(k=100, max_contributions=100, epsilon=1.0, delta=1e-5)
    assert cal.wgm.scale == pytest.approx(7.6611328125, abs=1e-3)
    assert cal.wgm.threshold == pytest.approx(41.863212, abs=2e-3)
    assert cal.wgm == calibrate_wgm(max_contributions=100, epsilon=0.5, delta=5e-6)
    for k, eps_prime in [(10, 0.063360), (20, 0.044802), (50, 0.028336), (100, 0.020036)]:
        cal = calibrate_wgm_top_k(k=k, max_contributions=100, epsilon=1.0, delta=1e-5)
        assert cal.peel_local_epsilon == pytest.approx(eps_prime, abs=1e-6)
        assert 1.0 / cal.peel_scale <= peeling_epsilon(0.5, 5e-6, k) * (1 + 1e-9)


# --- the one search ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("boundary", "lower"), [(0.3, 0.0), (7.25, 1e-12), (3e5, 0.0), (1.5, 1.0)])
def test_smallest_passing_returns_the_smallest_passing_value(boundary: float, lower: float) -> None:
    """The result passes, and the float just below it does not (binary_search's resolution is one ulp)."""
    budget = Budget.of(epsilon=1.0, delta=1e-5)
    found = smallest_passing(lambda x: x >= boundary, lower=lower, parameter="scale", budget=budget)
    assert found >= boundary
    assert math.nextafter(found, -math.inf) < boundary


def test_smallest_passing_refuses_a_predicate_that_never_passes() -> None:
    budget = Budget.of(rho=0.5, delta=1e-6)
    match = (
        r"calibration failed: no finite `peel_scale` satisfies the budget "
        r"ρ = 0.5, δ = 1e-06 per user \[approximate zCDP, approximate\(zero_concentrated_divergence\)\]"
    )
    with pytest.raises(ValueError, match=match):
        smallest_passing(lambda x: False, lower=0.0, parameter="peel_scale", budget=budget)


@pytest.mark.parametrize("kind", ["approx_zcdp", "approx_dp"])
def test_smallest_fitting_searches_the_maps_own_parameter(kind: str) -> None:
    """The smallest ``scale`` of a map (its other arguments fixed) whose loss at one user fits the bound: the map
    passes there, not one ulp below; a pair's first part (ε or ρ) is what is bounded; its errors name ``name``."""
    budget = Budget.of(rho=0.5, delta=1e-6)
    delta = 1e-6 if kind == "approx_dp" else 0.0
    fixed = {"k": 10, "kind": kind, "accounting": USER_PEELING, "delta": delta}
    found = smallest_fitting(peeling_loss, 0.5, parameter="scale", budget=budget, **fixed)
    first = lambda s: peeling_loss(1, scale=s, **fixed)[0]  # type: ignore[index]  # noqa: E731
    assert first(found) <= 0.5 < first(math.nextafter(found, 0.0))
    if kind == "approx_zcdp":  # k/(8 s²) <= ρ: s = sqrt(k / (8ρ)) up to rounding
        assert found == pytest.approx(math.sqrt(10 / 4.0), rel=1e-12)
        bare = smallest_fitting(peeling_rho, 0.5, parameter="scale", budget=budget, k=10)  # a scalar loss
        assert peeling_rho(1, k=10, scale=bare) <= 0.5 < peeling_rho(1, k=10, scale=math.nextafter(bare, 0.0))
    with pytest.raises(ValueError, match="no finite `peel_scale` satisfies"):
        smallest_fitting(peeling_rho, -1.0, parameter="scale", name="peel_scale", budget=budget, k=10)


def test_top_k_peel_scale_is_the_smallest_that_fits() -> None:
    """The stage-2 scale is now searched on its map (it was 1/ε' nudged up by ulps, ~1e-12 relative above)."""
    cal = calibrate_wgm_top_k(k=100, max_contributions=100, epsilon=1.0, delta=1e-5)
    fits = lambda s: peeling_approx_epsilon(1, k=100, scale=s, delta=cal.peel_delta) <= cal.peel_epsilon  # noqa: E731
    assert fits(cal.peel_scale) and not fits(math.nextafter(cal.peel_scale, 0.0))
