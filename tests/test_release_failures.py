"""Failures are not outputs: no release may raise because of private values.

An exception (or abort) that one data set triggers and its neighbour does not tells them apart with
probability 1, and no privacy map charges it. For every release path of ``tests/release_paths.py`` (every public
releasing constructor and the CLI's release commands), on frames of adversarial values of every supported
dtype (unsigned integers at their limits, UInt64 ids from 2^63 on, Int64's extremes, NaN, ±inf and -0.0,
empty, huge and non-ASCII strings, Categorical and Enum, dates and datetimes, binary, Int128, Struct items with a
null field, nulls in every key part, composite keys, value columns with NaN/±inf/nulls, a single user, every
user removed), this family checks that a frame and its
neighbour (one user removed) either both release, or both raise the error the frame's *schema* raises (the
same error an empty frame of that schema raises): a failure is then decided by public information only.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from functools import cache
from typing import Any

import opendp.prelude as dp
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opendp_wgm.measurements as measurements
from tests.release_paths import NOT_RELEASES, VALUE, Keys, constructor_of, release_paths

INF = math.inf
NAN = math.nan
#: Every release path (name -> builder): tests/release_paths.py's table and the rows the mechanisms' test modules declare.
PATHS_BY_NAME = release_paths()
STRINGS = ["", "a", "é🙂\u0000,\n\"'", "x" * 50_000, "null", "0"]

#: item kind -> (dtype of each key column, values of the key: one per column, or a tuple for a composite key)
KINDS: dict[str, tuple[tuple[pl.DataType, ...], list[Any]]] = {
    "UInt8": ((pl.UInt8(),), [0, 1, 255]),
    "UInt16": ((pl.UInt16(),), [0, 2**16 - 1]),
    "UInt32": ((pl.UInt32(),), [0, 2**32 - 1]),
    "UInt64": ((pl.UInt64(),), [0, 2**63 - 1, 2**63, 2**64 - 1]),
    "Int8": ((pl.Int8(),), [-128, 127, 0]),
    "Int64": ((pl.Int64(),), [-(2**63), 2**63 - 1, 0, -1]),
    "Float32": ((pl.Float32(),), [NAN, INF, -INF, -0.0, 0.0, 3.4028234e38, 1e-45]),
    "Float64": ((pl.Float64(),), [NAN, INF, -INF, -0.0, 0.0, 1.7976931348623157e308, 5e-324]),
    "Boolean": ((pl.Boolean(),), [True, False]),
    "String": ((pl.String(),), STRINGS),
    "Categorical": ((pl.Categorical(),), STRINGS),
    "Enum": ((pl.Enum(STRINGS),), STRINGS),
    "Date": ((pl.Date(),), [datetime.date(1, 1, 1), datetime.date(9999, 12, 31), datetime.date(1970, 1, 1)]),
    "Datetime": ((pl.Datetime("us", "Europe/Paris"),), [datetime.datetime(1, 1, 1, tzinfo=datetime.UTC), datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)]),
    "Binary": ((pl.Binary(),), [b"\xff\xfe", b"", b"a"]),
    "Int128": ((pl.Int128(),), [2**100, -(2**120), 0]),
    "Struct": ((pl.Struct({"a": pl.UInt64, "b": pl.String}),), [{"a": 2**64 - 1, "b": ""}, {"a": None, "b": "a"}, {"a": 0, "b": None}]),
    "composite": (
        (pl.UInt64(), pl.String()),
        [(2**64 - 1, ""), (0, "a"), (2**63, "é🙂"), (2**64 - 1, "a")],
    ),
}
#: user kind -> (dtype, distinct user ids, by Polars' equality)
USERS: dict[str, tuple[pl.DataType, list[Any]]] = {
    "UInt64": (pl.UInt64(), [2**64 - 1, 2**63, 0, *range(1, 60)]),
    "Int64": (pl.Int64(), [-(2**63), 2**63 - 1, *range(-30, 30)]),
    "String": (pl.String(), ["", "é🙂", "u" * 10_000, *map(str, range(60))]),
    "Float64": (pl.Float64(), [NAN, INF, -INF, 0.0, 1e308, *(i + 0.5 for i in range(60))]),
    "Categorical": (pl.Categorical(), ["", "é🙂", *map(str, range(60))]),
}
VALUES = [NAN, INF, -INF, None, 1.7976931348623157e308, -0.0, 0.5]
N_USERS = 50


def _keys(kind: str) -> Keys:
    return ("k1", "k2") if kind == "composite" else ("item",)


def _frame(kind: str, user_kind: str, rows: Sequence[tuple[int, int | None, int]]) -> pl.DataFrame:
    """A frame of (user, key columns, value) rows given as indices into the kinds' pools (``None``: a null key;
    a composite key's null is in its second column)."""
    dtypes, pool = KINDS[kind]
    user_dtype, users = USERS[user_kind]
    keys = _keys(kind)
    values = [pool[i] if i is not None else None for _, i, _ in rows]
    columns: dict[str, pl.Series] = {"user": pl.Series("user", [users[u] for u, _, _ in rows], dtype=user_dtype)}
    if len(keys) == 1:
        columns[keys[0]] = pl.Series(keys[0], values, dtype=dtypes[0])
    else:
        columns["k1"] = pl.Series("k1", [v[0] if v is not None else 0 for v in values], dtype=dtypes[0])
        columns["k2"] = pl.Series("k2", [v[1] if v is not None else None for v in values], dtype=dtypes[1])
    columns[VALUE] = pl.Series(VALUE, [VALUES[v] for _, _, v in rows], dtype=pl.Float64)
    return pl.DataFrame(columns)


