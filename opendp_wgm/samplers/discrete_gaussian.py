r"""Exact discrete Gaussian noise on the integers, fast and floating-point safe.

Two samplers of :math:`\mathcal{N}_\mathbb{Z}(0, \sigma^2)`, the distribution on :math:`\mathbb{Z}` with
:math:`P[x] \propto e^{-x^2 / (2\sigma^2)}`:

- ``method="lattice"`` (default): a vectorised NumPy implementation of the rejection sampler of Canonne,
  Kamath and Steinke (2020), Algorithm 3, in which every random decision "U < p" is made *exactly* on a lazily
  refined uniform U: a float64 fast path decides whenever its proven error bound allows, and an exact
  integer-arithmetic fallback decides the rest. Randomness comes from AES-128 in counter mode keyed by the OS.
- ``method="opendp"``: OpenDP's own exact sampler (``dp.m.make_gaussian`` on an ``i64`` vector).

Both return ``int64`` arrays. No float is ever part of an output; floats only steer decisions that are proven
to equal the exact ones. The argument is in ``docs/noise.md``.
"""

from __future__ import annotations

import math
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, Protocol

import numpy as np
from randomgen import AESCounter

from opendp_wgm._validation import _check_choice, _check_int, _check_positive

__all__ = ["NOISE_METHODS", "NoiseMethod", "csprng", "sample_discrete_gaussian"]

NoiseMethod = Literal["lattice", "opendp"]
#: The values of ``method`` (:data:`NoiseMethod`).
NOISE_METHODS = ("lattice", "opendp")

#: Largest accepted ``scale``: keeps every fast-path integer (|draw| <= ~45 sigma + 2^29) exact in float64.
_MAX_SCALE = 2.0**40
#: Relative error margin of the fast path, times (1 + exponent) (times (2 + exponent) for the magnitude, whose
#: lower threshold carries two exp errors). Half of it covers the assumed float error (<= 2^-42 per ``np.exp``,
#: <= 2^-49 (1 + a) for the exponent's arithmetic); the other half absorbs the comparison's own roundings.
#: See docs/noise.md, section 3.1.
_ETA = 2.0**-40
#: Absolute slack (in units of the uniform's cell, <= 2^64) for thresholds below e^-700 < 2^-1009.
_TINY = 2.0**-900
#: The proposal's magnitude is 2^j Q + W with W uniform on 2^j values, chosen so that lambda = 2^j / sigma >=
#: 2^-_SPLIT_BITS. This caps the number of inverse-CDF thresholds (and so the fast path's abstention rate)
#: independently of sigma, at an acceptance cost of at most 2^-_SPLIT_BITS.
_SPLIT_BITS = 12
_LN_2_64 = 64.0 * math.log(2.0)
_TWO_64 = 2.0**64
#: Candidates per vectorised round: large enough to amortise NumPy's per-call overhead, small enough for L2.
_BLOCK = 1 << 14
#: Below this many values per worker, a thread costs more than it saves.
_MIN_PER_WORKER = 1 << 18


class _RawSource(Protocol):
    """What the sampler needs from a bit generator: uniform 64-bit words."""

    def random_raw(self, size: int | None = None) -> object: ...


def csprng() -> np.random.Generator:
    r"""A fresh NumPy ``Generator`` over AES-128 in counter mode, keyed with 128 bits from the OS.

    Returns
    -------
    numpy.random.Generator
        Its bit generator is ``randomgen.AESCounter`` with a key from :func:`secrets.randbits` (the OS CSPRNG,
        ``os.urandom``) and counter 0.

    Notes
    -----
    A new key is drawn on every call, so each release gets an independent stream and no generator state is
    shared between threads or processes (a ``fork`` cannot duplicate a stream that is created after it). A
    single generator must not be used from several threads at once; the samplers here create one per worker.
    AES-CTR with a secret uniformly random key is a pseudorandom function family; its outputs are
    computationally indistinguishable from uniform bits.
    """
    return np.random.Generator(AESCounter(key=secrets.randbits(128)))


