r"""Utility metrics for domain discovery: missing mass, top-k loss, hitting-set coverage.

The metrics compare a released set of items ``S`` with the *true*, non-private data. They are evaluation
tools, not releases: they read the raw data and must never be published as they stand.

Notation (as in the paper). The data holds one row per (user, item) occurrence and each user
holds a *set* ``W_i`` (duplicate rows of a user count once).

* :math:`c(x) = |\{i : x \in W_i\}|`, the number of distinct users holding item :math:`x`;
* :math:`M = \sum_x c(x)`, the number of distinct (user, item) pairs (the total mass);
* :math:`N`, the number of distinct users (users appear through their rows, so every user holds an item);
* :math:`c_{(1)} \ge c_{(2)} \ge \dots`, the counts sorted in descending order.

``released`` may be a Polars ``DataFrame`` holding the item column, a Polars ``Series``, or any iterable of
items (a list, a set, a NumPy array). Released items that are not in the data count 0, and duplicates in
``released`` count once. Released items are compared with the data's item column after aligning dtypes
(integers of different widths, integers against floats, ``String`` against ``Categorical``/``Enum``);
strings are never compared with numbers.

``item`` may name several columns (``item=["country", "query"]``, a composite key, as in
:func:`opendp_wgm.user_items_space`): the items are then the distinct tuples of those columns, and ``released``
is a ``DataFrame`` with those columns (a release), a Struct ``Series`` of them, or an iterable of tuples in
the columns' order.

Every function reads the data once, in Polars, with no Python loop over rows, users or items, and never
modifies its inputs. To evaluate many releases against one data set, summarise it once with
:meth:`Truth.of` and pass the :class:`Truth` as ``data``: the data is then not read again.
"""

from __future__ import annotations

from opendp_wgm.metrics.hitting_set import coverage, missed_users
from opendp_wgm.metrics.set_union import captured_mass, cardinality, linf_missing_mass, missing_mass
from opendp_wgm.metrics.top_k import top_k_l1_loss, top_k_missing_mass
from opendp_wgm.metrics.truth import Truth

__all__ = [
    "Truth",
    "captured_mass",
    "cardinality",
    "coverage",
    "linf_missing_mass",
    "missed_users",
    "missing_mass",
    "top_k_l1_loss",
    "top_k_missing_mass",
]
