"""Every plan of :mod:`opendp_wgm.kernel` against the plain statement of the histogram
(:mod:`opendp_wgm.kernel.reference`), bit for bit for a fixed seed, on generated frames: users contiguous,
shuffled or split in two runs; Int64, UInt64 and String users; Int64, UInt64, String (long, sharing length and
prefix, unicode), Categorical, Enum and Struct items; nulls, duplicates; multi-chunk and sliced frames, LazyFrame
and DataFrame, Parquet with several passes; each engine. A plan is skipped only where :func:`refusal` refuses it
(public information), and then :func:`histogram` must raise."""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opendp_wgm._spaces import _prepare_frame, _Space
from opendp_wgm.engines.polars import WEIGHT_LAT, BoundedLists
from opendp_wgm.kernel import Plan, histogram, plan_for, refusal
from opendp_wgm.kernel.reference import kept_subsets, reference_histogram

SPACE = _Space("user", "item", None, False)
SEEDS = (0x5EED, 7, 2**63 + 5, 12345)

#: every plan, listed here by hand: a new plan must be added to this test
PLANS = (
    Plan.POLARS_SPLIT,
    Plan.POLARS_KEYED,
    Plan.POLARS_PASSES,
    Plan.COMPILED_CODED,
    Plan.COMPILED_RUNS,
    Plan.COMPILED_RUNS_KEYED,
    Plan.CODED_PAIRS,
)

_PREFIX = "ü-" + "x" * 40  # long strings of one length sharing a prefix (and a view's inline bytes)
_USERS = {
    "int64": (pl.Int64, lambda u: u - 3),
    "uint64": (pl.UInt64, lambda u: 2**64 - 1 - u),
    "string": (pl.String, lambda u: f"{_PREFIX}{u:03d}"),
}
_ITEMS = ("int64", "uint64", "string", "categorical", "enum", "struct")
_ITEM_POOL = 9


def _item_values(kind: str, codes: list[int | None]) -> pl.Series:
    if kind == "int64":
        return pl.Series("item", [None if c is None else c * 1_000_003 - 4 for c in codes], dtype=pl.Int64)
    if kind == "uint64":
        return pl.Series("item", [None if c is None else 2**64 - 1 - c for c in codes], dtype=pl.UInt64)
    text = pl.Series("item", [None if c is None else f"{_PREFIX}{'é' if c % 2 else 'e'}{c:02d}" for c in codes])
    if kind == "string":
        return text
    if kind == "categorical":
        return text.cast(pl.Categorical)
    if kind == "enum":
        return text.cast(pl.Enum(sorted({f"{_PREFIX}{'é' if c % 2 else 'e'}{c:02d}" for c in range(_ITEM_POOL)})))
    parts = [None if c is None else {"a": c % 3, "b": f"s{c // 3}"} for c in codes]
    return pl.Series("item", parts, dtype=pl.Struct({"a": pl.Int64, "b": pl.String}))


