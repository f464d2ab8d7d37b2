"""The measurement of a two-stage calibration (top-k, hitting set): the one dispatch of both ``*_of_calibration``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import opendp.prelude as dp

from opendp_wgm.measurements.two_stage import (
    Peeling,
    _TwoStageCalibration,
    make_dp_sips_then_peeling,
    two_stage_arguments,
)
from opendp_wgm.privacy.peeling import Accounting


def two_stage_of_calibration(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    calibration: _TwoStageCalibration,
    *,
    make_wgm_then: Callable[..., dp.Measurement],
    sips_peeling: Callable[[], Peeling],
    accounting: Accounting,
    wgm_options: Mapping[str, Any],
    **options: Any,
) -> dp.Measurement:
    """The two-stage measurement of ``calibration``: DP-SIPS then the peeling of ``sips_peeling()`` (built, and so
    checked, only on that path) when its stage 1 is DP-SIPS, else ``make_wgm_then`` (the explicit WGM-then
    constructor, given ``wgm_options`` too). ``options`` (noise, item, passes, engine) go to both."""
    if calibration.sips is not None:
        return make_dp_sips_then_peeling(
            input_domain,
            input_metric,
            **two_stage_arguments(calibration, **options),
            peeling=sips_peeling(),
            accounting=accounting,
        )
    return make_wgm_then(input_domain, input_metric, **two_stage_arguments(calibration, **wgm_options, **options))
