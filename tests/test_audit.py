"""The empirical privacy auditor: its statistics, its neighbours, and its verdicts on real measurements.

Statistical tests: the mechanisms' noise is OS-seeded, so each verdict is random. "Passes" tests run at
family-wise level α = 1e-3 (a correct measurement is flagged with probability ≤ 1e-3 whatever the trial
count); "flags" tests choose trials for a power ≥ 0.999, computed in each test's comment with
``_power`` below (exact binomial tail of the smallest count that flags).
"""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from scipy import stats

import opendp_wgm as wgm
from opendp_wgm.audit import (
    ItemReleased,
    RankAtMost,
    SetEquals,
    audit,
    clopper_pearson,
    delta_lower_bound,
    epsilon_lower_bound,
    flag_power,
    make_underclaimed,
    shared_item_pair,
    symmetric_id_distance,
    unique_items_pair,
    worst_case_pairs,
    zcdp_delta,
    zcdp_delta_lower_bound,
)
from opendp_wgm.cli import main

dp.enable_features("contrib", "honest-but-curious")

ALPHA = 1e-3


def _power(p1: float, claimed_delta: float, rho: float, trials: int, events: int) -> float:
    """P[flag] when the differing unit's event has probability p1 on D and 0 on D′ (approximate zCDP claim)."""
    return flag_power(p1, claimed_delta, rho, trials=trials, events=events, alpha=ALPHA)


def test_flag_power() -> None:
    """Monotone in the trials and in the gap between p1 and the claim; 0 where ρ alone allows p1."""
    powers = [_power(0.129, 0.0668, 0.0625, n, 3) for n in (500, 2000, 5000)]
    assert powers == sorted(powers) and powers[-1] > 0.9999
    assert _power(0.129, 0.10, 0.0625, 2000, 3) < _power(0.129, 0.08, 0.0625, 2000, 3)
    assert _power(0.0213, 0.0, 1.0, 20_000, 3) < 1e-9  # DP-SIPS at σ = 1, T = 3.3: ρ = 1 covers the event


# --------------------------------------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------------------------------------
def test_clopper_pearson_known_values() -> None:
    lo, hi = clopper_pearson(5, 20, 0.05)  # the textbook interval for 5/20: [0.0866, 0.4910]
    assert (round(float(lo), 4), round(float(hi), 4)) == (0.0866, 0.4910)
    lo, hi = clopper_pearson([0, 100], 100, 0.05)  # closed forms at the edges: 1 − (α/2)^(1/n)
    assert lo[0] == 0.0 and hi[1] == 1.0
    assert hi[0] == pytest.approx(1 - 0.025 ** (1 / 100)) and lo[1] == pytest.approx(0.025 ** (1 / 100))


def test_implied_bounds_arithmetic() -> None:
    assert float(delta_lower_bound(0.3, 0.1, math.log(2))) == pytest.approx(0.1)
    assert float(delta_lower_bound(0.1, 0.1, 0.5)) == 0.0
    assert float(epsilon_lower_bound(0.3, 0.1, 0.1)) == pytest.approx(math.log(2))
    assert float(epsilon_lower_bound(0.05, 0.1, 0.1)) == 0.0
    assert float(epsilon_lower_bound(0.3, 0.0, 0.1)) == math.inf


def test_zcdp_conversion_matches_opendp() -> None:
    gaussian = dp.c.make_zCDP_to_approxDP(
        dp.m.make_gaussian(dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=1.0)
    )
    profile = gaussian.map(1.0)  # ρ = 1/2
    for eps in (0.5, 1.0, 3.0, 5.0):
        ours, theirs = float(zcdp_delta(0.5, eps)), profile.delta(eps)
        assert theirs <= ours <= theirs * (1 + 1e-4)  # an upper bound (lenient), tight to 1e-4
    # with nothing seen on D′ the δ bound tends to P1 as ε grows, and never exceeds it
    bound = float(zcdp_delta_lower_bound(0.2, 0.0, 0.5)[0])
    assert 0.2 - 1e-9 < bound <= 0.2


# --------------------------------------------------------------------------------------------------------
# neighbours
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t", [1, 2, 5])
def test_unique_items_pair_is_at_distance_one(t: int) -> None:
    pair = unique_items_pair(t, users=30, seed=3)
    assert symmetric_id_distance(pair.data, pair.neighbour, "user") == 1
    differing = pair.data.join(pair.neighbour, on=["user", "item"], how="anti")
    assert sorted(differing["item"]) == list(range(-t, 0))
    assert not pair.neighbour["item"].is_in(list(range(-t, 0))).any()  # nobody else holds them


