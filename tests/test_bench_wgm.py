"""``benchmarks/bench_wgm.py``'s patched kernels run ``m(df)`` (a script, not a test: only its pieces run here)."""

from __future__ import annotations

from types import ModuleType

import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("bench_wgm")


def test_previous_kernel_and_polars_plans_run_the_measurement(bench: ModuleType) -> None:
    """The frozen previous bound step takes every argument the kernel passes it (``distinct=``: it crashed the
    script at its first data set), and the patched kernels are restored afterwards."""
    dp.enable_features("contrib", "honest-but-curious")
    frame = pl.DataFrame({"user": [1, 1, 1, 2, 2, 3], "item": [1, 2, 3, 1, 1, 2]})
    m = wgm.make_wgm_from_budget(*wgm.user_items_space("user", "item"), max_contributions=2, epsilon=1.0, delta=1e-5)
    plan, jit = bench.kernel.bounded_lists_plan, bench.kernel.kernel_jit
    with bench.previous_kernel():
        assert set(m(frame).columns) == {"item", "noisy_weight"}
    with bench.polars_plans():
        assert set(m(frame).columns) == {"item", "noisy_weight"}
    assert (bench.kernel.bounded_lists_plan, bench.kernel.kernel_jit) == (plan, jit)
