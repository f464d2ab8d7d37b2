"""The release kernel's Polars plan functions (opendp_wgm.engines.polars)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import polars as pl
import pytest

from opendp_wgm._spaces import _Space
from opendp_wgm.engines import polars as kernel
from opendp_wgm.engines.polars import _plans
from opendp_wgm.privacy.threshold import LATTICE_BITS, lattice_weights
from tests.engine_modules import patch_engine

SPACE = _Space("user", "item", None, False)
SEEDS = (1, 2, 3, 4)


def frame() -> pl.LazyFrame:
    rng = np.random.default_rng(7)
    users = rng.integers(0, 200, 3000)
    return pl.LazyFrame({"user": users, "item": [f"i{v}" for v in rng.zipf(1.4, 3000) % 80]})


def test_bound_is_a_function_of_the_data_and_the_seed() -> None:
    first = kernel.bound_plan(frame(), SPACE, 3, SEEDS).collect().sort("user", "item")
    assert first.equals(kernel.bound_plan(frame(), SPACE, 3, SEEDS).collect().sort("user", "item"))
    assert first.group_by("user").len()["len"].max() <= 3 and not first.is_duplicated().any()
    lists = kernel.bounded_lists_plan(frame(), SPACE, 3, SEEDS).collect()
    assert lists.explode("item").sort("user", "item").equals(first)


@pytest.mark.parametrize("engine", ["auto", "streaming"])
def test_passes_give_the_one_pass_histogram_exactly(engine: str) -> None:
    """With one seed, the bucketed histogram is the one-plan histogram, integer for integer."""

    def lists_of(users):
        lf = frame() if users is None else frame().filter(users)
        return kernel.bounded_lists_plan(lf, SPACE, 5, SEEDS)

    one = kernel.lattice_histogram(lists_of, SPACE, 5).collect().sort("item")
    three = kernel.lattice_histogram(lists_of, SPACE, 5, passes=3, engine=engine).collect().sort("item")
    assert one.equals(three) and one[kernel.WEIGHT_LAT].dtype == pl.Int64
    w = lattice_weights(5)
    kept = kernel.bound_plan(frame(), SPACE, 5, SEEDS).collect()
    t = kept.group_by("user").len().rename({"len": "t"})
    expected = kept.join(t, on="user").with_columns(pl.col("t").map_elements(lambda n: int(w[n - 1]), return_dtype=pl.Int64))
    assert dict(one.iter_rows()) == dict(expected.group_by("item").agg(pl.col("t").sum()).iter_rows())


@pytest.mark.parametrize("engine", ["in-memory", "streaming"])
def test_passes_keep_only_the_running_sum(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pass's partial histogram is added into the running sum as soon as it is collected: while pass b
    runs, no earlier pass's partial histogram is alive but the first one's, the start of the sum, during pass 1
    (they were all kept until the end, the peak memory of a release in passes). Weak references spy on them."""
    parts: list[weakref.ref[pl.DataFrame]] = []
    alive: list[int] = []  # how many earlier partial histograms are alive as each pass starts
    plan_of = kernel.lattice_histogram_plan

    class SpiedPlan:
        def __init__(self, plan: pl.LazyFrame) -> None:
            self.plan = plan

        def collect(self, **options: object) -> pl.DataFrame:
            gc.collect()
            alive.append(sum(ref() is not None for ref in parts))
            part = self.plan.collect(**options)  # type: ignore[call-overload]
            parts.append(weakref.ref(part))
            return part

    patch_engine(monkeypatch, "lattice_histogram_plan", lambda *args: SpiedPlan(plan_of(*args)))

    def lists_of(users):
        lf = frame() if users is None else frame().filter(users)
        return kernel.bounded_lists_plan(lf, SPACE, 5, SEEDS)

    histogram = kernel.lattice_histogram(lists_of, SPACE, 5, passes=6, engine=engine).collect().sort("item")
    assert alive == [0, 1, 0, 0, 0, 0]
    patch_engine(monkeypatch, "lattice_histogram_plan", plan_of)
    assert histogram.equals(kernel.lattice_histogram(lists_of, SPACE, 5).collect().sort("item"))


def test_adding_histograms_is_exact() -> None:
    """Items of either histogram, Int64 sums; near 2^62 nothing is lost (no float on the way)."""
    big = 2**62 - 1
    first = pl.DataFrame({"item": ["a", "b"], kernel.WEIGHT_LAT: [big - 5, 3]})
    second = pl.DataFrame({"item": ["c", "a"], kernel.WEIGHT_LAT: [7, 5]})
    total = _plans._add_histograms(first, second, "item").sort("item")
    assert total.rows() == [("a", big), ("b", 3), ("c", 7)] and total[kernel.WEIGHT_LAT].dtype == pl.Int64


def test_plan_sample_reads_only_the_first_rows_of_a_filtered_scan(tmp_path) -> None:
    """:func:`kernel.mostly_above` reads the first rows a pass's filter keeps and stops: it no longer reads the
    whole bucket (every file) to take them. The last of 40 files is unreadable and is never reached."""
    rng = np.random.default_rng(5)
    first = pl.DataFrame({"user": np.arange(300_000) // 30, "item": rng.integers(0, 1000, 300_000)})
    first.write_parquet(tmp_path / "part-000.parquet")  # alone, ~150,000 rows pass the filter: enough
    for i in range(1, 40):
        pl.DataFrame({"user": [10**6 + i], "item": [0]}).write_parquet(tmp_path / f"part-{i:03d}.parquet")
    valid = (tmp_path / "part-039.parquet").read_bytes()
    (tmp_path / "part-039.parquet").write_bytes(valid[:4] + bytes(len(valid) - 8) + valid[-4:])
    bucket = pl.scan_parquet(tmp_path / "part-*.parquet").filter(pl.col("user").hash(3) % 2 == 0)
    assert not kernel.mostly_above(bucket, "user", 100)  # 30 rows per user, all at most Δ0 = 100
    assert kernel.mostly_above(bucket, "user", 10)
    with pytest.raises(pl.exceptions.ComputeError):  # the file is unreadable indeed
        bucket.collect()


def test_threshold_in_integers() -> None:
    weights = np.array([0, 2**LATTICE_BITS, 3 * 2**LATTICE_BITS], dtype=np.int64)
    _, keep = kernel.noisy_above_threshold(weights, scale=2.0**-LATTICE_BITS / 1e6, threshold=1.0)
    assert keep.tolist() == [False, False, True]  # noisy > floor(T 2^k): 2^k itself is not above T = 1
    histogram = pl.DataFrame({"item": ["z", "a", "m"], kernel.WEIGHT_LAT: [5 * 2**LATTICE_BITS, 2**LATTICE_BITS, 2**LATTICE_BITS * 4]})
    released = kernel.release_above_threshold(histogram, "item", scale=1e-9, threshold=2.0, noise="lattice")
    assert released.rows() == [("m", 4.0), ("z", 5.0)]  # sorted by item, exact weights


def test_candidate_counts_cast_exactly() -> None:
    lf = pl.LazyFrame({"user": [1, 1, 2, 3, 3], "item": [10, 10, 10, 20, 30]})
    assert kernel.candidate_counts(lf, SPACE, pl.Series([30, 10, 99])).tolist() == [1, 2, 0]
    with pytest.raises(ValueError, match="exactly representable"):
        kernel.candidate_counts(lf, SPACE, pl.Series([1.5]))
