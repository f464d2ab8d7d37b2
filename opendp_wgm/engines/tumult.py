r"""Tumult Core adapter: any of the package's Spark measurements as one ``tmlt.core`` measurement.

Install with ``pip install "opendp-wgm[tumult]"`` (Tumult Core 0.20 with pyspark 3.5; on Python 3.11 Tumult
Core needs ``numpy < 2`` and ``pandas < 2``, see ``docs/engines.md``). Importing this module imports
``tmlt.core``, which changes process-wide settings of its own (typeguard's collection checks, a pandas alias,
two warning filters); importing :mod:`opendp_wgm` alone does not.

One class, :class:`TumultMeasurement`, wraps an OpenDP measurement built by a constructor of
:mod:`opendp_wgm.spark` (the WGM, DP-SIPS, top-k, the hitting set, with either stage 1) in its (ε, δ) form. It is
a ``tmlt.core.measurements.base.Measurement`` whose

- input domain is a ``SparkDataFrameDomain`` holding the measurement's user and item columns,
- input metric is ``IfGroupedBy([user], SymmetricDifference())``: the distance counts the users whose rows
  differ, 1 for a user added or removed and 2 for a user whose rows changed, which is exactly the number of
  users added or removed that :mod:`opendp_wgm`'s maps take as ``d_in``,
- output measure is ``ApproxDP()``, and ``privacy_function(d_in)`` is the OpenDP measurement's ``map`` at
  :math:`\lfloor d_{in}\rfloor` users (distances between datasets are integers), as exact rationals,
- release runs the OpenDP measurement (the Spark engine: noise is drawn in the executors and only released
  items reach the driver) and returns its rows as a Spark DataFrame built on the driver (a local relation, so
  re-evaluating it never redraws the noise).

The ``create_*`` functions calibrate to an (ε, δ) budget with the ``make_*_from_budget`` constructors of
:mod:`opendp_wgm.spark` and wrap the result. Building any of them needs OpenDP's ``"contrib"`` and
``"honest-but-curious"`` features, like every measurement of the package.

It composes in a Tumult ``PrivacyAccountant`` (or ``SequentialComposition``) with ``ApproxDP`` output measure
beside Tumult's own measurements. Tumult's ``RhoZCDP`` is *pure* ρ-zCDP and the WGM is not ρ-zCDP for any
finite ρ (an item only one neighbour holds is released with probability up to δ > 0), so ``RhoZCDP`` is
refused; Tumult Core 0.20 has no approximate-zCDP measure. Convert Tumult's ``RhoZCDP`` measurements with
``RhoZCDPToApproxDP`` to compose them with the WGM.

Numbers: the maps are evaluated in floating point with a conservative rounding direction
(``docs/privacy.md``), and each float is then converted to the *exact* rational it represents
(``ExactNumber.from_float(..., round_up=True)``), so the accountant's exact arithmetic sees exactly the
guarantee the map states.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from opendp_wgm._validation import (
    _check_column,
    _check_columns,
    _check_one_item,
    _check_positive,
    _check_probability,
    _check_real,
)
from opendp_wgm.privacy.calibrate import Stage1Mechanism

__all__ = [
    "INSTALL_HINT",
    "TumultMeasurement",
    "create_dp_sips_measurement",
    "create_wgm_hitting_set_measurement",
    "create_wgm_measurement",
    "create_wgm_top_k_measurement",
]

#: What to install when Tumult Core (or pyspark) is missing.
INSTALL_HINT = 'pip install "opendp-wgm[tumult]"'

try:
    from tmlt.core.domains.spark_domains import (
        SparkDataFrameDomain,
        SparkFloatColumnDescriptor,
    )
    from tmlt.core.measurements.base import Measurement as _TumultMeasurement
    from tmlt.core.measures import ApproxDP, RhoZCDP
    from tmlt.core.metrics import IfGroupedBy, SymmetricDifference
    from tmlt.core.utils.exact_number import ExactNumber
except ImportError as _error:  # the module still imports (docs, doctest collection); constructors raise
    _IMPORT_ERROR: ImportError | None = _error
    _TumultMeasurement = object
else:
    _IMPORT_ERROR = None


def _require_tmlt() -> None:
    if _IMPORT_ERROR is not None:
        msg = f"opendp_wgm.tumult needs Tumult Core 0.20 (tmlt.core) and pyspark 3.5: {INSTALL_HINT}"
        raise ModuleNotFoundError(msg) from _IMPORT_ERROR


def _to_float(name: str, value: Any, *, round_up: bool) -> float:
    """A Tumult ``ExactNumberInput`` (or a float) as a float, rounded in the stated direction."""
    if isinstance(value, bool):
        raise TypeError(f"`{name}` must be a real number (found {value!r})")
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Rational):
        return _check_real(name, value)
    try:
        exact = ExactNumber(value)
    except Exception as err:  # sympy / Tumult raise several types for malformed numbers
        raise TypeError(f"`{name}` must be a real number or a Tumult ExactNumberInput (found {value!r})") from err
    rounded: float = exact.to_float(round_up=round_up)
    return rounded


def _exact(value: float) -> ExactNumber:
    """The exact rational value of a float (no rounding: every finite float is a dyadic rational)."""
    return ExactNumber.from_float(value, round_up=True)


def _check_output_measure(output_measure: Any) -> Any:
    if output_measure is None:
        return ApproxDP()
    if isinstance(output_measure, RhoZCDP):
        msg = (
            "the WGM is not rho-zCDP (Tumult's RhoZCDP is pure zCDP): it releases an item that only one "
            "neighbour holds with probability up to delta > 0. Use output_measure=ApproxDP(), and convert "
            "RhoZCDP measurements with tmlt.core.measurements.converters.RhoZCDPToApproxDP to compose them"
        )
        raise ValueError(msg)
    if not isinstance(output_measure, ApproxDP):
        raise ValueError(f"`output_measure` must be ApproxDP() (found {output_measure!r})")
    return output_measure


def _check_domain(input_domain: Any, user: Any, item: Any) -> None:
    _check_one_item(item, "on the Tumult engine (composite keys are Polars-only)")
    if not isinstance(input_domain, SparkDataFrameDomain):
        raise TypeError(f"`input_domain` must be a tmlt.core SparkDataFrameDomain (found {input_domain!r})")
    for name, column in (("user", user), ("item", item)):
        _check_column(name, column)
        if column not in input_domain.schema:
            msg = f"{name} column {column!r} not found in `input_domain` (columns: {list(input_domain.schema)})"
            raise ValueError(msg)
        if isinstance(input_domain.schema[column], SparkFloatColumnDescriptor):
            found = input_domain.schema[column]
            raise ValueError(f"`{name}` column {column!r} must not be floating point (found {found})")
    _check_columns(user, item)


def _spark_columns(measurement: Any) -> tuple[str, str]:
    """The (user, item) columns of an :mod:`opendp_wgm.spark` measurement in its (ε, δ) form; raises otherwise."""
    import opendp.prelude as dp

    from opendp_wgm.spark import spark_user_items_space

    descriptor = getattr(getattr(measurement, "input_domain", None), "descriptor", None)
    user, item = getattr(descriptor, "user", ""), getattr(descriptor, "item", "")
    spark = isinstance(measurement, dp.Measurement) and isinstance(user, str) and isinstance(item, str)
    spark = spark and bool(user) and bool(item)
    if not (spark and measurement.input_domain == spark_user_items_space(str(user), str(item))[0]):
        msg = (
            "`measurement` must be built by an opendp_wgm.spark constructor on spark_user_items_space(user, item) "
            f"(found {measurement!r})"
        )
        raise TypeError(msg)
    if measurement.output_measure != dp.approximate(dp.max_divergence()):
        msg = (
            "`measurement` must have the (epsilon, delta) output measure dp.approximate(dp.max_divergence()), "
            f"which Tumult's ApproxDP accounts (found {measurement.output_measure}): build it with that "
            "output_measure and an epsilon, or with a make_*_from_budget constructor given epsilon"
        )
        raise ValueError(msg)
    return str(user), str(item)


def _users(distance: ExactNumber) -> int:
    """floor(d_in) exactly: datasets are an integer number of users apart, so a d_in below k+1 means <= k."""
    users: int = math.floor(distance.to_float(round_up=False))
    while ExactNumber(users + 1) <= distance:  # exact, whatever the float rounding did
        users += 1
    while ExactNumber(users) > distance:
        users -= 1
    return users


def _spark_type(dtype: Any) -> Any:
    """The Spark type that holds every value of a released (non-item) Polars column: the same width for signed
    integers and floats, the next signed width for unsigned integers."""
    import polars as pl
    from pyspark.sql import types

    mapping = {
        pl.Float64: types.DoubleType(), pl.Float32: types.FloatType(), pl.Int8: types.ByteType(),
        pl.Int16: types.ShortType(), pl.Int32: types.IntegerType(), pl.Int64: types.LongType(),
        pl.UInt8: types.ShortType(), pl.UInt16: types.IntegerType(), pl.UInt32: types.LongType(),
        pl.Boolean: types.BooleanType(), pl.String: types.StringType(),
    }  # fmt: skip
    if dtype.base_type() not in mapping:
        raise TypeError(f"a released column of Polars type {dtype} has no Spark type here")
    return mapping[dtype.base_type()]


class TumultMeasurement(_TumultMeasurement):  # type: ignore[misc]  # tmlt.core ships no type information
    r"""A measurement of :mod:`opendp_wgm.spark` as a Tumult Core measurement.

    Parameters
    ----------
    input_domain
        A ``SparkDataFrameDomain`` with the measurement's user and item columns (no floating-point descriptor
        for either; other columns are ignored).
    measurement
        An OpenDP measurement built by a constructor of :mod:`opendp_wgm.spark` (``make_wgm``,
        ``make_dp_sips``, ``make_wgm_top_k``, ``make_wgm_hitting_set`` or their ``_from_budget`` forms) on
        ``spark_user_items_space(user, item)``, with the (ε, δ) output measure
        ``dp.approximate(dp.max_divergence())``.
    output_measure
        ``ApproxDP()`` (the default and the only sound choice; ``RhoZCDP()`` is refused with the reason).

    Raises
    ------
    ModuleNotFoundError
        Without Tumult Core (the message names the extra).
    TypeError, ValueError
        When ``measurement`` is not such a measurement (or has another output measure), or ``input_domain``
        lacks a column or describes one as floating point.

    Notes
    -----
    Measurement contract: input domain ``SparkDataFrameDomain``; input metric
    ``IfGroupedBy([user], SymmetricDifference())``; output measure ``ApproxDP()``; output a Spark DataFrame of
    the OpenDP release's rows, the item column with the input's Spark type and every other column with the Spark
    type holding its Polars type (``noisy_weight`` double, ``round`` smallint, ``rank`` bigint).

    Privacy guarantee, with :math:`k = \lfloor d_{in} \rfloor` (distances between datasets are integers):
    :math:`(0, 0)` for :math:`d_{in} < 1`; ``measurement.map(k)`` for :math:`k \ge 1`; :math:`(\infty, 1)` at
    :math:`d_{in} = \infty`. Each float is reported as the exact rational it equals.
    """

    def __init__(self, input_domain: Any, measurement: Any, *, output_measure: Any = None) -> None:
        _require_tmlt()
        output_measure = _check_output_measure(output_measure)
        user, item = _spark_columns(measurement)
        _check_domain(input_domain, user, item)
        super().__init__(
            input_domain=input_domain,
            input_metric=IfGroupedBy([user], SymmetricDifference()),
            output_measure=output_measure,
            is_interactive=False,
        )
        self._user, self._item, self._measurement = user, item, measurement

    @property
    def user(self) -> str:
        """The user (privacy unit) column."""
        return self._user

    @property
    def item(self) -> str:
        """The item column."""
        return self._item

    @property
    def opendp_measurement(self) -> Any:
        """The :mod:`opendp_wgm.spark` measurement this one runs (its ``map`` is the privacy function)."""
        return self._measurement

    def privacy_function(self, d_in: Any) -> tuple[ExactNumber, ExactNumber]:
        """The smallest (ε, δ) for inputs ``d_in`` apart: the OpenDP map at ⌊d_in⌋ users, each float reported as
        the exact rational it equals."""
        self.input_metric.validate(d_in)
        distance = ExactNumber(d_in)
        if not distance.is_finite:
            return ExactNumber(float("inf")), ExactNumber(1)
        users = _users(distance)
        if users == 0:
            return ExactNumber(0), ExactNumber(0)
        epsilon, delta = self._measurement.map(users)
        return _exact(epsilon), _exact(delta)

    def __call__(self, sdf: Any) -> Any:
        """Release on ``sdf``: the OpenDP measurement's rows (checked and run by :mod:`opendp_wgm.spark`), as a
        Spark DataFrame built from driver-side rows, in the release's order."""
        from pyspark.sql import types

        released = self._measurement(sdf)  # a Polars frame: the item column first, then the statistics
        fields = [types.StructField(self._item, sdf.schema[self._item].dataType, False)]
        others = [name for name in released.columns if name != self._item]
        # the statistics are nullable: max_contributions="auto" releases a null noisy_weight where it chose Δ0 = 1
        # (partition selection), so a non-nullable field would fail that release after its noise was drawn
        fields += [types.StructField(name, _spark_type(released.schema[name]), True) for name in others]
        rows = released.select(self._item, *others).rows()
        return sdf.sparkSession.createDataFrame(rows, types.StructType(fields))


