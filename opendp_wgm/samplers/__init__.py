"""Exact samplers: the discrete Gaussian and the discrete Laplace (OpenDP's) on the integers, private selection
(noisy top-k / max) and dyadic Bernoulli draws (partition selection).

Every random word comes from :func:`csprng` (AES-128-CTR keyed from the OS) or from OpenDP's own samplers.
Exactness arguments: ``docs/noise.md`` (discrete Gaussian) and ``docs/top_k.md`` (selection).
"""

from opendp_wgm.samplers.bernoulli import sample_bernoulli
from opendp_wgm.samplers.discrete_gaussian import NOISE_METHODS, NoiseMethod, csprng, sample_discrete_gaussian
from opendp_wgm.samplers.discrete_laplace import discrete_laplace_epsilon, sample_discrete_laplace
from opendp_wgm.samplers.selection import (
    SELECTION_MEASURES,
    SELECTION_METHODS,
    SelectionMeasure,
    SelectionMethod,
    noisy_max,
    noisy_top_k,
)

__all__ = [
    "NOISE_METHODS",
    "SELECTION_MEASURES",
    "SELECTION_METHODS",
    "NoiseMethod",
    "SelectionMeasure",
    "SelectionMethod",
    "csprng",
    "discrete_laplace_epsilon",
    "noisy_max",
    "noisy_top_k",
    "sample_bernoulli",
    "sample_discrete_gaussian",
    "sample_discrete_laplace",
]
