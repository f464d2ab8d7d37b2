r"""Set-union baselines: the policy mechanisms of the paper's experiments.

- :func:`make_policy_gaussian` — Gopi et al. (2020) Policy Gaussian: users, in a random order, move the
  weights of their (Δ0-bounded) items toward a cap Γ = T + ασ by a step of ℓ2 length at most 1; Gaussian
  noise and the WGM's threshold T are then applied. Default update: Gopi's ℓ2 descent.
  ``descent="reference_l1"`` is the paper reference's key-ordered "max-sum" rule, kept for comparison only.
- :func:`make_policy_greedy` — Carvalho et al. (2022) Policy Greedy: no Δ0, each user spends an ℓ1
  budget of 1 greedily on its most frequent items; Laplace noise and threshold. The reference's privacy bug
  (noising and releasing items that no user gave weight to, a quirk of the paper's reference code) is fixed.

Everything that is noised lives on the lattice :math:`2^{-20}\mathbb{Z}` (integers in code) and is noised
by exact samplers, as in :mod:`opendp_wgm.measurements.wgm`. The policies are sequential over users by
nature: the input is turned into CSR arrays (user → item codes) with Polars, and a Python loop over users
applies a vectorised NumPy update to an ``int64`` weight vector; with Numba installed (extra ``[fast]``) the ℓ2
descent's loop and Policy Gaussian's preparation are compiled, with identical results
(:mod:`opendp_wgm.measurements.baselines._policy_jit`). The
privacy arguments, and the places where they are *not* complete, are in ``docs/baselines.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

import opendp.prelude as dp
import polars as pl

from opendp_wgm._partial import _to_then
from opendp_wgm._spaces import _assert_features, _released, _resolve_space
from opendp_wgm._validation import _check_choice, _check_d_in, _check_positive, _check_real
from opendp_wgm.engines.polars import (
    release_above_threshold,
)
from opendp_wgm.measurements.baselines._policy_csr import _csr
from opendp_wgm.measurements.baselines._policy_weights import (
    _UNIT,
    _cap_on_lattice,
    _policy_weights,
    _positive_histogram,
)
from opendp_wgm.measurements.wgm import check_noise, of_wgm_budget, wgm_privacy_map
from opendp_wgm.privacy.budget import Budget, check_gaussian_measure, measure_of
from opendp_wgm.privacy.calibrate import calibrate_policy_greedy
from opendp_wgm.privacy.threshold import LATTICE_BITS, check_max_contributions
from opendp_wgm.samplers import NoiseMethod, sample_discrete_laplace

__all__ = [
    "make_policy_gaussian",
    "make_policy_gaussian_from_budget",
    "make_policy_greedy",
    "make_policy_greedy_from_budget",
    "then_policy_gaussian",
    "then_policy_gaussian_from_budget",
    "then_policy_greedy",
    "then_policy_greedy_from_budget",
]

Descent = Literal["l2", "reference_l1"]
_DESCENTS: tuple[Descent, ...] = ("l2", "reference_l1")


def assert_idealized() -> None:
    """The policy mechanisms' maps rest on published proofs that our implementation meets only ideally."""
    _assert_features()
    try:
        dp.assert_features("idealized-numerics")
    except dp.OpenDPException as err:
        msg = (
            'the policy baselines need dp.enable_features("idealized-numerics") as well: their privacy maps '
            "are the published ones (Gopi et al. 2020; Carvalho et al. 2022), which assume exact arithmetic "
            "(the ℓ2 contraction of the policy update) or leave a gap (support changes of Policy Greedy); "
            "see docs/baselines.md. Use them to compare, not to publish."
        )
        raise dp.OpenDPException("FailedFunction", msg) from err


def _check_descent(descent: Any) -> Descent:
    return _check_choice("descent", descent, _DESCENTS)

