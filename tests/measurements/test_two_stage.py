"""The two-stage combinator: its map is the sum of the stage maps, stage 1 is built once, stage 2 is any
known-domain constructor on the released candidates, and both stages read one prepared frame."""

from __future__ import annotations

import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm.measurements.top_k import make_peeling_top_k, make_wgm_top_k
from opendp_wgm.measurements.two_stage import make_two_stage
from opendp_wgm.privacy.peeling import TOP_K, USER_PEELING, add_up, peeling_loss

ZCDP = dp.approximate(dp.zero_concentrated_divergence())
WGM = dict(max_contributions=4, scale=1e-7, threshold=0.5)  # no noise to speak of: the support is released


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


def data() -> pl.DataFrame:
    return pl.DataFrame({"user": [0, 0, 1, 1, 2, 3], "item": ["a", "b", "a", "c", "a", "b"]})


def spy(counter: list[str], name: str, constructor):
    def built(*args, **kwargs):
        counter.append(name)
        return constructor(*args, **kwargs)

    return built


def test_map_is_the_sum_of_the_stage_maps_and_stage_1_is_built_once() -> None:
    calls: list[str] = []
    stage_1 = spy(calls, "stage 1", wgm.then_wgm(**WGM))

    def stage_2_map(d: int) -> tuple[float, float]:
        return peeling_loss(d, k=2, scale=3.0, kind="approx_zcdp", accounting=TOP_K)

    def stage_2(domain, metric, candidates):
        calls.append("stage 2")
        return make_peeling_top_k(domain, metric, candidates=candidates, k=2, scale=3.0)

    m = make_two_stage(
        *wgm.user_items_space(), stage_1=stage_1, stage_2=stage_2, stage_2_map=stage_2_map, accounting=TOP_K
    )
    assert calls == ["stage 1"]  # at construction, once; stage 2 waits for the candidates
    first = wgm.make_wgm(*wgm.user_items_space(), **WGM)
    for d in (0, 1, 3):
        rho_1, delta_1 = first.map(d)
        rho_2, delta_2 = stage_2_map(d)
        assert m.map(d) == (add_up(rho_1, rho_2, TOP_K), min(1.0, add_up(delta_1, delta_2, TOP_K)))
    released = m(data())
    assert calls == ["stage 1", "stage 2"]  # a release builds stage 2 once, and never stage 1 again
    assert released.columns == ["item", "rank"] and set(released["item"]) <= {"a", "b", "c"}
    assert m.output_measure == ZCDP


def test_wgm_top_k_builds_stage_1_once(monkeypatch) -> None:
    from opendp_wgm.measurements import two_stage

    calls: list[str] = []
    monkeypatch.setattr(two_stage, "make_wgm", spy(calls, "make_wgm", two_stage.make_wgm))
    m = make_wgm_top_k(*wgm.user_items_space(), k=2, max_contributions=4, wgm_scale=1e-7, wgm_threshold=0.5, peel_scale=1e-3)
    m(data())
    m(data())
    assert calls == ["make_wgm"]


def test_a_custom_stage_2_reads_the_prepared_frame_once_prepared() -> None:
    """Stage 2 may be any constructor; with a household identifier it sees one row per household and item,
    i.e. the frame prepared once (the identifier evaluated once, not twice)."""
    household = pl.col("person") // 2
    domain = dp.lazyframe_domain([dp.series_domain("person", dp.atom_domain(T=dp.i64)), dp.series_domain("item", dp.atom_domain(T=str))])
    metric = dp.symmetric_id_distance(household)
    seen: list[pl.DataFrame] = []

    def stage_2(domain, metric, candidates):
        def function(frame):
            from opendp_wgm._spaces import _prepare_frame, _resolve_space

            lf = _prepare_frame(frame, _resolve_space(domain, metric))
            seen.append(lf.collect())
            return pl.DataFrame({"item": candidates.sort(), "rank": pl.Series(range(1, candidates.len() + 1), dtype=pl.UInt32)})

        return dp.m.make_user_measurement(domain, metric, ZCDP, function, lambda d: (0.0, 0.0))

    m = make_two_stage(
        domain, metric, stage_1=wgm.then_wgm(**WGM), stage_2=stage_2, stage_2_map=lambda d: (0.0, 0.0),
        accounting=USER_PEELING,
    )
    frame = pl.DataFrame({"person": [0, 1, 2, 4, 5], "item": ["a", "a", "b", "c", "c"]})
    released = m(frame.lazy())
    assert released["item"].to_list() == ["a", "b", "c"]
    (prepared,) = seen
    assert sorted(prepared.rows()) == [(0, "a"), (0, "a"), (1, "b"), (2, "c"), (2, "c")]  # households, not persons // 4
    assert m.map(1) == wgm.make_wgm(domain, metric, **WGM).map(1)


def test_stage_2_must_share_stage_1s_measure() -> None:
    def stage_2(domain, metric, candidates):
        return make_peeling_top_k(domain, metric, candidates=candidates, k=1, scale=1.0, output_measure=dp.max_divergence())

    m = make_two_stage(
        *wgm.user_items_space(), stage_1=wgm.then_wgm(**WGM), stage_2=stage_2, stage_2_map=lambda d: (0.0, 0.0),
        accounting=TOP_K,
    )
    with pytest.raises(dp.OpenDPException, match="`stage_2` must measure privacy in"):
        m(data())