def test_shared_item_pair_is_at_distance_one() -> None:
    pair = shared_item_pair(4, users=30)
    assert symmetric_id_distance(pair.data, pair.neighbour, pl.col("user")) == 1
    assert pair.neighbour.filter(pl.col("item") == -1).height == 4


def test_symmetric_id_distance_counts_a_changed_unit_twice() -> None:
    a = pl.DataFrame({"user": [0, 1, 2], "item": [0, 0, 1]})
    b = pl.DataFrame({"user": [0, 1, 2], "item": [0, 0, 2]})
    assert symmetric_id_distance(a, b, "user") == 2
    assert symmetric_id_distance(a, a, "user") == 0


def test_worst_case_pairs_cover_t_and_the_threshold_edge() -> None:
    pairs = worst_case_pairs(3, 4.5, users=10)
    assert [p.label for p in pairs][-1] == "shared item held by 4 + 1"
    assert len(pairs) == 4


def test_events() -> None:
    released = pl.DataFrame({"item": [3, -1], "rank": pl.Series([1, 2], dtype=pl.UInt32)})
    assert ItemReleased(-1)(released) and not ItemReleased(7)(released)
    assert SetEquals((-1, 3))(released) and not SetEquals((3,))(released)
    assert RankAtMost(-1, 2)(released) and not RankAtMost(-1, 1)(released)
    with pytest.raises(ValueError, match="`RankAtMost` needs a `rank` column"):
        RankAtMost(-1, 1)(released.drop("rank"))


# --------------------------------------------------------------------------------------------------------
# verdicts on measurements
# --------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_audit_passes_on_the_wgm() -> None:
    # σ = 1, T = 3, Δ0 = 2: δ = 0.046 is measurable; a correct map is flagged with probability ≤ α
    m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=2, scale=1.0, threshold=3.0)
    report = audit(m, worst_case_pairs(2, 3.0, users=20), trials=500, alpha=ALPHA, progress=False)
    assert report.passed, report.violations
    assert report.table().height == 6 and report.measure == "approx-zcdp"
    first = report.table().row(0, named=True)
    assert first["hits_d_prime"] == 0  # nobody else holds item −1
    assert first["p_d_low"] <= first["p_d"] <= first["p_d_high"]


@pytest.mark.slow
def test_audit_passes_on_wgm_then_top_k_under_approx_dp() -> None:
    m = wgm.make_wgm_top_k(
        *wgm.user_items_space(), k=3, max_contributions=1, wgm_scale=1.0, wgm_threshold=3.0, peel_scale=2.0,
        output_measure=dp.approximate(dp.max_divergence()), wgm_epsilon=2.0, peel_delta=1e-3,
    )
    report = audit(m, unique_items_pair(1, users=20, shared_items=2), trials=500, alpha=ALPHA, progress=False)
    assert report.passed, report.violations
    assert report.measure == "approx-dp"


@pytest.mark.slow
def test_audit_flags_the_half_delta_wrapper() -> None:
    # σ = 3, T = 5, Δ0 = 1: the user's item is released w.p. q = Φ̄(4/3) = 0.0912 (= δ_T), claimed 0.0456.
    # With one event and 3000 releases per side the flag needs ≥ 207 hits (mean 274): power 0.999995.
    m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=1, scale=3.0, threshold=5.0)
    rho, delta = m.map(1)
    assert _power(delta, delta / 2, rho, 3000, 1) > 0.999
    report = audit(
        make_underclaimed(m), unique_items_pair(1, users=20), events=[ItemReleased(-1)], trials=3000,
        alpha=ALPHA, progress=False,
    )
    assert not report.passed
    assert "VIOLATION" in report.verdict()


@pytest.mark.slow
def test_audit_flags_the_half_delta_dp_sips_twin() -> None:
    # Two rounds at σ = 3, T = 5, Δ0 = 1: the user's item is released in round 1 or 2, P1 = 1 − (1 − q)² = 0.174
    # with q = Φ̄(4/3); the map claims δ = 2q = 0.182 (the union bound of the rounds), the twin 0.091. The event
    # is the union of the rounds; with 3000 releases per side the flag's power is above 0.999.
    from opendp_wgm.cli._audit import build_mechanism
    from opendp_wgm.privacy.threshold import release_probability

    twin = build_mechanism("dp-sips-underclaimed", sigma=3.0, threshold=5.0, max_contributions=1, k=1, peel_scale=1.0)
    rho, delta = twin.map(1)
    q = float(release_probability(1, scale=3.0, threshold=5.0)[0])
    assert rho == pytest.approx(2 / 18) and delta == pytest.approx(q, rel=1e-5)  # half of 2·δ_T
    assert _power(1 - (1 - q) ** 2, delta, rho, 3000, 1) > 0.999
    report = audit(twin, unique_items_pair(1, users=20), events=[ItemReleased(-1)], trials=3000, alpha=ALPHA,
                   progress=False)
    assert not report.passed
    assert "VIOLATION" in report.verdict()


