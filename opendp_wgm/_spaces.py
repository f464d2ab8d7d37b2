"""Shared internals of the input spaces (:mod:`opendp_wgm.domains`): the resolved space of a constructor's
input, the preparation of a frame into (user key, item), and the checks behind them.

Measurements, engines and the auditor import these from here (a shared private module, like ``_validation``);
the public face of the spaces is :mod:`opendp_wgm.domains`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import opendp.prelude as dp
import polars as pl
from numpy.typing import NDArray
from opendp.domains import _lazyframe_from_domain

from opendp_wgm._validation import _check_item

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

    from opendp_wgm.engines.polars import Prepared

__all__: list[str] = []

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


def _identifier_of_metric(input_metric: dp.Metric) -> pl.Expr:
    """The identifier of a constructor's input metric, which must be user-level add/remove neighbours."""
    if not isinstance(input_metric, dp.SymmetricIdDistance):
        msg = (
            "`input_metric` must be dp.symmetric_id_distance(pl.col(user)) (user-level add/remove "
            f"neighbours) (found {input_metric})"
        )
        raise ValueError(msg)
    identifier = input_metric.identifier
    if identifier.meta.has_multiple_outputs() or not identifier.meta.root_names():
        msg = f"`input_metric`'s identifier must be one expression over the frame's columns (found {identifier})"
        raise ValueError(msg)
    expression: pl.Expr = identifier
    return expression


def _user_of_metric(input_metric: dp.Metric) -> str:
    """The user column of an engine that identifies users by a bare column only (Spark, Tumult).

    An identifier expression (``pl.col("person") // 2``) is refused: reading it as its root column would bound
    and weight each person, not each household, while the map charges one household.
    """
    identifier = _identifier_of_metric(input_metric)
    if not identifier.meta.is_column():
        msg = (
            "`input_metric` must identify users by a column, dp.symmetric_id_distance(pl.col(user)), on this "
            f"engine (found the expression {identifier}); add the identifier as a column first"
        )
        raise ValueError(msg)
    return identifier.meta.output_name()


@dataclass(frozen=True)
class _Space:
    """The resolved input space of a constructor: column names and what the domain promises.

    ``user`` names the user-key column of the frame :func:`_prepare_frame` returns. ``identifier`` is ``None``
    when that is a column of the input; otherwise it is the metric's identifier expression, evaluated into
    column ``user`` (its Polars output name). ``item_dtype`` is the item's dtype when the input domain states
    it (OpenDP's ``dp.lazyframe_domain``), for checks at construction.

    A composite key (``composite``: two or more key columns) is carried as ONE item column: ``item`` is then
    the name :func:`_item_column` gives it (the keys joined by commas) and the prepared frame holds the Struct
    of the key columns there, so the kernel runs unchanged; every release unnests it back into the key
    columns (:func:`_released`). :attr:`keys` lists the key columns in both cases.
    """

    user: str
    item: str
    max_contributions: int | None
    lazyframe_domain: bool
    identifier: pl.Expr | None = field(default=None, compare=False)
    item_dtype: pl.DataType | None = field(default=None, compare=False)
    composite: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        """The key columns of the input (and of every release): the item column, or a composite key's."""
        return self.composite or (self.item,)

    @property
    def columns(self) -> list[str]:
        """The input columns a frame needs: the identifier's roots and the key columns."""
        roots = [self.user] if self.identifier is None else self.identifier.meta.root_names()
        return list(dict.fromkeys([*roots, *self.keys]))


def _item_column(item: str | tuple[str, ...]) -> str:
    """The item column of a prepared frame: the item's own name, or a composite key's names joined by commas."""
    return item if isinstance(item, str) else ",".join(item)


_Frame = TypeVar("_Frame", pl.DataFrame, pl.LazyFrame)


def _released(frame: _Frame, space: _Space) -> _Frame:
    """A release with the input's key columns: a composite key's Struct unnested in place, fields in key order."""
    return frame.unnest(space.item) if space.composite else frame


def _release_keys(frame: pl.DataFrame, keys: tuple[str, ...]) -> pl.Series:
    """The keys of a release (:func:`_released`) as one Series: the item column, or a Struct of a composite
    key's columns named like :func:`_item_column` (the inverse of the unnesting)."""
    if len(keys) == 1:
        return frame.get_column(keys[0])
    return frame.select(pl.struct(keys).alias(_item_column(keys))).to_series()