def _candidates(kind: str) -> pl.Series | pl.DataFrame:
    dtypes, pool = KINDS[kind]
    if kind == "composite":
        return pl.DataFrame({"k1": [v[0] for v in pool], "k2": [v[1] for v in pool]}, schema=dict(zip(_keys(kind), dtypes, strict=True)))
    series = pl.Series("candidate", pool, dtype=dtypes[0])
    if isinstance(dtypes[0], pl.Struct):  # candidates have no null field
        return series.filter(series.struct.unnest().select(pl.all_horizontal(pl.all().is_not_null())).to_series())
    return series.unique(maintain_order=True)


@cache
def _release(path: str, kind: str) -> Any:
    """The path's release for ``kind`` (built once), or the error its construction raised."""
    try:
        return PATHS_BY_NAME[path](_keys(kind), _candidates(kind))
    except (ValueError, TypeError, dp.OpenDPException) as err:
        return err


def _outcome(path: str, kind: str, frame: pl.DataFrame) -> str:
    """``"released"`` or the error raised, by type and message."""
    release = _release(path, kind)
    if isinstance(release, Exception):
        return f"refused at construction: {type(release).__name__}: {release}"
    try:
        release(frame)
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return "released"


@cache
def _schema_outcome(path: str, kind: str, user_kind: str) -> str:
    """The outcome on an empty frame of the schema: what public information alone decides."""
    return _outcome(path, kind, _frame(kind, user_kind, []))


def _check_neighbours(path: str, kind: str, user_kind: str, rows: list[tuple[int, int | None, int]], removed: int) -> None:
    frame = _frame(kind, user_kind, rows)
    neighbour = _frame(kind, user_kind, [r for r in rows if r[0] != removed])
    expected = _schema_outcome(path, kind, user_kind)
    allowed = {"released", expected}
    outcomes = (_outcome(path, kind, frame), _outcome(path, kind, neighbour))
    assert outcomes[0] == outcomes[1], (path, kind, user_kind, outcomes)
    assert outcomes[0] in allowed, (path, kind, user_kind, outcomes[0], expected)


