"""THE differential test of the kernel: every plan of :mod:`opendp_wgm.kernel`, and every other computation of the
histogram or of its parts (DP-SIPS's later rounds on the coded pairs, Policy Gaussian's bound, stage 2's
candidate-count tiers), against the plain statement of the histogram (:mod:`opendp_wgm.kernel.reference`), bit for
bit for a fixed seed, on generated frames: users contiguous, shuffled or split in two runs; Int64, UInt64 and
String users; Int64, UInt64, String (long, sharing length and prefix, unicode; or short words), Categorical, Enum
and Struct items;
nulls, duplicates; multi-chunk and sliced frames, LazyFrame and DataFrame, Parquet with several passes; each
engine; Numba ready or absent (an explicit input of :func:`plan_for`). A plan is skipped only where
:func:`refusal` refuses it (public information), and then :func:`histogram` must raise.

Bit for bit holds whatever the users' sizes (every plan keeps, for one seed, the subsets the reference keeps);
above Δ0 the per-user invariants are checked too: each user keeps exactly min(t, Δ0) of its own items, and the
kept subset is uniform (a χ² test over many users of one seed, with a fixed critical value). The test has teeth:
:func:`test_the_test_fails_when_any_plan_is_off_by_one` perturbs each plan's output by one unit, through the
explicit ``perturb`` input of :func:`check_every_plan`, and the check must fail. Spark is tested by the
invariants in ``tests/engines/test_spark.py`` (the same distribution, not the same function of the seed)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from itertools import combinations
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opendp_wgm._spaces import _prepare_frame, _Space
from opendp_wgm.engines.polars import (
    WEIGHT_LAT,
    BoundedLists,
    Prepared,
    bounded_lists_plan,
    candidate_counts,
    candidate_csr,
    coded_pairs,
    without_numba,
)
from opendp_wgm.kernel import Numba, Plan, histogram, plan_for, refusal
from opendp_wgm.kernel.reference import kept_subsets, reference_histogram
from opendp_wgm.measurements.baselines._policy_csr import _bounded_csr
from opendp_wgm.privacy.threshold import lattice_weights

SPACE = _Space("user", "item", None, False)
SEEDS = (0x5EED, 7, 2**63 + 5, 12345)

#: every plan, listed here by hand: a new plan must be added to this test (and to the table of docs/engines.md)
PLANS = (
    Plan.POLARS_SPLIT,
    Plan.POLARS_KEYED,
    Plan.POLARS_PASSES,
    Plan.COMPILED_CODED,
    Plan.COMPILED_RUNS,
    Plan.COMPILED_RUNS_KEYED,
    Plan.CODED_PAIRS,
    Plan.COMPILED_HASHED,
)

#: the other computations of the histogram or of its parts, beside the plans, each checked on every frame
ROUTES = (
    "dp-sips round 2 (coded pairs without the released items)",
    "policy-gaussian bound",
    "stage-2 counts: polars plan",
    "stage-2 counts: in memory",
    "stage-2 counts: in memory, no numba",
    "stage-2 counts: compiled codes",
    "stage-2 counts: users' runs",
    "stage-2 counts: hashed user codes",
    "stage-2 pairs: hashed user codes",
)

_PREFIX = "ü-" + "x" * 40  # long strings of one length sharing a prefix (and a view's inline bytes)
_USERS = {
    "int64": (pl.Int64, lambda u: u - 3),
    "uint64": (pl.UInt64, lambda u: 2**64 - 1 - u),
    "string": (pl.String, lambda u: f"{_PREFIX}{u:03d}"),
}
_ITEMS = ("int64", "uint64", "string", "words", "categorical", "enum", "struct")
_ITEM_POOL = 9


def _item_values(kind: str, codes: list[int | None]) -> pl.Series:
    if kind == "int64":
        return pl.Series("item", [None if c is None else c * 1_000_003 - 4 for c in codes], dtype=pl.Int64)
    if kind == "uint64":
        return pl.Series("item", [None if c is None else 2**64 - 1 - c for c in codes], dtype=pl.UInt64)
    if kind == "words":  # short strings (up to 12 bytes: their Arrow views hold them whole)
        return pl.Series("item", [None if c is None else f"{'é' if c % 2 else 'e'}{c}" for c in codes])
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


def _as_dict(frame: pl.DataFrame, value: str = WEIGHT_LAT) -> dict[Any, int]:
    def key(item: Any) -> Any:
        return tuple(sorted(item.items())) if isinstance(item, dict) else item

    return {key(item): weight for item, weight in frame.select("item", value).iter_rows()}


#: ``perturb(name, output)``: what the check compares (the identity in every test but the teeth test)
Perturb = Callable[[str, pl.DataFrame], pl.DataFrame]


def _same(name: str, found: pl.DataFrame, expected: dict[Any, int], perturb: Perturb | None, value: str) -> None:
    found = found if perturb is None else perturb(name, found)
    assert _as_dict(found, value) == expected, name


def _policy_histogram(lf: pl.LazyFrame, bound: int, seeds: tuple[int, ...]) -> pl.DataFrame:
    """Policy Gaussian's bounded CSR (its own bound) as a lattice histogram: each user's kept items weighted by
    the lattice weight of its count (users are in a random order there: the histogram names none)."""
    data = _bounded_csr(lf, SPACE, bound, key_order=False, seeds=seeds)
    lengths = np.diff(data.offsets)
    weights = lattice_weights(bound).astype(np.int64)[np.maximum(lengths, 1) - 1]
    per_row = np.repeat(weights, lengths)
    rows = pl.DataFrame([data.decode(data.codes).alias("item"), pl.Series(WEIGHT_LAT, per_row, dtype=pl.Int64)])
    return rows.group_by("item").agg(pl.col(WEIGHT_LAT).sum())


def _counts_frame(candidates: pl.Series, counts: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame([candidates.alias("item"), pl.Series("count", counts, dtype=pl.Int64)])


def check_every_plan(case: dict[str, Any], folder: Path, perturb: Perturb | None = None) -> None:
    """Every plan and route on ``case``'s frame against the reference (``perturb``: applied to each output before
    it is compared, for the teeth test)."""
    bound, max_contributions, passes, engine = case["bound"], case["max_contributions"], case["passes"], case["engine"]
    numba = case.get("numba")
    lf = _prepare_frame(_given(case["frame"], case["form"], folder), SPACE)
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
    chosen = plan_for(lists, passes=passes, engine=engine, numba=numba)
    assert refusal(chosen, passes=passes, engine=engine, dtypes=dtypes, numba=numba) is None  # auto: never refused
    if numba is not None and numba is not Numba.READY:
        assert not chosen.compiled
    for plan in PLANS:
        if refusal(plan, passes=passes, engine=engine, dtypes=dtypes, numba=numba) is not None:
            with pytest.raises(ValueError, match="`plan` must be a plan that runs on this input"):
                histogram(plan, lists, max_contributions, passes=passes, engine=engine, numba=numba)
            continue
        found = histogram(plan, lists, max_contributions, passes=passes, engine=engine, numba=numba).collect()
        assert found.schema == pl.Schema({"item": dtypes[1], WEIGHT_LAT: pl.Int64}), plan
        _same(plan.value, found, expected, perturb, WEIGHT_LAT)
    _check_routes(case, lf, dtypes, perturb)


def _check_routes(
    case: dict[str, Any], lf: pl.LazyFrame, dtypes: tuple[pl.DataType, pl.DataType], perturb: Perturb | None
) -> None:
    """:data:`ROUTES` on the prepared frame ``lf``."""
    bound, max_contributions, engine = case["bound"], case["max_contributions"], case["engine"]
    compiled = refusal(Plan.CODED_PAIRS, passes=1, engine=engine, dtypes=dtypes) is None
    frame = lf.collect()
    present = frame.get_column("item").unique(maintain_order=True)
    # DP-SIPS's round 2: the coded pairs without the items round 1 released (here: every other present item)
    released = present.gather_every(2)
    if compiled:
        pairs = coded_pairs(lf, SPACE, passes=1, engine=engine)
        assert pairs is not None
        later = pairs.without(pairs.flags(released)).histogram(bound, SEEDS, max_contributions)
        rest = lf.filter(~pl.col("item").is_in(released.implode()))
        _same(ROUTES[0], later, _as_dict(reference_histogram(rest, SPACE, bound, SEEDS, max_contributions)),
              perturb, WEIGHT_LAT)
    # Policy Gaussian's own bound (weights of its Δ0 = bound)
    policy = _as_dict(reference_histogram(lf, SPACE, bound, SEEDS, bound))
    _same(ROUTES[1], _policy_histogram(lf, bound, SEEDS), policy, perturb, WEIGHT_LAT)
    # stage 2's candidate counts: the present items and the data's distinct users holding each
    candidates = present
    pairs_frame = frame.unique()
    counts = _as_dict(pairs_frame.group_by("item").agg(pl.len().cast(pl.Int64).alias("count")), "count")

    def counted(name: str, data: pl.LazyFrame | Prepared) -> None:
        _same(name, _counts_frame(candidates, candidate_counts(data, SPACE, candidates)), counts, perturb, "count")

    counted(ROUTES[2], lf)
    counted(ROUTES[3], Prepared(frame.lazy(), in_memory=True))
    with without_numba():
        counted(ROUTES[4], Prepared(frame.lazy(), in_memory=True))
    for name, plan in ((ROUTES[5], Plan.COMPILED_CODED), (ROUTES[6], Plan.COMPILED_RUNS),
                       (ROUTES[7], Plan.COMPILED_HASHED)):
        if refusal(plan, passes=1, engine="auto", dtypes=dtypes) is None:  # stage 1's step fills the value
            prepared = Prepared(frame.lazy(), in_memory=True)
            shared = BoundedLists(prepared.lf, SPACE, bound, SEEDS, shared=prepared)
            histogram(plan, shared, max_contributions).collect()
            counted(name, prepared)
            if plan is Plan.COMPILED_HASHED:  # the hitting set's CSR pairs on the same value: counted per candidate
                offsets, positions = candidate_csr(prepared, SPACE, candidates)
                assert offsets[0] == 0 and offsets[-1] == positions.size and (np.diff(offsets) > 0).all()
                by_pairs = np.bincount(positions, minlength=candidates.len()).astype(np.int64)
                _same(ROUTES[8], _counts_frame(candidates, by_pairs), counts, perturb, "count")


def test_the_test_lists_every_plan() -> None:
    assert set(PLANS) == set(Plan) and len(PLANS) == len(Plan)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=frames(), numba=st.sampled_from([None, None, Numba.ABSENT, Numba.DEFERRED]))
def test_every_plan_computes_the_reference_histogram(case: dict[str, Any], numba: Numba | None) -> None:
    with TemporaryDirectory() as folder:
        check_every_plan({**case, "numba": numba}, Path(folder))


#: one frame on which every plan and route runs (with Numba): users above and below Δ0, text items
TEETH_CASE = {
    "frame": pl.DataFrame({
        "user": [u for u in range(6) for _ in range(u + 1)],
        "item": [f"{_PREFIX}{(u * 7 + i) % 9}" for u in range(6) for i in range(u + 1)],
    }),
    "form": "data",
    "bound": 3,
    "max_contributions": 3,
    "passes": 1,
    "engine": "auto",
}


def test_the_test_fails_when_any_plan_is_off_by_one() -> None:
    """Each plan's and route's output, one unit off on one item, fails the check (the test has teeth)."""
    pytest.importorskip("numba")
    names = [plan.value for plan in PLANS] + list(ROUTES)
    with TemporaryDirectory() as folder:
        check_every_plan(TEETH_CASE, Path(folder))  # passes unperturbed
        for name in names:
            checked: list[str] = []

            def off_by_one(seen: str, output: pl.DataFrame, name: str = name, checked: list[str] = checked) -> pl.DataFrame:
                checked.append(seen)
                if seen != name:
                    return output
                column = output.columns[1]
                return output.with_columns(pl.col(column) + (pl.int_range(pl.len()) == 0).cast(pl.Int64))

            with pytest.raises(AssertionError, match=re.escape(name)):
                check_every_plan(TEETH_CASE, Path(folder), perturb=off_by_one)
            assert name in checked, f"{name} never ran on the teeth case"


def test_the_kept_subsets_are_uniform() -> None:
    """Users above Δ0 keep a uniform random subset: 6,000 users holding the same 6 items, Δ0 = 2, one seed (each
    user's subset depends on its own key only): the 15 subsets' counts pass a χ² test at a fixed critical value
    (54.6: p = 10^-6 with 14 degrees of freedom, so a fair bound fails once in a million runs)."""
    users, size, bound = 6000, 6, 2
    frame = pl.DataFrame({"user": np.repeat(np.arange(users), size), "item": np.tile(np.arange(size), users)})
    lists = BoundedLists(_prepare_frame(frame, SPACE), SPACE, bound, SEEDS)
    for how in ("split", "keyed"):  # the kept subsets themselves (every plan keeps these, bit for bit)
        held = bounded_lists_plan(lists.lf, SPACE, bound, SEEDS, plan=how).collect().get_column("item").to_list()
        assert all(len(items) == bound for items in held)
        subsets = Counter(tuple(sorted(items)) for items in held)
        expected = users / len(list(combinations(range(size), bound)))
        chi2 = sum((subsets.get(s, 0) - expected) ** 2 / expected for s in combinations(range(size), bound))
        assert chi2 < 54.6, (how, chi2)


_DOCS = Path(__file__).resolve().parents[2] / "docs" / "engines.md"


def _table_rows() -> list[tuple[str, str]]:
    """The rows of docs/engines.md's plan table: (when, plan column)."""
    text = _DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Which plan computes the histogram") :]
    section = section[: section.index("\n### ")]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    return [(cells[1], cells[2]) for cells in rows]


def test_the_docs_table_names_every_plan() -> None:
    named = {name for _, plans in _table_rows() for name in re.findall(r"`([a-z-]+)`", plans)}
    assert named == {plan.value for plan in Plan}


def _lists(frame: pl.DataFrame, bound: int) -> BoundedLists:
    return BoundedLists(_prepare_frame(frame, SPACE), SPACE, bound, SEEDS)


def test_plan_for_follows_the_docs_table() -> None:
    """The rules of the table that small frames reach, in its order, through plan_for's explicit inputs (rules 4,
    6 and 7 need 2^21 rows or more: ``tests/engines/test_polars_kernel.py``, ``tests/engines/test_hashed_histogram.py``)."""
    pytest.importorskip("numba")
    runs = pl.DataFrame({"user": [1, 1, 1, 2, 2, 2], "item": [1, 2, 3, 1, 2, 3]})  # each user one run, above Δ0 = 2
    shuffled = runs.sort("item")  # users not runs
    below = pl.DataFrame({"user": [1, 2, 1, 3], "item": [1, 1, 2, 3]})  # nobody above Δ0 = 2
    struct = below.with_columns(item=pl.struct("item"))
    ready = Numba.READY
    assert plan_for(_lists(below, 2), passes=3, numba=ready) is Plan.POLARS_PASSES  # 1
    assert plan_for(_lists(below, 2), engine="streaming", numba=ready) is Plan.POLARS_SPLIT  # 2
    assert plan_for(_lists(runs, 2), numba=Numba.ABSENT) is Plan.POLARS_KEYED  # 2
    assert plan_for(_lists(below, 2), numba=Numba.DEFERRED) is Plan.POLARS_SPLIT  # 2
    assert plan_for(_lists(struct, 2), numba=ready) is Plan.POLARS_SPLIT  # 2
    lf = _prepare_frame(below, SPACE)
    coded = BoundedLists(lf, SPACE, 2, SEEDS, coded=coded_pairs(lf, SPACE, passes=1, engine="auto"))
    assert plan_for(coded, numba=ready) is Plan.CODED_PAIRS  # 3
    assert plan_for(_lists(runs, 2), numba=ready) is Plan.COMPILED_RUNS_KEYED  # 5
    assert plan_for(_lists(shuffled, 2), numba=ready) is Plan.POLARS_KEYED  # 8
    assert plan_for(_lists(below, 2), numba=ready) is Plan.COMPILED_CODED  # 9
