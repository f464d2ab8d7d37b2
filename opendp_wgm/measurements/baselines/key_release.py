r"""OpenDP's own key release, with the WGM's output shape: the baseline of what OpenDP 0.16 offers alone.

:func:`make_opendp_key_release` is a Polars plan of OpenDP's query builder (``make_private_lazyframe``) with
``truncate_per_group(1)``, ``truncate_num_groups(Δ0)`` and ``group_by(item).agg(dp.len())``; the quirks of
OpenDP 0.16 with Polars 1.36 it works around are in ``docs/baselines.md`` §4.
"""

from __future__ import annotations

from functools import lru_cache

import opendp.prelude as dp
import polars as pl
from opendp.extras.polars import dp_len
from polars._typing import PolarsDataType

from opendp_wgm._partial import _to_then
from opendp_wgm._spaces import _assert_features, _prepare_frame, _resolve_space, _Space
from opendp_wgm._validation import _check_d_in, _check_one_item, _check_real
from opendp_wgm.engines.polars import fresh_seeds
from opendp_wgm.measurements._opendp_frame import canonical_item, canonical_user, check_key_dtype, series_domain
from opendp_wgm.privacy.budget import Budget, measure_of
from opendp_wgm.privacy.calibrate import calibrate_key_release
from opendp_wgm.privacy.threshold import check_max_contributions

__all__ = ["make_opendp_key_release", "then_opendp_key_release"]

_KEY = "__opendp_wgm_key__"


def _key_release_input(
    frame: pl.DataFrame | pl.LazyFrame, space: _Space, user: str, item: str
) -> tuple[PolarsDataType, pl.LazyFrame]:
    """The data's item dtype (to cast the released items back) and the frame OpenDP's plan reads.

    Columns ``user``, ``item`` (canonical dtypes) and the item's keyed hash ``_KEY`` under a fresh secret seed
    (a row-wise map: stable).
    """
    lf = _prepare_frame(frame, space)
    schema = lf.collect_schema()
    check_key_dtype(space.item, schema[space.item])  # from the schema, before OpenDP draws any noise
    return schema[space.item], lf.select(
        canonical_user(space.user, schema[space.user]).alias(user),
        canonical_item(space.item, schema[space.item]).alias(item),
    ).with_columns(pl.col(item).hash(*fresh_seeds()).alias(_KEY))


def _key_release_plan(
    user: str, item: str, user_dtype: PolarsDataType, item_dtype: PolarsDataType, groups: int
) -> pl.LazyFrame:
    """OpenDP's key release plan: one row per (user, item), ``groups - 1`` items per user, noisy counts.

    The two filters are exactly what ``truncate_per_group(1, by=[key, item])`` and
    ``truncate_num_groups(groups, by=[key, item], keep="first")`` of OpenDP's query builder emit.
    """
    return (
        pl.LazyFrame(schema={user: user_dtype, item: item_dtype, _KEY: pl.UInt64})
        .filter(pl.int_range(pl.len()).over(user, _KEY, item) < 1)
        .filter(pl.struct(_KEY, item).rank("dense").over(user) < groups)
        .group_by(_KEY, item)
        .agg(dp_len(signed=True))
    )


def _opendp_measurement(
    user: str, item: str, user_dtype: PolarsDataType, item_dtype: PolarsDataType, groups: int, measure_kind: str,
    global_scale: float, threshold: int, total_delta: float,
) -> dp.Measurement:
    domain = dp.lazyframe_domain(
        [series_domain(user, user_dtype), series_domain(item, item_dtype), series_domain(_KEY, pl.UInt64)]
    )
    plan = _key_release_plan(user, item, user_dtype, item_dtype, groups)
    metric = dp.symmetric_id_distance(pl.col(user))
    inner = dp.m.make_private_lazyframe(
        domain, metric, measure_of("approx_zcdp"), plan, global_scale=global_scale, threshold=threshold
    )
    if measure_kind == "zcdp":
        return inner
    # make_fix_delta takes the *total* δ: the curve's share is what the threshold's δ leaves
    return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(inner), total_delta)


