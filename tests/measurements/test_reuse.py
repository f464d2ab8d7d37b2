"""A two-stage call and DP-SIPS's rounds read the input once (the prepared frame, collected once at one
in-memory pass), with the same releases for fixed randomness and the same maps; stage 2's distinct
(user, candidate) pairs on dense user codes are exactly the distinct pairs of the data."""

from __future__ import annotations

import contextlib

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm import transformations
from opendp_wgm._spaces import _prepare_frame, _resolve_space, _Space
from opendp_wgm.engines import polars as kernel
from opendp_wgm.engines.polars import _candidates, _compiled_steps, _prepared, without_numba
from opendp_wgm.kernel import histogram as kernel_histogram
from opendp_wgm.kernel import plans as kernel_plans
from opendp_wgm.measurements import _peeling_rounds as peeling_rounds
from opendp_wgm.measurements import dp_sips, hitting_set, top_k
from opendp_wgm.measurements import wgm as wgm_module
from opendp_wgm.measurements.hitting_set import coverage, make_wgm_hitting_set, make_wgm_hitting_set_from_budget
from opendp_wgm.measurements.top_k import make_wgm_top_k, make_wgm_top_k_from_budget
from opendp_wgm.privacy.threshold import LATTICE_BITS
from tests.engine_modules import MODULES, patch_engine

TWO_STAGE = dict(k=3, max_contributions=3, wgm_scale=0.5, wgm_threshold=2.0, peel_scale=0.5)
SIPS = dict(max_contributions=3, scales=[0.5, 0.5, 0.5], thresholds=[4.0, 2.0, 1.0])


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


