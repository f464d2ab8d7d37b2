"""Lazy file scans and Polars' streaming engine give the same WGM histogram and release as in-memory frames.

The histogram is compared without noise, through the transformations (``make_bound_user_items`` >>
``make_weighted_histogram``); with at most Δ0 distinct items per user nothing is subsampled, so the histogram
is a deterministic function of the data and must be equal whatever the source or the engine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm._spaces import _prepare_frame, _resolve_space
from opendp_wgm.engines import polars as kernel
from opendp_wgm.engines.polars import bounded_lists_plan, lattice_histogram_plan
from opendp_wgm.measurements import hitting_set, top_k
from tests.engine_modules import patch_engine

MAX_CONTRIBUTIONS = 12


@pytest.fixture(scope="module")
def data() -> pl.DataFrame:
    """5000 users with 1..12 raw rows each (so <= 12 distinct items), duplicates, and a few null rows."""
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, MAX_CONTRIBUTIONS + 1, size=5000)
    frame = pl.DataFrame(
        {
            "user": np.repeat(np.arange(sizes.shape[0]), sizes),
            "item": rng.zipf(1.4, size=int(sizes.sum())) % 500,
        }
    )
    nulls = pl.DataFrame({"user": [None, 3, None], "item": [1, None, None]}, schema=frame.schema)
    return pl.concat([frame, nulls])


@pytest.fixture(scope="module")
def files(data: pl.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("scans")
    # several Parquet parts, as a large data set would be written
    for i, part in enumerate(data.iter_slices(n_rows=7000)):
        part.write_parquet(folder / f"part-{i}.parquet")
    data.write_csv(folder / "data.csv")
    return {"parquet": folder / "part-*.parquet", "csv": folder / "data.csv"}


def scan(kind: str, files: dict[str, Path]) -> pl.LazyFrame:
    if kind == "parquet":
        return pl.scan_parquet(files["parquet"])
    return pl.scan_csv(files["csv"], schema={"user": pl.Int64, "item": pl.Int64})


def histogram(frame: pl.DataFrame | pl.LazyFrame, *, engine: str = "auto") -> dict:
    chain = (
        wgm.user_items_space()
        >> wgm.then_bound_user_items(max_contributions=MAX_CONTRIBUTIONS)
        >> wgm.then_weighted_histogram()
    )
    return dict(chain(frame).collect(engine=engine).iter_rows())


@pytest.mark.parametrize("kind", ["parquet", "csv"])
@pytest.mark.parametrize("engine", ["auto", "streaming"])
def test_scans_give_the_in_memory_histogram(data, files, kind, engine) -> None:
    expected = histogram(data)
    assert len(expected) > 100
    assert histogram(scan(kind, files), engine=engine) == expected


def test_lattice_plan_streams_to_the_same_integers(data, files) -> None:
    """The plan ``_wgm_function`` collects, on a Parquet scan, with the streaming engine: same Int64 sums."""
    space = _resolve_space(*wgm.user_items_space())
    plans = [
        lattice_histogram_plan(bounded_lists_plan(_prepare_frame(source, space), space, MAX_CONTRIBUTIONS), space, MAX_CONTRIBUTIONS)
        for source in (data, scan("parquet", files))
    ]
    in_memory = plans[0].collect().sort("item")
    streamed = plans[1].collect(engine="streaming").sort("item")
    assert streamed.schema == pl.Schema({"item": pl.Int64, "weight_lat": pl.Int64})
    assert streamed.equals(in_memory)


def test_user_buckets_sum_to_the_whole_histogram(data, files) -> None:
    """Bounding is per user, so disjoint user buckets processed one after the other give the same sums."""
    space = _resolve_space(*wgm.user_items_space())
    lf = _prepare_frame(scan("parquet", files), space)
    parts = [
        lattice_histogram_plan(
            bounded_lists_plan(lf.filter(pl.col("user").hash(11) % 3 == b), space, MAX_CONTRIBUTIONS), space, MAX_CONTRIBUTIONS
        ).collect(engine="streaming")
        for b in range(3)
    ]
    summed = pl.concat(parts).group_by("item").agg(pl.col("weight_lat").sum()).sort("item")
    whole = lattice_histogram_plan(bounded_lists_plan(lf, space, MAX_CONTRIBUTIONS), space, MAX_CONTRIBUTIONS)
    assert summed.equals(whole.collect(engine="streaming").sort("item"))


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_release_on_a_scan_equals_in_memory_without_noise(data, files, kind) -> None:
    m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=MAX_CONTRIBUTIONS, scale=1e-7, threshold=3.0)
    released, expected = m(scan(kind, files)), m(data)
    assert released["item"].to_list() == expected["item"].to_list()
    assert released["noisy_weight"].to_numpy() == pytest.approx(expected["noisy_weight"].to_numpy(), abs=1e-5)
    assert released.height > 10


def test_subsampled_scan_keeps_the_total_mass(files) -> None:
    """With Δ0 below some users' item counts, the kept subsets are random, but sum_u t_u w(t_u) is not."""
    lf = scan("parquet", files)
    chain = wgm.user_items_space() >> wgm.then_bound_user_items(max_contributions=3) >> wgm.then_weighted_histogram()
    totals = {chain(lf).collect(engine=engine)["weight"].sum() for engine in ("auto", "streaming", "streaming")}
    assert len(totals) == 1


