"""Privacy maps and calibration: oracle values, cross-checks with OpenDP, lemmas, properties."""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import ndtr, ndtri

from opendp_wgm.accounting import (
    LATTICE_BITS,
    analytic_gaussian_delta,
    calibrate_wgm,
    lattice_weights,
    wgm_privacy_loss,
    wgm_rho,
    wgm_threshold_delta,
)

LATTICE = 2.0**-LATTICE_BITS


def smallest_threshold(scale: float, delta: float, max_contributions: int) -> float:
    return dp.binary_search(
        lambda t: wgm_threshold_delta(scale=scale, threshold=t, max_contributions=max_contributions) <= delta,
        bounds=(0.0, 1e4),
    )


def reference_threshold(scale: float, delta: float, max_contributions: int) -> float:
    """The reference's closed form (step 4 of the paper's calibration), continuous Gaussian, no lattice."""
    t = np.arange(1, max_contributions + 1)
    return float(np.max(t**-0.5 - scale * ndtri(-np.expm1(np.log1p(-delta) / t))))  # isf = -ndtri


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


def test_calibration_noise_split() -> None:
    a = calibrate_wgm(max_contributions=100, epsilon=1.0, delta=1e-5, noise_delta_fraction=0.9)
    b = calibrate_wgm(max_contributions=100, epsilon=1.0, delta=1e-5, noise_delta_fraction=0.1)
    assert a.scale < b.scale and a.threshold > b.threshold - 10 * b.scale


# --- oracle values of the paper's reference code ----------------------------------------------------------------


def test_analytic_gaussian_oracles() -> None:
    assert analytic_gaussian_delta(0.5, 1.0) == pytest.approx(0.2384, abs=1e-4)
    sigma = dp.binary_search(lambda s: analytic_gaussian_delta(math.log(3), s) <= 1e-5, bounds=(0.1, 100.0))
    assert sigma == pytest.approx(3.424662, abs=1e-5)  # the reference's bisection gives 3.4248 (errs high)


def test_no_overflow_at_large_epsilon() -> None:
    # the reference returns sigma = 1 for eps > ~710 (the paper's reference code); the profile must stay defined
    assert analytic_gaussian_delta(800.0, 0.1) == pytest.approx(0.0, abs=1e-12)
    # privacy-loss mean Δ²/(2σ²) = 800 = ε: δ = Φ(0) - e^800 Φ(-40) ≈ 0.5 - 0.01, finite
    assert analytic_gaussian_delta(800.0, 0.025) == pytest.approx(0.49, abs=0.01)


@pytest.mark.parametrize(
    ("epsilon", "max_contributions", "expected"), [(1.0, 3, 17.3803), (0.1, 10, 146.4819)]
)
def test_threshold_oracles_with_exact_sigma(epsilon: float, max_contributions: int, expected: float) -> None:
    """oracle values of the paper's reference code, "WGM (σ, ρ) with δ passed directly", re-derived with an exact σ."""
    sigma = dp.binary_search(lambda s: analytic_gaussian_delta(epsilon, s) <= 1e-5, bounds=(0.1, 1e3))
    assert smallest_threshold(sigma, 1e-5, max_contributions) == pytest.approx(expected, abs=2e-4)


@pytest.mark.parametrize(
    ("sigma", "max_contributions", "expected"),
    [
        (3.884765625, 1, 18.159683),
        (3.884765625, 10, 19.319095),
        (3.884765625, 50, 20.339627),
        (3.884765625, 100, 20.793072),
        (3.884765625, 200, 21.247772),
        (7.3515625, 1, 33.473126),
        (7.3515625, 100, 39.25974),
        (2.0673828125, 1, 10.131988),
        (2.0673828125, 200, 11.340655),
    ],
)
def test_threshold_matches_reference_table(sigma: float, max_contributions: int, expected: float) -> None:
    """The sanity table of the paper's reference code (δ' = 5e-6 at the reference's σ): our T is one lattice step above."""
    ours = smallest_threshold(sigma, 5e-6, max_contributions)
    assert reference_threshold(sigma, 5e-6, max_contributions) == pytest.approx(expected, abs=1e-5)
    assert ours == pytest.approx(expected, abs=1e-5)
    assert ours >= expected - 1e-6


def test_threshold_delta_agrees_with_opendp_gaussian_threshold() -> None:
    """OpenDP's own map at (t, 1, 1/√t), maximised over t, is the WGM threshold δ (DESIGN §8)."""
    dp.enable_features("contrib")
    space = dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=float, nan=False)), dp.l02inf_distance(
        dp.absolute_distance(T=float)
    )
    sigma, threshold, max_contributions = 3.884141, 20.4975, 64
    m = dp.m.make_gaussian_threshold(*space, scale=sigma, threshold=threshold)
    theirs = max(m.map((t, 1.0, t**-0.5))[1] for t in range(1, max_contributions + 1))
    ours = wgm_threshold_delta(scale=sigma, threshold=threshold, max_contributions=max_contributions)
    assert theirs == pytest.approx(5e-6, rel=2e-3)
    assert ours == pytest.approx(theirs, rel=2e-3)


