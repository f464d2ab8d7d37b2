r"""What private top-k and the k-hitting set share: "WGM, then peeling", and the released frame.

:mod:`opendp_wgm.measurements.top_k` and :mod:`opendp_wgm.measurements.hitting_set` both run ``k`` rounds of
the exponential mechanism on monotone user counts (``docs/top_k.md`` §2, ``docs/hitting_set.md`` §2), and both
compose such a stage adaptively after a WGM that discovers the candidates (``docs/top_k.md`` §3,
``docs/hitting_set.md`` §3). This module holds the common part:

- the two-stage constructor (:func:`_make_wgm_then_peeling`), its release on either engine
  (:func:`_two_stage_function`, also used by :mod:`opendp_wgm.spark`) and its calibrated arguments
  (:func:`_two_stage_arguments`);
- the released frame, item column and ``rank`` (:func:`_ranked_frame`).

Their measures, maps and rounding policies are in :mod:`opendp_wgm.privacy` (:mod:`~opendp_wgm.privacy.budget`,
:mod:`~opendp_wgm.privacy.peeling`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import opendp.prelude as dp
import polars as pl

from opendp_wgm._validation import _check_d_in, _check_int, _check_positive, _check_real
from opendp_wgm.domains import _prepare_frame, _resolve_space, _Space
from opendp_wgm.measurements.wgm import (
    Engine,
    Noise,
    _check_execution,
    _check_noise,
    _wgm_function,
    make_wgm,
)
from opendp_wgm.privacy.budget import check_two_stage_measure, measure_of
from opendp_wgm.privacy.calibrate import WGMCalibration
from opendp_wgm.privacy.peeling import Accounting, add_up, peeling_loss
from opendp_wgm.privacy.threshold import check_max_contributions

__all__: list[str] = []

RANK = "rank"

#: The stage-2 release of a two-stage measurement: ``(lf, space, candidates, k, scale) -> frame``.
_Stage2 = Callable[[pl.LazyFrame, _Space, pl.Series, int, float], pl.DataFrame]


class _TwoStageCalibration(Protocol):
    """What a two-stage calibration gives (``WGMTopKCalibration``, ``HittingSetCalibration``)."""

    @property
    def k(self) -> int: ...
    @property
    def wgm(self) -> WGMCalibration: ...
    @property
    def peel_scale(self) -> float: ...
    @property
    def peel_delta(self) -> float: ...
    @property
    def epsilon(self) -> float | None: ...


# --------------------------------------------------------------------------------------------------------------
# release frames


def _ranked_frame(items: pl.Series, chosen: np.ndarray, name: str, **extra: np.ndarray) -> pl.DataFrame:
    """The released frame: ``items[chosen]`` (in selection order) as column ``name``, their rank 1..len, and
    ``extra`` columns."""
    picked = items.gather(pl.Series(chosen, dtype=pl.UInt32)) if chosen.shape[0] else items.clear()
    return pl.DataFrame(
        [
            picked.rename(name),
            pl.Series(RANK, np.arange(1, chosen.shape[0] + 1), dtype=pl.UInt32),
            *(pl.Series(column, values) for column, values in extra.items()),
        ]
    )


# --------------------------------------------------------------------------------------------------------------
# WGM, then peeling


def _make_wgm_then_peeling(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    k: int,
    max_contributions: int,
    wgm_scale: float,
    wgm_threshold: float,
    peel_scale: float,
    output_measure: dp.Measure | None,
    wgm_epsilon: float | None,
    peel_delta: float | None,
    noise: Noise,
    item: str | None,
    passes: int,
    engine: Engine,
    stage_2: _Stage2,
    accounting: Accounting,
) -> dp.Measurement:
    r"""Stage 1, :func:`opendp_wgm.make_wgm`, releases candidates; stage 2 peels ``k`` of them on the data.

    Only ``stage_2``'s frame is released, and stage 2 reads the *unclipped* data (the paper's reference code).
    The map is the sum of the stage maps, rounded up, with stage 2 charged ``k`` rounds whatever the number of
    candidates (adaptive composition: ``docs/top_k.md`` §3, ``docs/hitting_set.md`` §3). The caller asserts
    the features and checks its own parameters first; this checks the shared ones, in signature order.
    ``passes`` and ``engine`` are stage 1's, as in :func:`opendp_wgm.make_wgm`; stage 2 is one more pass, and
    keeps only the candidates' rows.
    """
    k = _check_int("k", k, minimum=1)
    max_contributions = check_max_contributions(max_contributions)
    wgm_scale = _check_positive("wgm_scale", wgm_scale)
    wgm_threshold = _check_real("wgm_threshold", wgm_threshold)
    peel_scale = _check_positive("peel_scale", peel_scale)
    noise = _check_noise(noise)
    output_measure, kind, wgm_epsilon, peel_delta_value = check_two_stage_measure(
        output_measure, wgm_epsilon, peel_delta, zero_delta=accounting.zero_delta
    )
    passes, engine = _check_execution(passes, engine)
    # stage 1 checks the rest (σ's range, the input space) and gives its map
    stage_1 = make_wgm(
        input_domain,
        input_metric,
        max_contributions=max_contributions,
        scale=wgm_scale,
        threshold=wgm_threshold,
        output_measure=output_measure,
        epsilon=wgm_epsilon,
        noise=noise,
        item=item,
        passes=passes,
        engine=engine,
    )
    space = _resolve_space(input_domain, input_metric, item)
    release = _wgm_function(
        space, max_contributions, wgm_scale, wgm_threshold, noise, passes=passes, engine=engine, prepared=True
    )
    function = _two_stage_function(
        lambda frame: _prepare_frame(frame, space),
        lambda lf: release(lf).get_column(space.item),
        stage_2,
        space,
        k,
        peel_scale,
    )

    def privacy_map(d_in: int) -> tuple[float, float]:
        d_in = _check_d_in(d_in)
        first = stage_1.map(d_in)
        second = peeling_loss(
            d_in, k=k, scale=peel_scale, kind=kind, accounting=accounting, delta=peel_delta_value
        )
        delta = add_up(first[1], second[1], accounting)
        return add_up(first[0], second[0], accounting), (min(1.0, delta) if accounting.cap_delta else delta)

    return dp.m.make_user_measurement(input_domain, input_metric, output_measure, function, privacy_map)


def _two_stage_function(
    prepare: Callable[[Any], Any],
    release_candidates: Callable[[Any], pl.Series],
    stage_2: Callable[[Any, Any, pl.Series, int, float], pl.DataFrame],
    space: Any,
    k: int,
    peel_scale: float,
) -> Callable[[Any], pl.DataFrame]:
    """The release of WGM-then-peeling on any engine: ``prepare`` the input, release the candidates with the
    WGM (their noisy weights are discarded), and return ``stage_2``'s frame only, computed on the prepared,
    *unclipped* data. :mod:`opendp_wgm.spark` composes its stages with it too."""

    def function(frame: Any) -> pl.DataFrame:
        data = prepare(frame)
        candidates = release_candidates(data)  # stage 1: the released items only
        return stage_2(data, space, candidates, k, peel_scale)  # stage 2, on the unclipped data

    return function


def _two_stage_arguments(calibration: _TwoStageCalibration, **options: Any) -> dict[str, Any]:
    """The keyword arguments of a two-stage constructor from its calibration, (ε, δ)-DP or approximate zCDP,
    with ``options`` (the ``_from_budget`` constructor's own: noise, method, item, passes, engine) passed
    through unchanged; the explicit constructor checks them."""
    approx_dp = calibration.epsilon is not None
    return {
        "k": calibration.k,
        "max_contributions": calibration.wgm.max_contributions,
        "wgm_scale": calibration.wgm.scale,
        "wgm_threshold": calibration.wgm.threshold,
        "peel_scale": calibration.peel_scale,
        "output_measure": measure_of("approx_dp" if approx_dp else "approx_zcdp"),
        "wgm_epsilon": calibration.wgm.epsilon if approx_dp else None,
        "peel_delta": calibration.peel_delta if approx_dp else None,
        **options,
    }
