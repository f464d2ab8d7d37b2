r"""The ``opendp-wgm`` command: differentially private domain discovery from the shell.

::

    opendp-wgm discover data.parquet --user u --item x --epsilon 1 --delta 1e-5
    opendp-wgm discover                      # built-in synthetic Zipf demo

The command owns its process, so it enables OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features at
start (the library itself only asserts them; STYLE §5). Each subcommand is one ``_add_<name>`` function that
registers its parser and a ``_run_<name>(args) -> int``; the argument groups shared by the paper's
mechanisms (data, budget, output) are separate helpers, so ``top-k``, ``hitting-set`` and ``reproduce`` plug in
as siblings of ``discover``.

Errors a user can cause (a missing file or column, empty data, an invalid parameter) print one line
``opendp-wgm: error: ...`` on stderr and exit with status 2; they never print a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TextIO

import polars as pl

__all__ = ["main"]

PROG = "opendp-wgm"
_FEATURES = ("contrib", "honest-but-curious")

_DEFAULT_EPSILON = 1.0
_DEFAULT_DEMO_USERS = 5_000
_DEMO_ITEMS_PER_USER = 20
_DEMO_EXPONENT = 1.3
_SHOW_ROWS = 10

#: Input suffixes (lower case) and how they are read. ``scan_csv`` also decompresses ``.gz``.
_CSV_SUFFIXES = {".csv": ",", ".tsv": "\t", ".csv.gz": ",", ".tsv.gz": "\t"}
_PARQUET_SUFFIXES = (".parquet", ".pq")
_OUTPUT_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")


# --------------------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------------------
class CLIError(Exception):
    """An error the user can fix: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors raise :class:`CLIError` instead of printing usage and exiting.

    ``--help`` still prints and exits (``SystemExit(0)``), which :func:`main` turns into a return value.
    """

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see `{self.prog} --help`)")


def _one_line(err: BaseException) -> str:
    """The first line of an exception's message (Polars appends its query plan on later lines)."""
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0].strip()


