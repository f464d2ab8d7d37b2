"""An empirical privacy auditor for OpenDP measurements on (user, item) frames.

:func:`audit` releases many times on both sides of neighbouring datasets, counts events, and reports for
each event Clopper–Pearson intervals, lower bounds on ε and δ, and whether the measurement's own claim
``m.map(d_in)`` is contradicted at a family-wise level α. An audit can find a violation; it never proves
privacy (``docs/audit.md``).
"""

from opendp_wgm.audit._flawed import make_underclaimed
from opendp_wgm.audit.events import (
    AnyReleased,
    ChosenMaxContributions,
    Event,
    ItemReleased,
    RankAtMost,
    SetEquals,
    SingleItemTestPassed,
)
from opendp_wgm.audit.neighbours import (
    NeighbourPair,
    auto_choice_pair,
    shared_item_pair,
    single_item_test_pair,
    symmetric_id_distance,
    unique_items_pair,
    worst_case_pairs,
)
from opendp_wgm.audit.runner import AuditReport, audit
from opendp_wgm.audit.stats import (
    clopper_pearson,
    delta_lower_bound,
    epsilon_lower_bound,
    flag_power,
    zcdp_delta,
    zcdp_delta_lower_bound,
)

__all__ = [
    "AnyReleased",
    "AuditReport",
    "ChosenMaxContributions",
    "Event",
    "ItemReleased",
    "NeighbourPair",
    "RankAtMost",
    "SetEquals",
    "SingleItemTestPassed",
    "audit",
    "auto_choice_pair",
    "clopper_pearson",
    "delta_lower_bound",
    "epsilon_lower_bound",
    "flag_power",
    "make_underclaimed",
    "shared_item_pair",
    "single_item_test_pair",
    "symmetric_id_distance",
    "unique_items_pair",
    "worst_case_pairs",
    "zcdp_delta",
    "zcdp_delta_lower_bound",
]
