"""The Tumult Core adapter (``opendp_wgm.tumult``): contract, privacy function, release, and composition.

Needs ``tmlt.core`` 0.20 and pyspark (``pip install "opendp-wgm[tumult]"``, in an environment with
``numpy < 2``: see docs/engines.md); every test that needs them skips with the reason when they are missing.
The "not installed" error is tested everywhere.
"""

from __future__ import annotations

import math

import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm.privacy.calibrate import calibrate_wgm
from opendp_wgm.privacy.gaussian import wgm_privacy_loss
from opendp_wgm.privacy.sips import dp_sips_privacy_loss

pytestmark = [
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
    # raised by Tumult's own GeometricPartitionSelection (a pandas_udf with a functionType), not by us
    pytest.mark.filterwarnings("ignore:In Python 3.6\\+ and Spark 3.0\\+:UserWarning"),
]


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")  # for the OpenDP measurements compared against


@pytest.fixture(scope="module")
def tmlt():
    pytest.importorskip("tmlt.core", reason='Tumult Core is not installed: pip install "opendp-wgm[tumult]"')
    from opendp_wgm.engines import tumult

    return tumult


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


def domain(core, item_descriptor=None):
    return core["SparkDataFrameDomain"](
        {"user": core["SparkIntegerColumnDescriptor"](), "item": item_descriptor or core["SparkStringColumnDescriptor"]()}
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


PARAMS = dict(max_contributions=64, scale=3.884141, threshold=20.4975, epsilon=1)


# --------------------------------------------------------------------------------------------------------------
# contract and privacy function


def test_contract(tmlt, core) -> None:
    m = tmlt.WGMMeasurement(domain(core), "user", "item", **PARAMS)
    assert m.input_domain == domain(core)
    assert m.input_metric == core["IfGroupedBy"](["user"], core["SymmetricDifference"]())
    assert m.output_measure == core["ApproxDP"]()
    assert not m.is_interactive
    assert (m.user, m.item, m.max_contributions, m.scale, m.threshold, m.epsilon) == ("user", "item", 64, 3.884141, 20.4975, 1.0)


def test_privacy_function_is_the_package_map_exactly(tmlt, core) -> None:
    m = tmlt.WGMMeasurement(domain(core), "user", "item", **PARAMS)
    exact = core["ExactNumber"]
    kwargs = {k: v for k, v in PARAMS.items() if k != "epsilon"}
    for d_in in (1, 2, 3):
        eps, delta = wgm_privacy_loss(d_in, epsilon=1.0, **kwargs)
        assert m.privacy_function(d_in) == (exact.from_float(eps, round_up=True), exact.from_float(delta, round_up=True))
        assert m.privacy_function(d_in)[1].to_float(round_up=False) == delta  # no rounding on the way
    # and it is the OpenDP measurement's map under the (ε, δ) measure
    reference = wgm.make_wgm(
        *wgm.user_items_space(), output_measure=dp.approximate(dp.max_divergence()), epsilon=1.0, **kwargs
    )
    assert tuple(x.to_float(round_up=False) for x in m.privacy_function(1)) == reference.map(1)
    assert m.privacy_function(0) == (exact(0), exact(0))
    assert m.privacy_function("1/2") == (exact(0), exact(0))  # datasets are an integer number of users apart
    assert m.privacy_function("3/2") == m.privacy_function(1)
    assert m.privacy_function(float("inf")) == (exact(float("inf")), exact(1))
    with pytest.raises(ValueError, match="Invalid value for IfGroupedBy metric"):
        m.privacy_function(-1)


def test_relation_and_calibrated_factory(tmlt, core) -> None:
    sp = core["sp"]
    budget = (1, sp.Rational(1, 10**5))
    m = tmlt.create_wgm_measurement(domain(core), "user", "item", epsilon=budget[0], delta=budget[1], max_contributions=100)
    calibration = calibrate_wgm(max_contributions=100, epsilon=1.0, delta=1e-5)
    assert (m.scale, m.threshold) == (calibration.scale, calibration.threshold)
    assert math.isclose(m.scale, 3.88414, rel_tol=1e-5) and math.isclose(m.threshold, 20.7898, rel_tol=1e-5)
    assert m.privacy_relation(1, budget)  # exact comparison against the exact budget
    eps, delta = m.privacy_function(1)
    assert eps == 1 and delta <= budget[1]
    assert not m.privacy_relation(1, (1, sp.Rational(1, 10**6)))
    assert not m.privacy_relation(2, budget)


def test_bad_parameters(tmlt, core) -> None:
    with pytest.raises(ValueError, match=r"not rho-zCDP.*RhoZCDPToApproxDP"):
        tmlt.WGMMeasurement(domain(core), "user", "item", output_measure=core["RhoZCDP"](), **PARAMS)
    with pytest.raises(ValueError, match="item column 'thing' not found in `input_domain`"):
        tmlt.WGMMeasurement(domain(core), "user", "thing", **PARAMS)
    with pytest.raises(ValueError, match="`item` column 'item' must not be floating point"):
        tmlt.WGMMeasurement(domain(core, core["SparkFloatColumnDescriptor"]()), "user", "item", **PARAMS)
    with pytest.raises(TypeError, match=r"must be a tmlt\.core SparkDataFrameDomain"):
        tmlt.WGMMeasurement(wgm.user_items_space()[0], "user", "item", **PARAMS)
    with pytest.raises(ValueError, match=r"`max_contributions` must be an integer >= 1 \(found 0\)"):
        tmlt.WGMMeasurement(domain(core), "user", "item", **{**PARAMS, "max_contributions": 0})
    with pytest.raises(ValueError, match="`epsilon` must be in"):
        tmlt.WGMMeasurement(domain(core), "user", "item", **{**PARAMS, "epsilon": 0})
    with pytest.raises(ValueError, match="`delta` must be in"):
        tmlt.create_wgm_measurement(domain(core), "user", "item", epsilon=1, delta=1, max_contributions=10)


def test_missing_tumult_names_the_extra(monkeypatch) -> None:
    """Runs everywhere: without tmlt.core, constructing says what to install."""
    from opendp_wgm.engines import tumult

    monkeypatch.setattr(tumult, "_IMPORT_ERROR", ImportError("No module named 'tmlt'"))
    with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[tumult\]"'):
        tumult.WGMMeasurement(None, "user", "item", **PARAMS)
    with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[tumult\]"'):
        tumult.create_wgm_measurement(None, "user", "item", epsilon=1, delta=1e-5, max_contributions=10)
    with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[tumult\]"'):
        tumult.DPSIPSMeasurement(None, "user", "item", max_contributions=2, scales=[1.0], thresholds=[5.0], epsilon=1)
    with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[tumult\]"'):
        tumult.create_dp_sips_measurement(None, "user", "item", epsilon=1, delta=1e-5, max_contributions=10)
    for cls in (tumult.DPSIPSTopKMeasurement, tumult.DPSIPSHittingSetMeasurement):
        with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[tumult\]"'):
            cls(None, "user", "item", k=2, max_contributions=2, sips_scales=[1.0], sips_thresholds=[5.0],
                peel_scale=1.0, sips_epsilon=1, peel_delta=1e-6)  # fmt: skip
    with pytest.raises(ModuleNotFoundError, match=r'pip install "opendp-wgm\[tumult\]"'):
        tumult.create_wgm_top_k_measurement(
            None, "user", "item", k=2, epsilon=1, delta=1e-5, max_contributions=10, stage_1="dp-sips"
        )


# --------------------------------------------------------------------------------------------------------------
# release and composition


def test_no_noise_release_equals_polars(tmlt, core, spark) -> None:
    frame = wgm.datasets.synthetic_zipf(n_users=300, items_per_user=6, seed=3).with_columns(pl.col("item").cast(pl.String))
    m = tmlt.WGMMeasurement(domain(core), "user", "item", max_contributions=8, scale=1e-7, threshold=2.5, epsilon=1)
    out = m(spark_frame(spark, frame))
    assert [(f.name, f.dataType.simpleString()) for f in out.schema.fields] == [("item", "string"), ("noisy_weight", "double")]
    rows = out.collect()
    expected = wgm.make_wgm(*wgm.user_items_space(), max_contributions=8, scale=1e-7, threshold=2.5)(frame)
    assert [r[0] for r in rows] == expected["item"].to_list()
    assert [r[1] for r in rows] == pytest.approx(expected["noisy_weight"].to_list(), abs=1e-5)
    assert out.collect() == rows  # materialised: collecting again draws no new noise


def test_composes_in_a_privacy_accountant_that_enforces_the_budget(tmlt, core, spark) -> None:
    sp, exact = core["sp"], core["ExactNumber"]
    frame = wgm.datasets.synthetic_zipf(n_users=2000, items_per_user=10, seed=4).with_columns(pl.col("item").cast(pl.String))
    data = spark_frame(spark, frame)
    dom = domain(core)
    budget = (exact(3), exact(sp.Rational(1, 10**4)))
    accountant = launch_accountant(core, dom, budget, data)
    # ours: (1, ~1e-5)
    ours = tmlt.create_wgm_measurement(dom, "user", "item", epsilon=1, delta=sp.Rational(1, 10**5), max_contributions=10)
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
    greedy = tmlt.create_wgm_measurement(dom, "user", "item", epsilon=2, delta=sp.Rational(1, 10**6), max_contributions=10)
    with pytest.raises(core["InsufficientBudgetError"]):
        accountant.measure(greedy)
    assert accountant.privacy_budget == remaining
    # one that fits is answered
    fitting = tmlt.create_wgm_measurement(dom, "user", "item", epsilon=remaining[0], delta=sp.Rational(1, 10**6), max_contributions=10)
    accountant.measure(fitting)
    assert accountant.privacy_budget[0] == 0


# --------------------------------------------------------------------------------------------------------------
# two-stage mechanisms


def coverage_frame() -> pl.DataFrame:
    """Items with distinct user counts and greedy gains: A 30 users, B 25 (inside A's), C 20, D 10, E 5."""
    holders = {"A": range(30), "B": range(25), "C": range(30, 50), "D": range(50, 60), "E": range(60, 65)}
    rows = [(u, item) for item, users in holders.items() for u in users]
    return pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String}, orient="row")