#: Library parameter names, as they appear in its messages, and the options that set them.
_OPTION_NAMES = {
    "`epsilon`": "--epsilon",
    "`rho`": "--rho",
    "`delta`": "--delta",
    "`max_contributions`": "--max-contributions",
    "`noise_delta_fraction`": "--noise-delta-fraction",
    "`user`": "--user",
    "`item`": "--item",
}


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn the library's parameter errors (``ValueError``/``TypeError``) into :class:`CLIError`.

    The library names its parameters (```max_contributions` must be ...``); the message names the option.
    """
    try:
        yield
    except (ValueError, TypeError) as err:
        message = _one_line(err)
        for name, option in _OPTION_NAMES.items():
            message = message.replace(name, option)
        raise CLIError(message) from err


# --------------------------------------------------------------------------------------------------------
# progress and timing
# --------------------------------------------------------------------------------------------------------
@dataclass
class _Stages:
    """Named stages, timed, with a tqdm bar on stderr (hidden when stderr is not a terminal)."""

    names: Sequence[str]
    stream: TextIO
    times: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from tqdm import tqdm

        isatty = getattr(self.stream, "isatty", None)
        self._bar = tqdm(
            total=len(self.names),
            file=self.stream,
            disable=not (callable(isatty) and isatty()),  # a bar only on a terminal; the summary always
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


# --------------------------------------------------------------------------------------------------------
# argument groups shared by the subcommands
# --------------------------------------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 (found {value})")
    return value


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("data")
    group.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        type=Path,
        help="input table, one row per (user, item): CSV (.csv, .tsv, .csv.gz, .tsv.gz) or Parquet "
        "(.parquet, .pq), read lazily. Without PATH: a synthetic Zipf demo.",
    )
    group.add_argument("--user", default="user", metavar="COL", help="user-id column (default: %(default)s)")
    group.add_argument("--item", default="item", metavar="COL", help="item column (default: %(default)s)")
    group.add_argument(
        "--separator",
        metavar="SEP",
        help="CSV field separator (default: ',' for .csv, tab for .tsv; '\\t' is accepted)",
    )
    demo = parser.add_argument_group("demo (no PATH only)")
    demo.add_argument(
        "--demo-users",
        type=_positive_int,
        metavar="N",
        help=f"users in the synthetic demo, {_DEMO_ITEMS_PER_USER} Zipf(s={_DEMO_EXPONENT}) draws each "
        f"(default: {_DEFAULT_DEMO_USERS})",
    )
    demo.add_argument(
        "--seed",
        type=int,
        help="seed of the demo *data* (default: fresh). The release's noise is never seeded.",
    )


def _add_budget_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("privacy budget (per user, add/remove one user)")
    measure = group.add_mutually_exclusive_group()
    measure.add_argument(
        "--epsilon",
        type=float,
        metavar="E",
        help=f"(ε, δ)-DP with this ε > 0 (default: ε = {_DEFAULT_EPSILON:g} when --rho is not given)",
    )
    measure.add_argument("--rho", type=float, metavar="R", help="approximate (ρ, δ)-zCDP with this ρ > 0")
    group.add_argument("--delta", type=float, default=1e-5, metavar="D", help="δ in (0, 1) (default: %(default)g)")
    group.add_argument(
        "--max-contributions",
        type=int,
        default=100,
        metavar="N",
        help="Δ0 >= 1: each user keeps a uniform random subset of at most N distinct items (default: %(default)s)",
    )
    group.add_argument(
        "--noise-delta-fraction",
        type=float,
        metavar="F",
        help="with --epsilon: share of δ spent on the Gaussian noise, the rest on the threshold (default: 0.5)",
    )
    group.add_argument(
        "--noise",
        choices=("lattice", "opendp"),
        default="lattice",
        help="noise sampler: this package's fast exact discrete Gaussian, or OpenDP's exact sampler (slow) "
        "(default: %(default)s)",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument(
        "--output",
        "-o",
        type=Path,
        metavar="FILE",
        help="write the release (item, noisy_weight) to FILE: .csv, .tsv, .parquet or .pq. "
        f"Without it the first {_SHOW_ROWS} released rows are printed to stdout.",
    )


@dataclass(frozen=True)
class _Budget:
    """The normalised budget arguments (exactly one of ``epsilon`` and ``rho``)."""

    delta: float
    max_contributions: int
    epsilon: float | None
    rho: float | None
    noise_delta_fraction: float | None

    def kwargs(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {"delta": self.delta, "max_contributions": self.max_contributions}
        if self.epsilon is not None:
            out["epsilon"] = self.epsilon
        else:
            out["rho"] = self.rho  # type: ignore[assignment]
        if self.noise_delta_fraction is not None:
            out["noise_delta_fraction"] = self.noise_delta_fraction
        return out


def _budget(args: argparse.Namespace) -> _Budget:
    epsilon, rho = args.epsilon, args.rho
    if epsilon is None and rho is None:
        epsilon = _DEFAULT_EPSILON
    if rho is not None and args.noise_delta_fraction is not None:
        raise CLIError("--noise-delta-fraction applies only with --epsilon (under --rho all of δ pays the threshold)")
    return _Budget(args.delta, args.max_contributions, epsilon, rho, args.noise_delta_fraction)


# --------------------------------------------------------------------------------------------------------
# input and output
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Input:
    """The data to release from: a lazy plan (a file) or an in-memory frame (the demo)."""

    frame: pl.LazyFrame | pl.DataFrame
    label: str
    rows: int
    null_rows: int
    demo: bool


def _suffix(path: Path) -> str:
    """``.csv``, ``.csv.gz``, ``.parquet``, ... in lower case."""
    suffixes = [s.lower() for s in path.suffixes]
    if len(suffixes) >= 2 and suffixes[-1] == ".gz":
        return "".join(suffixes[-2:])
    return suffixes[-1] if suffixes else ""


#: Rows from which CSV column types are inferred first; on a parse error the file is re-scanned with all rows.
_CSV_INFER_ROWS = 10_000


def _scan(path: Path, separator: str | None, *, infer_rows: int | None = _CSV_INFER_ROWS) -> pl.LazyFrame:
    """A lazy scan of ``path`` chosen by its suffix (``infer_rows`` applies to CSV)."""
    suffix = _suffix(path)
    if suffix in _CSV_SUFFIXES:
        sep = _CSV_SUFFIXES[suffix] if separator is None else separator
        return pl.scan_csv(path, separator=sep, infer_schema_length=infer_rows)
    if suffix not in _PARQUET_SUFFIXES:
        known = ", ".join([*_CSV_SUFFIXES, *_PARQUET_SUFFIXES])
        raise CLIError(f"cannot read {str(path)!r}: unsupported file type {suffix or '(no suffix)'!r} (use {known})")
    if separator is not None:
        raise CLIError(f"--separator applies only to CSV input, not to {path}")
    return pl.scan_parquet(path)


def _check_separator(separator: str | None) -> str | None:
    if separator is None:
        return None
    separator = {"\\t": "\t", "tab": "\t"}.get(separator, separator)
    if len(separator.encode()) != 1:
        raise CLIError(f"--separator must be a single one-byte character (found {separator!r})")
    return separator


def _open_checked(path: Path, separator: str | None, user: str, item: str) -> tuple[pl.LazyFrame, int, int]:
    """Scan ``path``, check its columns and count its rows (and rows with a null user or item).

    The count parses both columns in full, so a CSV whose types were mis-inferred from its first rows fails
    here, before the release; it is then re-scanned once with types inferred from every row.
    """
    infer_options: tuple[int | None, ...] = (_CSV_INFER_ROWS, None) if _suffix(path) in _CSV_SUFFIXES else (None,)
    for attempt, infer_rows in enumerate(infer_options, start=1):
        lf = _scan(path, separator, infer_rows=infer_rows)
        try:
            columns = lf.collect_schema().names()
        except pl.exceptions.NoDataError:
            raise CLIError(f"{path} has no rows") from None
        except (pl.exceptions.PolarsError, OSError) as err:
            raise CLIError(f"cannot read {str(path)!r}: {_one_line(err)}") from err
        missing = [c for c in (user, item) if c not in columns]
        if missing:
            names = ("column " if len(missing) == 1 else "columns ") + " and ".join(repr(c) for c in missing)
            raise CLIError(f"{names} not found in {path}; its columns are {columns} (choose with --user/--item)")
        if user == item:
            raise CLIError(f"--user and --item must name different columns (both are {user!r})")
        try:
            counts = lf.select(
                rows=pl.len(), null_rows=(pl.col(user).is_null() | pl.col(item).is_null()).sum()
            ).collect()
        except (pl.exceptions.PolarsError, OSError) as err:
            if attempt < len(infer_options):
                continue
            raise CLIError(f"cannot read {str(path)!r}: {_one_line(err)}") from err
        return lf.select(user, item), int(counts["rows"][0]), int(counts["null_rows"][0])
    raise AssertionError("unreachable")  # pragma: no cover


def _read_input(args: argparse.Namespace) -> _Input:
    """Open PATH lazily (or draw the demo), check its columns and count its rows (not a release)."""
    user, item = args.user, args.item
    if args.path is None:
        from opendp_wgm.datasets import synthetic_zipf

        n_users = _DEFAULT_DEMO_USERS if args.demo_users is None else args.demo_users
        with _user_errors():
            frame = synthetic_zipf(
                n_users, _DEMO_ITEMS_PER_USER, exponent=_DEMO_EXPONENT, seed=args.seed, user=user, item=item
            )
        label = f"synthetic Zipf demo ({n_users:,} users x {_DEMO_ITEMS_PER_USER} draws, s = {_DEMO_EXPONENT})"
        return _Input(frame, label, frame.height, 0, demo=True)

    path: Path = args.path
    for option in ("demo_users", "seed"):
        if getattr(args, option) is not None:
            raise CLIError(f"--{option.replace('_', '-')} applies only to the demo (without PATH)")
    if not path.exists():
        raise CLIError(f"input file not found: {str(path)!r}")
    if path.is_dir():
        raise CLIError(f"input {str(path)!r} is a directory, expected a CSV or Parquet file")
    lf, rows, null_rows = _open_checked(path, _check_separator(args.separator), user, item)
    if rows == 0:
        raise CLIError(f"{path} has no rows")
    return _Input(lf, str(path), rows, null_rows, demo=False)


def _check_output(path: Path | None) -> None:
    """Fail before any work if the release could not be written."""
    if path is None:
        return
    if _suffix(path) not in _OUTPUT_SUFFIXES:
        raise CLIError(
            f"cannot write {str(path)!r}: unsupported output type {path.suffix or '(no suffix)'!r} "
            f"(use {', '.join(_OUTPUT_SUFFIXES)})"
        )
    parent = path.expanduser().resolve().parent
    if not parent.is_dir():
        raise CLIError(f"cannot write {str(path)!r}: directory {str(parent)!r} does not exist")


def _write_release(released: pl.DataFrame, path: Path) -> None:
    try:
        suffix = _suffix(path)
        if suffix in _PARQUET_SUFFIXES:
            released.write_parquet(path)
        else:
            released.write_csv(path, separator="\t" if suffix == ".tsv" else ",")
    except (OSError, pl.exceptions.PolarsError) as err:
        raise CLIError(f"cannot write {str(path)!r}: {_one_line(err)}") from err


def _print_head(released: pl.DataFrame, stream: TextIO) -> None:
    """The released items of largest noisy weight (ordering a release is post-processing)."""
    shown = min(_SHOW_ROWS, released.height)
    print(f"# {released.height} items released; {shown} of largest noisy weight:", file=stream)
    with pl.Config(tbl_rows=_SHOW_ROWS, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=False):
        print(released.sort("noisy_weight", descending=True).head(_SHOW_ROWS), file=stream)


# --------------------------------------------------------------------------------------------------------
# discover
# --------------------------------------------------------------------------------------------------------
_DISCOVER_DESCRIPTION = """\
Release the items that many users hold, with the Weighted Gaussian Mechanism (WGM) calibrated to a per-user
budget: (ε, δ)-DP with --epsilon (default ε = 1), or approximate (ρ, δ)-zCDP with --rho. Neighbouring
datasets differ by all rows of one user (add/remove).

