"""Baselines of the paper's experiments: the policy mechanisms, OpenDP's own key release, limited-domain top-k
(private), and the non-private greedy k-hitting set algorithms."""

from opendp_wgm.measurements.baselines.greedy import greedy_hitting_set, user_peeling_on_true_domain
from opendp_wgm.measurements.baselines.key_release import make_opendp_key_release, then_opendp_key_release
from opendp_wgm.measurements.baselines.limited_domain import make_limited_domain_top_k, then_limited_domain_top_k
from opendp_wgm.measurements.baselines.policy import (
    greedy_threshold_delta,
    make_policy_gaussian,
    make_policy_gaussian_from_budget,
    make_policy_greedy,
    make_policy_greedy_from_budget,
    then_policy_gaussian,
    then_policy_gaussian_from_budget,
    then_policy_greedy,
    then_policy_greedy_from_budget,
)

__all__ = [
    "greedy_hitting_set",
    "greedy_threshold_delta",
    "make_limited_domain_top_k",
    "make_opendp_key_release",
    "make_policy_gaussian",
    "make_policy_gaussian_from_budget",
    "make_policy_greedy",
    "make_policy_greedy_from_budget",
    "then_limited_domain_top_k",
    "then_opendp_key_release",
    "then_policy_gaussian",
    "then_policy_gaussian_from_budget",
    "then_policy_greedy",
    "then_policy_greedy_from_budget",
    "user_peeling_on_true_domain",
]