#: Only :func:`opendp_wgm.make_bound_user_items` holds it: a :class:`BoundedUserItems` is built there only.
_BOUND_STEP = object()


@dataclass(frozen=True, eq=False)
class _PreparedFrame:
    """A frame that went through :func:`_prepare_frame` for ``space``: preparing it again for a space with the
    same columns returns it unchanged (a two-stage release prepares its input once for both stages, and the
    identifier expression must not be evaluated twice). ``source``: the release's
    :class:`~opendp_wgm.engines.polars.Prepared` value of ``lf``, when its steps share it (whether ``lf`` is in
    memory, and the slot of the compiled step's coding that stage 2 reads)."""

    lf: pl.LazyFrame
    space: _Space
    source: Prepared | None = None


def _user_key(identifier: pl.Expr, item: str) -> tuple[str, pl.Expr | None]:
    """The user-key column name of ``identifier`` and the expression to evaluate (``None``: a bare column)."""
    user = identifier.meta.output_name()
    if user == item:
        msg = (
            f"`input_metric`'s identifier must not be named like the item column {item!r} (found {identifier}); "
            "give it another name with .alias()"
        )
        raise ValueError(msg)
    return user, (None if identifier.meta.is_column() else identifier)


#: The last space :func:`_resolve_space` resolved: ``(input_domain, input_metric, item, space)``. A two-stage call
#: builds its stage 2 on the same domain and metric objects at every release; reading them through OpenDP's FFI
#: again (the identifier expression, the descriptor) cost about a third of that build.
_LAST_SPACE: list[tuple[dp.Domain, dp.Metric, str | Sequence[str] | None, _Space]] = []


def _resolve_space(input_domain: dp.Domain, input_metric: dp.Metric, item: str | Sequence[str] | None = None) -> _Space:
    """Check a constructor's input space and read the column names off it (the same objects as the last call's:
    the same space, not read again; OpenDP's domains and metrics are immutable).

    Accepts :func:`user_items_space` (``item`` must then be ``None`` or agree) and OpenDP's
    ``dp.lazyframe_domain`` with ``dp.symmetric_id_distance`` (``item`` names the item column; it may be
    omitted when the frame has exactly one column besides the identifier's). The identifier may be a row-wise
    expression of the frame's columns; the user key is then its value (:func:`_prepare_frame`). With OpenDP's
    domain, whose columns and dtypes are known, the whole preparation is checked here on an empty frame, so
    that a bad column or dtype raises ``ValueError`` at construction rather than inside a release.
    """
    key = item if item is None or isinstance(item, str) else tuple(item)  # a copy: a list may change
    if _LAST_SPACE:
        domain, metric, last_item, space = _LAST_SPACE[0]
        if domain is input_domain and metric is input_metric and last_item == key:
            return space
    space = _read_space(input_domain, input_metric, item)
    _LAST_SPACE[:] = [(input_domain, input_metric, key, space)]
    return space


def _read_space(input_domain: dp.Domain, input_metric: dp.Metric, item: str | Sequence[str] | None) -> _Space:
    """:func:`_resolve_space`, read off the objects."""
    identifier = _identifier_of_metric(input_metric)
    roots = identifier.meta.root_names()

    from opendp_wgm.domains import UserItemsDescriptor  # deferred: domains builds on this module

    checked = None if item is None else _check_item(item)
    descriptor = getattr(input_domain, "descriptor", None)
    if isinstance(descriptor, UserItemsDescriptor):
        if descriptor.user not in roots or (identifier.meta.is_column() and roots != [descriptor.user]):
            msg = (
                f"`input_metric` identifies users by {identifier} but `input_domain` by "
                f"{descriptor.user!r}"
            )
            raise ValueError(msg)
        if checked is not None and checked != descriptor.item:
            msg = f"`item` ({item!r}) disagrees with `input_domain`'s item column ({descriptor.item!r})"
            raise ValueError(msg)
        user, expression = _user_key(identifier, _item_column(descriptor.item))
        composite = () if isinstance(descriptor.item, str) else descriptor.item
        return _Space(
            user, _item_column(descriptor.item), descriptor.max_contributions, False, expression, composite=composite
        )

    if isinstance(input_domain, dp.LazyFrameDomain):
        columns = list(input_domain.columns)
        absent = [c for c in roots if c not in columns]
        if absent:
            names = ", ".join(map(repr, absent))
            msg = f"user column {names} not found in `input_domain` (columns: {columns})"
            raise ValueError(msg)
        if checked is None:
            others = [c for c in columns if c not in roots]
            if len(others) != 1:
                msg = f"pass `item=` to name the item column among {others}"
                raise ValueError(msg)
            checked = others[0]
        keys = (checked,) if isinstance(checked, str) else checked
        for key in keys:
            if key not in columns:
                msg = f"item column {key!r} not found in `input_domain` (columns: {columns})"
                raise ValueError(msg)
        if identifier.meta.is_column() and roots[0] in keys:
            msg = f"`item` must differ from the user column ({roots[0]!r})"
            raise ValueError(msg)
        column = _item_column(checked)
        composite = () if isinstance(checked, str) else checked
        user, expression = _user_key(identifier, column)
        space = _Space(user, column, None, True, expression, composite=composite)
        try:  # the preparation on an empty frame of the domain's schema: Polars checks every dtype
            prepared = _prepare_frame(_lazyframe_from_domain(input_domain), space).head(0).collect()
        except pl.exceptions.PolarsError as err:
            msg = f"`input_metric`'s identifier {identifier} cannot be evaluated on `input_domain`: {err}"
            raise ValueError(msg) from err
        return _Space(user, column, None, True, expression, prepared.schema[column], composite)

    _refuse_spark(descriptor, input_domain)
    msg = (
        "`input_domain` must come from opendp_wgm.user_items_space() or be a dp.lazyframe_domain "
        f"(e.g. a Context's accountant.input_space) (found {input_domain})"
    )
    raise ValueError(msg)