@st.composite
def frames(draw: st.DrawFn) -> dict[str, Any]:
    """A (user, item) frame and how it is given, with Δ0 and passes."""
    users = draw(st.lists(st.lists(st.integers(0, _ITEM_POOL - 1), max_size=8), min_size=1, max_size=6))
    rows = [(u, i) for u, items in enumerate(users) for i in items]
    order = draw(st.sampled_from(["contiguous", "shuffled", "split"]))
    if order == "shuffled":
        rows = draw(st.permutations(rows))
    elif order == "split":  # each user's second half after everyone's first half: two runs per user
        firsts = [r for u, items in enumerate(users) for r in [(u, i) for i in items][: len(items) // 2]]
        rows = firsts + [r for r in rows if r not in firsts or rows.count(r) > 1]
    nulls = draw(st.booleans())
    user_codes: list[int | None] = [u for u, _ in rows]
    item_codes: list[int | None] = [i for _, i in rows]
    if nulls:
        user_codes, item_codes = [*user_codes, None, 0], [*item_codes, 1, None]
    user_kind, item_kind = draw(st.sampled_from(sorted(_USERS))), draw(st.sampled_from(_ITEMS))
    dtype, user_of = _USERS[user_kind]
    frame = pl.DataFrame([
        pl.Series("user", [None if u is None else user_of(u) for u in user_codes], dtype=dtype),
        _item_values(item_kind, item_codes),
    ])
    form = draw(st.sampled_from(["data", "lazy", "chunks", "sliced", "parquet"]))
    bound = draw(st.integers(1, 4))
    return {
        "frame": frame,
        "form": form,
        "bound": bound,
        "max_contributions": bound + draw(st.sampled_from([0, 0, 2])),  # a bound below Δ0: a chained bound step
        "passes": draw(st.sampled_from([1, 3])) if form == "parquet" else 1,
        "engine": draw(st.sampled_from(["auto", "auto", "in-memory", "streaming"])),
    }


def _given(frame: pl.DataFrame, form: str, folder: Path) -> pl.DataFrame | pl.LazyFrame:
    if form == "lazy":
        return frame.lazy()
    if form == "chunks":
        half = frame.height // 2
        return pl.concat([frame.slice(0, half), frame.slice(half)], rechunk=False)
    if form == "sliced":
        padded = pl.concat([frame.head(1), frame, frame.tail(1)])
        return padded.slice(1, frame.height)
    path = folder / "rows.parquet"
    frame.write_parquet(path, row_group_size=4)
    return pl.scan_parquet(path)


def _as_dict(histogram: pl.DataFrame) -> dict[Any, int]:
    def key(value: Any) -> Any:
        return tuple(sorted(value.items())) if isinstance(value, dict) else value

    return {key(item): weight for item, weight in histogram.select("item", WEIGHT_LAT).iter_rows()}


def test_the_test_lists_every_plan() -> None:
    assert set(PLANS) == set(Plan) and len(PLANS) == len(Plan)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=frames())
def test_every_plan_computes_the_reference_histogram(case: dict[str, Any]) -> None:
    bound, max_contributions, passes, engine = case["bound"], case["max_contributions"], case["passes"], case["engine"]
    with TemporaryDirectory() as folder:
        lf = _prepare_frame(_given(case["frame"], case["form"], Path(folder)), SPACE)
        lists = BoundedLists(lf, SPACE, bound, SEEDS)
        schema = lf.collect_schema()
        dtypes = (schema["user"], schema["item"])
        expected = _as_dict(reference_histogram(lf, SPACE, bound, SEEDS, max_contributions))
        # the per-user invariant, on the reference and on the Polars lists: min(t, Δ0) of the user's own items
        rows, kept = kept_subsets(lf, SPACE, bound, SEEDS)
        users, items = rows.get_column("user").to_list(), rows.get_column("item").to_list()
        for first, indices in kept.items():
            own = [r for r, user in enumerate(users) if user == users[first]]
            assert set(indices) <= set(own) and len(indices) == min(len(own), bound)
        for user, held in lists(None).collect().iter_rows():
            own_items = [items[r] for r, u in enumerate(users) if u == user]
            assert len(held) == min(len(own_items), bound) and all(item in own_items for item in held)
        chosen = plan_for(lists, passes=passes, engine=engine)
        assert refusal(chosen, passes=passes, engine=engine, dtypes=dtypes) is None  # auto never picks a refused plan
        for plan in PLANS:
            if refusal(plan, passes=passes, engine=engine, dtypes=dtypes) is not None:
                with pytest.raises(ValueError, match="`plan` must be a plan that runs on this input"):
                    histogram(plan, lists, max_contributions, passes=passes, engine=engine)
                continue
            found = histogram(plan, lists, max_contributions, passes=passes, engine=engine).collect()
            assert found.schema == pl.Schema({"item": dtypes[1], WEIGHT_LAT: pl.Int64}), plan
            assert _as_dict(found) == expected, plan
