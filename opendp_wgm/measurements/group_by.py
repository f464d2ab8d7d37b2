r"""Keys with statistics in one budget: a key release, then OpenDP's own Polars aggregates over the released keys.

Having found the keys (the WGM, DP-SIPS or WGM-then-top-k), users want per-key statistics: plays per artist,
hours per game, queries per country. :func:`make_wgm_group_by` composes, adaptively and in one measurement
(:func:`opendp_wgm.measurements.two_stage.make_two_stage`), a key release (stage 1) with OpenDP's own
``make_private_lazyframe`` (stage 2): ``group_by(keys).agg(dp.len(), .dp.sum(bounds), .dp.mean(bounds))`` with the
released keys as *explicit* keys (``with_keys``: no threshold, every released key gets a row). The map is the sum
of the two stages'; :func:`make_wgm_group_by_from_budget` splits one budget between them (``key_fraction``).

:func:`discover_keys` is the same first stage for a ``dp.Context``: it spends the Context's next budget slot on
discovery and returns the keys for ``ctx.query().group_by(...).agg(...).with_keys(keys)``.

Privacy arguments: ``docs/privacy.md`` §5.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import opendp.prelude as dp
import polars as pl
from polars._typing import PolarsDataType

from opendp_wgm._partial import _to_then
from opendp_wgm._spaces import _assert_features, _prepare_frame, _PreparedFrame, _resolve_space, _Space
from opendp_wgm._validation import (
    _check_choice,
    _check_positive,
    _check_probability,
)
from opendp_wgm.domains import UserItemsDescriptor, user_items_domain
from opendp_wgm.engines.polars import bound_key, fresh_seeds
from opendp_wgm.measurements._budget_boundary import budget_boundary
from opendp_wgm.measurements._group_by_stage_2 import (
    _ORDER,
    _SUBSET,
    _USER,
    COUNT,
    Bounds,
    _Aggregates,
    _check_bounds,
    _GroupByRequest,
)
from opendp_wgm.measurements._opendp_frame import canonical_item, canonical_user, check_key_dtype
from opendp_wgm.measurements.key_discovery import KEY_MECHANISMS, KeyMechanism, _key_release_from_budget, discover_keys
from opendp_wgm.measurements.two_stage import Preparation, Stage1
from opendp_wgm.privacy.auto import DEFAULT_AUTO_FRACTION
from opendp_wgm.privacy.budget import Budget, MeasureKind
from opendp_wgm.privacy.calibrate import smallest_passing

__all__ = [
    "GroupByCalibration",
    "calibrate_wgm_group_by",
    "discover_keys",
    "make_wgm_group_by",
    "make_wgm_group_by_from_budget",
    "summarize_group_by",
    "then_wgm_group_by",
    "then_wgm_group_by_from_budget",
]

# --------------------------------------------------------------------------------------------------------------
# the measurement


def _check_stage_2_schema(schema: Mapping[str, PolarsDataType], space: _Space, aggregates: _Aggregates) -> None:
    """Stage 2's checks of the data's schema (public): keys that enter OpenDP's frame exactly, numeric values."""
    item = schema[space.item]
    keys = {space.item: item}
    if isinstance(item, pl.Struct) and space.composite:  # a composite key's columns, each a key of OpenDP's
        keys = {f.name: f.dtype for f in item.fields}
    for key, dtype in keys.items():
        check_key_dtype(key, dtype)
    for statistic in aggregates.statistics:
        statistic.value(schema[statistic.column])


def _preparation(space: _Space, aggregates: _Aggregates) -> Preparation:
    """The input prepared once for both stages: the user key, the keys and the value columns (rows with a null
    user or key dropped), on the bare-column space of (user key, item). A composite key's Struct is passed as
    a prepared frame of that space, which stage 1 reads without preparing it again."""
    prepared = _Space(space.user, space.item, None, lazyframe_domain=False, composite=space.composite)

    def function(frame: Any) -> pl.LazyFrame | _PreparedFrame:
        lf = _prepare_frame(frame, space, aggregates.values)
        _check_stage_2_schema(lf.collect_schema(), space, aggregates)  # before stage 1 draws any noise
        return _PreparedFrame(lf, prepared) if space.composite else lf

    domain = user_items_domain(UserItemsDescriptor(space.user, space.composite or space.item))
    return Preparation(domain, dp.symmetric_id_distance(pl.col(space.user)), function, space.item, space.keys)