# --- the two lemmas the lattice maps rest on (docs/privacy.md), checked on exact pmfs -------------------


def discrete_gaussian_pmf(sigma: float, radius: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(-radius, radius + 1)
    w = np.exp(-(x.astype(float) ** 2) / (2 * sigma**2))
    return x, w / w.sum()


@pytest.mark.parametrize("sigma", [1.0, 1.7, 4.0, 25.0])
def test_lemma_discrete_tail_bound(sigma: float) -> None:
    """P[Z >= m] <= P[N(0, σ²) >= m - 1] for integers m >= 1."""
    x, p = discrete_gaussian_pmf(sigma, int(40 * sigma) + 5)
    tail = np.cumsum(p[::-1])[::-1]  # tail[i] = P[Z >= x[i]]
    m = x[x >= 1]
    assert np.all(tail[x >= 1] <= ndtr(-(m - 1) / sigma) + 1e-15)


@pytest.mark.parametrize("sigma", [1.0, 1.7, 4.0, 25.0])
def test_lemma_stochastic_dominance(sigma: float) -> None:
    """Z is stochastically dominated by N(0, σ²) + 2: P[Z >= r] <= P[N >= r - 2] for all real r."""
    x, p = discrete_gaussian_pmf(sigma, int(40 * sigma) + 5)
    tail = np.cumsum(p[::-1])[::-1]
    for r in np.linspace(x[0], x[-1], 4001):
        assert tail[np.searchsorted(x, math.ceil(r))] <= ndtr(-(r - 2) / sigma) + 1e-15


# --- properties -----------------------------------------------------------------------------------------


def test_lattice_weights_keep_l2_at_most_one() -> None:
    w = lattice_weights(5000).astype(object)  # exact integers
    t = np.arange(1, 5001)
    assert all(ti * wi * wi <= 4**LATTICE_BITS for ti, wi in zip(t, w))
    assert np.all(np.abs(lattice_weights(5000) * LATTICE - t**-0.5) <= LATTICE)


@settings(max_examples=60, deadline=None)
@given(
    scale=st.floats(0.2, 50.0),
    threshold=st.floats(0.0, 200.0),
    max_contributions=st.integers(1, 300),
    epsilon=st.none() | st.floats(0.01, 5.0),
)
def test_maps_are_monotone_in_d_in(scale, threshold, max_contributions, epsilon) -> None:
    losses = [
        wgm_privacy_loss(d, scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=epsilon)
        for d in range(6)
    ]
    assert losses[0] == (0.0, 0.0)
    for lo, hi in zip(losses, losses[1:]):
        assert lo[0] <= hi[0] and lo[1] <= hi[1] + 1e-15
        assert 0.0 <= hi[1] <= 1.0


@settings(max_examples=60, deadline=None)
@given(scale=st.floats(0.2, 50.0), threshold=st.floats(0.0, 200.0), max_contributions=st.integers(1, 300))
def test_threshold_delta_monotone_in_parameters(scale, threshold, max_contributions) -> None:
    def delta(**kw):
        args = {"scale": scale, "threshold": threshold, "max_contributions": max_contributions} | kw
        return wgm_threshold_delta(**args)

    base = delta()
    assert delta(threshold=threshold + 1.0) <= base
    assert delta(max_contributions=max_contributions + 1) >= base
    assert delta(scale=scale * 1.5) >= base or base == 1.0


def test_group_bound_covers_colluding_users() -> None:
    """The d_in = 2 bound covers two users holding the same t items (weight 2/√t each)."""
    sigma, threshold, max_contributions = 3.0, 18.0, 50
    bound = wgm_threshold_delta(scale=sigma, threshold=threshold, max_contributions=max_contributions, d_in=2)
    for t in range(1, max_contributions + 1):
        exact = 1 - (1 - ndtr(-(threshold - 2 / math.sqrt(t)) / sigma)) ** t
        assert exact <= bound


def test_rho() -> None:
    assert wgm_rho(1, 1.0) == 0.5
    assert wgm_rho(3, 2.0) == pytest.approx(9 / 8)


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


def test_maps_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="`d_in` must be an integer >= 0"):
        wgm_privacy_loss(-1, scale=1.0, threshold=1.0, max_contributions=1)
    with pytest.raises(ValueError, match="`scale` must be in"):
        wgm_threshold_delta(scale=0.0, threshold=1.0, max_contributions=1)
    with pytest.raises(TypeError, match="`max_contributions` must be an integer"):
        lattice_weights(True)


# --- precision and range of the maps ------------------------------------------------------------------


def _gaussian_delta_50_digits(epsilon: float, scale: float) -> float:
    import mpmath

    ctx = mpmath.MPContext()
    ctx.dps = 60
    eps, sigma = ctx.mpf(epsilon), ctx.mpf(scale)
    a, b = 1 / (2 * sigma), eps * sigma
    return ctx.ncdf(a - b) - ctx.exp(eps) * ctx.ncdf(-a - b)


