"""opendp-wgm: differentially private domain discovery for OpenDP, on Polars.

The Weighted Gaussian Mechanism (WGM) releases the items that many users hold, under user-level
(ε, δ)-DP or approximate zCDP, when the item domain is unknown; two-stage mechanisms use it to find the
top-k items and a k-hitting set. Importing this package changes nothing outside it: the caller enables
OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features.
"""

from opendp_wgm import datasets, metrics
from opendp_wgm.domains import user_items_space
from opendp_wgm.measurements import *  # noqa: F403 - the measurements' own __all__
from opendp_wgm.measurements import __all__ as _measurements
from opendp_wgm.privacy.calibrate import WGMCalibration, WGMTopKCalibration, calibrate_wgm, calibrate_wgm_top_k
from opendp_wgm.transformations import (
    make_bound_user_items,
    make_candidate_counts,
    make_weighted_histogram,
    then_bound_user_items,
    then_candidate_counts,
    then_weighted_histogram,
)

__version__ = "0.1.0"

__all__ = [
    "WGMCalibration",
    "WGMTopKCalibration",
    "calibrate_wgm",
    "calibrate_wgm_top_k",
    "datasets",
    "make_bound_user_items",
    "make_candidate_counts",
    "make_weighted_histogram",
    "metrics",
    "then_bound_user_items",
    "then_candidate_counts",
    "then_weighted_histogram",
    "user_items_space",
    *_measurements,
]