def data(n_users: int = 400, seed: int = 0) -> pl.DataFrame:
    """Zipf-ish string items, 1-8 rows per user, with duplicate rows (test data, not a release path)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 9, n_users)
    users = np.repeat(np.arange(n_users), lengths)
    items = np.minimum(rng.zipf(1.6, users.size), 60)
    return pl.DataFrame({"user": [f"u{u}" for u in users], "item": [f"i{x}" for x in items]})


def counting(frame: pl.DataFrame, reads: list[int]) -> pl.LazyFrame:
    """``frame`` as a plan that records every time it is computed (a stand-in for a file scan)."""

    def read(df: pl.DataFrame) -> pl.DataFrame:
        reads.append(df.height)
        return df

    return frame.lazy().map_batches(read, schema=frame.schema)


@pytest.mark.parametrize("make", [make_wgm_top_k, make_wgm_hitting_set])
def test_a_two_stage_call_reads_the_input_once(make) -> None:
    reads: list[int] = []
    m = make(*wgm.user_items_space(), **TWO_STAGE)
    m(counting(data(), reads))
    assert len(reads) == 1  # stage 2 reads stage 1's prepared frame, not the input (was 2)


@pytest.mark.parametrize("make", [make_wgm_top_k, make_wgm_hitting_set])
def test_a_two_stage_call_in_passes_keeps_scanning_the_input(make) -> None:
    """``passes`` bound the memory of inputs larger than memory: nothing is collected, each pass scans."""
    reads: list[int] = []
    make(*wgm.user_items_space(), **TWO_STAGE, passes=2)(counting(data(), reads))
    # two stage-1 passes, each reading its first 2^16 rows to choose the per-user plan and then scanning, then
    # stage 2
    assert len(reads) == 2 * 2 + 1
    reads.clear()
    make(*wgm.user_items_space(), **TWO_STAGE, engine="streaming")(counting(data(), reads))
    assert len(reads) >= 2


def test_dp_sips_reads_the_input_once_for_all_its_rounds() -> None:
    reads: list[int] = []
    m = wgm.make_dp_sips(*wgm.user_items_space(), **SIPS)
    released = m(counting(data(), reads))
    assert len(reads) == 1  # was one read per round
    assert set(released["round"]) <= {1, 2, 3}


def test_dp_sips_then_top_k_reads_the_input_once() -> None:
    reads: list[int] = []
    m = make_wgm_top_k_from_budget(
        *wgm.user_items_space(), k=3, max_contributions=3, epsilon=1.0, delta=1e-5, stage_1="dp-sips", rounds=2
    )
    m(counting(data(), reads))
    assert len(reads) == 1


@pytest.fixture
def fixed_randomness(monkeypatch):
    """Every random choice of a release made a function of a reset counter: fixed hash seeds, seeded noise
    drawn in item order, arg-max selections. Test scaffolding only; the package draws from its exact samplers."""
    state = {"seed": 0, "noise": np.random.default_rng(0)}

    def reset() -> None:
        state["seed"], state["noise"] = 0, np.random.default_rng(0)

    def seeds() -> tuple[int, ...]:
        state["seed"] += 1
        return (state["seed"], 2, 3, 4)

    def noise(scale: float, size: int, method: str = "lattice") -> np.ndarray:
        return np.rint(state["noise"].normal(0.0, scale, size)).astype(np.int64)

    release = kernel.release_above_threshold

    def release_in_item_order(histogram: pl.DataFrame, item: str, **options):
        return release(histogram.sort(item), item, **options)  # a group-by's row order is arbitrary

    def best_k(counts, k, scale, **_):
        return np.argsort(-np.asarray(counts), kind="stable")[: min(k, len(counts))]

    def best(counts, scale, **_):
        return int(np.argmax(counts))

    monkeypatch.setattr(transformations, "fresh_seeds", seeds)
    monkeypatch.setattr(dp_sips, "fresh_seeds", seeds)
    patch_engine(monkeypatch, "sample_discrete_gaussian", noise)
    monkeypatch.setattr(wgm_module, "release_above_threshold", release_in_item_order)
    monkeypatch.setattr(dp_sips, "release_above_threshold", release_in_item_order)
    monkeypatch.setattr(top_k, "noisy_top_k", best_k)
    monkeypatch.setattr(peeling_rounds, "noisy_max", best)
    monkeypatch.setattr(peeling_rounds, "peel_jit", lambda: None)  # the rounds' loop, which calls noisy_max
    return reset


@pytest.mark.parametrize(
    "build",
    [
        lambda **o: make_wgm_top_k(*wgm.user_items_space(), **TWO_STAGE, **o),
        lambda **o: make_wgm_hitting_set(*wgm.user_items_space(), **TWO_STAGE, **o),
        lambda **o: wgm.make_dp_sips(*wgm.user_items_space(), **SIPS, **o),
        lambda **o: make_wgm_hitting_set_from_budget(
            *wgm.user_items_space(), k=4, max_contributions=3, rho=2.0, delta=1e-3, stage_1="dp-sips", **o
        ),
    ],
    ids=["top-k", "hitting-set", "dp-sips", "dp-sips-hitting-set"],
)
def test_the_collected_frame_gives_the_release_of_the_plan(fixed_randomness, build) -> None:
    """For fixed randomness, one in-memory pass (the prepared frame collected once) releases exactly what the
    plan path releases (``passes=3``, ``engine="streaming"``: the input scanned by every step, as before)."""
    frame = data(seed=3)
    releases = []
    for options in ({}, {"passes": 3}, {"engine": "streaming"}):
        for given in (frame, frame.lazy()):
            fixed_randomness()
            releases.append(build(**options)(given))
    assert releases[0].height > 0
    for released in releases[1:]:
        assert released.equals(releases[0])


def test_maps_are_unchanged() -> None:
    """The maps of the two-stage mechanisms and DP-SIPS, pinned (the (ε, δ) maps' δ_N + δ_T is rounded up, a few ulps
    above the plain sum)."""
    space = wgm.user_items_space()
    top = make_wgm_top_k_from_budget(*space, k=10, max_contributions=5, epsilon=1.0, delta=1e-5)
    # δ_N + δ_T rounded up (a few ulps); δ_T from math.erfc at an argument rounded toward zero (docs/privacy.md,
    # "Floating point in the maps"): 2.3e-20 above the value SciPy's ndtr gave (…263225e-06), never below it (so are the others)
    assert top.map(1) == (0.9999999999995001, 9.999999799263248e-06)
    assert top.map(2) == (2.0100362766339708, 1.73340848357673e-05)  # SciPy's: …67257e-05
    hit = make_wgm_hitting_set_from_budget(*space, k=10, max_contributions=5, rho=0.1, delta=1e-5)
    assert hit.map(1) == (0.09999999999999999, 9.999997129360961e-06)  # SciPy's: …60894e-06
    sips = wgm.make_dp_sips(*space, max_contributions=5, scales=[3.0, 2.0], thresholds=[12.0, 9.0])
    assert sips.map(2) == (0.7222222222222223, 0.0017518551775807891)  # SciPy's: …07826


USER_KEYS = {
    "string": pl.col("user"),
    "integer": pl.col("user").str.slice(1).cast(pl.Int64),
    "float": pl.col("user").str.slice(1).cast(pl.Float64),  # no dense code: grouped by value
    "struct": pl.struct(pl.col("user")),  # no dense code: grouped by value
}


@pytest.mark.parametrize("key", list(USER_KEYS))
@pytest.mark.parametrize("item_dtype", [pl.String, pl.Categorical])
@pytest.mark.parametrize("contiguous", [False, True])
def test_candidate_pairs_are_the_distinct_pairs(key: str, item_dtype, contiguous: bool) -> None:
    frame = data(seed=5).with_columns(USER_KEYS[key].alias("user"), pl.col("item").cast(item_dtype))
    space = _resolve_space(*wgm.user_items_space())
    lf = _prepare_frame(frame, space)
    candidates = pl.Series("item", ["i1", "i7", "absent", "i3", "i60"]).cast(item_dtype)
    users, positions = kernel.candidate_pairs(lf, space, candidates, contiguous=contiguous)
    distinct = frame.filter(pl.col("item").is_in(candidates.implode())).unique()
    assert len(users) == distinct.height == len(set(zip(users, positions, strict=True)))
    assert len(np.unique(users)) == distinct["user"].n_unique()  # one code per user
    if contiguous:  # each user's pairs in one run
        assert len(np.unique(users)) == np.count_nonzero(np.diff(users)) + 1
    expected = distinct.group_by("item").len()
    counts = kernel.candidate_counts(lf, space, candidates)
    for position, candidate in enumerate(candidates.to_list()):
        row = expected.filter(pl.col("item").cast(pl.String) == candidate)
        assert counts[position] == (row["len"].item() if row.height else 0) == np.sum(positions == position)
    # each code names one user: its candidates are exactly that user's
    held = {}
    for code, position in zip(users, positions, strict=True):
        held.setdefault(code, set()).add(candidates[int(position)])
    sets = distinct.group_by("user").agg(pl.col("item").cast(pl.String))
    assert sorted(map(sorted, held.values())) == sorted(map(sorted, sets["item"].to_list()))


def test_coverage_is_the_distinct_pairs_per_user() -> None:
    frame = data(seed=7)
    space = _resolve_space(*wgm.user_items_space())
    candidates = pl.Series("item", ["i2", "i1", "i9", "nope"])
    state, items = coverage(_prepare_frame(frame, space), space, candidates)
    assert items.to_list() == candidates.to_list()
    sets = frame.filter(pl.col("item").is_in(candidates.implode())).group_by("user").agg(pl.col("item").unique())
    held = sorted(sorted(items[int(x)] for x in state.user_items[a:b]) for a, b in zip(state.user_ptr[:-1], state.user_ptr[1:], strict=True))
    assert held == sorted(sorted(s) for s in sets["item"].to_list())
    assert state.counts.tolist() == [frame.filter(pl.col("item") == c)["user"].n_unique() for c in candidates]



# --------------------------------------------------------------------------------------------------------------
# DP-SIPS on the distinct pairs releases what the straightforward rounds release


def _straightforward_user_bins(prepared: pl.LazyFrame, released: pl.DataFrame) -> np.ndarray:
    """The two-bin count as it was computed before (frozen): every prepared row grouped by user, two
    ``n_unique``."""
    per_user = (
        prepared.with_columns(_released=pl.col("item").is_in(released.get_column("item").implode()))
        .group_by("user")
        .agg(_n=pl.col("item").n_unique(), _r=pl.col("item").filter(pl.col("_released")).n_unique())
        .filter(pl.col("_n") > pl.col("_r"))
        .select(_boosted=pl.col("_r") > 0)
        .select(_boosted=pl.col("_boosted").sum(), _other=(~pl.col("_boosted")).sum())
        .collect()
    )
    return np.array(per_user.row(0), dtype=np.int64)


def _straightforward_dp_sips(frame: pl.DataFrame, options: dict) -> pl.DataFrame:
    """DP-SIPS as it ran before (frozen): each round bounds the prepared rows (the kernel's own ``unique``)
    without the items released so far, the count groups the prepared rows. Same draws in the same order."""
    space = _resolve_space(*wgm.user_items_space())
    delta0 = options["max_contributions"]
    prepared = _prepare_frame(frame, space).collect().lazy()
    plan = list(zip(options["scales"], options["thresholds"], strict=True))
    rounds: list[pl.DataFrame] = []
    remaining, number = prepared, 0
    while number < len(plan):
        scale, threshold = plan[number]
        number += 1
        lists = kernel.bounded_lists_plan(remaining, space, delta0, dp_sips.fresh_seeds())
        histogram = kernel.lattice_histogram_plan(lists, space, delta0).collect()
        released = dp_sips.release_above_threshold(histogram, "item", scale=scale, threshold=threshold, noise="lattice")
        rounds.append(released.with_columns(pl.lit(number, dtype=pl.Int16).alias("round")))
        if number == 1 and "statistic_scale" in options:
            bins = _straightforward_user_bins(prepared, released) << LATTICE_BITS
            noisy, _ = kernel.noisy_above_threshold(bins, scale=options["statistic_scale"], threshold=0.0)
            if dp_sips.dense_branch(float(noisy[0]), float(noisy[1])):
                plan = plan[:1] + list(zip(options["branch_scales"], options["branch_thresholds"], strict=True))
        done = pl.concat([r.get_column("item") for r in rounds])
        remaining = prepared.filter(~pl.col("item").is_in(done.implode()))
    return pl.concat(rounds).sort("item")


def _sips_data(shape: str) -> pl.DataFrame:
    """Users below Δ0 = 4 (1-4 distinct items), above it (6-12), or mixed; Zipf items with duplicate rows;
    Int64 or String items. "sparse": most users hold 2-3 rare items, so few are boosted by round 1 (test data,
    not a release path)."""
    rng = np.random.default_rng(len(shape))
    low, high = {"below": (1, 5), "above": (6, 13), "mixed": (1, 13), "strings": (1, 13), "sparse": (2, 4)}[shape]
    lengths = rng.integers(low, high, 300)
    users = np.repeat(np.arange(300), lengths)
    items = np.minimum(rng.zipf(1.4, users.size), 80)
    if shape == "sparse":  # all but the first 60 users hold rare items only
        items = np.where(users < 60, items, rng.integers(100, 3000, users.size))
    frame = pl.DataFrame({"user": users, "item": items}).sample(fraction=1.0, shuffle=True, seed=1)
    if shape == "strings":
        frame = frame.with_columns(pl.format("u{}", "user"), pl.format("item-{}", "item"))
    return frame


ADAPTIVE = dict(
    max_contributions=4, scales=[0.3, 0.3], thresholds=[8.0, 2.0],
    statistic_scale=0.3, branch_scales=[0.3, 0.3], branch_thresholds=[4.0, 1.5],
)


@pytest.mark.parametrize("shape", ["below", "above", "mixed", "strings", "sparse"])
@pytest.mark.parametrize("schedule", ["fixed", "adaptive"])
def test_dp_sips_releases_what_the_straightforward_rounds_release(fixed_randomness, shape: str, schedule: str) -> None:
    """For fixed seeds and noise, rounds on the distinct pairs (deduplicated once, each round's items flagged
    and dropped once, the count from the flags) release exactly the frame of the rounds on the prepared rows
    (the kernel's ``unique`` per round, the count by ``n_unique``), on every shape and path."""
    options = dict(SIPS, max_contributions=4) if schedule == "fixed" else ADAPTIVE
    frame = _sips_data(shape)
    fixed_randomness()
    expected = _straightforward_dp_sips(frame, options)
    assert expected.height > 5 and expected["round"].n_unique() >= 2  # several rounds released something
    if schedule == "adaptive":  # both branches occur: the dense one (a round 3) on all shapes but "sparse"
        assert (expected["round"].max() == 3) == (shape != "sparse")
    for path in ({}, {"passes": 3}, {"engine": "streaming"}):
        for given in (frame, frame.lazy()):
            fixed_randomness()
            assert wgm.make_dp_sips(*wgm.user_items_space(), **options, **path)(given).equals(expected)


def test_dp_sips_rounds_bound_the_distinct_pairs(monkeypatch) -> None:
    """Every round bounds distinct (user, item) pairs, deduplicated once per call, and skips the kernel's own
    ``unique`` (before: each round deduplicated the prepared rows again)."""
    seen: list[tuple[bool, int, int]] = []
    lists = dp_sips.BoundedLists

    def spy(lf: pl.LazyFrame, *args, **options):
        rows = lf.collect()
        seen.append((options.get("distinct", False), rows.height, rows.unique().height))
        return lists(lf, *args, **options)

    monkeypatch.setattr(dp_sips, "BoundedLists", spy)
    frame = data()
    assert frame.unique().height < frame.height  # the data has duplicate rows
    wgm.make_dp_sips(*wgm.user_items_space(), **SIPS)(frame)
    assert len(seen) == 3 and all(distinct and height == unique for distinct, height, unique in seen)


# ---------------------------------------------------------------------------------------------------------------
# stage 2's pairs: users coded by their runs when each user's rows are adjacent, by hashing otherwise


def _frozen_candidate_pairs(lf: pl.LazyFrame, space, items: pl.Series, *, contiguous: bool = False):
    """``candidate_pairs`` before the runs path (frozen copy: is_in, replace_strict, hashed user codes)."""
    user, item = space.user, space.item
    position = pl.int_range(items.len(), eager=True, dtype=pl.UInt32)
    rows = lf.filter(pl.col(item).is_in(items.implode())).with_columns(
        pl.col(item).replace_strict(items, position).alias("_p")
    )
    coded = rows.group_by(user).agg(pl.col("_p").unique()).with_row_index("_u").explode("_p").collect()
    return coded["_u"].to_numpy().astype(np.int64), coded["_p"].to_numpy().astype(np.int64)


def shapes() -> dict[str, pl.DataFrame]:
    """Users adjacent or not, String or Int64 ids, duplicate rows, Categorical and Int64 items."""
    base = data(n_users=300, seed=11)  # users adjacent (written user by user), with duplicate rows
    shuffled = base.sample(fraction=1.0, shuffle=True, seed=1)
    return {
        "adjacent string users": base,
        "adjacent int users": base.with_columns(pl.col("user").str.slice(1).cast(pl.Int64)),
        "sorted int users": base.with_columns(pl.col("user").str.slice(1).cast(pl.Int64)).sort("user"),
        "shuffled string users": shuffled,
        "shuffled int users": shuffled.with_columns(pl.col("user").str.slice(1).cast(pl.Int64)),
        "a user in two runs": pl.concat([base, base.head(40)]),  # adjacent values, but u0's rows twice
        "categorical items": base.with_columns(pl.col("item").cast(pl.Categorical)),
        "int items": base.with_columns(pl.col("item").str.slice(1).cast(pl.Int64)),
        "float users": base.with_columns(pl.col("user").str.slice(1).cast(pl.Float64)),
    }


def _pair_set(frame: pl.DataFrame, users: np.ndarray, positions: np.ndarray, items: pl.Series) -> set:
    """The (user value, candidate) pairs named by user codes: each code's candidates, as sorted tuples."""
    held: dict[int, set] = {}
    for code, position in zip(users.tolist(), positions.tolist(), strict=True):
        held.setdefault(code, set()).add(items[position])
    assert sum(map(len, held.values())) == len(users)  # no pair twice
    return {tuple(sorted(map(str, s))) for s in held.values()}


@pytest.mark.parametrize("shape", list(shapes()))
@pytest.mark.parametrize("contiguous", [False, True])
def test_candidate_pairs_are_those_of_the_frozen_path(shape: str, contiguous: bool) -> None:
    frame = shapes()[shape]
    space = _resolve_space(*wgm.user_items_space())
    lf = _prepare_frame(frame, space)
    items = frame.get_column("item").unique().sort().head(25)
    items = kernel.cast_candidates(pl.concat([items, items.head(0)]), lf.collect_schema()["item"])
    new_users, new_positions = kernel.candidate_pairs(lf, space, items, contiguous=contiguous)
    old_users, old_positions = _frozen_candidate_pairs(lf, space, items)
    assert _pair_set(frame, new_users, new_positions, items) == _pair_set(frame, old_users, old_positions, items)
    assert kernel.candidate_counts(lf, space, items).tolist() == np.bincount(old_positions, minlength=25).tolist()
    if contiguous:  # each user's pairs in one run, users coded 0, 1, ... in pair order
        assert np.all(np.diff(new_users) >= 0) and np.all(np.diff(new_users) <= 1)


def test_adjacent_users_are_coded_by_runs_without_hashing(monkeypatch) -> None:
    """Users written user by user are coded by their runs: the hashed user code is never built (it was)."""

    def no_hash(*_args):
        raise AssertionError("the user key was hashed")

    patch_engine(monkeypatch, "_dense_user_code", no_hash)
    frame = shapes()["adjacent string users"]
    space = _resolve_space(*wgm.user_items_space())
    counts = kernel.candidate_counts(_prepare_frame(frame, space), space, pl.Series("item", ["i1", "i2"]))
    assert counts.tolist() == [frame.filter(pl.col("item") == x)["user"].n_unique() for x in ("i1", "i2")]
    with pytest.raises(AssertionError, match="hashed"):  # a user in two runs: the runs are not the users
        kernel.candidate_counts(_prepare_frame(shapes()["a user in two runs"], space), space, pl.Series(["i1"]))


@pytest.mark.parametrize("shape", list(shapes()))
@pytest.mark.parametrize("make", [make_wgm_top_k, make_wgm_hitting_set])
def test_two_stage_releases_are_those_of_the_frozen_pairs(fixed_randomness, monkeypatch, shape: str, make) -> None:
    """For fixed randomness, a two-stage release on the new pairs is the release on the frozen ones."""
    frame = shapes()[shape]
    options = dict(k=5, max_contributions=3, wgm_scale=0.5, wgm_threshold=1.0, peel_scale=0.5)
    releases = []
    def frozen_csr(data: kernel.Prepared, space, items: pl.Series):
        users, positions = _frozen_candidate_pairs(data.lf, space, items)  # each user's pairs contiguous
        return kernel.run_offsets(users), positions

    for pairs, csr in ((kernel.candidate_pairs, kernel.candidate_csr), (_frozen_candidate_pairs, frozen_csr)):
        patch_engine(monkeypatch, "candidate_pairs", pairs)
        monkeypatch.setattr(peeling_rounds, "candidate_csr", csr)
        fixed_randomness()
        releases.append(make(*wgm.user_items_space(), **options)(frame))
    assert releases[0].height == 5
    assert releases[0].equals(releases[1])


def test_user_peeling_keys_one_generator_per_release(monkeypatch) -> None:
    """The k rounds draw from one CSPRNG keyed once (was: a new key per round, as costly as a small draw)."""
    from opendp_wgm.samplers import selection

    keyed: list[int] = []
    for module in (selection, peeling_rounds):
        if hasattr(module, "csprng"):
            original = module.csprng
            monkeypatch.setattr(module, "csprng", lambda original=original: keyed.append(1) or original())
    candidates = [f"i{x}" for x in range(1, 30)]
    m = hitting_set.make_user_peeling(*wgm.user_items_space(), candidates=candidates, k=20, scale=1.0)
    assert m(data(seed=2)).height == 20
    assert len(keyed) == 1


# ---------------------------------------------------------------------------------------------------------------
# DP-SIPS on the pairs coded once: every round's histogram is the one the rounds on the Polars frames give


def _sips_shapes() -> dict[str, pl.DataFrame]:
    """:func:`_sips_data`'s shapes and more dtypes: Categorical and Enum items, String users with Int64 items."""
    shapes_ = {shape: _sips_data(shape) for shape in ("below", "above", "mixed", "strings", "sparse")}
    shapes_["categorical items"] = _sips_data("mixed").with_columns(pl.format("c{}", "item").cast(pl.Categorical))
    enum = pl.Enum([f"e{x}" for x in range(100, 0, -1)])  # categories not in the items' order
    shapes_["enum items"] = _sips_data("mixed").with_columns(pl.format("e{}", "item").cast(enum))
    shapes_["string users"] = _sips_data("above").with_columns(pl.format("u{}", "user"))
    return shapes_


@pytest.mark.parametrize("shape", list(_sips_shapes()))
@pytest.mark.parametrize("schedule", ["fixed", "adaptive"])
def test_dp_sips_on_coded_pairs_gives_each_rounds_histogram(fixed_randomness, monkeypatch, shape: str, schedule: str) -> None:
    """For fixed seeds and noise, the rounds on the coded pairs (numba present) compute, round by round, the
    histogram of the rounds on the distinct pairs' frames (each round's compiled step or Polars plan) and of the
    Polars plans alone (numba absent), bit for bit, and release the same frame."""
    pytest.importorskip("numba")
    options = dict(SIPS, max_contributions=4) if schedule == "fixed" else ADAPTIVE
    frame = _sips_shapes()[shape]
    histogram_of = dp_sips.kernel_histogram
    coded_pairs = dp_sips.coded_pairs
    seen: list[tuple[bool, pl.DataFrame]] = []

    def spy(plan, lists_of, *args, **kwargs):
        histogram = histogram_of(plan, lists_of, *args, **kwargs).collect()
        seen.append((lists_of.coded is not None, histogram.sort("item")))
        return histogram.lazy()

    monkeypatch.setattr(dp_sips, "kernel_histogram", spy)
    runs: dict[str, tuple[list[tuple[bool, pl.DataFrame]], pl.DataFrame]] = {}
    for path in ("coded", "frames", "no numba"):
        if path == "frames":
            monkeypatch.setattr(dp_sips, "coded_pairs", lambda *args, **kwargs: None)
        if path == "no numba":
            monkeypatch.setattr(dp_sips, "coded_pairs", coded_pairs)
        seen.clear()
        fixed_randomness()
        with without_numba() if path == "no numba" else contextlib.nullcontext():
            released = wgm.make_dp_sips(*wgm.user_items_space(), **options)(frame)
        runs[path] = (list(seen), released)
    coded, expected = runs["coded"]
    assert all(was_coded for was_coded, _ in coded) and len(coded) >= 2
    assert expected.height > 5 and expected["round"].n_unique() >= 2
    if schedule == "adaptive":  # both branches occur: the dense one (a round 3) on all shapes but "sparse"
        assert (expected["round"].max() == 3) == (shape != "sparse")
    for path in ("frames", "no numba"):
        rounds, released = runs[path]
        assert not any(was_coded for was_coded, _ in rounds)
        assert len(rounds) == len(coded)
        for (_, histogram), (_, other) in zip(coded, rounds, strict=True):
            assert histogram.equals(other)
        assert released.equals(expected)


def test_dp_sips_codes_its_pairs_once_per_call(monkeypatch) -> None:
    """Where the compiled step runs, the user and item columns are coded once per call, not once per round, and
    no round runs the per-round compiled dispatch (which executed the round's plan and coded it again)."""
    pytest.importorskip("numba")
    coded: list[int] = []
    codes, text_codes, compiled = _compiled_steps._codes, _compiled_steps._text_codes, kernel.coded_histogram
    # a column is coded by _codes, or by _text_codes when it holds text (falling back to _codes if its check fails)
    patch_engine(monkeypatch, "_codes", lambda *args, **options: coded.append(1) or codes(*args, **options))
    patch_engine(monkeypatch, "_text_codes", lambda *args, **options: coded.append(1) or text_codes(*args, **options))
    patch_engine(monkeypatch, "coded_histogram", lambda *args: coded.append(100) or compiled(*args))
    released = wgm.make_dp_sips(*wgm.user_items_space(), **SIPS)(data())
    assert released["round"].n_unique() == 3  # three rounds ran
    assert coded == [1, 1]  # was six codings and three dispatches: two columns coded in each of three rounds


def _paths() -> dict[str, dict[str, object]]:
    """Stage 2's paths: on the WGM's compiled coding of the rows (the compiled stage-2 step), and the Polars
    plans, without the coding (monkeypatched) or without Numba (:func:`without_numba`)."""
    return {
        "stage 1's codes": {},
        "polars, no shared codes": {"_shared_codes": lambda lf: None},
        "polars, no numba": {"numba": "absent"},
    }


def _releases_on_paths(fixed_randomness, monkeypatch, frame: pl.DataFrame, make, options: dict, paths: dict) -> list:
    """A two-stage release of ``frame`` on each of ``paths`` (functions of the engine patched, or ``"numba":
    "absent"``: within :func:`without_numba`), for fixed randomness."""
    releases = []
    for patches in paths.values():
        absent = patches.get("numba") == "absent"
        with monkeypatch.context() as patched, without_numba() if absent else contextlib.nullcontext():
            for name, value in patches.items():
                if name != "numba":
                    patch_engine(patched, name, value)
            fixed_randomness()
            m = make(*wgm.user_items_space(), max_contributions=6, wgm_scale=0.5, peel_scale=0.5, **options)
            releases.append(m(frame))
    return releases


@pytest.mark.parametrize("shape", list(shapes()))
@pytest.mark.parametrize("make", [make_wgm_top_k, make_wgm_hitting_set])
@pytest.mark.parametrize(
    "options",
    [
        dict(k=5, wgm_threshold=1.0),  # users above (3) and below Δ0 = 6; more candidates than k
        dict(k=40, wgm_threshold=1.0),  # fewer candidates than k
        dict(k=5, wgm_threshold=1e9),  # no candidates
    ],
    ids=["candidates", "fewer-than-k", "none"],
)
def test_stage_2_on_stage_1s_codes_releases_what_the_straightforward_path_releases(
    fixed_randomness, monkeypatch, shape: str, make, options: dict
) -> None:
    """For fixed randomness, stage 2 on the WGM's coding of the rows (no second read of the data) and on the
    Polars plans releases the same frame: the same distinct (user, candidate) pairs.
    String and integer users, adjacent or shuffled, duplicate rows, users above and below Δ0."""
    pytest.importorskip("numba")
    frame = shapes()[shape]
    shared: list[bool] = []
    original = _prepared._shared_codes

    def recorded(lf: pl.LazyFrame):
        codes = original(lf)
        shared.append(codes is not None)
        return codes

    patch_engine(monkeypatch, "_shared_codes", recorded)
    releases = _releases_on_paths(fixed_randomness, monkeypatch, frame, make, options, _paths())
    compiled_histogram = shape != "float users"  # floats are left to the Polars plans
    if options["wgm_threshold"] < 1e9:
        assert releases[0].height == min(options["k"], releases[0].height) > 0
        assert shared[0] is compiled_histogram  # the first release read stage 1's codes
    for released in releases[1:]:
        assert released.equals(releases[0])


@pytest.mark.parametrize("make", [make_wgm_top_k, make_wgm_hitting_set])
def test_both_stages_read_one_prepared_value_passed_to_them(monkeypatch, make) -> None:
    """Each two-stage release makes one ``Prepared`` value (the collected frame, in memory, and the slot of stage 1's
    coding) and passes it to stage 2 in its arguments: stage 1's compiled step filled the slot stage 2 reads. The
    kernel keeps no module-level registry of frames (was: ``id()``-keyed dicts that no signature showed)."""
    pytest.importorskip("numba")
    seen: list[object] = []
    pairs = _candidates._candidate_pairs
    patch_engine(monkeypatch, "_candidate_pairs", lambda data, *a, **o: seen.append(data) or pairs(data, *a, **o))
    m = make(*wgm.user_items_space(), k=5, max_contributions=6, wgm_scale=0.5, wgm_threshold=1.0, peel_scale=0.5)
    frame = shapes()["shuffled string users"]
    assert m(frame).height == m(frame).height == 5
    assert len(seen) == 2 and seen[0] is not seen[1]  # one value per release
    for data in seen:
        assert isinstance(data, kernel.Prepared) and data.in_memory and isinstance(data.coding, _prepared._CodedRows)
    for module in MODULES:  # the package and each of its modules
        mutable = [name for name, value in vars(module).items() if isinstance(value, (dict, list, set))]
        assert [name for name in mutable if not name.startswith("__")] == [], module.__name__


@pytest.mark.parametrize("make", [make_wgm_top_k, make_wgm_hitting_set])
def test_stage_2_does_not_read_the_rows_again_after_the_compiled_step(monkeypatch, make) -> None:
    """Where the WGM's compiled step coded the prepared frame, stage 2 reads its codes: the candidates' rows are
    not looked up in the frame again (they were: a filter, a lookup and a group-by over the rows)."""
    pytest.importorskip("numba")

    def no_read(*_args):
        raise AssertionError("stage 2 read the rows again")

    patch_engine(monkeypatch, "_candidate_rows", no_read)
    frame = shapes()["shuffled string users"]
    m = make(*wgm.user_items_space(), k=5, max_contributions=6, wgm_scale=0.5, wgm_threshold=1.0, peel_scale=0.5)
    assert m(frame).height == 5


# ---------------------------------------------------------------------------------------------------------------
# stage 2's lookups: candidates matched to stage 1's codes in NumPy, their rows in one compiled pass, one lookup
# per row on a collected frame, each run's repeats dropped by the compiled marker pass


def _coded_rows(frame: pl.DataFrame) -> _prepared._CodedRows:
    """The compiled step's coding of ``frame``'s rows, as :func:`kernel.coded_histogram` keeps it."""
    jit = kernel.kernel_jit()
    user_dtype, item_dtype = frame.schema["user"], frame.schema["item"]
    coded = frame.select(_compiled_steps._code_expr("user", user_dtype), _compiled_steps._code_expr("item", item_dtype))
    users, n_users, _ = _compiled_steps._codes(coded.get_column("user"), user_dtype, jit, compact=False)
    items, n_items, decode = _compiled_steps._codes(coded.get_column("item"), item_dtype, jit)
    return _prepared._CodedRows(users, n_users, items, n_items, decode)


ITEMS = {
    "string": lambda x: pl.format("i{}", x),
    "categorical": lambda x: pl.format("i{}", x).cast(pl.Categorical),
    "small ints": lambda x: x,
    "sparse ints": lambda x: x * 10**12 - 7,  # a span far over the rows: hash-coded, codes not in value order
    "uint64": lambda x: (x * 3 + 2**63).cast(pl.UInt64),
}


@pytest.mark.parametrize("items", list(ITEMS))
def test_positions_of_stage_1s_codes_are_the_candidates_positions(items: str) -> None:
    """Per item code, the position of its value among the candidates (-1: none): integers by a sorted search in
    NumPy, others by a join; checked against a dictionary, candidates in shuffled order, one absent."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(3)  # test data only
    frame = pl.DataFrame({"user": rng.integers(0, 50, 600), "x": rng.integers(0, 80, 600)})
    frame = frame.select("user", ITEMS[items](pl.col("x")).alias("item"))
    coded = _coded_rows(frame)
    present = frame.get_column("item").unique()
    absent = frame.select(ITEMS[items](pl.lit(10**4, dtype=pl.Int64)).alias("item")).to_series()
    values = kernel.cast_candidates(pl.concat([present.sample(fraction=0.5, seed=1), absent]), frame.schema["item"])
    position_of = coded.positions_of(values)
    where = {value: position for position, value in enumerate(values.to_list())}
    decoded = coded.decode(np.arange(coded.n_items, dtype=np.int64)).to_list()
    assert position_of.tolist() == [where.get(value, -1) for value in decoded]
    assert (position_of >= 0).sum() == values.len() - 1  # every present candidate has its code
    assert coded.positions_of(values.head(0)).tolist() == [-1] * coded.n_items


@pytest.mark.parametrize("kept", [0.0, 0.3, 1.0])
def test_compiled_candidate_rows_are_the_boolean_selection(kept: float) -> None:
    pytest.importorskip("numba")
    rng = np.random.default_rng(4)  # test data only
    users, items = rng.integers(0, 90, 5000).astype(np.int32), rng.integers(0, 40, 5000).astype(np.int32)
    position_of = np.where(rng.random(40) < kept, rng.permutation(40), -1).astype(np.int32)
    kept_users, positions = kernel.peel_jit().candidate_rows(users, items, position_of)
    selected = position_of[items] >= 0
    assert np.array_equal(kept_users, users[selected])
    assert np.array_equal(positions, position_of[items][selected])
    empty = kernel.peel_jit().candidate_rows(users[:0], items[:0], position_of)
    assert empty[0].size == empty[1].size == 0


@pytest.mark.parametrize("shape", list(shapes()))
def test_candidate_csr_holds_the_candidate_pairs(shape: str) -> None:
    """User peeling's CSR arrays (on stage 1's codes, or from the Polars pairs) hold the distinct pairs, one user per
    run of offsets, no user without a candidate."""
    frame = shapes()[shape]
    space = _resolve_space(*wgm.user_items_space())
    items = frame.get_column("item").unique().sort().gather_every(2)
    for data in (_prepare_frame(frame, space), kernel.collect_once(_prepare_frame(frame, space), passes=1, engine="auto")):
        lf = data.lf if isinstance(data, kernel.Prepared) else data
        items = kernel.cast_candidates(items, lf.collect_schema()["item"])
        offsets, positions = kernel.candidate_csr(data, space, items)
        users = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
        assert np.all(np.diff(offsets) > 0) and offsets[0] == 0 and offsets[-1] == positions.size
        old_users, old_positions = _frozen_candidate_pairs(lf, space, items)
        assert _pair_set(frame, users, positions, items) == _pair_set(frame, old_users, old_positions, items)


@pytest.mark.parametrize("shape", list(shapes()))
def test_candidate_rows_of_a_collected_frame_are_those_of_the_filter(shape: str) -> None:
    """A frame collect_once collected is in memory: text and integer candidates are looked up once per row (null:
    no candidate), the other dtypes keep the filter; the rows and positions are the filter-then-lookup path's (a
    plan that scans a file), candidates absent from the data included."""
    frame = shapes()[shape]
    space = _resolve_space(*wgm.user_items_space())
    lf = _prepare_frame(frame, space)
    collected = kernel.collect_once(lf, passes=1, engine="auto")
    assert collected.in_memory and collected.lf is not lf and collected.coding is None
    assert not kernel.collect_once(lf, passes=2, engine="auto").in_memory  # a plan each pass scans: kept as it is
    dtype = lf.collect_schema()["item"]
    items = frame.get_column("item").unique().sort().gather_every(3)
    if dtype == pl.String or dtype.is_integer():  # a candidate no row holds
        items = pl.concat([items, pl.Series("item", ["i100000" if dtype == pl.String else 10**6], dtype=dtype)])
    items = kernel.cast_candidates(items, dtype)
    once, filtered = _candidates._candidate_rows(collected, space, items), _candidates._candidate_rows(kernel.Prepared(lf), space, items)
    assert once.height == filtered.height > 0
    assert once.get_column("user").equals(filtered.get_column("user"))
    assert once.get_column(_candidates._POSITION).cast(pl.Int64).equals(filtered.get_column(_candidates._POSITION).cast(pl.Int64))


@pytest.mark.parametrize("item_dtype", [pl.String, pl.Int64])
def test_collected_frames_rows_are_looked_up_without_a_filter(monkeypatch, item_dtype) -> None:
    """On the frame a two-stage call collected, the candidates' rows are looked up once per row, not filtered with
    ``is_in`` and looked up again (the plan of a file scan: there the filter reaches the scan)."""
    frame = shapes()["adjacent string users"].with_columns(pl.col("item").str.slice(1).cast(item_dtype))
    space = _resolve_space(*wgm.user_items_space())
    lf = _prepare_frame(frame, space)
    items = kernel.cast_candidates(frame.get_column("item").unique().sort().head(5), lf.collect_schema()["item"])
    plans: list[str] = []
    collect = pl.LazyFrame.collect
    monkeypatch.setattr(pl.LazyFrame, "collect", lambda self, *a, **k: plans.append(self.explain()) or collect(self, *a, **k))
    _candidates._candidate_rows(kernel.collect_once(lf, passes=1, engine="auto"), space, items)
    once = "\n".join(plans)
    plans.clear()
    _candidates._candidate_rows(kernel.Prepared(lf), space, items)
    assert "is_in" not in once and "is_in" in "\n".join(plans)


# ---------------------------------------------------------------------------------------------------------------
# stage 2 without its OpenDP measurement: the peeling's checks and release function, the same release


@pytest.mark.parametrize("shape", ["adjacent string users", "shuffled int users", "float users"])
@pytest.mark.parametrize(
    ("make", "module", "release", "constructor"),
    [
        (make_wgm_top_k, top_k, "_peeling_top_k_release", "make_peeling_top_k"),
        (make_wgm_hitting_set, hitting_set, "_user_peeling_release", "make_user_peeling"),
    ],
    ids=["top-k", "hitting set"],
)
def test_stage_2_without_its_measurement_releases_what_its_measurement_releases(
    fixed_randomness, monkeypatch, shape: str, make, module, release: str, constructor: str
) -> None:
    """For fixed randomness, a two-stage release whose stage 2 is the peeling's release function (no measurement
    built, no FFI callback) is the release of the peeling's measurement; a release builds no OpenDP measurement."""
    frame = shapes()[shape]
    options = dict(k=5, max_contributions=6, wgm_scale=0.5, wgm_threshold=1.0, peel_scale=0.5)
    built: list[int] = []
    make_user_measurement = dp.m.make_user_measurement
    monkeypatch.setattr(dp.m, "make_user_measurement", lambda *a, **k: built.append(1) or make_user_measurement(*a, **k))
    fixed_randomness()
    m = make(*wgm.user_items_space(), **options)
    built.clear()
    without = m(frame)
    assert built == [] and without.height == 5  # was one stage-2 measurement per release
    monkeypatch.setattr(module, release, getattr(module, constructor))  # stage 2 as its measurement
    fixed_randomness()
    m = make(*wgm.user_items_space(), **options)
    built.clear()
    assert m(frame).equals(without)
    assert built == [1]


