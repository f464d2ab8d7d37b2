"""Top-k measurements: oracle values of the paper's reference code, no-noise runs, composition, properties, bad input."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opendp_wgm as wgm
from opendp_wgm.measurements.baselines import make_limited_domain_top_k, then_limited_domain_top_k
from opendp_wgm.measurements.top_k import (
    make_peeling_top_k,
    make_wgm_top_k,
    make_wgm_top_k_from_budget,
    then_peeling_top_k,
    then_wgm_top_k,
    then_wgm_top_k_from_budget,
)
from opendp_wgm.privacy.calibrate import (
    WGMTopKCalibration,
    calibrate_wgm_top_k,
)
from opendp_wgm.privacy.peeling import (
    peeling_approx_epsilon,
    peeling_pure_epsilon,
    peeling_rho,
)

ZCDP = dp.approximate(dp.zero_concentrated_divergence())
APPROX_DP = dp.approximate(dp.max_divergence())


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


class _Space:
    """``wgm.user_items_space()``, built on use (it needs the features enabled)."""

    def __iter__(self):
        return iter(wgm.user_items_space())

    def __rshift__(self, other):
        return wgm.user_items_space() >> other


SPACE = _Space()


def frame(users: list[list]) -> pl.DataFrame:
    return pl.DataFrame(
        {"user": [i for i, items in enumerate(users) for _ in items], "item": [x for items in users for x in items]}
    )


def test_peeling_measurement_maps_per_measure(monkeypatch) -> None:
    """Each output measure's map, and its sampler: permute-and-flip under pure DP, Gumbel/EM otherwise."""
    import opendp_wgm.measurements.top_k as top_k_module

    cands = list(range(20))
    m = make_peeling_top_k(*SPACE, candidates=cands, k=10, scale=2.0, output_measure=dp.zero_concentrated_divergence())
    assert m.map(1) == pytest.approx(10 / 32)
    m = make_peeling_top_k(*SPACE, candidates=cands, k=10, scale=2.0, output_measure=dp.max_divergence())
    assert m.map(2) == pytest.approx(10.0)
    # (ε, δ): the zCDP conversion when it is smaller than basic composition, else basic composition with δ = 0
    m = make_peeling_top_k(*SPACE, candidates=cands, k=10, scale=20.0, output_measure=APPROX_DP, delta=1e-5)
    eps, delta = m.map(1)
    assert eps == pytest.approx(peeling_approx_epsilon(1, k=10, scale=20.0, delta=1e-5)) and delta == 1e-5
    assert eps < 10 / 20.0
    m = make_peeling_top_k(*SPACE, candidates=cands, k=2, scale=2.0, output_measure=APPROX_DP, delta=1e-5)
    assert m.map(1) == pytest.approx((1.0, 0.0))
    # fewer candidates than k: only len(candidates) rounds are run and charged
    m = make_peeling_top_k(*SPACE, candidates=[1, 2], k=10, scale=2.0)
    assert m.map(1)[0] == pytest.approx(2 / 32)

    samplers = []
    original = top_k_module.noisy_top_k
    monkeypatch.setattr(
        top_k_module, "noisy_top_k", lambda *a, **kw: samplers.append(kw["measure"]) or original(*a, **kw)
    )
    data = frame([[1, 2], [1]])
    for measure, expected in [(dp.max_divergence(), "max_divergence"), (ZCDP, "zcdp"),
                              (dp.zero_concentrated_divergence(), "zcdp")]:
        make_peeling_top_k(*SPACE, candidates=[1, 2], k=1, scale=1.0, output_measure=measure)(data)
        assert samplers[-1] == expected
    make_peeling_top_k(*SPACE, candidates=[1, 2], k=1, scale=1.0, output_measure=APPROX_DP, delta=1e-6)(data)
    assert samplers[-1] == "zcdp"


def test_opendp_maps_agree_with_ours() -> None:
    """OpenDP's make_noisy_top_k map (monotone ℓ∞) is k/scale (pure) and k/(8 scale²) (zCDP)."""
    space = dp.vector_domain(dp.atom_domain(T=dp.i64), size=5), dp.linf_distance(T=dp.i64, monotonic=True)
    for d in (1, 3):
        pure = dp.m.make_noisy_top_k(*space, output_measure=dp.max_divergence(), k=3, scale=2.0).map(d)
        zcdp = dp.m.make_noisy_top_k(*space, output_measure=dp.zero_concentrated_divergence(), k=3, scale=2.0).map(d)
        assert peeling_pure_epsilon(d, k=3, scale=2.0) == pytest.approx(pure)
        assert peeling_rho(d, k=3, scale=2.0) == pytest.approx(zcdp)


