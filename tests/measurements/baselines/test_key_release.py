"""OpenDP's key release (the baseline): calibration, maps, Δ0, composition; empty and null data for every baseline."""

from __future__ import annotations

import itertools

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm.measurements import baselines as bl
from opendp_wgm.measurements.baselines import key_release

ZCDP = dp.approximate(dp.zero_concentrated_divergence())
APPROX_DP = dp.approximate(dp.max_divergence())


@pytest.fixture(autouse=True)
def _features() -> None:
    # the last test releases the policy baselines too, whose maps need the idealized-numerics opt-in
    dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")


# ------------------------------------------------------------------------------------------------------
# OpenDP's built-in key release
# ------------------------------------------------------------------------------------------------------
def test_opendp_key_release_calibration_and_maps() -> None:
    space = wgm.user_items_space()
    m = bl.make_opendp_key_release(*space, max_contributions=5, epsilon=1.0, delta=1e-5)
    assert m.output_measure == APPROX_DP and m.check(1, (1.0, 1e-5))
    maps = [m.map(d) for d in range(4)]
    assert maps[0] == (0.0, 0.0)
    assert all(a[0] < b[0] and a[1] <= b[1] for a, b in itertools.pairwise(maps))
    z = bl.make_opendp_key_release(*space, max_contributions=5, rho=0.5, delta=1e-5)
    assert z.output_measure == ZCDP and z.check(1, (0.5, 1e-5))
    rho = [z.map(d)[0] for d in range(1, 4)]
    # OpenDP's own group map: ℓ2 <= sqrt(ℓ0)·ℓ∞ = sqrt(d·(Δ0 + 1))·d, so ρ grows as d_in³
    assert rho[1] == pytest.approx(8 * rho[0]) and rho[2] == pytest.approx(27 * rho[0])
    # OpenDP charges Δ0 + 1 groups (the keep="first" quirk): ρ = (Δ0 + 1) / (2 scale²) for its own scale
    scale, _threshold = key_release._calibrate_key_release(6, "zcdp", 0.0, (0.5, 1e-5))
    assert rho[0] == pytest.approx(6 / (2 * scale**2), rel=1e-6)


def test_opendp_key_release_keeps_max_contributions_items_per_user() -> None:
    """Each user holds x, y, z; with Δ0 = 2 (OpenDP's k = 3) every user keeps the same 2 items.

    The kept items are the first in a random order of *all* items drawn per call (OpenDP's keep="sample"
    idea, emulated with a secret hash), so users holding the same items keep the same ones.

    A fresh order per call: each call keeps one of the 3 pairs, uniformly (the 2 smallest of 3 keyed hashes
    under a fresh seed), independently of the others, so r calls all keep the same pair with probability
    3·(1/3)^r = 3^(1 − r). With r = 6 that was 1/243 (the test failed by chance that often); r = 15 makes it
    3^-14 ≈ 2.1e-7. A fixed order (no fresh seed) keeps the same pair every time and fails it always.
    """
    n = 1000
    data = pl.DataFrame({"user": np.repeat(np.arange(n), 3), "item": np.tile(["x", "y", "z"], n)})
    m = bl.make_opendp_key_release(*wgm.user_items_space(), max_contributions=2, rho=1e4, delta=1e-5)
    seen = set()
    for _ in range(15):
        out = m(data)
        assert out.schema == pl.Schema({"item": pl.String, "noisy_count": pl.Int64})
        assert out.height == 2 and out["item"].is_sorted()
        assert (out["noisy_count"] - n).abs().max() < 20
        seen.add(tuple(out["item"].to_list()))
    assert len(seen) > 1  # a fresh order per call


def test_opendp_key_release_composes_in_a_context() -> None:
    lf = pl.LazyFrame({"user": np.repeat(np.arange(500), 2), "item": np.tile(["a", "b"], 500)})
    ctx = dp.Context.compositor(
        data=lf,
        privacy_unit=dp.unit_of(contributions=1, identifier="user"),
        privacy_loss=dp.loss_of(rho=0.5, delta=1e-5),
        split_evenly_over=1,
    )
    m = bl.make_opendp_key_release(*ctx.accountant.input_space, max_contributions=2, rho=0.5, delta=1e-5)
    assert set(ctx(m)["item"].to_list()) == {"a", "b"}


def test_empty_and_null_data_release_nothing() -> None:
    space = wgm.user_items_space()
    empty = pl.DataFrame({"user": [], "item": []}, schema={"user": pl.Int64, "item": pl.String})
    nulls = pl.DataFrame({"user": [None] * 5 + list(range(5)), "item": ["a"] * 5 + [None] * 5})
    for m in (
        bl.make_policy_gaussian(*space, max_contributions=3, scale=1.0, threshold=3.0),
        bl.make_policy_gaussian(*space, max_contributions=3, scale=1.0, threshold=3.0, descent="reference_l1"),
        bl.make_policy_greedy(*space, scale=1.0, threshold=3.0),
        bl.make_opendp_key_release(*space, max_contributions=3, rho=0.5, delta=1e-5),
    ):
        for data in (empty, nulls):
            out = m(data)
            assert out.height == 0 and out.schema[out.columns[0]] == pl.String