def make_opendp_key_release(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    noise_delta_fraction: float = 0.5,
    item: str | None = None,
) -> dp.Measurement:
    r"""OpenDP 0.16's own key release, calibrated to a budget, with the WGM's output shape.

    The plan is OpenDP's Polars one (``make_private_lazyframe``): ``truncate_per_group(1, by=[item])`` (one row
    per user and item), ``truncate_num_groups(Δ0, by=[item])`` (Δ0 items per user), ``group_by(item)
    .agg(dp.len())`` with OpenDP's integer Gaussian noise and its threshold on the noisy counts. Two quirks of
    OpenDP 0.16 with Polars 1.36 are worked around openly (``docs/baselines.md`` §4):

    - ``keep="sample"`` fails at collect ("multiple fields with name ... found"). It would rank each user's
      groups by an (unseeded) hash of the group key. We do the same with ``keep="first"`` on the groups
      ``(key, item)``, where ``key`` is a keyed hash of the item under a secret seed drawn per call (a column
      added before the data enter OpenDP; a row-wise map, stable): every user keeps its Δ0 items that come
      first in one random order of all items. Each user's kept set is a uniformly random subset of its items,
      but users' choices are correlated (users with the same items keep the same ones), unlike the WGM's
      independent per-user subsample.
    - ``keep="first"`` keeps ranks ``< k`` of a 1-based dense rank, i.e. only ``k − 1`` groups, while the map
      charges ``k``. We pass ``k = Δ0 + 1``, so each user keeps Δ0 items and OpenDP charges Δ0 + 1 of them
      (ℓ2 sensitivity :math:`\sqrt{\Delta_0 + 1}`): the price of the quirk, paid by this baseline.

    Parameters
    ----------
    input_domain, input_metric
        As for :func:`opendp_wgm.make_wgm`.
    max_contributions
        Δ0 ≥ 1, items kept per user.
    delta
        δ ∈ (0, 1).
    epsilon, rho
        Exactly one. With ε: OpenDP's zCDP → (ε, δ) conversion (``make_zCDP_to_approxDP`` then
        ``make_fix_delta`` at ``noise_delta_fraction · δ``), output measure
        ``dp.approximate(dp.max_divergence())``; with ρ: ``dp.approximate(dp.zero_concentrated_divergence())``.
    noise_delta_fraction
        Share of δ spent by the noise under (ε, δ); the rest pays for OpenDP's threshold.
    item
        Item column, when the input domain is OpenDP's and holds more than one other column.

    Returns
    -------
    opendp.mod.Measurement
        Maps a frame to a ``pl.DataFrame`` with the item column (input dtype) and ``noisy_count`` (Int64),
        sorted by item. The map is OpenDP's own, evaluated on the same plan; under (ε, δ) and ``d_in > 1``
        it is :math:`(d_{in}\varepsilon_1,\ \delta_{profile}(d_{in}\varepsilon_1) + \delta_T(d_{in}))` from OpenDP's
        privacy profile at ``d_in`` (``make_fix_delta`` refuses once the threshold's δ exceeds the fixed δ).

    Notes
    -----
    The global scale and the (integer) threshold are the smallest that pass OpenDP's map at ``d_in = 1``
    (bisection on the map). Data enter OpenDP through ``dp.lazyframe_domain``: the item column is cast to UInt64
    (UInt64), Int64 (other integers) or String (anything else, ``-0.0`` written as ``0.0``) and cast back on
    output, every value exactly; an item dtype that would not come back (Datetime, Time, Binary, nested) is
    refused from the schema before any noise. The user key enters as UInt64 or Int64 (integers), String
    (strings) or its dense rank (any other dtype), so that two rows are one user in OpenDP exactly when Polars
    finds their keys equal.

    Required features: ``contrib``, ``honest-but-curious``.
    """
    _assert_features()
    max_contributions = check_max_contributions(max_contributions)
    budget = Budget.of(epsilon=epsilon, rho=rho, delta=delta)
    epsilon, delta = budget.epsilon, budget.delta
    fraction = _check_real(
        "noise_delta_fraction",
        noise_delta_fraction,
        minimum=0.0,
        maximum=1.0,
        minimum_inclusive=False,
        maximum_inclusive=False,
    )
    space = _resolve_space(input_domain, input_metric, item)
    _check_one_item(space.composite, "for OpenDP's key release (its Polars plan groups by one item column)")
    groups = max_contributions + 1
    kind = "approx" if epsilon is not None else "zcdp"
    noise_delta = fraction * delta if epsilon is not None else 0.0
    global_scale, threshold = _calibrate_key_release(groups, kind, noise_delta, (budget.value, delta))
    user_name, item_name = "user", "item"

    @lru_cache(maxsize=8)
    def measurement_for(user_dtype: PolarsDataType, item_dtype: PolarsDataType) -> dp.Measurement:
        return _opendp_measurement(
            user_name, item_name, user_dtype, item_dtype, groups, kind, global_scale, threshold, delta
        )

    reference = measurement_for(pl.Int64, pl.Int64)
    inner_reference = _opendp_measurement(
        user_name, item_name, pl.Int64, pl.Int64, groups, "zcdp", global_scale, threshold, delta
    )

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        item_dtype, lf = _key_release_input(frame, space, user_name, item_name)
        schema = lf.collect_schema()
        once = measurement_for(schema[user_name], schema[item_name])(lf)
        released: pl.DataFrame = once.collect()  # OpenDP returns a OnceFrame: collect it exactly once
        return (
            released.select(
                pl.col(item_name).cast(item_dtype).alias(space.item),
                pl.col("len").cast(pl.Int64).alias("noisy_count"),
            ).sort(space.item)
        )

    epsilon_1 = float(reference.map(1)[0]) if epsilon is not None else None

    def privacy_map(d_in: int) -> tuple[float, float]:
        d_in = _check_d_in(d_in)
        if d_in == 0:
            return 0.0, 0.0
        if epsilon_1 is None or d_in == 1:
            loss = reference.map(d_in)
            return float(loss[0]), float(loss[1])
        # make_fix_delta's map fails once the threshold's δ at d_in exceeds the fixed δ: report the pair at
        # ε' = d_in·ε₁ from OpenDP's own privacy profile plus its threshold δ instead
        profile, threshold_delta = dp.c.make_zCDP_to_approxDP(inner_reference).map(d_in)
        return d_in * epsilon_1, min(1.0, float(profile.delta(d_in * epsilon_1)) + float(threshold_delta))

    return dp.m.make_user_measurement(input_domain, input_metric, budget.measure, function, privacy_map)


@lru_cache(maxsize=256)
def _calibrate_key_release(
    groups: int, kind: str, noise_delta: float, budget: tuple[float, float]
) -> tuple[float, int]:
    """Smallest global scale (and, for it, smallest threshold) whose OpenDP map at d_in = 1 meets ``budget``
    (:func:`opendp_wgm.privacy.calibrate.calibrate_key_release` on the plan of this module)."""

    def threshold_delta(scale: float, threshold: int) -> float:
        inner = _opendp_measurement("user", "item", pl.Int64, pl.Int64, groups, "zcdp", scale, threshold, 0.0)
        return float(inner.map(1)[1])

    def loss(scale: float, threshold: int) -> tuple[float, float]:
        measurement = _opendp_measurement("user", "item", pl.Int64, pl.Int64, groups, kind, scale, threshold, budget[1])
        loss = measurement.map(1)
        return float(loss[0]), float(loss[1])

    total = Budget("approx_dp" if kind == "approx" else "approx_zcdp", budget[0], budget[1])
    return calibrate_key_release(total, noise_delta=noise_delta, threshold_delta=threshold_delta, loss=loss)


then_opendp_key_release = _to_then(make_opendp_key_release)