# --------------------------------------------------------------------------------------------------------------
# no-noise runs (oracle values of the paper's reference code)


def test_no_noise_peeling() -> None:
    """cdp_peeling on [[1,2],[1]] with no noise, k = 1 → [1]; and the full order with ties broken."""
    m = make_peeling_top_k(*SPACE, candidates=[1, 2, 3], k=1, scale=1e-6)
    assert m(frame([[1, 2], [1]]))["item"].to_list() == [1]
    m = make_peeling_top_k(*SPACE, candidates=[3, 2, 1], k=3, scale=1e-6, output_measure=dp.max_divergence())
    out = m(frame([[1, 2], [1], [2, 1], [1]]))
    assert out["item"].to_list() == [1, 2, 3] and out["rank"].to_list() == [1, 2, 3]


def test_no_noise_limited_domain() -> None:
    """ε = 1e6, δ = 0.1, Δ0 = 5, k = 1, k̄ = 2 on [[1]]×10 + [[2,3],[1,4,5]] → [1]."""
    m = make_limited_domain_top_k(*SPACE, k=1, k_bar=2, max_contributions=5, epsilon=1e6, delta=0.1)
    assert m(frame([[1]] * 10 + [[2, 3], [1, 4, 5]]))["item"].to_list() == [1]


def test_no_noise_wgm_then_peel() -> None:
    m = make_wgm_top_k(*SPACE, k=1, max_contributions=5, wgm_scale=1e-4, wgm_threshold=0.5, peel_scale=1e-6)
    assert m(frame([[1]] * 10 + [[2, 3], [1, 4, 5]]))["item"].to_list() == [1]
    users = [[1, 2, 3], [1, 2, 4], [1, 5], [2, 7], [2, 9]] + [[1]] * 10 + [[2]] * 10
    m = make_wgm_top_k(*SPACE, k=2, max_contributions=10, wgm_scale=1e-4, wgm_threshold=0.5, peel_scale=1e-6)
    assert set(m(frame(users))["item"].to_list()) == {1, 2}


def test_limited_domain_k_bar_beyond_the_items_does_not_crash() -> None:
    """The reference's IndexError (§14 B1): k̄ larger than the distinct items after clipping."""
    data = frame([[1]] * 30 + [[2]] * 20)
    m = make_limited_domain_top_k(*SPACE, k=5, k_bar=40, max_contributions=3, epsilon=50.0, delta=1e-3)
    out = m(data)
    assert out["item"].to_list() == [1, 2]  # only real items, never a placeholder
    m = make_limited_domain_top_k(*SPACE, k=2, k_bar=2, max_contributions=None, epsilon=50.0, delta=1e-3)
    assert m(data)["item"].to_list() == [1, 2]


# --------------------------------------------------------------------------------------------------------------
# composition and calibration


