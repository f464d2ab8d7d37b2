r"""Input spaces: (user, item) frames under add/remove-one-user neighbours.

:func:`user_items_space` is the light space of this package: its carrier is a Polars ``DataFrame`` or
``LazyFrame`` held as a Python object, so nothing is copied through OpenDP's FFI (converting a 10^7-row frame
through ``dp.lazyframe_domain`` costs 5–17 s). Every constructor also accepts OpenDP's own
``dp.lazyframe_domain`` with ``dp.symmetric_id_distance(user)``, the space of a ``dp.Context``, so that plugin
measurements compose next to OpenDP's Polars queries.

The neighbouring relation is always: datasets differ by the rows of ``d_in`` whole users (add or remove),
where a user is the set of rows sharing a value of the ``user`` column.
"""

from __future__ import annotations

from dataclasses import dataclass

import opendp.prelude as dp
import polars as pl

__all__ = ["UserItemsDescriptor", "user_items_domain", "user_items_space"]

_FEATURES = ("contrib", "honest-but-curious")


def _assert_features() -> None:
    """Our spaces and constructors are OpenDP *user* objects: the caller must opt in to trusting their maps."""
    try:
        dp.assert_features(*_FEATURES)
    except dp.OpenDPException as err:
        msg = (
            'opendp_wgm builds user-defined domains and measurements: call dp.enable_features("contrib", '
            '"honest-but-curious") first. Enabling "honest-but-curious" means trusting this plugin\'s '
            "privacy maps, whose proofs are in the package docs (docs/privacy.md)."
        )
        raise dp.OpenDPException("FailedFunction", msg) from err


def _check_column_names(user: object, item: object) -> None:
    """The user and item columns of a descriptor: non-empty names, and two different columns."""
    for name, value in (("user", user), ("item", item)):
        if not isinstance(value, str) or not value:
            msg = f"`{name}` must be a non-empty column name (found {value!r})"
            raise TypeError(msg)
    if user == item:
        msg = f"`user` and `item` must be different columns (both are {user!r})"
        raise ValueError(msg)


def _user_of_metric(input_metric: dp.Metric) -> str:
    """The user column of a constructor's input metric, which must be user-level add/remove neighbours."""
    if not isinstance(input_metric, dp.SymmetricIdDistance):
        msg = (
            "`input_metric` must be dp.symmetric_id_distance(pl.col(user)) (user-level add/remove "
            f"neighbours), got {input_metric}"
        )
        raise ValueError(msg)
    return input_metric.identifier.meta.output_name()


@dataclass(frozen=True)
class UserItemsDescriptor:
    """What a user-items domain promises about its frames.

    Attributes
    ----------
    user, item
        Column names of the user identifier and of the item.
    max_contributions
        ``None`` for raw data; otherwise every user holds at most this many *distinct* items and no
        (user, item) pair is repeated (the output of :func:`opendp_wgm.make_bound_user_items`).
    """

    user: str = "user"
    item: str = "item"
    max_contributions: int | None = None

    def __post_init__(self) -> None:
        _check_column_names(self.user, self.item)


def _is_member(descriptor: UserItemsDescriptor):
    def member(frame: object) -> bool:
        if not isinstance(frame, (pl.DataFrame, pl.LazyFrame)):
            return False
        schema = frame.collect_schema()
        return descriptor.user in schema and descriptor.item in schema

    return member


def user_items_domain(descriptor: UserItemsDescriptor) -> dp.Domain:
    """The OpenDP domain of (user, item) frames described by ``descriptor``."""
    _assert_features()
    bound = "" if descriptor.max_contributions is None else f", max_contributions={descriptor.max_contributions}"
    name = f"UserItemsDomain(user={descriptor.user!r}, item={descriptor.item!r}{bound})"
    return dp.user_domain(name, _is_member(descriptor), descriptor=descriptor)


def user_items_space(user: str = "user", item: str = "item") -> tuple[dp.Domain, dp.Metric]:
    r"""The input space of raw (user, item) data with user-level add/remove neighbours.

    Parameters
    ----------
    user
        Name of the column identifying the privacy unit.
    item
        Name of the item column (any hashable Polars dtype).

    Returns
    -------
    tuple[opendp.mod.Domain, opendp.mod.Metric]
        A domain whose members are ``pl.DataFrame`` / ``pl.LazyFrame`` objects with both columns, and
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
    descriptor = UserItemsDescriptor(user=user, item=item)
    return user_items_domain(descriptor), dp.symmetric_id_distance(pl.col(user))


@dataclass(frozen=True)
class _Space:
    """The resolved input space of a constructor: column names and what the domain promises."""

    user: str
    item: str
    max_contributions: int | None
    lazyframe_domain: bool


def _resolve_space(input_domain: dp.Domain, input_metric: dp.Metric, item: str | None = None) -> _Space:
    """Check a constructor's input space and read the column names off it.

    Accepts :func:`user_items_space` (``item`` must then be ``None`` or agree) and OpenDP's
    ``dp.lazyframe_domain`` with ``dp.symmetric_id_distance`` (``item`` names the item column; it may be
    omitted when the frame has exactly one column besides the user).
    """
    user = _user_of_metric(input_metric)

    descriptor = getattr(input_domain, "descriptor", None)
    if isinstance(descriptor, UserItemsDescriptor):
        if descriptor.user != user:
            msg = (
                f"`input_metric` identifies users by {user!r} but `input_domain` by {descriptor.user!r}"
            )
            raise ValueError(msg)
        if item is not None and item != descriptor.item:
            msg = f"`item` ({item!r}) disagrees with `input_domain`'s item column ({descriptor.item!r})"
            raise ValueError(msg)
        return _Space(user, descriptor.item, descriptor.max_contributions, lazyframe_domain=False)

    if isinstance(input_domain, dp.LazyFrameDomain):
        columns = list(input_domain.columns)
        if user not in columns:
            msg = f"user column {user!r} not found in `input_domain` (columns: {columns})"
            raise ValueError(msg)
        if item is None:
            others = [c for c in columns if c != user]
            if len(others) != 1:
                msg = f"pass `item=` to name the item column among {others}"
                raise ValueError(msg)
            item = others[0]
        elif item not in columns:
            msg = f"item column {item!r} not found in `input_domain` (columns: {columns})"
            raise ValueError(msg)
        if item == user:
            msg = f"`item` must differ from the user column ({user!r})"
            raise ValueError(msg)
        return _Space(user, item, None, lazyframe_domain=True)

    msg = (
        "`input_domain` must come from opendp_wgm.user_items_space() or be a dp.lazyframe_domain "
        f"(e.g. a Context's accountant.input_space), got {input_domain}"
    )
    raise ValueError(msg)


def _prepare_frame(frame: pl.DataFrame | pl.LazyFrame, space: _Space) -> pl.LazyFrame:
    """The two columns of ``frame`` as a lazy plan, rows with a null user or item dropped.

    Dropping rows is a row-wise filter: it never makes two users' data depend on each other, so it is
    stable with the same ``d_in``. Missing columns raise here; the message depends only on the schema.
    """
    if not isinstance(frame, (pl.DataFrame, pl.LazyFrame)):
        msg = f"expected a polars DataFrame or LazyFrame, got {type(frame).__name__}"
        raise TypeError(msg)
    schema = frame.collect_schema()
    missing = [c for c in (space.user, space.item) if c not in schema]
    if missing:
        msg = f"column(s) {missing} not found in the data (columns: {list(schema.names())})"
        raise ValueError(msg)
    return frame.lazy().select(space.user, space.item).drop_nulls()