def _aggregate_release(
    data: pl.LazyFrame | _PreparedFrame, space: _Space, aggregates: _Aggregates, keys: pl.Series, scale: float,
    kind: MeasureKind, delta: float,
) -> pl.DataFrame:
    """OpenDP's aggregates of the prepared ``data`` over ``keys`` (the keys' dtypes), sums and means in data
    units. A composite key enters OpenDP as its separate key columns (the Struct unnested): the plan groups by
    all of them, and the keyed hash and the truncation rank take the tuple as the key."""
    lf = data.lf if isinstance(data, _PreparedFrame) else data
    # each user's kept keys: a uniform random subset of its own released keys, independent across users (the
    # WGM's keyed hash of the (user, key) values under a fresh secret seed); OpenDP's truncation, ranking every
    # user's keys in one order of the keys, then keeps all of them
    lf = lf.with_columns(bound_key(lf, space, fresh_seeds()).alias(_SUBSET))
    if space.composite:
        lf, keys_frame = lf.unnest(space.item), keys.struct.unnest()
    else:
        keys_frame = keys.to_frame(space.item)
    schema, dtypes = lf.collect_schema(), keys_frame.schema
    order = pl.struct(*aggregates.keys).hash(*fresh_seeds()).alias(_ORDER)  # OpenDP's: one order of the keys
    key_columns = [canonical_item(k, schema[k]).alias(k) for k in aggregates.keys]
    explicit = keys_frame.select(key_columns).with_columns(order)
    # only the released keys' rows (a row-wise filter by public keys), so that users keep Δ0 *released* keys
    frame = (
        lf.select(
            canonical_user(space.user, schema[space.user]).alias(_USER),
            *key_columns,
            *(s.value(schema[s.column]) for s in aggregates.statistics),
            _SUBSET,
        )
        .join(explicit.lazy().select(aggregates.keys), on=list(aggregates.keys), how="semi")
        .filter(pl.struct(_SUBSET, *aggregates.keys).rank("dense").over(_USER) <= aggregates.max_contributions)
        .drop(_SUBSET)
        .with_columns(order)
    )
    opendp_schema = frame.collect_schema()
    released: pl.DataFrame = aggregates.measurement(explicit, opendp_schema, scale, kind, delta)(frame).collect()
    rescaled = [(pl.col(s.name) * 2.0 ** -s.bits).alias(s.name) for s in aggregates.statistics]
    return released.select(
        *(pl.col(k).cast(dtypes[k]) for k in aggregates.keys), pl.col(COUNT).cast(pl.Int64), *rescaled
    )