@settings(max_examples=30, deadline=None)
@given(
    d_in=st.integers(0, 4),
    k=st.integers(1, 60),
    max_contributions=st.integers(1, 200),
    wgm_scale=st.floats(0.5, 20.0),
    wgm_threshold=st.floats(1.0, 80.0),
    peel_scale=st.floats(0.1, 100.0),
    wgm_epsilon=st.floats(0.05, 3.0),
    peel_delta=st.floats(1e-9, 1e-3),
)
def test_composition_map_is_the_sum_of_the_stage_maps(
    d_in, k, max_contributions, wgm_scale, wgm_threshold, peel_scale, wgm_epsilon, peel_delta
) -> None:
    params = {"max_contributions": max_contributions, "scale": wgm_scale, "threshold": wgm_threshold}
    both = {"k": k, "max_contributions": max_contributions, "wgm_scale": wgm_scale, "wgm_threshold": wgm_threshold,
            "peel_scale": peel_scale}
    candidates = list(range(k))  # k candidates: the stage-2 measurement runs (and charges) k rounds
    # approximate zCDP
    stage_1 = wgm.make_wgm(*SPACE, **params)
    stage_2 = make_peeling_top_k(*SPACE, candidates=candidates, k=k, scale=peel_scale)
    m = make_wgm_top_k(*SPACE, **both)
    expected = [a + b for a, b in zip(stage_1.map(d_in), stage_2.map(d_in), strict=False)]
    assert m.map(d_in) == pytest.approx([expected[0], min(1.0, expected[1])], rel=1e-12)
    assert m.map(d_in)[0] >= expected[0]  # rounded up
    # (ε, δ)
    stage_1 = wgm.make_wgm(*SPACE, **params, output_measure=APPROX_DP, epsilon=wgm_epsilon)
    stage_2 = make_peeling_top_k(*SPACE, candidates=candidates, k=k, scale=peel_scale, output_measure=APPROX_DP,
                                 delta=peel_delta)
    m = make_wgm_top_k(*SPACE, **both, output_measure=APPROX_DP, wgm_epsilon=wgm_epsilon, peel_delta=peel_delta)
    expected = [a + b for a, b in zip(stage_1.map(d_in), stage_2.map(d_in), strict=False)]
    assert m.map(d_in) == pytest.approx([expected[0], min(1.0, expected[1])], rel=1e-12)


@settings(max_examples=15, deadline=None)
@given(
    k=st.integers(1, 300),
    max_contributions=st.integers(1, 300),
    epsilon=st.floats(0.05, 5.0),
    delta=st.floats(1e-10, 1e-2),
    split=st.floats(0.05, 0.95),
)
def test_from_budget_passes_check(k, max_contributions, epsilon, delta, split) -> None:
    m = make_wgm_top_k_from_budget(*SPACE, k=k, max_contributions=max_contributions, epsilon=epsilon, delta=delta,
                                   split=split)
    assert m.output_measure == APPROX_DP
    assert m.check(1, (epsilon, delta))
    m = make_wgm_top_k_from_budget(*SPACE, k=k, max_contributions=max_contributions, rho=epsilon / 10, delta=delta,
                                   split=split)
    assert m.output_measure == ZCDP
    assert m.check(1, (epsilon / 10, delta))


def test_calibration_dataclass_and_split() -> None:
    cal = calibrate_wgm_top_k(k=20, max_contributions=50, epsilon=1.0, delta=1e-5)
    assert isinstance(cal, WGMTopKCalibration) and cal.split == 0.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        cal.peel_scale = 1.0  # type: ignore[misc]
    more_to_wgm = calibrate_wgm_top_k(k=20, max_contributions=50, epsilon=1.0, delta=1e-5, split=0.8)
    assert more_to_wgm.wgm.scale < cal.wgm.scale and more_to_wgm.peel_scale > cal.peel_scale
    zcdp = calibrate_wgm_top_k(k=20, max_contributions=50, rho=0.2, delta=1e-5, split=0.25)
    assert zcdp.peel_delta == 0.0 and zcdp.wgm.rho == pytest.approx(0.05)
    assert peeling_rho(1, k=20, scale=zcdp.peel_scale) <= 0.15


def test_limited_domain_map() -> None:
    m = make_limited_domain_top_k(*SPACE, k=10, k_bar=50, max_contributions=100, epsilon=1.0, delta=1e-5)
    eps, delta = m.map(1)
    assert 0.999 < eps <= 1.0 and delta == 1e-5
    assert m.map(0) == (0.0, 0.0)
    eps_2, delta_2 = m.map(2)
    assert eps_2 == pytest.approx(2 * eps) and delta_2 == pytest.approx(1e-5 * (1 + math.exp(eps)))


# --------------------------------------------------------------------------------------------------------------
# properties


users_strategy = st.lists(st.lists(st.sampled_from("abcdefghij"), min_size=1, max_size=6), min_size=1, max_size=40)


