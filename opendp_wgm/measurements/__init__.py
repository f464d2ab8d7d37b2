"""Measurements: the paper's mechanisms, their known-domain stages and the baselines.

Each public name is imported from its module on first use (PEP 562), so that a release imports only the
mechanism it runs (the command's ``discover`` needs no baselines, hitting sets or group-by).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opendp_wgm._lazy import _lazy_exports

if TYPE_CHECKING:  # the lazily imported public names, re-exported (``name as name``) for type checkers
    from opendp_wgm.measurements.auto_contributions import AutoRelease as AutoRelease
    from opendp_wgm.measurements.auto_contributions import make_auto_contributions as make_auto_contributions
    from opendp_wgm.measurements.baselines import greedy_hitting_set as greedy_hitting_set
    from opendp_wgm.measurements.baselines import greedy_threshold_delta as greedy_threshold_delta
    from opendp_wgm.measurements.baselines import make_limited_domain_top_k as make_limited_domain_top_k
    from opendp_wgm.measurements.baselines import make_opendp_key_release as make_opendp_key_release
    from opendp_wgm.measurements.baselines import make_policy_gaussian as make_policy_gaussian
    from opendp_wgm.measurements.baselines import make_policy_gaussian_from_budget as make_policy_gaussian_from_budget
    from opendp_wgm.measurements.baselines import make_policy_greedy as make_policy_greedy
    from opendp_wgm.measurements.baselines import make_policy_greedy_from_budget as make_policy_greedy_from_budget
    from opendp_wgm.measurements.baselines import then_limited_domain_top_k as then_limited_domain_top_k
    from opendp_wgm.measurements.baselines import then_opendp_key_release as then_opendp_key_release
    from opendp_wgm.measurements.baselines import then_policy_gaussian as then_policy_gaussian
    from opendp_wgm.measurements.baselines import then_policy_gaussian_from_budget as then_policy_gaussian_from_budget
    from opendp_wgm.measurements.baselines import then_policy_greedy as then_policy_greedy
    from opendp_wgm.measurements.baselines import then_policy_greedy_from_budget as then_policy_greedy_from_budget
    from opendp_wgm.measurements.baselines import user_peeling_on_true_domain as user_peeling_on_true_domain
    from opendp_wgm.measurements.dp_sips import make_dp_sips as make_dp_sips
    from opendp_wgm.measurements.dp_sips import make_dp_sips_from_budget as make_dp_sips_from_budget
    from opendp_wgm.measurements.dp_sips import then_dp_sips as then_dp_sips
    from opendp_wgm.measurements.dp_sips import then_dp_sips_from_budget as then_dp_sips_from_budget
    from opendp_wgm.measurements.group_by import GroupByCalibration as GroupByCalibration
    from opendp_wgm.measurements.group_by import calibrate_wgm_group_by as calibrate_wgm_group_by
    from opendp_wgm.measurements.group_by import discover_keys as discover_keys
    from opendp_wgm.measurements.group_by import make_wgm_group_by as make_wgm_group_by
    from opendp_wgm.measurements.group_by import make_wgm_group_by_from_budget as make_wgm_group_by_from_budget
    from opendp_wgm.measurements.group_by import summarize_group_by as summarize_group_by
    from opendp_wgm.measurements.group_by import then_wgm_group_by as then_wgm_group_by
    from opendp_wgm.measurements.group_by import then_wgm_group_by_from_budget as then_wgm_group_by_from_budget
    from opendp_wgm.measurements.hitting_set import make_user_peeling as make_user_peeling
    from opendp_wgm.measurements.hitting_set import make_user_peeling_from_budget as make_user_peeling_from_budget
    from opendp_wgm.measurements.hitting_set import make_wgm_hitting_set as make_wgm_hitting_set
    from opendp_wgm.measurements.hitting_set import make_wgm_hitting_set_from_budget as make_wgm_hitting_set_from_budget
    from opendp_wgm.measurements.hitting_set import then_user_peeling as then_user_peeling
    from opendp_wgm.measurements.hitting_set import then_user_peeling_from_budget as then_user_peeling_from_budget
    from opendp_wgm.measurements.hitting_set import then_wgm_hitting_set as then_wgm_hitting_set
    from opendp_wgm.measurements.hitting_set import then_wgm_hitting_set_from_budget as then_wgm_hitting_set_from_budget
    from opendp_wgm.measurements.partition_selection import make_partition_release as make_partition_release
    from opendp_wgm.measurements.partition_selection import make_partition_selection as make_partition_selection
    from opendp_wgm.measurements.partition_selection import then_partition_release as then_partition_release
    from opendp_wgm.measurements.partition_selection import then_partition_selection as then_partition_selection
    from opendp_wgm.measurements.top_k import make_peeling_top_k as make_peeling_top_k
    from opendp_wgm.measurements.top_k import make_wgm_top_k as make_wgm_top_k
    from opendp_wgm.measurements.top_k import make_wgm_top_k_from_budget as make_wgm_top_k_from_budget
    from opendp_wgm.measurements.top_k import then_peeling_top_k as then_peeling_top_k
    from opendp_wgm.measurements.top_k import then_wgm_top_k as then_wgm_top_k
    from opendp_wgm.measurements.top_k import then_wgm_top_k_from_budget as then_wgm_top_k_from_budget
    from opendp_wgm.measurements.wgm import make_noisy_threshold as make_noisy_threshold
    from opendp_wgm.measurements.wgm import make_wgm as make_wgm
    from opendp_wgm.measurements.wgm import make_wgm_from_budget as make_wgm_from_budget
    from opendp_wgm.measurements.wgm import then_noisy_threshold as then_noisy_threshold
    from opendp_wgm.measurements.wgm import then_wgm as then_wgm
    from opendp_wgm.measurements.wgm import then_wgm_from_budget as then_wgm_from_budget
    from opendp_wgm.privacy.calibrate import HittingSetCalibration as HittingSetCalibration
    from opendp_wgm.privacy.calibrate import calibrate_user_peeling as calibrate_user_peeling
    from opendp_wgm.privacy.calibrate import calibrate_wgm_hitting_set as calibrate_wgm_hitting_set

#: Public name -> the module that defines it.
_EXPORTS = {
    "AutoRelease": "opendp_wgm.measurements.auto_contributions",
    "GroupByCalibration": "opendp_wgm.measurements.group_by",
    "HittingSetCalibration": "opendp_wgm.privacy.calibrate",
    "calibrate_user_peeling": "opendp_wgm.privacy.calibrate",
    "calibrate_wgm_group_by": "opendp_wgm.measurements.group_by",
    "calibrate_wgm_hitting_set": "opendp_wgm.privacy.calibrate",
    "discover_keys": "opendp_wgm.measurements.group_by",
    "greedy_hitting_set": "opendp_wgm.measurements.baselines",
    "greedy_threshold_delta": "opendp_wgm.measurements.baselines",
    "make_auto_contributions": "opendp_wgm.measurements.auto_contributions",
    "make_dp_sips": "opendp_wgm.measurements.dp_sips",
    "make_dp_sips_from_budget": "opendp_wgm.measurements.dp_sips",
    "make_limited_domain_top_k": "opendp_wgm.measurements.baselines",
    "make_noisy_threshold": "opendp_wgm.measurements.wgm",
    "make_opendp_key_release": "opendp_wgm.measurements.baselines",
    "make_partition_release": "opendp_wgm.measurements.partition_selection",
    "make_partition_selection": "opendp_wgm.measurements.partition_selection",
    "make_peeling_top_k": "opendp_wgm.measurements.top_k",
    "make_policy_gaussian": "opendp_wgm.measurements.baselines",
    "make_policy_gaussian_from_budget": "opendp_wgm.measurements.baselines",
    "make_policy_greedy": "opendp_wgm.measurements.baselines",
    "make_policy_greedy_from_budget": "opendp_wgm.measurements.baselines",
    "make_user_peeling": "opendp_wgm.measurements.hitting_set",
    "make_user_peeling_from_budget": "opendp_wgm.measurements.hitting_set",
    "make_wgm": "opendp_wgm.measurements.wgm",
    "make_wgm_from_budget": "opendp_wgm.measurements.wgm",
    "make_wgm_group_by": "opendp_wgm.measurements.group_by",
    "make_wgm_group_by_from_budget": "opendp_wgm.measurements.group_by",
    "make_wgm_hitting_set": "opendp_wgm.measurements.hitting_set",
    "make_wgm_hitting_set_from_budget": "opendp_wgm.measurements.hitting_set",
    "make_wgm_top_k": "opendp_wgm.measurements.top_k",
    "make_wgm_top_k_from_budget": "opendp_wgm.measurements.top_k",
    "summarize_group_by": "opendp_wgm.measurements.group_by",
    "then_dp_sips": "opendp_wgm.measurements.dp_sips",
    "then_dp_sips_from_budget": "opendp_wgm.measurements.dp_sips",
    "then_limited_domain_top_k": "opendp_wgm.measurements.baselines",
    "then_noisy_threshold": "opendp_wgm.measurements.wgm",
    "then_opendp_key_release": "opendp_wgm.measurements.baselines",
    "then_partition_release": "opendp_wgm.measurements.partition_selection",
    "then_partition_selection": "opendp_wgm.measurements.partition_selection",
    "then_peeling_top_k": "opendp_wgm.measurements.top_k",
    "then_policy_gaussian": "opendp_wgm.measurements.baselines",
    "then_policy_gaussian_from_budget": "opendp_wgm.measurements.baselines",
    "then_policy_greedy": "opendp_wgm.measurements.baselines",
    "then_policy_greedy_from_budget": "opendp_wgm.measurements.baselines",
    "then_user_peeling": "opendp_wgm.measurements.hitting_set",
    "then_user_peeling_from_budget": "opendp_wgm.measurements.hitting_set",
    "then_wgm": "opendp_wgm.measurements.wgm",
    "then_wgm_from_budget": "opendp_wgm.measurements.wgm",
    "then_wgm_group_by": "opendp_wgm.measurements.group_by",
    "then_wgm_group_by_from_budget": "opendp_wgm.measurements.group_by",
    "then_wgm_hitting_set": "opendp_wgm.measurements.hitting_set",
    "then_wgm_hitting_set_from_budget": "opendp_wgm.measurements.hitting_set",
    "then_wgm_top_k": "opendp_wgm.measurements.top_k",
    "then_wgm_top_k_from_budget": "opendp_wgm.measurements.top_k",
    "user_peeling_on_true_domain": "opendp_wgm.measurements.baselines",
}

__all__ = [
    "AutoRelease",
    "GroupByCalibration",
    "HittingSetCalibration",
    "calibrate_user_peeling",
    "calibrate_wgm_group_by",
    "calibrate_wgm_hitting_set",
    "discover_keys",
    "greedy_hitting_set",
    "greedy_threshold_delta",
    "make_auto_contributions",
    "make_dp_sips",
    "make_dp_sips_from_budget",
    "make_limited_domain_top_k",
    "make_noisy_threshold",
    "make_opendp_key_release",
    "make_partition_release",
    "make_partition_selection",
    "make_peeling_top_k",
    "make_policy_gaussian",
    "make_policy_gaussian_from_budget",
    "make_policy_greedy",
    "make_policy_greedy_from_budget",
    "make_user_peeling",
    "make_user_peeling_from_budget",
    "make_wgm",
    "make_wgm_from_budget",
    "make_wgm_group_by",
    "make_wgm_group_by_from_budget",
    "make_wgm_hitting_set",
    "make_wgm_hitting_set_from_budget",
    "make_wgm_top_k",
    "make_wgm_top_k_from_budget",
    "summarize_group_by",
    "then_dp_sips",
    "then_dp_sips_from_budget",
    "then_limited_domain_top_k",
    "then_noisy_threshold",
    "then_opendp_key_release",
    "then_partition_release",
    "then_partition_selection",
    "then_peeling_top_k",
    "then_policy_gaussian",
    "then_policy_gaussian_from_budget",
    "then_policy_greedy",
    "then_policy_greedy_from_budget",
    "then_user_peeling",
    "then_user_peeling_from_budget",
    "then_wgm",
    "then_wgm_from_budget",
    "then_wgm_group_by",
    "then_wgm_group_by_from_budget",
    "then_wgm_hitting_set",
    "then_wgm_hitting_set_from_budget",
    "then_wgm_top_k",
    "then_wgm_top_k_from_budget",
    "user_peeling_on_true_domain",
]


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
