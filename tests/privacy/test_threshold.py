"""The weight lattice and the threshold δ: oracles, agreement with OpenDP, properties, block bound, limits."""

from __future__ import annotations

import itertools
import math

import numpy as np
import opendp.prelude as dp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import ndtr, ndtri

from opendp_wgm.privacy.calibrate import calibrate_wgm, calibrate_wgm_top_k
from opendp_wgm.privacy.gaussian import (
    analytic_gaussian_delta,
    wgm_privacy_loss,
)
from opendp_wgm.privacy.threshold import (
    LATTICE_BITS,
    _weights_at,
    lattice_weights,
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


# --- properties -----------------------------------------------------------------------------------------


def test_lattice_weights_keep_l2_at_most_one() -> None:
    w = lattice_weights(5000).astype(object)  # exact integers
    t = np.arange(1, 5001)
    assert all(ti * wi * wi <= 4**LATTICE_BITS for ti, wi in zip(t, w, strict=False))
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
    for lo, hi in itertools.pairwise(losses):
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


def test_maps_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="`d_in` must be an integer >= 0"):
        wgm_privacy_loss(-1, scale=1.0, threshold=1.0, max_contributions=1)
    with pytest.raises(ValueError, match="`scale` must be in"):
        wgm_threshold_delta(scale=0.0, threshold=1.0, max_contributions=1)
    with pytest.raises(TypeError, match="`max_contributions` must be an integer"):
        lattice_weights(True)


@pytest.mark.parametrize("max_contributions", [2**20 + 1, 10**7, 10**12])
def test_max_contributions_limit(max_contributions: int) -> None:
    """Δ0 = 10^7 calibrated for ~100 s and 10^12 died with a MemoryError: now a clear error past 2^20."""
    import opendp_wgm as wgm


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

    t = np.array([*range(1, 3000), 2**20 - 1, 2**20, 10**9, 2**40 - 1, 2**40], dtype=np.int64)
    assert _weights_at(t).tolist() == [math.isqrt(4**LATTICE_BITS // int(x)) for x in t]
    assert lattice_weights(2**20)[-1] == 2**10


# ---------------------------------------------------------------------------------------------------------
# the release curve
# ---------------------------------------------------------------------------------------------------------
def _discrete_gaussian_tail(m: np.ndarray, s: float) -> np.ndarray:
    """P[Z >= m] for Z ~ N_Z(0, s^2), by direct summation over |z| <= 40 s (an independent computation)."""
    z = np.arange(-int(40 * s), int(40 * s) + 1)
    mass = np.exp(-(z.astype(float) ** 2) / (2 * s * s))
    tail = np.cumsum(mass[::-1])[::-1] / mass.sum()  # tail[i] = P[Z >= z[i]]
    return np.where(m > z[-1], 0.0, tail[np.clip(m - z[0], 0, len(z) - 1)])


@pytest.mark.parametrize("items_per_user", [1, 7])
@pytest.mark.parametrize("s", [8.0, 40.0])
def test_release_probability_against_the_exact_discrete_gaussian(items_per_user: int, s: float) -> None:
    """A tiny σ (s = σ 2^20 lattice steps) where the discrete Gaussian differs most from the normal: the
    documented error bound 1/(6 s^2) + 4 exp(-2π² s²) holds against the summed probabilities."""
    from opendp_wgm.privacy.threshold import LATTICE_BITS, lattice_weights, release_probability

    unit = 2**LATTICE_BITS
    scale = s / unit
    weight = int(lattice_weights(items_per_user)[-1])
    threshold = (5 * weight + 3) / unit  # F = 5w + 3: c = 5 sits 3 steps below the threshold
    users = np.arange(0, 12)
    m = 5 * weight + 3 + 1 - users * weight  # released iff Z >= F + 1 - S
    exact = _discrete_gaussian_tail(m, s)
    got = release_probability(users, scale=scale, threshold=threshold, items_per_user=items_per_user)
    assert np.max(np.abs(got - exact)) <= 1 / (6 * s * s)
    assert 0.0 < got[5] < 1.0


@pytest.mark.parametrize("s", [8.0, 40.0])
def test_release_probability_of_any_lattice_sum_against_the_exact_discrete_gaussian(s: float) -> None:
    """The per-sum form (sums that are no multiple of one user's weight, as in a real histogram) is the
    release's P[S + Z > F], within the same documented error bound."""
    from opendp_wgm.privacy.threshold import _release_probability_lat

    unit = 2**LATTICE_BITS
    threshold = 1000.5 / unit  # F = 1000
    sums = np.arange(1000 - int(6 * s), 1000 + int(6 * s), dtype=np.int64)
    exact = _discrete_gaussian_tail(1000 + 1 - sums, s)  # released iff Z >= F + 1 - S
    got = _release_probability_lat(sums, s / unit, threshold)
    assert np.max(np.abs(got - exact)) <= 1 / (6 * s * s)
    assert got[0] < 0.01 and got[-1] > 0.99


def test_release_probability_is_monotone_and_matches_the_normal_tail() -> None:
    from scipy.stats import norm

    from opendp_wgm.privacy.threshold import release_probability

    users = np.arange(0, 400)
    for t, w in ((1, 1.0), (100, 0.1)):
        p = release_probability(users, scale=3.88, threshold=20.79, items_per_user=t)
        assert np.all(np.diff(p) >= 0)
        # lattice rounding moves the sum by < c + 2 lattice steps (weights and threshold rounded down, the
        # continuity correction): at most (400 + 2)·2^-20 / σ standard deviations, times the density ≤ 1/√(2π)
        tolerance = (400 + 2) * 2.0**-20 / 3.88 / math.sqrt(2 * math.pi)
        np.testing.assert_allclose(p, norm.sf((20.79 - users * w) / 3.88), rtol=0, atol=tolerance)


def test_users_for_probability_is_the_first_crossing() -> None:
    from opendp_wgm.privacy.threshold import release_probability, users_for_probability

    for scale, threshold, t in ((3.88, 20.79, 1), (3.88, 20.79, 100), (23.4, 128.0, 5), (0.01, 0.5, 1)):
        for level in (0.5, 0.95, 0.999):
            c = users_for_probability(level, scale=scale, threshold=threshold, items_per_user=t)
            p = release_probability([c - 1, c], scale=scale, threshold=threshold, items_per_user=t)
            assert p[1] >= level and (c == 1 or p[0] < level)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"users": [-1]}, "`users` must be integers >= 0"),
        ({"users": [1.5]}, "`users` must be integers >= 0"),
        ({"users": [1], "items_per_user": 0}, "`items_per_user` must be"),
        ({"users": [1], "scale": 0.0}, "`scale` must be"),
    ],
)
def test_release_probability_errors(kwargs: dict, message: str) -> None:
    from opendp_wgm.privacy.threshold import release_probability

    arguments = {"scale": 1.0, "threshold": 2.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        release_probability(arguments.pop("users"), **arguments)