#: The constructors that run on a Spark input space (``docs/engines.md``), named in the refusal of the others.
SPARK_CONSTRUCTORS = (
    "make_wgm",
    "make_dp_sips",
    "make_wgm_top_k",
    "make_wgm_hitting_set",
    "make_peeling_top_k",
    "make_user_peeling",
    "make_wgm_group_by",
    "make_partition_selection",
)


def _refuse_spark(descriptor: object, input_domain: dp.Domain) -> None:
    """Raise, saying why, when a Polars-only constructor is given a Spark input space: its release is written for
    frames in this process (Polars), and no Spark plan computes it."""
    from opendp_wgm.engines.spark import SparkUserItemsDescriptor  # deferred: the engines build on this module

    if isinstance(descriptor, SparkUserItemsDescriptor):
        names = ", ".join(SPARK_CONSTRUCTORS)
        msg = (
            f"this constructor runs on Polars frames only: it has no Spark plan (found {input_domain}). On a Spark "
            f"input space use {names} (and their _from_budget forms), or collect the frame to Polars and build "
            "on opendp_wgm.user_items_space()"
        )
        raise ValueError(msg)


def _value_dtype(dtype: PolarsDataType) -> PolarsDataType:
    """``dtype`` with every Categorical/Enum, nested ones included, replaced by String.

    A Categorical's physical code depends on the order in which values first appeared (in the frame, or in
    the process's category map), i.e. on other users' rows; its string does not. Polars hashes floats by
    value already (``-0.0`` and ``0.0`` alike, one NaN).
    """
    if isinstance(dtype, (pl.Categorical, pl.Enum)):
        return pl.String
    if isinstance(dtype, pl.Struct):
        return pl.Struct([pl.Field(f.name, _value_dtype(f.dtype)) for f in dtype.fields])
    if isinstance(dtype, pl.List):
        return pl.List(_value_dtype(dtype.inner))
    if isinstance(dtype, pl.Array):
        return pl.Array(_value_dtype(dtype.inner), dtype.shape)
    return dtype


def _value_key(column: str, dtype: PolarsDataType) -> pl.Expr:
    """Column ``column`` in a representation that depends on its value only (for hashing and ordering)."""
    value_dtype = _value_dtype(dtype)
    return pl.col(column) if value_dtype == dtype else pl.col(column).cast(value_dtype)


#: Rows of a user column checked before the whole (:func:`_flag_sorted_users`): a speed choice only.
_SORTED_PROBE = 1 << 16