def _extreme_rows(kind: str) -> list[tuple[int, int | None, int]]:
    """Users 0.. hold every key of the pool (user u the keys u, u+1, u+2 mod the pool), a null key and every
    value; user 0 (the removed one) holds the extremes of the user ids (index 0)."""
    pool = len(KINDS[kind][1])
    rows = [(u, (u + j) % pool, (u + j) % len(VALUES)) for u in range(N_USERS) for j in range(3)]
    return [*rows, (0, None, 3), (1, None, 0)]


PATHS = sorted(PATHS_BY_NAME)
#: the CLI's commands are slower (a file written and read, a calibration per run): fewer random examples
API_PATHS = [p for p in PATHS if not p.startswith("cli ")]
CLI_PATHS = [p for p in PATHS if p.startswith("cli ")]


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")  # the policy baselines need it


@pytest.mark.parametrize("path", PATHS)
def test_extreme_values_release_or_fail_on_the_schema(path: str) -> None:
    """Every kind of key: with UInt64 users (ids 2^64 - 1 and 2^63 among them), the user holding the extreme
    ids and values removed; with another kind of user (in turn), two users against one."""
    others = sorted(set(USERS) - {"UInt64"})
    for i, kind in enumerate(KINDS):
        rows = _extreme_rows(kind)
        _check_neighbours(path, kind, "UInt64", rows, removed=0)
        _check_neighbours(path, kind, others[i % len(others)], [r for r in rows if r[0] < 2], removed=1)


@st.composite
def _neighbours(draw: st.DrawFn) -> tuple[str, str, list[tuple[int, int | None, int]], int]:
    kind = draw(st.sampled_from(sorted(KINDS)))
    user_kind = draw(st.sampled_from(sorted(USERS)))
    pool = len(KINDS[kind][1])
    users = draw(st.lists(st.integers(0, len(USERS[user_kind][1]) - 1), min_size=1, max_size=N_USERS, unique=True))
    rows = []
    for user in users:
        keys = draw(st.lists(st.one_of(st.none(), st.integers(0, pool - 1)), min_size=1, max_size=5))
        rows += [(user, key, draw(st.integers(0, len(VALUES) - 1))) for key in keys]
    return kind, user_kind, rows, draw(st.sampled_from(users))


_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


@pytest.mark.parametrize("path", API_PATHS)
@settings(max_examples=20, **_SETTINGS)  # type: ignore[arg-type]
@given(case=_neighbours())
def test_neighbours_release_or_fail_on_the_schema(path: str, case: tuple[str, str, list[Any], int]) -> None:
    _check_neighbours(path, *case)


@pytest.mark.parametrize("path", CLI_PATHS)
@settings(max_examples=6, **_SETTINGS)  # type: ignore[arg-type]
@given(case=_neighbours())
def test_cli_neighbours_release_or_fail_on_the_schema(path: str, case: tuple[str, str, list[Any], int]) -> None:
    _check_neighbours(path, *case)


def test_every_public_release_is_in_the_table() -> None:
    """A new releasing constructor in ``opendp_wgm.measurements.__all__`` must have a release path: a row of the
    table or of its test module's ``RELEASE_PATHS``."""
    covered = {constructor_of(name) for name in PATHS_BY_NAME}
    public = {name for name in measurements.__all__ if name.startswith("make_")}
    missing = sorted(public - covered - set(NOT_RELEASES))
    assert not missing, (
        f"declare these release paths (RELEASE_PATHS in the constructor's test module, see tests/release_paths.py): "
        f"{missing}"
    )
    assert not (set(NOT_RELEASES) - public), "NOT_RELEASES names a constructor that is no longer public"


# --------------------------------------------------------------------------------------------------------------
# the raises this family found, one test each


