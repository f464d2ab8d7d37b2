"""Tests for `opendp_wgm.metrics`: oracle values of the paper's reference code, properties, errors, input handling."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from opendp_wgm.metrics import (
    Truth,
    captured_mass,
    cardinality,
    coverage,
    linf_missing_mass,
    missed_users,
    missing_mass,
    top_k_l1_loss,
    top_k_missing_mass,
)


def frame(lists: list[list[object]], *, user: str = "user", item: str = "item") -> pl.DataFrame:
    """User i holds lists[i] (one row per element, duplicates kept)."""
    return pl.DataFrame({user: list(range(len(lists))), item: lists}).explode(item)


FIVE = [[1, 2, 3], [1, 2, 4], [5], [1, 5, 6], [7, 8]]  # M = 12, counts 1:3, 2:2, 5:2, others 1


# ---------------------------------------------------------------------------------------------------------
# oracle values of the paper's reference code
# ---------------------------------------------------------------------------------------------------------
class TestOracles:
    def test_captured_mass_all_and_none(self) -> None:
        df = frame(FIVE)
        assert captured_mass(df, range(1, 9)) == pytest.approx(1.0)
        assert captured_mass(df, []) == 0.0
        assert missing_mass(df, range(1, 9)) == 0.0
        assert missing_mass(df, []) == pytest.approx(1.0)

    @pytest.mark.parametrize(("released", "expected"), [({10}, 1 / 15), ({1, 2, 4, 5}, 9 / 15)])
    def test_captured_mass_m15(self, released: set[int], expected: float) -> None:
        df = frame([[1, 2, 3], [1, 2, 4], [5, 10, 11], [1, 5, 6], [7, 8, 5]])
        assert captured_mass(df, released) == pytest.approx(expected)
        assert missing_mass(df, released) == pytest.approx(1 - expected)

    @pytest.mark.parametrize(("released", "expected"), [([1, 2, 5], 0.0), ([1, 2, 6], 1 / 12), ([1], 4 / 12)])
    def test_top_k_missing_mass(self, released: list[int], expected: float) -> None:
        assert top_k_missing_mass(frame(FIVE), released, 3) == pytest.approx(expected)

    @pytest.mark.parametrize(
        ("released", "sorted_loss", "output_loss"),
        [([1, 2, 5], 0.0, 0.0), ([2, 1, 5], 0.0, 2.0), ([2], 5.0, 5.0)],
    )
    def test_top_k_l1_loss(self, released: list[int], sorted_loss: float, output_loss: float) -> None:
        df = frame(FIVE)
        assert top_k_l1_loss(df, released, 3) == sorted_loss
        assert top_k_l1_loss(df, released, 3, order="sorted") == sorted_loss
        assert top_k_l1_loss(df, released, 3, order="output") == output_loss

    def test_missed_users(self) -> None:
        lists = [[1, 2, 3], [1, 2, 4], [1, 5], [6, 7], [8, 9], [5, 3, 2]]
        assert missed_users(frame(lists), {1, 6}) == 2
        assert missed_users(frame(lists[:4]), {1, 6}) == 0
        assert coverage(frame(lists), {1, 6}) == pytest.approx(1 - 2 / 6)
        assert coverage(frame(lists[:4]), {1, 6}) == 1.0

    def test_count_hist_oracle_through_linf(self) -> None:
        # count_hist oracle: 1:4, 2:3, 5:3, 9:3, ...; the largest missed count follows it.
        lists = [[1, 2, 9, 3, 4, 5], [1, 2, 4], [1, 2, 3], [5, 6], [5, 6, 9, 10, 1, 11], [7], [8, 9, 10, 11]]
        df = frame(lists)
        assert linf_missing_mass(df, []) == 4.0
        assert linf_missing_mass(df, [1]) == 3.0
        assert linf_missing_mass(df, [1, 2, 5, 9]) == 2.0
        assert linf_missing_mass(df, [1], normalize=True) == pytest.approx(3 / 7)
        assert linf_missing_mass(df, range(1, 12)) == 0.0


# ---------------------------------------------------------------------------------------------------------
# specific behaviour
# ---------------------------------------------------------------------------------------------------------
class TestBehaviour:
    def test_duplicates_inside_a_user_count_once(self) -> None:
        df = frame([[1, 1, 3], [2, 2, 2], [1, 2, 3]])  # counts 1:2, 2:2, 3:2, M = 6
        assert captured_mass(df, [1]) == pytest.approx(2 / 6)
        assert linf_missing_mass(df, [1, 2]) == 2.0
        assert top_k_l1_loss(df, [2], 1) == 0.0

    def test_duplicates_in_released_count_once(self) -> None:
        df = frame(FIVE)
        assert captured_mass(df, [1, 1, 1]) == captured_mass(df, [1])
        assert cardinality([1, 1, 2]) == 2
        assert top_k_missing_mass(df, [1, 1, 2, 2, 5], 3) == 0.0  # 3 distinct items <= k
        assert top_k_l1_loss(df, [2, 2, 1, 5], 3, order="output") == 2.0  # first occurrence keeps its place

    def test_unknown_released_items_count_zero(self) -> None:
        df = frame(FIVE)
        assert captured_mass(df, [99, 100]) == 0.0
        assert top_k_l1_loss(df, [99], 3) == 7.0  # |3 - 0| + 2 + 2

    def test_top_k_larger_than_domain(self) -> None:
        df = frame([[1, 2], [1]])  # counts 1:2, 2:1, M = 3; the reference raises IndexError (B7)
        assert top_k_missing_mass(df, [1], 10) == pytest.approx(1 / 3)
        assert top_k_missing_mass(df, [1, 2], 10) == 0.0
        assert top_k_l1_loss(df, [1, 2], 10) == 0.0
        assert top_k_l1_loss(df, [2], 10) == 2.0  # |2 - 1| + |1 - 0|

    def test_cardinality_inputs(self) -> None:
        assert cardinality([]) == 0
        assert cardinality(pl.Series(["a", "b", "a"])) == 2
        assert cardinality(pl.DataFrame({"item": [1, 2, 3], "w": [0.1, 0.2, 0.3]})) == 3
        assert cardinality(pl.DataFrame({"word": ["x"]}), item="word") == 1
        assert cardinality(np.array([3, 3, 4])) == 2
        assert cardinality(x for x in "abca") == 3

    def test_custom_column_names(self) -> None:
        df = frame(FIVE, user="u", item="x")
        released = pl.DataFrame({"x": [1, 2, 5]})
        assert top_k_missing_mass(df, released, 3, user="u", item="x") == 0.0
        assert missed_users(df, released, user="u", item="x") == 1

    def test_n_users_override(self) -> None:
        df = frame(FIVE)
        assert missed_users(df, [1], n_users=7) == 4
        assert coverage(df, [1], n_users=6) == pytest.approx(0.5)

    def test_dtype_alignment(self) -> None:
        ints32 = frame(FIVE).with_columns(pl.col("item").cast(pl.Int32))
        assert captured_mass(ints32, [1]) == pytest.approx(3 / 12)
        assert captured_mass(ints32, pl.Series([1], dtype=pl.UInt64)) == pytest.approx(3 / 12)
        assert captured_mass(ints32, [1, 2**40]) == pytest.approx(3 / 12)  # out of Int32 range: counts 0
        assert captured_mass(ints32, [1.0]) == pytest.approx(3 / 12)
        assert captured_mass(ints32, [1.5]) == 0.0  # no truncation to 1
        big = pl.DataFrame({"user": [0, 1], "item": pl.Series([2**63 + 1, 2**63 + 2], dtype=pl.UInt64)})
        assert captured_mass(big, [2**63 + 1]) == 0.5
        words = pl.DataFrame({"user": [0, 0, 1], "item": ["a", "b", "a"]})
        for dtype in (pl.Categorical, pl.Enum(["a", "b", "c"])):
            cat = words.with_columns(pl.col("item").cast(dtype))
            assert captured_mass(cat, ["a", "zzz"]) == pytest.approx(2 / 3)
            assert top_k_l1_loss(cat, ["b"], 1) == 1.0

    def test_input_kinds_agree(self) -> None:
        df = frame(FIVE)
        items = [2, 1, 6]
        makers = [
            lambda: items,
            lambda: tuple(items),
            lambda: set(items),
            lambda: iter(items),
            lambda: np.array(items),
            lambda: pl.Series("whatever", items),
            lambda: pl.DataFrame({"item": items, "noisy_weight": [1.0, 2.0, 3.0]}),
            lambda: pl.DataFrame({"item": items}).lazy(),
        ]
        for data in (df, df.lazy()):
            for make in makers:
                assert captured_mass(data, make()) == pytest.approx(6 / 12)
                assert missing_mass(data, make()) == pytest.approx(6 / 12)
                assert linf_missing_mass(data, make()) == 2.0
                assert top_k_missing_mass(data, make(), 3) == pytest.approx(1 / 12)
                assert top_k_l1_loss(data, make(), 3) == 1.0
                assert missed_users(data, make()) == 2
                assert cardinality(make()) == 3
                if not isinstance(make(), set):  # a set has no output order
                    assert top_k_l1_loss(data, make(), 3, order="output") == 3.0

    def test_inputs_not_mutated(self) -> None:
        df = frame([[1, 1, 2], [3, 1]])
        before = df.clone()
        released_list = [3, 1, 1]
        released_frame = pl.DataFrame({"item": [3, 1, 1]})
        released_before = released_frame.clone()
        for fn in (captured_mass, missing_mass, linf_missing_mass, missed_users, coverage):
            fn(df, released_list)
            fn(df, released_frame)
        top_k_missing_mass(df, released_list, 2)
        top_k_l1_loss(df, released_frame, 2, order="output")
        released_series = pl.Series("named", [3, 1], dtype=pl.Int32)
        released_array = np.array([3, 1])
        for fn in (captured_mass, missed_users):
            fn(df.lazy(), released_series)
            fn(df, released_array)
        top_k_l1_loss(df, released_series, 2)
        assert_frame_equal(df, before)
        assert_frame_equal(released_frame, released_before)
        assert released_list == [3, 1, 1]
        assert released_series.name == "named"
        assert released_series.dtype == pl.Int32
        assert released_series.to_list() == [3, 1]
        assert released_array.tolist() == [3, 1]


# ---------------------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------------------
ALL_DATA_METRICS = [captured_mass, missing_mass, linf_missing_mass, missed_users, coverage]


class TestErrors:
    @pytest.mark.parametrize("fn", ALL_DATA_METRICS)
    def test_missing_column(self, fn) -> None:
        df = pl.DataFrame({"a": [1], "b": [2]})
        with pytest.raises(ValueError, match=r"column 'user' not found in data \(columns: \['a', 'b'\]\)"):
            fn(df, [1])
        with pytest.raises(ValueError, match=r"column 'item' not found in data \(columns: \['a', 'b'\]\)"):
            fn(df.lazy(), [1], user="a")

    @pytest.mark.parametrize("fn", ALL_DATA_METRICS)
    def test_nulls(self, fn) -> None:
        with pytest.raises(ValueError, match="column 'item' contains null values"):
            fn(pl.DataFrame({"user": [0, 1], "item": [1, None]}), [1])
        with pytest.raises(ValueError, match="column 'user' contains null values"):
            fn(pl.DataFrame({"user": [0, None], "item": [1, 2]}).lazy(), [1])

    @pytest.mark.parametrize("fn", ALL_DATA_METRICS)
    def test_empty(self, fn) -> None:
        empty = pl.DataFrame(schema={"user": pl.Int64, "item": pl.Int64})
        with pytest.raises(ValueError, match="data is empty"):
            fn(empty, [1])
        with pytest.raises(ValueError, match="data is empty"):
            fn(empty.lazy(), [1])

    def test_top_k_errors(self) -> None:
        df = frame(FIVE)
        with pytest.raises(ValueError, match="column 'item' not found"):
            top_k_missing_mass(pl.DataFrame({"user": [1]}), [1], 1)
        with pytest.raises(ValueError, match="data is empty"):
            top_k_l1_loss(pl.DataFrame(schema={"user": pl.Int64, "item": pl.Int64}), [1], 1)
        with pytest.raises(ValueError, match=r"`released` holds 3 distinct items, more than `k` = 2"):
            top_k_missing_mass(df, [1, 2, 5], 2)
        with pytest.raises(ValueError, match=r"more than `k` = 2"):
            top_k_l1_loss(df, [1, 2, 5], 2)
        with pytest.raises(ValueError, match=r"`k` must be an integer >= 1 \(found 0\)"):
            top_k_missing_mass(df, [], 0)
        with pytest.raises(TypeError, match=r"`k` must be an integer"):
            top_k_l1_loss(df, [], 2.0)  # type: ignore[arg-type]
        with pytest.raises(
            ValueError, match=r"`order` must be one of \{'sorted', 'output'\} \(found 'desc'\)"
        ):
            top_k_l1_loss(df, [1], 3, order="desc")  # type: ignore[arg-type]

    def test_bad_arguments(self) -> None:
        df = frame(FIVE)
        with pytest.raises(TypeError, match="`data` must be a polars DataFrame or LazyFrame"):
            captured_mass({"user": [1], "item": [1]}, [1])
        with pytest.raises(ValueError, match="`user` and `item` must be different columns"):
            captured_mass(df, [1], item="user")
        with pytest.raises(TypeError, match="`item` must be a non-empty column name"):
            captured_mass(df, [1], item=3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not a single str"):
            captured_mass(df, "12")
        with pytest.raises(
            TypeError, match="`released` must be a polars DataFrame, a polars Series or an iterable"
        ):
            captured_mass(df, 12)
        with pytest.raises(ValueError, match=r"column 'item' not found in `released` \(columns: \['x'\]\)"):
            captured_mass(df, pl.DataFrame({"x": [1]}))
        with pytest.raises(ValueError, match="`released` contains null items"):
            captured_mass(df, [1, None])
        with pytest.raises(
            TypeError, match="dtype String cannot be compared with the item column of dtype Int64"
        ):
            captured_mass(df, ["1"])
        with pytest.raises(TypeError, match="do not form one column"):
            captured_mass(df, [1, "a"])
        with pytest.raises(
            ValueError, match=r"`n_users` must be at least the number of users in the data \(5\)"
        ):
            missed_users(df, [1], n_users=4)


# ---------------------------------------------------------------------------------------------------------
# properties (hypothesis), against a brute-force reference written with Python sets
# ---------------------------------------------------------------------------------------------------------
user_lists = st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=6), min_size=1, max_size=12)
item_sets = st.sets(st.integers(0, 15), max_size=10)


def brute_counts(lists: list[list[int]]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for items in lists:
        for x in set(items):
            counts[x] = counts.get(x, 0) + 1
    return counts


@settings(max_examples=60, deadline=None)
@given(lists=user_lists, released=item_sets, extra=item_sets)
def test_set_union_properties(lists: list[list[int]], released: set[int], extra: set[int]) -> None:
    df = frame(lists)
    counts = brute_counts(lists)
    total = sum(counts.values())
    n = len(lists)
    mm = missing_mass(df, released)
    assert 0.0 <= mm <= 1.0
    assert mm == pytest.approx(sum(c for x, c in counts.items() if x not in released) / total)
    assert captured_mass(df, released) == pytest.approx(1 - mm)
    # monotone non-increasing as S grows
    assert missing_mass(df, released | extra) <= mm + 1e-12
    assert missing_mass(df, set(counts)) == 0.0
    # l-infinity
    linf = linf_missing_mass(df, released)
    assert linf == max([c for x, c in counts.items() if x not in released], default=0)
    assert 0 <= linf <= n
    assert 0.0 <= linf_missing_mass(df, released, normalize=True) <= 1.0
    assert linf_missing_mass(df, released | extra) <= linf
    # hitting set
    missed = missed_users(df, released)
    assert missed == sum(1 for items in lists if not set(items) & released)
    cov = coverage(df, released)
    assert 0.0 <= cov <= 1.0
    assert coverage(df, released | extra) >= cov
    assert coverage(df, set(counts)) == 1.0
    assert cardinality(released) == len(released)


@settings(max_examples=60, deadline=None)
@given(
    lists=user_lists, released=st.lists(st.integers(0, 15), max_size=8, unique=True), slack=st.integers(0, 4)
)
def test_top_k_properties(lists: list[list[int]], released: list[int], slack: int) -> None:
    df = frame(lists)
    counts = brute_counts(lists)
    total = sum(counts.values())
    k = max(1, len(released) + slack)
    ranked = sorted(counts.values(), reverse=True)
    tkmm = top_k_missing_mass(df, released, k)
    assert 0.0 <= tkmm <= 1.0
    assert tkmm == pytest.approx((sum(ranked[:k]) - sum(counts.get(x, 0) for x in released)) / total)
    # a true top-k set has no top-k missing mass
    top = sorted(counts, key=lambda x: -counts[x])[:k]
    assert top_k_missing_mass(df, top, k) == pytest.approx(0.0, abs=1e-12)
    assert top_k_l1_loss(df, top, k) == 0.0
    # l1 loss: brute force in both orders; sorting is the best matching (rearrangement)
    best = (ranked + [0] * k)[:k]
    out = ([counts.get(x, 0) for x in released] + [0] * k)[:k]
    assert top_k_l1_loss(df, released, k, order="output") == sum(
        abs(a - b) for a, b in zip(best, out, strict=True)
    )
    srt = (sorted((counts.get(x, 0) for x in released), reverse=True) + [0] * k)[:k]
    loss = top_k_l1_loss(df, released, k)
    assert loss == sum(abs(a - b) for a, b in zip(best, srt, strict=True))
    assert loss <= top_k_l1_loss(df, released, k, order="output")
    assert top_k_l1_loss(df, list(reversed(released)), k) == loss  # independent of output order
    assert 0 <= loss <= k * len(lists)


@settings(max_examples=30, deadline=None)
@given(lists=user_lists, released=item_sets)
def test_frame_kinds_and_duplicates_agree(lists: list[list[int]], released: set[int]) -> None:
    df = frame(lists)
    doubled = pl.concat([df, df])  # duplicate rows never change a set metric
    shuffled = df.sample(fraction=1.0, shuffle=True, seed=0)
    values = {
        (fn.__name__, i): fn(data, sorted(released))
        for fn in ALL_DATA_METRICS
        for i, data in enumerate((df, df.lazy(), doubled, shuffled))
    }
    for fn in ALL_DATA_METRICS:
        first = values[(fn.__name__, 0)]
        for i in range(1, 4):
            assert math.isclose(values[(fn.__name__, i)], first, rel_tol=1e-12, abs_tol=1e-12)


@settings(max_examples=30, deadline=None)
@given(lists=user_lists, released=item_sets)
def test_a_truth_gives_the_same_values_as_the_data(lists: list[list[int]], released: set[int]) -> None:
    df = frame(lists, user="u", item="x")
    truth = Truth.of(df, user="u", item="x")
    items = sorted(released)
    for fn in ALL_DATA_METRICS:
        assert fn(truth, items, user="u", item="x") == fn(df, items, user="u", item="x")
    k = max(len(items), 1)
    for fn in (top_k_missing_mass, top_k_l1_loss):
        assert fn(truth, items, k, user="u", item="x") == fn(df, items, k, user="u", item="x")
    assert (truth.total_mass, truth.n_users) == (df.unique().height, df["u"].n_unique())


def test_a_truth_is_used_with_its_own_column_names() -> None:
    truth = Truth.of(frame(FIVE, item="x"), item="x")
    with pytest.raises(ValueError, match=r"^`item` must be the Truth's item column 'x' \(found 'item'\)$"):
        missing_mass(truth, [1])
    with pytest.raises(ValueError, match="contains null values"):
        Truth.of(pl.DataFrame({"user": [0, None], "item": [1, 2]}))
