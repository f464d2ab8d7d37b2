"""Policy baselines: policy-step oracles (oracle values of the paper's reference code), the fixed greedy, maps."""

from __future__ import annotations

import itertools
import math

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opendp_wgm as wgm
from opendp_wgm._spaces import _Space
from opendp_wgm.measurements.baselines import _policy_csr as policy_csr
from opendp_wgm.measurements.baselines import _policy_weights as policy_weights
from opendp_wgm.measurements.baselines import policy as bl
from opendp_wgm.privacy.threshold import lattice_weights

U = 2**20
ZCDP = dp.approximate(dp.zero_concentrated_divergence())
APPROX_DP = dp.approximate(dp.max_divergence())
SPACE = _Space("user", "item", None, lazyframe_domain=False)


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")


def lat(values) -> np.ndarray:
    return np.array([round(v * U) for v in values], dtype=np.int64)


def frame(users: list[list]) -> pl.DataFrame:
    return pl.DataFrame(
        {"user": [i for i, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


def step(rule, weights, cap) -> np.ndarray:
    """Apply one user's step to real weights through the lattice; return real weights."""
    h = lat(weights)
    return (h + rule(h, round(cap * U))) / U


def csr(users: list[list[int]]) -> policy_csr._UserItems:
    """Users in the given order, item code = item (for the get_policy_hist oracles)."""
    codes = np.array([x for u in users for x in u], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum([len(u) for u in users]))).astype(np.int64)
    return policy_csr._UserItems(codes, offsets, int(codes.max()) + 1, lambda c: pl.Series("item", c))



def _l2_increment(weights: np.ndarray, cap: int) -> np.ndarray:
    """Gopi et al.'s ℓ2-descent step for one user on all its items (0 on those at or above the cap)."""
    increment = np.zeros(weights.shape[0], dtype=np.int64)
    candidates = weights < cap
    if candidates.any():
        increment[candidates] = policy_weights._l2_candidates(weights[candidates], cap)
    return increment

# ------------------------------------------------------------------------------------------------------
# oracle values of the paper's reference code: policy-step oracles (to one lattice step)
# ------------------------------------------------------------------------------------------------------
TOL = 4 / U


def test_l2_step_oracles() -> None:
    assert step(_l2_increment, [0.75, 0.85, 0.5, 0.5], 0.75)[:2] == pytest.approx([0.75, 0.85], abs=TOL)
    assert step(_l2_increment, [0.5] * 4, 0.75) == pytest.approx([0.75] * 4, abs=TOL)
    assert step(_l2_increment, [0.5] * 4, 2.5) == pytest.approx([1.0] * 4, abs=TOL)
    z = math.sqrt(0.25**2 + 3 * 2**2)
    assert step(_l2_increment, [2.75, 1, 1, 1], 3) == pytest.approx([2.75 + 0.25 / z] + [1 + 2 / z] * 3, abs=TOL)


def test_l2_policy_histogram_oracle() -> None:
    """get_policy_hist(L2) on [[1,2],[1,3]] with Γ = 2."""
    weights = policy_weights._policy_weights(csr([[1, 2], [1, 3]]), 2 * U, "l2") / U
    z = (2 - 1 / math.sqrt(2)) ** 2 + 4
    expected = {1: 1 / math.sqrt(2) + (2 - 1 / math.sqrt(2)) / math.sqrt(z), 2: 1 / math.sqrt(2), 3: 2 / math.sqrt(z)}
    assert {x: weights[x] for x in expected} == pytest.approx(expected, abs=TOL)


def test_reference_l1_step_oracles() -> None:
    rule = policy_weights._reference_l1_increment
    assert step(rule, [0.75, 0.85, 0.5, 0.5], 0.75)[:2] == pytest.approx([0.75, 0.85], abs=TOL)
    assert step(rule, [0.5] * 4, 0.75) == pytest.approx([0.75] * 4, abs=TOL)
    assert step(rule, [0.75, 0.5, 0.5, 0.5], 1) == pytest.approx([1.0] * 4, abs=TOL)
    assert step(rule, [1.0] * 4, 2) == pytest.approx([1.5] * 4, abs=TOL)
    spread = 1 + (1 - 0.0625) / math.sqrt(3)
    assert step(rule, [2.75, 1, 1, 1], 3) == pytest.approx([3.0, spread, spread, spread], abs=TOL)


def test_reference_l1_policy_histogram_oracle() -> None:
    weights = policy_weights._policy_weights(csr([[1, 2], [1, 3]]), 2 * U, "reference_l1") / U
    expected = {1: 2 / math.sqrt(2), 2: 1 / math.sqrt(2), 3: 1 / math.sqrt(2)}
    assert {x: weights[x] for x in expected} == pytest.approx(expected, abs=TOL)


def greedy_step(weights: list[float], items: list[int], cap: float) -> np.ndarray:
    """The reference's greedy step: items (with duplicates) ordered by multiplicity desc, first occurrence."""
    distinct = list(dict.fromkeys(items))
    order = sorted(distinct, key=lambda x: -items.count(x))  # stable: ties keep first occurrence
    h = lat(weights)
    idx = np.array([x - 1 for x in order])
    out = h.copy()
    out[idx] += policy_weights._greedy_increment(h[idx], round(cap * U))
    return out / U


def test_greedy_step_oracles() -> None:
    assert greedy_step([1.75, 1.85, 0.5, 0.5], [1, 2, 3, 4], 1)[:2] == pytest.approx([1.75, 1.85], abs=TOL)
    assert greedy_step([1.5] * 4, [1, 2, 3, 4], 1) == pytest.approx([1.5] * 4, abs=TOL)
    assert greedy_step([0.75] * 4, [1, 1, 1, 2, 2, 3, 4], 1) == pytest.approx([1.0] * 4, abs=TOL)
    out = greedy_step([0.7, 0.1, 0.05, 0.02], [1, 1, 2, 2, 2, 3, 4], 1)
    assert out == pytest.approx([0.8, 1.0, 0.05, 0.02], abs=TOL)
    assert greedy_step([0.7, 0.1, 0.05, 0.0], [1, 2, 3, 4, 4], 1) == pytest.approx([0.7, 0.1, 0.05, 1.0], abs=TOL)


def test_greedy_policy_histogram_oracle_leaves_zero_weights() -> None:
    """get_policy_hist(greedy, Γ = 2, [[1,2],[1,3],[1,2]]) → 1: 2, 2: 1, 3: 0 (and 3 is never stored as a key)."""
    weights = policy_weights._policy_weights(csr([[1, 2], [1, 3], [1, 2]]), 2 * U, "greedy")
    assert weights[1:4].tolist() == [2 * U, U, 0]


# ------------------------------------------------------------------------------------------------------
# properties of the steps (what the privacy argument of docs/baselines.md §2 uses)
# ------------------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    weights=st.lists(st.floats(0.0, 40.0), min_size=1, max_size=60),
    fresh=st.integers(0, 40),
    cap=st.floats(1.0, 40.0),
    rule=st.sampled_from(["l2", "reference_l1"]),
)
def test_policy_steps_stay_in_the_unit_ball_and_treat_fresh_items_alike(weights, fresh, cap, rule) -> None:
    """Increments are >= 0, only on candidates, ℓ2 <= 1 exactly; the t fresh items get equal weight <= w(t)."""
    h = np.concatenate((lat(weights), np.zeros(fresh, dtype=np.int64)))
    cap_lat = round(cap * U)
    increment = (_l2_increment if rule == "l2" else policy_weights._reference_l1_increment)(h, cap_lat)
    assert (increment >= 0).all()
    assert (increment[h >= cap_lat] == 0).all()
    assert int(increment @ increment) <= U * U
    if fresh:
        new = increment[len(weights) :]
        assert (new == new[0]).all()
        assert new[0] <= lattice_weights(fresh)[-1]


@settings(max_examples=200, deadline=None)
@given(weights=st.lists(st.floats(0.0, 20.0), min_size=1, max_size=40), cap=st.floats(1.0, 20.0))
def test_greedy_step_spends_at_most_one_and_reaches_one_fresh_item(weights, cap) -> None:
    h = lat(weights)
    h[::3] = 0  # some fresh items
    increment = policy_weights._greedy_increment(h, round(cap * U))
    assert (increment >= 0).all() and int(increment.sum()) <= U
    assert np.count_nonzero(increment[h == 0]) <= 1  # the cap >= 1 stops the walk at the first fresh item


def test_reference_l1_rule_is_not_contractive() -> None:
    """docs/baselines.md §2.4: Γ = 1, H = (0.30, 0.90) → (1, 1) but H' = (0.25, 0.90) → (0.957, 1.607)."""
    a = step(policy_weights._reference_l1_increment, [0.30, 0.90], 1.0)
    b = step(policy_weights._reference_l1_increment, [0.25, 0.90], 1.0)
    assert a == pytest.approx([1.0, 1.0], abs=TOL)
    assert b == pytest.approx([0.25 + 1 / math.sqrt(2), 0.90 + 1 / math.sqrt(2)], abs=TOL)
    assert np.linalg.norm(a - b) > 12 * 0.05  # the inputs differ by 0.05 in ℓ2


@settings(max_examples=300, deadline=None)
@given(
    pair=st.integers(1, 5).flatmap(
        lambda t: st.tuples(
            st.lists(st.floats(0, 3), min_size=t, max_size=t), st.lists(st.floats(-0.3, 0.3), min_size=t, max_size=t)
        )
    ),
    cap=st.floats(0.5, 3.0),
)
def test_l2_descent_contracts_up_to_rounding(pair, cap) -> None:
    """ℓ2 descent is ℓ2-contractive (Gopi et al.); on the lattice, up to one unit per coordinate (§2.3)."""
    h1, shift = pair
    h2 = [max(0.0, x + d) for x, d in zip(h1, shift, strict=False)]
    a, b = step(_l2_increment, h1, cap), step(_l2_increment, h2, cap)
    before = np.linalg.norm(lat(h1) - lat(h2)) / U
    assert np.linalg.norm(a - b) <= before + math.sqrt(len(h1)) / U + 1e-12


def test_unknown_descent_raises() -> None:
    with pytest.raises(ValueError, match="`descent` must be one of"):
        bl.make_policy_gaussian(*wgm.user_items_space(), max_contributions=5, scale=1.0, threshold=5.0, descent="L1")


# ------------------------------------------------------------------------------------------------------
# the fixed Policy Greedy
# ------------------------------------------------------------------------------------------------------
def test_fixed_greedy_never_releases_a_key_nobody_gave_weight_to() -> None:
    """[[1,2],[1,3],[1,2]] with Γ = 2: one of items 2, 3 ends with weight 0 whatever the user order.

    The threshold is below 0 and the noise tiny, so every *noised* key is released: the reference, which noises
    every key it has read (weight 0 included, the paper's reference code), releases all three items; the fix releases two.
    """
    data = frame([[1, 2], [1, 3], [1, 2]])
    m = bl.make_policy_greedy(*wgm.user_items_space(), scale=1e-6, threshold=-0.5, alpha=2.5e6)  # Γ = 2
    for _ in range(20):
        released = m(data)["item"].to_list()
        assert len(released) == 2 and 1 in released


def test_greedy_one_user_with_many_fresh_items_releases_at_most_one() -> None:
    """One user with 2000 items nobody else holds: only the first gets weight, so at most one can be released."""
    data = frame([list(range(2000))])
    m = bl.make_policy_greedy(*wgm.user_items_space(), scale=1e-6, threshold=-0.5, alpha=1e7)
    assert m(data).height == 1


def test_greedy_threshold_audit() -> None:
    """20 000 users, one unique item each (weight 1): the release rate matches δ_T(1) of the map."""
    n_users, scale = 20_000, 1.0
    threshold = 1.0 + math.log(1 / (2 * 5e-3)) * scale
    m = bl.make_policy_greedy(*wgm.user_items_space(), scale=scale, threshold=threshold)
    delta = m.map(1)[1]
    rate = m(pl.DataFrame({"user": np.arange(n_users), "item": np.arange(n_users)})).height / n_users
    se = math.sqrt(delta * (1 - delta) / n_users)
    assert abs(rate - delta) < 5 * se


def test_greedy_maps_and_calibration() -> None:
    space = wgm.user_items_space()
    m = bl.make_policy_greedy_from_budget(*space, epsilon=1.0, delta=1e-5)
    assert m.output_measure == APPROX_DP
    assert m.check(1, (1.0, 1e-5)) and not m.check(1, (1.0, 0.99e-5))
    eps, delta = m.map(1)
    assert eps == 1.0 and delta == pytest.approx(1e-5, rel=1e-5)
    maps = [m.map(d) for d in range(5)]
    assert maps[0] == (0.0, 0.0)
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(maps))  # monotone in d_in
    # the paper's threshold 1 + ln(1/(2δ))/ε = 11.819778, moved by about one lattice step
    assert bl._greedy_threshold_delta(1.0, 1 + math.log(1 / 2e-5), 3.0, 1) == pytest.approx(1e-5, rel=1e-5)
    # d_in = 2: f(2) + f(0) with f(w) ≈ e^{-(T - w)}/2 at λ = 1 (δ_T(k) <= f(k) + (k - 1) f(0))
    t = 1 + math.log(1 / 2e-5)
    assert maps[2][1] == pytest.approx(math.exp(-(t - 2)) / 2 + math.exp(-t) / 2, rel=1e-4)
    # cap Γ = max(T + αλ, 1) below d_in: no bound is claimed
    assert bl.greedy_threshold_delta(scale=1.0, threshold=0.5, alpha=0.0, d_in=2) == 1.0


