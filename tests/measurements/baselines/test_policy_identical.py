"""Policy Gaussian's faster paths give the release of the code they replaced, bit for bit, for fixed randomness.

The pre-change implementations (per-user NumPy loop, row-level CSR; the list-level CSR preparation) are kept
frozen here. Compared: the ℓ2 weights on the same CSR (compiled Numba loop when installed, and the NumPy
fallback), the CSR arrays of every preparation path (same users in the same order, same kept items), and the
histogram that reaches the noise (same seeds) end to end.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
import opendp_wgm.engines.polars as engine
from opendp_wgm._spaces import _prepare_frame, _Space, _value_key
from opendp_wgm.measurements._user_items import user_item_csr
from opendp_wgm.measurements.baselines import _policy_csr as policy_csr
from opendp_wgm.measurements.baselines import _policy_weights as policy_weights
from opendp_wgm.measurements.baselines import policy as bl
from tests.engine_modules import patch_engine

U = 2**20
SEEDS = (5, 6, 7, 8)
SPACE = _Space("user", "item", None, lazyframe_domain=False)


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")


# ------------------------------------------------------------------------------------------------------
# the implementation before the change, frozen
# ------------------------------------------------------------------------------------------------------
def _frozen_l2_weights(codes: np.ndarray, offsets: np.ndarray, n_codes: int, cap: int) -> np.ndarray:
    weights = np.zeros(n_codes, dtype=np.int64)
    for start, end in itertools.pairwise(offsets.tolist()):
        idx = codes[start:end]
        current = weights[idx]
        candidates = current < cap
        if not candidates.all():
            if not candidates.any():
                continue
            idx, current = idx[candidates], current[candidates]
        gap = (cap - current).astype(np.float64)
        z = math.sqrt(float(gap @ gap))
        increment = cap - current if z <= U else np.floor(gap * (U / z)).astype(np.int64)
        while int(increment @ increment) > U * U:
            increment = np.maximum(increment - 1, 0)
        weights[idx] = current + increment
    return weights


def _frozen_histogram(frame: pl.DataFrame, max_contributions: int, cap: int) -> pl.DataFrame:
    """The old ``_csr`` (row-level codes, rows sorted by the user's hash) and loop, then the positive weights."""
    lf = engine.bound_plan(_prepare_frame(frame, SPACE), SPACE, max_contributions, SEEDS)
    schema = lf.collect_schema()
    u = pl.col("user")
    u = u.cast(pl.Categorical).to_physical() if schema["user"] == pl.String else u
    x = (
        pl.col("item").cast(pl.Categorical).to_physical().cast(pl.Int64)
        if schema["item"] == pl.String
        else pl.col("item").rank("dense").cast(pl.Int64) - 1
    )
    h = _value_key("user", schema["user"]).hash(*SEEDS)
    coded = lf.select(_u=u, _x=x, _value=pl.col("item"), _h=h)
    rows = coded.select("_u", "_x", "_h").sort("_h", "_u").collect()
    dictionary = coded.select("_x", "_value").unique(subset="_x").collect()
    codes = rows["_x"].to_numpy().astype(np.int64)
    csr = user_item_csr(rows["_u"].to_numpy(), codes, int(codes.max()) + 1)
    weights = _frozen_l2_weights(codes, csr.offsets, csr.n_items, cap)
    positive = np.flatnonzero(weights > 0)
    table = pl.DataFrame({"_x": positive, "weight_lat": weights[positive]})
    return table.join(dictionary, on="_x").select(pl.col("_value").alias("item"), "weight_lat").sort("item")


def _frozen_bounded_csr(frame: pl.DataFrame, max_contributions: int) -> policy_csr._UserItems:
    """The list-level ``_bounded_csr`` before the hashed (Numba) preparation: lists sorted by the user's hash."""
    lf = _prepare_frame(frame, SPACE)
    lists = engine.bounded_lists_plan(lf, SPACE, max_contributions, SEEDS)
    order = _value_key("user", lf.collect_schema()["user"]).hash(*SEEDS)
    column = lists.sort(order, "user").select("item").collect()["item"]
    offsets = np.concatenate(([0], np.cumsum(column.list.len().to_numpy()))).astype(np.int64)
    values = column.explode()
    codes = policy_csr._dense_codes(values) if values.dtype.is_integer() and values.len() else None
    if codes is None:
        codes = values.to_frame().select(policy_csr._item_codes("item", values.dtype)[0])["item"].to_numpy()
    codes = codes.astype(np.int64, copy=False)
    row_of = np.zeros(int(codes.max()) + 1 if codes.size else 1, dtype=np.int64)
    row_of[codes] = np.arange(codes.size)
    return policy_csr._coded(codes, offsets, values, row_of)


# ------------------------------------------------------------------------------------------------------
# the loop
# ------------------------------------------------------------------------------------------------------
def _random_csr(seed: int, n_users: int, n_codes: int, longest: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, min(longest, n_codes) + 1, n_users)
    codes = np.concatenate([rng.choice(n_codes, size, replace=False) for size in sizes]).astype(np.int64)
    return codes, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def _hard_users(n_codes: int) -> tuple[np.ndarray, np.ndarray]:
    """Fresh users of 4 and 16 items: at Γ = 64 every increment is exactly 2^19 (2^18) before rounding, the
    case where the compiled loop cannot decide and hands the user to NumPy."""
    sizes = [4, 16, 4, 16]
    codes = np.arange(sum(sizes), dtype=np.int64) % n_codes
    return codes, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


@pytest.fixture(params=["numba", "numpy"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numba":
        pytest.importorskip("numba")
        assert policy_weights._l2_kernel() is not None
        monkeypatch.setattr(policy_weights, "_JIT_MIN_USERS", 0)  # the compiled loop even for these few users
    else:
        monkeypatch.setattr(policy_weights, "_l2_kernel", lambda: None)
    return str(request.param)


@pytest.mark.parametrize("cap_real", [0.3, 2.0, 32.44216, 64.0, 100.5, 5000.25])
@pytest.mark.parametrize(("n_codes", "longest"), [(40, 40), (3000, 150)])
def test_l2_weights_identical_to_the_frozen_loop(kernel: str, cap_real: float, n_codes: int, longest: int) -> None:
    cap = math.floor(cap_real * U)
    codes, offsets = _random_csr(int(cap_real * 10) + n_codes, 1500, n_codes, longest)
    hard_codes, hard_offsets = _hard_users(n_codes)
    codes = np.concatenate((hard_codes, codes))
    offsets = np.concatenate((hard_offsets, offsets[1:] + hard_offsets[-1]))
    data = policy_csr._UserItems(codes, offsets, n_codes, lambda c: pl.Series("item", c))
    got = policy_weights._policy_weights(data, cap, "l2")
    expected = _frozen_l2_weights(codes, offsets, n_codes, cap)
    assert np.array_equal(got, expected)
    if n_codes == 40 and cap_real < 100:
        assert (expected >= cap).any()  # the cap is reached: users skip items


def test_compiled_loop_hands_undecidable_users_to_numpy() -> None:
    pytest.importorskip("numba")
    kernel = policy_weights._l2_kernel()
    assert kernel is not None
    codes, offsets = _hard_users(100)
    weights = np.zeros(100, dtype=np.int64)
    assert kernel(codes, offsets, weights, 64 * U, U, 0) == 0  # user 0 is not applied
    assert not weights.any()
    easy = np.zeros(100, dtype=np.int64)
    assert kernel(codes[:4], offsets[:2], easy, 32 * U, U, 0) == 1  # exact sums: decided
    assert easy[:4].tolist() == [U // 2] * 4


# ------------------------------------------------------------------------------------------------------
# end to end: the histogram that reaches the noise
# ------------------------------------------------------------------------------------------------------
def _zipf_frame(items_as: str) -> pl.DataFrame:
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 60, 400)
    users = np.repeat(np.arange(sizes.size), sizes)
    items = rng.zipf(1.3, users.size) % 500
    df = pl.DataFrame({"user": users, "item": items})
    if items_as == "wide int":  # codes by rank, not by offset from the minimum
        df = df.with_columns(pl.col("item") * 10**12 - 7)
    if items_as == "str":
        df = df.with_columns(pl.format("u{}", "user"), pl.format("w{}", "item"))
    return df


def _histograms(frame: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The histogram that reaches the noise in a release of ``frame`` (Δ0 = 20, seeds :data:`SEEDS`), sorted by
    item, and the frozen code's."""
    patch_engine(monkeypatch, "fresh_seeds", lambda: SEEDS)
    monkeypatch.setattr(policy_csr, "fresh_seeds", lambda: SEEDS)
    seen: list[pl.DataFrame] = []

    def capture(histogram: pl.DataFrame, item: str, **_: object) -> pl.DataFrame:
        seen.append(histogram)
        return histogram

    monkeypatch.setattr(bl, "release_above_threshold", capture)
    scale, threshold = 3.884141, 20.78976
    m = bl.make_policy_gaussian(*wgm.user_items_space(), max_contributions=20, scale=scale, threshold=threshold)
    m(frame)
    return seen[0].sort("item"), _frozen_histogram(frame, 20, policy_weights._cap_on_lattice(threshold + 3 * scale))


@pytest.mark.parametrize("items_as", ["int", "wide int", "str"])
def test_policy_gaussian_histogram_identical_to_the_frozen_code(
    kernel: str, items_as: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, expected = _histograms(_zipf_frame(items_as), monkeypatch)
    assert got.equals(expected)
    assert expected.height > 100 and (expected["weight_lat"] > 30 * U).sum() >= 3  # near the cap


# ------------------------------------------------------------------------------------------------------
# the preparation: every path against the frozen list-level one
# ------------------------------------------------------------------------------------------------------
def _users_frame(shape: str) -> pl.DataFrame:
    """Users of 1 to 90 rows (repeats included) at Δ0 = 20: many above Δ0, many below."""
    rng = np.random.default_rng(11)
    sizes = np.concatenate((rng.integers(1, 15, 150), rng.integers(15, 90, 150)))
    users = np.repeat(rng.permutation(sizes.size) * 7 - 300, sizes)  # unsorted, negative ids too
    items = rng.zipf(1.4, users.size) % 400
    df = pl.DataFrame({"user": users, "item": items})
    if shape in ("wide int", "shuffled wide int"):  # codes by hash table (Numba) or rank, not by offset
        df = df.with_columns(pl.col("item") * 10**12 - 7)
    if shape in ("str", "shuffled str", "categorical", "chunked str", "shuffled chunked str"):
        df = df.with_columns(pl.format("u{}", "user"), pl.format("w{}", "item"))
    if shape in ("long str", "shuffled long str"):  # strings of 13 to 15 bytes: a few lengths, one 4-byte prefix
        df = df.with_columns(pl.format("u{}", "user"), pl.format("word{}", pl.col("item") * 1_000_003 % 10**9 + 10**8))
    if shape == "mixed str":  # short and long strings, long ones sharing a length and prefix with others
        df = df.with_columns(pl.format("u{}", "user"), pl.format("w{}", pl.col("item").cast(pl.Int64) ** 5))
    if shape == "categorical":
        df = df.with_columns(pl.col("item").cast(pl.Categorical))
    if shape.startswith("shuffled"):  # a user's rows are not contiguous
        df = df.sample(fraction=1.0, shuffle=True, seed=3)
    if shape.endswith("chunked str"):  # several chunks of String views, users' rows across the boundaries
        df = pl.concat([df.slice(0, 301), df.slice(301, 999), df.slice(1300)], rechunk=False)
    return df


def _segments(data: policy_csr._UserItems) -> list[list[object]]:
    return [data.decode(data.codes[a:b]).to_list() for a, b in itertools.pairwise(data.offsets.tolist())]


@pytest.fixture(params=["hashed", "polars, hash-coded", "no numba"])
def preparation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The preparation paths: the compiled one (most users above Δ0), Polars lists coded by the compiled hash
    table, and everything without Numba. The first two run on these small frames only with the threshold at 0."""
    patch_engine(monkeypatch, "fresh_seeds", lambda: SEEDS)
    monkeypatch.setattr(policy_csr, "fresh_seeds", lambda: SEEDS)
    if request.param == "no numba":
        monkeypatch.setattr(policy_csr, "_jit", lambda: None)
        monkeypatch.setattr(policy_csr, "_numba_installed", lambda: False)
        return str(request.param)
    pytest.importorskip("numba")
    monkeypatch.setattr(policy_csr, "_JIT_MIN_ROWS", 0)
    monkeypatch.setattr(policy_csr, "mostly_above", lambda *_: request.param == "hashed")
    return str(request.param)


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape", ["int", "wide int", "str", "shuffled str", "shuffled wide int", "long str", "mixed str", "categorical"]
)
def test_preparation_identical_to_the_frozen_lists(preparation: str, shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = _users_frame(shape)
    built: list[bool] = []  # whether the compiled preparation ran, and vouched for its arrays
    hashed = policy_csr._hashed_csr
    monkeypatch.setattr(policy_csr, "_hashed_csr", lambda *a: built.append(hashed(*a) is not None) or hashed(*a))
    got = policy_csr._csr(frame, SPACE, max_contributions=20, key_order=False, priority_order=False)
    expected = _frozen_bounded_csr(frame, 20)
    assert built == ([True] if preparation == "hashed" else [])
    assert np.array_equal(got.offsets, expected.offsets)  # same users, same order, same list lengths
    got_segments, expected_segments = _segments(got), _segments(expected)
    assert [sorted(s) for s in got_segments] == [sorted(s) for s in expected_segments]  # same kept items
    assert (np.diff(got.offsets) == 20).sum() > 50 and (np.diff(got.offsets) < 20).sum() > 50  # above and below Δ0
    if preparation == "hashed":  # a user's items in ascending key: the order of the keyed plan
        keyed = engine.bounded_lists_plan(_prepare_frame(frame, SPACE), SPACE, 20, SEEDS, plan="keyed").collect()
        order = _value_key("user", keyed.schema["user"]).hash(*SEEDS)
        assert got_segments == keyed.sort(order)["item"].to_list()
    cap = policy_weights._cap_on_lattice(32.44)
    weights = policy_weights._positive_histogram(got, policy_weights._policy_weights(got, cap, "l2"), "item")
    assert weights.equals(policy_weights._positive_histogram(expected, policy_weights._policy_weights(expected, cap, "l2"), "item"))


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize(
    "shape",
    ["int", "wide int", "str", "long str", "mixed str", "shuffled long str", "categorical", "chunked str",
     "shuffled chunked str"],
)
def test_hashed_preparation_identical_in_threads(threads: int, shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled preparation in 1 and 3 threads: the keyed plan's lists, users and items in its order, and the
    codes of one sequential pass (first appearance in the arrays), Strings told apart by their views (long ones
    sharing a length and 4-byte prefix compared whole)."""
    pytest.importorskip("numba")
    patch_engine(monkeypatch, "fresh_seeds", lambda: SEEDS)
    monkeypatch.setattr(policy_csr, "fresh_seeds", lambda: SEEDS)
    monkeypatch.setattr(policy_csr, "_JIT_MIN_ROWS", 0)
    monkeypatch.setattr(policy_csr, "mostly_above", lambda *_: True)
    monkeypatch.setattr(policy_csr, "kernel_threads", lambda *_: threads)
    frame = _users_frame(shape)
    if shape.endswith("chunked str"):
        assert frame["item"].n_chunks() == 3
        if shape == "chunked str":  # a user's run across each boundary: its views joined from two chunks
            assert frame["user"][300] == frame["user"][301] and frame["user"][1299] == frame["user"][1300]
    built: list[bool] = []
    hashed = policy_csr._hashed_csr
    monkeypatch.setattr(policy_csr, "_hashed_csr", lambda *a: built.append(hashed(*a) is not None) or hashed(*a))
    got = policy_csr._csr(frame, SPACE, max_contributions=20, key_order=False, priority_order=False)
    assert built == [True]
    keyed = engine.bounded_lists_plan(_prepare_frame(frame, SPACE), SPACE, 20, SEEDS, plan="keyed").collect()
    lists = keyed.sort(_value_key("user", keyed.schema["user"]).hash(*SEEDS))["item"]
    assert _segments(got) == lists.to_list()
    values = lists.explode()
    first = values.is_first_distinct()
    # codes in order of first appearance: a value's code is the number of distinct values before its first row
    assert np.array_equal(got.codes, np.cumsum(first.to_numpy())[_first_row(values)] - 1)
    assert got.n_codes == int(first.sum())
    if shape in ("long str", "mixed str", "shuffled long str"):  # long strings that share a length and prefix
        long = values.unique().filter(values.unique().str.len_bytes() > 12)
        assert long.len() > long.str.slice(0, 4).n_unique()


def _first_row(values: pl.Series) -> np.ndarray:
    """The row of each value's first appearance, for every row."""
    rows = pl.DataFrame({"v": values, "r": np.arange(values.len())})
    return rows.select(pl.col("r").min().over("v")).to_series().to_numpy()


def test_preparation_of_an_empty_frame(preparation: str) -> None:
    for frame in (_users_frame("int").head(0), _users_frame("str").head(0)):
        got = policy_csr._csr(frame, SPACE, max_contributions=20, key_order=False, priority_order=False)
        assert got.offsets.tolist() == [0] and got.codes.size == 0 and got.n_codes == 0


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["str", "long str", "wide int"])
def test_hashed_preparation_falls_back_when_the_values_disagree(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrays the values do not vouch for (two users or two items taken as one: a hash collision) are dropped for
    the Polars lists; simulated by a kernel that merges users, then by items that all hash alike: short Strings
    are told apart by their views, longer ones sharing length and prefix by the pairs compared whole, other
    dtypes by comparing every kept row."""
    pytest.importorskip("numba")
    patch_engine(monkeypatch, "fresh_seeds", lambda: SEEDS)
    monkeypatch.setattr(policy_csr, "fresh_seeds", lambda: SEEDS)
    monkeypatch.setattr(policy_csr, "_JIT_MIN_ROWS", 0)
    monkeypatch.setattr(policy_csr, "mostly_above", lambda *_: True)
    kernel = policy_csr._bounded_kernel()
    assert kernel is not None
    frame = _users_frame(shape)
    expected = _frozen_bounded_csr(frame, 20)
    order = _value_key("user", frame.schema["user"]).hash(*SEEDS)
    assert policy_csr._hashed_csr(_prepare_frame(frame, SPACE), SPACE, 20, SEEDS, order) is not None
    for corrupt in ("user", "item"):

        def wrong(run_start, run_hash, key, words, *rest, corrupt: str = corrupt):  # type: ignore[no-untyped-def]
            if corrupt == "item":  # every item one hash
                return kernel(run_start, run_hash, key, np.zeros_like(words), *rest)
            data = kernel(run_start, run_hash, key, words, *rest)
            return replace(data, same_user=np.zeros_like(data.same_user))  # every run taken as the first user

        monkeypatch.setattr(policy_csr, "_bounded_kernel", lambda wrong=wrong: wrong)
        assert policy_csr._hashed_csr(_prepare_frame(frame, SPACE), SPACE, 20, SEEDS, order) is None
        got = policy_csr._csr(frame, SPACE, max_contributions=20, key_order=False, priority_order=False)
        assert np.array_equal(got.offsets, expected.offsets)
        assert [sorted(s) for s in _segments(got)] == [sorted(s) for s in _segments(expected)]


def test_hash_coding_falls_back_on_a_collision(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numba")
    monkeypatch.setattr(policy_csr, "_JIT_MIN_ROWS", 0)
    values = pl.Series("item", ["b", "a", "b", "c", "a"])
    codes, row_of = policy_csr._value_codes(values, "item")
    assert values.gather(row_of[codes]).equals(values) and codes.max() == 2
    # a hash under which "a" and "c" collide: the check against the values sends it to Polars' coding
    monkeypatch.setattr(pl.Series, "hash", lambda self, *_: (self == "b").cast(pl.UInt64))
    codes, row_of = policy_csr._value_codes(values, "item")
    assert values.gather(row_of[codes]).equals(values) and codes.max() == 2


def test_histogram_rows_in_item_order_not_code_order() -> None:
    """The noise is drawn row by row: the rows that reach it are in item order, so which item gets which draw
    does not depend on the codes (a relabelling: first appearance, a string dictionary, a hash table)."""
    values = pl.Series("item", ["w", "b", "k", "a"])
    data = policy_csr._UserItems(np.array([0, 1, 2, 3]), np.array([0, 2, 4]), 4, values.gather)
    histogram = policy_weights._positive_histogram(data, np.array([5, 0, 7, 9]), "item")
    assert histogram["item"].to_list() == ["a", "k", "w"]
    assert histogram["weight_lat"].to_list() == [9, 7, 5]


# ------------------------------------------------------------------------------------------------------
# the compiled preparation against the straightforward code, end to end, on shapes that stress it
# ------------------------------------------------------------------------------------------------------
def _shape_frame(shape: str) -> pl.DataFrame:
    """Users at Δ0 = 20 in shapes the compiled preparation handles separately."""
    rng = np.random.default_rng(17)
    if shape == "at the bound":  # 19, 20 and 21 distinct items: one below, at and just above Δ0
        sizes = np.tile([19, 20, 21], 60)
        users = np.repeat(np.arange(sizes.size), sizes)
        items = np.concatenate([rng.choice(300, size, replace=False) for size in sizes])
    else:
        sizes = rng.integers(1, 10, 200) if shape == "all below" else rng.integers(1, 90, 200)
        users = np.repeat(np.arange(sizes.size), sizes)
        items = rng.zipf(1.4, users.size) % 400
    df = pl.DataFrame({"user": users, "item": items})
    if shape == "duplicates":  # every row three times, a user's rows shuffled among themselves
        df = pl.concat([df, df, df]).sample(fraction=1.0, shuffle=True, seed=5).sort("user", maintain_order=True)
    if shape == "split runs":  # a user's rows in two runs: the first half of the frame, then the second
        half = df.with_row_index("_r").with_columns(_late=pl.col("_r") % 2 == 1)
        df = half.sort("_late", maintain_order=True).drop("_r", "_late")
    if shape in ("str", "duplicates"):
        df = df.with_columns(pl.format("user {}", "user"), pl.format("word-{}", "item"))
    return df


@pytest.mark.parametrize("shape", ["int", "str", "duplicates", "at the bound", "split runs", "all below"])
def test_compiled_preparation_releases_what_the_straightforward_code_releases(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For fixed seeds, the histogram that reaches the noise (hence the release, for the same noise) is the
    row-level code's, when the compiled preparation builds the arrays."""
    pytest.importorskip("numba")
    monkeypatch.setattr(policy_csr, "_JIT_MIN_ROWS", 0)
    monkeypatch.setattr(policy_csr, "mostly_above", lambda *_: True)
    built: list[bool] = []
    hashed = policy_csr._hashed_csr
    monkeypatch.setattr(policy_csr, "_hashed_csr", lambda *a: built.append(hashed(*a) is not None) or hashed(*a))
    frame = _shape_frame(shape)
    got, expected = _histograms(frame, monkeypatch)
    assert built == [True]
    assert got.equals(expected)
    sizes = frame.group_by("user").agg(pl.col("item").n_unique())["item"]
    assert (sizes > 20).any() == (shape != "all below") and (sizes <= 20).any()


@pytest.mark.parametrize(("d", "k"), [(0, 5), (1, 5), (2, 1), (7, 100), (100, 100), (180, 100), (2473, 100), (500, 1)])
def test_smallest_sorted_is_the_sorted_prefix(d: int, k: int) -> None:
    pytest.importorskip("numba")
    from opendp_wgm.measurements.baselines import _policy_jit

    rng = np.random.default_rng(d + k)
    uniform = rng.permutation(np.unique(rng.integers(0, 2**64, d + 10, dtype=np.uint64)))[:d]
    skewed = rng.permutation(np.arange(d, dtype=np.uint64) * 3)  # every key in the first bucket
    for keys in (uniform, skewed):
        rows = np.arange(d, dtype=np.int64) + 1000
        out_keys, out_rows = np.empty(max(d, 1), dtype=np.uint64), np.empty(max(d, 1), dtype=np.int64)
        count = np.empty(2 * max(d, 1) + 2, dtype=np.int64)
        m = _policy_jit._smallest_sorted(keys.copy(), rows, d, k, count, out_keys, out_rows)
        expected = np.argsort(keys, kind="stable")[: min(d, k)]
        assert m == min(d, k)
        assert np.array_equal(out_keys[:m], keys[expected]) and np.array_equal(out_rows[:m], rows[expected])