def make_wgm_group_by(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    key_release: Stage1,
    max_contributions: int,
    scale: float,
    max_rows_per_key: int = 1,
    sums: Bounds | None = None,
    means: Bounds | None = None,
    output_measure: dp.Measure | None = None,
    delta: float | None = None,
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Release keys, then OpenDP's own counts, bounded sums and means over them, in one measurement.

    Stage 1, ``key_release``, discovers the keys (e.g. ``wgm.then_wgm(...)``, ``wgm.then_dp_sips(...)``,
    ``wgm.then_wgm_top_k(...)``). Stage 2 is OpenDP's ``make_private_lazyframe`` on the same data:
    ``group_by(key).agg(dp.len(), pl.col(c).dp.sum(bounds), pl.col(c).dp.mean(bounds))`` with the released keys
    as explicit keys (a left join onto them, OpenDP's ``with_keys``: no threshold, every released key gets a
    row, a key nobody holds a noisy 0), at OpenDP's ``global_scale`` ``scale``.

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with ``dp.symmetric_id_distance``
        (e.g. ``ctx.accountant.input_space``); the frames also hold the columns of ``sums`` and ``means``. From
        :func:`opendp_wgm.spark.spark_user_items_space`, the release runs on a Spark DataFrame with the same map
        (``docs/engines.md``, keys with statistics): ``key_release`` is then a Spark key release.
    key_release
        ``(domain, metric) -> Measurement``, a partial key-release constructor (``then_wgm``, ``then_dp_sips``,
        ``then_wgm_top_k``, ...) whose output frame holds the keys in the item column (in the key columns for a
        composite key); its output measure must be ``output_measure``. It is built on the prepared (user key,
        item) space.
    max_contributions
        Δ0 ≥ 1 of the aggregates: each user keeps Δ0 of its released keys, a uniformly random subset of its own
        keys, independent across users (a keyed hash of (user, key) under a secret seed drawn per release);
        OpenDP's truncation to Δ0 keys per user then enforces the bound its map reads.
    scale
        OpenDP's ``global_scale`` s > 0: each aggregate's noise scale is s times its per-row bound (1 for the
        count, max|bound| for a sum); :func:`summarize_group_by` shows them. Each aggregate costs
        ρ = (Δ0 + 1)·R²/(2s²) at one user.
    max_rows_per_key
        R ≥ 1: OpenDP truncates each user to its first R rows of each key (frame order). ``count`` counts rows;
        with R = 1 (default) it counts users.
    sums, means
        ``{column: (lower, upper)}``: bounded sums and means of numeric columns (values clipped to the bounds,
        rounded to the nearest multiple of :math:`2^{-b}`, the smallest b ≥ 0 with
        :math:`\max|bound|\,2^b \ge 2^{10}`: integers stay exact; bounds within ±2^30). A null or NaN is
        replaced by 0 and then clipped like any value: it counts as 0 when lower ≤ 0 ≤ upper, and otherwise as
        the bound nearest 0 (``lower`` when lower > 0, ``upper`` when upper < 0), and its row still counts in
        ``count`` and in a mean's denominator. Filter such rows out first to leave them out.
    output_measure
        ``dp.approximate(dp.zero_concentrated_divergence())`` (default) or ``dp.approximate(dp.max_divergence())``
        (then ``delta`` is required).
    delta
        Only with ``dp.approximate(dp.max_divergence())``: the δ of OpenDP's zCDP → (ε, δ) conversion of the
        aggregates (``make_zCDP_to_approxDP`` then ``make_fix_delta``), in (0, 1).
    item
        Item (key) column, when the input domain is OpenDP's and holds more than one other column; a list of
        columns for a composite key (``docs/api.md``): the keys are their tuples, in discovery, in OpenDP's
        truncation (Δ0 tuples per user, R rows per tuple) and in its ``group_by`` over all the key columns.

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame``: stage 1's release (the key column, or the key columns of a composite
        key, and, e.g., ``noisy_weight`` or ``rank``), in its order, with ``count`` (Int64, OpenDP's
        ``dp.len()``), ``<column>_sum`` and ``<column>_mean`` (Float64) of each released key.

    Notes
    -----
    Neighbouring datasets differ by the rows of ``d_in`` users (add or remove). The per-user bounds the
    aggregates need are enforced by OpenDP's own truncation in the plan, R rows per (user, key) and Δ0 keys per
    user, which its map reads (it charges Δ0 + 1 keys, ``docs/baselines.md`` §4). OpenDP's
    ``Margin.max_length`` is Polars' own row limit, 2^32 − 1 (UInt32 row index); integer sums need it only to
    rule out overflow. The map is the adaptive composition (``docs/privacy.md`` §5):

    .. math::
        m(d) = m_{\text{keys}}(d) + m_{\text{agg}}(d),

    (ρ, δ) or (ε, δ) pairs added and rounded up, where :math:`m_{\text{agg}}` is OpenDP's map of the plan with
    d·(Δ0 + 1) keys: OpenDP's map grows with the number of explicit keys up to that and not beyond, so it
    bounds the map of every released key list.

    Required features: ``contrib``, ``honest-but-curious``.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm_group_by(*wgm.user_items_space(), max_contributions=10, scale=20.0,
    ...     key_release=wgm.then_wgm(max_contributions=10, scale=4.0, threshold=25.0))
    >>> rho, delta = m.map(1)
    >>> round(rho, 6), delta < 1e-6  # the WGM's 1/(2·4²) plus the count's (10 + 1)/(2·20²)
    (0.045, True)
    """
    _assert_features()
    if not callable(key_release):
        msg = f"`key_release` must be a partial constructor such as wgm.then_wgm(...) (found {key_release!r})"
        raise TypeError(msg)
    request = _GroupByRequest(max_contributions, scale, max_rows_per_key, sums, means, output_measure, delta)
    # --- Spark: a Spark input space releases on the Spark engine (measurements/_group_by_spark.py) -----------
    from opendp_wgm.measurements import _group_by_spark

    if _group_by_spark.is_spark_space(input_domain):
        return _group_by_spark.make_spark_group_by(input_domain, input_metric, key_release, request, item)
    # --- end Spark ----------------------------------------------------------------------------------------------
    space = _resolve_space(input_domain, input_metric, item)
    checked = request.setup(space.keys)
    aggregates = checked.aggregates
    aggregates.check_space(space, input_domain)

    def stage_2(domain: dp.Domain, metric: dp.Metric, keys: pl.Series) -> dp.Measurement:
        def function(data: pl.LazyFrame | _PreparedFrame) -> pl.DataFrame:
            return _aggregate_release(data, space, aggregates, keys, checked.scale, checked.kind, checked.delta)

        return dp.m.make_user_measurement(domain, metric, checked.measure, function, checked.charged)

    def combine(released_keys: pl.DataFrame, statistics: pl.DataFrame) -> pl.DataFrame:
        return released_keys.join(statistics, on=list(aggregates.keys), how="left", maintain_order="left")

    return checked.compose(
        input_domain, input_metric, key_release=key_release, stage_2=stage_2,
        preparation=_preparation(space, aggregates), combine=combine,
    )


# --------------------------------------------------------------------------------------------------------------
# calibrated


@dataclass(frozen=True)
class GroupByCalibration:
    """Both stages of :func:`make_wgm_group_by_from_budget` calibrated to one budget.

    Attributes
    ----------
    keys, aggregates
        The two stages' budgets: ``key_fraction`` of the total, then the rest
        (:meth:`~opendp_wgm.privacy.budget.Budget.split`).
    scale
        OpenDP's ``global_scale`` of the aggregates, the smallest whose map at one user fits ``aggregates``.
    key_fraction, max_contributions, max_rows_per_key
        As given.
    """

    keys: Budget
    aggregates: Budget
    scale: float
    key_fraction: float
    max_contributions: int
    max_rows_per_key: int
    sums: tuple[tuple[str, tuple[float, float]], ...] = ()
    means: tuple[tuple[str, tuple[float, float]], ...] = ()

    def summarize(self, alpha: float | None = None) -> pl.DataFrame:
        """Each aggregate's noise and, with ``alpha``, its (1 − alpha) accuracy (:func:`summarize_group_by`)."""
        return summarize_group_by(
            scale=self.scale, max_contributions=self.max_contributions, max_rows_per_key=self.max_rows_per_key,
            sums=dict(self.sums), means=dict(self.means), alpha=alpha,
        )