def test_discrete_laplace_tail_formula() -> None:
    s = 2.5
    z = np.arange(-400, 401)
    pmf = np.exp(-np.abs(z) / s)
    pmf /= pmf.sum()
    for m in (-3, 0, 1, 4, 9):
        assert bl._laplace_tail(m, s) == pytest.approx(pmf[z >= m].sum(), rel=1e-9)


# ------------------------------------------------------------------------------------------------------
# Policy Gaussian end to end and its map
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("descent", ["l2", "reference_l1"])
@pytest.mark.parametrize("dtype", [pl.Int64, pl.String, pl.Categorical])
def test_policy_gaussian_no_noise_release(descent, dtype) -> None:
    """With tiny noise: items held by >= 3 of the users reach a weight > 1.5 and are released, singletons not."""
    users = [["a", "b"]] * 4 + [["a", "c"]] + [["d"]] + [["b", "e", "f"]]
    item = pl.col("item")
    data = frame(users).with_columns(item.cast(dtype) if dtype != pl.Int64 else item.rank("dense").cast(pl.Int64))
    before = data.clone()
    space = wgm.user_items_space()
    m = bl.make_policy_gaussian(*space, max_contributions=5, scale=1e-5, threshold=1.5, descent=descent)
    out = m(data)
    assert data.equals(before)
    assert out.schema == pl.Schema({"item": data.schema["item"], "noisy_weight": pl.Float64})
    expected = data.group_by("item").agg(pl.col("user").n_unique()).filter(pl.col("user") >= 3)["item"].sort()
    assert out["item"].to_list() == expected.to_list()


