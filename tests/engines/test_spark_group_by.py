"""Keys with statistics on Spark: ``make_wgm_group_by`` (and ``_from_budget``) on a Spark space.

The Spark release is the Polars release when nothing is truncated and the noise is negligible (global scale
1e-6: OpenDP's integer Gaussian at σ = 1e-6 grid units is 0 but with probability < 10^-10^11), for one key and
for a composite key (packed into one string on Spark, unpacked in the key columns' dtypes); the maps are the
Polars constructor's at several d_in; the per-user truncations hold; the released counts and sums are unbiased
(one release over 200 keys, fixed tolerances); and what Spark cannot run is refused before any noise is drawn.

One Spark session per process (tests/engines/conftest.py).
"""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm import spark as ws
from opendp_wgm.engines import spark as spark_engine

pytest.importorskip("pyspark", reason='pyspark is not installed: pip install "opendp-wgm[spark]"')
pytestmark = pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning")

ZCDP = dp.approximate(dp.zero_concentrated_divergence())
APPROX_DP = dp.approximate(dp.max_divergence())
#: Stage 1 with no noise to speak of: every key a user holds is released.
WGM = dict(max_contributions=3, scale=1e-7, threshold=0.5)
STATISTICS = dict(sums={"minutes": (0, 100)}, means={"hours": (0.0, 3.0)})


def spark_then_wgm(**options):
    """Stage 1 on Spark: the Spark WGM's partial constructor."""
    return ws.then_wgm(**options)


def to_spark(spark, frame: pl.DataFrame, ddl: str):
    return spark.createDataFrame(frame.rows(), ddl)


def events() -> pl.DataFrame:
    """Five users, at most three keys and three rows per key each; a null user, a null key, a NaN and a null
    value, and hours on the half-way points of their grid (2^-9: 1.5 and 2.5 units round to 2, half to even)."""
    return pl.DataFrame(
        {
            "user": [0, 0, 0, 1, 1, 2, 2, 3, 4, 4, None, 5],
            "item": ["a", "b", "a", "a", "c", "a", "b", "b", "c", "a", "a", None],
            "minutes": [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 5, 5],
            "hours": [1.5 / 512, 2.5 / 512, None, 2.0, 3.5, 1.0, 0.25, float("nan"), 1.0, 9.0, 1.0, 1.0],
        },
        schema={"user": pl.Int64, "item": pl.String, "minutes": pl.Int64, "hours": pl.Float64},
    )


EVENTS_DDL = "user bigint, item string, minutes bigint, hours double"


def spark_group_by(space=None, **options):
    options = {"max_contributions": 3, "max_rows_per_key": 3, "scale": 1e-6, **STATISTICS, **options}
    key_release = options.pop("key_release", spark_then_wgm(**WGM))
    space = space or ws.spark_user_items_space()
    return wgm.make_wgm_group_by(*space, key_release=key_release, **options)


def polars_group_by(space=None, **options):
    options = {"max_contributions": 3, "max_rows_per_key": 3, "scale": 1e-6, **STATISTICS, **options}
    key_release = options.pop("key_release", wgm.then_wgm(**WGM))
    return wgm.make_wgm_group_by(*(space or wgm.user_items_space()), key_release=key_release, **options)


# --------------------------------------------------------------------------------------------------------------
# releases


def test_release_equals_the_polars_release(spark) -> None:
    """Nothing truncated (Δ0 = R = 3), negligible noise: the same frame, column for column."""
    released = spark_group_by()(to_spark(spark, events(), EVENTS_DDL))
    expected = polars_group_by()(events())
    assert released.columns == ["item", "noisy_weight", "count", "minutes_sum", "hours_mean"]
    assert released.schema == expected.schema
    assert released.sort("item").equals(expected.sort("item")), (released, expected)
    assert released.sort("item")["count"].to_list() == [5, 3, 2]  # rows (R = 3): the null-user and null-key rows dropped