def calibrate_wgm_group_by(
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    key_fraction: float = 0.5,
    max_rows_per_key: int = 1,
    sums: Bounds | None = None,
    means: Bounds | None = None,
) -> GroupByCalibration:
    r"""Split one budget between the key release and the aggregates, and calibrate the aggregates' scale.

    The key release gets ``key_fraction`` of the budget (:meth:`~opendp_wgm.privacy.budget.Budget.split`: (f·ε,
    f·δ) under (ε, δ)-DP, (f·ρ, δ) under approximate zCDP) and calibrates itself; the aggregates get the rest and
    the smallest ``global_scale`` whose OpenDP map (the charged map of :func:`make_wgm_group_by`) fits it, by
    :func:`~opendp_wgm.privacy.calibrate.smallest_passing` (under (ε, δ), OpenDP's conversion at the rest of δ).
    It builds OpenDP measurements: it needs the ``contrib`` and ``honest-but-curious`` features, as
    :func:`summarize_group_by` does.

    Examples
    --------
    >>> import opendp.prelude as dp
    >>> from opendp_wgm.measurements.group_by import calibrate_wgm_group_by
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> cal = calibrate_wgm_group_by(max_contributions=10, rho=0.5, delta=1e-6, sums={"minutes": (0, 120)})
    >>> cal.keys.d_out, cal.aggregates.rho < 0.25
    ((0.25, 1e-06), True)
    """
    _assert_features()
    budget = Budget.of(epsilon=epsilon, rho=rho, delta=delta)
    aggregates = _Aggregates.of(("key",), max_contributions, max_rows_per_key, sums, means)
    key_fraction = _check_probability("key_fraction", key_fraction)
    keys, rest = budget.split(key_fraction)

    def fits(scale: float) -> bool:
        try:
            loss = aggregates.loss(1, scale, budget.kind, rest.delta)
        except dp.OpenDPException as err:  # OpenDP's map overflows at tiny scales: they do not fit
            if err.variant != "Overflow":
                raise
            return False
        return (loss[0] if isinstance(loss, tuple) else loss) <= rest.value

    scale = smallest_passing(fits, lower=1e-6, parameter="scale", budget=budget)
    return GroupByCalibration(
        keys=keys, aggregates=rest, scale=scale, key_fraction=key_fraction,
        max_contributions=aggregates.max_contributions, max_rows_per_key=aggregates.max_rows_per_key,
        sums=tuple((c, (lo, hi)) for c, lo, hi in _check_bounds("sums", sums)),
        means=tuple((c, (lo, hi)) for c, lo, hi in _check_bounds("means", means)),
    )


