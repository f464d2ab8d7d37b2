r"""Run an audit: many releases on both sides of each neighbouring pair, counted per event, then tested.

:func:`audit` calls the measurement ``trials`` times on D and on D′ of every pair, counts how often each
event occurs, and turns the counts into Clopper–Pearson intervals and lower bounds on the privacy loss
(:mod:`opendp_wgm.audit.stats`). A row is a *violation* when the lower bound on δ exceeds the δ that
``measurement.map(d_in)`` claims. All the intervals of one audit hold together with probability at least
1 − ``alpha`` (Bonferroni), so a correct measurement is flagged with probability at most ``alpha``.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import opendp.mod
import opendp.prelude as dp
import polars as pl

from opendp_wgm._progress import _progress
from opendp_wgm._validation import _check_int, _check_probability
from opendp_wgm.audit.events import Event
from opendp_wgm.audit.neighbours import NeighbourPair, symmetric_id_distance
from opendp_wgm.audit.stats import (
    _EPSILONS,
    FloatArray,
    clopper_pearson,
    delta_lower_bound,
    epsilon_lower_bound,
    zcdp_delta,
    zcdp_delta_lower_bound,
)

__all__ = ["AuditReport", "audit"]

#: Releases per task sent to a worker: small enough for a live progress bar, large enough to amortise IPC.
_MAX_CHUNK = 250


@dataclass(frozen=True)
class _Claim:
    """What ``measurement.map(d_in)`` claims, as (ε, δ)-DP (``kind="approx-dp"``) or approximate (ρ, δ)-zCDP."""

    kind: str
    first: float  # ε or ρ
    delta: float

    @property
    def text(self) -> str:
        name = "ε" if self.kind == "approx-dp" else "ρ"
        return f"{name} = {self.first:.6g}, δ = {self.delta:.6g}"

    def delta_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """(ε, δ(ε)) pairs the claim implies: one point for (ε, δ)-DP, a curve for approximate zCDP."""
        if self.kind == "approx-dp":
            return np.array([self.first]), np.array([self.delta])
        return _EPSILONS, np.minimum(1.0, self.delta + zcdp_delta(self.first, _EPSILONS))


def _claim(measurement: dp.Measurement, d_in: int) -> _Claim:
    """The claimed loss of ``measurement`` at ``d_in``, from its output measure and map."""
    measure = measurement.output_measure
    d_out = measurement.map(d_in)
    if measure == dp.approximate(dp.max_divergence()):
        return _Claim("approx-dp", float(d_out[0]), float(d_out[1]))
    if measure == dp.approximate(dp.zero_concentrated_divergence()):
        return _Claim("approx-zcdp", float(d_out[0]), float(d_out[1]))
    if measure == dp.max_divergence():
        return _Claim("approx-dp", float(d_out), 0.0)
    if measure == dp.zero_concentrated_divergence():
        return _Claim("approx-zcdp", float(d_out), 0.0)
    msg = (
        "`measurement` must have output measure (approximate) max divergence or zero-concentrated divergence "
        f"(found {measure})"
    )
    raise ValueError(msg)


def _bounds(
    claim: _Claim, lo1: FloatArray, hi1: FloatArray, lo0: FloatArray, hi0: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Lower bounds on ε (at the claimed δ) and on δ (at the claimed ε or ρ), the largest over the two
    directions D→D′, D′→D and over each event and its complement."""
    directions = ((lo1, hi0), (lo0, hi1), (1 - hi1, 1 - lo0), (1 - hi0, 1 - lo1))
    eps: FloatArray = np.max([epsilon_lower_bound(low, high, claim.delta) for low, high in directions], axis=0)
    if claim.kind == "approx-dp":
        delta: FloatArray = np.max([delta_lower_bound(low, high, claim.first) for low, high in directions], axis=0)
    else:
        delta = np.max([zcdp_delta_lower_bound(low, high, claim.first) for low, high in directions], axis=0)
    return eps, delta


def _check_distance(metric: dp.Metric, pairs: Sequence[NeighbourPair], d_in: int) -> None:
    """Under ``dp.symmetric_id_distance`` every pair must be within ``d_in`` (a claim at ``d_in`` says nothing
    about farther pairs); other metrics are the caller's responsibility."""
    if not isinstance(metric, dp.SymmetricIdDistance):
        return
    for pair in pairs:
        distance = symmetric_id_distance(pair.data, pair.neighbour, metric.identifier)
        if distance > d_in:
            msg = f"`pairs` must be at distance <= d_in = {d_in} under {metric} (found {distance} for {pair.label!r})"
            raise ValueError(msg)


