"""The API accepts pandas DataFrames and Arrow tables, converted to Polars at the boundary
(``opendp_wgm._spaces._as_polars``), and refuses anything else with a clear ``TypeError``."""

from __future__ import annotations

import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm

N_USERS = 300


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


@pytest.fixture
def frame() -> pl.DataFrame:
    """300 users hold "a" and one item of their own: "a" is released, no solo item (see tests/test_cli.py)."""
    users = [u for u in range(N_USERS) for _ in range(2)]
    items = [x for u in range(N_USERS) for x in ("a", f"solo{u}")]
    return pl.DataFrame({"user": users, "item": items})


@pytest.fixture
def wgm_measurement() -> dp.Measurement:
    return wgm.make_wgm_from_budget(*wgm.user_items_space(), epsilon=1.0, delta=1e-5, max_contributions=100)


def _convert(frame: pl.DataFrame, kind: str) -> object:
    if kind == "pandas":
        pytest.importorskip("pandas")
        return frame.to_pandas()
    if kind == "pandas categorical":
        pytest.importorskip("pandas")
        converted = frame.to_pandas()
        converted["item"] = converted["item"].astype("category")
        return converted
    pytest.importorskip("pyarrow")
    table = frame.to_arrow()
    return table if kind == "arrow table" else table.to_batches()[0]


@pytest.mark.parametrize("kind", ["pandas", "pandas categorical", "arrow table", "arrow record batch"])
def test_wgm_releases_from_pandas_and_arrow(frame: pl.DataFrame, wgm_measurement: dp.Measurement, kind: str) -> None:
    data = _convert(frame, kind)
    assert wgm_measurement.input_domain.member(data)
    released = wgm_measurement(data)
    assert released["item"].cast(pl.String).to_list() == ["a"]


@pytest.mark.parametrize("kind", ["pandas", "arrow table"])
def test_two_stage_top_k_from_pandas_and_arrow(frame: pl.DataFrame, kind: str) -> None:
    measurement = wgm.make_wgm_top_k_from_budget(
        *wgm.user_items_space(), k=1, epsilon=1.0, delta=1e-5, max_contributions=100
    )
    assert measurement(_convert(frame, kind))["item"].to_list() == ["a"]


@pytest.mark.parametrize("data", [[("u", "a")], {"user": [1], "item": ["a"]}, "user,item\n1,a\n", None])
def test_other_inputs_are_a_clear_type_error(wgm_measurement: dp.Measurement, data: object) -> None:
    assert not wgm_measurement.input_domain.member(data)
    with pytest.raises(dp.OpenDPException) as info:
        wgm_measurement(data)
    expected = "TypeError: `frame` must be a polars DataFrame or LazyFrame, a pandas DataFrame or a pyarrow Table (found builtins."
    assert expected in str(info.value)


def test_missing_column_of_a_pandas_frame(frame: pl.DataFrame) -> None:
    pytest.importorskip("pandas")
    domain, _metric = wgm.user_items_space(user="person")
    assert not domain.member(frame.to_pandas())