def _household_pair(households: int = 10) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Persons 2h and 2h+1 form household h; the differing household's two persons both hold item −1."""
    persons = np.arange(2 * households, dtype=np.int64)
    base = pl.DataFrame({"person": persons, "item": persons % 3})
    differing = pl.DataFrame({"person": [2 * households, 2 * households + 1], "item": [-1, -1]})
    return pl.concat([base, differing]), base


@pytest.mark.slow
def test_audit_flags_the_identifier_expression_setup() -> None:
    # The flaw of an identifier expression bounded by its root column, built explicitly: the release bounds
    # each *person* to Δ0 = 1 item, the claim charges one *household* (2 persons) as one unit. The household's
    # item gets weight 2: released w.p. Φ̄((3 − 2)/1) = 0.159 where the claim says δ = Φ̄(2) = 0.023 at ρ = 1/2.
    # With one event and 2000 releases per side the flag needs ≥ 231 hits (mean 317): power 1 − 2e-8.
    domain, _ = wgm.user_items_space(user="person")
    by_person = wgm.make_wgm(domain, dp.symmetric_id_distance(pl.col("person")), max_contributions=1,
                             scale=1.0, threshold=3.0)
    household = dp.symmetric_id_distance(pl.col("person") // 2)
    flawed = dp.m.make_user_measurement(domain, household, by_person.output_measure, by_person, by_person.map)
    data, neighbour = _household_pair()
    assert symmetric_id_distance(data, neighbour, pl.col("person") // 2) == 1
    assert symmetric_id_distance(data, neighbour, "person") == 2
    rho, delta = flawed.map(1)
    assert _power(stats.norm.sf(1.0), delta, rho, 2000, 1) > 0.999
    pair = wgm.audit.NeighbourPair(data, neighbour, "household with 2 persons", (ItemReleased(-1),))
    report = audit(flawed, pair, trials=2000, alpha=ALPHA, progress=False)
    assert not report.passed


def test_audit_workers_need_a_factory() -> None:
    m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=1, scale=1.0, threshold=3.0)
    with pytest.raises(TypeError, match="`measurement` must be a picklable zero-argument factory"):
        audit(m, unique_items_pair(1, users=5), trials=10, workers=2, progress=False)
    changed = unique_items_pair(1, users=5)
    changed = wgm.audit.NeighbourPair(changed.data, changed.data.with_columns(item=pl.col("item") + 1), "changed")
    with pytest.raises(ValueError, match=r"`pairs` must be at distance <= d_in = 1 .*\(found 12 for 'changed'\)"):
        audit(m, changed, events=[ItemReleased(-1)], trials=10, progress=False)
    with pytest.raises(ValueError, match="`alpha` must be in"):
        audit(m, unique_items_pair(1, users=5), trials=10, alpha=2.0, progress=False)


@pytest.mark.slow
def test_audit_in_a_process_pool() -> None:
    import functools

    from opendp_wgm.cli._audit import build_mechanism

    build = functools.partial(
        build_mechanism, "wgm", sigma=1.0, threshold=3.0, max_contributions=1, k=1, peel_scale=1.0
    )
    report = audit(build, unique_items_pair(1, users=20), trials=300, alpha=ALPHA, workers=2, progress=False)
    assert report.passed and report.table()["hits_d_prime"].to_list() == [0, 0]
    assert report.table()["hits_d"].max() > 0  # P = 0.023 per release: 0 of 300 has probability 0.001


def test_audit_plot(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=1, scale=1.0, threshold=3.0)
    report = audit(m, shared_item_pair(3, users=10), trials=50, progress=False)
    report.plot(str(tmp_path / "audit.png"))
    assert (tmp_path / "audit.png").stat().st_size > 0


# --------------------------------------------------------------------------------------------------------
# command
# --------------------------------------------------------------------------------------------------------
def test_cli_audit_passes_on_the_wgm(capsys) -> None:
    status = main(["audit", "--mechanism", "wgm", "--trials", "200", "--users", "20", "--sigma", "1",
                   "--threshold", "3", "--no-progress"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "no violation found" in out and "releases/s" in out


def test_cli_audit_bad_input(capsys) -> None:
    assert main(["audit", "--mechanism", "nope"]) == 2
    assert "expected a comma-separated list" in capsys.readouterr().err
    assert main(["audit", "--alpha", "1.5", "--trials", "1"]) == 2
    assert "`alpha` must be in" in capsys.readouterr().err


@pytest.mark.slow
def test_audit_passes_on_the_household_identifier_once_fixed() -> None:
    # The same household pair as above, on the shipped WGM whose identifier is the household expression: the
    # household is bounded to Δ0 = 1 item as one unit, weight 1, released w.p. Φ̄(2) = 0.023 = the claimed δ.
    domain, _ = wgm.user_items_space(user="person")
    household = dp.symmetric_id_distance(pl.col("person") // 2)
    m = wgm.make_wgm(domain, household, max_contributions=1, scale=1.0, threshold=3.0)
    data, neighbour = _household_pair()
    pair = wgm.audit.NeighbourPair(data, neighbour, "household with 2 persons", (ItemReleased(-1),))
    report = audit(m, pair, trials=2000, alpha=ALPHA, progress=False)
    assert report.passed, report.violations
    assert report.table()["hits_d_prime"].max() == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["wgm-hitting-set", "opendp-key-release"])
def test_audit_passes_on_the_other_shipped_release_paths(name: str) -> None:
    from opendp_wgm.cli._audit import build_mechanism

    m = build_mechanism(name, sigma=1.0, threshold=3.0, max_contributions=1, k=3, peel_scale=1.0)
    report = audit(m, unique_items_pair(1, users=20, shared_items=2), trials=500, alpha=ALPHA, progress=False)
    assert report.passed, report.violations


@pytest.mark.slow
def test_audit_passes_on_dp_sips() -> None:
    # Two rounds at σ = 1, T = 3.3, Δ0 = 1: the differing user's unique item passes in round 1 or, if not, in
    # round 2, each w.p. Φ̄(2.3) ≈ 0.011, so the claimed δ = Σ δ_T,i ≈ 0.021 is tight and measurable
    m = wgm.make_dp_sips(*wgm.user_items_space(), max_contributions=1, scales=[1.0, 1.0], thresholds=[3.3, 3.3])
    report = audit(m, worst_case_pairs(1, 3.3, users=20), trials=2000, alpha=ALPHA, progress=False)
    assert report.passed, report.violations
    assert 0.015 < m.map(1)[1] < 0.03 and report.measure == "approx-zcdp"
    first = report.table().row(0, named=True)
    assert first["hits_d_prime"] == 0 and first["p_d_low"] <= m.map(1)[1]


@pytest.mark.slow
def test_audit_passes_on_the_adaptive_dp_sips() -> None:
    # The adaptive schedule at σ = 1, T = 3.3, Δ0 = 1, σ_s = 1: the shared items go in round 1, so the two-bin
    # count is about (0, 0) plus noise and both branches run; the differing user's unique item passes in each
    # round it meets w.p. Φ̄(2.3) ≈ 0.011, up to three times on the dense path: claimed δ (the larger path's)
    # ≈ 0.032
    m = wgm.make_dp_sips(
        *wgm.user_items_space(), max_contributions=1, scales=[1.0, 1.0], thresholds=[3.3, 3.3],
        statistic_scale=1.0, branch_scales=[1.0, 1.0], branch_thresholds=[3.3, 3.3],
    )
    report = audit(m, worst_case_pairs(1, 3.3, users=20), trials=2000, alpha=ALPHA, progress=False)
    assert report.passed, report.violations
    assert 0.025 < m.map(1)[1] < 0.04 and report.measure == "approx-zcdp"
    first = report.table().row(0, named=True)
    assert first["hits_d_prime"] == 0 and first["p_d_low"] <= m.map(1)[1]


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["top-k", "hitting-set"])
def test_audit_passes_on_dp_sips_then_peeling(mechanism: str) -> None:
    # DP-SIPS (the default, adaptive schedule: round 1, the noisy two-bin count, then one or two rounds) as stage
    # 1 of the two-stage mechanisms, calibrated at a δ where the differing user's unique item reaches the
    # candidates measurably often; stage 2 peels every candidate (k = 3). The shared items go in round 1, so
    # the count is about (0, 0) (or (0, 1) with the differing user) plus noise of σ_s ≈ 14: both branches run
    from opendp_wgm.privacy.calibrate import calibrate_wgm_hitting_set, calibrate_wgm_top_k

    make = wgm.make_wgm_top_k_from_budget if mechanism == "top-k" else wgm.make_wgm_hitting_set_from_budget
    calibrate = calibrate_wgm_top_k if mechanism == "top-k" else calibrate_wgm_hitting_set
    options = dict(k=3, max_contributions=1, rho=2.0, delta=0.05, stage_1="dp-sips")
    sips = calibrate(**options).sips
    assert sips is not None and sips.statistic_scale is not None and 10 < sips.statistic_scale < 20
    m = make(*wgm.user_items_space(), **options)
    report = audit(m, unique_items_pair(1, users=20, shared_items=2), trials=500, alpha=ALPHA, progress=False)
    assert report.passed, report.violations
    assert report.table()["hits_d_prime"].max() == 0 and report.table()["hits_d"].max() > 0


@pytest.mark.slow
def test_audit_passes_on_keys_with_counts() -> None:
    # The WGM (σ = 1, T = 3, Δ0 = 1) then OpenDP's count over the released keys at global scale 0.5: the
    # differing user holds the shared item −1 (3 + 1 holders), so both the key event and the count of −1 move
    class CountAtLeast:
        label = "count of -1 >= 4"

        def __call__(self, released: pl.DataFrame) -> bool:
            return bool(released.filter((pl.col("item") == -1) & (pl.col("count") >= 4)).height)

    m = wgm.make_wgm_group_by(
        *wgm.user_items_space(), key_release=wgm.then_wgm(max_contributions=1, scale=1.0, threshold=3.0),
        max_contributions=1, scale=0.5,
    )
    events = [ItemReleased(-1), CountAtLeast()]
    report = audit(m, shared_item_pair(3, users=20), events=events, trials=500, alpha=ALPHA, progress=False)
    assert report.passed, report.violations
    assert report.table().height == 2 and report.measure == "approx-zcdp"


@pytest.mark.slow
def test_audit_passes_on_partition_selection() -> None:
    # ε = 0.5, δ = 0.05: the differing user's unique item is released w.p. π(1) = δ (0 without it), and a shared
    # item held by c + 1 users moves from π(c) to π(c + 1) = e^ε π(c) + δ (tight for c = 1, 2): every claim is
    # met with equality, and measurably (δ = 0.05 with 2000 releases per side)
    m = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=0.5, delta=0.05)
    pairs = [unique_items_pair(1, users=20, shared_items=2), shared_item_pair(1, users=20), shared_item_pair(2, users=20)]
    report = audit(m, pairs, trials=2000, alpha=ALPHA, progress=False)
    assert report.passed, report.violations
    assert report.measure == "approx-dp"
    first = report.table().row(0, named=True)
    assert first["hits_d_prime"] == 0 and first["p_d_low"] <= 0.05 <= first["p_d_high"]


@pytest.mark.slow
def test_audit_flags_partition_selection_underclaimed() -> None:
    # The same mechanism claiming δ/5 = 0.01 at ε = 0.5: the unique item's hits (mean 150 of 3000) must reach
    # the smallest count whose Clopper–Pearson bound (α/4 per side, conservatively) exceeds 0.01; power > 0.999
    m = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=0.5, delta=0.05)
    k = np.arange(3001)
    low, _ = clopper_pearson(k, 3000, ALPHA / 4)
    _, high = clopper_pearson(0, 3000, ALPHA / 4)
    smallest = k[delta_lower_bound(low, np.full(low.shape, high), 0.5) > 0.01].min()
    assert stats.binom.sf(smallest - 1, 3000, 0.05) > 0.999
    report = audit(
        make_underclaimed(m, 0.2), unique_items_pair(1, users=20), events=[ItemReleased(-1)], trials=3000,
        alpha=ALPHA, progress=False,
    )
    assert not report.passed


