"""``opendp_wgm.spark``: the Spark input space, and the constructors that run on it (documented, kept
source-compatible).

There is one constructor per mechanism: :func:`opendp_wgm.make_wgm` and the others run on Spark when their input
space comes from :func:`spark_user_items_space` (``docs/engines.md``). This module re-exports that space (from
:mod:`opendp_wgm.engines.spark`, the engine's steps) and the same constructor objects (``opendp_wgm.spark.make_wgm
is opendp_wgm.make_wgm``), so code written for the earlier Spark twins runs unchanged.
"""

from opendp_wgm.engines.spark import SparkUserItemsDescriptor, spark_user_items_space
from opendp_wgm.measurements.dp_sips import (
    make_dp_sips,
    make_dp_sips_from_budget,
    then_dp_sips,
    then_dp_sips_from_budget,
)
from opendp_wgm.measurements.hitting_set import (
    make_user_peeling,
    make_wgm_hitting_set,
    make_wgm_hitting_set_from_budget,
    then_wgm_hitting_set,
    then_wgm_hitting_set_from_budget,
)
from opendp_wgm.measurements.partition_selection import make_partition_selection, then_partition_selection
from opendp_wgm.measurements.top_k import (
    make_peeling_top_k,
    make_wgm_top_k,
    make_wgm_top_k_from_budget,
    then_wgm_top_k,
    then_wgm_top_k_from_budget,
)
from opendp_wgm.measurements.wgm import make_wgm, make_wgm_from_budget, then_wgm, then_wgm_from_budget

__all__ = [
    "SparkUserItemsDescriptor",
    "make_dp_sips",
    "make_dp_sips_from_budget",
    "make_partition_selection",
    "make_peeling_top_k",
    "make_user_peeling",
    "make_wgm",
    "make_wgm_from_budget",
    "make_wgm_hitting_set",
    "make_wgm_hitting_set_from_budget",
    "make_wgm_top_k",
    "make_wgm_top_k_from_budget",
    "spark_user_items_space",
    "then_dp_sips",
    "then_dp_sips_from_budget",
    "then_partition_selection",
    "then_wgm",
    "then_wgm_from_budget",
    "then_wgm_hitting_set",
    "then_wgm_hitting_set_from_budget",
    "then_wgm_top_k",
    "then_wgm_top_k_from_budget",
]

