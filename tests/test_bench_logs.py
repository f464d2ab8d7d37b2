"""``benchmarks/bench_logs.py`` skips without its data and runs on synthetic logs (a script, not a test: no figure
is checked here, only that it runs and prints its two tables with their goals)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("bench_logs")


def test_without_the_data_it_says_so_and_skips(bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--data-dir", str(tmp_path)]) == 0
    assert "imdb_50k not found" in capsys.readouterr().out


def test_synthetic_logs_print_both_tables_with_their_goals(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--rows", "3000", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "(goal: ≤ 2×)" in out and "(goal: ≤ 1.3×)" in out
    rows = [line for line in out.splitlines() if line.startswith("| synthetic logs")]
    assert len(rows) == 4 and any("String users" in row for row in rows) and any("Int64 users" in row for row in rows)