# --------------------------------------------------------------------------------------------------------------
# calibrated to an (ε, δ) budget: the opendp_wgm.spark constructors' _from_budget forms, wrapped


def _epsilon_down(epsilon: Any) -> float:
    """ε > 0 as a float, rounded down (a calibration to it stays within the exact budget)."""
    return _check_positive("epsilon", _to_float("epsilon", epsilon, round_up=False))


def _delta_down(delta: Any) -> float:
    """δ in (0, 1) as a float, rounded down (a calibration to it stays within the exact budget)."""
    return _check_probability("delta", _to_float("delta", delta, round_up=False))


def _create(
    make: Callable[..., Any], input_domain: Any, user: str, item: str, epsilon: Any, delta: Any, **parameters: Any
) -> TumultMeasurement:
    """``make(*spark_user_items_space(user, item), epsilon=, delta=, **parameters)`` on the budget rounded down to
    floats (so ``privacy_function(1)`` is at most the exact budget), wrapped."""
    from opendp_wgm.spark import spark_user_items_space

    _check_domain(input_domain, user, item)
    measurement = make(
        *spark_user_items_space(user, item), epsilon=_epsilon_down(epsilon), delta=_delta_down(delta), **parameters
    )
    return TumultMeasurement(input_domain, measurement)


def create_wgm_measurement(
    input_domain: Any, user: str, item: str, *, epsilon: Any, delta: Any, max_contributions: int,
    noise_delta_fraction: float = 0.5,
) -> TumultMeasurement:  # fmt: skip
    """The WGM calibrated to an (ε, δ) budget for one user: :func:`opendp_wgm.spark.make_wgm_from_budget`
    (``epsilon``, ``delta``: floats or exact Tumult numbers, rounded down to floats first), wrapped."""
    _require_tmlt()
    from opendp_wgm.spark import make_wgm_from_budget

    return _create(
        make_wgm_from_budget, input_domain, user, item, epsilon, delta,
        max_contributions=max_contributions, noise_delta_fraction=noise_delta_fraction,
    )  # fmt: skip


