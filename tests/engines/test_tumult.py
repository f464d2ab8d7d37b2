"""The Tumult Core adapter (``opendp_wgm.tumult``): one generic wrapper of the Spark measurements, its contract,
privacy function (the OpenDP map), releases and composition.

Needs ``tmlt.core`` 0.20 and pyspark (``pip install "opendp-wgm[tumult]"``, in an environment with
``numpy < 2``: see docs/engines.md); every test that needs them skips with the reason when they are missing.
The "not installed" error is tested everywhere.
"""

from __future__ import annotations

import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm.privacy.gaussian import wgm_privacy_loss

pytestmark = [
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
    # raised by Tumult's own GeometricPartitionSelection (a pandas_udf with a functionType), not by us
    pytest.mark.filterwarnings("ignore:In Python 3.6\\+ and Spark 3.0\\+:UserWarning"),
]


@pytest.fixture(scope="module")
def tmlt():
    pytest.importorskip("tmlt.core", reason='Tumult Core is not installed: pip install "opendp-wgm[tumult]"')
    from opendp_wgm.engines import tumult

    return tumult


@pytest.fixture(scope="module")
def ws(tmlt):
    """The Spark engine's public constructors (``opendp_wgm.spark``)."""
    from opendp_wgm import spark

    return spark


@pytest.fixture(scope="module")
def spark(tmlt, spark_session):
    """The process's Spark session (tests/engines/conftest.py), once tmlt.core is known to be installed."""
    return spark_session


@pytest.fixture(scope="module")
def core(tmlt):
    """The tmlt.core names the tests use."""
    import sympy as sp
    from tmlt.core.domains.spark_domains import (
        SparkDataFrameDomain,
        SparkFloatColumnDescriptor,
        SparkIntegerColumnDescriptor,
        SparkStringColumnDescriptor,
    )
    from tmlt.core.measurements.chaining import ChainTM
    from tmlt.core.measurements.interactive_measurements import PrivacyAccountant, SequentialComposition
    from tmlt.core.measurements.spark_measurements import GeometricPartitionSelection
    from tmlt.core.measures import ApproxDP, InsufficientBudgetError, RhoZCDP
    from tmlt.core.metrics import IfGroupedBy, SymmetricDifference
    from tmlt.core.transformations.chaining import ChainTT
    from tmlt.core.transformations.spark_transformations.select import Select
    from tmlt.core.transformations.spark_transformations.truncation import LimitRowsPerID
    from tmlt.core.utils.exact_number import ExactNumber

    return {
        "sp": sp,
        "SparkDataFrameDomain": SparkDataFrameDomain,
        "SparkFloatColumnDescriptor": SparkFloatColumnDescriptor,
        "SparkIntegerColumnDescriptor": SparkIntegerColumnDescriptor,
        "SparkStringColumnDescriptor": SparkStringColumnDescriptor,
        "ChainTM": ChainTM,
        "PrivacyAccountant": PrivacyAccountant,
        "SequentialComposition": SequentialComposition,
        "GeometricPartitionSelection": GeometricPartitionSelection,
        "ApproxDP": ApproxDP,
        "InsufficientBudgetError": InsufficientBudgetError,
        "RhoZCDP": RhoZCDP,
        "IfGroupedBy": IfGroupedBy,
        "SymmetricDifference": SymmetricDifference,
        "ChainTT": ChainTT,
        "Select": Select,
        "LimitRowsPerID": LimitRowsPerID,
        "ExactNumber": ExactNumber,
    }


APPROX_DP = dp.approximate(dp.max_divergence())


def domain(core, item_descriptor=None):
    return core["SparkDataFrameDomain"](
        {
            "user": core["SparkIntegerColumnDescriptor"](),
            "item": item_descriptor or core["SparkStringColumnDescriptor"](),
        }
    )


def spark_frame(spark, frame: pl.DataFrame):
    from pyspark.sql import types

    schema = types.StructType(
        [types.StructField("user", types.LongType(), False), types.StructField("item", types.StringType(), False)]
    )
    return spark.createDataFrame(frame.rows(), schema)


