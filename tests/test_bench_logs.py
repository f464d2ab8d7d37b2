"""``benchmarks/bench_logs.py`` skips without its data and runs on synthetic logs (a script, not a test: no figure
is checked here, only that it runs and prints its two tables with their goals)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_logs.py"
    spec = importlib.util.spec_from_file_location("bench_logs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_logs"] = module
    spec.loader.exec_module(module)
    return module


def test_without_the_data_it_says_so_and_skips(bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--data-dir", str(tmp_path)]) == 0
    assert "imdb_50k not found" in capsys.readouterr().out


def test_synthetic_logs_print_both_tables_with_their_goals(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--rows", "3000", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "(goal: ≤ 2×)" in out and "(goal: ≤ 1.3×)" in out
    rows = [line for line in out.splitlines() if line.startswith("| synthetic logs")]
    assert len(rows) == 4 and any("String users" in row for row in rows) and any("Int64 users" in row for row in rows)