def _uint64_neighbours() -> tuple[pl.DataFrame, pl.DataFrame]:
    """40 users with UInt64 ids holding item 2^64 - 1 and item 1; one more user, id 2^63, in the first only."""
    users = pl.Series("user", range(40), dtype=pl.UInt64)
    rows = pl.DataFrame({"user": pl.concat([users, users]), "item": pl.Series([2**64 - 1] * 40 + [1] * 40, dtype=pl.UInt64)})
    big = pl.DataFrame({"user": pl.Series([2**63], dtype=pl.UInt64), "item": pl.Series([2**64 - 1], dtype=pl.UInt64)})
    return pl.concat([rows, big]), rows


@pytest.mark.parametrize("path", ["make_wgm_group_by", "make_opendp_key_release"])
def test_uint64_ids_from_2_63_release(path: str) -> None:
    """UInt64 users and items enter OpenDP's frame as UInt64: a cast to Int64 failed on one id ≥ 2^63, after
    stage 1 had drawn its noise."""
    release = PATHS_BY_NAME[path](("item",), None)
    for frame in _uint64_neighbours():
        released = release(frame.with_columns(pl.lit(0.5).alias(VALUE)))
        assert released.schema["item"] == pl.UInt64
        assert set(released["item"]) <= {1, 2**64 - 1}
        assert 2**64 - 1 in set(released["item"])  # 40 users at scale 0.5: released with overwhelming probability


def test_policy_gaussian_codes_int8_items_at_both_limits() -> None:
    """Policy Gaussian codes small-range integers as value - min: in Int8, 127 - (-128) wrapped to a negative
    code (an IndexError inside the release)."""
    frame = pl.DataFrame({"user": list(range(30)) * 2, "item": pl.Series([-128] * 30 + [127] * 30, dtype=pl.Int8)})
    released = PATHS_BY_NAME["make_policy_gaussian"](("item",), None)(frame)
    assert released.schema["item"] == pl.Int8 and set(released["item"]) == {-128, 127}


def test_unsupported_dtypes_are_refused_from_the_schema() -> None:
    """Int128 crashed Polars inside a release (a panic, an abort in the histogram); a Datetime key did not come
    back from OpenDP's frame: both refused before any noise, empty frame or not."""
    frame = pl.DataFrame({"user": [1, 2], "item": pl.Series([2**100, 0], dtype=pl.Int128), VALUE: [0.5, 0.5]})
    for path in ("make_wgm", "make_dp_sips", "make_noisy_threshold"):
        with pytest.raises((ValueError, dp.OpenDPException), match="column 'item' must have a dtype other than Int128"):
            PATHS_BY_NAME[path](("item",), None)(frame)
    dates = frame.with_columns(pl.Series("item", [datetime.datetime(2000, 1, 1)] * 2))
    for path in ("make_wgm_group_by", "make_opendp_key_release"):
        for data in (dates, dates.clear()):
            with pytest.raises((ValueError, dp.OpenDPException), match="key column 'item' must be an integer, Boolean, float"):
                PATHS_BY_NAME[path](("item",), None)(data)


def test_struct_item_with_a_null_field_is_dropped() -> None:
    """A Struct item with a null field was released by the WGM, then refused as a null candidate by stage 2."""
    items = pl.Series("item", [{"a": None, "b": "x"}] * 30 + [{"a": 1, "b": "x"}] * 30)
    frame = pl.DataFrame({"user": list(range(30)) * 2, "item": items})
    released = PATHS_BY_NAME["make_wgm_top_k"](("item",), None)(frame)
    assert released["item"].to_list() == [{"a": 1, "b": "x"}]


@pytest.mark.parametrize("command", ["discover", "top-k", "hitting-set"])
def test_cli_releases_data_without_users(command: str) -> None:
    """No row, or no row with both a user and an item, was an error (exit 2) where its neighbour released."""
    build = PATHS_BY_NAME[f"cli {command}"]
    for frame in (pl.DataFrame(schema={"user": pl.Int64, "item": pl.String}), pl.DataFrame({"user": [1, None], "item": [None, "a"]})):
        assert build(("item",), None)(frame) == 0
