"""The discrete Laplace: OpenDP's sampler on integer vectors, and its map."""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import pytest

from opendp_wgm.samplers import discrete_laplace_epsilon, sample_discrete_laplace


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib")


def test_the_map_is_d_in_over_the_scale() -> None:
    assert discrete_laplace_epsilon(0, 50.0) == 0.0
    assert discrete_laplace_epsilon(1, 50.0) == 0.02
    assert discrete_laplace_epsilon(3, 50.0) >= 3 / 50
    assert discrete_laplace_epsilon(1, 3.0) >= 1 / 3  # rounded up, never down
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace_epsilon(1, 0.0)


def test_samples_are_integers_centred_at_the_values() -> None:
    # 3000 draws at scale 10 on 4 values: integers; each mean within 6 standard errors (sd = √2·10 ≈ 14.1), and
    # P[Z = 0] = tanh(1/(2b)) ≈ 0.0500 within 4 standard errors
    values = np.array([0, 5, -7, 10**6], dtype=np.int64)
    draws = np.stack([sample_discrete_laplace(values, 10.0) for _ in range(3000)])
    assert draws.dtype == np.int64 and draws.shape == (3000, 4)
    sd = math.sqrt(2) * 10
    assert np.all(np.abs(draws.mean(axis=0) - values) < 6 * sd / math.sqrt(3000))
    p0 = math.tanh(1 / 20)
    assert abs(float((draws == values).mean()) - p0) < 4 * math.sqrt(p0 * (1 - p0) / draws.size)


def test_empty_input() -> None:
    assert sample_discrete_laplace(np.zeros(0, dtype=np.int64), 1.0).size == 0
