"""Exact samplers: the discrete Gaussian and the discrete Laplace (OpenDP's) on the integers, private selection
(noisy top-k / max) and dyadic Bernoulli draws (partition selection).

Every random word comes from :func:`csprng` (AES-128-CTR keyed from the OS) or from OpenDP's own samplers.
Exactness arguments: ``docs/noise.md`` (discrete Gaussian) and ``docs/top_k.md`` (selection).

Each public name is imported from its module on first use (PEP 562): the WGM's release needs the
discrete Gaussian, not the selection samplers and their ``mpmath``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opendp_wgm._lazy import _lazy_exports

if TYPE_CHECKING:  # the lazily imported public names (exported: they are in __all__), for type checkers
    from opendp_wgm.samplers.bernoulli import sample_bernoulli
    from opendp_wgm.samplers.discrete_gaussian import (
        NOISE_METHODS,
        NoiseMethod,
        csprng,
        sample_discrete_gaussian,
    )
    from opendp_wgm.samplers.discrete_laplace import discrete_laplace_epsilon, sample_discrete_laplace
    from opendp_wgm.samplers.selection import (
        SELECTION_MEASURES,
        SELECTION_METHODS,
        SelectionMeasure,
        SelectionMethod,
        noisy_max,
        noisy_top_k,
    )

#: Public name -> the module that defines it.
_EXPORTS = {
    "NOISE_METHODS": "opendp_wgm.samplers.discrete_gaussian",
    "SELECTION_MEASURES": "opendp_wgm.samplers.selection",
    "SELECTION_METHODS": "opendp_wgm.samplers.selection",
    "NoiseMethod": "opendp_wgm.samplers.discrete_gaussian",
    "SelectionMeasure": "opendp_wgm.samplers.selection",
    "SelectionMethod": "opendp_wgm.samplers.selection",
    "csprng": "opendp_wgm.samplers.discrete_gaussian",
    "discrete_laplace_epsilon": "opendp_wgm.samplers.discrete_laplace",
    "noisy_max": "opendp_wgm.samplers.selection",
    "noisy_top_k": "opendp_wgm.samplers.selection",
    "sample_bernoulli": "opendp_wgm.samplers.bernoulli",
    "sample_discrete_gaussian": "opendp_wgm.samplers.discrete_gaussian",
    "sample_discrete_laplace": "opendp_wgm.samplers.discrete_laplace",
}

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

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