def test_composite_key_round_trips(spark) -> None:
    """A (string, int) composite key with separators, quotes, backslashes and unicode in the strings: packed into
    one string on Spark, released, unpacked in the columns' dtypes, as the Polars composite release."""
    countries = ["fr|a", 'de"b', "é\\n{", "fr|a", 'de"b', "", "fr|a", "é\\n{"]
    frame = pl.DataFrame(
        {
            "user": [0, 0, 1, 1, 2, 2, 3, 4],
            "country": countries,
            "code": [1, -2, 3, 1, -2, 2**31 - 1, 1, 3],
            "minutes": [10, 20, 30, 40, 50, 60, 70, 80],
            "hours": [1.0, 2.0, 0.5, None, 3.0, 1.0, 2.0, 0.0],
        },
        schema={"user": pl.Int64, "country": pl.String, "code": pl.Int32, "minutes": pl.Int64, "hours": pl.Float64},
    )
    keys = ["country", "code"]
    ddl = "user bigint, country string, code int, minutes bigint, hours double"
    released = spark_group_by(ws.spark_user_items_space("user", keys))(to_spark(spark, frame, ddl))
    expected = polars_group_by(wgm.user_items_space("user", keys))(frame)
    assert released.columns == ["country", "code", "noisy_weight", "count", "minutes_sum", "hours_mean"]
    assert released.schema == expected.schema
    assert released.sort(keys).equals(expected.sort(keys)), (released, expected)
    assert set(released.select(keys).iter_rows()) == set(frame.select(keys).iter_rows())


def test_a_spark_dp_sips_key_release_on_a_composite_key(spark) -> None:
    """Stage 1 is any Spark key release on the packed space: DP-SIPS (two rounds, negligible noise) releases the
    Polars engine's keys in the same rounds, with the same aggregates."""
    frame = pl.DataFrame(
        {"user": [0, 0, 1, 1, 2, 3], "country": ["fr", "de", "fr", "de", "fr", "de"], "code": [1, 2, 1, 3, 1, 2],
         "minutes": [5, 10, 20, 30, 40, 50], "hours": [1.0, 2.0, 0.5, 1.5, 3.0, 0.0]},
    )
    keys, schedule = ["country", "code"], dict(max_contributions=3, scales=[1e-7, 1e-7], thresholds=[2.0, 0.5])
    ddl = "user bigint, country string, code bigint, minutes bigint, hours double"
    released = spark_group_by(ws.spark_user_items_space("user", keys), key_release=ws.then_dp_sips(**schedule))(
        to_spark(spark, frame, ddl)
    )
    expected = polars_group_by(wgm.user_items_space("user", keys), key_release=wgm.then_dp_sips(**schedule))(frame)
    assert released.columns == ["country", "code", "noisy_weight", "round", "count", "minutes_sum", "hours_mean"]
    assert released.sort(keys).equals(expected.sort(keys)), (released, expected)
    # round 1: (fr, 1) weighs 2·2^-1/2 + 1 > 2; round 2, the users weighted again on what is left: (de, 2) 2, (de, 3) 1
    assert released.sort(keys).select("country", "code", "round").rows() == [("de", 2, 2), ("de", 3, 2), ("fr", 1, 1)]


def test_rows_per_key_and_keys_per_user_are_truncated(spark) -> None:
    """User 0 holds three rows of a; user 1 one row each of a and b: R = 2 rows per key, Δ0 keys per user."""
    frame = pl.DataFrame({"user": [0, 0, 0, 1, 1], "item": ["a"] * 4 + ["b"], "minutes": [1, 2, 3, 4, 5]})
    data = to_spark(spark, frame, "user bigint, item string, minutes bigint")
    for keys, expected in ((1, 2 + 1), (2, 2 + 2)):
        m = spark_group_by(max_rows_per_key=2, max_contributions=keys, means=None, sums={"minutes": (0, 10)})
        released = m(data)
        assert released["count"].sum() == expected
        if keys == 2:  # user 0's two kept rows of a are two of 1, 2, 3; user 1's a is 4
            assert 4 + 3 <= released.filter(pl.col("item") == "a")["minutes_sum"].item() <= 4 + 5