def test_two_stage_measurements(tmlt, core, spark) -> None:
    from opendp_wgm.measurements import hitting_set, top_k

    dp.enable_features("contrib", "honest-but-curious")
    approx_dp = dp.approximate(dp.max_divergence())
    params = dict(k=3, max_contributions=3, wgm_scale=1e-6, wgm_threshold=1.5, peel_scale=1e-3, wgm_epsilon=1.0, peel_delta=1e-6)
    data = spark_frame(spark, coverage_frame())
    cases = (
        (tmlt.WGMTopKMeasurement, top_k.make_wgm_top_k, ["A", "B", "C"]),
        (tmlt.WGMHittingSetMeasurement, hitting_set.make_wgm_hitting_set, ["A", "C", "D"]),
    )
    for cls, polars_make, expected in cases:
        m = cls(domain(core), "user", "item", **params)
        assert m.input_metric == core["IfGroupedBy"](["user"], core["SymmetricDifference"]())
        assert m.output_measure == core["ApproxDP"]()
        reference = polars_make(*wgm.user_items_space(), output_measure=approx_dp, **params)
        for d_in in (1, 2):
            assert tuple(x.to_float(round_up=False) for x in m.privacy_function(d_in)) == reference.map(d_in)
        assert m.privacy_function(0) == (core["ExactNumber"](0), core["ExactNumber"](0))
        rows = m(data).collect()
        assert [(r[0], r[1]) for r in rows] == list(zip(expected, [1, 2, 3], strict=False))
    with pytest.raises(ValueError, match="not rho-zCDP"):
        tmlt.WGMTopKMeasurement(domain(core), "user", "item", output_measure=core["RhoZCDP"](), **params)


