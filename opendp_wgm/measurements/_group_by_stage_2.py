"""Stage 2 of :func:`opendp_wgm.measurements.group_by.make_wgm_group_by`: what it aggregates (counts, bounded sums
and means, on a fixed-point grid) and OpenDP's ``make_private_lazyframe`` plan over the released keys."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import opendp.prelude as dp
import polars as pl
from opendp.accuracy import summarize_polars_measurement
from opendp.domains import _lazyframe_from_domain
from opendp.extras.polars import DPExpr, Margin, dp_len
from polars._typing import PolarsDataType

from opendp_wgm._spaces import _Space
from opendp_wgm._validation import (
    _check_absent,
    _check_column,
    _check_d_in,
    _check_given,
    _check_int,
    _check_positive,
    _check_probability,
)
from opendp_wgm.measurements._opendp_frame import series_domain
from opendp_wgm.measurements.two_stage import Preparation, Stage1, Stage2Release, make_two_stage
from opendp_wgm.privacy.budget import Loss, MeasureKind, measure_kind, measure_of
from opendp_wgm.privacy.peeling import Accounting
from opendp_wgm.privacy.threshold import check_max_contributions

#: The released count column (OpenDP's ``dp.len()``: rows per key after truncation).
COUNT = "count"
#: Per-column bounds of a statistic: ``{column: (lower, upper)}``.
Bounds = Mapping[str, tuple[float, float]]

#: Polars (``polars-runtime-32``) indexes rows with UInt32: no group holds more rows. OpenDP's ``max_length``.
_MAX_LENGTH = 2**32 - 1
#: Values enter OpenDP as integers on the grid 2^-b, with at least 2^10 steps up to the largest bound, and
#: bounds within ±2^30 (then |bound|·2^b ≤ 2^30, and 2^32 rows sum within Int64).
_GRID_LEVELS, _GRID_LIMIT = 2.0**10, 2.0**30
#: Column names inside OpenDP's plan: the user key, and a keyed hash of the key (the order of OpenDP's truncation);
#: and, before the plan, a keyed hash of (user, key) (the order in which each user keeps its keys).
_USER, _ORDER, _SUBSET = "__opendp_wgm_user__", "__opendp_wgm_order__", "__opendp_wgm_subset__"
#: Stage sums are rounded up exactly (OpenDP's compositors add the same way); δ is capped at 1.
_ACCOUNTING = Accounting(exact=True, zero_delta=False, cap_delta=True)
_APPROX_DP = "output_measure=dp.approximate(dp.max_divergence())"

@dataclass(frozen=True)
class _Statistic:
    """A bounded sum or mean of ``column``: values clipped to [lower, upper], on the grid 2^-bits."""

    column: str
    kind: Literal["sum", "mean"]
    lower: float
    upper: float
    index: int

    @property
    def name(self) -> str:
        """The released column: ``<column>_sum`` or ``<column>_mean``."""
        return f"{self.column}_{self.kind}"

    @property
    def internal(self) -> str:
        """The column's name inside OpenDP's plan (any user column name may collide with the keys)."""
        return f"__opendp_wgm_value_{self.index}__"

    @property
    def bits(self) -> int:
        """b ≥ 0, the smallest with max(|lower|, |upper|)·2^b ≥ 2^10: at least 2^10 grid steps up to the largest
        bound, integers exact (a larger b would only slow OpenDP's accuracy summary, linear in the scale)."""
        largest = max(abs(self.lower), abs(self.upper))
        return max(0, math.ceil(math.log2(_GRID_LEVELS / largest)))

    @property
    def grid_bounds(self) -> tuple[int, int]:
        """The bounds on the grid, in its units, containing every rounded value (OpenDP clips to them)."""
        unit = 2.0**self.bits
        return math.floor(self.lower * unit), math.ceil(self.upper * unit)

    def value(self, dtype: PolarsDataType) -> pl.Expr:
        """The column as it enters OpenDP: null and NaN as 0, then clipped (so a bound when 0 is outside the
        bounds), on the grid (a row-wise map; it reads no other row)."""
        if not (dtype.is_numeric() or dtype == pl.Boolean):
            msg = f"column {self.column!r} must be numeric to be summed (found {dtype})"
            raise ValueError(msg)
        value = pl.col(self.column).cast(pl.Float64).fill_nan(None).fill_null(0.0).clip(self.lower, self.upper)
        return (value * 2.0**self.bits).round().cast(pl.Int64).alias(self.internal)

    def expression(self) -> pl.Expr:
        """OpenDP's aggregate on the grid."""
        column = DPExpr(pl.col(self.internal))
        bounds = self.grid_bounds
        aggregate: pl.Expr = column.sum(bounds) if self.kind == "sum" else column.mean(bounds)
        return aggregate.alias(self.name)


def _check_bounds(name: str, bounds: Any) -> list[tuple[str, float, float]]:
    """``{column: (lower, upper)}`` with finite lower < upper, |bound| ≤ 2^30, as a list."""
    if bounds is None:
        return []
    if not isinstance(bounds, Mapping):
        msg = f"`{name}` must be a mapping {{column: (lower, upper)}} (found {type(bounds).__name__})"
        raise TypeError(msg)
    checked = []
    for column, pair in bounds.items():
        _check_column(f"{name}` key `{column!r}", column)
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            msg = f"`{name}[{column!r}]` must be a pair (lower, upper) (found {pair!r})"
            raise ValueError(msg)
        lower, upper = (float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan for v in pair)
        if not (math.isfinite(lower) and math.isfinite(upper) and lower < upper):
            msg = f"`{name}[{column!r}]` must be finite bounds with lower < upper (found {pair!r})"
            raise ValueError(msg)
        if max(abs(lower), abs(upper)) > _GRID_LIMIT:
            msg = f"`{name}[{column!r}]` must be within ±2**30 (found {pair!r})"
            raise ValueError(msg)
        checked.append((column, lower, upper))
    return checked


@dataclass(frozen=True)
class _Aggregates:
    """Stage 2's public parameters: the key columns, the per-user bounds and the statistics."""

    keys: tuple[str, ...]
    max_contributions: int
    max_rows_per_key: int
    statistics: tuple[_Statistic, ...] = field(default=())

    @classmethod
    def of(
        cls, keys: tuple[str, ...], max_contributions: Any, max_rows_per_key: Any, sums: Any, means: Any
    ) -> _Aggregates:
        if pl.get_index_type() != pl.UInt32:  # OpenDP's max_length is Polars' row limit only with UInt32 rows
            index = pl.get_index_type()
            msg = f"Polars' row index must be UInt32 (polars-runtime-32) for OpenDP's max_length (found {index})"
            raise ValueError(msg)
        max_contributions = check_max_contributions(max_contributions)
        max_rows_per_key = _check_int("max_rows_per_key", max_rows_per_key, minimum=1)
        named = [("sum", c, lo, hi) for c, lo, hi in _check_bounds("sums", sums)]
        named += [("mean", c, lo, hi) for c, lo, hi in _check_bounds("means", means)]
        statistics = tuple(_Statistic(c, kind, lo, hi, i) for i, (kind, c, lo, hi) in enumerate(named))  # type: ignore[arg-type]
        names = [*keys, COUNT, *(s.name for s in statistics)]
        clash = sorted({n for n in names if names.count(n) > 1})
        if clash:
            msg = f"the released columns must have distinct names (found {clash} twice: rename a key or a column)"
            raise ValueError(msg)
        summed = [s.column for s in statistics if s.column in keys]
        if summed:
            msg = f"`sums`/`means` must not name a key column (found {summed})"
            raise ValueError(msg)
        return cls(keys, max_contributions, max_rows_per_key, statistics)

    @property
    def values(self) -> list[str]:
        """The aggregated input columns, each once."""
        return list(dict.fromkeys(s.column for s in self.statistics))

    def check_space(self, space: _Space, input_domain: dp.Domain) -> None:
        """The value columns exist, are numeric and are not the user, when the input domain states its columns."""
        if space.identifier is None and space.user in self.values:
            msg = f"`sums`/`means` must not name the user column (found {space.user!r})"
            raise ValueError(msg)
        if not space.lazyframe_domain:
            return
        schema = _lazyframe_from_domain(input_domain).collect_schema()
        missing = [c for c in self.values if c not in schema]
        if missing:
            msg = f"column(s) {missing} not found in `input_domain` (columns: {list(schema)})"
            raise ValueError(msg)
        for statistic in self.statistics:
            statistic.value(schema[statistic.column])

    def plan(self, keys: pl.DataFrame, schema: Mapping[str, PolarsDataType]) -> pl.LazyFrame:
        """OpenDP's plan: R rows per (user, key), Δ0 keys per user (in the keyed-hash order), then ``dp.len()``
        and the statistics per key, joined onto ``keys`` (OpenDP's ``with_keys``: explicit keys).

        The second filter keeps ranks 1..Δ0 of a dense rank; OpenDP 0.16 reads ``rank < Δ0 + 1`` as Δ0 + 1 keys
        (``docs/baselines.md`` §4), which its map charges."""
        by = [_ORDER, *self.keys]
        aggregates = (
            pl.LazyFrame(schema=dict(schema))
            .filter(pl.int_range(pl.len()).over(_USER, *by) < self.max_rows_per_key)
            .filter(pl.struct(*by).rank("dense").over(_USER) < self.max_contributions + 1)
            .group_by(*by)
            .agg(dp_len(signed=True).alias(COUNT), *(s.expression() for s in self.statistics))
        )
        return keys.lazy().join(aggregates, how="left", on=by, nulls_equal=True)

    def measurement(
        self, keys: pl.DataFrame, schema: Mapping[str, PolarsDataType], scale: float, kind: MeasureKind, delta: float
    ) -> dp.Measurement:
        """OpenDP's measurement of :meth:`plan` at global scale ``scale``: approximate zCDP (ρ, 0), or (ε, δ)
        through OpenDP's zCDP → (ε, δ) conversion fixed at ``delta``."""
        columns = [series_domain(name, dtype) for name, dtype in schema.items()]
        domain = dp.with_margin(
            dp.lazyframe_domain(columns), Margin(by=[_ORDER, *self.keys], max_length=_MAX_LENGTH)
        )
        metric = dp.symmetric_id_distance(pl.col(_USER))
        plan = self.plan(keys, schema)
        if kind == "approx_zcdp":
            return dp.m.make_private_lazyframe(domain, metric, measure_of("approx_zcdp"), plan, global_scale=scale)
        inner = dp.m.make_private_lazyframe(domain, metric, measure_of("zcdp"), plan, global_scale=scale)
        return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(inner), delta)

    def summary(self, scale: float, alpha: float | None = None) -> pl.DataFrame:
        """OpenDP's summary of :meth:`measurement` at global scale ``scale`` (its zCDP plan: the noise is the same
        under (ε, δ)), on the grids: one row per noisy quantity (``column``, ``aggregate``, ``distribution``,
        ``scale``, and with ``alpha`` the ``accuracy``); a mean's rows are its sum and its length."""
        keys = pl.DataFrame({**{k: pl.Series([0], dtype=pl.Int64) for k in self.keys}, _ORDER: [0]})
        keys = keys.with_columns(pl.col(_ORDER).cast(pl.UInt64))
        measurement = self.measurement(keys, self.reference_schema(), scale, "approx_zcdp", 0.0)
        summary: pl.DataFrame = summarize_polars_measurement(measurement, alpha)
        return summary

    def reference_schema(self) -> dict[str, PolarsDataType]:
        """A schema of OpenDP's input for the maps (they do not depend on the dtypes)."""
        return {_USER: pl.Int64, **dict.fromkeys(self.keys, pl.Int64), _ORDER: pl.UInt64, **self._value_schema()}

    def _value_schema(self) -> dict[str, PolarsDataType]:
        return {s.internal: pl.Int64 for s in self.statistics}

    def loss(self, d_in: int, scale: float, kind: MeasureKind, delta: float) -> Loss:
        """The charged map: OpenDP's map with d_in·(Δ0 + 1) keys, the most any key list costs (§5: the map is
        nondecreasing in the number of keys and constant from d_in·(Δ0 + 1) on)."""
        n = d_in * (self.max_contributions + 1)
        keys = pl.DataFrame({**{k: pl.Series(range(n), dtype=pl.Int64) for k in self.keys}})
        keys = keys.with_columns(pl.Series(_ORDER, range(n), dtype=pl.UInt64))
        loss = self.measurement(keys, self.reference_schema(), scale, kind, delta).map(d_in)
        return (float(loss[0]), float(loss[1])) if isinstance(loss, tuple) else float(loss)


