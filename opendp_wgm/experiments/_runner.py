"""The run loop: every method × setting × trial, one CSV row per completed trial."""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from opendp_wgm.experiments._config import Config, Experiment, make_config
from opendp_wgm.experiments._methods import Variant, variants
from opendp_wgm.experiments._report import markdown_tables, plots, summarise
from opendp_wgm.experiments._truth import Truth

__all__ = ["ReproduceResult", "reproduce"]

#: Columns of ``trials.csv`` (empty where a column does not apply).
COLUMNS = (
    "experiment",
    "dataset",
    "method",
    "variant",
    "label",
    "x_name",
    "x",
    "trial",
    "epsilon",
    "delta",
    "max_contributions",
    "k",
    "k_bar",
    "private",
    "runtime_s",
    "cardinality",
    "missing_mass",
    "captured_mass",
    "linf_missing_mass",
    "linf_missing_mass_per_user",
    "top_k_missing_mass",
    "top_k_l1_loss",
    "missed_users",
    "coverage",
)
_SCHEMA = {
    "experiment": pl.String,
    "dataset": pl.String,
    "method": pl.String,
    "variant": pl.String,
    "label": pl.String,
    "x_name": pl.String,
    "x": pl.Int64,
    "trial": pl.Int64,
    "epsilon": pl.Float64,
    "delta": pl.Float64,
    "max_contributions": pl.Int64,
    "k": pl.Int64,
    "k_bar": pl.Int64,
    "private": pl.Boolean,
    **dict.fromkeys(COLUMNS[14:], pl.Float64),
}


@dataclass(frozen=True)
class ReproduceResult:
    """What a run wrote: per-trial rows, the summary (Markdown and CSV) and the plots."""

    rows: pl.DataFrame
    trials_csv: Path
    summary_md: Path
    summary_csv: Path
    plots: tuple[Path, ...]


def _variant_id(v: Variant) -> str:
    if v.k_bar_multiplier is None:
        return v.method
    return f"{v.method}_{'k' if v.k_bar_multiplier == 1 else f'{v.k_bar_multiplier}k'}"


def _assert_features(config: Config) -> None:
    """Fail before any data is read if the caller has not enabled what the chosen methods need."""
    from opendp_wgm._spaces import _assert_features as assert_plugin_features

    assert_plugin_features()
    if any(m.startswith("policy_") for m in config.methods):
        from opendp_wgm.measurements.baselines.policy import assert_idealized as _assert_idealized

        _assert_idealized()


def _shuffle_users(frame: pl.DataFrame, rng: np.random.Generator) -> pl.DataFrame:
    """Reorder the rows so users come in a random order, each user's rows kept in file order (as in the paper).

    The reference shuffles its user list once before all runs. Our policy mechanisms draw their own order at
    every call, so this changes none of their laws; it is kept so that order-dependent code sees the same
    kind of input as the reference's.
    """
    users = frame.select(pl.col("user").unique(maintain_order=True))
    order = users.with_columns(_order=pl.Series(rng.permutation(users.height), dtype=pl.Int64))
    joined = frame.join(order, on="user", how="left", maintain_order="left")
    return joined.sort("_order", maintain_order=True).drop("_order")


def _run_settings(config: Config) -> dict[str, Any]:
    """What decides a run's rows, as JSON values: stored beside ``trials.csv`` so that --resume can check it."""
    return {
        "experiment": config.experiment,
        "data_dir": str(config.data_dir.resolve()),
        "datasets": list(config.datasets),
        "methods": list(config.methods),
        "trials": config.trials,
        "epsilon": config.epsilon,
        "delta": config.delta,
        config.x_name + "_grid": list(config.grid),
        "max_contributions": config.max_contributions,
        "k_bar_multipliers": list(config.k_bar_multipliers),
        "alpha": config.alpha,
        "seed": config.seed,
    }


