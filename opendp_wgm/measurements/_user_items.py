"""The one user → items coding of the measurements that walk users sequentially (policy baselines, user peeling).

:func:`user_item_csr` turns (user, item-code) rows, each user's rows contiguous, into CSR arrays user → item
codes and, on request, item → users. The callers' Polars plans decide which rows there are and in which
order (the policy baselines: users in a keyed-hash order, items bounded; peeling: candidates only, deduplicated);
this module only lays them out, so both read the same arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from opendp_wgm.engines import polars as engine

__all__ = ["UserItemCSR", "csr_of_offsets", "user_item_csr"]


@dataclass(frozen=True)
class UserItemCSR:
    """CSR arrays of (user, item) rows: user ``u`` (its position in row order) holds ``items[offsets[u]:offsets[u+1]]``.

    ``item_offsets`` / ``item_users`` (only with ``item_index=True``) are the transpose: item ``x`` is held by
    users ``item_users[item_offsets[x]:item_offsets[x+1]]``, in increasing user position.
    """

    items: np.ndarray  # int32 or int64 item code of every row, users contiguous
    offsets: np.ndarray  # int64, n_users + 1
    n_items: int
    item_offsets: np.ndarray | None = None  # int64, n_items + 1
    item_users: np.ndarray | None = None  # user positions (int32 by the compiled step, else int64), items contiguous

    @property
    def n_users(self) -> int:
        return int(self.offsets.size) - 1


def user_item_csr(users: np.ndarray, items: np.ndarray, n_items: int, *, item_index: bool = False) -> UserItemCSR:
    """Lay (user, item-code) rows out as CSR; each user's rows must be contiguous (any order of users).

    Parameters
    ----------
    users
        A user key per row (any integer coding); a new user starts wherever the key changes.
    items
        Integer item codes in ``[0, n_items)``, same length; kept in row order (int32 kept, others as int64).
    n_items
        Number of item codes.
    item_index
        Also build item → users (the rows grouped by item, in row order: a stable sort by item; a compiled
        counting sort in threads when Numba is installed, :func:`opendp_wgm.engines.polars.holders_by_item`).
    """
    return csr_of_offsets(engine.run_offsets(np.asarray(users)), items, n_items, item_index=item_index)


def csr_of_offsets(offsets: np.ndarray, items: np.ndarray, n_items: int, *, item_index: bool = False) -> UserItemCSR:
    """:func:`user_item_csr` of rows whose users' runs are given by their ``offsets`` (``n_users + 1``, from 0):
    user ``u`` holds ``items[offsets[u]:offsets[u + 1]]``."""
    items = np.asarray(items)
    if items.dtype != np.int32:  # int32 codes (the compiled stage 2's) are kept as they are: no int64 copy
        items = items.astype(np.int64, copy=False)
    offsets = np.asarray(offsets, dtype=np.int64)
    if not item_index:
        return UserItemCSR(items=items, offsets=offsets, n_items=n_items)
    # the compiled counting sort by item, in threads (0.58 s of CPU on imdb_50k's 5e6 pairs by the group-by); read
    # through the module: a caller switching the compiled step off reaches here
    index = engine.holders_by_item(items, offsets, n_items)
    if index is not None:
        item_users, item_offsets = index  # holders ascending
        return UserItemCSR(
            items=items, offsets=offsets, n_items=n_items, item_offsets=item_offsets, item_users=item_users
        )
    position = np.repeat(np.arange(offsets.size - 1, dtype=np.int64), np.diff(offsets))
    # a group-by on the item keeps each group's rows in row order (Polars guarantees it): a stable sort by item,
    # in parallel, half the CPU of NumPy's radix argsort of 16-bit codes on imdb_50k's 5.5e6 candidate pairs
    rows = pl.DataFrame({"user": position, "item": items})
    holders = rows.group_by("item").agg("user").sort("item").get_column("user").explode()
    item_users = holders.to_numpy().astype(np.int64) if items.size else np.zeros(0, dtype=np.int64)
    item_offsets = np.concatenate(([0], np.cumsum(np.bincount(items, minlength=n_items)))).astype(np.int64)
    return UserItemCSR(
        items=items, offsets=offsets, n_items=n_items, item_offsets=item_offsets, item_users=item_users
    )