def test_policy_gaussian_map_is_the_wgm_map() -> None:
    space = wgm.user_items_space()
    params = {"max_contributions": 100, "scale": 3.884141, "threshold": 20.7898}
    for kwargs in ({}, {"output_measure": APPROX_DP, "epsilon": 1.0}):
        p = bl.make_policy_gaussian(*space, **params, **kwargs)
        w = wgm.make_wgm(*space, **params, **kwargs)
        assert p.output_measure == w.output_measure
        assert [p.map(d) for d in range(4)] == [w.map(d) for d in range(4)]
    oracle = bl.make_policy_gaussian(*space, **params).map(1)  # the WGM's oracle (the paper's reference code, exact σ)
    assert oracle[0] == pytest.approx(1 / (2 * 3.884141**2)) and oracle[1] == pytest.approx(5e-6, rel=1e-3)
    m = bl.make_policy_gaussian_from_budget(*space, max_contributions=100, epsilon=1.0, delta=1e-5)
    assert m.check(1, (1.0, 1e-5)) and not m.check(1, (1.0, 0.99e-5))
    maps = [m.map(d) for d in range(1, 5)]
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(maps))  # monotone in d_in
    r = bl.make_policy_gaussian_from_budget(*space, max_contributions=10, rho=0.1, delta=1e-6, descent="reference_l1")
    assert r.check(1, (0.1, 1e-6))
    assert r.map(2)[0] == pytest.approx(4 * r.map(1)[0]) and r.map(2)[1] >= r.map(1)[1]