def _flag_sorted_users(frame: pl.DataFrame, user: str) -> pl.DataFrame:
    """``frame`` with its user column flagged sorted when it is sorted (checked: one pass over the column, no
    copy), so that the per-user ``group_by`` of the release slices contiguous runs instead of hashing every row.

    Only integer and String columns without nulls are checked (their sorted flag means what ``is_sorted``
    checks); the flag is never set unchecked: a wrong one would split a user into several groups. The first
    :data:`_SORTED_PROBE` rows are checked first: Polars' ``is_sorted`` reads a whole String column even when
    its second row is out of order (0.2 s on 1.2·10^7 rows), and most files' users are not sorted.
    """
    column = frame.get_column(user)
    if not (column.dtype.is_integer() or column.dtype == pl.String) or column.null_count():
        return frame
    if column.len() > _SORTED_PROBE and not column.slice(0, _SORTED_PROBE).is_sorted():
        return frame  # unsorted in its first rows, hence unsorted
    if not column.is_sorted():
        return frame
    return frame.with_columns(column.set_sorted())


def _foreign_kind(frame: object) -> str | None:
    """``"pandas"`` for a pandas DataFrame, ``"arrow"`` for a pyarrow Table or RecordBatch, else ``None``; by
    the class's module, so that neither library is imported to ask."""
    kind = type(frame).__module__.split(".")[0]
    name = type(frame).__name__
    if kind == "pandas" and name == "DataFrame":
        return "pandas"
    if kind == "pyarrow" and name in ("Table", "RecordBatch"):
        return "arrow"
    return None


def _as_polars(frame: object) -> pl.DataFrame | pl.LazyFrame:
    """``frame`` as a Polars frame: Polars frames as they are; a pandas DataFrame (``pl.from_pandas``) or a
    pyarrow Table / RecordBatch (``pl.from_arrow``) converted at the boundary, in memory; anything else is a
    ``TypeError``. A converted column keeps its values (pandas' ``object`` strings become String)."""
    if isinstance(frame, (pl.DataFrame, pl.LazyFrame)):
        return frame
    kind = _foreign_kind(frame)
    foreign: Any = frame  # pandas and pyarrow are optional: their types are not imported
    if kind == "pandas":
        return pl.from_pandas(foreign)
    if kind == "arrow":
        converted = pl.from_arrow(foreign)
        assert isinstance(converted, pl.DataFrame)  # a Table or RecordBatch converts to a DataFrame
        return converted
    msg = (
        "`frame` must be a polars DataFrame or LazyFrame, a pandas DataFrame or a pyarrow Table "
        f"(found {type(frame).__module__}.{type(frame).__name__})"
    )
    raise TypeError(msg)


def _frame_columns(frame: object) -> list[str] | None:
    """The column names of a frame :func:`_as_polars` accepts (without converting it), else ``None``."""
    if isinstance(frame, (pl.DataFrame, pl.LazyFrame)):
        return frame.collect_schema().names()
    kind = _foreign_kind(frame)
    foreign: Any = frame
    if kind == "pandas":
        return [str(c) for c in foreign.columns]
    if kind == "arrow":
        return list(foreign.schema.names)
    return None


def _prepare_frame(frame: pl.DataFrame | pl.LazyFrame, space: _Space, extra: Sequence[str] = ()) -> pl.LazyFrame:
    """The user key and the item of ``frame`` as a lazy plan, rows with a null user key or item dropped.

    ``extra`` columns are kept after them, as they are (their nulls drop no row): the value columns that
    :mod:`opendp_wgm.measurements.group_by` aggregates.

    ``frame`` may also be a pandas DataFrame or a pyarrow Table, converted by :func:`_as_polars`. The user key is
    the identifier's value (a column, or the expression evaluated row by row), in a
    value-only representation (Categorical as String), so every later step groups, hashes and orders by the
    privacy unit. A composite key becomes one Struct column of its key columns (named ``space.item``); a row
    with a null in any key column is dropped, as a row with a null item is, and so is a row whose Struct item
    has a null field (:func:`_null_items`: no release could hand it to a known-domain stage as a candidate).
    Dropping rows is a row-wise filter: it never makes two users' data depend on each other, so it is stable
    with the same ``d_in``. Missing columns, and user or key dtypes no release reads (Int128, UInt128, Object),
    raise here; the message depends only on the schema.
    """
    if isinstance(frame, _PreparedFrame):
        if (frame.space.user, frame.space.keys) != (space.user, space.keys):
            found = (frame.space.user, frame.space.item)
            msg = f"`frame` must be prepared for columns {(space.user, space.item)} (found {found})"
            raise ValueError(msg)
        return frame.lf
    frame = _as_polars(frame)
    schema = frame.collect_schema()
    missing = [c for c in dict.fromkeys([*space.columns, *extra]) if c not in schema]
    if missing:
        msg = f"column(s) {missing} not found in the data (columns: {list(schema.names())})"
        raise ValueError(msg)
    key = pl.col(space.user) if space.identifier is None else space.identifier.alias(space.user)
    if isinstance(frame, pl.DataFrame) and space.identifier is None:
        frame = _flag_sorted_users(frame, space.user)
    lf = frame.lazy()
    if space.composite:  # a Struct is never null itself: drop the rows with a null field first
        lf = lf.filter(pl.all_horizontal(pl.col(space.composite).is_not_null()))
        lf = lf.select(key, pl.struct(space.composite).alias(space.item), *extra)
    else:
        lf = lf.select(key, pl.col(space.item), *extra)
        dtype = schema[space.item]
        if isinstance(dtype, pl.Struct) and dtype.fields:  # a Struct item with a null field is a null item
            fields = [pl.col(space.item).struct.field(f.name).is_not_null() for f in dtype.fields]
            lf = lf.filter(pl.all_horizontal(fields))
    prepared = lf.collect_schema()
    for column in (space.user, *space.keys):
        _check_release_dtype(column, prepared[space.user] if column == space.user else schema[column])
    return lf.with_columns(_value_key(space.user, prepared[space.user])).drop_nulls([space.user, space.item])


