"""The command's Parquet footer reader (:mod:`opendp_wgm.cli._parquet_footer`): pyarrow's names, duplicates kept."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opendp_wgm.cli._parquet_footer import parquet_column_names

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _tables() -> dict[str, object]:
    return {
        "duplicate": pa.Table.from_arrays([pa.array([1, 2]), pa.array(["a", "b"]), pa.array([3, 4])],
                                          names=["user", "item", "user"]),
        "nested": pa.table({
            "a": [[1, 2], [3]],
            "s": [{"x": 1, "y": {"z": "q"}}, {"x": 2, "y": {"z": "r"}}],
            "m": pa.array([[("k", 1)], [("j", 2)]], type=pa.map_(pa.string(), pa.int64())),
            "after": [1, 2],
            "é ü": ["u", "v"],
        }),
        "wide": pa.table({f"c{i}": [i] for i in range(300)}),
        "empty": pa.table({"u": pa.array([], pa.int64())}),
    }


@pytest.mark.parametrize("name", ["duplicate", "nested", "wide", "empty"])
@pytest.mark.parametrize(
    "options", [{}, {"compression": "zstd", "row_group_size": 1}, {"version": "1.0", "write_statistics": False}]
)
def test_the_names_are_pyarrows(tmp_path: Path, name: str, options: dict[str, object]) -> None:
    path = tmp_path / f"{name}.parquet"
    pq.write_table(_tables()[name], path, **options)
    assert parquet_column_names(path) == pq.read_schema(path).names


def test_a_polars_file_with_many_row_groups(tmp_path: Path) -> None:
    path = tmp_path / "polars.parquet"
    pl.DataFrame({"user": ["a", "b"] * 500, "item": range(1000), "l": [[1]] * 1000}).write_parquet(
        path, row_group_size=10
    )
    assert parquet_column_names(path) == ["user", "item", "l"]


def test_not_parquet_is_a_value_error(tmp_path: Path) -> None:
    for content in (b"", b"PAR1", b"user,item\n1,2\n", b"x" * 40 + b"PAR1"):
        path = tmp_path / "bad.parquet"
        path.write_bytes(content)
        with pytest.raises(ValueError, match="Parquet"):
            parquet_column_names(path)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_damaged_footer_raises_value_error_or_reads_names(tmp_path_factory: pytest.TempPathFactory,
                                                            data: st.DataObject) -> None:
    """Any byte of the footer changed: a ValueError or a list of names, never another error or a hang."""
    folder = tmp_path_factory.mktemp("damaged")
    path = folder / "data.parquet"
    pq.write_table(_tables()["nested"], path)
    raw = bytearray(path.read_bytes())
    length = int.from_bytes(raw[-8:-4], "little")
    at = data.draw(st.integers(len(raw) - 8 - length, len(raw) - 9))
    raw[at] = data.draw(st.integers(0, 255))
    path.write_bytes(bytes(raw))
    try:
        names = parquet_column_names(path)
    except ValueError:
        return
    assert all(isinstance(name, str) for name in names)
