"""What every command does once its measurement is planned (:func:`_release_and_report`): timed stages with a
progress bar, the release, and the summary on stderr (budget spent, measure, calibration, input, run time)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

import polars as pl

from opendp_wgm._interrupt import _exit_on_interrupt
from opendp_wgm._progress import _progress
from opendp_wgm.cli._args import _SHOW_ROWS, _Budget, _requested
from opendp_wgm.cli._errors import PROG, CLIError, _last_line, _library_errors
from opendp_wgm.cli._io import _check_source, _input_files, _Output, _prepare_output, _read_input
from opendp_wgm.cli._startup import _compiled_steps

if TYPE_CHECKING:
    import opendp.prelude as dp

    from opendp_wgm.privacy.calibrate import DPSIPSCalibration, WGMCalibration


@dataclass
class _Stages:
    """Named stages, timed, with a progress bar on stderr (none when stderr is not a terminal)."""

    names: Sequence[str]
    stream: TextIO
    times: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._bar = _progress(  # a bar only on a terminal; the summary always
            len(self.names),
            desc="",
            unit="stage",
            stream=self.stream,
            lines=False,
            leave=False,
            bar_format="{desc:<12} {bar:20} {n_fmt}/{total_fmt} [{elapsed}]",
        )
        self._start = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self._bar.set_description_str(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] = time.perf_counter() - start
            self._bar.update(1)

    @property
    def total(self) -> float:
        return time.perf_counter() - self._start

    def close(self) -> None:
        self._bar.close()


def _print_head(released: pl.DataFrame, stream: TextIO) -> None:
    """The released items of largest noisy weight (ordering a release is post-processing); the first items when
    the release has no weight (partition selection)."""
    shown = min(_SHOW_ROWS, released.height)
    if "noisy_weight" not in released.columns:
        print(f"# {released.height} items released; the first {shown}:", file=stream)
        _print_table(released, stream)
        return
    print(f"# {released.height} items released; {shown} of largest noisy weight:", file=stream)
    _print_table(released.sort("noisy_weight", descending=True), stream)


def _print_ranked(released: pl.DataFrame, stream: TextIO) -> None:
    """The first released items by rank (a ranked release is already in rank order)."""
    shown = min(_SHOW_ROWS, released.height)
    print(f"# {released.height} items released; the first {shown} by rank:", file=stream)
    _print_table(released, stream)


def _print_table(released: pl.DataFrame, stream: TextIO) -> None:
    with pl.Config(tbl_rows=_SHOW_ROWS, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=False):
        print(released.head(_SHOW_ROWS), file=stream)


# --------------------------------------------------------------------------------------------------------
# release and report: what every subcommand does once its measurement is built
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Plan:
    """A subcommand's calibrated measurement, named for the summary, with its calibration's summary lines."""

    mechanism: str
    measurement: dp.Measurement
    calibration: list[str]
    #: The thresholded (stage of the) mechanism whose release curve ``--dry-run`` prints, and what it releases.
    curve: WGMCalibration | DPSIPSCalibration | None = None
    released: str = "released"
    #: summary lines read from the release itself (e.g. the branch an adaptive DP-SIPS took), or none
    outcome: Callable[[pl.DataFrame], list[str]] | None = None
    #: ``--max-contributions auto``: the thresholded stage of each candidate Δ0, whose curves ``--dry-run`` prints
    candidates: Callable[[], dict[int, WGMCalibration | DPSIPSCalibration]] | None = None


#: Summary lines evaluating a demo release against its raw data: ``(data, released) -> lines``.
_Evaluate = Callable[[pl.DataFrame, pl.DataFrame], list[str]]


def _release_and_report(
    args: argparse.Namespace,
    *,
    stdout: TextIO,
    stderr: TextIO,
    budget: _Budget,
    plan: Callable[[], _Plan],
    evaluate: _Evaluate,
    show: Callable[[pl.DataFrame, TextIO], None],
) -> int:
    """Check the output, build the measurement (``plan``, before the data is read, so a bad parameter fails
    first), read and check the input, release, write or ``show`` the release, evaluate the demo, and print the
    summary on stderr.

    Everything a user can get wrong is checked before the measurement is invoked (the release spends the
    budget). Ctrl-C or SIGTERM from the creation of the temporary output to the write ends the process with
    status 130 or 143 and removes the temporary output (:func:`_exit_on_interrupt`); any failure leaves no
    partial output.
    """
    import opendp.prelude as dp

    _check_source(args)
    if args.dry_run:
        return _dry_run(args, stdout=stdout, budget=budget, plan=plan)
    if args.plot is not None:
        raise CLIError("--plot applies only with --dry-run")
    output: _Output | None = None

    def discard() -> None:  # the handler's clean-up: the temporary output, once it exists
        if output is not None:
            output.discard()

    demo = args.path is None and args.uri is None
    names = ["calibrating", "reading", "releasing"]
    names += ["writing"] if args.output is not None else []  # an output (a file, or - for stdout) to write
    names += ["evaluating"] if demo else []
    stages = _Stages(names, stderr)
    try:
        with _exit_on_interrupt(discard, f"{PROG}: interrupted; nothing was written"):
            output = _prepare_output(args.output, _input_files(args), force=args.force, format_=args.format)
            with stages.stage("calibrating"), _library_errors():
                planned = plan()
            with stages.stage("reading"):
                data = _read_input(args)
                if output is not None:
                    output.check_schema(data.frame.collect_schema())
            with stages.stage("releasing"), _compiled_steps(data.rows):
                try:
                    released = planned.measurement(data.frame)
                except dp.OpenDPException as err:  # the user callback's error, wrapped by OpenDP: last line
                    raise CLIError(f"cannot release from {data.label}: {_last_line(err)}") from err
                spent = planned.measurement.map(1)
            if output is not None:
                with stages.stage("writing"):
                    output.commit(released, stdout)
        evaluation: list[str] = []
        if demo:  # evaluation against the raw data: for the demo only, never a release
            with stages.stage("evaluating"):
                assert isinstance(data.frame, pl.DataFrame)
                evaluation = evaluate(data.frame, released)
    finally:
        stages.close()
        discard()

    if args.output is None:
        show(released, stdout)

    from opendp_wgm.privacy.budget import describe_measure

    measure, first = describe_measure(planned.measurement.output_measure)
    lines = [
        f"{PROG} {args.command}: {planned.mechanism} released {released.height:,} items",
        f"  budget spent  {first} = {spent[0]:.6g}, δ = {spent[1]:.6g} per user  [{measure}; "
        f"requested {_requested(budget)}, δ = {budget.delta:g}]",
        *_epsilon_equivalent(planned.measurement, spent, budget),
        *planned.calibration,
        *(planned.outcome(released) if planned.outcome is not None else []),
        f"  input         {data.label}: {data.rows:,} rows (not private)",
    ]
    if data.null_rows:
        lines.append(f"                {data.null_rows:,} rows with {data.missing} user or item were dropped")
    lines += evaluation
    if args.output is not None:
        lines.append(f"  output        {'stdout' if output is not None and output.path is None else args.output}")
    timing = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in stages.times.items())
    lines.append(f"  run time      {stages.total:.2f} s ({timing})")
    print("\n".join(lines), file=stderr)
    return 0


def _epsilon_equivalent(measurement: dp.Measurement, spent: tuple[float, float], budget: _Budget) -> list[str]:
    """Under ``--rho``: the (ε, δ)-DP the release also satisfies, with OpenDP's conversion of approximate zCDP
    (``make_zCDP_to_approxDP``, then ``make_fix_delta``) at δ = the release's own δ plus ``--delta`` for the
    conversion (under ``--rho`` all of ``--delta`` pays the threshold, so the conversion needs its own)."""
    import opendp.prelude as dp

    if budget.rho is None:
        return []
    total = spent[1] + budget.delta
    try:
        epsilon, delta = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(measurement), total).map(1)
    except dp.OpenDPException as err:  # the release is done: report, never fail, on a conversion OpenDP refuses
        return [f"  ε equivalent  not available ({_last_line(err)})"]
    return [
        f"  ε equivalent  ε = {epsilon:.6g} at δ = {delta:.6g} (the release's δ + --delta {budget.delta:g} for "
        "OpenDP's zCDP → (ε, δ) conversion)"
    ]


def _dry_run(
    args: argparse.Namespace, *, stdout: TextIO, budget: _Budget, plan: Callable[[], _Plan]
) -> int:
    """Calibrate and print σ, T, the budget and the release curve (and ``--plot`` it); read nothing, release
    nothing."""
    from opendp_wgm.cli._curve import _candidate_lines, _curve_lines, _plot_curve
    from opendp_wgm.privacy.budget import describe_measure

    for option in ("output", "format"):
        if getattr(args, option) is not None:
            raise CLIError(f"--{option} does not apply with --dry-run (nothing is released)")
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        raise CLIError(f"--plot writes a PNG file: its name must end in .png (found {str(args.plot)!r})")
    if args.plot is not None and args.plot.exists() and not args.force:
        raise CLIError(f"--plot {str(args.plot)!r} already exists (add --force to overwrite it)")
    with _library_errors():
        planned = plan()
    if planned.curve is None and planned.candidates is None:
        raise CLIError(f"--dry-run prints the release curve of a thresholded mechanism: {planned.mechanism} has none")
    if planned.candidates is not None and args.plot is not None:
        raise CLIError("--plot draws one release curve: with --max-contributions auto it depends on the chosen Δ0")
    spent = planned.measurement.map(1)
    measure, first = describe_measure(planned.measurement.output_measure)
    lines = [
        f"{PROG} {args.command} --dry-run: {planned.mechanism} calibrated; no data read, nothing released",
        f"  budget        {first} = {spent[0]:.6g}, δ = {spent[1]:.6g} per user  [{measure}; "
        f"requested {_requested(budget)}, δ = {budget.delta:g}]",
        *_epsilon_equivalent(planned.measurement, spent, budget),
        *planned.calibration,
        *(_curve_lines(planned.curve, planned.released) if planned.curve is not None else []),
        *(_candidate_lines(planned.candidates(), planned.released) if planned.candidates is not None else []),
    ]
    if args.plot is not None and planned.curve is not None:
        _plot_curve(planned.curve, args.plot, planned.released)
        lines.append(f"  plot          {args.plot}")
    print("\n".join(lines), file=stdout)
    return 0


def _loss(first: str, loss: tuple[float, float]) -> str:
    return f"{first} = {loss[0]:.6g}, δ = {loss[1]:.6g}"


def _wgm_line(scale: float, threshold: float, max_contributions: int, noise: str) -> str:
    return f"σ = {scale:.6g}, T = {threshold:.6g}, Δ0 = {max_contributions}, noise = {noise}"


def _sips_lines(calibration: DPSIPSCalibration, *, noise: str, label: str, share: float = 1.0) -> list[str]:
    """DP-SIPS's rounds, one line each: its share of the whole budget (``share`` of it goes to DP-SIPS), σ_i, T_i;
    for the adaptive schedule also the statistic and both branches' rounds."""

    def rounds(fractions: Sequence[float], scales: Sequence[float], thresholds: Sequence[float], first: int,
               branch: str = "") -> list[str]:
        return [
            f"  {label if i == 1 else '':<14}{branch}round {i} ({share * fraction:.3g} of the budget): "
            + _wgm_line(scale, threshold, calibration.max_contributions, noise)
            for i, (fraction, scale, threshold) in enumerate(zip(fractions, scales, thresholds, strict=True),
                                                             start=first)
        ]

    c = calibration
    if c.statistic_scale is None:
        return rounds(c.fractions, c.scales, c.thresholds, 1)
    return [
        *rounds(c.fractions[:1], c.scales[:1], c.thresholds[:1], 1),
        f"  {'':<14}branch count: σ = {c.statistic_scale:.6g} (from round 1's share; not released)",
        *rounds(c.fractions[1:], c.scales[1:], c.thresholds[1:], 2, "sparse branch: "),
        *rounds(c.branch_fractions, c.branch_scales, c.branch_thresholds, 2, "dense branch:  "),
    ]