@settings(max_examples=25, deadline=None)
@given(users=users_strategy, k=st.integers(1, 12), scale=st.sampled_from([1e-6, 0.5, 5.0]))
def test_peeling_output_properties(users, k, scale) -> None:
    data = frame(users)
    before = data.clone()
    candidates = list("acegikmo")
    out = make_peeling_top_k(*SPACE, candidates=candidates, k=k, scale=scale)(data)
    items = out["item"].to_list()
    assert set(items) <= set(candidates) and len(items) == min(k, len(candidates)) and len(set(items)) == len(items)
    assert out["rank"].to_list() == list(range(1, len(items) + 1))
    assert out.schema == pl.Schema({"item": pl.String, "rank": pl.UInt32})
    assert data.equals(before)


@settings(max_examples=20, deadline=None)
@given(users=users_strategy, k=st.integers(1, 8), threshold=st.floats(-1.0, 4.0))
def test_wgm_top_k_output_properties(users, k, threshold) -> None:
    data = frame(users)
    out = make_wgm_top_k(*SPACE, k=k, max_contributions=3, wgm_scale=0.5, wgm_threshold=threshold, peel_scale=1.0)(data)
    items = out["item"].to_list()
    assert set(items) <= {x for u in users for x in u}
    assert len(items) <= k and len(set(items)) == len(items)


@settings(max_examples=20, deadline=None)
@given(
    users=users_strategy,
    k=st.integers(1, 6),
    extra=st.integers(0, 20),
    max_contributions=st.sampled_from([1, 3, None]),
)
def test_limited_domain_output_properties(users, k, extra, max_contributions) -> None:
    data = frame(users)
    out = make_limited_domain_top_k(*SPACE, k=k, k_bar=k + extra, max_contributions=max_contributions, epsilon=5.0,
                                    delta=0.05)(data)
    items = out["item"].to_list()
    assert set(items) <= {x for u in users for x in u}
    assert len(items) <= k and len(set(items)) == len(items)


# --------------------------------------------------------------------------------------------------------------
# release shape, empty inputs, other input spaces


@pytest.mark.parametrize("dtype", [pl.Int64, pl.Int32, pl.String])
def test_dtype_is_preserved(dtype) -> None:
    data = frame([[1, 2]] * 30 + [[3]] * 10).with_columns(pl.col("item").cast(dtype))
    public = [1, 2, 3] if dtype != pl.String else ["1", "2", "3"]
    for m in (
        make_peeling_top_k(*SPACE, candidates=public, k=2, scale=1.0),
        make_wgm_top_k(*SPACE, k=2, max_contributions=5, wgm_scale=1.0, wgm_threshold=5.0, peel_scale=1.0),
        make_limited_domain_top_k(*SPACE, k=2, k_bar=3, max_contributions=5, epsilon=3.0, delta=1e-3),
    ):
        out = m(data)
        assert out.schema == pl.Schema({"item": dtype, "rank": pl.UInt32})


def test_empty_candidates_and_empty_stage_1_release_nothing_but_are_accounted() -> None:
    data = frame([[1, 2]] * 5)
    m = make_peeling_top_k(*SPACE, candidates=[], k=3, scale=1.0)
    assert m(data).height == 0 and m.map(1) == (0.0, 0.0)
    m = make_wgm_top_k(*SPACE, k=3, max_contributions=2, wgm_scale=1.0, wgm_threshold=1e6, peel_scale=2.0)
    out = m(data)
    assert out.height == 0 and out.schema == pl.Schema({"item": pl.Int64, "rank": pl.UInt32})
    assert m.map(1)[0] == pytest.approx(1 / 2 + 3 / 32)  # both stages are charged
    empty = pl.DataFrame({"user": [], "item": []}, schema={"user": pl.Int64, "item": pl.String})
    ld = make_limited_domain_top_k(*SPACE, k=2, k_bar=4, max_contributions=2, epsilon=1.0, delta=1e-5)
    assert ld(empty).height == 0


def test_partials_chain_from_the_space() -> None:
    data = frame([[1, 2]] * 30 + [[3]] * 10)
    for partial in (
        then_peeling_top_k(candidates=[1, 2, 3], k=2, scale=1.0),
        then_wgm_top_k(k=2, max_contributions=5, wgm_scale=1.0, wgm_threshold=5.0, peel_scale=1.0),
        then_wgm_top_k_from_budget(k=2, max_contributions=5, epsilon=1.0, delta=1e-5),
        then_limited_domain_top_k(k=2, k_bar=3, max_contributions=5, epsilon=1.0, delta=1e-5),
    ):
        out = (SPACE >> partial)(data)
        assert out.columns == ["item", "rank"]