# ---------------------------------------------------------------------------------------------------------------
# stage 2 on the users' runs the WGM's route on runs found (imdb_50k's route, every row keyed): one lookup per row,
# no second read of the user column

#: Shapes whose users are each one run and whose candidates are looked up once per row (text or integer items):
#: the keyed route leaves its runs there, and stage 2 reads them
KEYED_RUNS = ("adjacent string users", "adjacent int users", "sorted int users", "int items")


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("shape", list(shapes()))
def test_candidate_pairs_on_the_keyed_routes_runs_are_the_distinct_pairs(monkeypatch, shape: str, threads: int) -> None:
    """After the route on runs (:func:`kernel.runs_histogram`) on a two-stage call's collected frame, the candidate
    pairs (CSR, and the counts) are the frozen path's, in one thread or in three (user ranges); where the route
    found no runs, or the candidates are not looked up once per row, the other paths run."""
    pytest.importorskip("numba")
    patch_engine(monkeypatch, "mostly_above", lambda *args: True)  # the keyed route on every shape
    patch_engine(monkeypatch, "kernel_threads", lambda rows, jit: threads)
    frame = shapes()[shape]
    space = _resolve_space(*wgm.user_items_space())
    shared = kernel.collect_once(_prepare_frame(frame, space), passes=1, engine="auto")
    lf = shared.lf
    kernel_histogram("auto", kernel.BoundedLists(lf, space, 6, (1, 2, 3, 4), shared=shared), 6)
    assert (_prepared._shared_runs(shared) is not None) == (shape in KEYED_RUNS or shape == "categorical items")
    items = frame.get_column("item").unique().sort().gather_every(2)
    dtype = lf.collect_schema()["item"]
    if dtype == pl.String or dtype.is_integer():  # a candidate no row holds
        items = pl.concat([items, pl.Series("item", ["i100000" if dtype == pl.String else 10**6], dtype=dtype)])
    items = kernel.cast_candidates(items, dtype)
    runs: list[object] = []
    path = _candidates._run_candidate_pairs
    patch_engine(monkeypatch, "_run_candidate_pairs", lambda *a: runs.append(path(*a)) or runs[-1])
    offsets, positions = kernel.candidate_csr(shared, space, items)
    assert (runs[-1] is not None) == (shape in KEYED_RUNS)
    users = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    assert np.all(np.diff(offsets) > 0) and offsets[0] == 0 and offsets[-1] == positions.size
    old_users, old_positions = _frozen_candidate_pairs(lf, space, items)
    assert _pair_set(frame, users, positions, items) == _pair_set(frame, old_users, old_positions, items)
    counts = np.bincount(old_positions, minlength=items.len())
    assert kernel.item_counts(shared, space, items).tolist() == counts.tolist()