def launch_accountant(core, dom, budget, data):
    """A Tumult ``PrivacyAccountant`` on ``data`` with an ``ApproxDP`` budget for one user."""
    return core["PrivacyAccountant"].launch(
        core["SequentialComposition"](
            input_domain=dom,
            input_metric=core["IfGroupedBy"](["user"], core["SymmetricDifference"]()),
            output_measure=core["ApproxDP"](),
            d_in=1,
            privacy_budget=budget,
        ),
        data,
    )


def wrapped(tmlt, core, make, **params):
    """``TumultMeasurement`` of ``make(*spark_user_items_space(), output_measure=(ε, δ), **params)``."""
    from opendp_wgm.spark import spark_user_items_space

    return tmlt.TumultMeasurement(domain(core), make(*spark_user_items_space(), output_measure=APPROX_DP, **params))


WGM = dict(max_contributions=64, scale=3.884141, threshold=20.4975, epsilon=1.0)
TWO_STAGE = dict(
    k=3, max_contributions=3, wgm_scale=1e-6, wgm_threshold=1.5, peel_scale=1e-3, wgm_epsilon=1.0, peel_delta=1e-6
)
# σ = 2^-20, the least the (ε, δ) map allows: about one lattice step of noise
SIPS = dict(max_contributions=4, scales=[2.0**-20] * 3, thresholds=[5.0, 5.0, 2.5], epsilon=1.0)


def every_measurement(ws):
    """(name, constructor, parameters): every Spark constructor in its (ε, δ) form, explicit and from a budget
    (given ε), both stage 1s."""
    budget = dict(epsilon=1.0, delta=1e-5, max_contributions=10)
    return [
        ("wgm", ws.make_wgm, {"output_measure": APPROX_DP, **WGM}),
        ("dp-sips", ws.make_dp_sips, {"output_measure": APPROX_DP, **SIPS}),
        ("top-k", ws.make_wgm_top_k, {"output_measure": APPROX_DP, **TWO_STAGE}),
        ("hitting-set", ws.make_wgm_hitting_set, {"output_measure": APPROX_DP, **TWO_STAGE}),
        ("wgm budget", ws.make_wgm_from_budget, budget),
        ("dp-sips budget", ws.make_dp_sips_from_budget, budget),
        ("top-k dp-sips budget", ws.make_wgm_top_k_from_budget, dict(k=3, stage_1="dp-sips", **budget)),
        ("hitting-set budget", ws.make_wgm_hitting_set_from_budget, dict(k=3, split=0.3, **budget)),
    ]


# --------------------------------------------------------------------------------------------------------------
# contract and privacy function


def test_one_wrapper_privacy_function_is_the_opendp_map_exactly(tmlt, core, ws) -> None:
    exact = core["ExactNumber"]
    for name, make, params in every_measurement(ws):
        opendp_m = make(*ws.spark_user_items_space(), **params)
        m = tmlt.TumultMeasurement(domain(core), opendp_m)
        assert m.input_domain == domain(core), name
        assert m.input_metric == core["IfGroupedBy"](["user"], core["SymmetricDifference"]())
        assert m.output_measure == core["ApproxDP"]() and not m.is_interactive
        assert (m.user, m.item, m.opendp_measurement) == ("user", "item", opendp_m)
        for d_in in (1, 2, 3, 5):
            eps, delta = opendp_m.map(d_in)
            assert m.privacy_function(d_in) == (
                exact.from_float(eps, round_up=True),
                exact.from_float(delta, round_up=True),
            ), (name, d_in)
            assert tuple(x.to_float(round_up=False) for x in m.privacy_function(d_in)) == (eps, delta)  # no rounding
        assert m.privacy_function(0) == (exact(0), exact(0))
        assert m.privacy_function("1/2") == (exact(0), exact(0))  # datasets are an integer number of users apart
        assert m.privacy_function("5/2") == m.privacy_function(2)
        assert m.privacy_function(float("inf")) == (exact(float("inf")), exact(1))
        with pytest.raises(ValueError, match="Invalid value for IfGroupedBy metric"):
            m.privacy_function(-1)
    # and the WGM's map is the package's Gaussian + threshold loss
    m = wrapped(tmlt, core, ws.make_wgm, **WGM)
    kwargs = {k: v for k, v in WGM.items() if k != "epsilon"}
    assert [m.privacy_function(d)[1].to_float(round_up=False) for d in (1, 2)] == [
        wgm_privacy_loss(d, epsilon=1.0, **kwargs)[1] for d in (1, 2)
    ]