def _stage_2_kind(output_measure: dp.Measure | None, delta: Any) -> tuple[MeasureKind, float]:
    """The output measure's kind (approximate zCDP or (ε, δ)) and the aggregates' conversion δ (0 under zCDP)."""
    kind = measure_kind(output_measure, ("approx_zcdp", "approx_dp"))
    if kind == "approx_zcdp":
        _check_absent("delta", delta, unless=_APPROX_DP)
        return kind, 0.0
    _check_given("delta", delta, when=f"with {_APPROX_DP}")
    return kind, _check_probability("delta", delta)


@dataclass(frozen=True)
class _GroupByRequest:
    """:func:`~opendp_wgm.measurements.group_by.make_wgm_group_by`'s stage-2 parameters as given (unchecked): what
    either engine's constructor checks on its own key columns (:meth:`setup`)."""

    max_contributions: Any
    scale: Any
    max_rows_per_key: Any
    sums: Any
    means: Any
    output_measure: Any
    delta: Any

    def setup(self, keys: tuple[str, ...]) -> _Stage2:
        """The checked stage 2 over the key columns ``keys``: the aggregates, then ``scale``, then the measure."""
        aggregates = _Aggregates.of(keys, self.max_contributions, self.max_rows_per_key, self.sums, self.means)
        scale = _check_positive("scale", self.scale)
        kind, delta = _stage_2_kind(self.output_measure, self.delta)

        @functools.lru_cache(maxsize=64)
        def charged(d_in: int) -> Loss:
            return aggregates.loss(_check_d_in(d_in), scale, kind, delta)

        return _Stage2(aggregates, scale, kind, delta, charged)