@pytest.mark.parametrize("threads", [1, 3])
def test_text_items_are_looked_up_exactly_by_their_views(threads: int) -> None:
    """The candidate position of every row of a String column by its Arrow views is the ``Enum`` cast's, exactly:
    strings of 0-4, 5-12 and more bytes (a 12-byte view holds the whole string, a longer one its length and
    prefix only), long strings sharing the length and prefix of a candidate, multi-byte text, on a column of
    several chunks, one of them a slice."""
    peel = pytest.importorskip("opendp_wgm.engines._peel_jit")
    pytest.importorskip("pyarrow")
    rng = np.random.default_rng(threads)  # test data only
    alphabet = np.array(list("abcdXé日"))
    words = ["", "a", "ab", "abc", "abcd", "abcde", "abcdefghijk", "abcdefghijkl", "abcdefghijklm", "abcdefghijklX",
             "abcdXXXXXXXXX", "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyZ", "日本語テキスト", "é"]
    words += ["".join(rng.choice(alphabet, n)) for n in rng.integers(0, 16, 300)]
    values = [words[i] for i in rng.integers(0, len(words), 5000)]
    parts = [pl.DataFrame({"item": values[:1700]}), pl.DataFrame({"item": values[1000:]}).slice(700)]
    frame = pl.concat(parts, rechunk=False)
    assert frame.n_chunks() == 2
    space = _Space("user", "item", None, lazyframe_domain=False)
    for chosen in (words[::2], words[1::3], ["abcdefghijklm", "abcdefghijklmnopqrstuvwxyz"], ["zzz"]):
        items = kernel.cast_candidates(pl.Series("item", list(dict.fromkeys(chosen))), pl.String)
        looked_up = _candidates._view_positions(frame.lazy(), space, items, threads, peel)
        assert looked_up is not None and looked_up.dtype == np.int32
        cast = frame.get_column("item").cast(pl.Enum(items), strict=False).to_physical()
        assert looked_up.tolist() == cast.cast(pl.Int32).fill_null(-1).to_list()


