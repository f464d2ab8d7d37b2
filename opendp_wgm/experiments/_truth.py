"""The paper's utility metrics against one data set, with its counts computed once.

:mod:`opendp_wgm.metrics` re-reads the data on every call (a few seconds for imdb_50k's 7M rows); a run
evaluates hundreds of releases, so :class:`Truth` summarises the data once and evaluates each release with a
join on the per-item counts. The definitions are those of :mod:`opendp_wgm.metrics`
(``tests/test_experiments.py`` checks that both agree).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

__all__: list[str] = []

_C = "__count__"


@dataclass
class Truth:
    """Distinct (user, item) pairs, per-item user counts c(x), M and N of one data set."""

    pairs: pl.DataFrame
    counts: pl.DataFrame  # item, _C (Int64)
    sorted_counts: np.ndarray  # c_(1) >= c_(2) >= ...
    total_mass: int  # M
    n_users: int  # N
    item: str

    @classmethod
    def of(cls, frame: pl.DataFrame, *, user: str = "user", item: str = "item") -> Truth:
        pairs = frame.lazy().select(user, item).drop_nulls().unique().collect()
        counts = pairs.group_by(item).agg(pl.len().cast(pl.Int64).alias(_C))
        sorted_counts = np.sort(counts[_C].to_numpy())[::-1]
        return cls(
            pairs=pairs,
            counts=counts,
            sorted_counts=sorted_counts,
            total_mass=int(pairs.height),
            n_users=int(pairs[user].n_unique()),
            item=item,
        )

    def _released(self, released: pl.DataFrame) -> pl.Series:
        return released.get_column(self.item)

    def counts_in_order(self, released: pl.DataFrame) -> np.ndarray:
        """c(s_j) of each released item in output order (0 for items not in the data)."""
        items = self._released(released)
        if items.len() == 0:
            return np.zeros(0, dtype=np.int64)
        frame = pl.DataFrame({self.item: items}).with_row_index("_pos")
        joined = frame.join(self.counts, on=self.item, how="left").sort("_pos")
        return joined[_C].fill_null(0).to_numpy().astype(np.int64)

    def _captured(self, released: pl.DataFrame) -> int:
        items = self._released(released).unique()
        return int(self.counts.filter(pl.col(self.item).is_in(items.implode()))[_C].sum())

    def set_union(self, released: pl.DataFrame) -> dict[str, float]:
        captured = self._captured(released)
        items = self._released(released).unique()
        missing = self.counts.filter(~pl.col(self.item).is_in(items.implode()))[_C]
        linf = int(missing.max()) if missing.len() else 0
        return {
            "missing_mass": 1.0 - captured / self.total_mass,
            "captured_mass": captured / self.total_mass,
            "linf_missing_mass": float(linf),
            "linf_missing_mass_per_user": linf / self.n_users,
            "cardinality": float(items.len()),
        }

    def top_k(self, released: pl.DataFrame, k: int) -> dict[str, float]:
        top = self.sorted_counts[: min(k, self.sorted_counts.size)]
        in_order = self.counts_in_order(released)[:k]
        padded_out = np.zeros(k, dtype=np.int64)
        padded_out[: in_order.size] = in_order
        padded_top = np.zeros(k, dtype=np.int64)
        padded_top[: top.size] = top
        captured = self._captured(released)
        return {
            "top_k_missing_mass": (int(top.sum()) - captured) / self.total_mass,
            "top_k_l1_loss": float(np.abs(padded_top - padded_out).sum()),
            "cardinality": float(self._released(released).n_unique()),
        }

    def hitting_set(self, released: pl.DataFrame, user: str = "user") -> dict[str, float]:
        items = self._released(released).unique()
        covered = self.pairs.filter(pl.col(self.item).is_in(items.implode()))[user].n_unique()
        return {
            "missed_users": float(self.n_users - covered),
            "coverage": covered / self.n_users,
            "cardinality": float(items.len()),
        }
