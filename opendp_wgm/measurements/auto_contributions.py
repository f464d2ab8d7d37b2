r"""``max_contributions="auto"``: a private choice of Δ0, then the mechanism at the chosen Δ0, as one measurement.

:func:`make_auto_contributions` composes two stages on the same data:

1. the users' distinct-item counts, binned over the public grid :data:`~opendp_wgm.privacy.auto.GRID`
   (one bin per user), are counted once; ``auto_fraction`` of the budget buys the choice from them, in two steps
   with exact noise (discrete Laplace under (ε, δ)-DP, discrete Gaussian under approximate zCDP): the single-item
   test (:func:`~opendp_wgm.privacy.auto.passes_single_item_test`, on two counts: one item, more) chooses
   Δ0 = 1 at a fifteenth of ``auto_fraction``; where it does not pass, the rule
   :func:`~opendp_wgm.privacy.auto.choose_max_contributions` reads Δ0 off the noisy bins;
2. the candidate measurement at that Δ0 (built, and so validated, for every grid point at construction, at the
   rest of the budget: ``1 − auto_fraction/15`` of it after the test, ``1 − auto_fraction`` after the
   histogram) runs on the data.

The release is an :class:`AutoRelease`: the candidate's ``pl.DataFrame`` with the chosen Δ0 attached as
``max_contributions`` (private output, covered by the map). Every ``*_from_budget`` constructor accepts
``max_contributions="auto"`` and builds its measurement here (``docs/auto.md``), on Polars or on Spark: for a
Spark input space the bins are counted by a Spark plan
(:func:`opendp_wgm.engines.spark_aggregates.user_count_bins`: at most 9 rows reach the driver), the noise and
the rule run on the driver, then the chosen Spark candidate runs on the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np
import opendp.prelude as dp
import polars as pl
from numpy.typing import NDArray

from opendp_wgm._spaces import _assert_features, _prepare_frame, _resolve_space
from opendp_wgm._validation import _check_execution, _Engine
from opendp_wgm.engines.polars import noisy_above_threshold
from opendp_wgm.measurements._spark import check_spark_options, is_spark_domain
from opendp_wgm.measurements.partition_selection import make_partition_selection
from opendp_wgm.privacy.auto import (
    BINS,
    DEFAULT_AUTO_FRACTION,
    GRID,
    AutoBudget,
    auto_loss,
    bin_of,
    check_auto_fraction,
    choice_loss,
    choose_max_contributions,
    passes_single_item_test,
    split_auto_budget,
)
from opendp_wgm.privacy.budget import Budget
from opendp_wgm.privacy.threshold import LATTICE_BITS
from opendp_wgm.samplers import NoiseMethod, sample_discrete_laplace

__all__ = [
    "AutoChoice",
    "AutoRelease",
    "auto_from_budget",
    "choose_from_counts",
    "make_auto_contributions",
    "noisy_count_bins",
    "single_item_candidate",
    "user_count_bins",
]

#: Builds the candidate measurement at Δ0 (a grid point) and the mechanism's share of the budget.
Candidate = Callable[[int, Budget], dp.Measurement]


class AutoChoice(NamedTuple):
    """The private choice: Δ0, and whether the single-item test chose it (then Δ0 = 1 and the mechanism ran at
    ``1 − auto_fraction/15`` of the budget; otherwise the histogram chose, and it ran at ``1 − auto_fraction``)."""

    max_contributions: int
    single_item_test: bool


class AutoRelease(pl.DataFrame):
    """A release of ``max_contributions="auto"``: the mechanism's frame, and the choice it ran at.

    Attributes
    ----------
    max_contributions
        The privately chosen Δ0 (a point of :data:`~opendp_wgm.privacy.auto.GRID`).
    single_item_test
        Whether the single-item test chose it (see :class:`AutoChoice`).

    Both are released, and covered by the measurement's map. Polars operations on the frame return plain
    ``pl.DataFrame`` objects, without them.
    """

    max_contributions: int
    single_item_test: bool

    @classmethod
    def of(cls, frame: pl.DataFrame, choice: AutoChoice) -> AutoRelease:
        """``frame`` (not copied) with the choice."""
        release = cls._from_pydf(frame._df)
        assert isinstance(release, AutoRelease)  # the classmethod builds this class
        release.max_contributions, release.single_item_test = choice
        return release


def user_count_bins(frame: object, input_domain: dp.Domain, input_metric: dp.Metric, *,
                    item: str | tuple[str, ...] | None = None, engine: _Engine = "auto") -> NDArray[np.int64]:
    """The exact histogram of the users' distinct-item counts over :data:`~opendp_wgm.privacy.auto.GRID`
    (:data:`~opendp_wgm.privacy.auto.BINS` = 9 bins: bin ``j < 8`` holds the users with
    ``GRID[j-1] < count <= GRID[j]``, bin 8 those above ``GRID[7] = 200``). On a Spark input space ``frame`` is
    a ``pyspark.sql.DataFrame`` and Spark counts them (:func:`opendp_wgm.engines.spark_aggregates.user_count_bins`).

    Not private: :func:`make_auto_contributions` noises it; exposed for tests and the auditor.
    """
    return _bins_of(input_domain, input_metric, item, _check_execution(1, engine)[1])(frame)


def _count_bins(lf: pl.LazyFrame, user: str, item: str, engine: _Engine) -> NDArray[np.int64]:
    counts = lf.group_by(user).agg(pl.col(item).n_unique()).collect(engine=engine)
    bins = bin_of(counts.get_column(item).to_numpy().astype(np.int64))
    return np.bincount(bins, minlength=BINS).astype(np.int64)


def noisy_count_bins(
    bins: NDArray[np.int64], scale: float, noise: NoiseMethod = "lattice", *, laplace: bool = False
) -> NDArray[np.float64]:
    """``bins`` plus exact noise of scale ``scale`` (in users): with ``laplace``, OpenDP's discrete Laplace on the
    integers (:func:`~opendp_wgm.samplers.sample_discrete_laplace`; ``noise`` is not used); otherwise the discrete
    Gaussian drawn on the WGM's lattice (:func:`~opendp_wgm.engines.polars.noisy_above_threshold`), exact floats
    (multiples of 2^-20)."""
    if laplace:
        return sample_discrete_laplace(bins.astype(np.int64), scale).astype(np.float64)
    noisy, _ = noisy_above_threshold(bins.astype(np.int64) << LATTICE_BITS, scale=scale, threshold=0.0, noise=noise)
    return noisy.astype(np.float64) / 2.0**LATTICE_BITS


def _bins_of(
    input_domain: dp.Domain, input_metric: dp.Metric, item: str | tuple[str, ...] | None, engine: _Engine
) -> Callable[[Any], NDArray[np.int64]]:
    """The exact bins of a frame of the input space: on Spark for a Spark space (a composite key's included:
    keys with statistics bound it), on Polars otherwise."""
    if is_spark_domain(input_domain):
        from opendp_wgm.engines import spark_aggregates  # imported: the space is a Spark one

        spark = spark_aggregates.group_by_space(input_domain, input_metric)
        check_spark_options(spark, item=item, engine=engine)
        return lambda frame: spark_aggregates.user_count_bins(frame, spark)
    space = _resolve_space(input_domain, input_metric, item)
    return lambda frame: _count_bins(_prepare_frame(frame, space), space.user, space.item, engine)


def make_auto_contributions(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    candidate: Candidate,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    auto_fraction: float = DEFAULT_AUTO_FRACTION,
    item: str | tuple[str, ...] | None = None,
    noise: NoiseMethod = "lattice",
    engine: Literal["auto", "in-memory", "streaming"] = "auto",
    check: Callable[[Any], object] | None = None,
) -> dp.Measurement:
    r"""A private choice of Δ0 with ``auto_fraction`` of the budget, then ``candidate`` at that Δ0 with the rest.

    The ``*_from_budget`` constructors call this for ``max_contributions="auto"``; call it directly to choose Δ0
    for a mechanism of your own.

    Parameters
    ----------
    input_domain, input_metric
        As for :func:`opendp_wgm.make_wgm`: Polars data, or a Spark space (then the bins are counted on Spark;
        a composite key's space too, for :func:`opendp_wgm.make_wgm_group_by_from_budget`).
    candidate
        ``candidate(max_contributions, budget)``: the mechanism at a grid point, calibrated to ``budget`` (a
        :class:`~opendp_wgm.privacy.budget.Budget`, the rest after the choice), on the same input space and in
        ``budget.measure``. It is called here once per grid point at the rest after the histogram, and once more
        at Δ0 = 1 at the rest after the single-item test: every candidate is validated before any data is read.
    delta, epsilon, rho
        The total budget for one user: δ ∈ (0, 1) and exactly one of ε (then (ε, δ)-DP) and ρ (approximate
        zCDP).
    auto_fraction
        Share of the budget that buys the choice, in (0, 0.5]: at most fε (and no δ) under (ε, δ)-DP, fρ (and no
        δ) under approximate zCDP; fε/15 when the single-item test chooses Δ0 = 1.
    item
        As for :func:`opendp_wgm.make_wgm`.
    noise
        The choice's discrete Gaussian sampler under approximate zCDP, as for :func:`opendp_wgm.make_wgm` (under
        (ε, δ)-DP the choice draws OpenDP's discrete Laplace).
    engine
        Polars engine that collects the per-user counts (``"auto"`` on Spark, which runs its own plan).
    check
        The candidates' checks of a frame from public information (its schema, e.g. the value columns a candidate
        aggregates), called on the frame before the choice draws any noise: what a candidate would refuse is
        refused before the release starts, never after the choice's noise (the input space's user and item
        columns are checked here in any case).

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to an :class:`AutoRelease`: the chosen candidate's frame, with the chosen Δ0 as attribute
        ``max_contributions`` (and ``single_item_test``).

    Notes
    -----
    Each user falls in one bin of its distinct-item count (and in one of the test's two counts), so ``d_in``
    users move each step's counts by at most ``d_in`` in ℓ1 and ℓ2: a step at share s is ``d_in·sε``-DP
    (discrete Laplace of scale 1/(sε)) or ``d_in²·sρ``-zCDP (discrete Gaussian). The candidate run depends on the
    data and on the noise only through the choice, so the steps compose adaptively (``docs/privacy.md`` §8): the
    map is the test's loss plus the larger of the single-item candidate's and the histogram's plus the largest
    grid candidate's (:func:`~opendp_wgm.privacy.auto.auto_loss`, part by part, applied twice).

    Required features: ``contrib``, ``honest-but-curious``.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm_from_budget(*wgm.user_items_space(), max_contributions="auto", epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    >>> data = wgm.datasets.synthetic_zipf(n_users=20_000, items_per_user=1, seed=0)
    >>> m(data).max_contributions
    1
    """
    _assert_features()
    if check is not None and not callable(check):
        msg = f"`check` must be a function of a frame or None (found {check!r})"
        raise TypeError(msg)
    budget = Budget.of(epsilon=epsilon, rho=rho, delta=delta)
    auto = split_auto_budget(budget, check_auto_fraction(auto_fraction))
    _, engine = _check_execution(1, engine)
    count_bins = _bins_of(input_domain, input_metric, item, engine)
    candidates = {g: candidate(g, auto.rest) for g in GRID}
    single = candidate(GRID[0], auto.single)
    for g, measurement in [*candidates.items(), (GRID[0], single)]:
        if measurement.output_measure != budget.measure:  # pragma: no cover - a bug guard of the callers
            msg = f"the candidate at max_contributions={g} measures {measurement.output_measure}, not {budget.measure}"
            raise ValueError(msg)

    def function(frame: Any) -> AutoRelease:
        if check is not None:
            check(frame)  # the candidates' schema checks, before any noise
        bins = count_bins(frame)  # the frame's schema is checked here, before any noise
        choice = choose_from_counts(bins, auto, noise)
        chosen = single if choice.single_item_test else candidates[choice.max_contributions]
        return AutoRelease.of(chosen(frame), choice)

    def privacy_map(d_in: int) -> tuple[float, float]:
        return _auto_map(d_in, auto, single.map(d_in), [c.map(d_in) for c in candidates.values()])

    return dp.m.make_user_measurement(input_domain, input_metric, budget.measure, function, privacy_map)


def single_item_candidate(
    candidate: Candidate,
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    columns: dict[str, pl.Expr],
    item: str | tuple[str, ...] | None = None,
    passes: int = 1,
    engine: Literal["auto", "in-memory", "streaming"] = "auto",
) -> Candidate:
    """``candidate``, except at Δ0 = 1 under (ε, δ)-DP: the optimal partition selection
    (:func:`opendp_wgm.make_partition_selection`) at the same budget, its release given the mechanism's other
    ``columns`` (e.g. ``noisy_weight`` as a null Float64: partition selection releases no weight). Under
    approximate zCDP, which partition selection does not state, ``candidate`` runs at Δ0 = 1 too."""

    def chosen(max_contributions: int, budget: Budget) -> dp.Measurement:
        if max_contributions != 1 or budget.epsilon is None:
            return candidate(max_contributions, budget)
        selection = make_partition_selection(
            input_domain, input_metric, epsilon=budget.epsilon, delta=budget.delta, item=item, passes=passes,
            engine=engine,
        )

        def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
            released: pl.DataFrame = selection(frame)
            return released.with_columns(**columns)

        return dp.m.make_user_measurement(
            input_domain, input_metric, selection.output_measure, function, selection.map
        )

    return chosen


def auto_from_budget(
    make: Callable[..., dp.Measurement],
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    delta: float,
    epsilon: float | None,
    rho: float | None,
    auto_fraction: float,
    single_item_columns: dict[str, pl.Expr] | None = None,
    check: Callable[[Any], object] | None = None,
    **options: Any,
) -> dp.Measurement:
    """``max_contributions="auto"`` for a ``*_from_budget`` constructor ``make``: :func:`make_auto_contributions`
    over ``make(input_domain, input_metric, max_contributions=Δ0, delta=…, epsilon=…, rho=…, **options)`` at
    the rest of the budget. With ``single_item_columns`` the candidate at Δ0 = 1 is the optimal partition
    selection under (ε, δ)-DP (:func:`single_item_candidate`, the release given those columns); ``check`` is the
    candidates' schema check (``check`` of :func:`make_auto_contributions`)."""

    def candidate(max_contributions: int, budget: Budget) -> dp.Measurement:
        return make(
            input_domain, input_metric, max_contributions=max_contributions, delta=budget.delta,
            epsilon=budget.epsilon, rho=budget.rho, **options,
        )

    item: str | Sequence[str] | None = options.get("item")
    key = item if item is None or isinstance(item, str) else tuple(item)
    chosen: Candidate = candidate
    if single_item_columns is not None:
        chosen = single_item_candidate(
            candidate, input_domain, input_metric, columns=single_item_columns, item=key,
            passes=options.get("passes", 1), engine=options.get("engine", "auto"),
        )
    return make_auto_contributions(
        input_domain, input_metric, candidate=chosen, delta=delta, epsilon=epsilon, rho=rho,
        auto_fraction=auto_fraction, item=key, noise=options.get("noise", "lattice"),
        engine=options.get("engine", "auto"), check=check,
    )


def choose_from_counts(bins: NDArray[np.int64], auto: AutoBudget, noise: NoiseMethod = "lattice") -> AutoChoice:
    """The private choice of Δ0 from the exact bins (:func:`user_count_bins`), as the measurement makes it: the
    test's two counts (bin 0, and the sum of the others) noised at ``auto.test_scale`` and the single-item test
    (:func:`~opendp_wgm.privacy.auto.passes_single_item_test`); where it fails, the bins noised at
    ``auto.histogram_scale`` (:func:`noisy_count_bins`, fresh noise) and the rule
    (:func:`~opendp_wgm.privacy.auto.choose_max_contributions`). Never raises."""
    two = np.array([bins[0], bins[1:].sum()], dtype=np.int64)
    if passes_single_item_test(
        noisy_count_bins(two, auto.test_scale, noise, laplace=auto.laplace), auto.test_scale, laplace=auto.laplace
    ):
        return AutoChoice(GRID[0], single_item_test=True)
    noisy = noisy_count_bins(bins, auto.histogram_scale, noise, laplace=auto.laplace)
    return AutoChoice(choose_max_contributions(noisy), single_item_test=False)


def _auto_map(
    d_in: int, auto: AutoBudget, single: tuple[float, float], losses: list[tuple[float, float]]
) -> tuple[float, float]:
    histogram = auto_loss(d_in, choice_loss(d_in, scale=auto.histogram_scale, laplace=auto.laplace), losses)
    return auto_loss(d_in, choice_loss(d_in, scale=auto.test_scale, laplace=auto.laplace), [single, histogram])