def test_view_keys_ignore_the_bytes_past_the_length() -> None:
    """A view's key reads its string's bytes only: with any bytes past the length of a string of up to 12 bytes
    (Arrow pads them with zeros; the key does not rely on it), and any buffer and offset of a longer one, each
    short string finds its own candidate and each long one its length and prefix (-2: compared whole after)."""
    peel = pytest.importorskip("opendp_wgm.engines._peel_jit")
    pytest.importorskip("pyarrow")
    words = ["", "a", "abc", "abcd", "abce", "abcde", "abcdefgh", "abcdefghijk", "abcdefghijkl", "abcdefghijkm",
             "abcdefghijklm", "é日"]
    views = kernel.string_views(pl.Series(words))
    assert views is not None
    table = peel.view_table(views, 6)
    dirty = views.copy()
    raw = dirty.view(np.uint8).reshape(-1, 16)
    for row, word in enumerate(words):
        size = len(word.encode())
        if size <= 12:
            raw[row, 4 + size :] = 0xA5  # bytes past the string
        else:
            raw[row, 8:] = 0x3C  # buffer index and offset
    out, unsure = np.empty(len(words), dtype=np.int32), np.empty(len(words), dtype=np.int32)
    found = peel.view_positions(dirty, 0, len(words), *table, out, 0, unsure)
    expected = [-2 if len(word.encode()) > 12 else j for j, word in enumerate(words)]
    assert out.tolist() == expected and found == 1 and unsure[0] == words.index("abcdefghijklm")