# ----------------------------------------------------------------------------------------------------------
# running the releases: in this process, or in a pool whose workers rebuild the measurement
# ----------------------------------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _count(measurement: dp.Measurement, frame: pl.DataFrame, events: Sequence[Event], n: int) -> np.ndarray:
    """How many of ``n`` releases of ``frame`` fall in each event (a loop over releases, not rows)."""
    counts = np.zeros(len(events), dtype=np.int64)
    for _ in range(n):
        released = measurement(frame)
        counts += np.fromiter((event(released) for event in events), dtype=bool, count=len(events))
    return counts


def _init_worker(
    build: Callable[[], dp.Measurement],
    features: list[str],
    frames: list[tuple[pl.DataFrame, pl.DataFrame]],
    events: list[tuple[Event, ...]],
) -> None:
    dp.enable_features(*features)  # the parent's features, nothing more
    _WORKER.update(measurement=build(), frames=frames, events=events)


def _worker_count(pair: int, side: int, n: int) -> tuple[int, int, np.ndarray]:
    return pair, side, _count(_WORKER["measurement"], _WORKER["frames"][pair][side], _WORKER["events"][pair], n)


def _tasks(n_pairs: int, trials: int, workers: int) -> list[tuple[int, int, int]]:
    chunk = max(1, min(_MAX_CHUNK, math.ceil(trials / (4 * workers))))
    sizes = [chunk] * (trials // chunk) + ([trials % chunk] if trials % chunk else [])
    return [(p, side, n) for p in range(n_pairs) for side in (0, 1) for n in sizes]


# ----------------------------------------------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditReport:
    """The result of :func:`audit`.

    Attributes
    ----------
    rows
        One row per (pair, event); see :meth:`table`.
    claim
        The claimed loss at ``d_in``, e.g. ``"ρ = 0.5, δ = 0.02275"``; ``measure`` says in which measure:
        ``"approx-dp"`` ((ε, δ)-DP) or ``"approx-zcdp"`` (approximate (ρ, δ)-zCDP).
    d_in, trials, alpha
        The audit's distance, releases per side and pair, and family-wise error level.
    seconds
        Wall-clock time of the releases; ``releases_per_second`` is the throughput.
    """

    rows: pl.DataFrame
    claim: str
    measure: str
    d_in: int
    trials: int
    alpha: float
    seconds: float
    _curve: tuple[np.ndarray, np.ndarray] = field(repr=False)

    @property
    def releases_per_second(self) -> float:
        return 2 * self.trials * self.rows.get_column("pair").n_unique() / max(self.seconds, 1e-9)

    def table(self) -> pl.DataFrame:
        """The report as a Polars frame.

        Columns: ``pair``, ``event``; ``hits_d`` / ``hits_d_prime`` (releases in the event, out of
        ``trials``) with ``p_d``, ``p_d_low``, ``p_d_high`` and the same for D′ (Clopper–Pearson at
        the family-wise level); ``epsilon_lower`` (ε that (ε, claimed δ)-DP needs), ``delta_lower`` (δ the
        claim needs at its ε or ρ), ``delta_claimed`` and ``violation`` (``delta_lower > delta_claimed``).
        """
        return self.rows

    @property
    def violations(self) -> pl.DataFrame:
        """The rows whose lower bound on δ exceeds the claim."""
        return self.rows.filter(pl.col("violation"))

    @property
    def passed(self) -> bool:
        """No violation found (which never proves the claim: ``docs/audit.md``)."""
        return self.violations.height == 0

    def verdict(self) -> str:
        """One line: the claim, the verdict, the level, and what the audit could detect: the largest lower bound
        on δ its events gave (a claim of any smaller δ, at the same ε or ρ, would have been flagged; nothing
        above it was tested, ``docs/audit.md``, "Power")."""
        found = self.violations.height
        outcome = "no violation found" if found == 0 else f"VIOLATION in {found} of {self.rows.height} events"
        bounds = self.rows.get_column("delta_lower").to_numpy()
        detectable = float(bounds.max()) if bounds.size else 0.0
        return (
            f"claim at d_in={self.d_in} ({self.measure}): {self.claim}; {outcome} "
            f"(family-wise level α = {self.alpha:g}, {self.trials} releases per side; the events bound "
            f"δ ≥ {detectable:.3g}: only a claim below it can be flagged)"
        )

    def plot(self, path: str | None = None, ax: Any = None) -> Any:
        """Each event's (P[M(D′) ∈ E], P[M(D) ∈ E]) with its intervals, inside the region the claim allows.

        Needs matplotlib (the ``plot`` extra). Saves to ``path`` when given; returns the axes.
        """
        import matplotlib

        if ax is None and path is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(5.5, 5))
        x = np.linspace(0.0, 1.0, 401)
        eps, delta = self._curve
        upper = np.minimum(
            np.exp(eps)[None, :] * x[:, None] + delta[None, :],
            1 - np.exp(-eps)[None, :] * (1 - x[:, None] - delta[None, :]),
        ).min(axis=1)
        upper = np.clip(upper, 0.0, 1.0)
        ax.fill_between(x, 0, 1, color="tab:red", alpha=0.08, lw=0)
        ax.fill(np.r_[x, upper[::-1]], np.r_[upper, x[::-1]], color="tab:green", alpha=0.15, lw=0,
                label="allowed by the claim")
        rows = self.rows
        for violation, color in ((False, "tab:blue"), (True, "tab:red")):
            part = rows.filter(pl.col("violation") == violation)
            if part.height == 0:
                continue
            ax.errorbar(
                part["p_d_prime"], part["p_d"],
                xerr=[part["p_d_prime"] - part["p_d_prime_low"], part["p_d_prime_high"] - part["p_d_prime"]],
                yerr=[part["p_d"] - part["p_d_low"], part["p_d_high"] - part["p_d"]],
                fmt="o", color=color, ms=4, label="violation" if violation else "event",
            )
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="P[M(D′) ∈ E]", ylabel="P[M(D) ∈ E]",
               title=f"claim: {self.claim}")
        ax.legend(loc="lower right")
        if path is not None:
            ax.figure.savefig(path, dpi=120, bbox_inches="tight")
        return ax


