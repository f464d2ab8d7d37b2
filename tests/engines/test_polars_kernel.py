"""The per-user WGM kernel gives today's histogram and kept subsets, bit for bit, for fixed seeds.

``_frozen_lists`` / ``_frozen_histogram`` are a frozen copy of the kernel as it was before its speed-up (one
``group_by(user)`` building every user's list, each list sorted by the secret key, ``unique().head(Δ0)``). The
kernel may plan differently (sort by user first, the keyed selection only for users above Δ0), but for the same
seeds it must keep the same items for every user and give the same Int64 lattice histogram, on every shape:
users all below Δ0, all above, mixed, Int/String/Categorical items, duplicates, shuffled rows, nulls, ids spread
over a wide range, several passes; and so must the compiled (Numba) per-user step where it runs.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from opendp_wgm import _spaces as spaces
from opendp_wgm._spaces import _flag_sorted_users, _prepare_frame, _Space, _value_key
from opendp_wgm.engines import polars as kernel
from opendp_wgm.engines.polars import _compiled_histogram, _compiled_steps
from opendp_wgm.kernel import Plan, histogram, plan_for, plans, refusal
from opendp_wgm.privacy.threshold import lattice_weights
from tests.engine_modules import MergingJit, patch_engine

SPACE = _Space("user", "item", None, False)
SEEDS = (11, 22, 33, 44)
MAX_CONTRIBUTIONS = 8


def _frozen_lists(lf: pl.LazyFrame, max_contributions: int, seeds: tuple[int, ...]) -> pl.DataFrame:
    """The kernel's bound step before the speed-up (frozen): one row per user, its kept items."""
    schema = lf.collect_schema()
    public = (0x5EED, 0xC0DE, 0xFACE, 0xBEEF)  # each value's public hash, then their xor under the secret seeds
    key = (_value_key("user", schema["user"]).hash(*public) ^ _value_key("item", schema["item"]).hash(*public)).hash(*seeds)
    return (
        lf.with_columns(_key=key)
        .group_by("user")
        .agg(pl.col("item").sort_by("_key").unique(maintain_order=True).head(max_contributions))
        .collect()
    )


def _frozen_histogram(lists: pl.DataFrame, max_contributions: int) -> dict[object, int]:
    """The lattice histogram of frozen lists: per item, the sum of floor(2^20 / sqrt(t)) over its users."""
    weights = pl.Series(lattice_weights(max_contributions))
    rows = lists.with_columns(w=pl.col("item").list.len().map_batches(lambda t: weights.gather(t - 1)))
    return dict(rows.explode("item").group_by("item").agg(pl.col("w").sum()).iter_rows())


def _shape(name: str) -> pl.DataFrame:
    """Test frames: user ids Int64 or String, items Int64, String or Categorical, with duplicates."""
    rng = np.random.default_rng(SHAPES.index(name))
    if name == "below":  # every user holds at most Δ0 distinct items (and duplicates)
        sizes = rng.integers(1, 2 * MAX_CONTRIBUTIONS, 400)
        users = np.repeat(np.arange(400), sizes)
        items = rng.integers(0, MAX_CONTRIBUTIONS, users.shape[0])
    elif name == "above":  # every user holds more than Δ0 distinct items
        users = np.repeat(np.arange(150), 40)
        items = rng.zipf(1.2, users.shape[0]) % 400 + np.tile(np.arange(40), 150) * 1000
    else:  # mixed sizes, Zipf items
        sizes = rng.integers(1, 5 * MAX_CONTRIBUTIONS, 500)
        users = np.repeat(np.arange(500), sizes)
        items = rng.zipf(1.3, users.shape[0]) % 300
    return pl.DataFrame({"user": users, "item": items.astype(np.int64)})


def _variant(frame: pl.DataFrame, variant: str) -> pl.DataFrame:
    if variant == "shuffled":
        return frame.sample(fraction=1.0, shuffle=True, seed=3)
    if variant == "string":
        return frame.with_columns(pl.format("u{}", "user"), pl.format("item-{}", "item")).sample(fraction=1.0, shuffle=True, seed=4)
    if variant == "categorical":
        return frame.with_columns(pl.format("i{}", "item").cast(pl.Categorical))
    if variant == "nulls":  # dropped before the bound: the frozen kernel reads the same prepared frame
        every = pl.int_range(pl.len())
        return frame.with_columns(
            pl.when(every % 7 == 0).then(None).otherwise(pl.col("user")).alias("user"),
            pl.when(every % 5 == 0).then(None).otherwise(pl.col("item")).alias("item"),
        ).sample(fraction=1.0, shuffle=True, seed=5)
    if variant == "wide":  # ids spread over the whole integer range (the compiled step's hash table)
        return frame.with_columns(pl.col("user") * 10**12 - 2**62, (pl.col("item").cast(pl.UInt64) + 1) * 2**54)
    if variant == "sparse":  # fewer than half of the offsets taken (the compiled step renumbers them), shuffled
        return frame.with_columns(pl.col("user") * 3 - 7, pl.col("item") * 5 - 3).sample(fraction=1.0, shuffle=True, seed=6)
    if variant == "narrow":  # Int32 users, UInt32 items (the compiled step reads them in their dtype), sparse
        narrow = ((pl.col("user") * 3 - 7).cast(pl.Int32), (pl.col("item") * 5 + 3).cast(pl.UInt32))
        return frame.with_columns(*narrow).sample(fraction=1.0, shuffle=True, seed=7)
    return frame


