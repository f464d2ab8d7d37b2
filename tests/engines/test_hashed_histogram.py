"""The ``compiled-hashed`` plan (:func:`kernel.hashed_histogram`) on interleaved users: the reference histogram in
each of its ways (every row keyed, or the users above Δ0 keyed afterwards; text coded by hashes, or by a category
map where two values share a hash; one thread or three), the choice of it from 2^21 rows on, and stage 2 on the
distinct items it leaves in the release's :class:`kernel.Prepared`."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import polars as pl
import pytest

from opendp_wgm._spaces import _prepare_frame, _Space
from opendp_wgm.engines import polars as kernel
from opendp_wgm.engines.polars import _compiled_steps, _hashed_histogram
from opendp_wgm.engines.polars._prepared import _UserCodes
from opendp_wgm.kernel import Plan, histogram, plan_for, plans
from opendp_wgm.kernel.reference import reference_histogram
from tests.engine_modules import MergingJit, patch_engine

SPACE = _Space("user", "item", None, False)
SEEDS = (11, 22, 33, 44)
BOUND = 8


def _logs(users: str) -> pl.DataFrame:
    """Users above, at and below Δ0 (:data:`BOUND`) with repeated rows, interleaved (shuffled); users "string"
    (short ids: coded by their Arrow views), "long" (ids of 40 bytes and more sharing a prefix: hashed) or "int"
    (Int64, spread wide); String items, words of up to 12 bytes and one in 20 longer (sharing length and prefix)."""
    rng = np.random.default_rng(23)
    distinct = np.r_[np.full(6, BOUND + 1), np.full(6, BOUND), rng.integers(1, 6 * BOUND, 40)]
    parts = []
    for user, t in enumerate(distinct):
        held = rng.choice(3 * BOUND * 6, t, replace=False)
        rows = np.r_[held, rng.choice(held, rng.integers(0, 2 * t))]
        parts.append(pl.DataFrame({"user": np.full(rows.size, user), "item": rows}))
    frame = pl.concat(parts).sample(fraction=1.0, shuffle=True, seed=4)
    assert frame.columns == ["user", "item"]
    user = {"string": pl.format("u{}", "user"), "long": pl.format("ü-user-{}-{}", pl.lit("x" * 36), "user"),
            "int": pl.col("user") * 10**12 - 2**61}[users]
    word = pl.when(pl.col("item") % 20 == 0).then(pl.format("a-longer-word-{}", pl.col("item") % 1000 + 1000))
    frame = frame.with_columns(user.alias("user"), word.otherwise(pl.format("w{}", "item")).alias("item"))
    assert frame.columns == ["user", "item"] and frame.schema["user"] == (pl.Int64 if users == "int" else pl.String)
    return frame


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("collide", ["none", "user", "item"])
@pytest.mark.parametrize("keyed", [True, False])
@pytest.mark.parametrize("bound", [BOUND, 3])
@pytest.mark.parametrize("users", ["string", "long", "int"])
def test_hashed_plan_gives_the_reference_histogram(
    users: str, bound: int, keyed: bool, collide: str, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row keyed (most rows above Δ0) or the users above Δ0 keyed on their rows afterwards; text coded by
    its views (short strings) and its checked hash (the others), or, where two values of a column share one (every
    value made to collide here: the check fails), by a category map; in one thread and in three: the reference
    histogram, bit for bit."""
    pytest.importorskip("numba")
    lf = _prepare_frame(_logs(users), SPACE)
    expected = reference_histogram(lf, SPACE, bound, SEEDS, BOUND).sort("item")
    monkeypatch.setattr(_hashed_histogram.UserCounts, "mostly_above", lambda self, _: keyed)
    patch_engine(monkeypatch, "kernel_threads", lambda rows, jit: threads)
    text_codes, hashed_text = _compiled_steps._text_codes, _compiled_steps._hashed_text

    def codes(column: pl.Series, jit: Any, **options: Any) -> Any:
        return text_codes(column, MergingJit() if column.name == collide else jit, **options)

    def unchecked(column: pl.Series, jit: Any) -> Any:  # the users' hash, checked later in threads
        return hashed_text(column, MergingJit() if column.name == collide else jit)

    monkeypatch.setattr(_hashed_histogram, "_text_codes", codes)
    monkeypatch.setattr(_hashed_histogram, "_hashed_text", unchecked)
    lists = kernel.BoundedLists(lf, SPACE, bound, SEEDS)
    found = histogram(Plan.COMPILED_HASHED, lists, BOUND).collect()
    assert found.schema == pl.Schema({"item": pl.String, kernel.WEIGHT_LAT: pl.Int64})
    assert found.sort("item").equals(expected)