def test_csr_orders_users_randomly_and_keeps_them_contiguous() -> None:
    data = frame([[u * 10 + j for j in range(u % 4 + 1)] for u in range(200)])
    orders = set()
    for _ in range(3):
        got = policy_csr._csr(data, SPACE, max_contributions=2, key_order=True, priority_order=False)
        sizes = np.diff(got.offsets)
        assert sizes.size == 200 and sizes.max() <= 2
        items = got.decode(got.codes).to_numpy()
        users = items // 10
        assert all(np.unique(users[a:b]).size == 1 for a, b in zip(got.offsets[:-1], got.offsets[1:], strict=False))
        assert all((np.diff(items[a:b]) > 0).all() for a, b in zip(got.offsets[:-1], got.offsets[1:], strict=False))
        orders.add(tuple(users[got.offsets[:-1]]))
    assert len(orders) == 3


def test_csr_key_order_of_strings_and_greedy_priority() -> None:
    data = pl.DataFrame({"user": [0] * 7, "item": ["pear", "fig", "apple", "fig", "kiwi", "kiwi", "fig"]})
    keyed = policy_csr._csr(data, SPACE, max_contributions=10, key_order=True, priority_order=False)
    assert keyed.decode(keyed.codes).to_list() == ["apple", "fig", "kiwi", "pear"]
    greedy = policy_csr._csr(data, SPACE, max_contributions=None, key_order=False, priority_order=True)
    assert greedy.decode(greedy.codes).to_list() == ["fig", "kiwi", "pear", "apple"]