def test_calibrated_two_stage_measurements_compose(tmlt, core, spark) -> None:
    sp, exact = core["sp"], core["ExactNumber"]
    dom = domain(core)
    budget = (exact(2), exact(sp.Rational(1, 10**4)))
    top = tmlt.create_wgm_top_k_measurement(dom, "user", "item", k=3, epsilon=1, delta=sp.Rational(1, 10**5), max_contributions=3)
    cover = tmlt.create_wgm_hitting_set_measurement(dom, "user", "item", k=3, epsilon=1, delta=sp.Rational(1, 10**5), max_contributions=3)
    for m in (top, cover):
        assert m.privacy_relation(1, (1, sp.Rational(1, 10**5)))
    accountant = launch_accountant(core, dom, budget, spark_frame(spark, coverage_frame()))
    accountant.measure(top)
    accountant.measure(cover)
    spent = [m.privacy_function(1) for m in (top, cover)]
    assert accountant.privacy_budget == (budget[0] - spent[0][0] - spent[1][0], budget[1] - spent[0][1] - spent[1][1])
    with pytest.raises(core["InsufficientBudgetError"]):
        accountant.measure(top)


# --------------------------------------------------------------------------------------------------------------
# DP-SIPS


def sips_frame() -> pl.DataFrame:
    """tests/measurements/test_dp_sips.py's two-round example: at Δ0 = 4 and T = 5, round 1 releases p1..p4,
    round 2 the rich users' r (6 users at weight 1), a third round at T = 2.5 the loners' q (3 users)."""
    popular = ["p1", "p2", "p3", "p4"]
    users = [popular] * 20 + [[*popular, "r"]] * 6 + [["q"]] * 3
    return pl.DataFrame(
        {"user": [u for u, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


# σ = 2^-20, the least the (ε, δ) map allows: about one lattice step of noise
SIPS = dict(max_contributions=4, scales=[2.0**-20] * 3, thresholds=[5.0, 5.0, 2.5])


def test_dp_sips_privacy_function_is_the_map(tmlt, core) -> None:
    params = dict(max_contributions=20, scales=(6.0, 3.0, 2.0), thresholds=(30.0, 15.0, 9.0))
    m = tmlt.DPSIPSMeasurement(domain(core), "user", "item", epsilon=1.5, **params)
    assert m.input_metric == core["IfGroupedBy"](["user"], core["SymmetricDifference"]())
    assert m.output_measure == core["ApproxDP"]()
    for d_in in (1, 2):
        expected = dp_sips_privacy_loss(d_in, epsilon=1.5, **params)
        assert tuple(x.to_float(round_up=False) for x in m.privacy_function(d_in)) == expected
    reference = wgm.make_dp_sips(*wgm.user_items_space(), output_measure=dp.approximate(dp.max_divergence()), epsilon=1.5, **params)
    assert tuple(x.to_float(round_up=False) for x in m.privacy_function(1)) == reference.map(1)
    assert m.privacy_function(0) == (core["ExactNumber"](0), core["ExactNumber"](0))
    with pytest.raises(ValueError, match="not rho-zCDP"):
        tmlt.DPSIPSMeasurement(domain(core), "user", "item", output_measure=core["RhoZCDP"](), epsilon=1, **params)
    with pytest.raises(ValueError, match=r"`thresholds` must have one entry per round"):
        tmlt.DPSIPSMeasurement(domain(core), "user", "item", epsilon=1, **{**params, "thresholds": (1.0,)})
    with pytest.raises(ValueError, match="`epsilon` must be in"):
        tmlt.DPSIPSMeasurement(domain(core), "user", "item", epsilon=0, **params)


def test_dp_sips_release_and_composition(tmlt, core, spark) -> None:
    sp, exact = core["sp"], core["ExactNumber"]
    frame = sips_frame()
    data = spark_frame(spark, frame)
    m = tmlt.DPSIPSMeasurement(domain(core), "user", "item", epsilon=1, **SIPS)
    out = m(data)
    assert [(f.name, f.dataType.simpleString()) for f in out.schema.fields] == [
        ("item", "string"), ("noisy_weight", "double"), ("round", "smallint")
    ]
    rows = out.collect()
    expected = wgm.make_dp_sips(*wgm.user_items_space(), **SIPS)(frame)
    assert [(r[0], r[2]) for r in rows] == expected.select("item", "round").rows()
    assert [(r[0], r[2]) for r in rows] == [("p1", 1), ("p2", 1), ("p3", 1), ("p4", 1), ("q", 3), ("r", 2)]
    assert out.collect() == rows  # materialised: collecting again draws no new noise

    dom = domain(core)
    budget = (exact(3), exact(sp.Rational(1, 10**4)))
    accountant = launch_accountant(core, dom, budget, data)
    sips = tmlt.create_dp_sips_measurement(dom, "user", "item", epsilon=1, delta=sp.Rational(1, 10**5), max_contributions=4)
    assert sips.privacy_relation(1, (1, sp.Rational(1, 10**5)))
    wgm_m = tmlt.create_wgm_measurement(dom, "user", "item", epsilon=1, delta=sp.Rational(1, 10**5), max_contributions=4)
    accountant.measure(sips)
    accountant.measure(wgm_m)
    spent = [x.privacy_function(1) for x in (sips, wgm_m)]
    assert accountant.privacy_budget == (budget[0] - spent[0][0] - spent[1][0], budget[1] - spent[0][1] - spent[1][1])
    greedy = tmlt.create_dp_sips_measurement(dom, "user", "item", epsilon=2, delta=sp.Rational(1, 10**6), max_contributions=4)
    with pytest.raises(core["InsufficientBudgetError"]):
        accountant.measure(greedy)


@pytest.mark.parametrize(
    "budget",
    [
        {"epsilon": 1.0, "delta": 1e-5},
        {"epsilon": 0.3, "delta": 1e-7, "max_contributions": 10},
        {"epsilon": 4.0, "delta": 1e-4, "noise_delta_fraction": 0.3},
    ],
)
def test_dp_sips_default_is_the_adaptive_schedule_with_the_polars_map(tmlt, core, budget) -> None:
    """create_dp_sips_measurement without a schedule is the adaptive DP-SIPS: it takes and reports the adaptive
    parameters and its privacy function is the Polars default's map (the fixed (0.05, 0.95) map differs)."""
    from opendp_wgm.privacy.calibrate import calibrate_dp_sips
    from opendp_wgm.privacy.sips import DEFAULT_FRACTIONS

    budget = {"max_contributions": 100, **budget}
    m = tmlt.create_dp_sips_measurement(domain(core), "user", "item", **budget)
    cal = calibrate_dp_sips(**budget, adaptive=True)
    assert m.schedule == {
        "scales": cal.scales, "thresholds": cal.thresholds, "statistic_scale": cal.statistic_scale,
        "branch_scales": cal.branch_scales, "branch_thresholds": cal.branch_thresholds,
    }  # fmt: skip
    reference = wgm.make_dp_sips_from_budget(*wgm.user_items_space(), **budget)
    for d_in in (1, 2, 3):
        assert tuple(x.to_float(round_up=False) for x in m.privacy_function(d_in)) == reference.map(d_in) == cal.loss(d_in)
    assert reference.map(1) != calibrate_dp_sips(**budget, fractions=DEFAULT_FRACTIONS).loss(1)
    assert reference.check(1, (budget["epsilon"], budget["delta"]))  # so the Tumult privacy function fits too
    fixed = tmlt.create_dp_sips_measurement(domain(core), "user", "item", **budget, fractions=DEFAULT_FRACTIONS)
    assert fixed.schedule["statistic_scale"] is None and fixed.schedule["branch_scales"] is None
    with pytest.raises(ValueError, match=r"`branch_scales` must be given with `statistic_scale`"):
        tmlt.DPSIPSMeasurement(
            domain(core), "user", "item", epsilon=1, max_contributions=2, scales=[1.0, 1.0], thresholds=[5.0, 5.0],
            statistic_scale=1.0,
        )  # fmt: skip


def test_dp_sips_adaptive_release_takes_the_branch(tmlt, core, spark) -> None:
    """The adaptive DP-SIPS on Tumult runs the Spark release: on the two-round data every user still holding an
    unreleased item after round 1 (the 6 rich users: r) is boosted, so the dense branch runs (rounds 2 and 3 at
    T = 1e6 then 2.5: r in round 3; q, 3 loners of weight 1 each, too); σ_s = 2^-20 cannot change the rule."""
    params = dict(
        SIPS, scales=[2.0**-20] * 2, thresholds=[5.0, 5.0], statistic_scale=2.0**-20,
        branch_scales=[2.0**-20] * 2, branch_thresholds=[1e6, 2.5],
    )  # fmt: skip
    m = tmlt.DPSIPSMeasurement(domain(core), "user", "item", epsilon=1, **params)
    rows = m(spark_frame(spark, sips_frame())).collect()
    assert [(r[0], r[2]) for r in rows] == [("p1", 1), ("p2", 1), ("p3", 1), ("p4", 1), ("q", 3), ("r", 3)]
    reference = wgm.make_dp_sips(*wgm.user_items_space(), output_measure=dp.approximate(dp.max_divergence()), epsilon=1, **params)
    assert tuple(x.to_float(round_up=False) for x in m.privacy_function(1)) == reference.map(1)


# --------------------------------------------------------------------------------------------------------------
# DP-SIPS as stage 1 of the two-stage mechanisms


def polars_dp_sips_two_stage(mechanism: str, **params):
    """The Polars twin of DPSIPSTopKMeasurement / DPSIPSHittingSetMeasurement, under (ε, δ)."""
    from opendp_wgm.measurements.hitting_set import make_user_peeling
    from opendp_wgm.measurements.top_k import make_peeling_top_k
    from opendp_wgm.measurements.two_stage import make_dp_sips_then_peeling
    from opendp_wgm.privacy.peeling import TOP_K, USER_PEELING

    peeling, accounting = (make_peeling_top_k, TOP_K) if mechanism == "top-k" else (make_user_peeling, USER_PEELING)
    return make_dp_sips_then_peeling(
        *wgm.user_items_space(), **params, output_measure=dp.approximate(dp.max_divergence()), noise="lattice",
        item=None, passes=1, engine="auto", peeling=peeling, accounting=accounting,
    )  # fmt: skip


# SIPS's rounds (p1..p4, then r, then q), then peeling with no noise to speak of
SIPS_TWO_STAGE = dict(
    max_contributions=4, sips_scales=[2.0**-20] * 3, sips_thresholds=[5.0, 5.0, 2.5], peel_scale=1e-3, sips_epsilon=1.0,
    peel_delta=1e-6,
)  # fmt: skip


def test_dp_sips_two_stage_measurements(tmlt, core, spark) -> None:
    data = spark_frame(spark, sips_frame())
    popular = {"p1", "p2", "p3", "p4"}
    for cls, mechanism, k in ((tmlt.DPSIPSTopKMeasurement, "top-k", 6), (tmlt.DPSIPSHittingSetMeasurement, "hitting-set", 2)):
        m = cls(domain(core), "user", "item", k=k, **SIPS_TWO_STAGE)
        assert m.input_metric == core["IfGroupedBy"](["user"], core["SymmetricDifference"]())
        assert m.output_measure == core["ApproxDP"]()
        reference = polars_dp_sips_two_stage(mechanism, k=k, **SIPS_TWO_STAGE)
        for d_in in (1, 2, 3):
            assert tuple(x.to_float(round_up=False) for x in m.privacy_function(d_in)) == reference.map(d_in)
        assert m.privacy_function(0) == (core["ExactNumber"](0), core["ExactNumber"](0))
        out = m(data)
        assert [(f.name, f.dataType.simpleString()) for f in out.schema.fields] == [("item", "string"), ("rank", "int")]
        rows = [(r[0], r[1]) for r in out.collect()]
        assert [rank for _, rank in rows] == list(range(1, k + 1))
        items = [item for item, _ in rows]
        # r is a candidate only from round 2, q only from round 3
        assert items == ([*items[:4], "r", "q"] if mechanism == "top-k" else [items[0], "q"])
        assert set(items[: k - 2 if mechanism == "top-k" else 1]) <= popular
    with pytest.raises(ValueError, match="not rho-zCDP"):
        tmlt.DPSIPSTopKMeasurement(domain(core), "user", "item", k=2, output_measure=core["RhoZCDP"](), **SIPS_TWO_STAGE)
    with pytest.raises(ValueError, match="`sips_epsilon` must be in"):
        tmlt.DPSIPSHittingSetMeasurement(domain(core), "user", "item", k=2, **{**SIPS_TWO_STAGE, "sips_epsilon": 0})
    with pytest.raises(ValueError, match="`thresholds` must have one entry per round"):
        tmlt.DPSIPSTopKMeasurement(domain(core), "user", "item", k=2, **{**SIPS_TWO_STAGE, "sips_thresholds": [5.0]})


@pytest.mark.parametrize("budget", [{"epsilon": 1.0, "delta": 1e-5}, {"epsilon": 0.5, "delta": 1e-7, "split": 0.3}])
def test_dp_sips_two_stage_default_is_the_adaptive_schedule(tmlt, core, budget) -> None:
    """With ``stage_1="dp-sips"`` and no schedule, stage 1 is the adaptive DP-SIPS: the two-stage classes take
    its parameters (``sips_statistic_scale``, ``sips_branch_*``) and the maps are the Polars twin's, whose stage
    1 map is the adaptive calibration's."""
    from opendp_wgm.privacy.calibrate import calibrate_wgm_hitting_set, calibrate_wgm_top_k

    cases = (
        (tmlt.create_wgm_top_k_measurement, calibrate_wgm_top_k, tmlt.DPSIPSTopKMeasurement, "top-k"),
        (tmlt.create_wgm_hitting_set_measurement, calibrate_wgm_hitting_set, tmlt.DPSIPSHittingSetMeasurement, "hitting-set"),
    )  # fmt: skip
    for create, calibrate, cls, mechanism in cases:
        params = dict(k=3, max_contributions=10, stage_1="dp-sips", **budget)
        cal = calibrate(**params)
        assert cal.sips is not None and cal.sips.statistic_scale is not None
        arguments = tmlt._stage_1_parameters(cal)
        assert arguments["sips_statistic_scale"] == cal.sips.statistic_scale
        assert arguments["sips_branch_scales"] == cal.sips.branch_scales
        explicit = cls(domain(core), "user", "item", **arguments)
        created = create(domain(core), "user", "item", **params)
        reference = polars_dp_sips_two_stage(mechanism, **arguments)
        for d_in in (1, 2, 3):
            expected = reference.map(d_in)
            for m in (explicit, created):
                assert tuple(x.to_float(round_up=False) for x in m.privacy_function(d_in)) == expected


def test_calibrated_dp_sips_two_stage_measurements(tmlt, core, spark) -> None:
    sp, exact = core["sp"], core["ExactNumber"]
    dom = domain(core)
    cases = (
        (tmlt.create_wgm_top_k_measurement, wgm.make_wgm_top_k_from_budget, tmlt.DPSIPSTopKMeasurement),
        (tmlt.create_wgm_hitting_set_measurement, wgm.make_wgm_hitting_set_from_budget, tmlt.DPSIPSHittingSetMeasurement),
    )
    for create, polars_make, cls in cases:
        for budget in ({"epsilon": 1.0, "delta": 1e-5}, {"epsilon": 0.5, "delta": 1e-7, "split": 0.3}):
            for schedule in ({}, {"rounds": 2, "ratio": 0.5}):
                params = dict(k=3, max_contributions=10, stage_1="dp-sips", **budget, **schedule)
                m = create(dom, "user", "item", **params)
                assert isinstance(m, cls)
                reference = polars_make(*wgm.user_items_space(), **params)  # the same calibration and map
                assert tuple(x.to_float(round_up=False) for x in m.privacy_function(1)) == reference.map(1)
                assert tuple(x.to_float(round_up=False) for x in m.privacy_function(2)) == reference.map(2)
        rational = (1, sp.Rational(1, 10**5))
        m = create(dom, "user", "item", k=3, epsilon=rational[0], delta=rational[1], max_contributions=10, stage_1="dp-sips")
        assert m.privacy_relation(1, rational)
        with pytest.raises(ValueError, match=r"`stage_1` must be one of \{'wgm', 'dp-sips'\} \(found 'sips'\)"):
            create(dom, "user", "item", k=3, epsilon=1, delta=1e-5, max_contributions=10, stage_1="sips")
        with pytest.raises(ValueError, match=r"`rounds` must be None unless stage_1='dp-sips' \(found 2\)"):
            create(dom, "user", "item", k=3, epsilon=1, delta=1e-5, max_contributions=10, rounds=2)
    # released through a Tumult accountant: k ranked items of those every user holds
    users = [["a", "b", "c", "d", "e", f"solo{u}"] for u in range(400)]
    frame = pl.DataFrame({"user": [u for u, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]})
    budget = (exact(1), exact(sp.Rational(1, 10**5)))
    accountant = launch_accountant(core, dom, budget, spark_frame(spark, frame))
    top = tmlt.create_wgm_top_k_measurement(dom, "user", "item", k=3, epsilon=1, delta=sp.Rational(1, 10**5), max_contributions=10, stage_1="dp-sips")
    rows = accountant.measure(top).collect()
    assert [r[1] for r in rows] == [1, 2, 3] and len({r[0] for r in rows}) == 3 and {r[0] for r in rows} <= set("abcde")