def test_stage_two_reads_each_users_distinct_items() -> None:
    """With the release's :class:`kernel.Prepared`, the plan leaves each user's distinct items in it, and the
    candidate counts read them: each user's items distinct, and the distinct-user counts of the rows."""
    pytest.importorskip("numba")
    frame = _prepare_frame(_logs("string"), SPACE).collect()
    prepared = kernel.Prepared(frame.lazy(), in_memory=True)
    lists = kernel.BoundedLists(prepared.lf, SPACE, BOUND, SEEDS, shared=prepared)
    histogram(Plan.COMPILED_HASHED, lists, BOUND).collect()
    codes = prepared.coding
    assert isinstance(codes, _UserCodes)
    per_user = [codes.held[a : a + t] for a, t in zip(codes.start[:-1], codes.distinct, strict=True)]
    assert sorted(t.size for t in per_user) == sorted(frame.group_by("user").agg(pl.col("item").n_unique())["item"])
    assert all(np.unique(items).size == items.size for items in per_user)
    candidates = pl.Series("item", ["w1", "w0", "nowhere", "w17"])
    counts = frame.unique().group_by("item").len()
    expected = [dict(counts.iter_rows()).get(item, 0) for item in candidates]
    assert list(kernel.candidate_counts(prepared, SPACE, candidates)) == expected
    offsets, positions = kernel.candidate_csr(prepared, SPACE, candidates)  # the hitting set's pairs
    pairs = {(user, position) for user in range(offsets.size - 1) for position in positions[offsets[user] : offsets[user + 1]]}
    assert len(pairs) == positions.size and list(np.bincount(positions, minlength=4)) == expected


@pytest.mark.parametrize("threads", [1, 3])
def test_interleaved_users_take_the_hashed_plan_from_2_21_rows(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``_LARGE_ROWS`` rows on, users not in runs: String users, or integer users most of whose rows belong
    to users above Δ0, take ``compiled-hashed``; integer users mostly at most Δ0 ``compiled-coded`` (which reuses
    the user counts ``plan_for`` took, in one chunk or three); fewer rows, the rules before (``docs/engines.md``);
    each run gives the reference histogram."""
    pytest.importorskip("numba")
    patch_engine(monkeypatch, "kernel_threads", lambda rows, jit: threads)
    text, ints = _logs("string"), _logs("int")
    monkeypatch.setattr(plans, "_LARGE_ROWS", text.height)
    for frame, bound, expected in ((text, BOUND, Plan.COMPILED_HASHED), (text, 1000, Plan.COMPILED_HASHED),
                                   (ints, 3, Plan.COMPILED_HASHED), (ints, 1000, Plan.COMPILED_CODED),
                                   (text.head(-1), 1000, Plan.COMPILED_CODED), (text.sort("user"), 1000, Plan.COMPILED_RUNS)):
        lists = kernel.BoundedLists(_prepare_frame(frame, SPACE), SPACE, bound, SEEDS)
        assert plan_for(lists) is expected, (frame.height, bound)
        expected_histogram = reference_histogram(lists.lf, SPACE, bound, SEEDS, bound).sort("item")
        assert histogram("auto", lists, bound).collect().sort("item").equals(expected_histogram)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("failing", ["user_counts", "_hash_holds"])
def test_a_failing_step_raises_and_no_thread_waits_forever(
    failing: str, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The threads share the checks and keys through one queue, and wait for the users to be counted: a step that
    raises (in the counting thread, or in a shared piece) reaches the caller, and no thread is left waiting."""
    pytest.importorskip("numba")
    patch_engine(monkeypatch, "kernel_threads", lambda rows, jit: threads)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a step failed")

    monkeypatch.setattr(_hashed_histogram, failing, broken)
    lists = kernel.BoundedLists(_prepare_frame(_logs("string"), SPACE), SPACE, BOUND, SEEDS)
    raised: list[BaseException] = []

    def release() -> None:
        try:
            histogram(Plan.COMPILED_HASHED, lists, BOUND).collect()
        except RuntimeError as error:
            raised.append(error)

    caller = threading.Thread(target=release, daemon=True)  # a wait that never ends fails here, not in CI's timeout
    caller.start()
    caller.join(timeout=60)
    assert not caller.is_alive(), "a thread of the plan waits forever"
    assert [str(error) for error in raised] == ["a step failed"]
