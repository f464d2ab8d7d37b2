"""Event families: what an auditor looks for in a release.

An event maps one released frame (the output of a measurement: an item column, and ``rank`` for the
two-stage mechanisms) to ``True`` or ``False``. Events are small frozen dataclasses, so they pickle to the
worker processes of :func:`opendp_wgm.audit.audit`; each has a ``label`` for the report's table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import polars as pl

__all__ = [
    "AnyReleased",
    "ChosenMaxContributions",
    "Event",
    "ItemReleased",
    "RankAtMost",
    "SetEquals",
    "SingleItemTestPassed",
]


class Event(Protocol):
    """What :func:`opendp_wgm.audit.audit` needs of an event: a label and a test on one release."""

    @property
    def label(self) -> str: ...

    def __call__(self, released: pl.DataFrame) -> bool: ...


def _items(released: pl.DataFrame, item: str) -> pl.Series:
    if item not in released.columns:
        msg = f"`item` must name a column of the release (found {item!r}; columns {released.columns})"
        raise ValueError(msg)
    return released.get_column(item)


@dataclass(frozen=True)
class _OnItems:
    """An event on a tuple of ``items`` of the release's ``item`` column (the events below are its subclasses,
    frozen dataclasses of these two fields)."""

    items: tuple[Any, ...]
    item: str = "item"


class AnyReleased(_OnItems):
    """At least one of ``items`` is in the release (for a differing user's unique items: the threshold's δ)."""

    @property
    def label(self) -> str:
        return f"any of {list(self.items)!r} released"

    def __call__(self, released: pl.DataFrame) -> bool:
        return bool(_items(released, self.item).is_in(list(self.items)).any())


class ItemReleased(AnyReleased):
    """Item ``z`` is in the release."""

    def __init__(self, z: Any, item: str = "item") -> None:
        super().__init__((z,), item)

    @property
    def z(self) -> Any:
        return self.items[0]

    @property
    def label(self) -> str:
        return f"{self.z!r} released"


class SetEquals(_OnItems):
    """The released item set is exactly ``items``."""

    @property
    def label(self) -> str:
        return f"released set = {sorted(self.items)!r}"

    def __call__(self, released: pl.DataFrame) -> bool:
        values = _items(released, self.item)
        return values.n_unique() == len(set(self.items)) and bool(values.is_in(list(self.items)).all())


@dataclass(frozen=True)
class RankAtMost:
    """Item ``z`` is released with ``rank <= r`` (the two-stage mechanisms' ``rank`` column, 1 = first)."""

    z: Any
    r: int
    item: str = "item"

    @property
    def label(self) -> str:
        return f"rank of {self.z!r} <= {self.r}"

    def __call__(self, released: pl.DataFrame) -> bool:
        if "rank" not in released.columns:
            msg = f"`RankAtMost` needs a `rank` column in the release (found columns {released.columns})"
            raise ValueError(msg)
        hit = released.filter((_items(released, self.item) == self.z) & (pl.col("rank") <= self.r))
        return hit.height > 0


@dataclass(frozen=True)
class ChosenMaxContributions:
    """A ``max_contributions="auto"`` release chose Δ0 = ``value`` (its ``max_contributions`` attribute,
    :class:`~opendp_wgm.measurements.auto_contributions.AutoRelease`)."""

    value: int

    @property
    def label(self) -> str:
        return f"chosen Δ0 = {self.value}"

    def __call__(self, released: pl.DataFrame) -> bool:
        chosen = getattr(released, "max_contributions", None)
        if chosen is None:
            msg = "`ChosenMaxContributions` needs a release of max_contributions='auto' (an AutoRelease)"
            raise ValueError(msg)
        return bool(chosen == self.value)


@dataclass(frozen=True)
class SingleItemTestPassed:
    """A ``max_contributions="auto"`` release's Δ0 was chosen by the single-item test (its ``single_item_test``
    attribute, :class:`~opendp_wgm.measurements.auto_contributions.AutoRelease`)."""

    @property
    def label(self) -> str:
        return "single-item test passed"

    def __call__(self, released: pl.DataFrame) -> bool:
        passed = getattr(released, "single_item_test", None)
        if passed is None:
            msg = "`SingleItemTestPassed` needs a release of max_contributions='auto' (an AutoRelease)"
            raise ValueError(msg)
        return bool(passed)