def test_policy_features_are_required() -> None:
    dp.disable_features("idealized-numerics")
    try:
        with pytest.raises(dp.OpenDPException, match="idealized-numerics"):
            bl.make_policy_gaussian(*wgm.user_items_space(), max_contributions=5, scale=1.0, threshold=5.0)
        with pytest.raises(dp.OpenDPException, match="idealized-numerics"):
            bl.make_policy_greedy_from_budget(*wgm.user_items_space(), epsilon=1.0, delta=1e-5)
    finally:
        dp.enable_features("idealized-numerics")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"alpha": -1.0}, ValueError, "`alpha` must be in"),
        ({"threshold": -10.0}, ValueError, "cap `threshold \\+ alpha \\* scale` must be > 0"),
        ({"threshold": 0.1, "descent": "reference_l1"}, ValueError, "needs a cap"),
        ({"max_contributions": 0}, ValueError, "`max_contributions` must be an integer >= 1"),
        ({"noise": "numpy"}, ValueError, "`noise` must be one of"),
        ({"epsilon": 1.0}, ValueError, "`epsilon` must be None unless"),
    ],
)
def test_policy_gaussian_bad_parameters(kwargs, error, match) -> None:
    params = {"max_contributions": 5, "scale": 0.1, "threshold": 2.0} | kwargs
    with pytest.raises(error, match=match):
        bl.make_policy_gaussian(*wgm.user_items_space(), **params)