Each user keeps a uniform random subset of at most --max-contributions distinct items; each kept item gets
weight 1/sqrt(t) (t = the user's kept items), weights are summed per item, discrete Gaussian noise is added,
and the items above the calibrated threshold are released with their noisy weight.
"""

_DISCOVER_EPILOG = """\
The release goes to --output or stdout. A summary goes to stderr: σ, T, the budget spent (the measurement's
privacy map at one user), Δ0, and counts of the *raw input* (rows; in the demo also the missing mass and
the number of distinct items). Those counts are not differentially private: they are for the data owner and
must not be published with the release.

This command enables OpenDP's "contrib" and "honest-but-curious" features in its own process: it trusts
opendp-wgm's privacy maps, whose proofs are in the package docs (docs/privacy.md).

examples:
  opendp-wgm discover                                        # synthetic Zipf demo
  opendp-wgm discover ratings.parquet --user u --item x --epsilon 1 --delta 1e-5 -o released.parquet
  opendp-wgm discover words.csv.gz --rho 0.1 --delta 1e-6 --max-contributions 50
"""


def _add_discover(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "discover",
        help="release frequent items with the Weighted Gaussian Mechanism (DP set union)",
        description=_DISCOVER_DESCRIPTION,
        epilog=_DISCOVER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_data_arguments(parser)
    _add_budget_arguments(parser)
    _add_output_arguments(parser)
    parser.set_defaults(run=_run_discover)


def _measure_description(measure: object) -> tuple[str, str]:
    """A readable name of an output measure and the name of its first budget parameter."""
    import opendp.prelude as dp

    if measure == dp.approximate(dp.max_divergence()):
        return "(ε, δ)-DP, approximate(max_divergence)", "ε"
    if measure == dp.approximate(dp.zero_concentrated_divergence()):
        return "approximate zCDP, approximate(zero_concentrated_divergence)", "ρ"
    return str(measure), "d_out"


def _run_discover(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    import opendp.prelude as dp

    from opendp_wgm import metrics
    from opendp_wgm.accounting import calibrate_wgm
    from opendp_wgm.domains import user_items_space
    from opendp_wgm.measurements import make_wgm_from_budget

    budget = _budget(args)
    _check_output(args.output)
    demo = args.path is None
    names = ["calibrating", "reading", "releasing"]
    names += ["writing"] if args.output is not None else []
    names += ["evaluating"] if demo else []
    stages = _Stages(names, stderr)
    try:
        # Parameters first: a bad budget fails before the data is read.
        with stages.stage("calibrating"), _user_errors():
            calibration = calibrate_wgm(**budget.kwargs())
            measurement = make_wgm_from_budget(
                *user_items_space(args.user, args.item), noise=args.noise, **budget.kwargs()
            )
        with stages.stage("reading"):
            data = _read_input(args)
        with stages.stage("releasing"):
            try:
                released = measurement(data.frame)
            except dp.OpenDPException as err:  # the user callback's Polars error, wrapped by OpenDP
                raise CLIError(f"cannot read {data.label}: {_one_line(err)}") from err
        if args.output is not None:
            with stages.stage("writing"):
                _write_release(released, args.output)
        if demo:  # evaluation against the raw data: for the demo only, never a release
            with stages.stage("evaluating"):
                assert isinstance(data.frame, pl.DataFrame)
                distinct = data.frame.get_column(args.item).n_unique()
                mm = metrics.missing_mass(data.frame, released, user=args.user, item=args.item)
    finally:
        stages.close()

    if args.output is None:
        _print_head(released, stdout)

    measure, first = _measure_description(measurement.output_measure)
    spent = measurement.map(1)
    requested = f"ε = {budget.epsilon:g}" if budget.epsilon is not None else f"ρ = {budget.rho:g}"
    lines = [
        f"{PROG} discover: WGM released {released.height:,} items",
        f"  budget spent  {first} = {spent[0]:.6g}, δ = {spent[1]:.6g} per user  [{measure}; "
        f"requested {requested}, δ = {budget.delta:g}]",
        f"  calibration   σ = {calibration.scale:.6g}, T = {calibration.threshold:.6g}, "
        f"Δ0 = {calibration.max_contributions}, noise = {args.noise}",
        f"  input         {data.label}: {data.rows:,} rows (not private)",
    ]
    if data.null_rows:
        lines.append(f"                {data.null_rows:,} rows with a null user or item were dropped")
    if demo:
        lines.append(
            f"  demo data     {distinct:,} distinct items; missing mass of the release = {mm:.4f} (not private)"
        )
    if args.output is not None:
        lines.append(f"  output        {args.output}")
    timing = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in stages.times.items())
    lines.append(f"  run time      {stages.total:.2f} s ({timing})")
    print("\n".join(lines), file=stderr)
    return 0


# --------------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------------
_COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (_add_discover,)


def build_parser() -> argparse.ArgumentParser:
    """The ``opendp-wgm`` parser with one subparser per command."""
    parser = _Parser(
        prog=PROG,
        description="Differentially private domain discovery (Weighted Gaussian Mechanism) on Polars, "
        "built on OpenDP.",
        epilog='This command enables OpenDP\'s "contrib" and "honest-but-curious" features in its own '
        "process (it trusts opendp-wgm's privacy maps; proofs in docs/privacy.md). The library does not.",
    )
    from opendp_wgm import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    for add in _COMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``opendp-wgm`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit status.

    Returns 0 on success, 2 on an error the user can fix (one line on stderr), 130 on Ctrl-C.
    """
    import opendp.prelude as dp

    stdout, stderr = sys.stdout, sys.stderr
    # This process is ours: opt in to the plugin's user-defined measurements (the library never does).
    dp.enable_features(*_FEATURES)
    try:
        args = build_parser().parse_args(argv)
        return args.run(args, stdout=stdout, stderr=stderr)
    except SystemExit as exit_:  # --help / --version
        return exit_.code if isinstance(exit_.code, int) else 0
    except CLIError as err:
        print(f"{PROG}: error: {err}", file=stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