def create_dp_sips_measurement(
    input_domain: Any, user: str, item: str, *, epsilon: Any, delta: Any, max_contributions: int,
    fractions: Sequence[float] | None = None, rounds: int | None = None, ratio: float | None = None,
    noise_delta_fraction: float = 0.5,
) -> TumultMeasurement:  # fmt: skip
    """DP-SIPS calibrated to (ε, δ): :func:`opendp_wgm.spark.make_dp_sips_from_budget` (without ``fractions``,
    ``rounds``, ``ratio`` the adaptive schedule, as on Polars), wrapped."""
    _require_tmlt()
    from opendp_wgm.spark import make_dp_sips_from_budget

    return _create(
        make_dp_sips_from_budget, input_domain, user, item, epsilon, delta, max_contributions=max_contributions,
        fractions=fractions, rounds=rounds, ratio=ratio, noise_delta_fraction=noise_delta_fraction,
    )  # fmt: skip


def create_wgm_top_k_measurement(
    input_domain: Any, user: str, item: str, *, k: int, epsilon: Any, delta: Any, max_contributions: int,
    split: float = 0.5, method: str = "auto", stage_1: Stage1Mechanism = "wgm", rounds: int | None = None,
    ratio: float | None = None,
) -> TumultMeasurement:  # fmt: skip
    """Top-k calibrated to (ε, δ): :func:`opendp_wgm.spark.make_wgm_top_k_from_budget` (``stage_1="dp-sips"``
    with ``rounds``, ``ratio``, both None for the adaptive schedule), wrapped."""
    _require_tmlt()
    from opendp_wgm.spark import make_wgm_top_k_from_budget

    return _create(
        make_wgm_top_k_from_budget, input_domain, user, item, epsilon, delta, k=k,
        max_contributions=max_contributions, split=split, method=method, stage_1=stage_1, rounds=rounds, ratio=ratio,
    )  # fmt: skip


def create_wgm_hitting_set_measurement(
    input_domain: Any, user: str, item: str, *, k: int, epsilon: Any, delta: Any, max_contributions: int,
    split: float = 0.5, noise_delta_fraction: float = 0.5, stage_1: Stage1Mechanism = "wgm",
    rounds: int | None = None, ratio: float | None = None,
) -> TumultMeasurement:  # fmt: skip
    """The k-hitting set calibrated to (ε, δ): :func:`opendp_wgm.spark.make_wgm_hitting_set_from_budget`
    (``stage_1``, ``rounds``, ``ratio`` as for :func:`create_wgm_top_k_measurement`), wrapped."""
    _require_tmlt()
    from opendp_wgm.spark import make_wgm_hitting_set_from_budget

    return _create(
        make_wgm_hitting_set_from_budget, input_domain, user, item, epsilon, delta, k=k,
        max_contributions=max_contributions, split=split, noise_delta_fraction=noise_delta_fraction,
        stage_1=stage_1, rounds=rounds, ratio=ratio,
    )  # fmt: skip