# --------------------------------------------------------------------------------------------------------------
# the two-stage mechanisms on a scan: stage 1 in passes, stage 2 on the candidates' rows


def _two_stage_data() -> pl.DataFrame:
    """Disjoint groups of 3, 5, ..., 21 users holding item 0..9 (so distinct counts and uncovered counts), each
    user with one item of its own too (weight 1/sqrt(2) < the threshold), and duplicate rows."""
    groups = [(j, 3 + 2 * j) for j in range(10)]
    users = np.concatenate([np.full(size, j) for j, size in groups]).astype(np.int64)
    ids = np.arange(users.shape[0], dtype=np.int64)
    frame = pl.DataFrame(
        {"user": np.concatenate([ids, ids, ids]), "item": np.concatenate([users, 1000 + ids, users])}
    )
    return frame.sample(fraction=1.0, shuffle=True, seed=5)


@pytest.fixture
def stage_1_plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the per-user bounding plans the WGM builds from now on: one per pass."""
    plans: list[int] = []
    bounded_lists_plan = kernel.bounded_lists_plan

    def counted(*args, **options):
        plans.append(1)
        return bounded_lists_plan(*args, **options)

    patch_engine(monkeypatch, "bounded_lists_plan", counted)
    return plans


@pytest.mark.parametrize("mechanism", ["top_k", "hitting_set"])
@pytest.mark.parametrize("engine", ["auto", "streaming"])
def test_two_stage_on_a_scan_with_passes_gives_the_one_pass_release(mechanism, engine, tmp_path, stage_1_plans) -> None:
    """passes=3 on a Parquet scan: stage 1 runs three bucketed plans and the release is the one-pass release."""
    path = tmp_path / "two_stage.parquet"
    _two_stage_data().write_parquet(path, row_group_size=40)
    make = {"top_k": top_k.make_wgm_top_k, "hitting_set": hitting_set.make_wgm_hitting_set}[mechanism]
    # no subsampling (2 distinct items per user <= Δ0); almost no noise: σ = 1e-7, and a peeling scale of 1e-3
    # makes one user of difference a factor e^1000, so both stages are deterministic
    params = dict(k=4, max_contributions=2, wgm_scale=1e-7, wgm_threshold=2.0, peel_scale=1e-3)
    one_pass = make(*wgm.user_items_space(), **params)(pl.scan_parquet(path))
    assert len(stage_1_plans) == 1

    m = make(*wgm.user_items_space(), **params, passes=3, engine=engine)
    released = m(pl.scan_parquet(path))
    assert len(stage_1_plans) == 1 + 3  # stage 1 ran one plan per bucket
    assert released.equals(one_pass)
    assert released["item"].to_list() == [9, 8, 7, 6]
    assert released.schema == pl.Schema({"item": pl.Int64, "rank": pl.UInt32})


@pytest.mark.parametrize("mechanism", ["top_k", "hitting_set"])
def test_two_stage_from_budget_passes_the_execution_options(mechanism, tmp_path, stage_1_plans) -> None:
    path = tmp_path / "two_stage.parquet"
    _two_stage_data().write_parquet(path)
    make = {
        "top_k": top_k.make_wgm_top_k_from_budget,
        "hitting_set": hitting_set.make_wgm_hitting_set_from_budget,
    }[mechanism]
    m = make(*wgm.user_items_space(), k=3, max_contributions=2, epsilon=1.0, delta=1e-5, passes=2, engine="streaming")
    released = m(pl.scan_parquet(path))
    assert len(stage_1_plans) == 2
    assert released.columns == ["item", "rank"] and released.height <= 3