def audit(
    measurement: dp.Measurement | Callable[[], dp.Measurement],
    pairs: NeighbourPair | Sequence[NeighbourPair],
    *,
    events: Sequence[Event] | None = None,
    trials: int = 2000,
    d_in: int = 1,
    alpha: float = 1e-3,
    workers: int = 1,
    progress: bool = True,
) -> AuditReport:
    r"""Test a measurement's privacy claim on neighbouring datasets.

    Parameters
    ----------
    measurement
        Any OpenDP measurement on the pairs' frames (this package's, OpenDP's own, a chain), with output
        measure (approximate) max divergence or zero-concentrated divergence; or a zero-argument factory
        returning one, which ``workers > 1`` requires (it must pickle: a module-level function or a
        ``functools.partial`` of one), since OpenDP measurements do not pickle.
    pairs
        One :class:`opendp_wgm.audit.NeighbourPair` or several (e.g.
        :func:`opendp_wgm.audit.worst_case_pairs`), at distance ``d_in`` in the measurement's input metric.
    events
        Events tested on every pair; default: each pair's own ``events``.
    trials
        Releases per side (D and D′) and pair, ≥ 1.
    d_in
        The distance of the pairs: the claim tested is ``measurement.map(d_in)``.
    alpha
        Family-wise error level in (0, 1): a correct measurement is flagged with probability at most α.
    workers
        Processes (≥ 1); 1 runs in this process.
    progress
        Show progress on stderr: a bar on a terminal, else a line per tenth of the releases.

    Returns
    -------
    AuditReport
        ``.table()``, ``.violations``, ``.passed``, ``.verdict()``, ``.plot()``.

    Notes
    -----
    For each (pair, event) the counts give Clopper–Pearson intervals at level :math:`1 - \alpha/(2m)` each,
    m = number of (pair, event) rows, so all 2m intervals hold together with probability ≥ 1 − α. With
    :math:`L_1 \le \Pr[M(D)\in E]` and :math:`U_0 \ge \Pr[M(D')\in E]`, an (ε, δ) claim needs
    :math:`\delta \ge L_1 - e^\varepsilon U_0`; an approximate (ρ, δ)-zCDP claim needs
    :math:`\delta \ge \max_\varepsilon L_1 - e^\varepsilon U_0 - \delta_\rho(\varepsilon)`. Both directions
    and the complement of each event are tested. Details: ``docs/audit.md``.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> from opendp_wgm.audit import audit, unique_items_pair
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=1, scale=1.0, threshold=3.0)
    >>> report = audit(m, unique_items_pair(1, users=20), trials=200, progress=False)
    >>> report.passed
    True
    """
    trials = _check_int("trials", trials, minimum=1)
    d_in = _check_int("d_in", d_in, minimum=1)
    alpha = _check_probability("alpha", alpha)
    workers = _check_int("workers", workers, minimum=1)
    pairs = [pairs] if isinstance(pairs, NeighbourPair) else list(pairs)
    if not pairs or not all(isinstance(p, NeighbourPair) for p in pairs):
        msg = f"`pairs` must be a NeighbourPair or a non-empty sequence of them (found {pairs!r})"
        raise TypeError(msg)
    factory = None if isinstance(measurement, dp.Measurement) else measurement
    if factory is not None and not callable(factory):
        msg = f"`measurement` must be an OpenDP measurement or a zero-argument factory (found {measurement!r})"
        raise TypeError(msg)
    if factory is None and workers > 1:
        msg = (
            "`measurement` must be a picklable zero-argument factory when `workers` > 1 "
            f"(found a dp.Measurement; workers={workers})"
        )
        raise TypeError(msg)
    built = measurement if isinstance(measurement, dp.Measurement) else measurement()
    claim = _claim(built, d_in)
    _check_distance(built.input_metric, pairs, d_in)
    pair_events = [tuple(events) if events is not None else p.events for p in pairs]
    if not all(pair_events):
        raise ValueError("`events` must be given: a pair has no events of its own (found none)")

    counts = [np.zeros((2, len(e)), dtype=np.int64) for e in pair_events]
    tasks = _tasks(len(pairs), trials, workers)
    start = time.perf_counter()
    with _progress(2 * trials * len(pairs), desc="audit", unit="release", enabled=progress, leave=False) as bar:
        if workers == 1:
            for p, side, n in tasks:
                frame = (pairs[p].data, pairs[p].neighbour)[side]
                counts[p][side] += _count(built, frame, pair_events[p], n)
                bar.update(n)
        else:
            assert factory is not None  # checked above: `workers` > 1 needs a factory
            frames = [(p.data, p.neighbour) for p in pairs]
            with ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("spawn"),  # Polars is not fork-safe
                initializer=_init_worker,
                initargs=(factory, sorted(opendp.mod.GLOBAL_FEATURES), frames, pair_events),
            ) as pool:
                futures = {pool.submit(_worker_count, *task): task[2] for task in tasks}
                for future in as_completed(futures):
                    p, side, part = future.result()
                    counts[p][side] += part
                    bar.update(futures[future])
    seconds = time.perf_counter() - start

    m = sum(len(e) for e in pair_events)
    hits_d = np.concatenate([c[0] for c in counts])
    hits_d_prime = np.concatenate([c[1] for c in counts])
    lo1, hi1 = clopper_pearson(hits_d, trials, alpha / (2 * m))
    lo0, hi0 = clopper_pearson(hits_d_prime, trials, alpha / (2 * m))
    eps_lower, delta_lower = _bounds(claim, lo1, hi1, lo0, hi0)
    rows = pl.DataFrame(
        {
            "pair": [p.label for p, e in zip(pairs, pair_events, strict=True) for _ in e],
            "event": [event.label for e in pair_events for event in e],
            "hits_d": hits_d,
            "hits_d_prime": hits_d_prime,
            "p_d": hits_d / trials,
            "p_d_low": lo1,
            "p_d_high": hi1,
            "p_d_prime": hits_d_prime / trials,
            "p_d_prime_low": lo0,
            "p_d_prime_high": hi0,
            "epsilon_lower": eps_lower,
            "delta_lower": delta_lower,
            "delta_claimed": np.full(m, claim.delta),
        }
    ).with_columns(violation=pl.col("delta_lower") > pl.col("delta_claimed"))
    return AuditReport(
        rows=rows, claim=claim.text, measure=claim.kind, d_in=d_in, trials=trials, alpha=alpha,
        seconds=seconds, _curve=claim.delta_curve(),
    )