def test_context_composition() -> None:
    """The Context's lazyframe space: the measurement composes with OpenDP's own queries."""
    data = frame([[1, 2]] * 60 + [[3]] * 30).lazy()
    ctx = dp.Context.compositor(
        data=data,
        privacy_unit=dp.unit_of(contributions=1, identifier="user"),
        privacy_loss=dp.loss_of(rho=0.6, delta=1e-5),
        split_evenly_over=2,
    )
    m = make_wgm_top_k_from_budget(*ctx.accountant.input_space, k=2, max_contributions=4, rho=0.3, delta=5e-6,
                                   item="item")
    assert set(ctx(m)["item"].to_list()) <= {1, 2, 3}


# --------------------------------------------------------------------------------------------------------------
# bad input: every error message


def _peel(**kw):
    return make_peeling_top_k(*SPACE, **{"candidates": [1, 2], "k": 1, "scale": 1.0, **kw})


def _wgm_top_k(**kw):
    base = {"k": 2, "max_contributions": 5, "wgm_scale": 1.0, "wgm_threshold": 5.0, "peel_scale": 1.0}
    return make_wgm_top_k(*SPACE, **{**base, **kw})


def _budget(**kw):
    return make_wgm_top_k_from_budget(*SPACE, **{"k": 2, "max_contributions": 5, "epsilon": 1.0, "delta": 1e-5, **kw})


