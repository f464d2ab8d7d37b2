"""DP-SIPS as stage 1 of the two-stage top-k and hitting set, calibrated to a budget (``stage_1="dp-sips"``): the
map fits the budget and is the sum of the stage maps, the release is k ranked items, the WGM default is
unchanged, and bad options give clear errors."""

from __future__ import annotations

import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm.measurements.hitting_set import make_wgm_hitting_set_from_budget
from opendp_wgm.measurements.top_k import make_wgm_top_k_from_budget
from opendp_wgm.privacy.calibrate import calibrate_dp_sips, calibrate_wgm_hitting_set, calibrate_wgm_top_k
from opendp_wgm.privacy.peeling import TOP_K, USER_PEELING, add_up, peeling_loss

BUDGETS = [({"epsilon": 1.0}, "approx_dp"), ({"rho": 0.5}, "approx_zcdp")]
#: (constructor, calibration, peeling accounting)
MECHANISMS = [
    (make_wgm_top_k_from_budget, calibrate_wgm_top_k, TOP_K),
    (make_wgm_hitting_set_from_budget, calibrate_wgm_hitting_set, USER_PEELING),
]
DELTA = 1e-5


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


@pytest.mark.parametrize(("make", "calibrate", "accounting"), MECHANISMS)
@pytest.mark.parametrize(("budget", "kind"), BUDGETS)
def test_map_fits_the_budget_and_is_the_sum_of_the_stage_maps(
    make: object, calibrate: object, accounting: object, budget: dict[str, float], kind: str
) -> None:
    options = {"k": 20, "max_contributions": 50, "delta": DELTA, **budget}
    cal = calibrate(**options, stage_1="dp-sips", rounds=3, ratio=0.3)
    assert cal.wgm is None and cal.sips is not None and cal.stage_1 is cal.sips and cal.sips.rounds == 3
    m = make(*wgm.user_items_space(), **options, stage_1="dp-sips", rounds=3, ratio=0.3)
    value = next(iter(budget.values()))
    assert m.check(1, (value, DELTA))
    # stage 1 as a measurement on its own: DP-SIPS at the calibrated (σ_i, T_i); stage 2: k peeling rounds
    sips = wgm.make_dp_sips(*wgm.user_items_space(), **wgm.measurements.dp_sips.dp_sips_arguments(cal.sips))
    first = sips.map(1)
    second = peeling_loss(
        1, k=20, scale=cal.peel_scale, kind=kind, accounting=accounting,
        delta=cal.peel_delta,
    )
    expected = (add_up(first[0], second[0], accounting), add_up(first[1], second[1], accounting))
    assert m.map(1) == pytest.approx(expected, rel=0, abs=0)
    assert m.map(2) > m.map(1)  # the map is a function of d_in, not a constant
    # the budget split: stage 1 spends (at most) its share, as DP-SIPS calibrated on its own would
    assert first[0] <= 0.5 * value and first[0] == pytest.approx(0.5 * value, rel=1e-6)


@pytest.mark.parametrize(("make", "calibrate", "accounting"), MECHANISMS)
def test_dp_sips_stage_1_changes_only_stage_1(make: object, calibrate: object, accounting: object) -> None:
    """The peeling stage is the WGM version's (same share of the budget); stage 1 is DP-SIPS's calibration."""
    options = {"k": 10, "max_contributions": 100, "delta": DELTA, "epsilon": 1.0}
    default = calibrate(**options)
    explicit = calibrate(**options, stage_1="wgm")
    sips = calibrate(**options, stage_1="dp-sips", rounds=2, ratio=0.5)
    assert default == explicit and default.sips is None and default.stage_1 is default.wgm
    if make is make_wgm_top_k_from_budget:  # top-k's stage 2 does not depend on stage 1's loss
        assert sips.peel_scale == default.peel_scale
    assert sips.sips.fractions == pytest.approx((1 / 3, 2 / 3)) and sips.sips.max_contributions == 100
    expected = calibrate_dp_sips(max_contributions=100, epsilon=0.5, delta=DELTA / 2, rounds=2, ratio=0.5)
    assert sips.sips == expected


