r"""The optimal (ε, δ) partition selection for one item per user: its release probabilities and its map.

Desfontaines, Voss, Gipson, Mandayam, "Differentially private partition selection" (PoPETs 2022): when each user
contributes to one item, the item held by ``n`` users is released with probability π(n), independently of the
other items, where π is the largest sequence with π(0) = 0 that keeps every pair of neighbouring counts
(ε, δ)-indistinguishable:

.. math::
    \pi(n) = \min\bigl(e^{\varepsilon}\pi(n-1) + \delta,\ 1 - e^{-\varepsilon}(1 - \pi(n-1) - \delta),\ 1\bigr).

:func:`release_table` computes it in exact integer arithmetic, with :math:`e^{\varepsilon}` replaced by a
rational lower bound L and each π(n) rounded *down* to the grid :math:`2^{-64K}`; both only lower the
probabilities, and the recursion is then evaluated on the rounded values, so the released probabilities satisfy
the two constraints exactly (``docs/privacy.md`` §6): no slack is charged to δ. The sequence reaches 1 at a
public count n*, so the table is finite.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from opendp_wgm._validation import _check_d_in, _check_positive, _check_probability

__all__ = ["MAX_TABLE", "ReleaseTable", "exp_lower_bound", "partition_selection_loss", "release_table"]

#: Most entries of a release table (counts below n*): ε and δ that need more are refused (n* ≈ 2 ln(1/δ)/ε).
MAX_TABLE = 1 << 20
#: Bits of the rational lower bound of e^ε (its grid is 2^-_EXP_BITS).
_EXP_BITS = 128
#: Relative margin that covers the float error of the group bound's (e^{kε} − 1)/(e^ε − 1) (docs/privacy.md §6).
_GROUP_MARGIN = 1.0 + 2.0**-30


def exp_lower_bound(epsilon: float) -> Fraction:
    r"""A rational :math:`L \le e^{\varepsilon}` with :math:`e^{\varepsilon} - L < 2^{-100} e^{\varepsilon}`.

    The partial sums of :math:`\sum_k \varepsilon^k/k!` (positive terms) are lower bounds of
    :math:`e^{\varepsilon}`; the sum is kept on the grid :math:`2^{-128}` rounded down, and stops when a term is
    below :math:`2^{-110}` of the sum (its tail is then below twice that term for ``k > 2ε``).
    """
    epsilon = _check_positive("epsilon", epsilon)
    x = Fraction(epsilon)  # the float's exact value
    scale = 1 << _EXP_BITS
    total, term, k = scale, Fraction(scale), 0  # in units of 2^-128, rounded down at each addition
    while True:
        k += 1
        term = term * x / k
        total += math.floor(term)
        if k > 2 * x and term * (1 << 110) < total:
            return Fraction(total, scale)


@dataclass(frozen=True)
class ReleaseTable:
    r"""The release probabilities π(n) = ``numerators[n]`` / 2^``bits`` for n < ``n_star``, and π(n) = 1 from n*.

    Attributes
    ----------
    epsilon, delta
        The (ε, δ) of one user.
    bits
        The grid: π(n) is a multiple of :math:`2^{-\text{bits}}` (``bits`` a multiple of 64).
    numerators
        π(0), …, π(n* − 1) times :math:`2^{\text{bits}}`, non-decreasing, each below :math:`2^{\text{bits}}`.
    """

    epsilon: float
    delta: float
    bits: int
    numerators: tuple[int, ...]

    @property
    def n_star(self) -> int:
        """The smallest count released with probability 1."""
        return len(self.numerators)

    def probability(self, n: int) -> Fraction:
        """π(n), exactly."""
        return Fraction(self.numerators[n], 1 << self.bits) if n < self.n_star else Fraction(1)

    def words(self) -> NDArray[np.uint64]:
        """The numerators as ``(n*, bits/64)`` unsigned 64-bit words, most significant first: the binary
        expansion :func:`opendp_wgm.samplers.bernoulli.sample_bernoulli` reads."""
        k = self.bits // 64
        mask = (1 << 64) - 1
        rows = [[(a >> (64 * (k - 1 - j))) & mask for j in range(k)] for a in self.numerators]
        return np.array(rows, dtype=np.uint64).reshape(self.n_star, k)


@functools.lru_cache(maxsize=32)
def release_table(epsilon: float, delta: float) -> ReleaseTable:
    r"""The release probabilities of the optimal partition selection at (ε, δ), for one item per user.

    Parameters
    ----------
    epsilon
        ε > 0.
    delta
        δ ∈ (0, 1).

    Returns
    -------
    ReleaseTable
        π(n) for n < n*, on the grid :math:`2^{-64K}` with :math:`64K \ge 64 + \log_2(L/\delta)`.

    Raises
    ------
    ValueError
        If ε, δ are out of range, or n* would exceed :data:`MAX_TABLE` (ε far below 2 ln(1/δ)/2^20).

    Notes
    -----
    With :math:`A = 2^{64K}`, :math:`a_0 = 0` and :math:`L = ` :func:`exp_lower_bound` (ε),

    .. math::
        a_n = \min\Bigl(\bigl\lfloor L a_{n-1} + \delta A \bigr\rfloor,\
        A - \Bigl\lceil \frac{A - a_{n-1} - \delta A}{L} \Bigr\rceil,\ A\Bigr),

    until :math:`a_n = A`. Every :math:`a_n \ge a_{n-1}` (L ≥ 1) and :math:`a_n/A` satisfies both constraints
    of the recursion with :math:`e^{\varepsilon} \ge L` (``docs/privacy.md`` §6).

    Examples
    --------
    >>> from opendp_wgm.privacy.partition import release_table
    >>> table = release_table(1.0, 1e-5)
    >>> table.n_star, float(table.probability(1)) == 1e-5
    (23, True)
    """
    epsilon = _check_positive("epsilon", epsilon)
    delta = _check_probability("delta", delta)
    lower = max(exp_lower_bound(epsilon), Fraction(1))
    p, q = lower.numerator, lower.denominator
    d = Fraction(delta)
    # 64 bits below δ/L: each rounding (≤ 2^-bits) is below δ/(L 2^64), so the sequence still reaches 1
    ratio = lower / d  # its bit lengths bound log2(L/δ) from above, exactly (L/δ may exceed a float)
    bits = 64 * math.ceil((64 + ratio.numerator.bit_length() - ratio.denominator.bit_length() + 1) / 64)
    top = 1 << bits
    dn, dd = d.numerator * top, d.denominator  # δ·A = dn/dd exactly
    # π(n) ≤ δ(e^{nε} − 1)/(e^ε − 1) (the first branch, for every n) and π(n* − 1) ≥ 1 − δ: a lower bound of n*
    if epsilon < 700.0 and math.log1p((1.0 - delta) * math.expm1(epsilon) / delta) / epsilon > MAX_TABLE:
        _too_long(epsilon, delta)
    numerators = [0]
    while True:
        a = numerators[-1]
        grow = (p * a * dd + q * dn) // (q * dd)  # ⌊L a + δA⌋
        rest = (top - a) * dd - dn  # (A − a − δA)·dd
        shrink = top - (-(-rest * q // (p * dd)))  # A − ⌈(A − a − δA)/L⌉
        a = min(grow, shrink, top)
        if a >= top:
            return ReleaseTable(epsilon, delta, bits, tuple(numerators))
        numerators.append(a)
        if len(numerators) > MAX_TABLE:
            _too_long(epsilon, delta)


def _too_long(epsilon: float, delta: float) -> None:
    msg = (
        f"`epsilon` must give at most {MAX_TABLE} counts released with probability below 1 at "
        f"delta={delta!r} (found more at epsilon={epsilon!r}; raise epsilon or delta)"
    )
    raise ValueError(msg)


def partition_selection_loss(d_in: int, *, epsilon: float, delta: float) -> tuple[float, float]:
    r"""The (ε, δ) of the partition selection for ``d_in`` users added or removed.

    :math:`d_{in} = 1`: (ε, δ) (the recursion's constraints). :math:`d_{in} = k`: group privacy,
    :math:`(k\varepsilon,\ \delta\sum_{i<k} e^{i\varepsilon})`, capped at δ = 1, both rounded up
    (``docs/privacy.md`` §6); 0 users: (0, 0).
    """
    k = _check_d_in(d_in)
    epsilon = _check_positive("epsilon", epsilon)
    delta = _check_probability("delta", delta)
    if k <= 1:
        return (epsilon, delta) if k == 1 else (0.0, 0.0)
    group_epsilon = math.nextafter(k * epsilon, math.inf)
    if k * epsilon > 700.0:  # e^((k-1)ε) overflows a float long before; δ is capped at 1 anyway
        return group_epsilon, 1.0
    # Σ_{i<k} e^{iε} = (e^{kε} − 1)/(e^ε − 1), computed with expm1; the margin covers its float error
    ratio = math.expm1(k * epsilon) / math.expm1(epsilon)
    return group_epsilon, min(1.0, delta * ratio * _GROUP_MARGIN)
