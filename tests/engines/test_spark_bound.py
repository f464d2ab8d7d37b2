"""The Spark engine's bound step keeps the kernel's invariants: every user keeps exactly min(t, Δ0) of its own
distinct items, a uniform subset, and gives each the lattice weight ⌊2^20/√t⌋ of its kept count t.

Spark draws the same distribution as the Polars engine, not the same function of the seed (its hash is Spark's
``xxhash64``), so these tests check the invariants, not equality with Polars. They share the process's local
Spark session (tests/engines/conftest.py) and skip, with the reason, when pyspark or Java is missing.
"""

from __future__ import annotations

import itertools
from collections import Counter

import polars as pl
import pytest

from opendp_wgm.privacy.threshold import lattice_weights

pytestmark = pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning")

#: chi-square quantiles at 1 - 1e-4 (scipy.stats.chi2.ppf(1 - 1e-4, df)): a false alarm in 10^4 runs
CHI2_14, CHI2_5 = 42.58, 25.74


@pytest.fixture(scope="module")
def ws(spark_session):
    from opendp_wgm.engines import spark as module

    return module


def bounded(ws, spark, frame: pl.DataFrame, ddl: str, max_contributions: int) -> pl.DataFrame:
    sdf = spark.createDataFrame(frame.rows(), ddl)
    rows = ws.bound_plan(sdf, ws.SparkUserItemsDescriptor(), max_contributions).collect()
    return pl.DataFrame(rows, schema=frame.schema, orient="row")


def test_each_user_keeps_exactly_min_t_delta0_of_its_own_distinct_items(spark_session, ws) -> None:
    """Duplicates, nulls, light and heavy users (1 to 40 distinct items, Δ0 = 7), String items."""
    users, items = [], []
    for u in range(120):
        held = [f"item-{(u * 7 + j) % 97}" for j in range(1 + u % 40)]
        users += [u] * (2 * len(held)) + [u]
        items += held + held + [None]  # every pair twice, and a null item
    frame = pl.DataFrame({"user": users, "item": items}, schema={"user": pl.Int64, "item": pl.String})
    kept = bounded(ws, spark_session, frame, "user long, item string", 7)
    distinct = frame.drop_nulls().unique()
    assert kept.null_count().sum_horizontal().item() == 0 and not kept.is_duplicated().any()
    assert kept.join(distinct, on=["user", "item"], how="anti").height == 0  # only the user's own items
    counts = distinct.group_by("user").agg(t=pl.len()).join(kept.group_by("user").agg(k=pl.len()), on="user")
    assert counts.height == 120 and (counts["k"] == counts["t"].clip(upper_bound=7)).all()


def test_the_kept_subset_is_uniform(spark_session, ws) -> None:
    """3,000 users each hold the same 6 items; at Δ0 = 2 each keeps one of the 15 pairs, uniformly (chi-square
    over the pairs and over the items, at a 1e-4 false-alarm rate); a fresh seed on every call."""
    n_users, held = 3000, list(range(6))
    frame = pl.DataFrame({"user": [u for u in range(n_users) for _ in held], "item": held * n_users})
    kept = bounded(ws, spark_session, frame, "user long, item long", 2)
    pairs = Counter(tuple(sorted(p)) for p in kept.group_by("user").agg(pl.col("item"))["item"].to_list())
    assert set(pairs) == set(itertools.combinations(held, 2)) and sum(pairs.values()) == n_users
    expected = n_users / 15
    assert sum((c - expected) ** 2 / expected for c in pairs.values()) < CHI2_14
    per_item = Counter(kept["item"].to_list())
    expected = 2 * n_users / 6
    assert sum((per_item[i] - expected) ** 2 / expected for i in held) < CHI2_5
    again = bounded(ws, spark_session, frame, "user long, item long", 2)
    assert not again.sort("user", "item").equals(kept.sort("user", "item"))  # a new seed, another subset


def test_weights_are_the_lattice_weights_of_the_kept_count(spark_session, ws) -> None:
    """Each item held by one user: its weight is w_lat(min(t, Δ0)) of that user's distinct count t."""
    rows = [(u, 1000 * u + j) for u in range(1, 13) for j in range(u)]  # user u holds u distinct items
    sdf = spark_session.createDataFrame(rows + rows[:5], "user long, item long")
    histogram = dict(ws.lattice_histogram_plan(sdf, ws.SparkUserItemsDescriptor(), 8).collect())
    weights = lattice_weights(8)
    for u in range(1, 13):
        mine = {item: w for item, w in histogram.items() if item // 1000 == u}
        assert len(mine) == min(u, 8) and set(mine.values()) == {int(weights[min(u, 8) - 1])}, u