def _ld(**kw):
    base = {"k": 2, "k_bar": 4, "max_contributions": 5, "epsilon": 1.0, "delta": 1e-5}
    return make_limited_domain_top_k(*SPACE, **{**base, **kw})


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: _peel(k=0), ValueError, r"`k` must be an integer >= 1 \(found 0\)"),
        (lambda: _peel(k=2.0), TypeError, "`k` must be an integer"),
        (lambda: _peel(scale=0.0), ValueError, r"`scale` must be in \(0.0, inf\)"),
        (lambda: _peel(candidates=[1, 1]), ValueError, "`candidates` must be distinct"),
        (lambda: _peel(candidates=[1, None]), ValueError, "`candidates` must not contain nulls"),
        (lambda: _peel(candidates="ab"), TypeError, "`candidates` must be a sequence"),
        (lambda: _peel(output_measure=dp.renyi_divergence()), ValueError, "`output_measure` must be one of"),
        (lambda: _peel(output_measure=APPROX_DP), ValueError, r"`delta` must be given with output_measure=.* \(the δ at which the peeling's zCDP is "
         r"converted to \(ε, δ\)\) \(found None\)$"),
        (lambda: _peel(delta=1e-5), ValueError, "`delta` must be None unless output_measure="),
        (lambda: _peel(output_measure=APPROX_DP, delta=1.0), ValueError, r"`delta` must be in \(0.0, 1.0\)"),
        (lambda: _peel(method="slow"), ValueError, "`method` must be one of"),
        (lambda: _peel(item="other"), ValueError, "disagrees with `input_domain`"),
        (lambda: _wgm_top_k(k=0), ValueError, r"`k` must be an integer >= 1"),
        (lambda: _wgm_top_k(peel_scale=-1.0), ValueError, "`peel_scale` must be in"),
        (lambda: _wgm_top_k(max_contributions=0), ValueError, r"`max_contributions` must be an integer >= 1"),
        (lambda: _wgm_top_k(wgm_scale=0.0), ValueError, r"`wgm_scale` must be in \(0.0, inf\) \(found 0.0\)"),
        (lambda: _wgm_top_k(wgm_threshold=float("inf")), ValueError, r"`wgm_threshold` must be finite \(found inf\)"),
        (lambda: _wgm_top_k(wgm_scale=2.0**21), ValueError, r"`scale` must be <= 2\*\*20"),
        (lambda: _wgm_top_k(noise="fast"), ValueError, "`noise` must be one of"),
        (lambda: _wgm_top_k(method="slow"), ValueError, "`method` must be one of"),
        (lambda: _wgm_top_k(wgm_epsilon=1.0), ValueError, "`wgm_epsilon` must be None unless"),
        (lambda: _wgm_top_k(peel_delta=1e-6), ValueError, "`peel_delta` must be None unless"),
        (lambda: _wgm_top_k(output_measure=APPROX_DP), ValueError, "`wgm_epsilon` must be given with"),
        (lambda: _wgm_top_k(output_measure=APPROX_DP, wgm_epsilon=1.0), ValueError, "`peel_delta` must be given with"),
        (lambda: _wgm_top_k(output_measure=APPROX_DP, wgm_epsilon=1.0, peel_delta=0.0), ValueError,
         r"`peel_delta` must be in \(0.0, 1.0\)"),
        (lambda: _wgm_top_k(output_measure=APPROX_DP, wgm_epsilon=0.0, peel_delta=1e-6), ValueError,
         r"`wgm_epsilon` must be in \(0.0, inf\) \(found 0.0\)"),
        (lambda: _wgm_top_k(output_measure=dp.max_divergence()), ValueError, "`output_measure` must be"),
        (lambda: _wgm_top_k(passes=0), ValueError, r"`passes` must be an integer >= 1 \(found 0\)"),
        (lambda: _wgm_top_k(passes=2.0), TypeError, r"`passes` must be an integer >= 1 \(found 2.0\)"),
        (lambda: _wgm_top_k(engine="gpu"), ValueError,
         r"`engine` must be one of \{'auto', 'in-memory', 'streaming'\} \(found 'gpu'\)"),
        (lambda: _budget(split=0.0), ValueError, r"`split` must be in \(0.0, 1.0\) \(found 0.0\)"),
        (lambda: _budget(split=1.0), ValueError, r"`split` must be in \(0.0, 1.0\) \(found 1.0\)"),
        (lambda: _budget(split=1.5), ValueError, r"`split` must be in \(0.0, 1.0\)"),
        (lambda: _budget(split=-0.1), ValueError, r"`split` must be in \(0.0, 1.0\)"),
        (lambda: _budget(epsilon=0.0), ValueError, r"`epsilon` must be in \(0.0, inf\)"),
        (lambda: _budget(rho=0.5), ValueError, "exactly one of `epsilon` and `rho` must be given"),
        (lambda: _budget(epsilon=None), ValueError, "exactly one of `epsilon` and `rho` must be given"),
        (lambda: _budget(delta=0.0), ValueError, r"`delta` must be in \(0.0, 1.0\)"),
        (lambda: _budget(k=0), ValueError, r"`k` must be an integer >= 1"),
        (lambda: _budget(passes=-1), ValueError, r"`passes` must be an integer >= 1 \(found -1\)"),
        (lambda: _budget(engine=None), ValueError, r"`engine` must be one of \{'auto', 'in-memory', 'streaming'\} \(found None\)"),
        (lambda: _ld(k=0), ValueError, r"`k` must be an integer >= 1"),
        (lambda: _ld(k_bar=0), ValueError, r"`k_bar` must be an integer >= 1"),
        (lambda: _ld(k=5, k_bar=4), ValueError, r"`k` \(5\) must be <= `k_bar` \(4\)"),
        (lambda: _ld(max_contributions=0), ValueError, r"`max_contributions` must be an integer >= 1"),
        (lambda: _ld(epsilon=-1.0), ValueError, r"`epsilon` must be in \(0.0, inf\)"),
        (lambda: _ld(delta=1.0), ValueError, r"`delta` must be in \(0.0, 1.0\)"),
        (lambda: _ld(method="x"), ValueError, "`method` must be one of"),
        (lambda: calibrate_wgm_top_k(k=1, max_contributions=1, epsilon=1.0, delta=1e-5, split=1.0), ValueError,
         r"`split` must be in \(0.0, 1.0\)"),
        (lambda: make_peeling_top_k(dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.symmetric_distance(),
                                    candidates=[1], k=1, scale=1.0), ValueError, "`input_metric` must be"),
    ],
)
def test_bad_input(build, error, match) -> None:
    with pytest.raises(error, match=match):
        build()


def test_release_errors_are_schema_errors() -> None:
    m = make_peeling_top_k(*SPACE, candidates=["a"], k=1, scale=1.0)
    with pytest.raises(dp.OpenDPException, match="not found in the data"):  # raised inside OpenDP's call
        m(pl.DataFrame({"user": [1], "thing": ["a"]}))


