r"""The weighted histogram, stated plainly: what every :class:`~opendp_wgm.kernel.Plan` must compute.

Per user, its distinct items; all kept when it holds :math:`t \le \Delta_0` of them, else the Δ0 of smallest key
under the keyed hash every plan uses (:func:`~opendp_wgm.engines.polars.bound_key`, so that for a fixed seed the
kept subsets, and so the histograms, are equal bit for bit); each kept item gets
:math:`\lfloor 2^{20}/\sqrt{t}\rfloor` (:func:`~opendp_wgm.privacy.threshold.lattice_weights`), summed per item.

Slow on purpose (a Python loop per user): for tests on small frames, never on a release path.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import polars as pl

from opendp_wgm._spaces import _Space
from opendp_wgm.engines.polars import WEIGHT_LAT, bound_key
from opendp_wgm.privacy.threshold import lattice_weights

__all__ = ["kept_subsets", "reference_histogram"]


def kept_subsets(
    prepared: pl.DataFrame | pl.LazyFrame, space: _Space, bound: int, seeds: tuple[int, ...]
) -> tuple[pl.DataFrame, dict[int, list[int]]]:
    """The distinct (user, item) rows of ``prepared`` and, per user (its first row's index), the indices of the
    rows it keeps: all of them when it holds at most ``bound``, else the ``bound`` of smallest key."""
    lf = prepared.lazy()
    rows = lf.unique(maintain_order=True).with_columns(_key=bound_key(lf, space, seeds)).collect()
    by_user: dict[object, list[int]] = defaultdict(list)
    for index, user in enumerate(rows.get_column(space.user).to_list()):
        by_user[user].append(index)
    keys = rows.get_column("_key").to_list()
    kept = {
        indices[0]: indices if len(indices) <= bound else sorted(indices, key=keys.__getitem__)[:bound]
        for indices in by_user.values()
    }
    return rows.drop("_key"), kept


def reference_histogram(
    prepared: pl.DataFrame | pl.LazyFrame,
    space: _Space,
    bound: int,
    seeds: tuple[int, ...],
    max_contributions: int,
) -> pl.DataFrame:
    """The lattice histogram (item, ``weight_lat`` Int64) of ``prepared``'s users, each bounded to ``bound`` items
    under ``seeds``, weighted with the lattice weights of ``max_contributions`` (``bound ≤ max_contributions``)."""
    rows, kept = kept_subsets(prepared, space, bound, seeds)
    weights = lattice_weights(max_contributions)
    weight = np.zeros(rows.height, dtype=np.int64)
    for indices in kept.values():
        weight[indices] = int(weights[len(indices) - 1])
    held = rows.with_columns(pl.Series(WEIGHT_LAT, weight)).filter(pl.col(WEIGHT_LAT) > 0)
    return held.group_by(space.item).agg(pl.col(WEIGHT_LAT).sum())
