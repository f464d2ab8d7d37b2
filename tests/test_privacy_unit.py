"""The privacy unit is what the map charges: identifier expressions, value-based hashing, the enforced bound.

Deterministic checks on the outputs of the stable steps (no statistics): each test fails on a build that reads
an identifier expression as its root column, hashes Categorical codes, trusts a bounded domain's promise, or
splits ``0.0`` and ``-0.0`` into two users.
"""

from __future__ import annotations

import math
import secrets

import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm._spaces import _resolve_space, _user_of_metric
from opendp_wgm.domains import UserItemsDescriptor, user_items_domain
from opendp_wgm.measurements.baselines import _policy_csr as policy_csr
from opendp_wgm.measurements.baselines import key_release
from opendp_wgm.measurements.hitting_set import make_user_peeling
from opendp_wgm.privacy.threshold import lattice_weights

HOUSEHOLD = pl.col("person") // 2


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")


def household_frame() -> pl.LazyFrame:
    """Persons 0 and 1 (household 0) hold two unique items each; person 2 (household 1) holds one."""
    return pl.LazyFrame({"person": [0, 0, 1, 1, 2], "item": ["a", "b", "c", "d", "e"]})


def context_space(identifier: pl.Expr = HOUSEHOLD) -> tuple[dp.Domain, dp.Metric]:
    domain = dp.lazyframe_domain(
        [dp.series_domain("person", dp.atom_domain(T=dp.i64)), dp.series_domain("item", dp.atom_domain(T=dp.String))]
    )
    return domain, dp.symmetric_id_distance(identifier)


SPACES = {
    "lazyframe_domain": context_space,
    "user_items_space": lambda: (wgm.user_items_space("person", "item")[0], dp.symmetric_id_distance(HOUSEHOLD)),
}


# ---------------------------------------------------------------------------------------------------------
# 1.1 identifier expressions: one household is one user in every step
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("space", SPACES)
def test_household_is_bounded_and_weighted_as_one_user(space: str) -> None:
    bound = wgm.make_bound_user_items(*SPACES[space](), max_contributions=2)
    rows = bound(household_frame()).collect()
    per_household = dict(rows.group_by("person").len().iter_rows())
    assert per_household == {0: 2, 1: 1}  # household 0 keeps Δ0 = 2 of its 4 items, not 2 per person
    assert set(rows.filter(pl.col("person") == 0)["item"]) <= {"a", "b", "c", "d"}

    histogram = (bound >> wgm.then_weighted_histogram())(household_frame()).collect()
    weights = dict(histogram.iter_rows())
    household_0 = [w for item, w in weights.items() if item in "abcd"]
    assert len(household_0) == 2
    assert math.fsum(w * w for w in household_0) <= 1.0  # ℓ2 <= 1 per household (√2 if read per person)
    assert weights["e"] == 1.0


def test_household_counts_and_wgm_release() -> None:
    frame = pl.LazyFrame({"person": [0, 1, 2, 3], "item": ["x", "x", "x", "y"]})
    counts = wgm.make_candidate_counts(*context_space(), candidates=["x", "y"])
    assert counts(frame) == [2, 1]  # households {0, 1} hold x; per person it would be [3, 1]

    # σ so small that no noise moves a weight across T = 0.5: the release is the histogram's support
    wgm_release = wgm.make_wgm(*context_space(), max_contributions=2, scale=1e-9, threshold=0.5)
    released = wgm_release(household_frame())["item"].to_list()
    assert len([x for x in released if x in "abcd"]) == 2 and "e" in released