def test_other_columns_and_bad_arguments(tmlt, core, ws) -> None:
    named = ws.make_wgm(*ws.spark_user_items_space("uid", "query"), output_measure=APPROX_DP, **WGM)
    dom = core["SparkDataFrameDomain"](
        {"uid": core["SparkStringColumnDescriptor"](), "query": core["SparkIntegerColumnDescriptor"]()}
    )
    m = tmlt.TumultMeasurement(dom, named)
    assert (m.user, m.item) == ("uid", "query")
    assert m.input_metric == core["IfGroupedBy"](["uid"], core["SymmetricDifference"]())
    with pytest.raises(ValueError, match="user column 'uid' not found in `input_domain`"):
        tmlt.TumultMeasurement(domain(core), named)
    opendp_m = ws.make_wgm(*ws.spark_user_items_space(), output_measure=APPROX_DP, **WGM)
    with pytest.raises(ValueError, match=r"not rho-zCDP.*RhoZCDPToApproxDP"):
        tmlt.TumultMeasurement(domain(core), opendp_m, output_measure=core["RhoZCDP"]())
    with pytest.raises(ValueError, match="`item` column 'item' must not be floating point"):
        tmlt.TumultMeasurement(domain(core, core["SparkFloatColumnDescriptor"]()), opendp_m)
    with pytest.raises(TypeError, match=r"must be a tmlt\.core SparkDataFrameDomain"):
        tmlt.TumultMeasurement(wgm.user_items_space()[0], opendp_m)
    zcdp = ws.make_wgm(*ws.spark_user_items_space(), max_contributions=4, scale=3.0, threshold=20.0)
    with pytest.raises(ValueError, match=r"must have the \(epsilon, delta\) output measure"):
        tmlt.TumultMeasurement(domain(core), zcdp)
    polars_m = wgm.make_wgm(*wgm.user_items_space(), output_measure=APPROX_DP, **WGM)
    with pytest.raises(TypeError, match=r"must be built by an opendp_wgm\.spark constructor"):
        tmlt.TumultMeasurement(domain(core), polars_m)
    with pytest.raises(TypeError, match=r"must be built by an opendp_wgm\.spark constructor"):
        tmlt.TumultMeasurement(domain(core), object())