@pytest.mark.slow
@pytest.mark.parametrize("budget", [{"epsilon": 2.0}, {"rho": 1.0}], ids=["approx-dp", "zcdp"])
def test_audit_passes_on_the_auto_choice(budget: dict[str, float]) -> None:
    # max_contributions="auto" with half of the budget on the choice (discrete Laplace of scale 1 user under (ε, δ),
    # discrete Gaussian of σ_c = 1 under zCDP): the pair puts
    # the rule at its edge (3/4 of the users hold one item without the differing user, fewer with it), so the
    # chosen Δ0 moves between 1 and 5; the claim is the whole map (choice + the largest candidate)
    from opendp_wgm.audit import auto_choice_pair

    m = wgm.make_wgm_from_budget(
        *wgm.user_items_space(), max_contributions="auto", auto_fraction=0.5, delta=0.05, **budget
    )
    report = audit(m, auto_choice_pair(), trials=500, alpha=ALPHA, progress=False)
    assert report.passed, report.violations
    table = report.table()
    assert table.height == 3
    moved = table.filter(pl.col("event") == "chosen Δ0 = 1").row(0, named=True)
    assert moved["hits_d_prime"] > moved["hits_d"]  # the differing user moves the choice away from Δ0 = 1


@pytest.mark.slow
def test_audit_flags_an_auto_choice_without_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same path with the choice's noise removed (a bug that forgets to noise the histogram): the rule is then
    # a deterministic function of the data, Δ0 = 1 on D′ and 5 on D, and the event "chosen Δ0 = 1" has
    # probability 0 and 1: any claim with δ < 1 is flagged (at 200 releases per side, surely)
    import opendp_wgm.measurements.auto_contributions as auto
    from opendp_wgm.audit import ChosenMaxContributions, auto_choice_pair

    monkeypatch.setattr(
        auto, "noisy_count_bins", lambda bins, scale, noise="lattice", laplace=False: bins.astype(np.float64)
    )
    m = wgm.make_wgm_from_budget(
        *wgm.user_items_space(), max_contributions="auto", auto_fraction=0.5, epsilon=2.0, delta=0.05
    )
    report = audit(m, auto_choice_pair(), events=[ChosenMaxContributions(1)], trials=200, alpha=ALPHA, progress=False)
    assert not report.passed
    row = report.table().row(0, named=True)
    assert row["hits_d"] == 0 and row["hits_d_prime"] == 200