def test_no_key_released_gives_an_empty_frame(spark) -> None:
    m = spark_group_by(key_release=spark_then_wgm(max_contributions=3, scale=1e-7, threshold=1e6))
    empty = m(to_spark(spark, events(), EVENTS_DDL))
    assert empty.height == 0 and empty.columns == ["item", "noisy_weight", "count", "minutes_sum", "hours_mean"]


def test_counts_and_sums_are_unbiased(spark) -> None:
    """200 keys, each held by its own 30 users (one row each), all released; global scale 2: each count's noise
    has σ = 2 and each minutes sum's σ = 2·100. Over the 200 keys, the mean error is within 4.5 standard errors
    of 0 and the errors' standard deviation within 25% of σ (false alarm < 1e-4)."""
    keys, per_key = 200, 30
    users = np.arange(keys * per_key)
    minutes = (users * 37) % 120  # clipped to 100
    frame = pl.DataFrame({"user": users, "item": users // per_key, "minutes": minutes})
    data = to_spark(spark, frame, "user bigint, item bigint, minutes bigint")
    m = spark_group_by(scale=2.0, max_contributions=1, max_rows_per_key=1, sums={"minutes": (0, 100)}, means=None,
                       key_release=spark_then_wgm(max_contributions=1, scale=1e-7, threshold=0.5))
    released = m(data).sort("item")
    truth = frame.group_by("item").agg(pl.len().alias("count"), pl.col("minutes").clip(0, 100).sum().alias("minutes_sum")).sort("item")
    assert released["item"].to_list() == truth["item"].to_list()
    for column, sigma in (("count", 2.0), ("minutes_sum", 200.0)):
        error = (released[column].cast(pl.Float64) - truth[column]).to_numpy()
        assert abs(error.mean()) <= 4.5 * sigma / math.sqrt(keys), (column, error.mean())
        assert 0.75 * sigma <= error.std() <= 1.25 * sigma, (column, error.std())


# --------------------------------------------------------------------------------------------------------------
# maps


@pytest.mark.parametrize("measure", ["approx_zcdp", "approx_dp"])
def test_maps_equal_the_polars_maps(measure: str) -> None:
    options = {"scale": 3.0, "max_rows_per_key": 2}
    if measure == "approx_dp":
        options.update(output_measure=APPROX_DP, delta=1e-7)
        stage_1 = {**WGM, "scale": 2.0, "threshold": 20.0, "output_measure": APPROX_DP, "epsilon": 1.0}
    else:
        stage_1 = {**WGM, "scale": 2.0, "threshold": 20.0}
    spark_m = spark_group_by(key_release=spark_then_wgm(**stage_1), **options)
    polars_m = polars_group_by(key_release=wgm.then_wgm(**stage_1), **options)
    composite = spark_group_by(ws.spark_user_items_space("user", ["a", "b"]),
                               key_release=spark_then_wgm(**stage_1), **options)
    assert spark_m.output_measure == polars_m.output_measure == composite.output_measure
    for d_in in (1, 2, 5):
        assert spark_m.map(d_in) == polars_m.map(d_in) == composite.map(d_in)


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_from_budget_maps_equal_the_polars_maps(budget: dict[str, float]) -> None:
    options = dict(max_contributions=4, delta=1e-6, sums={"minutes": (0, 120)}, **budget)
    spark_m = wgm.make_wgm_group_by_from_budget(*ws.spark_user_items_space(), **options)
    polars_m = wgm.make_wgm_group_by_from_budget(*wgm.user_items_space(), **options)
    composite = wgm.make_wgm_group_by_from_budget(*ws.spark_user_items_space("user", ["a", "b"]), **options)
    for d_in in (1, 3):
        assert spark_m.map(d_in) == polars_m.map(d_in) == composite.map(d_in)
    assert spark_m.check(1, (budget.get("epsilon") or budget["rho"], 1e-6))


def test_from_budget_releases_on_spark(spark) -> None:
    m = wgm.make_wgm_group_by_from_budget(*ws.spark_user_items_space(), max_contributions=3, epsilon=1.0,
                                          delta=1e-6, sums={"minutes": (0, 100)})
    released = m(to_spark(spark, events(), EVENTS_DDL))
    assert released.columns == ["item", "noisy_weight", "count", "minutes_sum"]
    assert released.schema["count"] == pl.Int64 and set(released["item"]) <= {"a", "b", "c"}


# --------------------------------------------------------------------------------------------------------------
# refusals: public information only, before any noise


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"mechanism": "partition-selection", "rho": 0.5, "epsilon": None}, "'partition-selection' under approximate zCDP"),
        ({"mechanism": "dp-sips"}, "must be 'wgm' or 'partition-selection' on Spark"),
        ({"mechanism": "top-k", "k": 2}, "must be 'wgm' or 'partition-selection' on Spark"),
        ({"noise": "opendp"}, "`noise` must be 'lattice' on Spark"),
        ({"item": "item"}, "`item` must be None on Spark"),
    ],
)
def test_from_budget_refuses_what_spark_does_not_run(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        wgm.make_wgm_group_by_from_budget(
            *ws.spark_user_items_space(), **{"max_contributions": 3, "epsilon": 1.0, "delta": 1e-6, **options}
        )


def test_other_spark_mechanisms_refuse_a_composite_key() -> None:
    space = ws.spark_user_items_space("user", ["a", "b"])
    with pytest.raises(ValueError, match="must be one column on the Spark engine for this mechanism"):
        ws.make_wgm(*space, **WGM)
    with pytest.raises(ValueError, match="`user` and `item` must be different columns"):
        ws.spark_user_items_space("a", ["a", "b"])


def test_bad_frames_are_refused_before_stage_1(spark, monkeypatch: pytest.MonkeyPatch) -> None:
    """The frame's schema is checked before stage 1 runs: stage 1 here fails the test if it is ever called."""

    def no_stage_1(*args, **kwargs):  # pragma: no cover - reached only if a check came too late
        raise AssertionError("stage 1 ran on a frame that should have been refused")

    monkeypatch.setattr(spark_engine, "wgm_release", no_stage_1)  # stage 1's release: the Spark WGM's

    def make(space=None, **options):
        options = {"max_contributions": 3, "epsilon": 1.0, "delta": 1e-6, **options}
        return wgm.make_wgm_group_by_from_budget(*(space or ws.spark_user_items_space()), **options)

    dated = spark.createDataFrame([(1, "x", "2020-01-01")], "user bigint, item string, day string").selectExpr(
        "user", "item", "to_date(day) as day"
    )
    # at release, the checks' errors reach the caller through OpenDP's FFI (an OpenDPException with the message)
    with pytest.raises(dp.OpenDPException, match="composite key column 'day' has Spark type date"):
        make(ws.spark_user_items_space("user", ["item", "day"]))(dated)
    words = spark.createDataFrame([(1, "x", "w")], "user bigint, item string, word string")
    with pytest.raises(dp.OpenDPException, match="column 'word' must be numeric to be summed"):
        make(sums={"word": (0, 1)})(words)
    with pytest.raises(dp.OpenDPException, match=r"column\(s\) \['minutes'\] not found"):
        make(sums={"minutes": (0, 1)})(words)
    with pytest.raises(dp.OpenDPException, match=r"must be a pyspark\.sql\.DataFrame"):
        make()(events())
    with pytest.raises(ValueError, match="must not name the user column"):
        make(sums={"user": (0, 1)})