# ----------------------------------------------------------------------------------------------------------
# Policy Gaussian
# ----------------------------------------------------------------------------------------------------------
def make_policy_gaussian(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    scale: float,
    threshold: float,
    alpha: float = 3.0,
    descent: Descent = "l2",
    output_measure: dp.Measure | None = None,
    epsilon: float | None = None,
    noise: NoiseMethod = "lattice",
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Policy Gaussian set union (Gopi et al. 2020): a sequential ℓ2 policy, then noise and the WGM threshold.

    1. Each user keeps a uniform random subset of at most Δ0 distinct items (as in the WGM).
    2. Users are processed in a uniformly random order drawn at call time. Each moves the weights of its
       items that are below the cap :math:`\Gamma = T + \alpha\sigma` toward it, by a step of ℓ2 length at most
       1 (``descent``), rounded down onto the lattice :math:`2^{-20}\mathbb{Z}`.
    3. Every item with positive weight gets discrete Gaussian noise of scale σ and is released if its noisy
       weight exceeds T.

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with
        ``dp.symmetric_id_distance``.
    max_contributions
        Δ0 ≥ 1, the most distinct items a user keeps.
    scale
        σ > 0 of the Gaussian noise.
    threshold
        T, the release threshold (the WGM's).
    alpha
        α ≥ 0: the cap is :math:`\Gamma = T + \alpha\sigma` (the paper: 3).
    descent : {'l2', 'reference_l1'}
        ``'l2'`` (default): Gopi et al.'s ℓ2 descent, which they prove contractive. ``'reference_l1'``: the
        paper reference's default "L1" rule (heyyjudes' key-ordered max-sum), **for comparison only: no proof
        that it is contractive is known**, so its map below is not established (needs Γ ≥ 1).
    output_measure, epsilon
        As in :func:`opendp_wgm.make_wgm`: approximate zCDP (default) or, with ``epsilon``, (ε, δ)-DP.
    noise : {'lattice', 'opendp'}
        Sampler of the discrete Gaussian, as in :func:`opendp_wgm.make_wgm`.
    item
        The item column or columns, as for :func:`opendp_wgm.make_wgm`.

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column (input dtype) and ``noisy_weight``, sorted
        by item — the WGM's output shape.

    Notes
    -----
    The map is the WGM's (:func:`opendp_wgm.privacy.gaussian.wgm_privacy_loss`): for ``d_in = 1``,
    :math:`\rho = 1/(2\sigma^2)` and :math:`\delta_T = \max_{t \le \Delta_0} 1 - (1 - q(w(t)))^t`; for
    ``d_in > 1`` the WGM's group bound. Why the same map (``docs/baselines.md`` §2): (a) every user's increment
    has ℓ2 ≤ 1 exactly (rounded down, checked in integers); (b) with a contractive update the histograms
    of neighbours differ by at most 1 in ℓ2 (Gopi et al. 2020, §5, policy Gaussian theorem and the
    contractivity of ℓ2 descent); (c) the items that only the extra user holds all receive the same
    increment, at most :math:`\lfloor 2^{20}/\sqrt t\rfloor 2^{-20}` for ``t`` such items — the WGM's worst case.

    **Caveat** — (b) is proved for exact real arithmetic. Rounding increments down keeps (a) and (c) exact but
    does not preserve the ℓ2 contraction exactly (two histograms can round differently, by up to one lattice
    step per coordinate and later user). Hence the ``"idealized-numerics"`` feature is required, as OpenDP
    does for maps that assume exact arithmetic. This is a comparison baseline; publish with
    :func:`opendp_wgm.make_wgm`.

    Required features: ``contrib``, ``honest-but-curious``, ``idealized-numerics``.

    References
    ----------
    Gopi, Gulhane, Kulkarni, Shen, Shokouhi, Yekhanin (2020), Differentially Private Set Union, arXiv 2002.09745.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> from opendp_wgm.measurements.baselines import make_policy_gaussian
    >>> dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")
    >>> m = make_policy_gaussian(*wgm.user_items_space(), max_contributions=100, scale=3.88414, threshold=20.7898)
    >>> w = wgm.make_wgm(*wgm.user_items_space(), max_contributions=100, scale=3.88414, threshold=20.7898)
    >>> m.map(1) == w.map(1)
    True
    """
    assert_idealized()
    max_contributions = check_max_contributions(max_contributions)
    scale = _check_positive("scale", scale)
    threshold = _check_real("threshold", threshold)
    alpha = _check_real("alpha", alpha, minimum=0.0)
    descent = _check_descent(descent)
    noise = check_noise(noise)
    output_measure, epsilon = check_gaussian_measure(output_measure, epsilon)
    cap = _cap_on_lattice(threshold + alpha * scale)
    if cap < 1:
        msg = f"the cap `threshold + alpha * scale` must be > 0 (found {threshold + alpha * scale!r})"
        raise ValueError(msg)
    if descent == "reference_l1" and cap < _UNIT:
        msg = (
            "descent='reference_l1' needs a cap `threshold + alpha * scale` >= 1 (its threshold argument "
            f"does; found {threshold + alpha * scale!r})"
        )
        raise ValueError(msg)
    space = _resolve_space(input_domain, input_metric, item)

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        data = _csr(
            frame, space, max_contributions=max_contributions, key_order=descent == "reference_l1", priority_order=False
        )
        weights = _policy_weights(data, cap, descent)
        histogram = _positive_histogram(data, weights, space.item)
        released = release_above_threshold(histogram, space.item, scale=scale, threshold=threshold, noise=noise)
        return _released(released, space)

    privacy_map = wgm_privacy_map(
        scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=epsilon
    )
    return dp.m.make_user_measurement(input_domain, input_metric, output_measure, function, privacy_map)


def make_policy_gaussian_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    alpha: float = 3.0,
    descent: Descent = "l2",
    noise_delta_fraction: float = 0.5,
    noise: NoiseMethod = "lattice",
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Policy Gaussian with the WGM's σ and T for the same budget (:func:`opendp_wgm.calibrate_wgm`).

    The two mechanisms share one map, so the WGM's calibration passes ``m.check(1, budget)`` here too and the
    comparison is at equal noise and threshold, as in the paper. See :func:`make_policy_gaussian`.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> from opendp_wgm.measurements.baselines import make_policy_gaussian_from_budget
    >>> dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")
    >>> m = make_policy_gaussian_from_budget(*wgm.user_items_space(), max_contributions=100, epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    """
    assert_idealized()
    return of_wgm_budget(
        make_policy_gaussian, input_domain, input_metric, max_contributions=max_contributions, delta=delta,
        epsilon=epsilon, rho=rho, noise_delta_fraction=noise_delta_fraction, alpha=alpha, descent=descent, noise=noise,
        item=item,
    )


# ----------------------------------------------------------------------------------------------------------
# Policy Greedy
# ----------------------------------------------------------------------------------------------------------
def _laplace_tail(m: int, lattice_scale: float) -> float:
    r""":math:`P[Z \ge m]` for the discrete Laplace :math:`P[Z = z] \propto e^{-|z|/s}` on the integers.

    :math:`q^m/(1 + q)` for :math:`m \ge 1` with :math:`q = e^{-1/s}` (and :math:`1 - q^{1-m}/(1+q)` below),
    evaluated in floats and inflated by a relative 1e-12 (exp is accurate to a few ulp).
    """
    q = math.exp(-1.0 / lattice_scale)
    tail = math.exp(-m / lattice_scale) / (1.0 + q) if m >= 1 else 1.0 - math.exp(-(1 - m) / lattice_scale) / (1.0 + q)
    return min(1.0, tail * (1.0 + 1e-12))


def greedy_threshold_delta(*, scale: float, threshold: float, alpha: float = 3.0, d_in: int = 1) -> float:
    r"""The probability that Policy Greedy releases an item only the larger neighbour's extra users hold.

    With the fix (zero-weight items are never noised), each of ``d_in`` extra users gives positive weight to
    at most one item nobody else holds, provided the cap is at least ``d_in`` (``docs/baselines.md`` §3).
    Their total weight is at most ``d_in``; the release probability :math:`f(w) = P[Z \ge F + 1 - w]`
    (:math:`F = \lfloor T 2^{20}\rfloor`) is convex in ``w``, so

    .. math:: \delta_T(k) \le f(k) + (k - 1) f(0), \qquad \delta_T(1) = f(1).

    Returns 1 when the cap :math:`\max(T + \alpha\lambda, 1)` is below ``d_in`` (no bound is claimed).
    """
    scale = _check_positive("scale", scale)
    threshold = _check_real("threshold", threshold)
    alpha = _check_real("alpha", alpha, minimum=0.0)
    d_in = _check_d_in(d_in)
    return _greedy_threshold_delta(scale, threshold, alpha, d_in)


@lru_cache(maxsize=1024)
def _greedy_threshold_delta(scale: float, threshold: float, alpha: float, d_in: int) -> float:
    if d_in == 0:
        return 0.0
    if _greedy_cap(threshold, alpha, scale) < d_in * _UNIT:
        return 1.0
    floor_t = math.floor(threshold * _UNIT)
    lattice_scale = scale * _UNIT
    delta = _laplace_tail(floor_t + 1 - d_in * _UNIT, lattice_scale)
    if d_in > 1:
        delta += (d_in - 1) * _laplace_tail(floor_t + 1, lattice_scale)
    return min(1.0, delta)


def _greedy_cap(threshold: float, alpha: float, scale: float) -> int:
    """Γ = max(T + αλ, 1) on the lattice (the cap of the paper's reference code)."""
    return max(_cap_on_lattice(threshold + alpha * scale), _UNIT)


def make_policy_greedy(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    scale: float,
    threshold: float,
    alpha: float = 3.0,
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Policy Greedy set union (Carvalho et al. 2022, "GW"), with the reference's privacy bug fixed.

    1. No Δ0 and no dedup: each user's raw rows define its distinct items and their multiplicities.
    2. Users are processed in a uniformly random order drawn at call time. Each spends an ℓ1 budget of 1 on
       its items below the cap :math:`\Gamma = \max(T + \alpha\lambda, 1)`, most frequent first: an item whose gap
       to the cap is below the remaining budget is filled; the first one that is not gets the rest.
       Weights live on the lattice :math:`2^{-20}\mathbb{Z}` and the update is exact integer arithmetic.
    3. **Only items with positive weight** get discrete Laplace noise (scale λ, OpenDP's exact sampler) and are
       released if the noisy weight exceeds T. (The reference also noises and releases items that a user held
       but gave no weight to: with no Δ0 a user can add unboundedly many, and its δ fails.)

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with
        ``dp.symmetric_id_distance``.
    scale
        λ > 0, the Laplace scale in weight units (ε = 1/λ per user).
    threshold
        T. The paper: :math:`1 + \ln(1/(2\delta))/\varepsilon`; :func:`make_policy_greedy_from_budget`
        computes the smallest lattice T for a δ.
    alpha
        α ≥ 0 of the cap.
    item
        The item column or columns, as for :func:`opendp_wgm.make_wgm`.

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column and ``noisy_weight``, sorted by item.

    Notes
    -----
    Output measure ``dp.approximate(dp.max_divergence())``; ``m.map(d_in) = (d_in/λ, δ_T(d_in))`` with
    :func:`greedy_threshold_delta`. The ε part rests on the ℓ1 contraction of the greedy policy, on which
    Carvalho et al. (2022) build, following Gopi et al. (2020, §5): neighbouring histograms differ by at
    most ``d_in`` in ℓ1, and the
    discrete Laplace is ``d_in/λ``-DP for such shifts. The δ part covers the items only the extra users hold
    (at most one positive item each). **Caveat** (``docs/baselines.md`` §3): an item held by others can have
    zero weight in one neighbour and positive weight in the other (later users' greedy walks shift); it is
    then noised in only one of them. The published argument does not cover these support changes and we
    have no data-independent bound on their number, so the map is not established for this variant either;
    the ``"idealized-numerics"`` feature is required as an explicit opt-in.

    Required features: ``contrib``, ``honest-but-curious``, ``idealized-numerics``.

    References
    ----------
    R. S. Carvalho et al. (2022), Incorporating Item Frequency for Differentially Private Set Union, AAAI.
    Gopi et al. (2020), arXiv 2002.09745.
    """
    assert_idealized()
    scale = _check_positive("scale", scale)
    threshold = _check_real("threshold", threshold)
    alpha = _check_real("alpha", alpha, minimum=0.0)
    space = _resolve_space(input_domain, input_metric, item)
    cap = _greedy_cap(threshold, alpha, scale)
    floor_t = math.floor(threshold * _UNIT)
    lattice_scale = scale * _UNIT

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        data = _csr(frame, space, max_contributions=None, key_order=False, priority_order=True)
        weights = _policy_weights(data, cap, "greedy")
        histogram = _positive_histogram(data, weights, space.item)
        noisy = sample_discrete_laplace(histogram["weight_lat"].to_numpy(), lattice_scale)
        keep = noisy > floor_t
        released = (
            histogram.select(space.item)
            .filter(pl.Series(keep))
            .with_columns(noisy_weight=pl.Series(noisy[keep], dtype=pl.Int64).cast(pl.Float64) / _UNIT)
            .sort(space.item)
        )
        return _released(released, space)

    def privacy_map(d_in: int) -> tuple[float, float]:
        d_in = _check_d_in(d_in)
        if d_in == 0:
            return 0.0, 0.0
        return d_in / scale, _greedy_threshold_delta(scale, threshold, alpha, d_in)

    return dp.m.make_user_measurement(input_domain, input_metric, measure_of("approx_dp"), function, privacy_map)


def make_policy_greedy_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    epsilon: float,
    delta: float,
    alpha: float = 3.0,
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Policy Greedy calibrated to (ε, δ): λ = 1/ε and the smallest lattice T with :math:`\delta_T(1) \le \delta`.

    The paper's threshold is :math:`1 + \ln(1/(2\delta))/\varepsilon` (11.8198 at ε = 1, δ = 1e-5); the discrete
    Laplace's tail :math:`q^m/(1+q)` moves it by about one lattice step.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> from opendp_wgm.measurements.baselines import make_policy_greedy_from_budget
    >>> dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")
    >>> m = make_policy_greedy_from_budget(*wgm.user_items_space(), epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    """
    assert_idealized()
    budget = Budget.of(epsilon=epsilon, delta=delta)
    alpha = _check_real("alpha", alpha, minimum=0.0)
    scale, floor_t = calibrate_policy_greedy(
        budget,
        lattice_bits=LATTICE_BITS,
        threshold_delta=lambda scale, floor_t: _greedy_threshold_delta(scale, floor_t / _UNIT, alpha, 1),
    )
    return make_policy_greedy(
        input_domain, input_metric, scale=scale, threshold=floor_t / _UNIT, alpha=alpha, item=item
    )


then_policy_gaussian = _to_then(make_policy_gaussian)
then_policy_gaussian_from_budget = _to_then(make_policy_gaussian_from_budget)
then_policy_greedy = _to_then(make_policy_greedy)
then_policy_greedy_from_budget = _to_then(make_policy_greedy_from_budget)
