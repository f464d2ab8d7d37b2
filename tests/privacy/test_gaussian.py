"""The Gaussian maps: analytic Gaussian δ (oracles, precision), the lattice lemmas, ρ, the range of the maps."""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import pytest
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