@dataclass(frozen=True)
class _Stage2:
    """Stage 2 of a group-by, checked, on either engine: the aggregates at OpenDP's ``scale``, the output measure's
    kind, the aggregates' conversion δ (0 under zCDP) and their map, ``charged`` (cached)."""

    aggregates: _Aggregates
    scale: float
    kind: MeasureKind
    delta: float
    charged: Callable[[int], Loss]

    @property
    def measure(self) -> dp.Measure:
        """The output measure of both stages."""
        return measure_of(self.kind)

    def compose(
        self,
        input_domain: dp.Domain,
        input_metric: dp.Metric,
        *,
        key_release: Stage1,
        stage_2: Callable[[dp.Domain, dp.Metric, pl.Series], dp.Measurement | Stage2Release],
        preparation: Preparation,
        combine: Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame],
    ) -> dp.Measurement:
        """``key_release``, then the engine's ``stage_2`` over the released keys, composed
        (:func:`~opendp_wgm.measurements.two_stage.make_two_stage`) with the aggregates' map; raises if the key
        release does not measure privacy in :attr:`measure`."""
        measurement = make_two_stage(
            input_domain, input_metric, stage_1=key_release, stage_2=stage_2, stage_2_map=self.charged,
            accounting=_ACCOUNTING, preparation=preparation, combine=combine,
        )
        if measurement.output_measure != self.measure:
            msg = f"`key_release` must measure privacy in {self.measure} (found {measurement.output_measure})"
            raise ValueError(msg)
        return measurement
