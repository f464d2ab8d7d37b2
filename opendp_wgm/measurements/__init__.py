"""Measurements: the paper's mechanisms (and, later, their baselines)."""

from opendp_wgm.measurements.wgm import make_wgm, make_wgm_from_budget, then_wgm, then_wgm_from_budget

__all__ = ["make_wgm", "make_wgm_from_budget", "then_wgm", "then_wgm_from_budget"]
