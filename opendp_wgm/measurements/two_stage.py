r"""Two-stage mechanisms: a key release discovers candidates, a known-domain mechanism selects among them.

:func:`make_two_stage` composes, adaptively, any measurement that releases keys (stage 1: the WGM or DP-SIPS) with
any constructor of a known-domain measurement on the released candidates (stage 2: peeling top-k, user
peeling, OpenDP's aggregates in :mod:`opendp_wgm.measurements.group_by`). Only stage 2's frame is released, or
``combine``'s post-processing of both. The privacy map is the sum of stage 1's map and stage 2's *charged*
map, a map that holds for every candidate list (peeling charges ``k`` rounds whatever the number of candidates),
rounded up (``docs/top_k.md`` §3, ``docs/hitting_set.md`` §3). The input is prepared once (and collected once at
one in-memory pass): both stages read the same prepared frame.

:func:`wgm_then_peeling` is the paper's WGM-then-peeling on it (:func:`opendp_wgm.make_wgm_top_k`,
:func:`opendp_wgm.make_wgm_hitting_set`, on every engine), :func:`make_dp_sips_then_peeling` the same with
DP-SIPS as stage 1 (``stage_1="dp-sips"`` of the ``_from_budget`` constructors, on every engine).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import opendp.prelude as dp
import polars as pl

from opendp_wgm._spaces import _prepare_frame, _PreparedFrame, _release_keys, _resolve_space, _Space
from opendp_wgm._validation import _check_d_in, _check_execution, _check_int, _check_positive, _check_real
from opendp_wgm.domains import UserItemsDescriptor, user_items_domain
from opendp_wgm.engines import spark as spark_engine
from opendp_wgm.engines.polars import collect_once
from opendp_wgm.kernel import small_and_cold
from opendp_wgm.measurements._spark import spark_space
from opendp_wgm.measurements.dp_sips import make_dp_sips
from opendp_wgm.measurements.wgm import Engine, check_noise, make_wgm
from opendp_wgm.privacy.budget import MeasureKind, check_two_stage_measure, measure_of
from opendp_wgm.privacy.calibrate import DPSIPSCalibration, WGMCalibration
from opendp_wgm.privacy.peeling import Accounting, add_up, peeling_loss
from opendp_wgm.privacy.threshold import check_max_contributions
from opendp_wgm.samplers import NoiseMethod

__all__ = ["Stage2Release", "make_dp_sips_then_peeling", "make_two_stage"]

RANK = "rank"

#: Stage 1: ``(input_domain, input_metric) -> Measurement`` (a partial constructor such as ``then_wgm(...)``):
#: a key release, whose output frame holds the candidate keys in the item column.
Stage1 = Callable[[dp.Domain, dp.Metric], dp.Measurement]


@dataclass(frozen=True)
class Stage2Release:
    """A stage 2 as what :func:`make_two_stage` reads of it at a release: its output measure and its release
    function, without an OpenDP measurement (the two-stage map charges ``stage_2_map``, never stage 2's own map).

    The Polars peelings give it (:func:`opendp_wgm.measurements.top_k._peeling_top_k_release`,
    :func:`opendp_wgm.measurements.hitting_set._user_peeling_release`: their constructors' checks and function),
    so that a release neither builds a measurement through OpenDP's FFI nor calls its function back through it:
    about 0.4 ms and 0.3 ms of a 2–3 ms stage 2 on steam_200k."""

    output_measure: dp.Measure
    function: Callable[[Any], pl.DataFrame]

    def __call__(self, data: Any) -> pl.DataFrame:
        return self.function(data)


#: A known-domain peeling's checked parts: its :class:`Stage2Release` and its privacy map (``_peeling_top_k``,
#: ``_user_peeling``).
StageParts = tuple[Stage2Release, Callable[[int], Any]]


def peeling_parts(
    function: Callable[[Any], pl.DataFrame], *, kind: MeasureKind, rounds: int, scale: float, accounting: Accounting,
    delta: float,
) -> StageParts:
    """A peeling's parts: its release ``function`` at the measure of ``kind``, and its map, ``rounds`` rounds at
    ``scale`` (the number of rounds the candidate list allows: public, as the list is)."""

    def privacy_map(d_in: int) -> Any:
        return peeling_loss(d_in, k=rounds, scale=scale, kind=kind, accounting=accounting, delta=delta)

    return Stage2Release(measure_of(kind), function), privacy_map


def measurement_of(input_domain: dp.Domain, input_metric: dp.Metric, parts: StageParts) -> dp.Measurement:
    """A peeling's ``parts`` as its own measurement (:func:`opendp_wgm.make_peeling_top_k`,
    :func:`opendp_wgm.make_user_peeling`)."""
    release, privacy_map = parts
    return dp.m.make_user_measurement(input_domain, input_metric, release.output_measure, release.function, privacy_map)


def release_of(parts: Callable[..., StageParts]) -> Callable[..., Stage2Release]:
    """A peeling's checks and release function, without its measurement (``parts`` without the map): the stage 2 of
    a two-stage release at every release (the two-stage map charges the peeling's ``k`` rounds itself)."""

    def release(input_domain: dp.Domain, input_metric: dp.Metric, **options: Any) -> Stage2Release:
        return parts(input_domain, input_metric, **options)[0]

    return release


#: Stage 2: ``(input_domain, input_metric, candidates) -> Measurement``, a known-domain measurement on the
#: candidates stage 1 released (or its :class:`Stage2Release`).
Stage2 = Callable[[dp.Domain, dp.Metric, pl.Series], dp.Measurement | Stage2Release]


@dataclass(frozen=True)
class Preparation:
    """How a two-stage release prepares its input once for both stages.

    ``function`` maps an input to the prepared data, a member of ``domain`` under ``metric`` (stable:
    ``d_out = d_in`` users), on which both stages are built; ``item`` names the key column of stage 1's release
    (``keys``, when given, its key columns: a composite key's, which become one Struct candidate Series).
    """

    domain: dp.Domain
    metric: dp.Metric
    function: Callable[[Any], Any]
    item: str
    keys: tuple[str, ...] = ()


def _preparation(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    item: str | Sequence[str] | None,
    *,
    passes: int = 1,
    engine: Engine = "auto",
) -> Preparation:
    """The input's preparation on its engine. On a Spark space the frame is checked (once per release) and both
    stages read the Spark frame itself (``passes`` and ``engine`` must keep their defaults there).

    Otherwise a Polars frame's preparation (:func:`opendp_wgm.domains._prepare_frame`: the user key evaluated,
    nulls dropped), as a :class:`~opendp_wgm.domains._PreparedFrame` of the bare-column space (user key, item):
    both stages read it without preparing it again (the identifier must not be evaluated twice), and it passes to
    them as a Python object (no copy through OpenDP's FFI). With stage 1's ``passes`` and ``engine`` at one
    in-memory pass it is collected once (:func:`~opendp_wgm.engines.polars.collect_once`): stage 2 reads the
    frame stage 1 read, not the input again; otherwise it stays a plan that each stage scans. The frame carries
    its :class:`~opendp_wgm.engines.polars.Prepared` value (``source``), made here once per release: stage 1's
    compiled step leaves its coding of the rows in it, and stage 2 reads that instead of the rows."""
    spark = spark_space(input_domain, input_metric, item=item, passes=passes, engine=engine)
    if spark is not None:
        check = functools.partial(spark_engine.check_frame, space=spark)
        return Preparation(input_domain, input_metric, check, spark.item)
    space = _resolve_space(input_domain, input_metric, item)
    prepared = _Space(space.user, space.item, None, lazyframe_domain=False, composite=space.composite)

    def function(frame: Any) -> _PreparedFrame:
        shared = collect_once(_prepare_frame(frame, space), passes=passes, engine=engine)
        return _PreparedFrame(shared.lf, prepared, shared)  # both stages read ``shared``: its rows and its slot

    domain = user_items_domain(UserItemsDescriptor(space.user, space.composite or space.item))
    return Preparation(domain, dp.symmetric_id_distance(pl.col(space.user)), function, space.item, space.keys)


def _add_losses(first: Any, second: Any, accounting: Accounting) -> Any:
    """Two stage losses added and rounded up as ``accounting`` says: (ρ or ε, δ) pairs add componentwise."""
    if isinstance(first, tuple):
        delta = add_up(first[1], second[1], accounting)
        return add_up(first[0], second[0], accounting), (min(1.0, delta) if accounting.cap_delta else delta)
    return add_up(first, second, accounting)


def make_two_stage(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    stage_1: Stage1,
    stage_2: Stage2,
    stage_2_map: Callable[[int], Any],
    accounting: Accounting,
    item: str | Sequence[str] | None = None,
    preparation: Preparation | None = None,
    combine: Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame] | None = None,
) -> dp.Measurement:
    r"""Stage 1 releases keys; stage 2, built on them, releases the output (adaptive composition).

    Parameters
    ----------
    input_domain, input_metric
        The input space.
    stage_1
        ``(domain, metric) -> Measurement``, e.g. ``opendp_wgm.then_wgm(...)``: a key release whose output frame
        holds the candidates in the item column. Built once, on the prepared space; its map is the first term.
    stage_2
        ``(domain, metric, candidates) -> Measurement``: the known-domain measurement on the released candidates
        (a ``pl.Series`` of the item column), built at release time on the prepared space; or its
        :class:`Stage2Release` (the output measure and the release function only).
    stage_2_map
        Stage 2's charged map: a map that holds for *every* candidate list (e.g. ``k`` peeling rounds whatever
        the number of candidates), so that the sum does not depend on stage 1's release.
    accounting
        How the two maps add and round up (the stage-2 module's :class:`~opendp_wgm.privacy.peeling.Accounting`).
    item
        Item column, when the input domain is OpenDP's and holds more than one other column; a list of
        columns for a composite key (``docs/api.md``: the release has those columns in place of the item's).
    preparation
        The input's preparation, run once per release; both stages are built on its space and read its result.
        Default: the input engine's (:func:`_preparation`): a Polars frame's, collected once at one in-memory
        pass, or a checked Spark frame.
    combine
        ``(stage_1_frame, stage_2_frame) -> frame``: the release built from both stages' releases (a
        post-processing of the two, e.g. the keys with their weights and their aggregates). Default: stage 2's
        frame only.

    Returns
    -------
    opendp.mod.Measurement
        Stage 2's release (or ``combine``'s), in stage 1's output measure.

    Notes
    -----
    The preparation is stable with ``d_out = d_in`` users (row-wise: the user key evaluated, rows with nulls
    dropped). Stage 2 is private for every fixed candidate list, with a map bounded by ``stage_2_map`` whatever
    the list, and its candidates are stage 1's output: by adaptive composition,
    :math:`m(d) = m_1(d) + m_2(d)`, (ρ, δ) or (ε, δ) pairs added componentwise, rounded up.
    """
    if preparation is None:
        preparation = _preparation(input_domain, input_metric, item)
    domain, metric = preparation.domain, preparation.metric
    first = stage_1(domain, metric)  # once: its map, and the release
    output_measure = first.output_measure

    def function(frame: Any) -> pl.DataFrame:
        data = preparation.function(frame)
        lf = data.lf if isinstance(data, _PreparedFrame) else None  # a Spark frame: no compiled step
        with nullcontext() if lf is None else small_and_cold(lf):  # a small input: none loaded for it
            return both(data)

    def both(data: Any) -> pl.DataFrame:
        keys = first(data)
        candidates = _release_keys(keys, preparation.keys or (preparation.item,))  # stage 1's released keys only
        second = stage_2(domain, metric, candidates)
        measure = second.output_measure
        if measure is not output_measure and measure != output_measure:  # the same object: no FFI compare
            msg = f"`stage_2` must measure privacy in {output_measure} (found {measure})"
            raise ValueError(msg)
        released: pl.DataFrame = second(data)  # stage 2, on the same prepared data
        return released if combine is None else combine(keys, released)

    def privacy_map(d_in: int) -> Any:
        d_in = _check_d_in(d_in)
        return _add_losses(first.map(d_in), stage_2_map(d_in), accounting)

    return dp.m.make_user_measurement(input_domain, input_metric, output_measure, function, privacy_map)


# --------------------------------------------------------------------------------------------------------------
# WGM, then peeling


class _TwoStageCalibration(Protocol):
    """What a two-stage calibration gives (``WGMTopKCalibration``, ``HittingSetCalibration``)."""

    @property
    def k(self) -> int: ...
    @property
    def wgm(self) -> WGMCalibration | None: ...
    @property
    def sips(self) -> DPSIPSCalibration | None: ...
    @property
    def peel_scale(self) -> float: ...
    @property
    def peel_delta(self) -> float: ...
    @property
    def epsilon(self) -> float | None: ...


#: A peeling constructor on a known candidate list: ``(domain, metric, *, candidates, k, scale, output_measure,
#: delta, item) -> Measurement`` (``make_peeling_top_k``, ``make_user_peeling``: on either engine), or its
#: :class:`Stage2Release` (``_peeling_top_k_release``, ``_user_peeling_release``: the Polars two-stage calls').
Peeling = Callable[..., dp.Measurement | Stage2Release]


def wgm_then_peeling(
    input_domain: dp.Domain, input_metric: dp.Metric, stage_2: PeelingStage, *, max_contributions: int,
    wgm_scale: float, wgm_threshold: float, noise: NoiseMethod, item: str | Sequence[str] | None, passes: int,
    engine: Engine,
) -> dp.Measurement:
    r"""Stage 1, the WGM at Δ0, σ, T (``max_contributions``, ``wgm_scale``, ``wgm_threshold``), releases
    candidates; ``stage_2``, checked by its caller first (:meth:`PeelingStage.checked`: ``k``, ``peel_scale``
    and the measure before stage 1's parameters, as in :func:`make_dp_sips_then_peeling`), peels ``k`` of them on
    the *unclipped* data (the paper's reference code), charged ``k`` rounds whatever the number of candidates.

    What :func:`opendp_wgm.make_wgm_top_k` and :func:`opendp_wgm.make_wgm_hitting_set` build, on every engine;
    they assert the features and check their own parameters first. Composed with :func:`make_two_stage`, which
    builds stage 1 (:func:`opendp_wgm.make_wgm`) once. ``passes`` and ``engine`` are stage 1's; at one in-memory
    pass the prepared input is collected once and stage 2 reads it, otherwise stage 2 is one more pass; it keeps
    only the candidates' rows.
    """
    max_contributions = check_max_contributions(max_contributions)
    wgm_scale = _check_positive("wgm_scale", wgm_scale)
    wgm_threshold = _check_real("wgm_threshold", wgm_threshold)
    noise = check_noise(noise)
    passes, engine = _check_execution(passes, engine)
    parameters = {"max_contributions": max_contributions, "scale": wgm_scale, "threshold": wgm_threshold}
    return _then_peeling(
        input_domain, input_metric, stage_2, make_stage_1=make_wgm, stage_1_parameters=parameters, noise=noise,
        item=item, passes=passes, engine=engine,
    )


def make_dp_sips_then_peeling(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    k: int,
    max_contributions: int,
    sips_scales: Sequence[float],
    sips_thresholds: Sequence[float],
    peel_scale: float,
    output_measure: dp.Measure | None,
    sips_epsilon: float | None,
    peel_delta: float | None,
    noise: NoiseMethod,
    item: str | Sequence[str] | None,
    passes: int,
    engine: Engine,
    peeling: Peeling,
    accounting: Accounting,
    sips_statistic_scale: float | None = None,
    sips_branch_scales: Sequence[float] | None = None,
    sips_branch_thresholds: Sequence[float] | None = None,
) -> dp.Measurement:
    r""":func:`wgm_then_peeling` with DP-SIPS (:func:`opendp_wgm.make_dp_sips`, R rounds at σ_i, T_i) as
    stage 1: its release is the candidate list; the map is DP-SIPS's plus the peeling's charged map (adaptive
    composition, as with the WGM: only stage 1 changes). ``sips_epsilon`` is DP-SIPS's ``epsilon`` under
    (ε, δ); the DP-SIPS constructor checks its own parameters, and is built once. ``sips_statistic_scale``,
    ``sips_branch_scales``, ``sips_branch_thresholds``: DP-SIPS's adaptive schedule (its ``statistic_scale``,
    ``branch_scales``, ``branch_thresholds``; all three or none), which ``stage_1="dp-sips"`` of the
    ``_from_budget`` constructors calibrates by default."""
    stage_2 = PeelingStage.checked(
        k, peel_scale, output_measure, sips_epsilon, peel_delta, peeling, accounting, epsilon_name="sips_epsilon"
    )
    parameters = {
        "max_contributions": max_contributions,
        "scales": sips_scales,
        "thresholds": sips_thresholds,
        "statistic_scale": sips_statistic_scale,
        "branch_scales": sips_branch_scales,
        "branch_thresholds": sips_branch_thresholds,
    }
    return _then_peeling(
        input_domain, input_metric, stage_2, make_stage_1=make_dp_sips, stage_1_parameters=parameters, noise=noise,
        item=item, passes=passes, engine=engine,
    )


@dataclass(frozen=True)
class PeelingStage:
    """Stage 2 of WGM-then-peeling or DP-SIPS-then-peeling, checked: ``peeling`` of ``k`` rounds at ``scale``,
    charged by ``accounting``, under ``output_measure`` (of ``kind``) with the (ε, δ) conversion's ``delta`` (0
    under approximate zCDP); ``stage_1_epsilon`` is stage 1's checked ε under (ε, δ) (None under zCDP)."""

    peeling: Peeling
    accounting: Accounting
    k: int
    scale: float
    output_measure: dp.Measure
    kind: MeasureKind
    delta: float
    stage_1_epsilon: float | None

    @classmethod
    def checked(
        cls, k: int, scale: float, output_measure: dp.Measure | None, stage_1_epsilon: float | None,
        peel_delta: float | None, peeling: Peeling, accounting: Accounting, *, epsilon_name: str = "wgm_epsilon",
    ) -> PeelingStage:
        """``k``, the peeling's ``scale`` (named ``peel_scale``), then the measure and its two ε/δ parameters
        (:func:`~opendp_wgm.privacy.budget.check_two_stage_measure`; stage 1's ε named ``epsilon_name``)."""
        k = _check_int("k", k, minimum=1)
        scale = _check_positive("peel_scale", scale)
        measure, kind, epsilon, delta = check_two_stage_measure(
            output_measure, stage_1_epsilon, peel_delta, zero_delta=accounting.zero_delta,
            stage_1_epsilon=epsilon_name,
        )
        return cls(peeling, accounting, k, scale, measure, kind, delta, epsilon)


def _then_peeling(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    stage_2: PeelingStage,
    *,
    make_stage_1: Callable[..., dp.Measurement],
    stage_1_parameters: dict[str, Any],
    noise: NoiseMethod,
    item: str | Sequence[str] | None,
    passes: int,
    engine: Engine,
) -> dp.Measurement:
    """Stage 1, ``make_stage_1`` (:func:`opendp_wgm.make_wgm` or :func:`opendp_wgm.make_dp_sips`) on
    ``stage_1_parameters`` with ``noise``, ``passes``, ``engine``, at ``stage_2``'s output measure (and stage 1's ε
    under (ε, δ)), then ``stage_2``'s peeling of ``k`` rounds on its candidates (on the unclipped data), charged
    ``k`` rounds whatever the number of candidates (:func:`make_two_stage`), both on the input's preparation at
    stage 1's ``passes`` and ``engine`` (:func:`_preparation`: collected once at one in-memory pass)."""
    stage_1 = functools.partial(
        make_stage_1, **stage_1_parameters, epsilon=stage_2.stage_1_epsilon, output_measure=stage_2.output_measure,
        noise=noise, passes=passes, engine=engine,
    )
    delta = stage_2.delta if stage_2.kind == "approx_dp" else None
    preparation = _preparation(input_domain, input_metric, item, passes=passes, engine=engine)

    def peel(domain: dp.Domain, metric: dp.Metric, candidates: pl.Series) -> dp.Measurement | Stage2Release:
        return stage_2.peeling(
            domain, metric, candidates=candidates, k=stage_2.k, scale=stage_2.scale,
            output_measure=stage_2.output_measure, delta=delta,
        )

    def stage_2_map(d_in: int) -> Any:  # k rounds, whatever the number of candidates
        return peeling_loss(
            d_in, k=stage_2.k, scale=stage_2.scale, kind=stage_2.kind, accounting=stage_2.accounting,
            delta=stage_2.delta,
        )

    return make_two_stage(
        input_domain,
        input_metric,
        stage_1=stage_1,
        stage_2=peel,
        stage_2_map=stage_2_map,
        accounting=stage_2.accounting,
        item=item,
        preparation=preparation,
    )


def two_stage_arguments(calibration: _TwoStageCalibration, **options: Any) -> dict[str, Any]:
    """The keyword arguments of a two-stage constructor from its calibration, (ε, δ)-DP or approximate zCDP,
    with ``options`` (the ``_from_budget`` constructor's own: noise, method, item, passes, engine) passed
    through unchanged; the explicit constructor checks them. With a DP-SIPS stage 1 (``calibration.sips``),
    those of :func:`make_dp_sips_then_peeling` (less its ``peeling`` and ``accounting``)."""
    approx_dp = calibration.epsilon is not None
    common = {
        "k": calibration.k,
        "peel_scale": calibration.peel_scale,
        "output_measure": measure_of("approx_dp" if approx_dp else "approx_zcdp"),
        "peel_delta": calibration.peel_delta if approx_dp else None,
        **options,
    }
    if calibration.sips is not None:
        sips = calibration.sips
        return {
            "max_contributions": sips.max_contributions,
            "sips_scales": sips.scales,
            "sips_thresholds": sips.thresholds,
            "sips_epsilon": sips.epsilon if approx_dp else None,
            **{f"sips_{name}": value for name, value in sips.branch_arguments().items()},  # the adaptive schedule
            **common,
        }
    if calibration.wgm is None:  # pragma: no cover - a bug guard: the calibrations set exactly one stage 1
        raise AssertionError("a two-stage calibration without a stage 1")
    return {
        "max_contributions": calibration.wgm.max_contributions,
        "wgm_scale": calibration.wgm.scale,
        "wgm_threshold": calibration.wgm.threshold,
        "wgm_epsilon": calibration.wgm.epsilon if approx_dp else None,
        **common,
    }


def ranked_frame(items: pl.Series, chosen: np.ndarray, name: str, **extra: np.ndarray) -> pl.DataFrame:
    """A stage-2 release: ``items[chosen]`` (in selection order) as column ``name``, their rank 1..len, and
    ``extra`` columns."""
    picked = items.gather(pl.Series(chosen, dtype=pl.UInt32)) if chosen.shape[0] else items.clear()
    return pl.DataFrame(
        [
            picked.rename(name),
            pl.Series(RANK, np.arange(1, chosen.shape[0] + 1), dtype=pl.UInt32),
            *(pl.Series(column, values) for column, values in extra.items()),
        ]
    )