def _group_by_candidate(
    input_domain: dp.Domain, input_metric: dp.Metric, *, max_contributions: int, epsilon: float | None,
    mechanism: KeyMechanism, **options: Any,
) -> dp.Measurement:
    """:func:`make_wgm_group_by_from_budget` at a grid point of ``max_contributions="auto"``: at Δ0 = 1 under
    (ε, δ)-DP a WGM or DP-SIPS key release is the optimal partition selection."""
    if max_contributions == 1 and epsilon is not None and mechanism in ("wgm", "dp-sips"):
        mechanism = "partition-selection"
    return make_wgm_group_by_from_budget(
        input_domain, input_metric, max_contributions=max_contributions, epsilon=epsilon, mechanism=mechanism,
        **options,
    )


def _group_by_frame_check(
    input_domain: dp.Domain, input_metric: dp.Metric, *, max_rows_per_key: int = 1, sums: Bounds | None = None,
    means: Bounds | None = None, item: str | Sequence[str] | None = None, **_: Any,
) -> Callable[[Any], object]:
    """The schema checks every grid point's group-by runs first (its key and value columns), for
    ``max_contributions="auto"`` to run them before its choice draws noise: the candidates' own preparation."""
    from opendp_wgm.measurements import _group_by_spark

    if _group_by_spark.is_spark_space(input_domain):
        return _group_by_spark.frame_check(input_domain, input_metric, item, max_rows_per_key, sums, means)
    space = _resolve_space(input_domain, input_metric, item)
    # Δ0 enters the aggregates' map, not their checks: any valid value (1) builds the same preparation
    return _preparation(space, _Aggregates.of(space.keys, 1, max_rows_per_key, sums, means)).function