def sample_discrete_gaussian(
    scale: float, size: int, *, method: NoiseMethod = "lattice"
) -> np.ndarray:
    r"""Draw ``size`` iid samples of the discrete Gaussian :math:`\mathcal{N}_\mathbb{Z}(0, \sigma^2)`.

    Parameters
    ----------
    scale
        :math:`\sigma`, taken as the exact rational value of the float. Must be in :math:`(0, 2^{40}]`.
    size
        Number of draws, an integer ``>= 0``.
    method : {'lattice', 'opendp'}
        ``'lattice'`` is the fast exact NumPy sampler (about 10^7 values/s); ``'opendp'`` calls OpenDP's exact
        sampler (about 10^4–10^5 values/s) and requires ``dp.enable_features("contrib")`` in the caller.

    Returns
    -------
    numpy.ndarray
        ``int64`` array of shape ``(size,)``.

    Raises
    ------
    TypeError
        If ``scale`` is not a real number or ``size`` not an integer.
    ValueError
        If ``scale`` is not in :math:`(0, 2^{40}]`, ``size < 0``, or ``method`` is unknown.
    RuntimeError
        If ``method='opendp'`` and OpenDP's ``"contrib"`` feature is not enabled.

    Notes
    -----
    Both methods are exact: each output equals :math:`x \in \mathbb{Z}` with probability
    :math:`e^{-x^2/(2\sigma^2)} / \sum_{y \in \mathbb{Z}} e^{-y^2/(2\sigma^2)}`, independently, assuming only
    uniform random bits (AES-128-CTR keyed from the OS for ``'lattice'``, OpenDP's CSPRNG for ``'opendp'``)
    and, for the fast path of ``'lattice'``, that ``numpy.exp`` has relative error at most :math:`2^{-42}`
    on :math:`[-708, 0]` (numpy documents <= 1–4 ulp, i.e. :math:`\le 2^{-50}`). No float becomes an output.
    The proof is in ``docs/noise.md``.

    ``'opendp'`` builds ``dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
    dp.l2_distance(T="i64"), scale=scale)`` and applies it to ``size`` zeros: OpenDP converts ``scale`` to a
    rational exactly and samples CKS Algorithm 3 with :math:`\sigma` = ``scale`` (``i64`` so that no draw
    saturates).

    References
    ----------
    C. Canonne, G. Kamath, T. Steinke. The Discrete Gaussian for Differential Privacy. NeurIPS 2020,
    arXiv:2004.00010.

    Examples
    --------
    >>> from opendp_wgm.samplers import sample_discrete_gaussian
    >>> x = sample_discrete_gaussian(4000.0, 5)
    >>> x.dtype, x.shape
    (dtype('int64'), (5,))
    """
    sigma = _check_positive("scale", scale)
    if sigma > _MAX_SCALE:
        msg = f"`scale` must be <= 2**40 = {_MAX_SCALE!r} so that draws are exact int64 (found {sigma!r})"
        raise ValueError(msg)
    size = _check_int("size", size, minimum=0)
    method = _check_choice("method", method, NOISE_METHODS)
    if size == 0:
        return np.empty(0, dtype=np.int64)
    if method == "opendp":
        return _sample_opendp(sigma, size)
    return _sample_lattice(sigma, size)


# --------------------------------------------------------------------------------------------------------------
# method="opendp"


def _sample_opendp(sigma: float, size: int) -> np.ndarray:
    """OpenDP's exact discrete Gaussian: ``make_gaussian`` on an ``i64`` vector of zeros."""
    import opendp.prelude as dp

    try:
        dp.assert_features("contrib")
    except dp.OpenDPException:
        msg = (
            "method='opendp' uses OpenDP's make_gaussian, which requires the \"contrib\" feature: call "
            "`dp.enable_features(\"contrib\")` (with `import opendp.prelude as dp`) before sampling"
        )
        raise RuntimeError(msg) from None
    space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="i64")
    meas = dp.m.make_gaussian(*space, scale=sigma)
    return np.asarray(meas([0] * size), dtype=np.int64)


