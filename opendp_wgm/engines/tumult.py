r"""Tumult Core adapter: the WGM as a ``tmlt.core`` measurement over Spark DataFrames.

Install with ``pip install "opendp-wgm[tumult]"`` (Tumult Core 0.20 with pyspark 3.5; on Python 3.11 Tumult
Core needs ``numpy < 2`` and ``pandas < 2``, see ``docs/engines.md``). Importing this module imports
``tmlt.core``, which changes process-wide settings of its own (typeguard's collection checks, a pandas alias,
two warning filters); importing :mod:`opendp_wgm` alone does not.

:class:`WGMMeasurement` (and :class:`DPSIPSMeasurement`; for the two-stage mechanisms
:class:`WGMTopKMeasurement`, :class:`WGMHittingSetMeasurement` and, with DP-SIPS as stage 1,
:class:`DPSIPSTopKMeasurement`, :class:`DPSIPSHittingSetMeasurement`) is a
``tmlt.core.measurements.base.Measurement`` whose

- input domain is a ``SparkDataFrameDomain`` holding a user column and an item column,
- input metric is ``IfGroupedBy([user], SymmetricDifference())``: the distance counts the users whose rows
  differ, 1 for a user added or removed and 2 for a user whose rows changed, which is exactly the number of
  users added or removed that :mod:`opendp_wgm`'s maps take as ``d_in``,
- output measure is ``ApproxDP()``, with ``privacy_function`` computed by
  :func:`opendp_wgm.privacy.gaussian.wgm_privacy_loss`, the function behind every WGM map of this package,
- release is computed by the Spark engine (:mod:`opendp_wgm.spark`): noise is drawn in the executors and only
  the released items reach the driver.

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
from typing import Any

from opendp_wgm._validation import (
    _check_column,
    _check_columns,
    _check_one_item,
    _check_positive,
    _check_probability,
    _check_real,
)
from opendp_wgm.measurements.two_stage import two_stage_arguments
from opendp_wgm.privacy.calibrate import (
    HittingSetCalibration,
    Stage1Mechanism,
    WGMTopKCalibration,
    calibrate_dp_sips,
    calibrate_wgm,
    calibrate_wgm_hitting_set,
    calibrate_wgm_top_k,
)
from opendp_wgm.privacy.gaussian import wgm_privacy_loss
from opendp_wgm.privacy.threshold import check_max_contributions

__all__ = [
    "INSTALL_HINT",
    "DPSIPSHittingSetMeasurement",
    "DPSIPSMeasurement",
    "DPSIPSTopKMeasurement",
    "WGMHittingSetMeasurement",
    "WGMMeasurement",
    "WGMTopKMeasurement",
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


def _users(distance: ExactNumber) -> int:
    """floor(d_in) exactly: datasets are an integer number of users apart, so a d_in below k+1 means <= k."""
    users: int = math.floor(distance.to_float(round_up=False))
    while ExactNumber(users + 1) <= distance:  # exact, whatever the float rounding did
        users += 1
    while ExactNumber(users) > distance:
        users -= 1
    return users


def _epsilon_down(epsilon: Any, name: str = "epsilon") -> float:
    """ε > 0 (the parameter ``name``) as a float, rounded down (a smaller ε reports, or calibrates to, a larger
    δ)."""
    return _check_positive(name, _to_float(name, epsilon, round_up=False))


def _delta_down(delta: Any) -> float:
    """δ in (0, 1) as a float, rounded down (a calibration to it stays within the exact budget)."""
    return _check_probability("delta", _to_float("delta", delta, round_up=False))


def _driver_frame(
    session: Any, rows: Any, item: str, item_type: Any, column: str, column_type: Any, *more: tuple[str, Any]
) -> Any:
    """A Spark DataFrame (item, ``column``, then the ``(name, type)`` columns ``more``) of driver-side rows: a
    local relation, so re-evaluating it never redraws the noise."""
    from opendp_wgm.engines.spark import _item_schema

    schema = _item_schema(item, item_type, column, column_type)
    for name, data_type in more:
        schema = schema.add(name, data_type, False)
    return session.createDataFrame(rows, schema)


class _UserItemsMeasurement(_TumultMeasurement):  # type: ignore[misc]  # tmlt.core ships no type information
    """A Tumult measurement over a (user, item) Spark DataFrame under ``IfGroupedBy([user],
    SymmetricDifference())``, whose privacy function is a float map at ⌊d_in⌋ users (``_users_loss``)."""

    def __init__(self, input_domain: Any, user: str, item: str, output_measure: Any) -> None:
        super().__init__(
            input_domain=input_domain,
            input_metric=IfGroupedBy([user], SymmetricDifference()),
            output_measure=output_measure,
            is_interactive=False,
        )
        self._user, self._item = user, item

    @property
    def user(self) -> str:
        """The user (privacy unit) column."""
        return self._user

    @property
    def item(self) -> str:
        """The item column."""
        return self._item

    def _users_loss(self, users: int) -> tuple[float, float]:
        raise NotImplementedError

    def privacy_function(self, d_in: Any) -> tuple[ExactNumber, ExactNumber]:
        """The smallest (ε, δ) for inputs ``d_in`` apart: the map at ⌊d_in⌋ users (see the class Notes), each
        float reported as the exact rational it equals."""
        self.input_metric.validate(d_in)
        distance = ExactNumber(d_in)
        if not distance.is_finite:
            return ExactNumber(float("inf")), ExactNumber(1)
        users = _users(distance)
        if users == 0:
            return ExactNumber(0), ExactNumber(0)
        epsilon, delta = self._users_loss(users)
        return _exact(epsilon), _exact(delta)


class WGMMeasurement(_UserItemsMeasurement):
    r"""The Weighted Gaussian Mechanism on a Spark DataFrame, as a Tumult Core measurement.

    Releases the items whose weighted, noised user count exceeds ``threshold``: each user keeps a uniform
    random subset of at most Δ0 distinct items, gives each kept item weight :math:`1/\sqrt t` (rounded down to
    the lattice :math:`2^{-20}\mathbb Z`), sums are noised with the discrete Gaussian of scale σ and compared
    with T (:func:`opendp_wgm.make_wgm`, run by :mod:`opendp_wgm.spark`).

    Parameters
    ----------
    input_domain
        A ``SparkDataFrameDomain`` with the ``user`` and ``item`` columns (no floating-point descriptor for
        either; other columns are ignored).
    user, item
        Column names of the privacy unit and of the item.
    max_contributions
        Δ0 ≥ 1.
    scale
        σ > 0 (weight units).
    threshold
        T (weight units).
    epsilon
        The ε of the (ε, δ) pair reported for one user (a float or an exact Tumult number > 0).
    output_measure
        ``ApproxDP()`` (the default and the only sound choice; ``RhoZCDP()`` is refused with the reason).

    Notes
    -----
    Measurement contract: input domain ``SparkDataFrameDomain``; input metric
    ``IfGroupedBy([user], SymmetricDifference())``; output measure ``ApproxDP()``; output a materialised Spark
    DataFrame with columns ``item`` (the input's type) and ``noisy_weight`` (double), sorted by item.

    Privacy guarantee (``docs/privacy.md`` §3, :func:`opendp_wgm.privacy.gaussian.wgm_privacy_loss`), with
    :math:`k = \lfloor d_{in} \rfloor` (distances between datasets are integers):

    - :math:`d_{in} < 1`: :math:`(0, 0)`;
    - :math:`k \ge 1`: :math:`(k\varepsilon,\ \delta_{\mathcal N}(k\varepsilon - a;\ \sigma, k) + \delta_T(k))`,
      the analytic Gaussian profile plus the threshold's δ (exact for :math:`k = 1`, a group bound above);
    - :math:`d_{in} = \infty`: :math:`(\infty, 1)`.

    Each float is reported as the exact rational it equals.
    """

    def __init__(
        self,
        input_domain: Any,
        user: str,
        item: str,
        *,
        max_contributions: int,
        scale: float,
        threshold: float,
        epsilon: Any,
        output_measure: Any = None,
    ) -> None:
        _require_tmlt()
        max_contributions = check_max_contributions(max_contributions)
        scale = _check_positive("scale", scale)
        threshold = _check_real("threshold", threshold)
        epsilon_float = _epsilon_down(epsilon)
        output_measure = _check_output_measure(output_measure)
        _check_domain(input_domain, user, item)
        super().__init__(input_domain, user, item, output_measure)
        self._max_contributions, self._scale, self._threshold = max_contributions, scale, threshold
        self._epsilon = epsilon_float

    @property
    def max_contributions(self) -> int:
        """Δ0, the most distinct items a user keeps."""
        return self._max_contributions

    @property
    def scale(self) -> float:
        """σ, the noise scale in weight units."""
        return self._scale

    @property
    def threshold(self) -> float:
        """T, the release threshold in weight units."""
        return self._threshold

    @property
    def epsilon(self) -> float:
        """The ε reported for one user (a float; the reported value is its exact rational)."""
        return self._epsilon

    def _users_loss(self, users: int) -> tuple[float, float]:
        return wgm_privacy_loss(
            users,
            scale=self._scale,
            threshold=self._threshold,
            max_contributions=self._max_contributions,
            epsilon=self._epsilon,
        )

    def __call__(self, sdf: Any) -> Any:
        """Release on ``sdf``: a materialised Spark DataFrame of (item, noisy_weight), sorted by item."""
        from pyspark.sql import types

        from opendp_wgm.engines.spark import (
            SparkUserItemsDescriptor,
            _spark_wgm_function,
        )

        # the Spark measurement's release (opendp_wgm.engines.spark.make_wgm), run on the checked frame
        release = _spark_wgm_function(
            SparkUserItemsDescriptor(self._user, self._item), self._max_contributions, self._scale, self._threshold
        )
        released = release(sdf)  # a Polars frame: item, noisy_weight (exact: |noisy_lat| < 2^53), sorted by item
        item_type = sdf.schema[self._item].dataType
        rows = released.select(self._item, "noisy_weight").rows()
        return _driver_frame(sdf.sparkSession, rows, self._item, item_type, "noisy_weight", types.DoubleType())


def create_wgm_measurement(
    input_domain: Any,
    user: str,
    item: str,
    *,
    epsilon: Any,
    delta: Any,
    max_contributions: int,
    noise_delta_fraction: float = 0.5,
) -> WGMMeasurement:
    r"""A :class:`WGMMeasurement` calibrated to an (ε, δ) budget for one user.

    ``epsilon`` and ``delta`` may be floats or exact Tumult numbers; they are rounded *down* to floats and
    :func:`opendp_wgm.calibrate_wgm` (the paper's calibration: ``noise_delta_fraction`` of δ to the noise, the
    rest to the threshold) picks σ and T, so ``m.privacy_function(1)`` is at most the given budget, exactly.
    """
    _require_tmlt()
    calibration = calibrate_wgm(
        max_contributions=max_contributions,
        epsilon=_epsilon_down(epsilon),
        delta=_delta_down(delta),
        noise_delta_fraction=noise_delta_fraction,
    )
    return WGMMeasurement(
        input_domain,
        user,
        item,
        max_contributions=calibration.max_contributions,
        scale=calibration.scale,
        threshold=calibration.threshold,
        epsilon=calibration.epsilon,
    )


# --------------------------------------------------------------------------------------------------------------
# two-stage mechanisms: the Spark engine's measurements (opendp_wgm.spark), whose maps are the Polars ones


class _SparkTwoStage(_UserItemsMeasurement):
    """A Tumult measurement running an ``opendp_wgm.spark`` measurement (a two-stage one, or DP-SIPS) under
    ``ApproxDP``.

    The OpenDP measurement (built with ``output_measure=dp.approximate(dp.max_divergence())``) gives both the
    release and the map: ``privacy_function(d_in)`` is its ``map(floor(d_in))`` as exact rationals. Building it
    needs OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features, like every measurement of the package.
    """

    def __init__(
        self, make: Any, input_domain: Any, user: str, item: str, output_measure: Any, **params: Any
    ) -> None:
        import opendp.prelude as dp

        from opendp_wgm.engines.spark import spark_user_items_space

        _require_tmlt()
        output_measure = _check_output_measure(output_measure)
        _check_domain(input_domain, user, item)
        self._measurement = make(
            *spark_user_items_space(user, item), output_measure=dp.approximate(dp.max_divergence()), **params
        )
        super().__init__(input_domain, user, item, output_measure)

    @property
    def opendp_measurement(self) -> Any:
        """The ``opendp_wgm.spark`` measurement this one runs (its ``map`` is the privacy function)."""
        return self._measurement

    def _users_loss(self, users: int) -> tuple[float, float]:
        loss: tuple[float, float] = self._measurement.map(users)  # the OpenDP map at ⌊d_in⌋ users
        return loss

    def __call__(self, sdf: Any) -> Any:
        """Release on ``sdf``: a Spark DataFrame of (item, rank), in rank order, built from driver-side rows."""
        from pyspark.sql import types

        released = self._measurement(sdf)  # a Polars frame: item, rank (checked and run by opendp_wgm.spark)
        item_type = sdf.schema[self._item].dataType
        rows = released.select(self._item, "rank").rows()
        return _driver_frame(sdf.sparkSession, rows, self._item, item_type, "rank", types.IntegerType())


class WGMTopKMeasurement(_SparkTwoStage):
    r"""Private top-k over an unknown domain (WGM candidates, then peeling), as a Tumult Core measurement.

    Runs :func:`opendp_wgm.spark.make_wgm_top_k` (same parameters; the (ε, δ) form, so ``wgm_epsilon`` and
    ``peel_delta`` are required) and reports its map: adaptive composition of the WGM's (ε, δ) and the
    peeling's (``docs/top_k.md``), at :math:`\lfloor d_{in}\rfloor` users, as exact rationals. Input metric
    ``IfGroupedBy([user], SymmetricDifference())``, output measure ``ApproxDP()``; the release is a Spark
    DataFrame of (item, rank). Needs OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features.
    """

    def __init__(
        self,
        input_domain: Any,
        user: str,
        item: str,
        *,
        k: int,
        max_contributions: int,
        wgm_scale: float,
        wgm_threshold: float,
        peel_scale: float,
        wgm_epsilon: float,
        peel_delta: float,
        method: str = "auto",
        output_measure: Any = None,
    ) -> None:
        from opendp_wgm.engines.spark import make_wgm_top_k

        super().__init__(
            make_wgm_top_k, input_domain, user, item, output_measure,
            k=k, max_contributions=max_contributions, wgm_scale=wgm_scale, wgm_threshold=wgm_threshold,
            peel_scale=peel_scale, wgm_epsilon=wgm_epsilon, peel_delta=peel_delta, method=method,
        )  # fmt: skip


class WGMHittingSetMeasurement(_SparkTwoStage):
    r"""Private k-hitting set over an unknown domain (WGM candidates, then user peeling), for Tumult Core.

    Runs :func:`opendp_wgm.spark.make_wgm_hitting_set` (same parameters, (ε, δ) form) and reports its map at
    :math:`\lfloor d_{in}\rfloor` users as exact rationals (``docs/hitting_set.md``). Input metric
    ``IfGroupedBy([user], SymmetricDifference())``, output measure ``ApproxDP()``; the release is a Spark
    DataFrame of (item, rank). Needs OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features.
    """

    def __init__(
        self,
        input_domain: Any,
        user: str,
        item: str,
        *,
        k: int,
        max_contributions: int,
        wgm_scale: float,
        wgm_threshold: float,
        peel_scale: float,
        wgm_epsilon: float,
        peel_delta: float,
        output_measure: Any = None,
    ) -> None:
        from opendp_wgm.engines.spark import make_wgm_hitting_set

        super().__init__(
            make_wgm_hitting_set, input_domain, user, item, output_measure,
            k=k, max_contributions=max_contributions, wgm_scale=wgm_scale, wgm_threshold=wgm_threshold,
            peel_scale=peel_scale, wgm_epsilon=wgm_epsilon, peel_delta=peel_delta,
        )  # fmt: skip


def _stage_1_parameters(cal: WGMTopKCalibration | HittingSetCalibration) -> dict[str, Any]:
    """Stage 1's and the peeling's explicit parameters from an (ε, δ) two-stage calibration: ``k``,
    ``max_contributions``, ``peel_scale``, ``peel_delta``, and ``wgm_scale``, ``wgm_threshold``, ``wgm_epsilon``
    (a WGM stage 1) or ``sips_scales``, ``sips_thresholds``, ``sips_epsilon`` and, for the adaptive schedule,
    ``sips_statistic_scale``, ``sips_branch_scales``, ``sips_branch_thresholds`` (DP-SIPS): those of the Polars
    constructor's (``two_stage_arguments``), less its output measure (always ``ApproxDP()`` here)."""
    arguments = two_stage_arguments(cal)
    del arguments["output_measure"]
    return arguments


def create_wgm_top_k_measurement(
    input_domain: Any, user: str, item: str, *, k: int, epsilon: Any, delta: Any, max_contributions: int,
    split: float = 0.5, method: str = "auto", stage_1: Stage1Mechanism = "wgm", rounds: int | None = None,
    ratio: float | None = None,
) -> WGMTopKMeasurement | DPSIPSTopKMeasurement:  # fmt: skip
    """A :class:`WGMTopKMeasurement` calibrated to (ε, δ) by :func:`opendp_wgm.calibrate_wgm_top_k`; with
    ``stage_1="dp-sips"`` (``rounds``, ``ratio``: its schedule, both None for the adaptive default), a
    :class:`DPSIPSTopKMeasurement`, as :func:`opendp_wgm.make_wgm_top_k_from_budget` does.

    The budget is rounded down to floats first, so ``privacy_function(1)`` is at most the exact budget.
    """
    _require_tmlt()
    cal = calibrate_wgm_top_k(
        k=k, max_contributions=max_contributions, epsilon=_epsilon_down(epsilon), delta=_delta_down(delta),
        split=split, stage_1=stage_1, rounds=rounds, ratio=ratio,
    )  # fmt: skip
    measurement = DPSIPSTopKMeasurement if cal.sips is not None else WGMTopKMeasurement
    return measurement(input_domain, user, item, **_stage_1_parameters(cal), method=method)


def create_wgm_hitting_set_measurement(
    input_domain: Any, user: str, item: str, *, k: int, epsilon: Any, delta: Any, max_contributions: int,
    split: float = 0.5, noise_delta_fraction: float = 0.5, stage_1: Stage1Mechanism = "wgm",
    rounds: int | None = None, ratio: float | None = None,
) -> WGMHittingSetMeasurement | DPSIPSHittingSetMeasurement:  # fmt: skip
    """A :class:`WGMHittingSetMeasurement` calibrated to (ε, δ) by :func:`opendp_wgm.calibrate_wgm_hitting_set`;
    with ``stage_1="dp-sips"`` (``rounds``, ``ratio``: its schedule, both None for the adaptive default), a
    :class:`DPSIPSHittingSetMeasurement`, as :func:`opendp_wgm.make_wgm_hitting_set_from_budget` does.

    The budget is rounded down to floats first, so ``privacy_function(1)`` is at most the exact budget.
    """
    _require_tmlt()
    cal = calibrate_wgm_hitting_set(
        k=k, max_contributions=max_contributions, epsilon=_epsilon_down(epsilon), delta=_delta_down(delta),
        split=split, noise_delta_fraction=noise_delta_fraction, stage_1=stage_1, rounds=rounds, ratio=ratio,
    )  # fmt: skip
    measurement = DPSIPSHittingSetMeasurement if cal.sips is not None else WGMHittingSetMeasurement
    return measurement(input_domain, user, item, **_stage_1_parameters(cal))


class DPSIPSTopKMeasurement(_SparkTwoStage):
    r"""Private top-k over an unknown domain with DP-SIPS candidates, then peeling, as a Tumult Core measurement.

    :class:`WGMTopKMeasurement` with DP-SIPS (R rounds at σ_i, T_i, each on the items not yet released) as
    stage 1: runs the Spark measurement that :func:`opendp_wgm.spark.make_wgm_top_k_from_budget` builds with
    ``stage_1="dp-sips"`` (its (ε, δ) form) on these parameters, and reports its map: adaptive composition of
    DP-SIPS's (ε, δ) (:func:`opendp_wgm.privacy.sips.dp_sips_privacy_loss`) and the peeling's
    (``docs/top_k.md``), at :math:`\lfloor d_{in}\rfloor` users, as exact rationals. Input metric
    ``IfGroupedBy([user], SymmetricDifference())``, output measure ``ApproxDP()``; the release is a Spark
    DataFrame of (item, rank). Needs OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features.

    Parameters
    ----------
    input_domain, user, item, k, max_contributions, peel_scale, peel_delta, method, output_measure
        As for :class:`WGMTopKMeasurement`.
    sips_scales, sips_thresholds
        σ_i and T_i of each DP-SIPS round (weight units), as ``scales`` and ``thresholds`` of
        :class:`DPSIPSMeasurement`.
    sips_epsilon
        The ε at which DP-SIPS reports its δ (a float or an exact Tumult number > 0, rounded down).
    sips_statistic_scale, sips_branch_scales, sips_branch_thresholds
        DP-SIPS's adaptive schedule (all three, or none), as ``statistic_scale``, ``branch_scales`` and
        ``branch_thresholds`` of :class:`DPSIPSMeasurement`; :func:`create_wgm_top_k_measurement` calibrates
        them by default with ``stage_1="dp-sips"``.
    """

    def __init__(
        self,
        input_domain: Any,
        user: str,
        item: str,
        *,
        k: int,
        max_contributions: int,
        sips_scales: Any,
        sips_thresholds: Any,
        peel_scale: float,
        sips_epsilon: Any,
        peel_delta: float,
        sips_statistic_scale: float | None = None,
        sips_branch_scales: Any = None,
        sips_branch_thresholds: Any = None,
        method: str = "auto",
        output_measure: Any = None,
    ) -> None:
        from opendp_wgm.engines.spark import _make_dp_sips_top_k

        _require_tmlt()
        super().__init__(
            _make_dp_sips_top_k, input_domain, user, item, output_measure,
            k=k, max_contributions=max_contributions, sips_scales=sips_scales, sips_thresholds=sips_thresholds,
            peel_scale=peel_scale, sips_epsilon=_epsilon_down(sips_epsilon, "sips_epsilon"), peel_delta=peel_delta,
            method=method, sips_statistic_scale=sips_statistic_scale, sips_branch_scales=sips_branch_scales,
            sips_branch_thresholds=sips_branch_thresholds,
        )  # fmt: skip


class DPSIPSHittingSetMeasurement(_SparkTwoStage):
    r"""Private k-hitting set over an unknown domain with DP-SIPS candidates, then user peeling, for Tumult Core.

    :class:`WGMHittingSetMeasurement` with DP-SIPS as stage 1: runs the Spark measurement that
    :func:`opendp_wgm.spark.make_wgm_hitting_set_from_budget` builds with ``stage_1="dp-sips"`` (its (ε, δ) form)
    on these parameters, and reports its map at :math:`\lfloor d_{in}\rfloor` users as exact rationals
    (``docs/hitting_set.md``). Input metric ``IfGroupedBy([user], SymmetricDifference())``, output measure
    ``ApproxDP()``; the release is a Spark DataFrame of (item, rank). Needs OpenDP's ``"contrib"`` and
    ``"honest-but-curious"`` features.

    Parameters
    ----------
    input_domain, user, item, k, max_contributions, peel_scale, peel_delta, output_measure
        As for :class:`WGMHittingSetMeasurement`.
    sips_scales, sips_thresholds, sips_epsilon, sips_statistic_scale, sips_branch_scales, sips_branch_thresholds
        As for :class:`DPSIPSTopKMeasurement` (:func:`create_wgm_hitting_set_measurement` calibrates the adaptive
        schedule by default with ``stage_1="dp-sips"``).
    """

    def __init__(
        self,
        input_domain: Any,
        user: str,
        item: str,
        *,
        k: int,
        max_contributions: int,
        sips_scales: Any,
        sips_thresholds: Any,
        peel_scale: float,
        sips_epsilon: Any,
        peel_delta: float,
        sips_statistic_scale: float | None = None,
        sips_branch_scales: Any = None,
        sips_branch_thresholds: Any = None,
        output_measure: Any = None,
    ) -> None:
        from opendp_wgm.engines.spark import _make_dp_sips_hitting_set

        _require_tmlt()
        super().__init__(
            _make_dp_sips_hitting_set, input_domain, user, item, output_measure,
            k=k, max_contributions=max_contributions, sips_scales=sips_scales, sips_thresholds=sips_thresholds,
            peel_scale=peel_scale, sips_epsilon=_epsilon_down(sips_epsilon, "sips_epsilon"), peel_delta=peel_delta,
            sips_statistic_scale=sips_statistic_scale, sips_branch_scales=sips_branch_scales,
            sips_branch_thresholds=sips_branch_thresholds,
        )  # fmt: skip


# --------------------------------------------------------------------------------------------------------------
# DP-SIPS: the Spark engine's measurement (opendp_wgm.spark.make_dp_sips), whose map is the Polars one


class DPSIPSMeasurement(_SparkTwoStage):
    r"""DP-SIPS (R rounds of the WGM, each on the items not yet released) as a Tumult Core measurement.

    Runs :func:`opendp_wgm.spark.make_dp_sips` (same parameters, its (ε, δ) form) and reports its map,
    :func:`opendp_wgm.privacy.sips.dp_sips_privacy_loss` (the rounds' Gaussian parts composed as one Gaussian,
    plus the rounds' threshold δ's; ``docs/privacy.md``), at :math:`\lfloor d_{in}\rfloor` users, as exact
    rationals. Input metric ``IfGroupedBy([user], SymmetricDifference())``, output measure ``ApproxDP()``; the
    release is a materialised Spark DataFrame of (item, ``noisy_weight`` double, ``round`` smallint), sorted by
    item. Needs OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features.

    Parameters
    ----------
    input_domain, user, item
        As for :class:`WGMMeasurement`.
    max_contributions
        Δ0 ≥ 1, in every round.
    scales, thresholds
        σ_i and T_i of each round (weight units), as for :func:`opendp_wgm.make_dp_sips`.
    epsilon
        The ε of the (ε, δ) pair reported for one user (a float or an exact Tumult number > 0, rounded down).
    output_measure
        ``ApproxDP()`` (the default and the only sound choice; ``RhoZCDP()`` is refused with the reason).
    statistic_scale, branch_scales, branch_thresholds
        The adaptive schedule (all three, or none), as for :func:`opendp_wgm.make_dp_sips`: the noisy two-bin
        user count's σ_s and the dense branch's σ_i, T_i after round 1. :func:`create_dp_sips_measurement`
        calibrates them by default; :attr:`schedule` reports them.
    """

    def __init__(
        self,
        input_domain: Any,
        user: str,
        item: str,
        *,
        max_contributions: int,
        scales: Any,
        thresholds: Any,
        epsilon: Any,
        output_measure: Any = None,
        statistic_scale: float | None = None,
        branch_scales: Any = None,
        branch_thresholds: Any = None,
    ) -> None:
        from opendp_wgm.engines.spark import make_dp_sips

        _require_tmlt()
        super().__init__(
            make_dp_sips, input_domain, user, item, output_measure,
            max_contributions=max_contributions, scales=scales, thresholds=thresholds,
            epsilon=_epsilon_down(epsilon), statistic_scale=statistic_scale, branch_scales=branch_scales,
            branch_thresholds=branch_thresholds,
        )  # fmt: skip
        # checked by the Spark measurement's Polars twin above
        self._schedule: dict[str, Any] = {
            "scales": tuple(scales),
            "thresholds": tuple(thresholds),
            "statistic_scale": statistic_scale,
            "branch_scales": None if branch_scales is None else tuple(branch_scales),
            "branch_thresholds": None if branch_thresholds is None else tuple(branch_thresholds),
        }

    @property
    def schedule(self) -> dict[str, Any]:
        """The rounds' ``scales`` and ``thresholds`` and the adaptive schedule's ``statistic_scale``,
        ``branch_scales``, ``branch_thresholds`` (``None`` for a fixed schedule), as given."""
        return dict(self._schedule)

    def __call__(self, sdf: Any) -> Any:
        """Release on ``sdf``: a Spark DataFrame of (item, noisy_weight, round), sorted by item, built from
        driver-side rows."""
        from pyspark.sql import types

        released = self._measurement(sdf)  # a Polars frame: item, noisy_weight, round (run by opendp_wgm.spark)
        item_type = sdf.schema[self._item].dataType
        rows = released.select(self._item, "noisy_weight", "round").rows()
        return _driver_frame(
            sdf.sparkSession, rows, self._item, item_type, "noisy_weight", types.DoubleType(),
            ("round", types.ShortType()),
        )  # fmt: skip


def create_dp_sips_measurement(
    input_domain: Any, user: str, item: str, *, epsilon: Any, delta: Any, max_contributions: int,
    fractions: Any = None, rounds: int | None = None, ratio: float | None = None, noise_delta_fraction: float = 0.5,
) -> DPSIPSMeasurement:  # fmt: skip
    """A :class:`DPSIPSMeasurement` calibrated to (ε, δ) by :func:`opendp_wgm.privacy.calibrate.calibrate_dp_sips`
    (``fractions``, ``rounds``, ``ratio`` and ``noise_delta_fraction`` as for
    :func:`opendp_wgm.make_dp_sips_from_budget`; without a schedule the adaptive one, as there).

    The budget is rounded down to floats first, so ``privacy_function(1)`` is at most the exact budget.
    """
    _require_tmlt()
    cal = calibrate_dp_sips(
        max_contributions=max_contributions,
        epsilon=_epsilon_down(epsilon),
        delta=_delta_down(delta),
        rounds=rounds,
        ratio=ratio,
        fractions=fractions,
        noise_delta_fraction=noise_delta_fraction,
        adaptive=None,  # the adaptive schedule unless one is given
    )
    assert cal.epsilon is not None  # an (ε, δ) calibration reports its ε
    return DPSIPSMeasurement(
        input_domain, user, item, max_contributions=cal.max_contributions, scales=cal.scales,
        thresholds=cal.thresholds, epsilon=cal.epsilon, **cal.branch_arguments(),
    )  # fmt: skip
