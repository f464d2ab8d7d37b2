"""The paper's utility metrics of a release against one data set, summarised once.

A run evaluates hundreds of releases against each data set, so :class:`Truth` summarises the data once
(:class:`opendp_wgm.metrics.Truth`: distinct pairs, per-item counts, M and N) and evaluates every release
with the functions of :mod:`opendp_wgm.metrics`, which then do not read the data again: one definition of
every metric.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from opendp_wgm import metrics

__all__: list[str] = []


@dataclass(frozen=True)
class Truth:
    """One data set's :class:`opendp_wgm.metrics.Truth` and the metric rows of each experiment."""

    summary: metrics.Truth

    @classmethod
    def of(cls, frame: pl.DataFrame, *, user: str = "user", item: str = "item") -> Truth:
        # a row with a null user or item names no pair: dropped here (the metrics module rejects nulls)
        pairs = frame.lazy().select(user, item).drop_nulls()
        return cls(metrics.Truth.of(pairs, user=user, item=item))

    def set_union(self, released: pl.DataFrame) -> dict[str, float]:
        s = self.summary
        return {
            "missing_mass": metrics.missing_mass(s, released, user=s.user, item=s.item),
            "captured_mass": metrics.captured_mass(s, released, user=s.user, item=s.item),
            "linf_missing_mass": metrics.linf_missing_mass(s, released, user=s.user, item=s.item),
            "linf_missing_mass_per_user": metrics.linf_missing_mass(s, released, normalize=True, user=s.user, item=s.item),
            "cardinality": float(metrics.cardinality(released, item=s.item)),
        }

    def top_k(self, released: pl.DataFrame, k: int) -> dict[str, float]:
        s = self.summary
        return {
            "top_k_missing_mass": metrics.top_k_missing_mass(s, released, k, user=s.user, item=s.item),
            # the reference matches the j-th released item with the j-th largest count
            "top_k_l1_loss": metrics.top_k_l1_loss(s, released, k, order="output", user=s.user, item=s.item),
            "cardinality": float(metrics.cardinality(released, item=s.item)),
        }

    def hitting_set(self, released: pl.DataFrame) -> dict[str, float]:
        s = self.summary
        return {
            "missed_users": float(metrics.missed_users(s, released, user=s.user, item=s.item)),
            "coverage": metrics.coverage(s, released, user=s.user, item=s.item),
            "cardinality": float(metrics.cardinality(released, item=s.item)),
        }