@pytest.mark.parametrize("views", [True, False], ids=["views", "cast"])
@pytest.mark.parametrize("threads", [1, 3])
def test_keyed_routes_runs_with_users_holding_no_candidate(monkeypatch, threads: int, views: bool) -> None:
    """The runs path's slices are cut at users' boundaries, each deduplicated on its own lookup, and their pairs
    joined into one int32 array: the CSR is the frozen path's with users holding no candidate at the ends of the
    slices and a user holding most rows (a slice of no user), candidates in a range's first and last user."""
    pytest.importorskip("numba")
    patch_engine(monkeypatch, "mostly_above", lambda *args: True)  # the keyed route
    patch_engine(monkeypatch, "kernel_threads", lambda rows, jit: threads)
    if not views:  # the Enum cast, in slices (no pyarrow)
        patch_engine(monkeypatch, "string_views", lambda column: None)
    base = data(n_users=120, seed=4)
    big = pl.DataFrame({"user": ["big"] * 2000, "item": [f"i{x % 70}" for x in range(2000)]})
    number = pl.col("user").str.slice(1).cast(pl.Int64)
    frame = pl.concat([base.filter(number < 30), big, base.filter(number >= 30)])  # users: one run each
    space = _resolve_space(*wgm.user_items_space())
    shared = kernel.collect_once(_prepare_frame(frame, space), passes=1, engine="auto")
    lf = shared.lf
    kernel_histogram("auto", kernel.BoundedLists(lf, space, 6, (1, 2, 3, 4), shared=shared), 6)
    assert _prepared._shared_runs(shared) is not None
    for names in (["i3", "i5", "absent"], ["i1", "i2", "i69"], ["absent"]):
        items = kernel.cast_candidates(pl.Series("item", names), pl.String)
        pairs = _candidates._run_candidate_pairs(shared, space, items)
        assert pairs is not None and pairs.positions.dtype == np.int32
        offsets, positions = pairs.user_offsets(), pairs.positions
        assert offsets[0] == 0 and offsets[-1] == positions.size and np.all(np.diff(offsets) > 0)
        users = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
        old_users, old_positions = _frozen_candidate_pairs(lf, space, items)
        assert _pair_set(frame, users, positions, items) == _pair_set(frame, old_users, old_positions, items)
        counts = np.bincount(old_positions, minlength=len(names))
        assert kernel.item_counts(shared, space, items).tolist() == counts.tolist()