def _many_holders() -> pl.DataFrame:
    """400 users each hold a..e (and one item of their own): a..e are released by DP-SIPS at ε = 1."""
    common = ["a", "b", "c", "d", "e"]
    users = [[*common, f"solo{u}"] for u in range(400)]
    return pl.DataFrame(
        {"user": [u for u, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


@pytest.mark.parametrize(("make", "calibrate", "accounting"), MECHANISMS)
def test_releases_k_ranked_items(make: object, calibrate: object, accounting: object) -> None:
    m = make(
        *wgm.user_items_space(), k=3, max_contributions=10, epsilon=1.0, delta=DELTA, stage_1="dp-sips"
    )
    released = m(_many_holders())
    assert released.columns == ["item", "rank"]
    assert released["rank"].to_list() == [1, 2, 3]
    assert set(released["item"].to_list()) <= {"a", "b", "c", "d", "e"}
    assert released["item"].n_unique() == 3


@pytest.mark.parametrize(("make", "calibrate", "accounting"), MECHANISMS)
@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"stage_1": "sips"}, ValueError, "`stage_1` must be one of {'wgm', 'dp-sips'} (found 'sips')"),
        ({"rounds": 2}, ValueError, "`rounds` must be None unless stage_1='dp-sips' (found 2)"),
        ({"stage_1": "wgm", "ratio": 0.5}, ValueError, "`ratio` must be None unless stage_1='dp-sips' (found 0.5)"),
        ({"stage_1": "dp-sips", "rounds": 0}, ValueError, "`rounds` must be"),
        ({"stage_1": "dp-sips", "ratio": -1.0}, ValueError, "`ratio` must be"),
        ({"stage_1": "dp-sips", "rounds": 2.5}, TypeError, "`rounds` must be"),
    ],
)
def test_bad_stage_1_options(
    make: object, calibrate: object, accounting: object, options: dict[str, object], error: type, message: str
) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{")):
        make(*wgm.user_items_space(), k=3, max_contributions=10, epsilon=1.0, delta=DELTA, **options)


# --------------------------------------------------------------------------------------------------------------
# the default stage 1 is DP-SIPS's adaptive schedule


@pytest.mark.parametrize(("make", "calibrate", "accounting"), MECHANISMS)
@pytest.mark.parametrize(("budget", "kind"), [*BUDGETS, ({"epsilon": 0.3}, "approx_dp"), ({"rho": 4.0}, "approx_zcdp")])
def test_default_stage_1_is_the_adaptive_schedule(
    make: object, calibrate: object, accounting: object, budget: dict[str, float], kind: str
) -> None:
    """Without ``rounds``/``ratio``, stage 1 is :func:`calibrate_dp_sips`'s adaptive schedule at stage 1's share,
    and the map is the sum of the adaptive DP-SIPS map and the peeling's."""
    from opendp_wgm.measurements.dp_sips import dp_sips_arguments

    options = {"k": 10, "max_contributions": 50, "delta": DELTA, **budget}
    cal = calibrate(**options, stage_1="dp-sips")
    first_budget = {name: 0.5 * value for name, value in budget.items()}
    first_delta = DELTA / 2 if kind == "approx_dp" else DELTA
    expected = calibrate_dp_sips(max_contributions=50, delta=first_delta, adaptive=True, **first_budget)
    assert cal.sips == expected and cal.sips.statistic_scale is not None and len(cal.sips.branch_scales) == 2
    m = make(*wgm.user_items_space(), **options, stage_1="dp-sips")
    sips = wgm.make_dp_sips(*wgm.user_items_space(), **dp_sips_arguments(cal.sips))
    for d_in in (1, 2, 3):
        first = sips.map(d_in)
        assert first == expected.loss(d_in)
        second = peeling_loss(d_in, k=10, scale=cal.peel_scale, kind=kind, accounting=accounting, delta=cal.peel_delta)
        delta = add_up(first[1], second[1], accounting)
        assert m.map(d_in) == (add_up(first[0], second[0], accounting), min(1.0, delta) if accounting.cap_delta else delta)
    assert m.check(1, (next(iter(budget.values())), DELTA))


def _branch_data(dense: bool) -> pl.DataFrame:
    """tests/measurements/test_dp_sips.py's branch data: 40 users hold "p" and one item of their own; round 1
    (T = 10) releases "p" only. Dense: the 40 then hold one unreleased item of two (all boosted). Sparse: 200
    more users hold 30 items each, none released (40 of 240 remaining users boosted)."""
    users = [["p", f"own{u}"] for u in range(40)]
    if not dense:
        users += [[f"s{u}_{j}" for j in range(30)] for u in range(200)]
    return pl.DataFrame(
        {"user": [u for u, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


@pytest.mark.parametrize("mechanism", ["top-k", "hitting-set"])
@pytest.mark.parametrize("dense", [True, False])
def test_both_branches_reach_stage_2(mechanism: str, dense: bool) -> None:
    """The adaptive parameters reach stage 1 (``make_dp_sips_then_peeling``'s ``sips_statistic_scale``,
    ``sips_branch_*``): no noise to speak of, the sparse branch's round 2 releases the 40 own items (weight 1 >
    0.5) and the dense branch's rounds do not (T = 1e6): stage 2 sees them as candidates only on the sparse data."""
    import functools

    from opendp_wgm.measurements.hitting_set import make_user_peeling
    from opendp_wgm.measurements.top_k import make_peeling_top_k
    from opendp_wgm.measurements.two_stage import make_dp_sips_then_peeling

    peeling, accounting = {
        "top-k": (functools.partial(make_peeling_top_k, method="auto"), TOP_K),
        "hitting-set": (make_user_peeling, USER_PEELING),
    }[mechanism]
    tiny = 1e-7
    m = make_dp_sips_then_peeling(
        *wgm.user_items_space(), k=41, max_contributions=40, sips_scales=[tiny, tiny], sips_thresholds=[10.0, 0.5],
        sips_statistic_scale=tiny, sips_branch_scales=[tiny, tiny], sips_branch_thresholds=[1e6, 1e6],
        peel_scale=1e-3, output_measure=None, sips_epsilon=None, peel_delta=None, noise="lattice", item=None,
        passes=1, engine="auto", peeling=peeling, accounting=accounting,
    )
    released = set(m(_branch_data(dense))["item"].to_list())
    own = {f"own{u}" for u in range(40)}
    assert "p" in released
    assert (released & own == set()) if dense else (released & own)
    # the map is the adaptive DP-SIPS's plus the peeling's
    sips = wgm.make_dp_sips(
        *wgm.user_items_space(), max_contributions=40, scales=[tiny, tiny], thresholds=[10.0, 0.5],
        statistic_scale=tiny, branch_scales=[tiny, tiny], branch_thresholds=[1e6, 1e6],
    )
    first, second = sips.map(1), peeling_loss(1, k=41, scale=1e-3, kind="approx_zcdp", accounting=accounting, delta=0.0)
    delta = add_up(first[1], second[1], accounting)
    assert m.map(1) == (add_up(first[0], second[0], accounting), min(1.0, delta) if accounting.cap_delta else delta)