def test_calibrated_create_functions(tmlt, core, ws) -> None:
    """Each create_* is the Spark _from_budget constructor on the budget rounded down, wrapped: the same map, and
    the exact budget holds exactly."""
    sp = core["sp"]
    dom, space = domain(core), ws.spark_user_items_space()
    rational = (1, sp.Rational(1, 10**5))
    cases = (
        (tmlt.create_wgm_measurement, ws.make_wgm_from_budget, dict(max_contributions=100)),
        (tmlt.create_dp_sips_measurement, ws.make_dp_sips_from_budget, dict(max_contributions=100)),
        (tmlt.create_dp_sips_measurement, ws.make_dp_sips_from_budget, dict(max_contributions=10, rounds=2, ratio=0.5)),
        (tmlt.create_wgm_top_k_measurement, ws.make_wgm_top_k_from_budget, dict(k=3, max_contributions=10)),
        (tmlt.create_wgm_top_k_measurement, ws.make_wgm_top_k_from_budget, dict(k=3, max_contributions=10, stage_1="dp-sips")),
        (tmlt.create_wgm_hitting_set_measurement, ws.make_wgm_hitting_set_from_budget, dict(k=3, max_contributions=10, split=0.3)),
        (tmlt.create_wgm_hitting_set_measurement, ws.make_wgm_hitting_set_from_budget, dict(k=3, max_contributions=10, stage_1="dp-sips", rounds=2, ratio=0.5)),
    )  # fmt: skip
    for create, spark_make, params in cases:
        m = create(dom, "user", "item", epsilon=rational[0], delta=rational[1], **params)
        delta_down = core["ExactNumber"](rational[1]).to_float(round_up=False)
        reference = spark_make(*space, epsilon=1.0, delta=delta_down, **params)
        for d_in in (1, 2):
            assert tuple(x.to_float(round_up=False) for x in m.privacy_function(d_in)) == reference.map(d_in)
        assert m.privacy_relation(1, rational)  # exact comparison against the exact budget
        assert not m.privacy_relation(2, rational)
    with pytest.raises(ValueError, match="`delta` must be in"):
        tmlt.create_wgm_measurement(dom, "user", "item", epsilon=1, delta=1, max_contributions=10)
    with pytest.raises(ValueError, match="`epsilon` must be in"):
        tmlt.create_wgm_measurement(dom, "user", "item", epsilon=0, delta=1e-5, max_contributions=10)
    with pytest.raises(ValueError, match=r"`max_contributions` must be an integer >= 1 \(found 0\)"):
        tmlt.create_wgm_measurement(dom, "user", "item", epsilon=1, delta=1e-5, max_contributions=0)
    with pytest.raises(ValueError, match=r"`stage_1` must be one of \{'wgm', 'dp-sips'\} \(found 'sips'\)"):
        tmlt.create_wgm_top_k_measurement(
            dom, "user", "item", k=3, epsilon=1, delta=1e-5, max_contributions=10, stage_1="sips"
        )


def test_missing_tumult_names_the_extra(monkeypatch) -> None:
    """Runs everywhere: without tmlt.core, constructing says what to install."""
    from opendp_wgm.engines import tumult

    monkeypatch.setattr(tumult, "_IMPORT_ERROR", ImportError("No module named 'tmlt'"))
    with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[tumult\]"'):
        tumult.TumultMeasurement(None, None)
    for create in (tumult.create_wgm_measurement, tumult.create_dp_sips_measurement):
        with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[tumult\]"'):
            create(None, "user", "item", epsilon=1, delta=1e-5, max_contributions=10)
    for create in (tumult.create_wgm_top_k_measurement, tumult.create_wgm_hitting_set_measurement):
        with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[tumult\]"'):
            create(None, "user", "item", k=2, epsilon=1, delta=1e-5, max_contributions=10, stage_1="dp-sips")


# --------------------------------------------------------------------------------------------------------------
# releases and composition


def coverage_frame() -> pl.DataFrame:
    """Items with distinct user counts and greedy gains: A 30 users, B 25 (inside A's), C 20, D 10, E 5."""
    holders = {"A": range(30), "B": range(25), "C": range(30, 50), "D": range(50, 60), "E": range(60, 65)}
    rows = [(u, item) for item, users in holders.items() for u in users]
    return pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String}, orient="row")


