"""The Budget value and the one reading of the output measures."""

from __future__ import annotations

import dataclasses

import opendp.prelude as dp
import pytest

from opendp_wgm.privacy.budget import (
    Budget,
    check_gaussian_measure,
    check_peeling_measure,
    check_two_stage_measure,
    describe_measure,
    measure_kind,
)

APPROX_DP = dp.approximate(dp.max_divergence())
APPROX_ZCDP = dp.approximate(dp.zero_concentrated_divergence())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"epsilon": 1.0, "rho": 1.0, "delta": 1e-5}, ValueError, r"exactly one of `epsilon` and `rho` must be given \(found epsilon, rho\)"),
        ({"delta": 1e-5}, ValueError, r"exactly one of `epsilon` and `rho` must be given \(found neither\)"),
        ({"epsilon": 0.0, "delta": 1e-5}, ValueError, r"`epsilon` must be in \(0.0, inf\) \(found 0.0\)"),
        ({"rho": -1.0, "delta": 1e-5}, ValueError, r"`rho` must be in \(0.0, inf\) \(found -1.0\)"),
        ({"epsilon": 1.0, "delta": 0.0}, ValueError, r"`delta` must be in \(0.0, 1.0\) \(found 0.0\)"),
        ({"epsilon": 1.0, "delta": 1.0}, ValueError, r"`delta` must be in \(0.0, 1.0\) \(found 1.0\)"),
        ({"epsilon": "1", "delta": 1e-5}, TypeError, "`epsilon` must be a real number"),
    ],
)
def test_construction_errors(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Budget.of(**kwargs)


def test_peeling_budget_kinds_and_errors() -> None:
    assert Budget.of_peeling(rho=0.5) == Budget("approx_zcdp", 0.5, 0.0)
    assert Budget.of_peeling(epsilon=1.0) == Budget("pure_dp", 1.0, 0.0)
    assert Budget.of_peeling(epsilon=1.0, delta=1e-5) == Budget("approx_dp", 1.0, 1e-5)
    with pytest.raises(ValueError, match=r"`delta` must be None unless `epsilon` is given \(peeling spends no δ under zCDP\) \(found 1e-05\)"):
        Budget.of_peeling(rho=0.5, delta=1e-5)
    with pytest.raises(ValueError, match="exactly one of `epsilon` and `rho`"):
        Budget.of_peeling()


@pytest.mark.parametrize(
    ("budget", "d_out"),
    [
        (Budget.of(epsilon=1.0, delta=1e-5), (1.0, 1e-5)),
        (Budget.of(rho=0.25, delta=1e-6), (0.25, 1e-6)),
        (Budget.of_peeling(epsilon=2.0), 2.0),
        (Budget("zcdp", 0.5, 0.0), 0.5),
    ],
)
def test_measure_and_d_out_agree_with_loss_of(budget: Budget, d_out: object) -> None:
    """(measure, d_out) is what ``dp.loss_of`` gives for the same ε/ρ and δ."""
    delta = budget.delta if budget.kind == "approx_dp" else None
    measure, distance = dp.loss_of(epsilon=budget.epsilon, rho=budget.rho, delta=delta)
    if budget.kind == "approx_zcdp":  # loss_of has no approximate zCDP: it is zCDP with a δ beside
        measure, distance = dp.approximate(measure), (distance, budget.delta)
    assert budget.measure == measure
    assert budget.d_out == distance == d_out


def test_budget_is_frozen_and_exposes_its_parts() -> None:
    budget = Budget.of(rho=0.25, delta=1e-6)
    assert (budget.rho, budget.epsilon, budget.delta, budget.name) == (0.25, None, 1e-6, "rho")
    assert Budget.of(epsilon=1.0, delta=1e-6).name == "epsilon"
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget.value = 1.0  # type: ignore[misc]


def test_split() -> None:
    """(ε, δ): both split, the rest shrunk by 1e-12; zCDP: stage 1 keeps all of δ, the rest spends none."""
    first, rest = Budget.of(epsilon=1.0, delta=1e-5).split(0.5)
    assert first == Budget("approx_dp", 0.5, 5e-6)
    assert rest == Budget("approx_dp", 0.5 * (1 - 1e-12), 5e-6 * (1 - 1e-12))
    assert first.value + rest.value <= 1.0 and first.delta + rest.delta <= 1e-5
    first, rest = Budget.of(rho=1.0, delta=1e-5).split(0.25)
    assert first == Budget("approx_zcdp", 0.25, 1e-5)
    assert rest == Budget("approx_zcdp", 0.75 * (1 - 1e-12), 0.0)
    with pytest.raises(ValueError, match=r"`split` must be in \(0.0, 1.0\) \(found 1.0\)"):
        Budget.of(rho=1.0, delta=1e-5).split(1.0)
    with pytest.raises(ValueError, match="only an approximate budget splits"):
        Budget.of_peeling(epsilon=1.0).split(0.5)


def test_description() -> None:
    assert Budget.of(epsilon=1.0, delta=1e-5).description == (
        "ε = 1, δ = 1e-05 per user [(ε, δ)-DP, approximate(max_divergence)]"
    )
    assert Budget.of(rho=0.25, delta=1e-6).description == (
        "ρ = 0.25, δ = 1e-06 per user [approximate zCDP, approximate(zero_concentrated_divergence)]"
    )
    assert Budget.of_peeling(epsilon=2.0).description == "ε = 2 per user [ε-DP, max_divergence]"


def test_describe_measure() -> None:
    """The CLI's report names (the strings of its former ``_measure_description``)."""
    assert describe_measure(APPROX_DP) == ("(ε, δ)-DP, approximate(max_divergence)", "ε")
    assert describe_measure(APPROX_ZCDP) == ("approximate zCDP, approximate(zero_concentrated_divergence)", "ρ")
    assert describe_measure(dp.renyi_divergence()) == (str(dp.renyi_divergence()), "d_out")


def test_one_reading_of_the_measures() -> None:
    assert measure_kind(None) == "approx_zcdp"
    assert measure_kind(dp.max_divergence()) == "pure_dp"
    with pytest.raises(ValueError, match=r"`output_measure` must be one of .* or dp.max_divergence\(\) \(found"):
        measure_kind(dp.renyi_divergence())
    two = r"`output_measure` must be dp.approximate\(dp.zero_concentrated_divergence\(\)\) or dp.approximate\(dp.max_divergence\(\)\) \(found"
    with pytest.raises(ValueError, match=two):
        check_gaussian_measure(dp.max_divergence(), None)
    with pytest.raises(ValueError, match=two):
        check_two_stage_measure(dp.zero_concentrated_divergence(), None, None, zero_delta=True)
    assert check_gaussian_measure(APPROX_DP, 1.0) == (APPROX_DP, 1.0)
    assert check_peeling_measure(APPROX_DP, 0.0, zero_delta=True) == ("approx_dp", 0.0)
    with pytest.raises(ValueError, match=r"`delta` must be in \(0.0, 1.0\) \(found 0.0\)"):
        check_peeling_measure(APPROX_DP, 0.0, zero_delta=False)
    assert check_two_stage_measure(None, None, None, zero_delta=False) == (APPROX_ZCDP, "approx_zcdp", None, 0.0)
