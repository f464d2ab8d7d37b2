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