SHAPES = ["below", "above", "mixed"]
VARIANTS = ["sorted", "shuffled", "string", "categorical", "nulls", "wide", "sparse", "narrow"]


@pytest.mark.parametrize("plan", ["auto", "split", "keyed"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_kept_items_equal_the_frozen_kernel(shape: str, variant: str, plan: str) -> None:
    frame = _variant(_shape(shape), variant)
    lf = _prepare_frame(frame, SPACE)
    expected = _frozen_lists(lf, MAX_CONTRIBUTIONS, SEEDS)
    found = kernel.bounded_lists_plan(lf, SPACE, MAX_CONTRIBUTIONS, SEEDS, plan=plan).collect()  # type: ignore[arg-type]
    as_sets = lambda lists: {u: frozenset(items) for u, items in lists.iter_rows()}  # noqa: E731
    assert as_sets(found) == as_sets(expected)
    assert found["item"].list.len().max() <= MAX_CONTRIBUTIONS
    if shape != "below":  # the keyed subsample did something
        assert (expected["item"].list.len() == MAX_CONTRIBUTIONS).any()


@pytest.mark.parametrize("passes", [1, 3])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_histogram_equals_the_frozen_kernel(shape: str, variant: str, passes: int) -> None:
    frame = _variant(_shape(shape), variant)
    lf = _prepare_frame(frame, SPACE)

    def lists_of(users: pl.Expr | None) -> pl.LazyFrame:
        return kernel.bounded_lists_plan(lf if users is None else lf.filter(users), SPACE, MAX_CONTRIBUTIONS, SEEDS)

    histogram = kernel.lattice_histogram(lists_of, SPACE, MAX_CONTRIBUTIONS, passes=passes).collect()
    assert histogram[kernel.WEIGHT_LAT].dtype == pl.Int64
    expected = _frozen_histogram(_frozen_lists(lf, MAX_CONTRIBUTIONS, SEEDS), MAX_CONTRIBUTIONS)
    assert dict(histogram.iter_rows()) == expected


@pytest.mark.parametrize("plan", ["auto", "split", "keyed"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_distinct_pairs_keep_the_frozen_kernels_items(shape: str, variant: str, plan: str) -> None:
    """DP-SIPS's rounds bound the distinct pairs (deduplicated once, each user's rows adjacent) without the
    kernel's own ``unique``: the same kept items and histogram as the frozen kernel on the raw rows."""
    frame = _variant(_shape(shape), variant)
    lf = _prepare_frame(frame, SPACE)
    pairs = kernel.distinct_pairs_plan(lf, SPACE).collect()
    assert pairs.height == lf.collect().unique().height and pairs["user"].is_sorted()  # nulls dropped first
    expected = _frozen_lists(lf, MAX_CONTRIBUTIONS, SEEDS)
    for rows in (pairs.lazy(), pairs.lazy().filter(pl.col("user").hash(5) % 3 == 1)):  # and a pass's bucket

        def lists_of(users: pl.Expr | None, rows: pl.LazyFrame = rows) -> pl.LazyFrame:
            bucket = rows if users is None else rows.filter(users)
            return kernel.bounded_lists_plan(bucket, SPACE, MAX_CONTRIBUTIONS, SEEDS, plan=plan, distinct=True)  # type: ignore[arg-type]

        users = rows.select("user").collect()["user"]
        kept = expected.filter(pl.col("user").is_in(users.implode()))
        found = lists_of(None).collect()
        assert {u: frozenset(i) for u, i in found.iter_rows()} == {u: frozenset(i) for u, i in kept.iter_rows()}
        for passes in (1, 3):
            histogram = kernel.lattice_histogram(lists_of, SPACE, MAX_CONTRIBUTIONS, passes=passes).collect()
            assert dict(histogram.iter_rows()) == _frozen_histogram(kept, MAX_CONTRIBUTIONS)


#: each plan of the kernel, and the threads its compiled step runs in (more threads than cores is fine)
_PLAN_RUNS = {
    "compiled": (Plan.COMPILED_CODED, None),
    "threads": (Plan.COMPILED_CODED, 3),
    "keyed": (Plan.COMPILED_RUNS_KEYED, 3),
    "runs": (Plan.COMPILED_RUNS, 3),
    "polars": (Plan.POLARS_SPLIT, None),
    "polars-keyed": (Plan.POLARS_KEYED, None),
}


@pytest.fixture(params=list(_PLAN_RUNS))
def jit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Plan:
    """A plan of :func:`opendp_wgm.kernel.histogram`, forced by its argument: compiled in one thread or in three
    (chunks of rows and ranges of users; skipped without Numba), the compiled route on users' runs in three
    threads with every row keyed or the items' values as keys (where users are not runs, the exact Polars plan,
    as the plan states), or the Polars plans."""
    plan, threads = _PLAN_RUNS[request.param]
    if plan.compiled:
        pytest.importorskip("numba")
    if threads is not None:  # the same histogram, bit for bit, in any number of threads
        patch_engine(monkeypatch, "kernel_threads", lambda rows, jit: threads)
    return plan


@pytest.mark.parametrize("bound", [MAX_CONTRIBUTIONS, 3])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_bounded_lists_histogram_equals_the_frozen_kernel(shape: str, variant: str, bound: int, jit: Plan) -> None:
    """Through :class:`kernel.BoundedLists` (what make_weighted_histogram passes), by each plan; a bound below the
    histogram's Δ0 is a bound step with a smaller Δ0 chained into it."""
    frame = _variant(_shape(shape), variant)
    lf = _prepare_frame(frame, SPACE)
    lists = kernel.BoundedLists(lf, SPACE, bound, SEEDS)
    found = histogram(jit, lists, MAX_CONTRIBUTIONS).collect()
    assert found.schema == pl.Schema({"item": lf.collect_schema()["item"], kernel.WEIGHT_LAT: pl.Int64})
    frozen = _frozen_lists(lf, bound, SEEDS).with_columns(pl.col("item").list.len().alias("t"))
    weights = pl.Series(lattice_weights(MAX_CONTRIBUTIONS))
    rows = frozen.explode("item").with_columns(w=pl.col("t").map_batches(lambda t: weights.gather(t - 1)))
    assert dict(found.iter_rows()) == dict(rows.group_by("item").agg(pl.col("w").sum()).iter_rows())


def test_compiled_step_leaves_other_inputs_to_polars() -> None:
    """Struct (composite key) and float items, several passes and the streaming engine: :func:`plan_for` chooses
    a Polars plan, and a compiled plan is refused from the dtype, ``passes`` or the engine."""
    pytest.importorskip("numba")
    frame = _variant(_shape("mixed"), "shuffled")
    for items in (pl.struct("item", (pl.col("item") % 3).alias("part")), pl.col("item").cast(pl.Float64) / 2):
        lf = _prepare_frame(frame.with_columns(item=items), SPACE)
        lists = kernel.BoundedLists(lf, SPACE, MAX_CONTRIBUTIONS, SEEDS)
        assert not plan_for(lists).compiled
        with pytest.raises(ValueError, match="codes integer, String, Categorical and Enum columns"):
            histogram(Plan.COMPILED_CODED, lists, 8)
    lists = kernel.BoundedLists(_prepare_frame(frame, SPACE), SPACE, MAX_CONTRIBUTIONS, SEEDS)
    expected = dict(histogram(Plan.COMPILED_CODED, lists, MAX_CONTRIBUTIONS).collect().iter_rows())
    for passes, engine in ((3, "auto"), (1, "streaming"), (2, "in-memory")):
        assert not plan_for(lists, passes=passes, engine=engine).compiled  # type: ignore[arg-type]
        assert refusal(Plan.COMPILED_CODED, passes=passes, engine=engine, dtypes=None) is not None  # type: ignore[arg-type]
        found = histogram("auto", lists, MAX_CONTRIBUTIONS, passes=passes, engine=engine)  # type: ignore[arg-type]
        assert dict(found.collect().iter_rows()) == expected


def test_compiled_step_takes_the_route_on_runs_where_most_users_are_above() -> None:
    """Where most rows belong to users above Δ0 (imdb_50k) and each user's rows are one run, the compiled route on
    runs keys every row (it used to be left to the keyed Polars plan); users not in runs are left to that plan."""
    pytest.importorskip("numba")
    for shape, bound, contiguous, expected in (("above", MAX_CONTRIBUTIONS, True, Plan.COMPILED_RUNS_KEYED),
                                               ("below", 2 * MAX_CONTRIBUTIONS, True, Plan.COMPILED_CODED),
                                               ("above", MAX_CONTRIBUTIONS, False, Plan.POLARS_KEYED)):
        frame = _shape(shape) if contiguous else _variant(_shape(shape), "shuffled")
        lists = kernel.BoundedLists(_prepare_frame(frame, SPACE), SPACE, bound, SEEDS)
        assert plan_for(lists) is expected  # "below", fewer than 2^21 rows: the compiled step of users at most Δ0


def _runs_frame(items: str) -> pl.DataFrame:
    """Users above, at and below Δ0 (``MAX_CONTRIBUTIONS``), each user's rows one run (users not sorted), rows
    repeated within a run, ``items`` "int", "wide" (negative and multiples of 2^40: the same low bits), "string"
    or "categorical"."""
    rng = np.random.default_rng(17)
    distinct = np.r_[np.full(6, MAX_CONTRIBUTIONS + 1), np.full(6, MAX_CONTRIBUTIONS), rng.integers(1, 6 * MAX_CONTRIBUTIONS, 40)]
    parts = []
    for user, t in zip(rng.permutation(distinct.size) * 7, distinct, strict=True):
        held = rng.choice(3 * MAX_CONTRIBUTIONS * 6, t, replace=False)
        rows = np.r_[held, rng.choice(held, rng.integers(0, 2 * t))]  # repeats of the user's items
        parts.append(pl.DataFrame({"user": np.full(rows.size, user), "item": rng.permutation(rows)}))
    frame = pl.concat(parts)
    if items == "int":
        return frame
    if items == "wide":
        return frame.with_columns((pl.col("item") - 50) * 2**40)
    frame = frame.with_columns(pl.format("u{}", "user"), pl.format("w{}", "item"))
    return frame.with_columns(pl.col("item").cast(pl.Categorical)) if items == "categorical" else frame


@pytest.mark.parametrize("keyed", [True, False])
@pytest.mark.parametrize("bound", [MAX_CONTRIBUTIONS, 3])
@pytest.mark.parametrize("items", ["int", "wide", "string", "categorical"])
def test_route_on_runs_gives_the_frozen_histogram(items: str, bound: int, keyed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled route on users' runs (:func:`kernel.runs_histogram`: weights from one key per row, repeats of
    hashed keys checked), every row keyed by the bound's key or by its item (then the users above Δ0 keyed
    again, on their rows only), on users above, at and below Δ0 with repeated rows, in one thread and in three:
    the frozen kernel's histogram."""
    pytest.importorskip("numba")
    lf = _prepare_frame(_runs_frame(items), SPACE)
    assert kernel.mostly_above(lf, "user", bound)
    frozen = _frozen_lists(lf, bound, SEEDS).with_columns(pl.col("item").list.len().alias("t"))
    assert set(frozen["t"]) >= {bound, 1} and (frozen["t"] < bound).sum() > 1
    weights = pl.Series(lattice_weights(MAX_CONTRIBUTIONS))
    rows = frozen.explode("item").with_columns(w=pl.col("t").map_batches(lambda t: weights.gather(t - 1)))
    expected = dict(rows.group_by("item").agg(pl.col("w").sum()).iter_rows())
    lists = kernel.BoundedLists(lf, SPACE, bound, SEEDS)
    frame = lf.collect()
    start = kernel.run_starts(frame.get_column("user"))
    assert start is not None
    for threads in (1, 3):
        patch_engine(monkeypatch, "kernel_threads", lambda rows, jit, threads=threads: threads)
        histogram = kernel.runs_histogram(lists, frame, start, MAX_CONTRIBUTIONS, kernel.kernel_jit(), keyed=keyed)
        assert histogram is not None
        assert histogram.schema == pl.Schema({"item": lf.collect_schema()["item"], kernel.WEIGHT_LAT: pl.Int64})
        assert dict(histogram.iter_rows()) == expected


@pytest.mark.parametrize("keyed", [True, False])
def test_route_on_runs_leaves_items_sharing_a_key_to_the_polars_plan(keyed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two distinct items of a user with one key (a 64-bit collision, made common here by a coarse key: the bound's
    key, or the text items' hash): the route on runs, which reads keys only, finds it by checking each repeated
    key's rows and returns ``None``; its plan then finishes by the exact Polars plan, so the histogram is the
    Polars plan's under the same key."""
    pytest.importorskip("numba")
    lf = _prepare_frame(_runs_frame("string"), SPACE)
    lists = kernel.BoundedLists(lf, SPACE, MAX_CONTRIBUTIONS, SEEDS)
    plan = Plan.COMPILED_RUNS_KEYED if keyed else Plan.COMPILED_RUNS
    frame = lf.collect()
    start = kernel.run_starts(frame.get_column("user"))
    assert start is not None
    jit = kernel.kernel_jit()
    assert kernel.runs_histogram(lists, frame, start, MAX_CONTRIBUTIONS, jit, keyed=keyed) is not None
    if keyed:
        key = kernel.bound_key
        patch_engine(monkeypatch, "bound_key", lambda *args: key(*args) % 4096)
    else:
        item_keys = _compiled_histogram._item_keys
        patch_engine(monkeypatch, "_item_keys", lambda items: (item_keys(items)[0] % 64, True))
    assert kernel.runs_histogram(lists, frame, start, MAX_CONTRIBUTIONS, jit, keyed=keyed) is None
    found = dict(histogram(plan, lists, MAX_CONTRIBUTIONS).collect().iter_rows())
    assert found == dict(histogram(Plan.POLARS_SPLIT, lists, MAX_CONTRIBUTIONS).collect().iter_rows())


@pytest.mark.parametrize("spread", [2**64 - 1, 2**20, 60, 7])
def test_histogram_above_selection_keeps_the_sorts_items(spread: int) -> None:
    """The selection of the Δ0-th key (quickselect) keeps the items the full sort by key kept, ties at the cut
    included (keys drawn from ``spread`` values: none, some, most users with a tie), with repeated rows."""
    numba = pytest.importorskip("numba")
    jit = kernel.kernel_jit()
    argsort = numba.njit(lambda values: np.argsort(values))  # noqa: PLW0108 - the kernel's sort before: same ties
    rng = np.random.default_rng(spread % 1000)
    sizes = rng.integers(MAX_CONTRIBUTIONS + 1, 8 * MAX_CONTRIBUTIONS, 60)
    offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    n_items = 500
    items = rng.integers(0, n_items, offsets[-1]).astype(np.int32)  # repeats within a user: equal keys below
    users = np.repeat(np.arange(sizes.size), sizes)
    key_of = rng.integers(0, spread, (sizes.size, n_items), dtype=np.uint64, endpoint=True)
    keys = key_of[users, items]
    rows = rng.permutation(offsets[-1]).astype(np.int64)  # rows[j] is the row of key j: any order
    placed = np.empty_like(items)
    placed[rows] = items
    found, expected = np.zeros(n_items, dtype=np.int64), np.zeros(n_items, dtype=np.int64)
    jit.histogram_above(found, placed, rows, offsets, keys, MAX_CONTRIBUTIONS, 1000)
    for first, stop in itertools.pairwise(offsets):  # as before: distinct items in row order,
        held = placed[rows[first:stop]]  # sorted by key, the first Δ0 kept
        distinct = np.sort(np.unique(held, return_index=True)[1])
        kept = held[distinct][argsort(keys[first:stop][distinct])[:MAX_CONTRIBUTIONS]]
        np.add.at(expected, kept, 1000)
    assert np.array_equal(found, expected) and expected.sum() > 0


def test_without_numba_the_polars_plans_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``numba`` not importable: :func:`kernel.kernel_jit` is ``None`` and the histogram is the same, from Polars."""
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.delitem(sys.modules, "opendp_wgm.engines._kernel_jit", raising=False)
    _compiled_steps._import_compiled.cache_clear()
    try:
        assert kernel.kernel_jit() is None
        lf = _prepare_frame(_variant(_shape("mixed"), "string"), SPACE)
        lists = kernel.BoundedLists(lf, SPACE, MAX_CONTRIBUTIONS, SEEDS)
        assert not plan_for(lists).compiled
        for plan in Plan:
            if plan.compiled:
                with pytest.raises(ValueError, match="needs Numba"):
                    histogram(plan, lists, MAX_CONTRIBUTIONS)
        found = histogram("auto", lists, MAX_CONTRIBUTIONS).collect()
        expected = _frozen_histogram(_frozen_lists(lf, MAX_CONTRIBUTIONS, SEEDS), MAX_CONTRIBUTIONS)
        assert dict(found.iter_rows()) == expected
    finally:
        _compiled_steps._import_compiled.cache_clear()


def test_lazy_scan_and_streaming_give_the_frozen_histogram(tmp_path) -> None:  # type: ignore[no-untyped-def]
    frame = _variant(_shape("mixed"), "shuffled")
    for i, part in enumerate(frame.iter_slices(n_rows=2000)):
        part.write_parquet(tmp_path / f"part-{i}.parquet")
    lf = _prepare_frame(pl.scan_parquet(tmp_path / "part-*.parquet"), SPACE)

    def lists_of(users: pl.Expr | None) -> pl.LazyFrame:
        return kernel.bounded_lists_plan(lf if users is None else lf.filter(users), SPACE, MAX_CONTRIBUTIONS, SEEDS)

    expected = _frozen_histogram(_frozen_lists(lf, MAX_CONTRIBUTIONS, SEEDS), MAX_CONTRIBUTIONS)
    for passes in (1, 2):
        histogram = kernel.lattice_histogram(lists_of, SPACE, MAX_CONTRIBUTIONS, passes=passes, engine="streaming")
        assert dict(histogram.collect().iter_rows()) == expected


def test_only_checked_sorted_users_are_flagged() -> None:
    """The sorted flag (group_by slices runs) is set only on a user column that is sorted: a wrong flag would
    split a user into several groups, each bounded to Δ0."""
    sorted_users = pl.DataFrame({"user": [1, 1, 2, 5, 5], "item": [3, 1, 2, 2, 3]})
    assert _flag_sorted_users(sorted_users, "user").get_column("user").flags["SORTED_ASC"]
    assert _flag_sorted_users(sorted_users.with_columns(pl.format("u{}", "user")), "user")["user"].flags["SORTED_ASC"]
    for unsorted in (
        pl.DataFrame({"user": [1, 2, 1], "item": [1, 1, 2]}),
        pl.DataFrame({"user": [3, 2, 1], "item": [1, 1, 2]}),  # descending is not ascending
        pl.DataFrame({"user": [1, None, 2], "item": [1, 1, 2]}),
        pl.DataFrame({"user": ["b", "a"], "item": [1, 1]}, schema_overrides={"user": pl.Categorical}),
    ):
        assert not any(_flag_sorted_users(unsorted, "user").get_column("user").flags.values())
    lists = kernel.bounded_lists_plan(_prepare_frame(pl.DataFrame({"user": [2, 1, 2], "item": [1, 1, 2]}), SPACE), SPACE, 1, SEEDS)
    assert sorted(lists.collect()["user"].to_list()) == [1, 2]  # user 2's rows are one group, bounded once


def test_sorted_flag_reads_the_first_rows_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check of the first rows only shortens the answer: a column sorted there but not after is not flagged,
    one unsorted there is not either, a sorted one is."""
    monkeypatch.setattr(spaces, "_SORTED_PROBE", 2)
    for users in ([1, 2, 3, 0, 4], [2, 1, 3, 4, 5], [1, 1, 2, 3, 3]):
        for column in (pl.Series("user", users), pl.Series("user", [f"u{u}" for u in users])):
            flagged = _flag_sorted_users(column.to_frame(), "user").get_column("user").flags["SORTED_ASC"]
            assert flagged == (users == sorted(users))


def test_auto_plan_choice_follows_the_share_of_rows_above_max_contributions() -> None:
    # a speed choice only (every plan keeps the same items: above); it reads the first rows
    below = _prepare_frame(_shape("below"), SPACE)
    above = _prepare_frame(_shape("above"), SPACE)
    assert not kernel.mostly_above(below, "user", 2 * MAX_CONTRIBUTIONS)
    assert kernel.mostly_above(above, "user", MAX_CONTRIBUTIONS)


def test_large_frames_take_the_route_on_runs_or_the_hashed_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``_LARGE_ROWS`` rows on: users whose rows are runs (sorted or not), the route on runs; other text users,
    the hashed plan; other integer users (none above Δ0), or fewer rows, the compiled step; the same histogram on
    every route."""
    pytest.importorskip("numba")
    frame, bound = _shape("below").sort("user"), 2 * MAX_CONTRIBUTIONS  # no user above the bound
    monkeypatch.setattr(plans, "_LARGE_ROWS", frame.height)  # the threshold, at this frame's size
    histograms = []
    text = _variant(frame, "string")
    runs = frame.sample(fraction=1.0, shuffle=True, seed=8).sort("user", maintain_order=True).reverse()  # not sorted
    coded, on_runs = Plan.COMPILED_CODED, Plan.COMPILED_RUNS
    for rows, expected in ((frame, on_runs), (frame.head(-1), coded), (runs, on_runs), (_variant(frame, "shuffled"), coded),
                           (text, Plan.COMPILED_HASHED), (text.head(-1), coded), (text.sort("user"), on_runs)):
        lists = kernel.BoundedLists(_prepare_frame(rows, SPACE), SPACE, bound, SEEDS)
        assert plan_for(lists) is expected
        histograms.append(dict(histogram("auto", lists, bound).collect().iter_rows()))
    assert histograms[0] == histograms[2] == histograms[3]
    assert histograms[4] == histograms[6]


# --------------------------------------------------------------------------------------------------------------
# the distinct pairs coded once (DP-SIPS's rounds): the same histograms and counts as the plans on the same rows


def _bins_of(lf: pl.LazyFrame, released: pl.Series) -> list[int]:
    """The two-bin count by Polars on the rows ``lf`` (distinct items per user; boosted: holding a released one)."""
    per_user = (
        lf.group_by("user")
        .agg(n=pl.col("item").n_unique(), r=pl.col("item").filter(pl.col("item").is_in(released.implode())).n_unique())
        .filter(pl.col("n") > pl.col("r"))
        .collect()
    )
    return [int((per_user["r"] > 0).sum()), int((per_user["r"] == 0).sum())]


@pytest.mark.parametrize("bound", [MAX_CONTRIBUTIONS, 3])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_coded_pairs_give_the_frozen_histograms_round_after_round(shape: str, variant: str, bound: int) -> None:
    """:class:`kernel.CodedPairs` (coded once, items dropped by a mask) bound and histogram every round's rows as
    the frozen kernel does on those rows, for the same seeds; the flags and the two-bin count are Polars'."""
    pytest.importorskip("numba")
    frame = _variant(_shape(shape), variant)
    lf = _prepare_frame(frame, SPACE)
    coded = kernel.coded_pairs(lf, SPACE, passes=1, engine="auto")
    assert coded is not None
    rows = lf.collect()
    items = rows.get_column("item").unique().sort()
    weights = pl.Series(lattice_weights(MAX_CONTRIBUTIONS))
    for number, seeds in enumerate([SEEDS, (5, 6, 7, 8), (9, 10, 11, 12)]):
        histogram = coded.histogram(bound, seeds, MAX_CONTRIBUTIONS)
        assert histogram.schema == pl.Schema({"item": rows.schema["item"], kernel.WEIGHT_LAT: pl.Int64})
        frozen = _frozen_lists(rows.lazy(), bound, seeds).with_columns(pl.col("item").list.len().alias("t"))
        exploded = frozen.explode("item").with_columns(w=pl.col("t").map_batches(lambda t: weights.gather(t - 1)))
        assert dict(histogram.iter_rows()) == dict(exploded.group_by("item").agg(pl.col("w").sum()).iter_rows())
        if number == 0 and shape != "below":
            assert (frozen["t"] == bound).any()  # the keyed selection ran
        released = items.gather_every(4, offset=number)  # a quarter of the items, each round another
        flags = coded.flags(released)
        assert coded.user_bins(flags).tolist() == _bins_of(rows.lazy(), released)
        coded = coded.without(flags)
        rows = rows.filter(~pl.col("item").is_in(released.implode()))
        assert rows.height > 0


def test_coded_pairs_are_not_built_where_the_compiled_step_declines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several passes, streaming, a Struct or float item, and no Numba: ``None`` (the Polars rounds run)."""
    frame = _variant(_shape("mixed"), "shuffled")
    lf = _prepare_frame(frame, SPACE)
    for passes, engine in ((3, "auto"), (1, "streaming")):
        assert kernel.coded_pairs(lf, SPACE, passes=passes, engine=engine) is None  # type: ignore[arg-type]
    for items in (pl.struct("item", (pl.col("item") % 3).alias("part")), pl.col("item").cast(pl.Float64) / 2):
        assert kernel.coded_pairs(_prepare_frame(frame.with_columns(item=items), SPACE), SPACE, passes=1, engine="auto") is None
    with kernel.without_numba():
        assert kernel.coded_pairs(lf, SPACE, passes=1, engine="in-memory") is None


@pytest.mark.parametrize("order", ["runs", "shuffled"])
@pytest.mark.parametrize("shape", SHAPES)
def test_text_codes_are_the_category_codes(shape: str, order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`_compiled_steps._text_codes` (users by their runs, else by a hash) gives text dense codes in order of first
    appearance (what a fresh category map numbers) and decodes them back; where two values share a hash its check
    fails (``None``), and :func:`kernel.coded_pairs` then casts: the same histograms either way. (The reference
    is computed here, not read off a category cast: Polars was seen to give two category maps created at once one
    numbering, which moves the cast's codes but not its values.)"""
    jit = pytest.importorskip("opendp_wgm.engines._kernel_jit")
    frame = _shape(shape).with_columns(pl.format("u{}", "user"), pl.format("item-{}", "item"))
    frame = frame.sort("user") if order == "runs" else frame.sample(fraction=1.0, shuffle=True, seed=8)
    everything = np.arange(frame.height, dtype=np.int64)
    for column, runs in (("user", True), ("user", False), ("item", False)):
        values = frame.get_column(column)
        coded = _compiled_steps._text_codes(values, jit, runs=runs)
        assert coded is not None
        codes, size, decode = coded
        _, first, inverse = np.unique(values.to_numpy(), return_index=True, return_inverse=True)
        rank = np.empty(first.size, dtype=np.int64)
        rank[np.argsort(first)] = np.arange(first.size)
        assert (np.asarray(codes) == rank[inverse]).all() and size == values.n_unique()
        assert decode(everything[:size]).equals(values.gather(np.sort(first)))
        assert decode(np.asarray(codes, dtype=np.int64)).equals(values)
        assert _compiled_steps._text_codes(values, MergingJit(), runs=False) is None  # the check finds the merged values
    lf = _prepare_frame(frame, SPACE)
    hashed = kernel.coded_pairs(lf, SPACE, passes=1, engine="auto")
    text_codes = _compiled_steps._text_codes
    patch_engine(monkeypatch, "_text_codes", lambda column, _, **options: text_codes(column, MergingJit()))
    cast = kernel.coded_pairs(lf, SPACE, passes=1, engine="auto")
    assert hashed is not None and cast is not None
    for bound, seeds in ((MAX_CONTRIBUTIONS, SEEDS), (3, (5, 6, 7, 8))):
        by_hash, by_cast = (pairs.histogram(bound, seeds, MAX_CONTRIBUTIONS).sort(SPACE.item) for pairs in (hashed, cast))
        assert by_hash.equals(by_cast)


@pytest.mark.parametrize("shape", SHAPES)
def test_coded_pairs_give_the_same_histograms_in_any_number_of_threads(shape: str) -> None:
    """:meth:`kernel.CodedPairs.histogram`'s keyed pass in 1 or 3 threads (ranges of users, each with its own
    pairs, keys and histogram): the same histogram, bit for bit, rows in the same order, for every bound and
    seeds."""
    pytest.importorskip("numba")
    coded = kernel.coded_pairs(_prepare_frame(_variant(_shape(shape), "string"), SPACE), SPACE, passes=1, engine="auto")
    assert coded is not None
    for bound, seeds in ((MAX_CONTRIBUTIONS, SEEDS), (3, (5, 6, 7, 8)), (1, (9, 10, 11, 12))):
        one = replace(coded, threads=1).histogram(bound, seeds, MAX_CONTRIBUTIONS)
        assert one.equals(replace(coded, threads=3).histogram(bound, seeds, MAX_CONTRIBUTIONS))


@pytest.mark.parametrize("variant", ["sorted", "sparse", "wide", "string", "categorical", "narrow"])
def test_compiled_codes_are_exact_in_any_number_of_threads(variant: str) -> None:
    """Equal values, equal codes; distinct values, distinct codes below the size; decoding gives the values back;
    offsets of which at most half are taken are renumbered compactly; and the same codes in 1 or 3 threads."""
    jit = pytest.importorskip("opendp_wgm.engines._kernel_jit")
    frame = _variant(_shape("mixed"), variant)
    for column in ("user", "item"):
        dtype = frame.schema[column]
        values = frame.select(_compiled_steps._code_expr(column, dtype)).to_series()
        codes, size, decode = _compiled_steps._codes(values, dtype, jit)
        assert codes.min() >= 0 and codes.max() < size
        assert np.unique(codes).size == frame.get_column(column).n_unique()
        assert decode(codes.astype(np.int64)).equals(frame.get_column(column))
        if variant == "sparse":  # 3x - 7 and 5x - 3: no more codes than values, or the offsets
            assert size == frame.get_column(column).n_unique()
            offsets, span, _ = _compiled_steps._codes(values, dtype, jit, compact=False)
            assert np.array_equal(offsets, values.to_numpy() - values.min()) and span == values.max() - values.min() + 1
        threaded, threaded_size, _ = _compiled_steps._codes(values, dtype, jit, 3)
        assert np.array_equal(threaded, codes) and threaded_size == size


@pytest.mark.parametrize("shape", SHAPES)
def test_compiled_passes_in_threads_give_the_same_histogram_and_rows(shape: str) -> None:
    """The counting sort in chunks of rows and the histogram over ranges of users: the same histogram and the
    same rows above Δ0, in the same order, as in one thread (so the keyed selection sees the same input)."""
    jit = pytest.importorskip("opendp_wgm.engines._kernel_jit")
    frame = _variant(_shape(shape), "sparse")
    users = _compiled_steps._coding(frame.get_column("user"), pl.Int64, jit, compact=False)
    items = _compiled_steps._coding(frame.get_column("item"), pl.Int64, jit)
    weights = lattice_weights(MAX_CONTRIBUTIONS)
    one = _compiled_histogram._histogram_below(jit, users, items, MAX_CONTRIBUTIONS, weights)
    for threads in (2, 3, 7):
        several = _compiled_histogram._histogram_below(jit, users, items, MAX_CONTRIBUTIONS, weights, threads)
        assert all(np.array_equal(a, b) for a, b in zip(one, several, strict=True))
    assert (one[1].size > 0) == (shape != "below")


def test_kernel_threads_follow_the_rows_and_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """One thread below ``_THREAD_ROWS`` rows; else Polars' pool size, at most ``NUMBA_NUM_THREADS``."""
    jit = pytest.importorskip("opendp_wgm.engines._kernel_jit")
    assert kernel.kernel_threads(_compiled_steps._THREAD_ROWS - 1, jit) == 1
    monkeypatch.setattr(pl, "thread_pool_size", lambda: 6)
    monkeypatch.setattr(jit, "max_threads", lambda: 4)
    assert kernel.kernel_threads(_compiled_steps._THREAD_ROWS, jit) == 4
    monkeypatch.setattr(jit, "max_threads", lambda: 16)
    assert kernel.kernel_threads(_compiled_steps._THREAD_ROWS, jit) == 6
