"""The maps of peeling and limited-domain top-k: oracle values of the paper's reference code, rounding."""

from __future__ import annotations

import math

import pytest

from opendp_wgm.privacy.calibrate import limited_domain_local_epsilon
from opendp_wgm.privacy.peeling import (
    limited_domain_epsilon,
    limited_domain_h_bottom,
    limited_domain_threshold_offset,
    peeling_approx_epsilon,
    peeling_epsilon,
    peeling_pure_epsilon,
    peeling_rho,
)


def test_em_epsilon_cdp_oracle() -> None:
    assert peeling_epsilon(1.1, 0.0, 10) == pytest.approx(0.11, abs=1e-9)
    assert peeling_epsilon(1.1, 0.1, 1) == pytest.approx(1.1, abs=1e-9)
    assert round(peeling_epsilon(1.1, 0.1, 10), 4) == 0.2926  # the reference's 0.29264 to 4 places
    assert peeling_epsilon(1.1, 0.1, 10) == pytest.approx(0.29264, abs=1e-5)


def test_limited_domain_oracles() -> None:
    assert limited_domain_epsilon(1.1, 0.1, 1) == pytest.approx(1.1)
    assert limited_domain_epsilon(1.1, 0.1, 10) == pytest.approx(9.782377233428313, abs=1e-6)
    assert limited_domain_local_epsilon(1.1, 0.05, 1) == pytest.approx(1.1, abs=1e-4)
    local = limited_domain_local_epsilon(1.1, 0.05, 10)
    assert local == 0.22107791900634766  # bit for bit: the reference's bisection
    assert limited_domain_epsilon(local, 0.05, 10) <= 1.1
    # §7.2 examples at ε = 1, δ' = 5e-6
    for k, expected in [(1, 0.99999905), (10, 0.118949), (50, 0.053195), (100, 0.037615)]:
        assert limited_domain_local_epsilon(1.0, 5e-6, k) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match=r"`delta` must be in \(0.0, 1.0\) \(found 1.0\)"):
        limited_domain_local_epsilon(1.1, 1.0, 10)


def test_h_bottom_oracle() -> None:
    """§12: counts [(1,1),(2,2),(3,3)], Δ0 = 5, δ = 0.1, ε' = 1.1; k̄ = 2 uses c_(3) = 3, k̄ = 4 uses 0."""
    assert limited_domain_h_bottom(3, k_bar=2, max_contributions=5, delta=0.1, local_epsilon=1.1) == pytest.approx(
        3 + 1 + math.log(2 / 0.1) / 1.1
    )
    assert limited_domain_h_bottom(0, k_bar=4, max_contributions=5, delta=0.1, local_epsilon=1.1) == pytest.approx(
        1 + math.log(4 / 0.1) / 1.1
    )
    assert limited_domain_h_bottom(0, k_bar=4, max_contributions=None, delta=0.1, local_epsilon=1.1) == pytest.approx(
        1 + math.log(4 / 0.1) / 1.1
    )


@pytest.mark.parametrize("bits", [0, 5, 20])
@pytest.mark.parametrize(
    ("k_bar", "max_contributions", "delta", "scale"), [(2, 5, 0.1, 1 / 1.1), (50, 100, 5e-6, 26.5)]
)
def test_threshold_offset_is_rounded_up_by_less_than_one_step(bits, k_bar, max_contributions, delta, scale) -> None:
    exact = (1 + math.log(min(k_bar, max_contributions) / delta) * scale) * 2**bits
    offset = limited_domain_threshold_offset(
        k_bar=k_bar, max_contributions=max_contributions, delta=delta, scale=scale, lattice_bits=bits
    )
    assert exact <= offset < exact + 1 + 1e-6


def test_peeling_loss_functions() -> None:
    assert peeling_rho(1, k=2, scale=2.0) == pytest.approx(2 / 32)
    assert peeling_pure_epsilon(2, k=3, scale=2.0) == pytest.approx(3.0)
    rho = 10 * 0.5**2 / 8
    assert peeling_approx_epsilon(1, k=10, scale=2.0, delta=1e-5) == pytest.approx(
        min(5.0, rho + 2 * math.sqrt(rho * math.log(1e5)))
    )
    assert peeling_rho(0, k=3, scale=1.0) == 0.0 and peeling_rho(1, k=3, scale=0.0) == math.inf
    # the reference's ε' meets its ε exactly (up to the 1e-12 rounding)
    eps_prime = peeling_epsilon(1.1, 0.1, 10)
    assert peeling_approx_epsilon(1, k=10, scale=1 / eps_prime, delta=0.1) <= 1.1
