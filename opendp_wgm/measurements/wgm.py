r"""The Weighted Gaussian Mechanism (WGM) for private set union / key release.

Gopi et al. 2020 (arXiv 2002.09745, Thm B.2); "Missing Mass for Differentially Private Domain Discovery"
(arXiv 2603.14016), Algorithm WGM:

1. each user keeps a uniform random subset of at most Δ0 distinct items;
2. each kept item gets weight :math:`1/\sqrt{t}` (``t`` = items the user keeps), summed per item;
3. :math:`\mathcal{N}(0, \sigma^2)` noise is added to every item's sum;
4. the items whose noisy sum exceeds the threshold T are released.

Steps 2–4 run on the lattice :math:`2^{-20}\mathbb{Z}` with exact discrete Gaussian noise
(:mod:`opendp_wgm.samplers.discrete_gaussian`); the privacy maps account for it (:mod:`opendp_wgm.privacy`).
Steps 1–2 are :func:`opendp_wgm.make_bound_user_items` and :func:`opendp_wgm.make_weighted_histogram`, steps
3–4 :func:`make_noisy_threshold`; :func:`make_wgm` is their chain, run by the kernel's plan functions
(:mod:`opendp_wgm.engines.polars`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

import opendp.prelude as dp
import polars as pl

from opendp_wgm._partial import _to_then
from opendp_wgm._spaces import _assert_features
from opendp_wgm._validation import _check_choice, _check_d_in, _check_execution, _check_positive, _check_real
from opendp_wgm.engines.polars import WEIGHT_LAT, release_above_threshold
from opendp_wgm.measurements._budget_boundary import budget_boundary
from opendp_wgm.measurements._spark import spark_space
from opendp_wgm.privacy.auto import DEFAULT_AUTO_FRACTION
from opendp_wgm.privacy.budget import check_gaussian_measure
from opendp_wgm.privacy.calibrate import WGMCalibration, calibrate_wgm
from opendp_wgm.privacy.gaussian import wgm_privacy_loss
from opendp_wgm.privacy.threshold import (
    LATTICE_BITS,
    MAX_SCALE,
    check_max_contributions,
)
from opendp_wgm.privacy.wgm_calibration import ThresholdMap
from opendp_wgm.samplers import NOISE_METHODS, NoiseMethod
from opendp_wgm.transformations import (
    histogram_space,
    make_bound_user_items,
    make_weighted_histogram,
)

__all__ = [
    "make_noisy_threshold",
    "make_wgm",
    "make_wgm_from_budget",
    "then_noisy_threshold",
    "then_wgm",
    "then_wgm_from_budget",
]

Engine = Literal["auto", "in-memory", "streaming"]


def check_noise(noise: str) -> NoiseMethod:
    """``noise`` if it names a discrete Gaussian sampler (:data:`opendp_wgm.samplers.NOISE_METHODS`)."""
    return _check_choice("noise", noise, NOISE_METHODS)


def wgm_privacy_map(
    *, scale: float, threshold: float, max_contributions: int, epsilon: float | None
) -> Callable[[int], tuple[float, float]]:
    """The WGM's privacy map (:func:`opendp_wgm.privacy.gaussian.wgm_privacy_loss`, ``docs/privacy.md`` §2–4) on a
    checked ``d_in``: the WGM and the baselines that share its map."""

    def privacy_map(d_in: int) -> tuple[float, float]:
        return wgm_privacy_loss(
            _check_d_in(d_in),
            scale=scale,
            threshold=threshold,
            max_contributions=max_contributions,
            epsilon=epsilon,
        )

    return privacy_map


def wgm_arguments(calibration: WGMCalibration, **options: Any) -> dict[str, Any]:
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


def of_wgm_budget(
    make: Callable[..., dp.Measurement], input_domain: dp.Domain, input_metric: dp.Metric, *, max_contributions: int,
    delta: float, epsilon: float | None, rho: float | None, noise_delta_fraction: float,
    privacy_map: ThresholdMap = wgm_privacy_loss, **options: Any,
) -> dp.Measurement:
    """``make`` (:func:`make_wgm`, or a constructor on the WGM's σ and T: :func:`opendp_wgm.make_policy_gaussian`)
    with :func:`opendp_wgm.calibrate_wgm`'s parameters for the budget and ``options``: the one calibration of
    :func:`make_wgm_from_budget` and :func:`opendp_wgm.make_policy_gaussian_from_budget`, and of any
    ``*_from_budget`` whose noise is the WGM's, T searched on its own ``privacy_map``
    (:func:`~opendp_wgm.privacy.wgm_calibration.calibrate_wgm`)."""
    calibration = calibrate_wgm(
        max_contributions=max_contributions, delta=delta, epsilon=epsilon, rho=rho,
        noise_delta_fraction=noise_delta_fraction, privacy_map=privacy_map,
    )
    return make(input_domain, input_metric, **wgm_arguments(calibration, **options))


def _check_scale(scale: float, name: str = "scale") -> float:
    scale = _check_positive(name, scale)
    if scale > MAX_SCALE:  # the sampler's range in lattice units is (0, 2^40]
        msg = f"`{name}` must be <= 2**{LATTICE_BITS} = {MAX_SCALE!r} (found {scale!r})"
        raise ValueError(msg)
    return scale


def _check_lattice_scale(epsilon: float | None, scale: float, name: str = "scale") -> None:
    # docs/privacy.md Lemma 3: the (ε, δ) map (the one with an ε) needs at least one lattice step of noise
    if epsilon is not None and scale < 1.0 / MAX_SCALE:
        msg = f"the (ε, δ) map needs `{name}` >= 2**-{LATTICE_BITS} (found {scale!r})"
        raise ValueError(msg)


def make_noisy_threshold(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    scale: float,
    threshold: float,
    output_measure: dp.Measure | None = None,
    epsilon: float | None = None,
    noise: NoiseMethod = "lattice",
) -> dp.Measurement:
    r"""Add exact discrete Gaussian noise to every weight of a weighted histogram; release those above T.

    Steps 3–4 of the WGM: :func:`opendp_wgm.make_wgm` is ``make_bound_user_items >> make_weighted_histogram >>
    make_noisy_threshold``.

    Parameters
    ----------
    input_domain, input_metric
        The output space of :func:`opendp_wgm.make_weighted_histogram`: a weighted-histogram domain and
        :func:`opendp_wgm.transformations.user_distance` with the same Δ0.
    scale
        σ, the standard deviation of the noise on each weight, in (0, 2^20] (at least 2^-20 under (ε, δ)).
    threshold
        T: an item is released when its noisy weight exceeds it.
    output_measure, epsilon, noise
        As for :func:`opendp_wgm.make_wgm`.

    Returns
    -------
    opendp.mod.Measurement
        Maps a histogram frame (item, ``weight`` on the lattice :math:`2^{-20}\mathbb Z`) to a ``pl.DataFrame``
        with the item column (a composite key's columns) and ``noisy_weight`` (Float64), sorted by item.

    Notes
    -----
    The noise is added on the lattice: ``weight`` times :math:`2^{20}` (an integer for every histogram of
    :func:`~opendp_wgm.make_weighted_histogram`; a weight off the lattice is rounded down) plus
    :math:`\mathcal N_{\mathbb Z}(0, (\sigma 2^{20})^2)`, compared with :math:`\lfloor T 2^{20}
floor`. The
    privacy map, in users, is the WGM's (``docs/privacy.md`` §2–4; :func:`opendp_wgm.wgm_privacy_loss`): it uses
    that each user adds :math:`w(t)` to each of its :math:`t \le \Delta_0` items, which the input metric states.

    Required features: ``contrib``, ``honest-but-curious``.
    """
    _assert_features()
    scale = _check_scale(scale)
    threshold = _check_real("threshold", threshold)
    noise = check_noise(noise)
    output_measure, epsilon = check_gaussian_measure(output_measure, epsilon)
    _check_lattice_scale(epsilon, scale)
    histogram = histogram_space(input_domain, input_metric)
    item, unit = histogram.item, 2.0**histogram.lattice_bits

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        # x 2^k is exact on the lattice (|sums| < 2^53); collects the histogram's plan once
        lattice = frame.lazy().select(item, (pl.col("weight") * unit).floor().cast(pl.Int64).alias(WEIGHT_LAT))
        released = release_above_threshold(lattice.collect(), item, scale=scale, threshold=threshold, noise=noise)
        return released.unnest(item) if histogram.composite else released  # a composite key's columns

    return dp.m.make_user_measurement(
        input_domain,
        input_metric,
        output_measure,
        function,
        wgm_privacy_map(
            scale=scale, threshold=threshold, max_contributions=histogram.max_contributions, epsilon=epsilon
        ),
    )


def make_wgm(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    scale: float,
    threshold: float,
    output_measure: dp.Measure | None = None,
    epsilon: float | None = None,
    noise: NoiseMethod = "lattice",
    item: str | Sequence[str] | None = None,
    passes: int = 1,
    engine: Engine = "auto",
) -> dp.Measurement:
    r"""Release the items whose weighted, noised user count exceeds a threshold (WGM set union).

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with
        ``dp.symmetric_id_distance`` (e.g. ``ctx.accountant.input_space`` of a ``dp.Context``): the release runs
        on Polars. From :func:`opendp_wgm.spark.spark_user_items_space`: it runs on Spark, on a
        ``pyspark.sql.DataFrame`` (``docs/engines.md``; ``noise``, ``passes``, ``engine`` keep their defaults).
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
        Item column, when the input domain is OpenDP's and holds more than one other column; or a list of
        two or more columns, a composite key (``docs/api.md``): the items are the distinct tuples of those
        columns, bounded per user like single items (Δ0 tuples per user across all of them).
    passes
        Process the users in this many disjoint hash buckets, one lazy plan each, and add up the
        histograms: the same release, with peak memory about 1/``passes`` of one pass (for inputs larger
        than memory, e.g. ``pl.scan_parquet``; ``docs/engines.md``). At most 1024: each pass re-scans the input.
    engine
        Polars engine that collects each pass: ``"auto"``, ``"in-memory"`` or ``"streaming"``.

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column (same name and dtype as the input; a composite
        key's columns) and ``noisy_weight`` (Float64), sorted by item. Rows with a null user or item (a null
        in any key column) are dropped first; empty data releases an empty frame (an error there would depend
        on the data).

    Notes
    -----
    The measurement is the chain ``make_bound_user_items(max_contributions) >> make_weighted_histogram(passes,
    engine) >> make_noisy_threshold(scale, threshold, ...)``: the histogram aggregates the bound step's per-user
    lists directly (:class:`~opendp_wgm.domains.BoundedUserItems`), so the data is bounded once.

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
    # the checks (and their order) of the steps below, before any is built
    max_contributions = check_max_contributions(max_contributions)
    scale = _check_scale(scale)
    threshold = _check_real("threshold", threshold)
    noise = check_noise(noise)
    passes, engine = _check_execution(passes, engine)
    output_measure, epsilon = check_gaussian_measure(output_measure, epsilon)
    _check_lattice_scale(epsilon, scale)
    spark = spark_space(input_domain, input_metric, item=item, noise=noise, passes=passes, engine=engine)
    if spark is not None:  # steps 1–4 as Spark plans (opendp_wgm.engines.spark), with make_noisy_threshold's map
        from opendp_wgm.engines.spark import wgm_function  # imported: the space is a Spark one

        function = wgm_function(spark, max_contributions, scale, threshold)
        privacy_map = wgm_privacy_map(
            scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=epsilon
        )
        return dp.m.make_user_measurement(input_domain, input_metric, output_measure, function, privacy_map)
    bound = make_bound_user_items(input_domain, input_metric, max_contributions=max_contributions, item=item)
    histogram = make_weighted_histogram(bound.output_domain, bound.output_metric, passes=passes, engine=engine)
    release = make_noisy_threshold(
        histogram.output_domain,
        histogram.output_metric,
        scale=scale,
        threshold=threshold,
        output_measure=output_measure,
        epsilon=epsilon,
        noise=noise,
    )
    return bound >> histogram >> release


@budget_boundary(single_item_columns={"noisy_weight": pl.lit(None, dtype=pl.Float64)})
def make_wgm_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int | Literal["auto"],
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    noise_delta_fraction: float = 0.5,
    noise: NoiseMethod = "lattice",
    item: str | Sequence[str] | None = None,
    passes: int = 1,
    engine: Engine = "auto",
    auto_fraction: float = DEFAULT_AUTO_FRACTION,
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
        Δ0 ≥ 1, or ``"auto"``: ``auto_fraction`` of the budget buys a private choice of Δ0 from the data, and the
        rest calibrates the WGM at it (:func:`opendp_wgm.make_auto_contributions`, ``docs/auto.md``); at Δ0 = 1
        under (ε, δ)-DP the optimal partition selection runs instead (``noisy_weight`` is then null).
    delta
        δ ∈ (0, 1), for one user.
    epsilon, rho
        Exactly one of them, > 0, for one user.
    noise_delta_fraction
        Share of δ spent on the noise under (ε, δ)-DP, in (0, 1).
    noise, item, passes, engine
        As for :func:`make_wgm`.
    auto_fraction
        With ``max_contributions="auto"`` only: the share of the budget spent on the choice, in (0, 0.5].

    Returns
    -------
    opendp.mod.Measurement
        :func:`make_wgm` with the calibrated ``scale`` and ``threshold``; with ``"auto"``, a measurement whose
        release is an :class:`~opendp_wgm.measurements.auto_contributions.AutoRelease` (the chosen Δ0 as its
        ``max_contributions``).

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm_from_budget(*wgm.user_items_space(), max_contributions=100, epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    """
    # @budget_boundary checked max_contributions: an integer here, never "auto"
    return of_wgm_budget(
        make_wgm, input_domain, input_metric, max_contributions=cast(int, max_contributions), delta=delta,
        epsilon=epsilon, rho=rho, noise_delta_fraction=noise_delta_fraction, noise=noise, item=item, passes=passes,
        engine=engine,
    )


then_noisy_threshold = _to_then(make_noisy_threshold)
then_wgm = _to_then(make_wgm)
then_wgm_from_budget = _to_then(make_wgm_from_budget)