@pytest.mark.parametrize("shape", list(shapes()))
@pytest.mark.parametrize("make", [make_wgm_top_k, make_wgm_hitting_set])
@pytest.mark.parametrize(
    "options",
    [dict(k=5, wgm_threshold=1.0), dict(k=40, wgm_threshold=1.0), dict(k=5, wgm_threshold=1e9)],
    ids=["candidates", "fewer-than-k", "none"],
)
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "item-keys"])
def test_stage_2_on_the_keyed_routes_runs_releases_what_the_polars_path_releases(
    fixed_randomness, monkeypatch, shape: str, make, options: dict, keyed: bool
) -> None:
    """For fixed randomness, stage 2 on the users' runs the WGM's route on runs found (its rows keyed by the
    bound's key, imdb_50k's; or by their items, a large Zipf frame's) releases what the Polars plans release
    (without the runs, and without Numba), in one thread or in three."""
    pytest.importorskip("numba")
    patch_engine(monkeypatch, "mostly_above", lambda *args: keyed)
    monkeypatch.setattr(kernel_plans, "_LARGE_ROWS", 0)  # the route on runs on every frame whose users are runs
    frame = shapes()[shape]
    read: list[bool] = []
    original = _prepared._shared_runs
    patch_engine(monkeypatch, "_shared_runs", lambda lf: read.append(original(lf) is not None) or original(lf))
    paths = {
        "the keyed route's runs": {},
        "in three threads": {"kernel_threads": lambda rows, jit: 3},
        "polars, no shared runs": {"_shared_runs": lambda lf: None},
        "polars, no numba": {"numba": "absent"},
    }
    releases = _releases_on_paths(fixed_randomness, monkeypatch, frame, make, options, paths)
    if options["wgm_threshold"] < 1e9:
        assert releases[0].height == min(options["k"], releases[0].height) > 0
        assert read[0] is (shape in KEYED_RUNS or shape == "categorical items")  # the first release read the runs
    for released in releases[1:]:
        assert released.equals(releases[0])


