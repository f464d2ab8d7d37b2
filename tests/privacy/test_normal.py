"""The SciPy-free normal tails of the maps (:mod:`opendp_wgm.privacy._normal`): against SciPy and mpmath."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import ndtr, ndtri

from opendp_wgm.privacy._normal import _normal_cdf, _normal_quantile_guess, _upper_tail_bound

#: The relative slack the maps add to every δ (``threshold._DELTA_INFLATION``): what erfc's error must fit in.
_INFLATION = 1e-12


def _slack(g: float) -> float:
    """Relative excess of the bound: the argument one step low (d log erfc(x)/dx ≈ -2x, x = g/√2, a step
    ≤ 2 ulp ≤ x·2^-51, so ≈ g²·2^-51) plus erfc's few ulp."""
    return g * g * 2.0**-50 + 1e-15


def _exact_upper_tail(g: float) -> mpmath.mpf:
    with mpmath.workdps(60):
        return mpmath.erfc(mpmath.mpf(g) / mpmath.sqrt(2)) / 2


_GAPS = [0.0, 1e-300, 1e-8, 0.1, 0.5, 1.0, 1.5, 2.0, 3.0, 4.264890793922825, 5.0, 6.0, 8.0, 10.0, 20.0, 26.0, 30.0]


@pytest.mark.parametrize("gap", _GAPS)
def test_the_upper_tail_is_within_its_slack_of_the_exact_value_and_of_scipy(gap: float) -> None:
    got = float(_upper_tail_bound(np.array([gap]))[0])
    exact = _exact_upper_tail(gap)
    assert got * (1 + _INFLATION) >= exact  # what the maps need: an upper bound after the inflation
    assert abs(got - exact) <= _slack(gap) * exact
    assert got == pytest.approx(float(ndtr(-gap)), rel=_slack(gap))


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0.0, max_value=37.0, allow_nan=False))
def test_the_upper_tail_bound_is_sound_after_the_inflation(gap: float) -> None:
    got = float(_upper_tail_bound(np.array([gap]))[0])
    exact = _exact_upper_tail(gap)
    if exact >= 2.0**-1022:  # the normal floats (below, both are 0 or subnormal: docs/privacy.md)
        assert got * (1 + _INFLATION) >= exact
        assert abs(got - exact) <= _slack(gap) * exact
        assert got == pytest.approx(float(ndtr(-gap)), rel=_slack(gap))


def test_the_upper_tail_of_an_array_keeps_its_shape_and_infinity() -> None:
    gaps = np.array([[0.0, 1.0], [math.inf, 3.0]])
    got = _upper_tail_bound(gaps)
    assert got.shape == (2, 2) and got[0, 0] == 0.5 and got[1, 0] == 0.0
    np.testing.assert_allclose(got, ndtr(-gaps), rtol=_slack(3.0))


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-37.0, max_value=37.0, allow_nan=False))
def test_the_cdf_matches_scipy(z: float) -> None:
    got, expected = float(_normal_cdf(np.array([z]))[0]), float(ndtr(z))
    assert got == pytest.approx(expected, rel=1e-13, abs=1e-300)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1e-300, max_value=1.0, exclude_max=True))
def test_the_quantile_guess_is_close_to_scipy(p: float) -> None:
    assert _normal_quantile_guess(p) == pytest.approx(float(ndtri(p)), rel=1e-9, abs=1e-9)


def test_the_quantile_guess_at_its_ends() -> None:
    assert _normal_quantile_guess(0.0) == -math.inf and _normal_quantile_guess(1.0) == math.inf
    assert _normal_quantile_guess(0.5) == pytest.approx(0.0, abs=1e-15)
