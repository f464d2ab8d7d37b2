"""``benchmarks/compare_revisions.py`` reads the benchmarks' markdown tables (a script: only its parser runs here)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def compare() -> ModuleType:
    return load_benchmark("compare_revisions")


def test_tables_are_read_cell_by_cell(compare: ModuleType) -> None:
    text = """load: 1.0
| data set | input | pairs | WGM | top-k |
|---|---|---|---|---|
| steam | frame | 1,024 | 0.108 (1.00×) · cpu 1.00× | n/a |
| steam | parquet | 1,024 | 2.5e-01 s | 0.3× |

| k | s |
|---|---|
| 5 | 7 |
"""
    cells = compare.parse_tables(text)
    header = "data set | input | pairs | WGM | top-k"
    assert cells[(header, "steam · frame", "pairs")] == 1024
    assert cells[(header, "steam · frame", "WGM")] == pytest.approx(0.108)
    assert (header, "steam · frame", "top-k") not in cells  # not a number
    assert cells[(header, "steam · parquet", "WGM")] == pytest.approx(0.25)
    assert cells[(header, "steam · parquet", "top-k")] == pytest.approx(0.3)
    assert cells[("k | s", "5", "s")] == 7  # a numeric first cell still names its row
    assert len(cells) == 6


def test_a_repeated_column_name_keeps_its_own_key(compare: ModuleType) -> None:
    # bench_logs' two-stage table: a ratio after top-k and another after the hitting set
    text = """| frame | top-k (s) | ratio | hitting set (s) | ratio |
|---|---|---|---|---|
| imdb | 0.25 | 1.04× | 0.29 | 1.19× |
"""
    cells = compare.parse_tables(text)
    header = "frame | top-k (s) | ratio | hitting set (s) | hitting set (s) ratio"
    assert cells[(header, "imdb", "ratio")] == pytest.approx(1.04)
    assert cells[(header, "imdb", "hitting set (s) ratio")] == pytest.approx(1.19)
    assert len(cells) == 4


def test_the_report_puts_revisions_side_by_side(compare: ModuleType) -> None:
    key = ("a | b", "row", "b")
    report = compare._report(["old", "new"], {"old": [{key: 2.0}, {key: 4.0}], "new": [{key: 1.0}, {key: 2.0}]}, 2)
    assert "| row | b | 3 | 1.5 | 0.50 |" in report


def test_a_run_that_prints_no_table_is_an_error(
    compare: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a benchmark that finds no data prints no table: reported, not an empty comparison
    quiet = tmp_path / "quiet.py"
    quiet.write_text("print('no data here')\n")
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert compare.main(["--rev", "HEAD", "--rev", head, "--rounds", "1", "--", str(quiet)]) == 1
    assert "printed no table row" in capsys.readouterr().err


def test_a_revision_given_twice_is_refused(compare: ModuleType) -> None:
    with pytest.raises(SystemExit):
        compare.main(["--rev", "HEAD", "--rev", "HEAD", "--", "script.py"])