def sips_frame() -> pl.DataFrame:
    """tests/measurements/test_dp_sips.py's two-round example: at Δ0 = 4 and T = 5, round 1 releases p1..p4,
    round 2 the rich users' r (6 users at weight 1), a third round at T = 2.5 the loners' q (3 users)."""
    popular = ["p1", "p2", "p3", "p4"]
    users = [popular] * 20 + [[*popular, "r"]] * 6 + [["q"]] * 3
    return pl.DataFrame(
        {"user": [u for u, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


def columns(out) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in out.schema.fields]


def test_releases_are_the_opendp_releases_as_spark_frames(tmlt, core, ws, spark) -> None:
    """The wrapper runs the OpenDP measurement: with (almost) no noise its rows are the Polars engine's, with the
    item's Spark type and each statistic's; the frame is materialised (collecting again draws nothing)."""
    from opendp_wgm.measurements import hitting_set, top_k

    frame = wgm.datasets.synthetic_zipf(n_users=300, items_per_user=6, seed=3).with_columns(
        pl.col("item").cast(pl.String)
    )
    no_noise = dict(max_contributions=8, scale=2.0**-20, threshold=2.5, epsilon=1.0)  # one lattice step
    out = wrapped(tmlt, core, ws.make_wgm, **no_noise)(spark_frame(spark, frame))
    assert columns(out) == [("item", "string"), ("noisy_weight", "double")]
    rows = out.collect()
    expected = wgm.make_wgm(*wgm.user_items_space(), output_measure=APPROX_DP, **no_noise)(frame)
    assert [r[0] for r in rows] == expected["item"].to_list()
    assert [r[1] for r in rows] == pytest.approx(expected["noisy_weight"].to_list(), abs=1e-5)
    assert out.collect() == rows

    out = wrapped(tmlt, core, ws.make_dp_sips, **SIPS)(spark_frame(spark, sips_frame()))
    assert columns(out) == [("item", "string"), ("noisy_weight", "double"), ("round", "smallint")]
    expected = wgm.make_dp_sips(*wgm.user_items_space(), output_measure=APPROX_DP, **SIPS)(sips_frame())
    assert [(r[0], r[2]) for r in out.collect()] == expected.select("item", "round").rows()
    assert expected.select("item", "round").rows() == [("p1", 1), ("p2", 1), ("p3", 1), ("p4", 1), ("q", 3), ("r", 2)]

    data = spark_frame(spark, coverage_frame())
    for make, polars_make, items in (
        (ws.make_wgm_top_k, top_k.make_wgm_top_k, ["A", "B", "C"]),
        (ws.make_wgm_hitting_set, hitting_set.make_wgm_hitting_set, ["A", "C", "D"]),
    ):
        out = wrapped(tmlt, core, make, **TWO_STAGE)(data)
        assert columns(out) == [("item", "string"), ("rank", "bigint")]  # UInt32 ranks, held by a bigint
        assert [(r[0], r[1]) for r in out.collect()] == list(zip(items, [1, 2, 3], strict=True))
        assert (
            polars_make(*wgm.user_items_space(), output_measure=APPROX_DP, **TWO_STAGE)(coverage_frame())[
                "item"
            ].to_list()
            == items
        )


def test_partition_selection_and_auto_releases_as_spark_frames(tmlt, core, ws, spark) -> None:
    """Partition selection (the item only) and ``max_contributions="auto"`` choosing Δ0 = 1 (one item per user,
    a huge budget: the release is the partition selection's, with a null ``noisy_weight``) wrap and release: the
    statistics are nullable fields, so the null column cannot fail the release after its noise."""
    data = spark.createDataFrame([(u, f"i{u % 10}") for u in range(300)], "user bigint, item string")
    selection = ws.make_partition_selection(*ws.spark_user_items_space(), epsilon=1.0, delta=1e-5)
    out = tmlt.TumultMeasurement(domain(core), selection)(data)
    assert columns(out) == [("item", "string")]
    assert sorted(r[0] for r in out.collect()) == [f"i{i}" for i in range(10)]  # 30 users each ≥ n* = 23
    auto = ws.make_wgm_from_budget(
        *ws.spark_user_items_space(), max_contributions="auto", epsilon=500.0, delta=1e-5, auto_fraction=0.5
    )
    out = tmlt.TumultMeasurement(domain(core), auto)(data)
    assert columns(out) == [("item", "string"), ("noisy_weight", "double")]
    rows = out.collect()
    assert len(rows) == 10 and all(r[1] is None for r in rows)


def test_composes_in_a_privacy_accountant_that_enforces_the_budget(tmlt, core, spark) -> None:
    sp, exact = core["sp"], core["ExactNumber"]
    frame = wgm.datasets.synthetic_zipf(n_users=2000, items_per_user=10, seed=4).with_columns(
        pl.col("item").cast(pl.String)
    )
    data = spark_frame(spark, frame)
    dom = domain(core)
    budget = (exact(3), exact(sp.Rational(1, 10**4)))
    accountant = launch_accountant(core, dom, budget, data)
    # ours: (1, ~1e-5)
    ours = tmlt.create_wgm_measurement(
        dom, "user", "item", epsilon=1, delta=sp.Rational(1, 10**5), max_contributions=10
    )
    released = accountant.measure(ours)
    assert released.count() > 0 and "1" in {r[0] for r in released.collect()}  # item 1 is held by most users
    spent_ours = ours.privacy_function(1)
    assert accountant.privacy_budget == (budget[0] - spent_ours[0], budget[1] - spent_ours[1])

    # Tumult's built-in key release: <= 2 rows per user, keep the item column, geometric partition selection
    truncate = core["LimitRowsPerID"](dom, core["SymmetricDifference"](), ["user"], 2)
    select = core["Select"](dom, core["SymmetricDifference"](), ["item"])
    item_domain = core["SparkDataFrameDomain"]({"item": core["SparkStringColumnDescriptor"]()})
    builtin = core["ChainTM"](
        core["ChainTT"](truncate, select), core["GeometricPartitionSelection"](item_domain, threshold=40, alpha=2)
    )
    assert builtin.input_metric == ours.input_metric and builtin.output_measure == ours.output_measure
    spent_builtin = builtin.privacy_function(1)
    assert spent_builtin[0] == 1  # 2 rows per user, alpha = 2: epsilon = 2 / 2
    accountant.measure(builtin)
    remaining = accountant.privacy_budget
    assert remaining == (budget[0] - spent_ours[0] - spent_builtin[0], budget[1] - spent_ours[1] - spent_builtin[1])

    # a WGM that asks for more epsilon than is left is refused, and nothing is spent
    greedy = tmlt.create_wgm_measurement(
        dom, "user", "item", epsilon=2, delta=sp.Rational(1, 10**6), max_contributions=10
    )
    with pytest.raises(core["InsufficientBudgetError"]):
        accountant.measure(greedy)
    assert accountant.privacy_budget == remaining
    # one that fits is answered
    fitting = tmlt.create_wgm_measurement(
        dom, "user", "item", epsilon=remaining[0], delta=sp.Rational(1, 10**6), max_contributions=10
    )
    accountant.measure(fitting)
    assert accountant.privacy_budget[0] == 0


def test_every_mechanism_composes_in_one_accountant(tmlt, core, spark) -> None:
    """DP-SIPS, top-k and the hitting set (stage 1 the WGM or the adaptive DP-SIPS) from budgets, released through
    one accountant, which subtracts each privacy function exactly and refuses what no longer fits."""
    sp, exact = core["sp"], core["ExactNumber"]
    dom = domain(core)
    users = [["a", "b", "c", "d", "e", f"solo{u}"] for u in range(400)]
    frame = pl.DataFrame(
        {"user": [u for u, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )
    budget = (exact(4), exact(sp.Rational(1, 10**4)))
    accountant = launch_accountant(core, dom, budget, spark_frame(spark, frame))
    each = dict(epsilon=1, delta=sp.Rational(1, 10**5), max_contributions=10)
    measurements = [
        tmlt.create_dp_sips_measurement(dom, "user", "item", **each),
        tmlt.create_wgm_top_k_measurement(dom, "user", "item", k=3, stage_1="dp-sips", **each),
        tmlt.create_wgm_hitting_set_measurement(dom, "user", "item", k=3, **each),
    ]
    sips_rows = accountant.measure(measurements[0]).collect()
    assert {r[0] for r in sips_rows} >= set("abcde")
    top = accountant.measure(measurements[1]).collect()
    assert [r[1] for r in top] == [1, 2, 3] and len({r[0] for r in top}) == 3 and {r[0] for r in top} <= set("abcde")
    cover = accountant.measure(measurements[2]).collect()
    assert len(cover) >= 1 and cover[0][0] in set("abcde")  # one pick covers every user
    spent = [m.privacy_function(1) for m in measurements]
    assert accountant.privacy_budget == (budget[0] - sum(s[0] for s in spent), budget[1] - sum(s[1] for s in spent))
    with pytest.raises(core["InsufficientBudgetError"]):
        accountant.measure(
            tmlt.create_wgm_measurement(
                dom, "user", "item", epsilon=2, delta=sp.Rational(1, 10**6), max_contributions=10
            )
        )