def test_household_in_the_baselines_and_two_stage() -> None:
    space = _resolve_space(*context_space())
    data = policy_csr._csr(household_frame(), space, max_contributions=2, key_order=False, priority_order=False)
    assert sorted(int(n) for n in data.offsets[1:] - data.offsets[:-1]) == [1, 2]  # two users: 2 and 1 items

    _, lf = key_release._key_release_input(household_frame(), space, "user", "item")
    assert lf.collect()["user"].n_unique() == 2

    peeling = make_user_peeling(*context_space(), candidates=["a", "c"], k=1, scale=1.0)
    assert peeling(household_frame()).height == 1

    # the two-stage release prepares the frame once: it must not evaluate the identifier twice
    two_stage = wgm.make_wgm_top_k(
        *context_space(), k=1, max_contributions=4, wgm_scale=1e-9, wgm_threshold=0.1, peel_scale=1.0
    )
    assert two_stage(household_frame())["item"].to_list()[0] in {"a", "b", "c", "d", "e"}


def test_bad_identifier_expressions_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="cannot be evaluated on `input_domain`"):
        wgm.make_wgm(*context_space(pl.col("person").str.to_lowercase()), max_contributions=1, scale=1.0, threshold=1.0)
    with pytest.raises(ValueError, match="user column 'household' not found in `input_domain`"):
        wgm.make_wgm(*context_space(pl.col("household") // 2), max_contributions=1, scale=1.0, threshold=1.0)
    with pytest.raises(ValueError, match="must not be named like the item column"):
        wgm.make_wgm(
            *context_space(pl.struct("item", "person")), max_contributions=1, scale=1.0, threshold=1.0, item="item"
        )
    with pytest.raises(ValueError, match="identifies users by"):
        wgm.make_wgm(
            wgm.user_items_space("user", "item")[0], dp.symmetric_id_distance(HOUSEHOLD),
            max_contributions=1, scale=1.0, threshold=1.0,
        )


def test_engines_refuse_identifier_expressions() -> None:
    """Spark and Tumult read the user as a column: an expression is refused, not read as its root column."""
    assert _user_of_metric(dp.symmetric_id_distance(pl.col("person"))) == "person"
    with pytest.raises(ValueError, match="must identify users by a column"):
        _user_of_metric(dp.symmetric_id_distance(HOUSEHOLD))


def test_candidates_dtype_checked_at_construction() -> None:
    with pytest.raises(TypeError, match="`candidates` must have the item column's type"):
        wgm.make_candidate_counts(*context_space(pl.col("item")), candidates=["a", "b"], item="person")
    with pytest.raises(TypeError, match="`candidates` must have the item column's type"):
        make_user_peeling(*context_space(pl.col("item")), candidates=["a", "b"], k=1, scale=1.0, item="person")


# ---------------------------------------------------------------------------------------------------------
# 1.2 value-based hashing: Categorical codes never reach a hash key
# ---------------------------------------------------------------------------------------------------------
def categorical_frame(users: dict[str, list[str]]) -> pl.DataFrame:
    """A frame whose Categorical columns have their own categories, coded by first appearance in it."""
    dtype = pl.Categorical(pl.Categories.random())
    rows = [(user, item) for user, items in users.items() for item in items]
    return pl.DataFrame(rows, schema={"user": dtype, "item": dtype}, orient="row")


@pytest.mark.parametrize("path", ["bound", "policy"])
def test_categorical_kept_subset_does_not_depend_on_other_users(path: str, monkeypatch) -> None:
    monkeypatch.setattr(secrets, "randbits", lambda bits: 0x5EED)  # one fixed seed for every run
    mine = [f"item{i}" for i in range(12)]
    alone = categorical_frame({"u0": mine})
    # another user, first in the frame: u0's items get other codes (first appearance), not other values
    other = categorical_frame({"u1": [f"new{i}" for i in range(6)], "u0": mine})

    def kept(frame: pl.DataFrame) -> set[str]:
        if path == "bound":
            rows = wgm.make_bound_user_items(*wgm.user_items_space(), max_contributions=3)(frame).collect()
            return set(rows.filter(pl.col("user") == "u0")["item"].cast(pl.String))
        space = _resolve_space(*wgm.user_items_space())
        data = policy_csr._csr(frame, space, max_contributions=3, key_order=False, priority_order=False)
        users = [set(data.decode(data.codes[a:b]).cast(pl.String)) for a, b in zip(data.offsets[:-1], data.offsets[1:], strict=False)]
        (subset,) = [u for u in users if u <= set(mine)]
        return subset

    assert len(kept(alone)) == 3
    assert kept(other) == kept(alone)


def composite_categorical_frame(users: dict[str, list[tuple[str, str]]]) -> pl.DataFrame:
    """:func:`categorical_frame` with a composite key: (country, query), both Categorical, own categories."""
    dtype = pl.Categorical(pl.Categories.random())
    rows = [(user, *pair) for user, pairs in users.items() for pair in pairs]
    return pl.DataFrame(rows, schema={"user": dtype, "country": dtype, "query": dtype}, orient="row")


@pytest.mark.parametrize("path", ["bound", "policy"])
def test_composite_categorical_kept_subset_does_not_depend_on_other_users(path: str, monkeypatch) -> None:
    """The bounding hash reads a composite key's Struct by value: its Categorical fields as strings."""
    monkeypatch.setattr(secrets, "randbits", lambda bits: 0x5EED)  # one fixed seed for every run
    mine = [(f"c{i % 3}", f"q{i}") for i in range(12)]
    alone = composite_categorical_frame({"u0": mine})
    other = composite_categorical_frame({"u1": [(f"n{i}", f"m{i}") for i in range(6)], "u0": mine})
    space = wgm.user_items_space("user", ["country", "query"])

    def kept(frame: pl.DataFrame) -> set[tuple[str, str]]:
        if path == "bound":
            rows = wgm.make_bound_user_items(*space, max_contributions=3)(frame).collect()
            rows = rows.filter(pl.col("user") == "u0").select(pl.col("country", "query").cast(pl.String))
            return set(rows.iter_rows())
        data = policy_csr._csr(frame, _resolve_space(*space), max_contributions=3, key_order=False, priority_order=False)
        offsets = zip(data.offsets[:-1], data.offsets[1:], strict=True)
        decoded = [data.decode(data.codes[a:b]).struct.unnest().select(pl.all().cast(pl.String)) for a, b in offsets]
        (subset,) = [set(rows.iter_rows()) for rows in decoded if set(rows.iter_rows()) <= set(mine)]
        return subset

    assert len(kept(alone)) == 3
    assert kept(other) == kept(alone)


def test_composite_key_bounds_a_user_across_all_key_columns() -> None:
    """User 0 holds six (country, query) pairs over three countries and three queries: Δ0 = 2 keeps two pairs
    in all (not two per country or per query), and its weights have ℓ2 ≤ 1 together."""
    pairs = [("fr", "a"), ("fr", "b"), ("de", "a"), ("de", "c"), ("us", "b"), ("us", "c")]
    frame = pl.DataFrame({"user": [0] * 6 + [1], "country": [c for c, _ in pairs] + ["fr"], "query": [q for _, q in pairs] + ["a"]})
    space = wgm.user_items_space("user", ["country", "query"])
    bound = wgm.make_bound_user_items(*space, max_contributions=2)
    rows = bound(frame).collect()
    assert rows.filter(pl.col("user") == 0).height == 2 and rows.filter(pl.col("user") == 1).height == 1
    assert set(rows.filter(pl.col("user") == 0).select("country", "query").iter_rows()) <= set(pairs)
    histogram = wgm.make_weighted_histogram(bound.output_domain, bound.output_metric)
    weights = (bound >> histogram)(frame.filter(pl.col("user") == 0)).collect()["weight"].to_list()
    assert len(weights) == 2 and math.fsum(w * w for w in weights) <= 1.0
    assert (bound >> histogram).map(1) == 1


# ---------------------------------------------------------------------------------------------------------
# 1.3 the weighted histogram enforces the bound it is promised
# ---------------------------------------------------------------------------------------------------------
def bounded_space(max_contributions: int) -> tuple[dp.Domain, dp.Metric]:
    return user_items_domain(UserItemsDescriptor("user", "item", max_contributions)), dp.symmetric_id_distance(
        pl.col("user")
    )


def test_histogram_of_a_hand_built_frame_keeps_its_map() -> None:
    histogram = wgm.make_weighted_histogram(*bounded_space(2))
    assert histogram.map(1) == 1  # users (the (ℓ0, ℓ2, ℓ∞) bound (2, 1, 1) is weighted_histogram_l02inf)
    duplicates = pl.DataFrame({"user": [0, 0], "item": ["a", "a"]})  # one item, twice
    assert dict(histogram(duplicates).collect().iter_rows()) == {"a": 1.0}  # not 2/√2 = √2
    too_many = pl.DataFrame({"user": [0, 0, 0, 0], "item": ["a", "b", "c", "c"]})  # 3 distinct items > Δ0 = 2
    weights = histogram(too_many).collect()["weight"].to_list()
    assert len(weights) == 2 and math.fsum(w * w for w in weights) <= 1.0


def test_histogram_of_bounded_input_is_unchanged() -> None:
    frame = pl.DataFrame({"user": [0, 0, 0, 1, 1, 2], "item": [1, 2, 3, 1, 4, 1]})
    bounded = wgm.make_bound_user_items(*wgm.user_items_space(), max_contributions=3)(frame).collect()
    w = [x / 2**20 for x in lattice_weights(3)]
    expected = {1: w[2] + w[1] + w[0], 2: w[2], 3: w[2], 4: w[1]}
    out = wgm.make_weighted_histogram(*bounded_space(3))(bounded).collect()
    assert dict(out.iter_rows()) == expected


# ---------------------------------------------------------------------------------------------------------
# 1.6 OpenDP's key release: 0.0 and -0.0 are one user, and one item
# ---------------------------------------------------------------------------------------------------------
def test_key_release_keeps_signed_zeros_together() -> None:
    frame = pl.DataFrame({"user": [0.0, -0.0, 1.5], "item": [0.0, -0.0, 2.0]})
    _, lf = key_release._key_release_input(frame, _resolve_space(*wgm.user_items_space()), "user", "item")
    rows = lf.collect()
    assert rows["user"].n_unique() == 2 and rows["item"].n_unique() == 2

    # end to end: 60 users each hold the item as 0.0 and as -0.0, one item (two, each kept, if split as strings)
    users = pl.DataFrame({"user": list(range(60)) * 2, "item": [0.0] * 60 + [-0.0] * 60})
    release = key_release.make_opendp_key_release(*wgm.user_items_space(), max_contributions=2, epsilon=50.0, delta=1e-6)
    released = release(users)
    assert released["item"].to_list() == [0.0] and abs(released["noisy_count"][0] - 60) <= 5


def test_a_space_resolved_again_from_the_same_objects_is_the_same_space() -> None:
    """A two-stage call builds its stage 2 on the same domain and metric at every release: the space is read off
    them once (no FFI read per release); other objects, another item or a changed item list are read again."""
    domain, metric = wgm.user_items_space(item=["country", "query"])
    items = ["country", "query"]
    space = _resolve_space(domain, metric, items)
    assert _resolve_space(domain, metric, items) is space
    assert _resolve_space(domain, metric, ["country", "query"]) is space
    items.append("other")  # the same list object, changed: read again (and refused)
    with pytest.raises(ValueError, match="disagrees"):
        _resolve_space(domain, metric, items)
    other_domain, other_metric = wgm.user_items_space(user="person")
    other = _resolve_space(other_domain, other_metric)
    assert other.user == "person" and other is not space
    context_domain, context_metric = context_space()
    assert _resolve_space(context_domain, context_metric, "item") == _resolve_space(*context_space(), "item")