def _check_resumable(config_json: Path, settings: dict[str, Any]) -> None:
    """Refuse to resume a run whose stored settings differ from ``settings`` (its rows would be mixed in)."""
    if not config_json.exists():
        msg = (
            f"cannot resume: {str(config_json)!r} is missing, so the earlier run's settings are unknown "
            "(run again without --resume to start afresh)"
        )
        raise ValueError(msg)
    try:
        stored = json.loads(config_json.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        msg = f"cannot resume: {str(config_json)!r} is unreadable ({err}); run again without --resume"
        raise ValueError(msg) from None
    differ = [
        f"{key} (earlier run: {stored.get(key)!r}, now: {settings.get(key)!r})"
        for key in sorted(set(stored) | set(settings))
        if stored.get(key) != settings.get(key)
    ]
    if differ:
        msg = (
            "cannot resume a run with different settings: " + "; ".join(differ)
            + f" (see {str(config_json)!r}; use another --out, or run without --resume to start afresh)"
        )
        raise ValueError(msg)


def _drop_truncated_row(path: Path) -> None:
    """Cut ``path`` after its last newline: a row cut short by an interruption is redone, not counted as done."""
    with open(path, "rb+") as handle:
        data = handle.read()
        complete = data.rfind(b"\n") + 1
        if complete < len(data):
            handle.truncate(complete)


def _done_keys(path: Path) -> set[tuple[str, str, str, int]]:
    if not path.exists() or path.stat().st_size == 0:
        return set()
    _drop_truncated_row(path)
    try:
        rows = pl.read_csv(path, schema_overrides=_SCHEMA)
    except pl.exceptions.PolarsError as err:
        msg = f"cannot resume from {str(path)!r}: {str(err).splitlines()[0]} (run again without --resume)"
        raise ValueError(msg) from None
    return {
        (r["dataset"], r["variant"], "" if r["x"] is None else str(r["x"]), r["trial"])
        for r in rows.iter_rows(named=True)
    }


def _metrics(config: Config, truth: Truth, released: pl.DataFrame, x: int) -> dict[str, float]:
    if config.experiment == "set-union":
        return truth.set_union(released)
    if config.experiment == "top-k":
        return truth.top_k(released, x)
    return truth.hitting_set(released)


def reproduce(
    experiment: Experiment,
    *,
    data_dir: str | Path,
    out_dir: str | Path,
    datasets: Sequence[str] | str | None = None,
    methods: Sequence[str] | str | None = None,
    trials: int = 5,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    l0: Sequence[int] | str = (1, 50, 100, 150, 200, 300),
    k: Sequence[int] | str = (5, 10, 20, 50, 100, 200),
    max_contributions: int = 100,
    k_bar_multipliers: Sequence[int] | str = (1, 5, 10),
    alpha: float = 3.0,
    seed: int | None = None,
    resume: bool = False,
    force: bool = False,
    progress: bool = True,
    plot: bool = True,
) -> ReproduceResult:
    r"""Reproduce one of the paper's experiments: every method × setting × trial, with tables and plots.

    Parameters
    ----------
    experiment : {'set-union', 'top-k', 'hitting-set'}
        - ``set-union``: missing mass, ℓ∞ missing mass, cardinality and run time against Δ0 (grid ``l0``) for
          the WGM, Policy Gaussian (ℓ2 descent and the reference's "L1"), Policy Greedy (fixed; Δ0-free, so
          run once per trial), OpenDP's built-in key release, and DP-SIPS (``dp_sips``: the geometric schedule,
          R = 3, r = 0.3; ``dp_sips_r2``: two rounds with fractions (0.1, 0.9); ``dp_sips_default``: the
          constructor's default, the adaptive schedule).
        - ``top-k``: top-k missing mass, top-k ℓ1 loss and run time against ``k`` for WGM-then-top-k (Δ0 =
          ``max_contributions``, budget split in halves) and limited domain with k̄ = m·k for each multiplier
          m (Δ0 = ∞, full budget).
        - ``hitting-set``: missed users and run time against ``k`` for WGM-then-hitting-set, the non-private
          greedy, and user peeling on the true (non-private) domain.
    data_dir
        A folder laid out like the shared data folder: one directory per data set.
    out_dir
        Results go to ``<out_dir>/<experiment>/``: ``config.json`` (the run's settings), ``trials.csv`` (one
        row per completed trial, appended as it completes), ``summary.md`` and ``summary.csv`` (mean ± std over
        trials, std with ddof = 0 as the reference) and ``<experiment>_<metric>.png``.
    datasets
        Names from :data:`opendp_wgm.datasets.DATASETS`; default: the paper's data sets present in the shared
        folder (set union: steam_200k, amazon_magazine_subscriptions, imdb_50k, fimi_retail,
        movielens_100k; the others: steam_200k, amazon_magazine_subscriptions, movielens_100k).
    methods
        A subset of the experiment's methods (default: all), or an optional peer (``"pipeline_dp"``:
        PipelineDP's partition selection, set union only, extra ``[peers]``).
    trials
        Trials per method and setting (the paper: 5).
    epsilon, delta
        The (ε, δ)-DP budget of every private method (the paper: 1, 1e-5).
    l0, k
        The x grids (integers; a comma-separated string is accepted). Defaults: the paper's.
    max_contributions
        Δ0 of the two-stage top-k and hitting-set pipelines (the paper: 100).
    k_bar_multipliers
        Limited domain's k̄ / k (the paper: 1, 5, 10; its k̄ = ∞ variant is not run).
    alpha
        α of the policy mechanisms' caps (the paper: 3).
    seed
        Seeds the one shuffle of the user order per data set (as the reference's ``--seed``). Releases never
        take a seed: every mechanism draws fresh OS randomness.
    resume
        Keep the rows of an earlier, interrupted run in ``trials.csv`` and skip them; otherwise the file is
        started afresh. A run stores its settings in ``config.json`` beside ``trials.csv``; a resume whose
        settings differ is refused (``ValueError`` naming the keys), and a last row cut short by the
        interruption is dropped and redone.
    force
        Start afresh even if ``trials.csv`` exists (its rows are replaced). Without ``resume`` or ``force`` an
        existing ``trials.csv`` is refused (``FileExistsError``, before any work): rows are never replaced
        silently. ``resume`` and ``force`` together are refused.
    progress
        Show progress on stderr: a bar on a terminal, else a line per tenth of the runs.
    plot
        Write the PNG plots (needs matplotlib: ``pip install 'opendp-wgm[plot]'``; checked before any work).

    Returns
    -------
    ReproduceResult
        The rows (a ``pl.DataFrame``) and the paths written.

    Raises
    ------
    ValueError, TypeError, FileNotFoundError
        On bad input — unknown experiment, method or data set; missing data folder; empty or non-numeric
        grids — before any data is read.
    FileExistsError
        If ``trials.csv`` exists and neither ``resume`` nor ``force`` is given, before any work.
    opendp.mod.OpenDPException
        If the needed OpenDP features are not enabled: ``"contrib"`` and ``"honest-but-curious"``, and
        ``"idealized-numerics"`` for the policy baselines (``docs/baselines.md``).

    Notes
    -----
    Data are loaded with ``unique=False`` (Policy Greedy orders items by their multiplicity in the user's
    rows, as the reference does for its text data sets); every other method and every metric deduplicates
    per user. Metrics are those of :mod:`opendp_wgm.metrics`, computed against the raw data; the run time is
    that of the measurement call alone (calibration excluded).
    """
    config = make_config(
        experiment,
        data_dir=data_dir,
        out_dir=out_dir,
        datasets=datasets,
        methods=methods,
        trials=trials,
        epsilon=epsilon,
        delta=delta,
        l0=l0,
        k=k,
        max_contributions=max_contributions,
        k_bar_multipliers=k_bar_multipliers,
        alpha=alpha,
        seed=seed,
    )
    _assert_features(config)
    if plot:
        _check_matplotlib()
    all_variants = variants(config)
    run_dir = config.run_dir
    trials_csv, config_json = run_dir / "trials.csv", run_dir / "config.json"
    _check_fresh(trials_csv, resume=resume, force=force)
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = _run_settings(config)
    if resume and trials_csv.exists():
        _check_resumable(config_json, settings)
        done = _done_keys(trials_csv)
    else:
        done = set()
        config_json.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        with open(trials_csv, "w", newline="", encoding="utf-8") as handle:
            csv.DictWriter(handle, fieldnames=COLUMNS).writeheader()

    tasks = []
    for dataset in config.datasets:
        for v in all_variants:
            xs = [None] if v.x_independent else list(config.grid)
            for x in xs:
                for trial in range(config.trials):
                    key = (dataset, _variant_id(v), "" if x is None else str(x), trial)
                    if key not in done:
                        tasks.append((dataset, v, x, trial))

    from opendp_wgm._progress import _progress

    rng = np.random.default_rng(config.seed)
    bar = _progress(len(tasks), desc=config.experiment, unit="run", enabled=progress)  # lines in a log
    try:
        with open(trials_csv, "a", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            for dataset in config.datasets:
                todo = [t for t in tasks if t[0] == dataset]
                if not todo:
                    continue
                bar.set_postfix_str(f"{dataset}: loading")
                frame = _shuffle_users(_load(dataset, config), rng)
                truth = Truth.of(frame)
                # settings outer, trials inner: each measurement is built (calibrated) once per setting
                for v in all_variants:
                    for x in ([None] if v.x_independent else list(config.grid)):
                        runs = [t for t in todo if t[1] is v and t[2] == x]
                        if not runs:
                            continue
                        run = v.build(config.grid[0] if x is None else x)
                        for _, _, _, trial in runs:
                            shown = "*" if x is None else x
                            bar.set_postfix_str(f"{dataset} {_variant_id(v)} {config.x_name}={shown}")
                            start = time.perf_counter()
                            released = run(frame)
                            seconds = time.perf_counter() - start
                            values = _metrics(config, truth, released, x if x is not None else 0)
                            chosen = getattr(released, "max_contributions", None)  # Δ0 auto: the released choice
                            writer.writerow(_row(config, dataset, v, x, trial, seconds, values, chosen))
                            handle.flush()
                            bar.update(1)
                del frame, truth
    finally:
        bar.close()
    return write_report(config, all_variants, plot=plot)


def _check_fresh(trials_csv: Path, *, resume: bool, force: bool) -> None:
    """Refuse to replace the rows of an earlier run unless told to (``force``), or told to continue it
    (``resume``), as ``--output`` refuses to overwrite a file without ``--force``."""
    if resume and force:
        raise ValueError("--resume and --force contradict: --resume keeps the earlier rows, --force replaces them")
    if trials_csv.exists() and not (resume or force):
        msg = (
            f"{str(trials_csv)!r} already holds the trials of an earlier run: add --resume to continue it, "
            "--force to start afresh (its rows are replaced), or choose another --out"
        )
        raise FileExistsError(msg)


def _check_matplotlib() -> None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        msg = "plots need matplotlib: pip install 'opendp-wgm[plot]' (or pass plot=False / --no-plots)"
        raise ImportError(msg)


def _load(dataset: str, config: Config) -> pl.DataFrame:
    from opendp_wgm.datasets import load

    return load(dataset, config.data_dir, unique=False).select("user", "item")


def _row(
    config: Config,
    dataset: str,
    v: Variant,
    x: int | None,
    trial: int,
    seconds: float,
    values: Mapping[str, float | None],
    chosen: int | None = None,
) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS, "")
    row.update(
        experiment=config.experiment,
        dataset=dataset,
        method=v.method,
        variant=_variant_id(v),
        label=v.label,
        x_name=config.x_name,
        x="" if x is None else x,
        trial=trial,
        epsilon=config.epsilon,
        delta=config.delta,
        private=v.private,
        runtime_s=f"{seconds:.6f}",
    )
    if config.experiment == "set-union":
        row["max_contributions"] = chosen if chosen is not None else ("" if x is None else x)
    else:
        row["k"] = x
        row["max_contributions"] = config.max_contributions if v.method.startswith("wgm") else ""
        if v.k_bar_multiplier is not None and x is not None:
            row["k_bar"] = v.k_bar_multiplier * x
    for name, value in values.items():
        row[name] = "" if value is None or math.isnan(value) else repr(float(value))
    return row


def write_report(config: Config, all_variants: list[Variant] | None = None, *, plot: bool = True) -> ReproduceResult:
    """(Re)write ``summary.md``, ``summary.csv`` and the plots from ``trials.csv``."""
    run_dir = config.run_dir
    trials_csv = run_dir / "trials.csv"
    rows = pl.read_csv(trials_csv, schema_overrides=_SCHEMA) if trials_csv.exists() else pl.DataFrame(schema=_SCHEMA)
    order = [_variant_id(v) for v in (all_variants if all_variants is not None else variants(config))]
    summary_md = run_dir / "summary.md"
    summary_csv = run_dir / "summary.csv"
    if rows.height == 0:
        summary_md.write_text(f"# {config.experiment}\n\nNo trial completed.\n", encoding="utf-8")
        pl.DataFrame().write_csv(summary_csv)
        return ReproduceResult(rows, trials_csv, summary_md, summary_csv, ())
    summary = summarise(rows, config.experiment)
    summary.write_csv(summary_csv)
    order += sorted(set(summary["variant"].to_list()) - set(order))
    header = (
        f"# {config.experiment}: mean ± std over trials (std with ddof = 0)\n\n"
        f"ε = {config.epsilon:g}, δ = {config.delta:g}; trials per cell: up to {config.trials}"
        + (f"; Δ0 of the pipelines = {config.max_contributions}" if config.experiment != "set-union" else "")
        + ".\n\n"
    )
    summary_md.write_text(header + markdown_tables(summary, config.experiment, config.x_name, order), encoding="utf-8")
    pngs = plots(summary, config.experiment, config.x_name, order, run_dir) if plot else []
    return ReproduceResult(rows, trials_csv, summary_md, summary_csv, tuple(pngs))
