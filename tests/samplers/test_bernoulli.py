"""The exact dyadic Bernoulli sampler: frequencies, the multi-word comparison, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from opendp_wgm.samplers import bernoulli
from opendp_wgm.samplers.bernoulli import sample_bernoulli

TOP = 1 << 64


def _words(p: float, k: int = 2) -> np.ndarray:
    """p (a float in [0, 1)) as k words, exactly (p is dyadic with at most 53 significant bits)."""
    a = int(p * 2.0**64) << (64 * (k - 1))
    return np.array([(a >> (64 * (k - 1 - j))) % TOP for j in range(k)], dtype=np.uint64)


@pytest.mark.parametrize("p", [0.5, 0.03, 0.9, 1e-5 * 2**10])
def test_frequency(p: float) -> None:
    # 200 000 draws: the frequency is within 5 standard deviations of p (a false failure ≤ 6e-7)
    n = 200_000
    draws = sample_bernoulli(np.tile(_words(p), (n, 1)))
    assert draws.dtype == np.bool_ and draws.shape == (n,)
    assert abs(draws.mean() - p) <= 5 * math.sqrt(p * (1 - p) / n)


def test_mixed_probabilities_in_one_call() -> None:
    # one draw per row, each at its own probability: 0 never, 1 − 2^-128 always (but for 2^-128 per row)
    n = 50_000
    words = np.concatenate([np.zeros((n, 2), np.uint64), np.full((n, 2), TOP - 1, np.uint64)])
    draws = sample_bernoulli(words)
    assert not draws[:n].any() and draws[n:].all()


class _Fixed:
    """A stand-in generator whose words are given (to check the K-word comparison exactly)."""

    def __init__(self, words: np.ndarray) -> None:
        self.bit_generator = self
        self._words = words

    def random_raw(self, size: tuple[int, int]) -> np.ndarray:
        assert size == self._words.shape
        return self._words


def test_the_comparison_is_lexicographic(monkeypatch: pytest.MonkeyPatch) -> None:
    p = np.array([[5, 7]] * 6, dtype=np.uint64)
    uniform = np.array([[5, 6], [5, 7], [4, TOP - 1], [6, 0], [0, 0], [5, 8]], dtype=np.uint64)
    monkeypatch.setattr(bernoulli, "csprng", lambda: _Fixed(uniform))
    assert sample_bernoulli(p).tolist() == [True, False, True, False, True, False]


def test_empty_and_bad_input() -> None:
    assert sample_bernoulli(np.zeros((0, 2), np.uint64)).shape == (0,)
    with pytest.raises(ValueError, match="`words` must be a 2-d array of uint64"):
        sample_bernoulli(np.zeros(3, np.uint64))
    with pytest.raises(ValueError, match="`words` must be a 2-d array of uint64"):
        sample_bernoulli(np.zeros((3, 2), np.int64))