def _sips_name(calibration: DPSIPSCalibration) -> str:
    """DP-SIPS's name in the summary, with its number of rounds (2 or 3 for the adaptive schedule)."""
    if calibration.statistic_scale is not None:
        return "DP-SIPS (adaptive: 2 or 3 rounds)"
    return f"DP-SIPS ({calibration.rounds} rounds)"


def _sips_outcome(released: pl.DataFrame) -> list[str]:
    """The branch an adaptive DP-SIPS took, read from the release's round column (a round 3: dense)."""
    from opendp_wgm.measurements.dp_sips import ROUND

    last = released.get_column(ROUND).max() if released.height else None
    ran = "dense (rounds 2 and 3)" if isinstance(last, int) and last >= 3 else "sparse (one more round)"
    return [f"  branch        {ran}; items per round: " + ", ".join(
        f"{r}: {n:,}" for r, n in released.group_by(ROUND).len().sort(ROUND).iter_rows()
    )]


def _two_stage_lines(
    stage_1: WGMCalibration | DPSIPSCalibration,
    *,
    split: float,
    noise: str,
    peeling: str,
    first: str,
    losses: Sequence[tuple[float, float]],
) -> list[str]:
    """The calibration of a two-stage measurement: its stage 1 (the WGM, or DP-SIPS's rounds), its peeling, and
    each stage's loss at one user."""
    from opendp_wgm.privacy.calibrate import DPSIPSCalibration

    if isinstance(stage_1, DPSIPSCalibration):
        name = _sips_name(stage_1)
        head = [f"  calibration   {name}, {split:g} of the budget:"]
        head += _sips_lines(stage_1, noise=noise, label="", share=split)
    else:
        name = "WGM"
        head = [
            f"  calibration   WGM ({split:g} of the budget): "
            + _wgm_line(stage_1.scale, stage_1.threshold, stage_1.max_contributions, noise)
        ]
    return [
        *head,
        f"                peeling: {peeling}",
        f"  stage loss    {name} {_loss(first, losses[0])}; peeling {_loss(first, losses[1])}",
    ]


def _not_private(label: str, text: str) -> str:
    return f"  {label:<13} {text} (not private)"