# --------------------------------------------------------------------------------------------------------------
# method="lattice": parameters


@dataclass(frozen=True)
class _Params:
    r"""Constants of one sampler run (exact rationals for the fallback, floats for the fast path).

    The proposal magnitude is :math:`M = sQ + W` with :math:`s = 2^j`, :math:`P[Q \ge q] = e^{-q\lambda}`,
    :math:`\lambda = s/\sigma`, and :math:`W` uniform on :math:`\{0, \dots, s-1\}`.
    """

    sigma: float
    j: int  # s = 2**j
    ubits: int  # bits of the acceptance uniform in the second word: 63 - j
    lam: float  # fl(s / sigma)
    inv_lam: float  # fl(sigma / s), for the candidate only
    exp_neg_lam: float  # fl(exp(-lam))
    sigma_q: Fraction
    lam_q: Fraction


def _params(sigma: float) -> _Params:
    e = math.frexp(sigma)[1]  # sigma < 2**e
    j = max(0, e - _SPLIT_BITS)
    s = 1 << j
    lam = s / sigma
    return _Params(
        sigma=sigma,
        j=j,
        ubits=63 - j,
        lam=lam,
        inv_lam=sigma / s,
        exp_neg_lam=float(np.exp(-lam)),  # the same exp as the fast path: one assumption
        sigma_q=Fraction(sigma),
        lam_q=Fraction(s) / Fraction(sigma),
    )


# --------------------------------------------------------------------------------------------------------------
# method="lattice": fast vectorised round


