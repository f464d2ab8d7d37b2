r"""Input spaces: (user, item) frames under add/remove-one-user neighbours.

:func:`user_items_space` is the light space of this package: its carrier is a Polars ``DataFrame`` or
``LazyFrame`` held as a Python object, so nothing is copied through OpenDP's FFI (converting a 10^7-row frame
through ``dp.lazyframe_domain`` costs 5–17 s). Every constructor also accepts OpenDP's own
``dp.lazyframe_domain`` with ``dp.symmetric_id_distance(user)``, the space of a ``dp.Context``, so that plugin
measurements compose next to OpenDP's Polars queries.

The neighbouring relation is always: datasets differ by the rows of ``d_in`` whole users (add or remove),
where a user is the set of rows sharing a value of the metric's identifier: the ``user`` column, or, with
OpenDP's space, any row-wise Polars expression (``pl.col("person") // 2`` for households), which every
constructor evaluates into the user key before bounding, weighting or counting
(:func:`opendp_wgm._spaces._prepare_frame`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import opendp.prelude as dp
import polars as pl

from opendp_wgm._spaces import _BOUND_STEP, _assert_features, _frame_columns, _item_column, _released, _Space
from opendp_wgm._validation import _check_key_columns

if TYPE_CHECKING:
    from opendp_wgm.engines.polars import Prepared

__all__ = ["BoundedUserItems", "UserItemsDescriptor", "user_items_domain", "user_items_space"]

@dataclass(frozen=True)
class UserItemsDescriptor:
    """What a user-items domain promises about its frames.

    Attributes
    ----------
    user, item
        Column names of the user identifier and of the item: one column, or a tuple of two or more for a
        composite key (a list is stored as a tuple, a one-name list as that name).
    max_contributions
        ``None`` for raw data; otherwise every user holds at most this many *distinct* items and no
        (user, item) pair is repeated (the output of :func:`opendp_wgm.make_bound_user_items`).
    """

    user: str = "user"
    item: str | tuple[str, ...] = "item"
    max_contributions: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "item", _check_key_columns(self.user, self.item)[1])

    @property
    def keys(self) -> tuple[str, ...]:
        """The key columns: ``(item,)``, or a composite key's columns."""
        return (self.item,) if isinstance(self.item, str) else self.item


def _is_member(descriptor: UserItemsDescriptor) -> Callable[[object], bool]:
    def member(frame: object) -> bool:
        if isinstance(frame, BoundedUserItems):  # the bound step's output: checked when it was built
            names = (descriptor.user, _item_column(descriptor.item))
            return descriptor.max_contributions is not None and frame.names == names
        columns = _frame_columns(frame)  # Polars, pandas or Arrow (converted when the release prepares it)
        return columns is not None and all(column in columns for column in (descriptor.user, *descriptor.keys))

    return member


def user_items_domain(descriptor: UserItemsDescriptor) -> dp.Domain:
    """The OpenDP domain of (user, item) frames described by ``descriptor``."""
    _assert_features()
    bound = "" if descriptor.max_contributions is None else f", max_contributions={descriptor.max_contributions}"
    name = f"UserItemsDomain(user={descriptor.user!r}, item={descriptor.item!r}{bound})"
    return dp.user_domain(name, _is_member(descriptor), descriptor=descriptor)


def user_items_space(user: str = "user", item: str | Sequence[str] = "item") -> tuple[dp.Domain, dp.Metric]:
    r"""The input space of raw (user, item) data with user-level add/remove neighbours.

    Parameters
    ----------
    user
        Name of the column identifying the privacy unit.
    item
        Name of the item column (any hashable Polars dtype), or a list of two or more distinct columns for a
        composite key (``["country", "query"]``): the items are then the distinct tuples of those columns,
        and every release has those columns in place of one item column (``docs/api.md``, composite keys).
        A row with a null in any key column is dropped, as a row with a null item is.

    Returns
    -------
    tuple[opendp.mod.Domain, opendp.mod.Metric]
        A domain whose members are ``pl.DataFrame`` / ``pl.LazyFrame`` objects with both columns (a pandas
        ``DataFrame`` or a pyarrow ``Table`` with both columns is converted when a measurement reads it), and
        ``dp.symmetric_id_distance(pl.col(user))``: the distance between two frames is the number of user
        ids present in only one of them (users added or removed); a user present in both must have the
        same rows, so changing one user's rows is a removal plus an addition, distance 2.

    Notes
    -----
    Required features: ``contrib``, ``honest-but-curious`` (``dp.user_domain`` is a user-defined domain).

    Examples
    --------
    >>> import opendp.prelude as dp
    >>> import opendp_wgm as wgm
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> domain, metric = wgm.user_items_space(user="user", item="item")
    >>> metric
    SymmetricIdDistance { identifier: col("user") }
    """
    descriptor = UserItemsDescriptor(user=user, item=item)  # type: ignore[arg-type]  # checked: a list becomes a tuple
    return user_items_domain(descriptor), dp.symmetric_id_distance(pl.col(user))




@dataclass(frozen=True, eq=False)
class BoundedUserItems:
    """The output of :func:`opendp_wgm.make_bound_user_items`: each user's at most Δ0 distinct items, as a plan.

    It holds the prepared input (user key and item, nulls dropped), the resolved space, Δ0 and the secret seed of
    the bounding hash drawn by the bound step; the bounded rows are computed when read, so that
    :func:`opendp_wgm.make_weighted_histogram` aggregates the per-user lists directly (no exploded frame) and
    may do so over disjoint buckets of users (``passes``). Built by the bound step only.

    Use :meth:`lazy` or :meth:`collect` for the bounded (user, item) rows.
    """

    prepared: pl.LazyFrame
    space: _Space
    max_contributions: int
    seeds: tuple[int, ...] = field(repr=False)
    token: object = field(default=None, repr=False)
    #: the release's :class:`~opendp_wgm.engines.polars.Prepared` value of ``prepared``, when later steps of the
    #: release read it (a two-stage release's stage 2): the histogram's compiled step leaves its coding there
    shared: Prepared | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.token is not _BOUND_STEP:
            msg = "`BoundedUserItems` must be built by make_bound_user_items (found a direct construction)"
            raise TypeError(msg)

    @property
    def names(self) -> tuple[str, str]:
        """The user-key and item column names (a composite key's item column is its Struct's)."""
        return self.space.user, self.space.item

    def lists(self, users: pl.Expr | None = None) -> pl.LazyFrame:
        """One row per user (of those ``users`` keeps, a filter on the user key): the list of its kept items."""
        from opendp_wgm.engines.polars import (
            bounded_lists_plan,  # the kernel imports this module
        )

        lf = self.prepared if users is None else self.prepared.filter(users)
        return bounded_lists_plan(lf, self.space, self.max_contributions, self.seeds)

    def lazy(self) -> pl.LazyFrame:
        """The distinct (user, item) rows, at most Δ0 per user, as a lazy plan (a composite key's columns
        unnested)."""
        return _released(self.lists().explode(self.space.item), self.space)

    def collect(self, **options: Any) -> pl.DataFrame:
        """The distinct (user, item) rows, at most Δ0 per user (``options`` go to ``LazyFrame.collect``)."""
        frame: pl.DataFrame = self.lazy().collect(**options)
        return frame
