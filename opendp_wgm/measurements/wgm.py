r"""The Weighted Gaussian Mechanism (WGM) for private set union / key release.

Gopi et al. 2020 (arXiv 2002.09745, Thm B.2); "Missing Mass for Differentially Private Domain Discovery"
(arXiv 2603.14016), Algorithm WGM:

1. each user keeps a uniform random subset of at most Δ0 distinct items;
2. each kept item gets weight :math:`1/\sqrt{t}` (``t`` = items the user keeps), summed per item;
3. :math:`\mathcal{N}(0, \sigma^2)` noise is added to every item's sum;
4. the items whose noisy sum exceeds the threshold T are released.

Steps 2–4 run on the lattice :math:`2^{-20}\mathbb{Z}` with exact discrete Gaussian noise
(:mod:`opendp_wgm.samplers.discrete_gaussian`); the privacy maps account for it (:mod:`opendp_wgm.privacy`).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import opendp.prelude as dp
import polars as pl

from opendp_wgm._partial import _to_then
from opendp_wgm._validation import _check_d_in, _check_int, _check_positive, _check_real
from opendp_wgm.domains import _prepare_frame, _resolve_space, _Space
from opendp_wgm.samplers import sample_discrete_gaussian
from opendp_wgm.privacy.budget import check_gaussian_measure
from opendp_wgm.privacy.calibrate import WGMCalibration, calibrate_wgm
from opendp_wgm.privacy.gaussian import wgm_privacy_loss
from opendp_wgm.privacy.threshold import LATTICE_BITS, MAX_SCALE, check_max_contributions
from opendp_wgm.transformations import _assert_features, _bounded_lists_plan, _lattice_histogram_plan

__all__ = ["make_wgm", "make_wgm_from_budget", "then_wgm", "then_wgm_from_budget"]

Noise = Literal["lattice", "opendp"]
Engine = Literal["auto", "in-memory", "streaming"]
_NOISE_METHODS = ("lattice", "opendp")
_ENGINES = ("auto", "in-memory", "streaming")
#: Most ``passes``: each pass re-scans the input, so beyond ~10^3 the scans, not memory, dominate.
MAX_PASSES = 1024


def _check_noise(noise: str) -> str:
    if noise not in _NOISE_METHODS:
        msg = f"`noise` must be one of {_NOISE_METHODS}, got {noise!r}"
        raise ValueError(msg)
    return noise


def _wgm_privacy_map(
    *, scale: float, threshold: float, max_contributions: int, epsilon: float | None
) -> Callable[[int], tuple[float, float]]:
    """The WGM's privacy map (:func:`opendp_wgm.privacy.gaussian.wgm_privacy_loss`, ``docs/privacy.md`` §2–4) on a checked
    ``d_in``: the WGM and the baselines that share its map."""

    def privacy_map(d_in: int) -> tuple[float, float]:
        return wgm_privacy_loss(
            _check_d_in(d_in),
            scale=scale,
            threshold=threshold,
            max_contributions=max_contributions,
            epsilon=epsilon,
        )

    return privacy_map


def _noisy_above_threshold(
    weights_lat: np.ndarray, *, scale: float, threshold: float, noise: Noise = "lattice"
) -> tuple[np.ndarray, np.ndarray]:
    """Steps 3–4 on the lattice: the integer sums (units 2^-k) plus discrete Gaussian noise, and which exceed T.

    ``noisy_lat > floor(T 2^k)`` is exactly ``noisy > T`` on the lattice; integers only. The Polars release
    and the Spark executors (:mod:`opendp_wgm.spark`) both call this.
    """
    unit = 2.0**LATTICE_BITS
    noisy = weights_lat + sample_discrete_gaussian(scale * unit, weights_lat.shape[0], method=noise)
    return noisy, noisy > math.floor(threshold * unit)


def _weights_frame(items: pl.Series, noisy_lat: pl.Series) -> pl.DataFrame:
    """The released frame: ``items`` and ``noisy_weight`` (Float64, the noisy lattice sums ``noisy_lat`` times
    2^-k, exactly), sorted by item."""
    return (
        items.to_frame()
        .with_columns(noisy_weight=noisy_lat.cast(pl.Float64) / 2.0**LATTICE_BITS)
        .sort(items.name)  # the group-by's row order is arbitrary: sort so that order carries nothing
    )


def _release_above_threshold(
    histogram: pl.DataFrame, item: str, *, scale: float, threshold: float, noise: Noise
) -> pl.DataFrame:
    """Noise the lattice sums (column ``weight_lat``) and keep the items above the threshold."""
    noisy, keep = _noisy_above_threshold(
        histogram["weight_lat"].to_numpy(), scale=scale, threshold=threshold, noise=noise
    )
    return _weights_frame(histogram.get_column(item).filter(pl.Series(keep)), pl.Series(noisy[keep], dtype=pl.Int64))


def _check_execution(passes: int, engine: str) -> tuple[int, Engine]:
    passes = _check_int("passes", passes, minimum=1, maximum=MAX_PASSES)
    if engine not in _ENGINES:
        msg = f"`engine` must be one of {_ENGINES}, got {engine!r}"
        raise ValueError(msg)
    return passes, engine  # type: ignore[return-value]


def _lattice_histogram(
    lf: pl.LazyFrame, space: _Space, max_contributions: int, *, passes: int = 1, engine: Engine = "auto"
) -> pl.DataFrame:
    """The lattice histogram (item, ``weight_lat``), computed over ``passes`` disjoint buckets of users.

    Bounding is per user, so summing the buckets' histograms gives the same function of the data and the
    seed; each pass holds about 1/``passes`` of the users in memory (``docs/engines.md``). The bucket hash
    needs no secrecy: it only decides which pass handles a user.
    """
    if passes == 1:
        lists = _bounded_lists_plan(lf, space, max_contributions)
        return _lattice_histogram_plan(lists, space, max_contributions).collect(engine=engine)
    bucket_seed = secrets.randbits(64)
    parts = []
    for bucket in range(passes):  # a loop over passes, not rows: each pass is one lazy plan
        users = lf.filter(pl.col(space.user).hash(bucket_seed) % passes == bucket)
        lists = _bounded_lists_plan(users, space, max_contributions)
        parts.append(_lattice_histogram_plan(lists, space, max_contributions).collect(engine=engine))
    return pl.concat(parts).group_by(space.item).agg(pl.col("weight_lat").sum())


def _wgm_function(
    space: _Space,
    max_contributions: int,
    scale: float,
    threshold: float,
    noise: Noise,
    *,
    passes: int = 1,
    engine: Engine = "auto",
    prepared: bool = False,
):
    """The WGM's release; with ``prepared``, on a frame that already went through :func:`_prepare_frame`
    (which must not run twice: it evaluates the identifier expression into the user-key column)."""

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        lf = frame if prepared else _prepare_frame(frame, space)
        histogram = _lattice_histogram(lf, space, max_contributions, passes=passes, engine=engine)
        return _release_above_threshold(
            histogram, space.item, scale=scale, threshold=threshold, noise=noise
        )

    return function


def _wgm_arguments(calibration: WGMCalibration, **options: Any) -> dict[str, Any]:
    """The keyword arguments of :func:`make_wgm` from a calibration, (ε, δ)-DP or approximate zCDP, with
    ``options`` passed through unchanged (``make_wgm_from_budget`` here and in :mod:`opendp_wgm.spark`)."""
    return {
        "max_contributions": calibration.max_contributions,
        "scale": calibration.scale,
        "threshold": calibration.threshold,
        "output_measure": calibration.budget.measure,
        "epsilon": calibration.epsilon,
        **options,
    }


def make_wgm(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    scale: float,
    threshold: float,
    output_measure: dp.Measure | None = None,
    epsilon: float | None = None,
    noise: Noise = "lattice",
    item: str | None = None,
    passes: int = 1,
    engine: Engine = "auto",
) -> dp.Measurement:
    r"""Release the items whose weighted, noised user count exceeds a threshold (WGM set union).

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with
        ``dp.symmetric_id_distance`` (e.g. ``ctx.accountant.input_space`` of a ``dp.Context``).
    max_contributions
        Δ0 in [1, 2^20]: each user keeps a uniform random subset of at most this many distinct items.
    scale
        σ, the standard deviation of the Gaussian noise on each item's weight, in (0, 2^20]
        (at least 2^-20 under the (ε, δ) measure).
    threshold
        T: an item is released when its noisy weight exceeds it.
    output_measure
        ``dp.approximate(dp.zero_concentrated_divergence())`` (default; composes in OpenDP compositors and
        the Context) or ``dp.approximate(dp.max_divergence())`` (then ``epsilon`` is required).
    epsilon
        Only with the (ε, δ) measure: the ε at which the privacy profile is reported for one user.
    noise
        ``"lattice"`` (default): this package's fast exact discrete Gaussian sampler; ``"opendp"``: OpenDP's
        exact sampler (slow: ~20–90 µs per item). Both draw the same distribution.
    item
        Item column, when the input domain is OpenDP's and holds more than one other column.
    passes
        Process the users in this many disjoint hash buckets, one lazy plan each, and add up the
        histograms: the same release, with peak memory about 1/``passes`` of one pass (for inputs larger
        than memory, e.g. ``pl.scan_parquet``; ``docs/engines.md``). At most 1024: each pass re-scans the input.
    engine
        Polars engine that collects each pass: ``"auto"``, ``"in-memory"`` or ``"streaming"``.

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column (same name and dtype as the input) and
        ``noisy_weight`` (Float64), sorted by item. Rows with a null user or item are dropped first; empty
        data releases an empty frame (an error there would depend on the data).

    Notes
    -----
    Neighbouring datasets differ by the rows of ``d_in`` users (add or remove). Privacy map
    (``docs/privacy.md`` §2–4), with :math:`w(t) = \lfloor 2^{20}/\sqrt t\rfloor 2^{-20}` and
    :math:`q(w) = \bar\Phi((\lfloor T 2^{20}\rfloor 2^{-20} - w)/\sigma)`:

    .. math::
        d_{in} = 1:\quad \rho = \frac{1}{2\sigma^2},\quad
        \delta = \max_{t=1..\Delta_0} 1 - (1 - q(w(t)))^t

    and for :math:`d_{in} = k > 1`, :math:`\rho = k^2/(2\sigma^2)` with the group bound
    :math:`\delta = \min(1, k\Delta_0\,q(0) + \sqrt{\Delta_0}\,(q(k) - q(0)))`. Under the (ε, δ) measure the
    map is :math:`(k\varepsilon,\ \delta_{\mathcal N}(k\varepsilon - a; \sigma, k) + \delta_T(k))` with the
    analytic Gaussian profile :math:`\delta_{\mathcal N}` (Balle & Wang 2018) and a lattice slack
    :math:`a < 10^{-6}`.

    Required features: ``contrib``, ``honest-but-curious``.

    References
    ----------
    Gopi, Gulhane, Kulkarni, Shen, Shokouhi, Yekhanin (2020), arXiv 2002.09745.
    Missing Mass for Differentially Private Domain Discovery (2026), arXiv 2603.14016.
    Canonne, Kamath, Steinke (2020), The Discrete Gaussian for Differential Privacy, arXiv 2004.00010.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=100, scale=3.88414, threshold=20.7898)
    >>> rho, delta = m.map(1)
    >>> round(rho, 5), delta < 5e-6
    (0.03314, True)
    """
    _assert_features()
    max_contributions = check_max_contributions(max_contributions)
    scale = _check_positive("scale", scale)
    if scale > MAX_SCALE:  # the sampler's range in lattice units is (0, 2^40]
        msg = f"`scale` must be <= 2**{LATTICE_BITS} = {MAX_SCALE!r} (found {scale!r})"
        raise ValueError(msg)
    threshold = _check_real("threshold", threshold)
    noise = _check_noise(noise)
    passes, engine = _check_execution(passes, engine)
    output_measure, epsilon = check_gaussian_measure(output_measure, epsilon)
    # docs/privacy.md Lemma 3: the (ε, δ) map needs at least one lattice step of noise
    if epsilon is not None and scale < 1.0 / MAX_SCALE:
        msg = f"the (ε, δ) map needs `scale` >= 2**-{LATTICE_BITS} (found {scale!r})"
        raise ValueError(msg)
    space = _resolve_space(input_domain, input_metric, item)
    return dp.m.make_user_measurement(
        input_domain,
        input_metric,
        output_measure,
        _wgm_function(space, max_contributions, scale, threshold, noise, passes=passes, engine=engine),
        _wgm_privacy_map(scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=epsilon),
    )


def make_wgm_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    noise_delta_fraction: float = 0.5,
    noise: Noise = "lattice",
    item: str | None = None,
    passes: int = 1,
    engine: Engine = "auto",
) -> dp.Measurement:
    r"""The WGM calibrated to a per-user budget: (ε, δ)-DP or approximate (ρ, δ)-zCDP.

    Calibration searches on the privacy maps (:func:`opendp_wgm.calibrate_wgm`, which also shows the
    chosen σ and T); the measurement is then :func:`make_wgm` with those parameters, so
    ``m.check(1, budget)`` holds. With ``epsilon`` the output measure is
    ``dp.approximate(dp.max_divergence())`` and ``noise_delta_fraction`` of δ pays for the noise (the
    paper's calibration: 1/2); with ``rho`` it is ``dp.approximate(dp.zero_concentrated_divergence())`` and
    all of δ pays for the threshold.

    Parameters
    ----------
    input_domain, input_metric
        As for :func:`make_wgm`.
    max_contributions
        Δ0 ≥ 1.
    delta
        δ ∈ (0, 1), for one user.
    epsilon, rho
        Exactly one of them, > 0, for one user.
    noise_delta_fraction
        Share of δ spent on the noise under (ε, δ)-DP, in (0, 1).
    noise, item, passes, engine
        As for :func:`make_wgm`.

    Returns
    -------
    opendp.mod.Measurement
        :func:`make_wgm` with the calibrated ``scale`` and ``threshold``.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm_from_budget(*wgm.user_items_space(), max_contributions=100, epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    """
    _assert_features()
    calibration = calibrate_wgm(
        max_contributions=max_contributions,
        delta=delta,
        epsilon=epsilon,
        rho=rho,
        noise_delta_fraction=noise_delta_fraction,
    )
    return make_wgm(
        input_domain,
        input_metric,
        **_wgm_arguments(calibration, noise=noise, item=item, passes=passes, engine=engine),
    )


then_wgm = _to_then(make_wgm)
then_wgm_from_budget = _to_then(make_wgm_from_budget)
