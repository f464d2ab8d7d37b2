"""opendp-wgm: differentially private domain discovery for OpenDP, on Polars.

The Weighted Gaussian Mechanism (WGM) releases the items that many users hold, under user-level
(ε, δ)-DP or approximate zCDP, when the item domain is unknown. Importing this package changes nothing
outside it: the caller enables OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features.
"""

from opendp_wgm import datasets, metrics
from opendp_wgm.accounting import WGMCalibration, calibrate_wgm
from opendp_wgm.domains import user_items_space
from opendp_wgm.measurements import make_wgm, make_wgm_from_budget, then_wgm, then_wgm_from_budget
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
    "calibrate_wgm",
    "datasets",
    "make_bound_user_items",
    "make_candidate_counts",
    "make_weighted_histogram",
    "make_wgm",
    "make_wgm_from_budget",
    "metrics",
    "then_bound_user_items",
    "then_candidate_counts",
    "then_weighted_histogram",
    "then_wgm",
    "then_wgm_from_budget",
    "user_items_space",
]
