"""Transitional: the three names ``opendp_wgm/cli.py`` imports from here, until the CLI split lands.

Privacy accounting lives in :mod:`opendp_wgm.privacy`; the public calibrations are exported by
:mod:`opendp_wgm`. Delete this module when the CLI imports ``calibrate_wgm``, ``calibrate_wgm_top_k`` and
``WGMCalibration`` from :mod:`opendp_wgm`.
"""

from opendp_wgm.privacy.calibrate import WGMCalibration, calibrate_wgm, calibrate_wgm_top_k

__all__ = ["WGMCalibration", "calibrate_wgm", "calibrate_wgm_top_k"]
