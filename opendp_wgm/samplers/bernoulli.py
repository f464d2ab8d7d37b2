r"""Exact Bernoulli draws for dyadic probabilities, one per row, vectorised.

A probability :math:`p = a/2^{64K}` (``0 ≤ a < 2^{64K}``) is given by the K 64-bit words of ``a``, most
significant first. A uniform :math:`U` on :math:`\{0, …, 2^{64K} - 1\}` is K words from :func:`csprng`, and
:math:`P[U < a] = a/2^{64K} = p` exactly; ``U < a`` is the lexicographic comparison of the two K-word strings.
No float touches a draw.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from opendp_wgm.samplers.discrete_gaussian import csprng

__all__ = ["sample_bernoulli"]


def sample_bernoulli(words: NDArray[np.uint64]) -> NDArray[np.bool_]:
    r"""One independent Bernoulli(:math:`p_i`) draw per row of ``words``, exactly.

    Parameters
    ----------
    words
        ``(n, K)`` unsigned 64-bit words: row ``i`` is the binary expansion of :math:`p_i = \sum_j
        \text{words}[i, j]\, 2^{-64(j+1)}`, most significant word first (so :math:`p_i < 1`).

    Returns
    -------
    numpy.ndarray
        ``(n,)`` booleans, ``True`` with probability :math:`p_i`, independently (AES-128-CTR keyed from the OS,
        a fresh key per call).

    Examples
    --------
    >>> import numpy as np
    >>> from opendp_wgm.samplers.bernoulli import sample_bernoulli
    >>> half = np.array([[1 << 63, 0]], dtype=np.uint64)  # 1/2 on two words
    >>> sample_bernoulli(np.repeat(half, 4, axis=0)).shape
    (4,)
    """
    words = np.asarray(words)
    if words.ndim != 2 or words.dtype != np.uint64:
        msg = f"`words` must be a 2-d array of uint64 (found {words.dtype}, shape {words.shape})"
        raise ValueError(msg)
    n, k = words.shape
    uniform = csprng().bit_generator.random_raw(size=(n, k)) if n * k else np.zeros((n, k), dtype=np.uint64)
    below = np.zeros(n, dtype=np.bool_)
    tied = np.ones(n, dtype=np.bool_)
    for j in range(k):  # K words (2 for δ ≥ 2^-60 at ε ≤ 1), not rows
        below |= tied & (uniform[:, j] < words[:, j])
        tied &= uniform[:, j] == words[:, j]
    return below