def test_features_are_required() -> None:
    dp.disable_features("honest-but-curious")
    try:
        for build in (_peel, _wgm_top_k, _budget, _ld):
            with pytest.raises(dp.OpenDPException, match="enable_features"):
                build()
    finally:
        dp.enable_features("contrib", "honest-but-curious")


def test_input_is_not_mutated_and_lazy_input_works() -> None:
    data = frame([[1, 2]] * 30 + [[3]] * 10)
    before = data.clone()
    for m in (_peel(), _wgm_top_k(), _ld()):
        m(data)
        m(data.lazy())
    assert data.equals(before)


@pytest.mark.slow
def test_steam_200k_wgm_top_k_beats_limited_domain(shared_data) -> None:
    path = shared_data / "steam_200k"
    if not path.exists():
        pytest.skip("steam_200k is absent")
    data = wgm.datasets.load_steam_200k(path)
    m = make_wgm_top_k_from_budget(*SPACE, k=100, max_contributions=100, epsilon=1.0, delta=1e-5)
    ld = make_limited_domain_top_k(*SPACE, k=100, k_bar=500, max_contributions=100, epsilon=1.0, delta=1e-5)
    ours = np.mean([wgm.metrics.top_k_missing_mass(data, m(data), 100) for _ in range(2)])
    theirs = wgm.metrics.top_k_missing_mass(data, ld(data), 100)
    assert ours <= 0.03 and ours < theirs


def test_peeling_maps_at_underflowing_scale() -> None:
    """(d/s)² beyond the floats: the exact and the float accounting both report ∞ instead of raising."""
    from opendp_wgm.measurements.hitting_set import make_user_peeling
    from opendp_wgm.measurements.top_k import make_peeling_top_k

    space = wgm.user_items_space()
    assert make_peeling_top_k(*space, candidates=["a", "b"], k=2, scale=1e-200).map(1)[0] == math.inf
    assert make_user_peeling(*space, candidates=["a", "b"], k=2, scale=1e-200).map(1)[0] == math.inf
    approx = dp.approximate(dp.max_divergence())
    m = make_user_peeling(*space, candidates=["a", "b"], k=2, scale=5e-324, output_measure=approx, delta=1e-6)
    assert m.map(1)[0] == math.inf


LOSSY_CANDIDATES = [
    ([1.2, 1.7], ValueError, r"`candidates` must be exactly representable in the item column's type Int64 \(found \[1.2, 1.7\]\)"),
    (["7", "8"], TypeError, r"`candidates` must have the item column's type Int64 \(found String\)"),
    ([2.0**70], TypeError, r"`candidates` must be representable in the item column's type Int64"),
]


@pytest.mark.parametrize(("candidates", "error", "match"), LOSSY_CANDIDATES)
def test_peeling_top_k_rejects_lossy_candidates(candidates, error, match, monkeypatch) -> None:
    """Floats 1.2 and 1.7 on an Int64 column were cast to 1 and 1, one item released at two ranks; text "7"
    was matched with the integer 7. Now: an error at construction when a lazyframe_domain states the dtype,
    else at release before any noise is drawn."""
    from opendp_wgm.measurements import top_k as top_k_module

    data = pl.DataFrame({"user": [1, 2, 3], "item": [1, 1, 7]})
    domain = dp.lazyframe_domain(
        [dp.series_domain("user", dp.atom_domain(T=dp.i64)), dp.series_domain("item", dp.atom_domain(T=dp.i64))]
    )
    with pytest.raises(error, match=match):
        make_peeling_top_k(domain, dp.symmetric_id_distance(pl.col("user")), candidates=candidates, k=2, scale=1.0)

    def no_noise(*args, **kwargs):
        raise AssertionError("noise drawn")

    monkeypatch.setattr(top_k_module, "noisy_top_k", no_noise)
    m = make_peeling_top_k(*wgm.user_items_space(), candidates=candidates, k=2, scale=1.0)
    with pytest.raises(dp.OpenDPException, match=match):  # raised inside OpenDP's call
        m(data)
    # exact casts still work: integral floats on an Int64 column name the same items
    m = make_peeling_top_k(*wgm.user_items_space(), candidates=[1.0, 7.0], k=2, scale=1e-9)
    monkeypatch.undo()
    assert m(data)["item"].to_list() == [1, 7]