@budget_boundary(candidate=_group_by_candidate, frame_check=_group_by_frame_check)
def make_wgm_group_by_from_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int | Literal["auto"],
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    key_fraction: float = 0.5,
    mechanism: KeyMechanism = "wgm",
    k: int | None = None,
    max_rows_per_key: int = 1,
    sums: Bounds | None = None,
    means: Bounds | None = None,
    noise: Literal["lattice", "opendp"] = "lattice",
    item: str | Sequence[str] | None = None,
    auto_fraction: float = DEFAULT_AUTO_FRACTION,
) -> dp.Measurement:
    r"""Keys with counts, sums and means in one per-user budget: (ε, δ)-DP or approximate (ρ, δ)-zCDP.

    :func:`calibrate_wgm_group_by` splits the budget (``key_fraction`` to the keys); the key release is
    ``mechanism``'s ``*_from_budget`` at its share (:func:`opendp_wgm.make_wgm_from_budget`,
    :func:`opendp_wgm.make_dp_sips_from_budget`, or :func:`opendp_wgm.make_wgm_top_k_from_budget` with ``k``: rank
    and count); the result is :func:`make_wgm_group_by`, so ``m.check(1, budget)`` holds.

    Parameters
    ----------
    input_domain, input_metric, max_rows_per_key, sums, means, item
        As for :func:`make_wgm_group_by`.
    max_contributions
        Δ0 ≥ 1, of the key release and of the aggregates; or ``"auto"``: ``auto_fraction`` of the budget (in
        (0, 0.5]) buys a private choice of Δ0 (:func:`opendp_wgm.make_auto_contributions`, ``docs/auto.md``) and
        the rest is split as below; at Δ0 = 1 under (ε, δ)-DP a ``"wgm"`` or ``"dp-sips"`` key release is the
        optimal partition selection (``"partition-selection"``: no ``noisy_weight`` column).
    delta
        δ ∈ (0, 1), for one user.
    epsilon, rho
        Exactly one of them, > 0, for one user.
    key_fraction
        Share of the budget spent on the keys, in (0, 1).
    mechanism : {'wgm', 'dp-sips', 'top-k', 'partition-selection'}
        The key release; ``"partition-selection"`` (:func:`opendp_wgm.make_partition_selection`: one item per
        user, ``max_contributions`` then bounds the aggregates only) needs ``epsilon``. On a Spark space,
        ``"wgm"`` or ``"partition-selection"`` (the others are refused up front).
    k
        With ``mechanism="top-k"`` only: the number of keys.
    noise : {'lattice', 'opendp'}
        The key release's discrete Gaussian sampler (the aggregates use OpenDP's).

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm_group_by_from_budget(*wgm.user_items_space(), max_contributions=10, epsilon=1.0,
    ...                                       delta=1e-6, sums={"minutes": (0, 120)})
    >>> m.check(1, (1.0, 1e-6))
    True
    """
    mechanism = _check_choice("mechanism", mechanism, KEY_MECHANISMS)
    max_contributions = cast(int, max_contributions)  # checked by @budget_boundary: never "auto" here
    calibration = calibrate_wgm_group_by(
        max_contributions=max_contributions, delta=delta, epsilon=epsilon, rho=rho, key_fraction=key_fraction,
        max_rows_per_key=max_rows_per_key, sums=sums, means=means,
    )
    # --- Spark: stage 1 on the Spark engine (measurements/_group_by_spark.py) ----------------------------------
    from opendp_wgm.measurements import _group_by_spark

    if _group_by_spark.is_spark_space(input_domain):
        key_release = _group_by_spark.spark_key_release(mechanism, calibration.keys, max_contributions, k, noise)
    else:  # --- end Spark --------------------------------------------------------------------------------------
        key_release = _key_release_from_budget(mechanism, calibration.keys, max_contributions, k, noise)
    measurement = make_wgm_group_by(
        input_domain, input_metric, key_release=key_release, max_contributions=max_contributions,
        scale=calibration.scale, max_rows_per_key=max_rows_per_key, sums=sums, means=means,
        output_measure=calibration.keys.measure,
        delta=calibration.aggregates.delta if calibration.keys.kind == "approx_dp" else None, item=item,
    )
    budget = Budget.of(epsilon=epsilon, rho=rho, delta=delta)
    if not measurement.check(1, budget.d_out):  # pragma: no cover - a bug guard
        raise AssertionError(f"calibration produced {measurement.map(1)}, over the budget {budget.d_out}")
    return measurement


def summarize_group_by(
    *,
    scale: float,
    max_contributions: int,
    max_rows_per_key: int = 1,
    sums: Bounds | None = None,
    means: Bounds | None = None,
    alpha: float | None = None,
) -> pl.DataFrame:
    """The aggregates' noise, as OpenDP's ``summarize`` (one row per noisy quantity: ``column``, ``aggregate``,
    ``distribution``, ``scale``, and with ``alpha`` the ``accuracy``: the noise exceeds it with probability
    ``alpha``), in the data's units (sums and means are computed on the grid 2^-b and rescaled).

    A mean is OpenDP's noisy sum over its noisy count: its rows are those two.

    Examples
    --------
    >>> import opendp.prelude as dp
    >>> from opendp_wgm.measurements.group_by import summarize_group_by
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> summarize_group_by(scale=2.0, max_contributions=10, alpha=0.05)["accuracy"].to_list()
    [5.0]
    """
    _assert_features()
    aggregates = _Aggregates.of(("key",), max_contributions, max_rows_per_key, sums, means)
    summary = aggregates.summary(_check_positive("scale", scale), alpha)
    unit = pl.lit(1.0)
    for statistic in aggregates.statistics:  # the sum of a statistic is on its grid
        is_sum = (pl.col("column") == statistic.name) & (pl.col("aggregate") == "Sum")
        unit = pl.when(is_sum).then(2.0 ** -statistic.bits).otherwise(unit)
    rescale = [pl.col(c) * unit for c in ("scale", "accuracy") if c in summary.columns]
    return summary.with_columns(rescale)

then_wgm_group_by = _to_then(make_wgm_group_by)
then_wgm_group_by_from_budget = _to_then(make_wgm_group_by_from_budget)
