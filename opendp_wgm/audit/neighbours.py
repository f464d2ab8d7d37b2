r"""Neighbouring datasets for auditing user-level set union, and their distance.

The worst cases of a thresholded set union (``docs/audit.md``) are

- a *differing user with t unique items* (t = 1..Δ0): the user's items are held by nobody else, so without
  the user they can never be released and with it each is released with probability
  :math:`\bar\Phi((T - 1/\sqrt t)/\sigma)`; the event "one of them is released" is the threshold's δ;
- a *shared item at the threshold's edge*: the differing user's only item is held by ``c`` others
  (c = ⌊T⌋), so the item's weight is c or c + 1 around T, where the Gaussian part of the loss shows.

Both are built on a base of ``users`` users holding random subsets of ``shared_items`` common items (ids
0, 1, …), drawn once from ``seed``; the differing user's items have negative ids (−1, −2, …), so that they
never collide with a base item.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
import polars as pl

from opendp_wgm._validation import _check_int, _check_real
from opendp_wgm.audit.events import (
    AnyReleased,
    ChosenMaxContributions,
    Event,
    ItemReleased,
    SetEquals,
    SingleItemTestPassed,
)
from opendp_wgm.privacy.auto import GRID

__all__ = [
    "NeighbourPair",
    "auto_choice_pair",
    "shared_item_pair",
    "single_item_test_pair",
    "symmetric_id_distance",
    "unique_items_pair",
    "worst_case_pairs",
]


@dataclass(frozen=True)
class NeighbourPair:
    """Two neighbouring datasets and the events that tell them apart.

    Attributes
    ----------
    data
        D: holds the differing unit's rows.
    neighbour
        D′: the same frame without them.
    label
        A short name for the report.
    events
        The events suggested for this pair (used when :func:`opendp_wgm.audit.audit` gets none).
    """

    data: pl.DataFrame
    neighbour: pl.DataFrame
    label: str
    events: tuple[Event, ...] = field(default=())


def symmetric_id_distance(data: pl.DataFrame, neighbour: pl.DataFrame, identifier: pl.Expr | str) -> int:
    """The distance of OpenDP's ``dp.symmetric_id_distance(identifier)`` between two frames.

    Identifiers present in only one frame count 1 each; an identifier present in both whose rows differ
    counts 2 (a removal and an addition). Rows are compared as sets.

    Examples
    --------
    >>> pair = unique_items_pair(2, users=5)
    >>> symmetric_id_distance(pair.data, pair.neighbour, "user")
    1
    """
    identifier = pl.col(identifier) if isinstance(identifier, str) else identifier
    ids = [f.select(identifier.alias("_id")).get_column("_id").unique() for f in (data, neighbour)]
    only_one = ids[0].filter(~ids[0].is_in(ids[1].implode())).len() + ids[1].filter(
        ~ids[1].is_in(ids[0].implode())
    ).len()
    changed = pl.concat(
        [
            a.join(b, on=a.columns, how="anti", nulls_equal=True).select(identifier.alias("_id"))
            for a, b in ((data, neighbour), (neighbour, data))
        ]
    ).get_column("_id").unique()
    both = changed.filter(changed.is_in(ids[0].implode()) & changed.is_in(ids[1].implode()))
    return int(only_one + 2 * both.len())


class _PairOptions(TypedDict):
    """The keyword arguments that every pair constructor shares."""

    users: int
    shared_items: int
    seed: int
    user: str
    item: str


def _base(users: int, shared_items: int, seed: int, user: str, item: str) -> pl.DataFrame:
    """``users`` users, each holding a random non-empty subset of the items 0..shared_items−1."""
    users = _check_int("users", users, minimum=1)
    shared_items = _check_int("shared_items", shared_items, minimum=1)
    rng = np.random.default_rng(_check_int("seed", seed, minimum=0))  # the data only, never the noise
    holds = rng.random((users, shared_items)) < 0.5
    holds[np.arange(users), rng.integers(0, shared_items, users)] = True
    u, x = np.nonzero(holds)
    return pl.DataFrame({user: u.astype(np.int64), item: x.astype(np.int64)})


def unique_items_pair(
    t: int,
    *,
    users: int = 200,
    shared_items: int = 3,
    seed: int = 0,
    user: str = "user",
    item: str = "item",
) -> NeighbourPair:
    """The base dataset with and without one user holding ``t`` items (−1..−t) that nobody else holds.

    Events: item −1 released; any of the ``t`` items released (when t > 1); the released set equals the
    shared items and the ``t`` items.

    Examples
    --------
    >>> pair = unique_items_pair(2, users=5)
    >>> pair.data.height - pair.neighbour.height, [e.label for e in pair.events]
    (2, ['-1 released', 'any of [-1, -2] released', 'released set = [-2, -1, 0, 1, 2]'])
    """
    t = _check_int("t", t, minimum=1)
    base = _base(users, shared_items, seed, user, item)
    unique = tuple(range(-1, -t - 1, -1))
    differing = pl.DataFrame({user: [users] * t, item: list(unique)})
    events: list[Event] = [ItemReleased(-1, item)]
    if t > 1:
        events.append(AnyReleased(unique, item))
    events.append(SetEquals(tuple(range(shared_items)) + unique, item))
    return NeighbourPair(pl.concat([base, differing]), base, f"user with {t} unique item(s)", tuple(events))


def shared_item_pair(
    c: int,
    *,
    users: int = 200,
    shared_items: int = 3,
    seed: int = 0,
    user: str = "user",
    item: str = "item",
) -> NeighbourPair:
    """The base dataset plus ``c`` users holding only item −1, with and without one more such user.

    Event: item −1 released (probability moves from about Φ̄((T−c)/σ) to Φ̄((T−c−1)/σ) for the WGM).

    Examples
    --------
    >>> pair = shared_item_pair(3, users=5)
    >>> pair.data.filter(pl.col("item") == -1).height, pair.neighbour.filter(pl.col("item") == -1).height
    (4, 3)
    """
    c = _check_int("c", c, minimum=0)
    base = _base(users, shared_items, seed, user, item)
    edge = pl.DataFrame({user: np.arange(users, users + c, dtype=np.int64), item: np.full(c, -1, dtype=np.int64)})
    neighbour = pl.concat([base, edge])
    differing = pl.DataFrame({user: [users + c], item: [-1]})
    return NeighbourPair(
        pl.concat([neighbour, differing]), neighbour, f"shared item held by {c} + 1", (ItemReleased(-1, item),)
    )


def worst_case_pairs(
    max_contributions: int,
    threshold: float,
    *,
    users: int = 200,
    shared_items: int = 3,
    seed: int = 0,
    user: str = "user",
    item: str = "item",
) -> list[NeighbourPair]:
    """The worst-case pairs of a thresholded set union with Δ0 = ``max_contributions`` and threshold T:
    :func:`unique_items_pair` for t = 1..Δ0 and :func:`shared_item_pair` with c = ⌊T⌋ (at least 0).

    Examples
    --------
    >>> [p.label for p in worst_case_pairs(2, 3.5, users=5)]
    ['user with 1 unique item(s)', 'user with 2 unique item(s)', 'shared item held by 3 + 1']
    """
    max_contributions = _check_int("max_contributions", max_contributions, minimum=1)
    threshold = _check_real("threshold", threshold)
    common = _PairOptions(users=users, shared_items=shared_items, seed=seed, user=user, item=item)
    pairs = [unique_items_pair(t, **common) for t in range(1, max_contributions + 1)]
    pairs.append(shared_item_pair(max(0, math.floor(threshold)), **common))
    return pairs


def auto_choice_pair(
    *,
    single_users: int = 30,
    items: int = 3,
    user: str = "user",
    item: str = "item",
) -> NeighbourPair:
    """A pair that moves the choice of ``max_contributions="auto"`` (``docs/privacy.md`` §8) across its edge.

    D′: ``single_users`` users holding one item each (ids 0, 1, … mod 3) and ``single_users // 3`` users holding
    ``items`` of the shared items 0..``items``−1: exactly 3/4 of the users hold one item, so the noise-free rule
    chooses Δ0 = 1. D adds a user holding ``items`` unique items (−1, −2, …): the share falls below 3/4 and the
    noise-free rule chooses the grid point at or above ``items`` (500 above 200). Events: each of the two
    choices, and item −1 released.

    Examples
    --------
    >>> pair = auto_choice_pair()
    >>> pair.data.height - pair.neighbour.height, [e.label for e in pair.events]
    (3, ['chosen Δ0 = 1', 'chosen Δ0 = 5', '-1 released'])
    """
    single_users = _check_int("single_users", single_users, minimum=3)
    items = _check_int("items", items, minimum=2, maximum=1000)
    if single_users % 3:
        msg = f"`single_users` must be a multiple of 3: 3/4 of the users then hold one item (found {single_users})"
        raise ValueError(msg)
    many = single_users // 3
    singles = pl.DataFrame({user: np.arange(single_users, dtype=np.int64), item: np.arange(single_users) % 3})
    users = np.repeat(np.arange(single_users, single_users + many, dtype=np.int64), items)
    shared = pl.DataFrame({user: users, item: np.tile(np.arange(items, dtype=np.int64), many)})
    neighbour = pl.concat([singles, shared])
    differing = pl.DataFrame({user: [single_users + many] * items, item: list(range(-1, -items - 1, -1))})
    above = next((g for g in GRID if g >= items), GRID[-1])  # the rule returns 500 when nothing up to 200 fits
    events: tuple[Event, ...] = (ChosenMaxContributions(1), ChosenMaxContributions(above), ItemReleased(-1, item))
    return NeighbourPair(pl.concat([neighbour, differing]), neighbour, f"Δ0 auto at its edge ({items} items)", events)


def single_item_test_pair(
    threshold: float,
    *,
    more_users: int = 4,
    user: str = "user",
    item: str = "item",
) -> NeighbourPair:
    """A pair that moves the single-item test of ``max_contributions="auto"`` (``docs/privacy.md`` §8) across its
    edge ``threshold`` (in users: :func:`opendp_wgm.privacy.auto.single_item_threshold` of the test's scale).

    D′: ``more_users`` users holding the items 0 and 1, and the fewest users holding one item each (ids 0, 1, …
    mod 3) for which the noise-free statistic, the one-item count minus 3/4 of all users, reaches ``threshold``
    (it is then below ``threshold`` + 1/4). D adds a user holding two unique items (−1, −2): the statistic falls
    by 3/4, below ``threshold``. Events: the test passed, and item −1 released.

    Examples
    --------
    >>> pair = single_item_test_pair(10.0)
    >>> pair.neighbour.height, pair.data.height - pair.neighbour.height, [e.label for e in pair.events]
    (60, 2, ['single-item test passed', '-1 released'])
    """
    threshold = _check_real("threshold", threshold, minimum=0.0)
    more_users = _check_int("more_users", more_users, minimum=1)
    single_users = math.ceil(4.0 * (threshold + 0.75 * more_users))  # 0.25·S − 0.75·M ≥ threshold
    singles = pl.DataFrame({user: np.arange(single_users, dtype=np.int64), item: np.arange(single_users) % 3})
    more = np.repeat(np.arange(single_users, single_users + more_users, dtype=np.int64), 2)
    shared = pl.DataFrame({user: more, item: np.tile(np.arange(2, dtype=np.int64), more_users)})
    neighbour = pl.concat([singles, shared])
    differing = pl.DataFrame({user: [single_users + more_users] * 2, item: [-1, -2]})
    events: tuple[Event, ...] = (SingleItemTestPassed(), ItemReleased(-1, item))
    return NeighbourPair(
        pl.concat([neighbour, differing]), neighbour, f"single-item test at its edge ({threshold:g} users)", events
    )