def _fast_round(
    par: _Params, b1: np.ndarray, b2: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""One vectorised rejection round on candidate words ``b1`` (magnitude) and ``b2`` (sign, W, acceptance).

    Returns ``(value, accept, amb_mag, amb_acc)``: ``value`` (float64, exact integers) is meaningful where the
    magnitude was decided; ``accept`` marks decided acceptances; ``amb_mag`` marks candidates whose magnitude
    the fast path could not certify, ``amb_acc`` those whose magnitude is certified but whose acceptance
    is not. Everything not marked is a certified rejection. Every decision taken here is proven equal to
    the exact one (docs/noise.md); the ambiguous ones go to :func:`_resolve`.
    """
    # Magnitude: U1 in [b1, b1 + 1) * 2^-64, Q = max{q : U1 < e^{-q lam}}. Candidate from the cell's midpoint;
    # np.log's accuracy does not matter because the candidate is then verified against both thresholds.
    r1 = b1.astype(np.float64)
    q = np.log(r1 + 0.5)
    np.subtract(_LN_2_64, q, out=q)
    np.multiply(q, par.inv_lam, out=q)
    np.floor(q, out=q)
    np.maximum(q, 0.0, out=q)
    a = q * par.lam  # exponent of e^{-q lam}; |a_hat - a| <= 4.1u a (u = 2^-53)
    p_upper = np.exp(-a)
    p_upper *= _TWO_64  # e^{-q lam} in units of the cell
    p_lower = p_upper * par.exp_neg_lam  # e^{-(q+1) lam}
    eta = a + (2.0 + par.lam)  # "2": the lower threshold carries two exp errors
    eta *= _ETA
    # Certified: cell entirely below e^{-q lam} (Q >= q) and entirely at or above e^{-(q+1) lam} (Q <= q).
    ok = (r1 + 2.0) <= p_upper * (1.0 - eta)
    ok &= (r1 - 1.0) >= p_lower * (1.0 + eta) + _TINY

    # Second word: bit 63 = sign, bits [ubits, 63) = W, bits [0, ubits) = first bits of U2.
    negative = (b2 >> np.uint64(63)).astype(bool)
    r2 = (b2 & np.uint64((1 << par.ubits) - 1)).astype(np.float64)
    if par.j:
        w = ((b2 >> np.uint64(par.ubits)) & np.uint64((1 << par.j) - 1)).astype(np.float64)
        m = q * float(1 << par.j)
        m += w
    else:
        w = None
        m = q
    # Acceptance exponent A = W/sigma + (M - sigma)^2 / (2 sigma^2): CKS Alg. 3's bias with t = sigma, plus W/sigma
    # because the uniform W replaced e^{-W/t} in the proposal. Five roundings: |A_hat - A| <= 2^-49 (1 + A).
    d = m - par.sigma
    d /= par.sigma
    big_a = np.multiply(d, d, out=d)  # in place: d is not needed again
    big_a *= 0.5
    if w is not None:
        w /= par.sigma
        big_a += w
    p_acc = np.exp(-big_a)
    p_acc *= float(1 << par.ubits)
    big_a += 1.0
    big_a *= _ETA  # now the margin eta(1 + A)
    acc = (r2 + 2.0) <= p_acc * (1.0 - big_a)
    rej = (r2 - 1.0) >= p_acc * (1.0 + big_a) + _TINY
    # CKS: a proposal of (negative sign, 0) is rejected so that 0 is not counted twice.
    live = ok & ~(negative & (m == 0.0))
    accept = live & acc
    amb_acc = live & ~acc & ~rej
    np.negative(m, out=m, where=negative)
    return m, accept, ~ok, amb_acc


# --------------------------------------------------------------------------------------------------------------
# method="lattice": exact fallback


def _exp_neg_bounds(a: Fraction, bits: int) -> tuple[int, int]:
    r"""Integers ``lo <= 2**bits * exp(-a) <= hi`` for a rational ``a >= 0``, with ``hi - lo`` a few units.

    Pure integer arithmetic with directed rounding: :math:`e^{-a} = e^{-f} (e^{-1})^k` with :math:`k =
    \lfloor a \rfloor`; :math:`e^{-x}` for :math:`x \in [0, 1]` by its alternating Taylor series (terms
    decrease, so the tail is bounded by the first omitted term), powers by squaring rounded down for ``lo``
    and up for ``hi``. Guard bits absorb the error growth of the squarings.
    """
    if a < 0:
        raise ValueError(f"`a` must be >= 0 (found {a!r})")
    if a == 0:
        return 1 << bits, 1 << bits
    k, f_num = divmod(a.numerator, a.denominator)
    guard = 2 * k.bit_length() + bits.bit_length() + 16
    prec = bits + guard
    one = 1 << prec

    def series(num: int, den: int) -> tuple[int, int]:
        # e^{-num/den}, num <= den: sum_{i<N} (-1)^i t_i +- t_N, t_i = x^i / i! bracketed by (t_lo, t_hi)
        lo = hi = 0
        t_lo = t_hi = one
        i = 0
        while True:
            if i % 2 == 0:
                lo += t_lo
                hi += t_hi
            else:
                lo -= t_hi
                hi -= t_lo
            i += 1
            t_lo = (t_lo * num) // (den * i)
            t_hi = -((-t_hi * num) // (den * i))
            if t_hi <= 1:
                return max(lo - t_hi, 0), hi + t_hi

    lo, hi = series(f_num, a.denominator)
    if k:
        b_lo, b_hi = series(1, 1)
        while k:
            if k & 1:
                lo = (lo * b_lo) >> prec
                hi = -((-hi * b_hi) >> prec)
            k >>= 1
            if k:
                b_lo = (b_lo * b_lo) >> prec
                b_hi = -((-b_hi * b_hi) >> prec)
    return lo >> guard, -((-hi) >> guard)


class _LazyUniform:
    r"""A uniform :math:`U \in [0, 1)` of which only the cell :math:`[r 2^{-n}, (r+1) 2^{-n})` is known.

    More bits are drawn from ``source`` only when a comparison needs them, and they are kept: all later
    comparisons see the same U.
    """

    __slots__ = ("n", "r", "source")

    def __init__(self, r: int, n: int, source: _RawSource) -> None:
        self.r = r
        self.n = n
        self.source = source

    def refine(self) -> None:
        """Reveal 64 more bits of U."""
        self.r = (self.r << 64) | int(self.source.random_raw())
        self.n += 64

    def less_than_exp_neg(self, a: Fraction) -> bool:
        r"""Decide :math:`U < e^{-a}` exactly (``a`` rational >= 0)."""
        while True:
            lo, hi = _exp_neg_bounds(a, self.n + 64)
            if (self.r + 1) << 64 <= lo:  # whole cell below e^{-a}
                return True
            if self.r << 64 >= hi:  # whole cell at or above e^{-a}
                return False
            self.refine()


def _exact_q(u: _LazyUniform, lam: Fraction) -> int:
    r"""The exact :math:`Q = \max\{q \ge 0 : U < e^{-q\lambda}\}`, i.e. :math:`P[Q \ge q] = e^{-q\lambda}`."""
    while u.r < (1 << 64):  # make the cell narrow relative to U, so the float estimate is within +-1
        u.refine()
    q = max(0, math.floor((u.n * math.log(2.0) - math.log(u.r)) / float(lam)))
    while q > 0 and not u.less_than_exp_neg(q * lam):
        q -= 1
    while u.less_than_exp_neg((q + 1) * lam):
        q += 1
    return q


def _resolve(
    par: _Params, b1: int, b2: int, source: _RawSource, q: int | None = None
) -> int | None:
    r"""Exactly finish one candidate: its value if accepted, ``None`` if rejected.

    ``b1``/``b2`` are the candidate's two words (the same bits the fast path saw); ``q`` is its magnitude
    quotient when the fast path certified it. Further bits come from ``source``.
    """
    if q is None:
        q = _exact_q(_LazyUniform(b1, 64, source), par.lam_q)
    negative = b2 >> 63
    w = (b2 >> par.ubits) & ((1 << par.j) - 1)
    m = (q << par.j) + w
    if negative and m == 0:
        return None
    sigma = par.sigma_q
    a = Fraction(w) / sigma + (m - sigma) ** 2 / (2 * sigma**2)
    if _LazyUniform(b2 & ((1 << par.ubits) - 1), par.ubits, source).less_than_exp_neg(a):
        return -m if negative else m
    return None


# --------------------------------------------------------------------------------------------------------------
# method="lattice": driver


def _fill(par: _Params, out: np.ndarray, gen: np.random.Generator) -> None:
    """Fill ``out`` with iid draws, in vectorised rounds of candidates (never a loop over values)."""
    source = gen.bit_generator
    n = out.shape[0]
    filled = 0
    rate = 0.7  # running acceptance estimate; only sizes the next round
    while filled < n:
        need = n - filled
        k = min(_BLOCK, int(need / rate * 1.03) + 32)
        raw = source.random_raw(2 * k)
        value, accept, amb_mag, amb_acc = _fast_round(par, raw[:k], raw[k:])
        amb = np.flatnonzero(amb_mag | amb_acc)
        if amb.size:
            # Astronomically rare (~2^-27 per candidate at worst): finish those candidates exactly.
            value = value.astype(object)
            for i in amb.tolist():
                q_known = None if amb_mag[i] else int(abs(value[i])) >> par.j
                res = _resolve(par, int(raw[i]), int(raw[k + i]), source, q_known)
                accept[i] = res is not None
                value[i] = res if res is not None else 0
        taken = value[accept][:need]
        out[filled : filled + taken.shape[0]] = taken
        filled += taken.shape[0]
        rate = max(0.1, 0.5 * rate + 0.5 * (np.count_nonzero(accept) / k))


def _workers(size: int) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8, size // _MIN_PER_WORKER))


def _sample_lattice(sigma: float, size: int) -> np.ndarray:
    """The fast exact sampler; large sizes are split over threads, each with its own fresh generator."""
    par = _params(sigma)
    out = np.empty(size, dtype=np.int64)
    workers = _workers(size)
    if workers == 1:
        _fill(par, out, csprng())
        return out
    bounds = np.linspace(0, size, workers + 1).astype(np.int64)
    parts = [out[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]
    with ThreadPoolExecutor(max_workers=workers) as pool:  # NumPy ufuncs release the GIL
        for fut in [pool.submit(_fill, par, part, csprng()) for part in parts]:
            fut.result()
    return out
