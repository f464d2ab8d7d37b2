"""The Gaussian maps: analytic Gaussian δ (oracles, precision), the lattice lemmas, ρ, the range of the maps."""

from __future__ import annotations

import itertools
import math

import numpy as np
import opendp.prelude as dp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import ndtr

from opendp_wgm.privacy.gaussian import (
    analytic_gaussian_delta,
    lattice_epsilon_slack,
    wgm_privacy_loss,
    wgm_rho,
)
from opendp_wgm.privacy.peeling import peeling_approx_epsilon, peeling_rho

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


def test_rho() -> None:
    assert wgm_rho(1, 1.0) == 0.5
    assert wgm_rho(3, 2.0) == pytest.approx(9 / 8)


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

    assert wgm_rho(1, scale) == math.inf
    assert lattice_epsilon_slack(1, scale, 100) == math.inf
    assert wgm_privacy_loss(1, scale=scale, threshold=2.0, max_contributions=10)[0] == math.inf
    assert wgm_privacy_loss(1, scale=scale, threshold=0.5, max_contributions=10, epsilon=1.0) == (1.0, 1.0)
    assert analytic_gaussian_delta(1.0, scale) == 1.0
    assert peeling_rho(1, k=3, scale=scale) == math.inf
    assert peeling_approx_epsilon(1, k=3, scale=scale, delta=1e-6) == math.inf


# --- the (ε, δ) maps evaluate δ_N(ε' − a) as proved, also where the lattice slack a exceeds ε' -----------------


def _exact_map_delta(eps_out: float, scale: float, d_in: int, max_contributions: int, delta_t: float) -> object:
    """δ_N(ε' − a; σ, Δ = d_in) + δ_T at 60 digits, from the formulas of docs/privacy.md §3 (not the package's)."""
    import mpmath

    ctx = mpmath.MPContext()
    ctx.dps = 60
    sigma, sens = ctx.mpf(scale), ctx.mpf(d_in)
    slack = 2 * sens * ctx.sqrt(max_contributions) / (sigma**2 * ctx.mpf(2) ** 20)
    eps = ctx.mpf(eps_out) - slack
    a, b = sens / (2 * sigma), eps * sigma / sens
    return ctx.ncdf(a - b) - ctx.exp(eps) * ctx.ncdf(-a - b) + ctx.mpf(delta_t)


def test_map_at_negative_shifted_epsilon_oracle() -> None:
    """σ = 0.7, Δ0 = 2^20, ε = 0: a = 0.00399 and δ_N(−a) exceeds δ_N(0) by 9.5e-4, which clamping the
    argument at 0 dropped."""
    from opendp_wgm.privacy.sips import dp_sips_privacy_loss
    from opendp_wgm.privacy.threshold import wgm_threshold_delta

    scale, threshold, max_contributions = 0.7, 12.0, 2**20
    delta_t = wgm_threshold_delta(scale=scale, threshold=threshold, max_contributions=max_contributions)
    exact = _exact_map_delta(0.0, scale, 1, max_contributions, delta_t)
    _, delta = wgm_privacy_loss(1, scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=0.0)
    assert exact <= delta <= exact * (1 + 2.0**-48)
    assert delta - analytic_gaussian_delta(0.0, scale) == pytest.approx(9.5e-4, abs=1e-5)  # what the clamp lost
    # DP-SIPS: two rounds of combined σ = 0.7 (1/σ² = 1/σ1² + 1/σ2²) pay the same Gaussian term
    s1, s2 = 0.7 * math.sqrt(2.0), 0.7 * math.sqrt(2.0)
    _, sips_delta = dp_sips_privacy_loss(
        1, scales=(s1, s2), thresholds=(threshold, threshold), max_contributions=max_contributions, epsilon=0.0
    )
    assert sips_delta - analytic_gaussian_delta(0.0, scale) > 9.4e-4


def test_map_strictly_decreasing_in_epsilon_across_the_slack() -> None:
    """δ(ε) strictly decreases on [0, 2a]: with the clamp it was flat on [0, a]."""
    scale, max_contributions = 0.7, 2**20
    slack = lattice_epsilon_slack(1, scale, max_contributions)
    deltas = [
        wgm_privacy_loss(1, scale=scale, threshold=12.0, max_contributions=max_contributions, epsilon=e)[1]
        for e in np.linspace(0.0, 2 * slack, 9)
    ]
    assert all(later < earlier for earlier, later in itertools.pairwise(deltas))


@settings(max_examples=60, deadline=None)
@given(
    scale=st.floats(0.3, 30.0),
    log2_max_contributions=st.integers(0, 20),
    slack_multiple=st.floats(0.0, 3.0),
    d_in=st.integers(1, 3),
)
def test_map_delta_bounds_the_exact_expression(
    scale: float, log2_max_contributions: int, slack_multiple: float, d_in: int
) -> None:
    """The reported δ is at least the exact δ_N(d_in·ε − a) + δ_T(d_in), at ε from 0 to a few slacks."""
    from opendp_wgm.privacy.threshold import wgm_threshold_delta

    max_contributions = 2**log2_max_contributions
    epsilon = slack_multiple * lattice_epsilon_slack(1, scale, max_contributions)
    threshold = 4.0 * scale + d_in
    eps_out, delta = wgm_privacy_loss(
        d_in, scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=epsilon
    )
    delta_t = wgm_threshold_delta(scale=scale, threshold=threshold, max_contributions=max_contributions, d_in=d_in)
    exact = _exact_map_delta(eps_out, scale, d_in, max_contributions, delta_t)
    assert delta >= min(1, exact)