#: Dtypes no release reads: Polars 1.36 implements neither hashing nor sorting of 128-bit integers everywhere
#: (a panic, or an abort, inside a release), nor any operation on Python objects.
_REFUSED_DTYPES = (pl.Int128, pl.UInt128, pl.Object)


def _check_release_dtype(column: str, dtype: PolarsDataType) -> None:
    """Refuse, from the schema alone (before any noise is drawn), a user or key column whose dtype a release
    could fail on at some values and not others."""
    if isinstance(dtype, _REFUSED_DTYPES) or dtype in _REFUSED_DTYPES:
        msg = (
            f"column {column!r} must have a dtype other than Int128, UInt128 or Object (found {dtype}); "
            "cast it to Int64 or String first"
        )
        raise ValueError(msg)


def _null_items(items: pl.Series) -> int:
    """The number of null items: null values, and Structs (composite keys) with a null field."""
    nulls = items.null_count()
    if isinstance(items.dtype, pl.Struct) and items.len():
        nulls += int(items.struct.unnest().select(pl.any_horizontal(pl.all().is_null()).sum()).item())
    return nulls


def _check_candidates(candidates: Sequence[Any] | pl.Series | pl.DataFrame | NDArray[Any]) -> pl.Series:
    """The public candidate list as a Series: distinct, no nulls (order is kept: it indexes the output).

    A ``pl.DataFrame`` (a composite key's candidates, one column per key column) becomes a Struct Series of its
    columns (a one-column frame, that column); a Struct candidate must have no null field either.
    """
    if isinstance(candidates, pl.DataFrame):
        candidates = candidates.to_series() if candidates.width == 1 else candidates.to_struct()
    if isinstance(candidates, (str, bytes)) or not hasattr(candidates, "__len__"):
        msg = f"`candidates` must be a sequence of items (found {type(candidates).__name__})"
        raise TypeError(msg)
    series = candidates.rename("candidate") if isinstance(candidates, pl.Series) else pl.Series("candidate", candidates)
    if _null_items(series):
        msg = "`candidates` must not contain nulls"
        raise ValueError(msg)
    if series.is_duplicated().any():
        msg = f"`candidates` must be distinct ({series.is_duplicated().sum()} duplicated entries)"
        raise ValueError(msg)
    return series


def _check_candidates_for(candidates: pl.Series, space: _Space) -> pl.Series:
    """Check at construction that ``candidates`` cast exactly to the item dtype the input domain states (if it
    states one: ``dp.lazyframe_domain``); the release checks again against the data's dtype
    (:func:`opendp_wgm.engines.polars.cast_candidates`)."""
    from opendp_wgm.engines.polars import cast_candidates  # deferred: the kernel builds on this module

    if space.composite:
        fields = candidates.dtype.fields if isinstance(candidates.dtype, pl.Struct) else None
        if fields is None or sorted(f.name for f in fields) != sorted(space.composite):
            found = [f.name for f in fields] if fields is not None else candidates.dtype
            msg = f"`candidates` must be a DataFrame with the key columns {list(space.composite)} (found {found})"
            raise TypeError(msg)
        candidates = candidates.struct.unnest().select(space.composite).to_struct(candidates.name)
    dtype = space.item_dtype
    return candidates if dtype is None else cast_candidates(candidates, dtype).rename(candidates.name)
