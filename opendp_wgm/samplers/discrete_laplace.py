r"""The discrete Laplace (two-sided geometric) distribution on the integers: OpenDP's ``make_laplace`` on ``i64``.

:func:`sample_discrete_laplace` adds :math:`\mathcal L_\mathbb Z(0, b)`, :math:`P[Z = z] \propto e^{-|z|/b}`, to each
of a vector of integers; :func:`discrete_laplace_epsilon` is the same measurement's map: integer vectors ``d_in``
apart in ℓ1 give outputs ``d_in / b``-indistinguishable under pure DP (rounded up by OpenDP). The noise is OpenDP's
exact sampler, so nothing here draws a float.
"""

from __future__ import annotations

import functools

import numpy as np
import opendp.prelude as dp
from numpy.typing import NDArray

from opendp_wgm._validation import _check_d_in, _check_positive

__all__ = ["discrete_laplace_epsilon", "sample_discrete_laplace"]


@functools.lru_cache(maxsize=128)
def _laplace(scale: float) -> dp.Measurement:
    # one measurement per scale: OpenDP builds it through its FFI; its map and its noise are the same object's
    space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64")
    return dp.m.make_laplace(*space, scale=scale)


def sample_discrete_laplace(values: NDArray[np.int64], scale: float) -> NDArray[np.int64]:
    """``values`` plus independent discrete Laplace noise of scale ``scale`` on each (OpenDP's exact sampler).

    Requires OpenDP's ``contrib`` feature (enabled by every constructor of the package).
    """
    scale = _check_positive("scale", scale)
    if values.size == 0:
        return np.zeros(0, dtype=np.int64)
    noisy: list[int] = _laplace(scale)(np.asarray(values, dtype=np.int64).tolist())
    return np.asarray(noisy, dtype=np.int64)


def discrete_laplace_epsilon(d_in: int, scale: float) -> float:
    """ε of :func:`sample_discrete_laplace` at scale ``scale`` for inputs ``d_in`` apart in ℓ1: OpenDP's map,
    ``d_in / scale`` rounded up (0 at ``d_in = 0``)."""
    d_in = _check_d_in(d_in)
    scale = _check_positive("scale", scale)
    return float(_laplace(scale).map(d_in))
