"""``benchmarks/bench_mixed_selection.py`` runs on a small synthetic table and composes its two rounds within (ε, δ)
(a script, not a test: no figure is checked here, only its pieces and its table's shape)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    dp.enable_features("contrib", "honest-but-curious")
    return load_benchmark("bench_mixed_selection")


def test_the_rest_of_the_budget_never_overshoots(bench: ModuleType) -> None:
    """0.2 · 1e-5 + 0.8 · 1e-5 is above 1e-5 in floating point: the rest is stepped down to fit."""
    assert 0.2 * 1e-5 + 0.8 * 1e-5 > 1e-5
    rest = bench._rest(0.2 * 1e-5, 1e-5)
    assert 0.2 * 1e-5 + rest <= 1e-5 and rest > 0.8 * 1e-5 * (1 - 1e-12)


@pytest.mark.parametrize("fraction", [0.05, 0.2, 0.3])
def test_the_two_rounds_compose_within_the_budget(bench: ModuleType, fraction: float) -> None:
    design = bench.make_mixed(fraction, 5)
    eps1, delta1 = design.selection.map(1)
    assert eps1 == pytest.approx(fraction) and delta1 == pytest.approx(fraction * 1e-5)
    for second in (design.wgm, design.dp_sips):
        eps2, delta2 = second.map(1)
        assert eps1 + eps2 <= 1.0 and delta1 + delta2 <= 1e-5
        assert eps2 == pytest.approx(1.0 - fraction) and delta2 == pytest.approx((1 - fraction) * 1e-5, rel=1e-3)


def test_round_two_sees_only_the_items_round_one_did_not_release(bench: ModuleType) -> None:
    data = pl.DataFrame({"user": [1, 1, 2, 2, 3, 4], "item": [10, 20, 10, 30, 40, 40]})
    seen: list[pl.DataFrame] = []

    def second(rest: pl.DataFrame) -> pl.DataFrame:
        seen.append(rest)
        return rest.select("item").unique().filter(pl.col("item") == 40)

    union = bench.second_round(second, data, pl.DataFrame({"item": [10, 99]}))
    assert seen[0].sort("user", "item").rows() == [(1, 20), (2, 30), (3, 40), (4, 40)]
    assert sorted(union["item"].to_list()) == [10, 40, 99]


def test_synthetic_table_and_absent_data(bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = wgm.datasets.synthetic_zipf(500, 4, seed=1)
    cells = bench.measure(data, 3, [0.1], 2)
    assert len(cells) == len(bench.columns([0.1])) == 5
    assert all(0.0 <= mean <= 1.0 and se >= 0.0 for mean, se in cells)
    assert bench.main(["--data-dir", str(tmp_path), "--trials", "1", "--fractions", "0.1,0.3"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "(absent)" in line]
    assert len(rows) == len(bench.BEST_L0) and all(row.count("|") == 1 + 3 + 7 for row in rows)