def _auto_test_threshold(budget: dict[str, float]) -> float:
    # the single-item test's threshold in users at half of the budget on the choice (a fifteenth of it on the test)
    from opendp_wgm.privacy.auto import single_item_threshold, split_auto_budget
    from opendp_wgm.privacy.budget import Budget

    auto = split_auto_budget(Budget.of(delta=0.05, **budget), 0.5)
    return single_item_threshold(auto.test_scale, laplace=auto.laplace)


@pytest.mark.slow
@pytest.mark.parametrize("budget", [{"epsilon": 2.0}, {"rho": 1.0}], ids=["approx-dp", "zcdp"])
def test_audit_passes_on_the_single_item_test(budget: dict[str, float]) -> None:
    # the pair puts the single-item test at its edge (D′ at the threshold, D 3/4 of a user below it); the claim is
    # the whole map (the test, then the larger of the single-item candidate and the histogram's branch)
    from opendp_wgm.audit import single_item_test_pair

    m = wgm.make_wgm_from_budget(
        *wgm.user_items_space(), max_contributions="auto", auto_fraction=0.5, delta=0.05, **budget
    )
    report = audit(m, single_item_test_pair(_auto_test_threshold(budget)), trials=500, alpha=ALPHA, progress=False)
    assert report.passed, report.violations
    passed = report.table().filter(pl.col("event") == "single-item test passed").row(0, named=True)
    # both sides pass the test about half of the time (the noise is centred at the edge)
    assert 100 < passed["hits_d"] < 400 and 100 < passed["hits_d_prime"] < 400


@pytest.mark.slow
def test_audit_flags_a_single_item_test_without_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    # the test's counts without noise: it passes on D′ and fails on D, always
    import opendp_wgm.measurements.auto_contributions as auto
    from opendp_wgm.audit import SingleItemTestPassed, single_item_test_pair

    monkeypatch.setattr(
        auto, "noisy_count_bins", lambda bins, scale, noise="lattice", laplace=False: bins.astype(np.float64)
    )
    m = wgm.make_wgm_from_budget(
        *wgm.user_items_space(), max_contributions="auto", auto_fraction=0.5, epsilon=2.0, delta=0.05
    )
    pair = single_item_test_pair(_auto_test_threshold({"epsilon": 2.0}))
    report = audit(m, pair, events=[SingleItemTestPassed()], trials=200, alpha=ALPHA, progress=False)
    assert not report.passed
    row = report.table().row(0, named=True)
    assert row["hits_d"] == 0 and row["hits_d_prime"] == 200