@pytest.mark.parametrize("make", [make_wgm_top_k, make_wgm_hitting_set])
def test_stage_2_reads_the_keyed_routes_runs_not_the_users_again(monkeypatch, make) -> None:
    """Where the WGM's keyed route found each user's rows in one run (imdb_50k), stage 2 reads those runs: the
    candidates' rows (user column included) are not filtered out of the frame and their users not run again
    (they were: :func:`_candidates._candidate_rows`, then :func:`_compiled_steps._user_runs` on them)."""
    pytest.importorskip("numba")

    def no_read(*_args):
        raise AssertionError("stage 2 read the users' rows again")

    patch_engine(monkeypatch, "mostly_above", lambda *args: True)
    patch_engine(monkeypatch, "_candidate_rows", no_read)
    frame = shapes()["adjacent string users"]
    m = make(*wgm.user_items_space(), k=5, max_contributions=6, wgm_scale=0.5, wgm_threshold=1.0, peel_scale=0.5)
    assert m(frame).height == 5


@pytest.mark.parametrize("n_users", [0, 1, 200])
def test_item_index_of_offsets_is_the_polars_group_by(monkeypatch, n_users: int) -> None:
    """User peeling's item -> holders index from CSR offsets (the compiled counting sort that reads the users from
    the offsets) is the stable group-by by item of the path without Numba, and the old compiled sort's."""
    from opendp_wgm.measurements._user_items import csr_of_offsets

    pytest.importorskip("numba")
    rng = np.random.default_rng(5)  # test data only
    lengths = rng.integers(1, 9, n_users)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    items = np.concatenate([rng.choice(30, n, replace=False) for n in lengths] or [[]]).astype(np.int64)
    compiled = csr_of_offsets(offsets, items, 30, item_index=True)
    users = np.repeat(np.arange(n_users, dtype=np.int64), lengths)
    old_users, old_offsets = kernel.kernel_jit().items_by_user(items, users, 30)
    with without_numba():
        polars = csr_of_offsets(offsets, items, 30, item_index=True)
    for other_users, other_offsets in ((polars.item_users, polars.item_offsets), (old_users, old_offsets)):
        assert np.array_equal(compiled.item_users, other_users) and np.array_equal(compiled.item_offsets, other_offsets)
