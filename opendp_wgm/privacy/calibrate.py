r"""Calibration: the parameters of every mechanism from a budget, by searching on the privacy maps.

Each ``calibrate_*`` function turns a :class:`~opendp_wgm.privacy.budget.Budget` (built from the user's
``epsilon``/``rho`` and ``delta``) into the parameters of a measurement, and checks them against the map the
measurement will publish, so ``measurement.check(1, budget)`` holds. Every search is :func:`smallest_passing`,
on ``dp.binary_search``. Two exceptions, each documented where it is: :func:`limited_domain_local_epsilon`
reproduces the reference implementation's bisection bit for bit (an oracle value of the paper), and
:func:`calibrate_key_release` bisects OpenDP's own (costly) map to a relative 1e-5.

The calibrations live by concept, and this module gathers them (import from here):
:mod:`~opendp_wgm.privacy.search` (the search), :mod:`~opendp_wgm.privacy.wgm_calibration`,
:mod:`~opendp_wgm.privacy.sips_calibration`, :mod:`~opendp_wgm.privacy.two_stage_calibration` and
:mod:`~opendp_wgm.privacy.baseline_calibration`.

Each public name is imported from its module on first use (PEP 562): a WGM release needs no baseline
or two-stage calibration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opendp_wgm._lazy import _lazy_exports

if TYPE_CHECKING:  # the lazily imported public names (exported: they are in __all__), for type checkers
    from opendp_wgm.privacy.baseline_calibration import (
        LimitedDomainCalibration,
        calibrate_key_release,
        calibrate_limited_domain,
        calibrate_policy_greedy,
        limited_domain_local_epsilon,
    )
    from opendp_wgm.privacy.search import (
        smallest_fitting,
        smallest_passing,
    )
    from opendp_wgm.privacy.sips_calibration import (
        DPSIPSCalibration,
        calibrate_dp_sips,
    )
    from opendp_wgm.privacy.two_stage_calibration import (
        STAGE_1_MECHANISMS,
        HittingSetCalibration,
        Stage1Mechanism,
        WGMTopKCalibration,
        calibrate_peeling_for,
        calibrate_user_peeling,
        calibrate_wgm_hitting_set,
        calibrate_wgm_top_k,
        check_stage_1,
    )
    from opendp_wgm.privacy.wgm_calibration import (
        WGMCalibration,
        calibrate_wgm,
        calibrate_wgm_for,
    )

#: Public name -> the module that defines it.
_EXPORTS = {
    "STAGE_1_MECHANISMS": "opendp_wgm.privacy.two_stage_calibration",
    "DPSIPSCalibration": "opendp_wgm.privacy.sips_calibration",
    "HittingSetCalibration": "opendp_wgm.privacy.two_stage_calibration",
    "LimitedDomainCalibration": "opendp_wgm.privacy.baseline_calibration",
    "Stage1Mechanism": "opendp_wgm.privacy.two_stage_calibration",
    "WGMCalibration": "opendp_wgm.privacy.wgm_calibration",
    "WGMTopKCalibration": "opendp_wgm.privacy.two_stage_calibration",
    "calibrate_dp_sips": "opendp_wgm.privacy.sips_calibration",
    "calibrate_key_release": "opendp_wgm.privacy.baseline_calibration",
    "calibrate_limited_domain": "opendp_wgm.privacy.baseline_calibration",
    "calibrate_peeling_for": "opendp_wgm.privacy.two_stage_calibration",
    "calibrate_policy_greedy": "opendp_wgm.privacy.baseline_calibration",
    "calibrate_user_peeling": "opendp_wgm.privacy.two_stage_calibration",
    "calibrate_wgm": "opendp_wgm.privacy.wgm_calibration",
    "calibrate_wgm_for": "opendp_wgm.privacy.wgm_calibration",
    "calibrate_wgm_hitting_set": "opendp_wgm.privacy.two_stage_calibration",
    "calibrate_wgm_top_k": "opendp_wgm.privacy.two_stage_calibration",
    "check_stage_1": "opendp_wgm.privacy.two_stage_calibration",
    "limited_domain_local_epsilon": "opendp_wgm.privacy.baseline_calibration",
    "smallest_fitting": "opendp_wgm.privacy.search",
    "smallest_passing": "opendp_wgm.privacy.search",
}

__all__ = [
    "STAGE_1_MECHANISMS",
    "DPSIPSCalibration",
    "HittingSetCalibration",
    "LimitedDomainCalibration",
    "Stage1Mechanism",
    "WGMCalibration",
    "WGMTopKCalibration",
    "calibrate_dp_sips",
    "calibrate_key_release",
    "calibrate_limited_domain",
    "calibrate_peeling_for",
    "calibrate_policy_greedy",
    "calibrate_user_peeling",
    "calibrate_wgm",
    "calibrate_wgm_for",
    "calibrate_wgm_hitting_set",
    "calibrate_wgm_top_k",
    "check_stage_1",
    "limited_domain_local_epsilon",
    "smallest_fitting",
    "smallest_passing",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
