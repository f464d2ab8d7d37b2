"""The partition selection's release table and map: oracle values, the recursion's constraints, the group bound."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opendp_wgm.privacy.partition import (
    MAX_TABLE,
    exp_lower_bound,
    partition_selection_loss,
    release_table,
)


def _oracle(epsilon: float, delta: float, n: int) -> list[mpmath.mpf]:
    """π(0..n) by the recursion at 500 digits with the true e^ε (no rounding of π)."""
    with mpmath.workdps(500):
        e, d = mpmath.exp(mpmath.mpf(epsilon)), mpmath.mpf(delta)
        pi = [mpmath.mpf(0)]
        for _ in range(n):
            prev = pi[-1]
            pi.append(min(e * prev + d, 1 - (1 - prev - d) / e, mpmath.mpf(1)))
        return pi


def _mpf(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


def _e_lower(epsilon: float) -> Fraction:
    """e^ε rounded down to 400 bits by mpmath (directed rounding), as an exact rational: within 2^-399 of e^ε,
    above the implementation's lower bound (2^-100 or so below), so the tight constraints are checked at a
    value in [L, e^ε]: they then hold at e^ε."""
    _, man, exp, _ = mpmath.libmp.mpf_exp(mpmath.libmp.from_float(epsilon), 400, "d")
    return Fraction(int(man)) * Fraction(2) ** int(exp)


@pytest.mark.parametrize(
    ("epsilon", "delta"), [(1.0, 1e-5), (0.1, 1e-6), (3.0, 1e-9), (0.5, 0.05), (1.0, 1e-300), (800.0, 1e-5)]
)
def test_oracle_values(epsilon: float, delta: float) -> None:
    table = release_table(epsilon, delta)
    oracle = _oracle(epsilon, delta, table.n_star + 2)
    for n in range(table.n_star + 3):
        # below by at most the roundings (2^-bits each, and e^ε's 2^-100): never above the optimal value
        with mpmath.workdps(500):
            assert 0 <= oracle[n] - _mpf(table.probability(n)) < 1e-20
    assert oracle[table.n_star - 1] < 1 and oracle[table.n_star] == 1


def test_oracle_closed_form_of_the_first_branch() -> None:
    # while the first branch binds, π(n) = δ (e^{nε} − 1)/(e^ε − 1): π(1) = δ, π(2) = δ(1 + e^ε), ...
    table = release_table(1.0, 1e-5)
    assert table.n_star == 23
    for n in range(1, 11):
        expected = 1e-5 * math.expm1(n) / math.expm1(1.0)
        assert float(table.probability(n)) == pytest.approx(expected, rel=1e-12)
    assert table.probability(1) == Fraction(1e-5)  # δ is dyadic: no rounding at n = 1


@settings(max_examples=60, deadline=None)
@given(epsilon=st.floats(0.05, 8.0), delta=st.floats(1e-12, 0.2))
def test_the_recursion_constraints_hold_exactly(epsilon: float, delta: float) -> None:
    table = release_table(epsilon, delta)
    e, d = _e_lower(epsilon), Fraction(delta)
    pi = [table.probability(n) for n in range(table.n_star + 2)]
    assert pi[0] == 0 and pi[table.n_star] == 1 and pi[table.n_star - 1] < 1
    for n in range(1, len(pi)):
        assert pi[n - 1] <= pi[n]  # monotone: the two other directions of each pair
        assert pi[n] <= e * pi[n - 1] + d  # item released
        assert 1 - pi[n - 1] <= e * (1 - pi[n]) + d  # item not released


def test_table_words_are_the_numerators() -> None:
    table = release_table(1.0, 1e-5)
    words = table.words()
    assert words.shape == (table.n_star, table.bits // 64) and table.bits == 128
    for n in (0, 1, 11, table.n_star - 1):
        value = sum(int(w) << (64 * (len(words[n]) - 1 - j)) for j, w in enumerate(words[n]))
        assert Fraction(value, 1 << table.bits) == table.probability(n)


def test_exp_lower_bound() -> None:
    for epsilon in (1e-9, 0.3, 1.0, 10.0, 200.0):
        lower = exp_lower_bound(epsilon)
        with mpmath.workdps(80):
            exact, bound = mpmath.exp(_mpf(Fraction(epsilon))), _mpf(lower)
            assert bound <= exact and (exact - bound) / exact < mpmath.mpf(2) ** -100


def test_map() -> None:
    assert partition_selection_loss(1, epsilon=1.0, delta=1e-5) == (1.0, 1e-5)
    assert partition_selection_loss(0, epsilon=1.0, delta=1e-5) == (0.0, 0.0)
    for k in (2, 3, 10):
        eps, delta = partition_selection_loss(k, epsilon=0.7, delta=1e-6)
        exact = Fraction(1e-6) * sum(Fraction(math.exp(0.7 * i)) for i in range(k))
        assert eps >= k * 0.7 and delta >= exact * (1 + Fraction(1, 2**40))
        assert delta < 1.0001 * exact
    assert partition_selection_loss(2000, epsilon=1.0, delta=1e-5) == (pytest.approx(2000.0), 1.0)


@pytest.mark.parametrize(
    ("epsilon", "delta", "match"),
    [(0.0, 1e-5, "`epsilon` must be"), (1.0, 0.0, "`delta` must be"), (1.0, 1.0, "`delta` must be"),
     (1e-7, 1e-9, f"at most {MAX_TABLE} counts")],
)
def test_bad_parameters(epsilon: float, delta: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        release_table(epsilon, delta)
