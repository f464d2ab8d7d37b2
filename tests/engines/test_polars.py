"""The release kernel's Polars plan functions (opendp_wgm.engines.polars)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from opendp_wgm._spaces import _Space
from opendp_wgm.engines import polars as kernel
from opendp_wgm.privacy.threshold import LATTICE_BITS, lattice_weights

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