@pytest.mark.parametrize("epsilon", [1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0])
def test_analytic_gaussian_delta_matches_high_precision(epsilon: float) -> None:
    """Never below the 60-digit value, and within 2^-50 above it, including ε ≤ 0.01 with σ ≥ 1000, where the
    float64 difference of the two terms under-reported δ by up to 2e-8 of its value."""
    for scale in [0.1, 0.3, 1.0, 3.0, 10.0, 100.0, 1e3, 3e3, 1e4, 1e5]:
        exact = _gaussian_delta_50_digits(epsilon, scale)
        if exact < 1e-300:  # below the normal floats
            continue
        relative = float((analytic_gaussian_delta(epsilon, scale) - exact) / exact)
        assert 0.0 <= relative <= 2.0**-50, (epsilon, scale, relative)


@pytest.mark.parametrize("scale", [1e-200, 1e-160, 5e-324])
def test_maps_at_underflowing_scale(scale: float) -> None:
    """σ² below the normal floats gives an infinite loss (a ZeroDivisionError / OverflowError before)."""
    from opendp_wgm.accounting import _lattice_epsilon_slack, peeling_approx_epsilon, peeling_rho

    assert wgm_rho(1, scale) == math.inf
    assert _lattice_epsilon_slack(1, scale, 100) == math.inf
    assert wgm_privacy_loss(1, scale=scale, threshold=2.0, max_contributions=10)[0] == math.inf
    assert wgm_privacy_loss(1, scale=scale, threshold=0.5, max_contributions=10, epsilon=1.0) == (1.0, 1.0)
    assert analytic_gaussian_delta(1.0, scale) == 1.0
    assert peeling_rho(1, k=3, scale=scale) == math.inf
    assert peeling_approx_epsilon(1, k=3, scale=scale, delta=1e-6) == math.inf


@pytest.mark.parametrize("max_contributions", [2**20 + 1, 10**7, 10**12])
def test_max_contributions_limit(max_contributions: int) -> None:
    """Δ0 = 10^7 calibrated for ~100 s and 10^12 died with a MemoryError: now a clear error past 2^20."""
    import opendp_wgm as wgm
    from opendp_wgm.accounting import calibrate_wgm_top_k

    dp.enable_features("contrib", "honest-but-curious")
    match = rf"`max_contributions` must be an integer <= 1048576 \(found {max_contributions}\)"
    with pytest.raises(ValueError, match=match):
        calibrate_wgm(max_contributions=max_contributions, epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match=match):
        calibrate_wgm_top_k(k=5, max_contributions=max_contributions, epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match=match):
        wgm.make_wgm(*wgm.user_items_space(), max_contributions=max_contributions, scale=1.0, threshold=5.0)
    with pytest.raises(ValueError, match=match):
        wgm_threshold_delta(scale=1.0, threshold=5.0, max_contributions=max_contributions)


def test_threshold_delta_blocks_bound_the_exact_maximum() -> None:
    """Above Δ0 = 2^12 the max over t runs over geometric blocks: never below the max over every t, and within
    1e-6 of it (relative); at Δ0 = 2^20 the map is one vectorised pass."""
    from opendp_wgm.accounting import _weights_at

    def every_t(scale: float, threshold: float, max_contributions: int) -> float:
        t = np.arange(1, max_contributions + 1)
        floor_t = math.floor(threshold / LATTICE) * LATTICE
        gap = (floor_t - _weights_at(t) * LATTICE) / scale
        q = np.where(gap >= 0, ndtr(-gap), 1.0)
        return float(np.max(-np.expm1(t * np.log1p(-q))))

    for max_contributions in (5000, 10**5, 2**20):
        for threshold in (30.0, 45.0, 60.0):
            exact = every_t(10.0, threshold, max_contributions)
            bound = wgm_threshold_delta(scale=10.0, threshold=threshold, max_contributions=max_contributions)
            assert exact <= bound <= exact * (1 + 1e-6) + 1e-300, (max_contributions, threshold)


def test_lattice_weights_vectorised_are_exact() -> None:
    from opendp_wgm.accounting import _weights_at

    t = np.array([*range(1, 3000), 2**20 - 1, 2**20, 10**9, 2**40 - 1, 2**40], dtype=np.int64)
    assert _weights_at(t).tolist() == [math.isqrt(4**LATTICE_BITS // int(x)) for x in t]
    assert lattice_weights(2**20)[-1] == 2**10


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
    from opendp_wgm.accounting import calibrate_wgm_top_k
    from opendp_wgm.measurements.hitting_set import calibrate_wgm_hitting_set

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


def test_passes_upper_bound() -> None:
    import opendp_wgm as wgm

    dp.enable_features("contrib", "honest-but-curious")
    with pytest.raises(ValueError, match=r"`passes` must be an integer <= 1024 \(found 1025\)"):
        wgm.make_wgm(*wgm.user_items_space(), max_contributions=3, scale=1.0, threshold=5.0, passes=1025)
