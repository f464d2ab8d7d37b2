r"""The ``opendp-wgm`` command: differentially private domain discovery from the shell.

::

    opendp-wgm discover data.parquet --user u --item x --epsilon 1 --delta 1e-5
    opendp-wgm discover                      # built-in synthetic Zipf demo
    opendp-wgm top-k data.csv --k 10         # WGM, then peeling (or --mechanism limited-domain)
    opendp-wgm hitting-set data.csv --k 10   # WGM, then user peeling

The command owns its process, so it enables OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features at
start (the library itself only asserts them). Each subcommand is one ``_add_<name>`` function that
registers its parser and a ``_run_<name>(args) -> int``; the argument groups shared by the paper's
mechanisms (data, budget, execution, output) are separate helpers, and :func:`_release_and_report` runs what
every subcommand does after building its measurement (read, release, write, evaluate the demo, summarise),
so ``top-k`` and ``hitting-set`` are siblings of ``discover``.

Errors a user can cause (a missing file or column, empty data, an invalid parameter) print one line
``opendp-wgm: error: ...`` on stderr and exit with status 2; they never print a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

import polars as pl

if TYPE_CHECKING:
    import opendp.prelude as dp

    from opendp_wgm.accounting import WGMCalibration

__all__ = ["main"]

PROG = "opendp-wgm"
_FEATURES = ("contrib", "honest-but-curious")

_DEFAULT_EPSILON = 1.0
_DEFAULT_DEMO_USERS = 5_000
_DEMO_ITEMS_PER_USER = 20
_DEMO_EXPONENT = 1.3
_SHOW_ROWS = 10
_DEFAULT_SPLIT = 0.5
#: Limited-domain top-k's default k̄, in multiples of k.
_K_BAR_PER_K = 5

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


def _last_line(err: BaseException) -> str:
    """The last line of an ``OpenDPException``: the Python error of the callback that failed inside OpenDP
    (its message starts with OpenDP's own lines and the callback's traceback)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip() not in ("", '")')]
    return lines[-1].removesuffix('")') if lines else type(err).__name__


#: Library parameter names, as they appear in its messages, and the options that set them.
_OPTION_NAMES = {
    "`epsilon`": "--epsilon",
    "`rho`": "--rho",
    "`delta`": "--delta",
    "`max_contributions`": "--max-contributions",
    "`noise_delta_fraction`": "--noise-delta-fraction",
    "`user`": "--user",
    "`item`": "--item",
    "`k`": "--k",
    "`k_bar`": "--k-bar",
    "`split`": "--split",
    "`passes`": "--passes",
    "`engine`": "--engine",
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


#: Dtypes that ``--schema`` accepts (by name, case-insensitive): those of identifiers.
_SCHEMA_DTYPES: dict[str, type[pl.DataType]] = {
    name: getattr(pl, name)
    for name in ("String", "Categorical", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64")
}


def _schema(text: str) -> dict[str, type[pl.DataType]]:
    """``--schema``: ``COL=DTYPE[,COL=DTYPE...]`` to a dict of column name to Polars dtype."""
    dtypes = {name.lower(): dtype for name, dtype in _SCHEMA_DTYPES.items()}
    schema: dict[str, type[pl.DataType]] = {}
    for entry in text.split(","):
        column, equals, name = (part.strip() for part in entry.partition("="))
        if not equals or not column or not name:
            raise argparse.ArgumentTypeError(f"entries must be COL=DTYPE (found {entry.strip()!r})")
        if name.lower() not in dtypes:
            raise argparse.ArgumentTypeError(
                f"dtype must be one of {', '.join(_SCHEMA_DTYPES)} (found {name!r} for column {column!r})"
            )
        if column in schema:
            raise argparse.ArgumentTypeError(f"column {column!r} is given twice")
        schema[column] = dtypes[name.lower()]
    return schema


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
    group.add_argument(
        "--schema",
        type=_schema,
        metavar="COL=DTYPE[,...]",
        help="CSV only: read these columns with these Polars dtypes (" + ", ".join(_SCHEMA_DTYPES) + "). "
        "The user and item columns of a CSV are read as String by default, so that ids such as 007 and 7 "
        "stay distinct; e.g. --schema user=Int64 to read user ids as integers.",
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


def _add_budget_arguments(
    parser: argparse.ArgumentParser, *, noise_delta_fraction: bool = True, wgm_only: str = ""
) -> None:
    """ε or ρ, δ, Δ0, and the WGM's options (``--noise-delta-fraction`` only where the command calibrates it;
    ``wgm_only`` marks the WGM's options in the help when the command has another mechanism)."""
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
    if noise_delta_fraction:
        group.add_argument(
            "--noise-delta-fraction",
            type=float,
            metavar="F",
            help="with --epsilon: share of the WGM's δ spent on its Gaussian noise, the rest on its threshold "
            "(default: 0.5)",
        )
    group.add_argument(
        "--noise",
        choices=("lattice", "opendp"),
        help="the WGM's noise sampler: this package's fast exact discrete Gaussian, or OpenDP's exact sampler "
        f"(slow) (default: lattice){wgm_only}",
    )


_ENGINES = ("auto", "in-memory", "streaming")


def _add_execution_arguments(
    parser: argparse.ArgumentParser, *, two_stage: bool = False, wgm_only: str = ""
) -> None:
    """How the WGM runs on Polars: ``--passes`` and ``--engine`` (of the WGM stage, for a ``two_stage``
    command; ``wgm_only`` marks them in the help when the command has another mechanism)."""
    group = parser.add_argument_group("execution")
    where = "the WGM stage processes" if two_stage else "process"
    group.add_argument(
        "--passes",
        type=_positive_int,
        metavar="N",
        help=f"{where} the users in N disjoint hash buckets, one pass over the input each: the same release, "
        f"with peak memory about 1/N of one pass, for inputs larger than memory (default: 1){wgm_only}",
    )
    group.add_argument(
        "--engine",
        choices=_ENGINES,
        help=f"the Polars engine that collects each pass{' of the WGM stage' if two_stage else ''} "
        f"(default: auto){wgm_only}",
    )


def _add_output_arguments(parser: argparse.ArgumentParser, columns: str) -> None:
    group = parser.add_argument_group("output")
    group.add_argument(
        "--output",
        "-o",
        type=Path,
        metavar="FILE",
        help=f"write the release ({columns}) to FILE: .csv, .tsv, .parquet or .pq, never an input file; "
        "written to a temporary file beside it and renamed, so FILE is complete or untouched. "
        f"Without it the first {_SHOW_ROWS} released rows are printed to stdout.",
    )
    group.add_argument("--force", action="store_true", help="overwrite FILE if it exists (default: refuse)")


def _add_k_argument(parser: argparse._ActionsContainer, help: str) -> None:
    parser.add_argument("--k", type=int, required=True, metavar="K", help=help)


def _add_split_argument(parser: argparse._ActionsContainer, wgm_only: str = "") -> None:
    parser.add_argument(
        "--split",
        type=float,
        metavar="S",
        help=f"share of the budget (of ε and δ, or of ρ) given to the WGM stage, in (0, 1); the peeling stage "
        f"gets the rest (default: {_DEFAULT_SPLIT:g}, the paper's){wgm_only}",
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
    fraction = getattr(args, "noise_delta_fraction", None)
    if rho is not None and fraction is not None:
        raise CLIError("--noise-delta-fraction applies only with --epsilon (under --rho all of δ pays the threshold)")
    return _Budget(args.delta, args.max_contributions, epsilon, rho, fraction)


def _noise(args: argparse.Namespace) -> str:
    return "lattice" if args.noise is None else args.noise


@dataclass(frozen=True)
class _Execution:
    """The resolved ``--passes`` and ``--engine``: keyword arguments of the WGM constructors."""

    passes: int
    engine: str

    def kwargs(self) -> dict[str, int | str]:
        return {"passes": self.passes, "engine": self.engine}

    def line(self) -> str:
        passes = "1 pass" if self.passes == 1 else f"{self.passes} passes (disjoint user buckets)"
        return f"  execution     {passes}, Polars engine {self.engine}"


def _execution(args: argparse.Namespace) -> _Execution:
    return _Execution(1 if args.passes is None else args.passes, "auto" if args.engine is None else args.engine)


def _requested(budget: _Budget) -> str:
    return f"ε = {budget.epsilon:g}" if budget.epsilon is not None else f"ρ = {budget.rho:g}"


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


def _scan(path: Path, separator: str | None, schema: dict[str, type[pl.DataType]]) -> pl.LazyFrame:
    """A lazy scan of ``path`` chosen by its suffix; ``schema`` (CSV only) fixes the dtypes of those columns."""
    suffix = _suffix(path)
    if suffix in _CSV_SUFFIXES:
        sep = _CSV_SUFFIXES[suffix] if separator is None else separator
        return pl.scan_csv(path, separator=sep, schema_overrides=schema)
    if suffix not in _PARQUET_SUFFIXES:
        known = ", ".join([*_CSV_SUFFIXES, *_PARQUET_SUFFIXES])
        raise CLIError(f"cannot read {str(path)!r}: unsupported file type {suffix or '(no suffix)'!r} (use {known})")
    for option, value in (("--separator", separator), ("--schema", schema)):
        if value:
            raise CLIError(f"{option} applies only to CSV input, not to {path}")
    return pl.scan_parquet(path)


def _check_separator(separator: str | None) -> str | None:
    if separator is None:
        return None
    separator = {"\\t": "\t", "tab": "\t"}.get(separator, separator)
    if len(separator.encode()) != 1:
        raise CLIError(f"--separator must be a single one-byte character (found {separator!r})")
    return separator


def _open_checked(
    path: Path, separator: str | None, user: str, item: str, schema: dict[str, type[pl.DataType]] | None
) -> tuple[pl.LazyFrame, int, int]:
    """Scan ``path``, check its columns and their dtypes, and count its rows (and rows with a null user or item).

    A CSV's user and item columns are read as String unless ``schema`` says otherwise: guessing their types
    would merge ids such as ``007`` and ``7`` (two items into one; two users into one "user" holding several
    people's rows under one person's bound). The count parses both columns in full, so a value
    that does not fit a ``schema`` dtype fails here, before any measurement is invoked.
    """
    if user == item:
        raise CLIError(f"--user and --item must name different columns (both are {user!r})")
    overrides = dict(schema or {})
    if _suffix(path) in _CSV_SUFFIXES:
        overrides = {user: pl.String, item: pl.String} | overrides
    lf = _scan(path, separator, overrides)
    try:
        columns = lf.collect_schema()
    except pl.exceptions.NoDataError:
        raise CLIError(f"{path} has no rows") from None
    except (pl.exceptions.PolarsError, OSError) as err:
        raise CLIError(f"cannot read {str(path)!r}: {_one_line(err)}") from err
    missing = [c for c in (user, item) if c not in columns]
    if missing:
        names = ("column " if len(missing) == 1 else "columns ") + " and ".join(repr(c) for c in missing)
        raise CLIError(f"{names} not found in {path}; its columns are {columns.names()} (choose with --user/--item)")
    unknown = [c for c in schema or {} if c not in columns]
    if unknown:
        raise CLIError(f"--schema names column(s) {unknown} not in {path}; its columns are {columns.names()}")
    for option, column in (("--user", user), ("--item", item)):
        if columns[column] == pl.Null:
            raise CLIError(f"{option} column {column!r} of {path} must have values (found dtype Null: all null)")
    try:
        counts = lf.select(rows=pl.len(), null_rows=(pl.col(user).is_null() | pl.col(item).is_null()).sum()).collect()
    except (pl.exceptions.PolarsError, OSError) as err:
        hint = " (check --schema)" if schema else ""
        raise CLIError(f"cannot read {str(path)!r}: {_one_line(err)}{hint}") from err
    rows, null_rows = int(counts["rows"][0]), int(counts["null_rows"][0])
    if rows == 0:
        raise CLIError(f"{path} has no rows")
    if null_rows == rows:
        raise CLIError(f"{path} has no row with both a user and an item (all {rows:,} rows have a null)")
    return lf.select(user, item), rows, null_rows


def _read_input(args: argparse.Namespace) -> _Input:
    """Open PATH lazily (or draw the demo), check its columns, their dtypes and its rows (not a release)."""
    user, item = args.user, args.item
    if args.path is None:
        from opendp_wgm.datasets import synthetic_zipf

        if args.schema is not None:
            raise CLIError("--schema applies only to CSV input, not to the demo")
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
    lf, rows, null_rows = _open_checked(path, _check_separator(args.separator), user, item, args.schema)
    return _Input(lf, str(path), rows, null_rows, demo=False)


@dataclass(frozen=True)
class _Output:
    """Where the release goes: ``path``, through ``temp``, a file created beside it before the release.

    Creating ``temp`` early proves that the directory is writable before any budget is spent; the release is
    written to ``temp`` and renamed onto ``path`` (atomic on one file system), so ``path`` is either complete
    or untouched, and :meth:`discard` removes ``temp`` on any failure.
    """

    path: Path
    temp: Path

    def commit(self, released: pl.DataFrame) -> None:
        try:
            if _suffix(self.path) in _PARQUET_SUFFIXES:
                released.write_parquet(self.temp)
            else:
                released.write_csv(self.temp, separator="\t" if _suffix(self.path) == ".tsv" else ",")
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self.temp, 0o666 & ~umask)  # the mode of a plain new file, not the temporary's 0600
            os.replace(self.temp, self.path)
        except (OSError, pl.exceptions.PolarsError) as err:
            raise CLIError(f"cannot write {str(self.path)!r}: {_one_line(err)}") from err

    def discard(self) -> None:
        self.temp.unlink(missing_ok=True)


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same resolved path, or a hard link / symlink to it."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def _prepare_output(path: Path | None, inputs: Sequence[Path], *, force: bool) -> _Output | None:
    """Check, before any work, that the release can be written to ``path`` without losing data.

    Refuses an input file (even with ``--force``), an existing file without ``--force``, a directory, an
    unknown suffix, and a missing or unwritable directory; then creates the temporary file beside ``path``.
    """
    if path is None:
        return None
    path = path.expanduser()
    if _suffix(path) not in _OUTPUT_SUFFIXES:
        raise CLIError(
            f"cannot write {str(path)!r}: unsupported output type {path.suffix or '(no suffix)'!r} "
            f"(use {', '.join(_OUTPUT_SUFFIXES)})"
        )
    for source in inputs:
        if _same_file(path, source):
            raise CLIError(f"--output {str(path)!r} is the input file: choose another path (the input is never overwritten)")
    if path.is_dir():
        raise CLIError(f"cannot write {str(path)!r}: it is a directory")
    if path.exists() and not force:
        raise CLIError(f"--output {str(path)!r} already exists (add --force to overwrite it)")
    parent = path.resolve().parent
    if not parent.is_dir():
        raise CLIError(f"cannot write {str(path)!r}: directory {str(parent)!r} does not exist")
    try:
        if not os.access(parent, os.W_OK | os.X_OK):
            raise PermissionError(f"directory {str(parent)!r} is not writable")
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as temp:
            return _Output(path, Path(temp.name))
    except OSError as err:
        raise CLIError(f"cannot write {str(path)!r}: {_one_line(err)}") from err


@contextmanager
def _exit_on_interrupt(cleanup: Callable[[], None]) -> Iterator[None]:
    """Make Ctrl-C (SIGINT) run ``cleanup`` and end the process with status 130, at once, inside this block.

    A ``KeyboardInterrupt`` raised in Python code that OpenDP calls back (a measurement's function or map)
    crashes the process in OpenDP's FFI ("double free or corruption", docs/known_issues.md), so inside the
    block the handler never raises: it cleans up and calls ``os._exit``. Outside the main thread signal
    handlers cannot be set, and the block changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        cleanup()
        os.write(2, f"\n{PROG}: interrupted; nothing was written\n".encode())
        os._exit(130)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _print_head(released: pl.DataFrame, stream: TextIO) -> None:
    """The released items of largest noisy weight (ordering a release is post-processing)."""
    shown = min(_SHOW_ROWS, released.height)
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
    budget). Ctrl-C from calibration to the write ends the process with status 130 and removes the temporary
    output (:func:`_exit_on_interrupt`); any failure leaves no partial output.
    """
    import opendp.prelude as dp

    output = _prepare_output(args.output, [] if args.path is None else [args.path], force=args.force)
    demo = args.path is None
    names = ["calibrating", "reading", "releasing"]
    names += ["writing"] if output is not None else []
    names += ["evaluating"] if demo else []
    stages = _Stages(names, stderr)
    try:
        with _exit_on_interrupt(output.discard if output is not None else lambda: None):
            with stages.stage("calibrating"), _user_errors():
                planned = plan()
            with stages.stage("reading"):
                data = _read_input(args)
            with stages.stage("releasing"):
                try:
                    released = planned.measurement(data.frame)
                except dp.OpenDPException as err:  # the user callback's error, wrapped by OpenDP: last line
                    raise CLIError(f"cannot release from {data.label}: {_last_line(err)}") from err
                spent = planned.measurement.map(1)
            if output is not None:
                with stages.stage("writing"):
                    output.commit(released)
        evaluation: list[str] = []
        if demo:  # evaluation against the raw data: for the demo only, never a release
            with stages.stage("evaluating"):
                assert isinstance(data.frame, pl.DataFrame)
                evaluation = evaluate(data.frame, released)
    finally:
        stages.close()
        if output is not None:
            output.discard()

    if args.output is None:
        show(released, stdout)

    measure, first = _measure_description(planned.measurement.output_measure)
    lines = [
        f"{PROG} {args.command}: {planned.mechanism} released {released.height:,} items",
        f"  budget spent  {first} = {spent[0]:.6g}, δ = {spent[1]:.6g} per user  [{measure}; "
        f"requested {_requested(budget)}, δ = {budget.delta:g}]",
        *planned.calibration,
        f"  input         {data.label}: {data.rows:,} rows (not private)",
    ]
    if data.null_rows:
        lines.append(f"                {data.null_rows:,} rows with a null user or item were dropped")
    lines += evaluation
    if args.output is not None:
        lines.append(f"  output        {args.output}")
    timing = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in stages.times.items())
    lines.append(f"  run time      {stages.total:.2f} s ({timing})")
    print("\n".join(lines), file=stderr)
    return 0


def _measure_description(measure: object) -> tuple[str, str]:
    """A readable name of an output measure and the name of its first budget parameter."""
    import opendp.prelude as dp

    if measure == dp.approximate(dp.max_divergence()):
        return "(ε, δ)-DP, approximate(max_divergence)", "ε"
    if measure == dp.approximate(dp.zero_concentrated_divergence()):
        return "approximate zCDP, approximate(zero_concentrated_divergence)", "ρ"
    return str(measure), "d_out"


def _loss(first: str, loss: tuple[float, float]) -> str:
    return f"{first} = {loss[0]:.6g}, δ = {loss[1]:.6g}"


def _wgm_line(scale: float, threshold: float, max_contributions: int, noise: str) -> str:
    return f"σ = {scale:.6g}, T = {threshold:.6g}, Δ0 = {max_contributions}, noise = {noise}"


def _two_stage_lines(
    wgm: WGMCalibration, *, split: float, noise: str, peeling: str, first: str, losses: Sequence[tuple[float, float]]
) -> list[str]:
    """The calibration of a WGM-then-peeling measurement: its WGM, its peeling, each stage's loss at one user."""
    return [
        f"  calibration   WGM ({split:g} of the budget): "
        + _wgm_line(wgm.scale, wgm.threshold, wgm.max_contributions, noise),
        f"                peeling: {peeling}",
        f"  stage loss    WGM {_loss(first, losses[0])}; peeling {_loss(first, losses[1])}",
    ]


def _not_private(label: str, text: str) -> str:
    return f"  {label:<13} {text} (not private)"


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
  opendp-wgm discover events.parquet --passes 8 -o released.parquet    # input larger than memory
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
    _add_execution_arguments(parser)
    _add_output_arguments(parser, "item, noisy_weight")
    parser.set_defaults(run=_run_discover)


def _run_discover(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    from opendp_wgm import metrics
    from opendp_wgm.accounting import calibrate_wgm
    from opendp_wgm.domains import user_items_space
    from opendp_wgm.measurements import make_wgm_from_budget

    budget = _budget(args)
    noise = _noise(args)
    execution = _execution(args)

    def plan() -> _Plan:
        calibration = calibrate_wgm(**budget.kwargs())
        measurement = make_wgm_from_budget(
            *user_items_space(args.user, args.item), noise=noise, **budget.kwargs(), **execution.kwargs()
        )
        line = _wgm_line(calibration.scale, calibration.threshold, calibration.max_contributions, noise)
        return _Plan("WGM", measurement, [f"  calibration   {line}", execution.line()])

    def evaluate(data: pl.DataFrame, released: pl.DataFrame) -> list[str]:
        distinct = data.get_column(args.item).n_unique()
        mm = metrics.missing_mass(data, released, user=args.user, item=args.item)
        return [_not_private("demo data", f"{distinct:,} distinct items; missing mass of the release = {mm:.4f}")]

    return _release_and_report(
        args, stdout=stdout, stderr=stderr, budget=budget, plan=plan, evaluate=evaluate, show=_print_head
    )


# --------------------------------------------------------------------------------------------------------
# top-k
# --------------------------------------------------------------------------------------------------------
_TOP_K_DESCRIPTION = """\
Release a ranked list of at most K items held by the most users, over an unknown item domain, calibrated to
a per-user budget: (ε, δ)-DP with --epsilon (default ε = 1), or approximate (ρ, δ)-zCDP with --rho.
Neighbouring datasets differ by all rows of one user (add/remove).

--mechanism wgm (default; the paper's WGM-then-top-k): the WGM releases candidate items with --split of the
budget (σ and T calibrated as by `opendp-wgm discover`), then K rounds of exponential-mechanism peeling pick
the candidates held by the most users (exact, unclipped user counts) with the rest of the budget.

--mechanism limited-domain (Durfee & Rogers 2019, the paper's baseline; (ε, δ)-DP only): the --k-bar items
of largest Δ0-bounded count compete, with Gumbel noise, against a threshold that pays for the rest of the
domain; the items ranked above the threshold are released, at most K.
"""

_TOP_K_EPILOG = """\
The release (item, rank; rank 1 = the first pick) goes to --output or stdout, in rank order. A summary goes to
stderr: the calibration (σ and T of the WGM, the peeling's per-round ε' and each stage's loss at one user),
the budget spent (the measurement's privacy map at one user), and counts of the *raw input* (rows; in the
demo also the top-K missing mass of the release). Those counts are not differentially private: they are for
the data owner and must not be published with the release.

This command enables OpenDP's "contrib" and "honest-but-curious" features in its own process: it trusts
opendp-wgm's privacy maps, whose proofs are in the package docs (docs/top_k.md, docs/privacy.md).

examples:
  opendp-wgm top-k --k 10                                    # synthetic Zipf demo
  opendp-wgm top-k ratings.parquet --user u --item x --k 100 --epsilon 1 --delta 1e-5 -o top100.csv
  opendp-wgm top-k words.csv --k 20 --rho 0.1 --delta 1e-6 --split 0.3
  opendp-wgm top-k words.csv --k 20 --mechanism limited-domain --k-bar 200
  opendp-wgm top-k events.parquet --k 100 --passes 4 --engine streaming
"""

_WGM_ONLY = "; --mechanism wgm only"


def _add_top_k(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "top-k",
        help="release the K items held by the most users (WGM, then peeling; or limited-domain top-k)",
        description=_TOP_K_DESCRIPTION,
        epilog=_TOP_K_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_data_arguments(parser)
    group = parser.add_argument_group("top-k")
    _add_k_argument(group, "number of items to release, >= 1 (required)")
    group.add_argument(
        "--mechanism",
        choices=("wgm", "limited-domain"),
        default="wgm",
        help="WGM, then peeling on its candidates; or the limited-domain baseline (default: %(default)s)",
    )
    group.add_argument(
        "--k-bar",
        type=int,
        metavar="KBAR",
        help=f"size of the limited domain, >= K (default: {_K_BAR_PER_K}·K; --mechanism limited-domain only)",
    )
    _add_split_argument(group, _WGM_ONLY)
    _add_budget_arguments(parser, noise_delta_fraction=False, wgm_only=_WGM_ONLY)
    _add_execution_arguments(parser, two_stage=True, wgm_only=_WGM_ONLY)
    _add_output_arguments(parser, "item, rank")
    parser.set_defaults(run=_run_top_k)


def _run_top_k(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    import opendp.prelude as dp

    from opendp_wgm import metrics
    from opendp_wgm.accounting import calibrate_wgm_top_k
    from opendp_wgm.domains import user_items_space
    from opendp_wgm.measurements import (
        make_limited_domain_top_k,
        make_peeling_top_k,
        make_wgm,
        make_wgm_top_k_from_budget,
    )

    budget = _budget(args)
    wgm = args.mechanism == "wgm"
    if wgm and args.k_bar is not None:
        raise CLIError("--k-bar applies only to --mechanism limited-domain")
    if not wgm:
        if budget.rho is not None:
            raise CLIError("--mechanism limited-domain is (ε, δ)-DP only: give --epsilon, not --rho")
        for option in ("split", "noise", "passes", "engine"):
            if getattr(args, option) is not None:
                raise CLIError(f"--{option} applies only to --mechanism wgm")
    noise = _noise(args)
    execution = _execution(args)
    split = _DEFAULT_SPLIT if args.split is None else args.split

    def plan_wgm() -> _Plan:
        space = user_items_space(args.user, args.item)
        cal = calibrate_wgm_top_k(k=args.k, split=split, **budget.kwargs())
        measurement = make_wgm_top_k_from_budget(
            *space, k=args.k, split=split, noise=noise, **budget.kwargs(), **execution.kwargs()
        )
        # each stage's loss is the map, at one user, of that stage as a measurement on its own (the composed
        # map is their sum); the peeling is charged k rounds, as in the composition
        approx_dp = budget.epsilon is not None
        measure = dp.approximate(dp.max_divergence()) if approx_dp else None
        stage_1 = make_wgm(
            *space,
            max_contributions=cal.max_contributions,
            scale=cal.wgm.scale,
            threshold=cal.wgm.threshold,
            output_measure=measure,
            epsilon=cal.wgm.epsilon,
        )
        stage_2 = make_peeling_top_k(
            *space,
            candidates=list(range(cal.k)),
            k=cal.k,
            scale=cal.peel_scale,
            output_measure=measure,
            delta=cal.peel_delta if approx_dp else None,
        )
        peeling = f"{cal.k} rounds, ε' = {cal.peel_local_epsilon:.6g} per round (Gumbel scale {cal.peel_scale:.6g})"
        lines = _two_stage_lines(
            cal.wgm,
            split=split,
            noise=noise,
            peeling=peeling,
            first="ε" if approx_dp else "ρ",
            losses=(stage_1.map(1), stage_2.map(1)),
        )
        return _Plan("WGM-then-top-k", measurement, [*lines, execution.line()])

    def plan_limited_domain() -> _Plan:
        k_bar = _K_BAR_PER_K * args.k if args.k_bar is None else args.k_bar
        measurement = make_limited_domain_top_k(
            *user_items_space(args.user, args.item),
            k=args.k,
            k_bar=k_bar,
            max_contributions=budget.max_contributions,
            epsilon=budget.epsilon,
            delta=budget.delta,
        )
        return _Plan(
            "limited-domain top-k",
            measurement,
            [f"  calibration   k̄ = {k_bar}, Δ0 = {budget.max_contributions}"],
        )

    def evaluate(data: pl.DataFrame, released: pl.DataFrame) -> list[str]:
        mm = metrics.top_k_missing_mass(data, released, args.k, user=args.user, item=args.item)
        return [_not_private("demo data", f"top-{args.k} missing mass of the release = {mm:.4f}")]

    return _release_and_report(
        args,
        stdout=stdout,
        stderr=stderr,
        budget=budget,
        plan=plan_wgm if wgm else plan_limited_domain,
        evaluate=evaluate,
        show=_print_ranked,
    )


# --------------------------------------------------------------------------------------------------------
# hitting-set
# --------------------------------------------------------------------------------------------------------
_HITTING_SET_DESCRIPTION = """\
Release at most K items that together cover many users (a k-hitting set: as many users as possible hold at
least one of them), over an unknown item domain, calibrated to a per-user budget: (ε, δ)-DP with --epsilon
(default ε = 1), or approximate (ρ, δ)-zCDP with --rho. Neighbouring datasets differ by all rows of one user
(add/remove).

The paper's WGM-then-peeling: the WGM releases candidate items with --split of the budget, then K rounds of
the exponential mechanism each pick a candidate held by many users not covered by the earlier picks
(user peeling, on the unclipped data) with the rest of the budget.
"""

_HITTING_SET_EPILOG = """\
The release (item, rank; rank = the round that picked the item) goes to --output or stdout. A summary
goes to stderr: the calibration (σ and T of the WGM, the peeling's per-round ε' and each stage's loss at one
user), the budget spent (the measurement's privacy map at one user), and counts of the *raw input* (rows;
in the demo also the users the release misses, its coverage, and the users that the non-private greedy
algorithm misses). Those counts are not differentially private: they are for the data owner and must not
be published with the release.

This command enables OpenDP's "contrib" and "honest-but-curious" features in its own process: it trusts
opendp-wgm's privacy maps, whose proofs are in the package docs (docs/hitting_set.md, docs/privacy.md).

examples:
  opendp-wgm hitting-set --k 10                              # synthetic Zipf demo
  opendp-wgm hitting-set ratings.parquet --user u --item x --k 100 --epsilon 1 --delta 1e-5 -o picks.csv
  opendp-wgm hitting-set words.csv --k 20 --rho 0.1 --delta 1e-6 --split 0.3
  opendp-wgm hitting-set events.parquet --k 100 --passes 4
"""


def _add_hitting_set(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hitting-set",
        help="release K items that together cover many users (WGM, then user peeling)",
        description=_HITTING_SET_DESCRIPTION,
        epilog=_HITTING_SET_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_data_arguments(parser)
    group = parser.add_argument_group("hitting set")
    _add_k_argument(group, "number of items (peeling rounds), >= 1 (required)")
    _add_split_argument(group)
    _add_budget_arguments(parser)
    _add_execution_arguments(parser, two_stage=True)
    _add_output_arguments(parser, "item, rank")
    parser.set_defaults(run=_run_hitting_set)


def _run_hitting_set(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    from opendp_wgm import metrics
    from opendp_wgm.domains import user_items_space
    from opendp_wgm.measurements import (
        calibrate_wgm_hitting_set,
        greedy_hitting_set,
        make_wgm_hitting_set_from_budget,
    )

    budget = _budget(args)
    noise = _noise(args)
    execution = _execution(args)
    split = _DEFAULT_SPLIT if args.split is None else args.split

    def plan() -> _Plan:
        cal = calibrate_wgm_hitting_set(k=args.k, split=split, **budget.kwargs())
        measurement = make_wgm_hitting_set_from_budget(
            *user_items_space(args.user, args.item),
            k=args.k,
            split=split,
            noise=noise,
            **budget.kwargs(),
            **execution.kwargs(),
        )
        lines = _two_stage_lines(
            cal.wgm,
            split=split,
            noise=noise,
            peeling=f"{cal.k} rounds, ε' = {cal.peel_round_epsilon:.6g} per round",
            first="ε" if budget.epsilon is not None else "ρ",
            losses=(cal.wgm_loss, cal.peel_loss),
        )
        return _Plan("WGM-then-peeling", measurement, [*lines, execution.line()])

    def evaluate(data: pl.DataFrame, released: pl.DataFrame) -> list[str]:
        columns = {"user": args.user, "item": args.item}
        missed = metrics.missed_users(data, released, **columns)
        share = metrics.coverage(data, released, **columns)
        greedy = metrics.missed_users(data, greedy_hitting_set(data, args.k, **columns), **columns)
        users = data.get_column(args.user).n_unique()
        return [
            _not_private("demo data", f"{users:,} users; the release misses {missed:,} (coverage {share:.4f})"),
            _not_private("", f"the non-private greedy {args.k}-set misses {greedy:,}"),
        ]

    return _release_and_report(
        args, stdout=stdout, stderr=stderr, budget=budget, plan=plan, evaluate=evaluate, show=_print_ranked
    )


def _add_reproduce(subparsers: argparse._SubParsersAction) -> None:
    from opendp_wgm.experiments import (
        REPRODUCE_DESCRIPTION,
        REPRODUCE_EPILOG,
        REPRODUCE_HELP,
        add_reproduce_arguments,
    )

    parser = subparsers.add_parser(
        "reproduce",
        help=REPRODUCE_HELP,
        description=REPRODUCE_DESCRIPTION,
        epilog=REPRODUCE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_reproduce_arguments(parser)
    parser.set_defaults(run=_run_reproduce)


def _run_reproduce(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    import opendp.prelude as dp

    from opendp_wgm.experiments import run_reproduce

    # the policy baselines' maps assume exact arithmetic in their contraction step (docs/baselines.md)
    dp.enable_features("idealized-numerics")
    try:
        return run_reproduce(args, stdout=stdout, stderr=stderr)
    except (ValueError, TypeError, FileNotFoundError, NotADirectoryError, ImportError) as err:
        raise CLIError(str(err)) from err


def _add_audit(subparsers: argparse._SubParsersAction) -> None:
    from opendp_wgm.audit._cli import add_audit_parser  # owns its arguments and run function

    add_audit_parser(subparsers)


# --------------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------------
_COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_discover,
    _add_top_k,
    _add_hitting_set,
    _add_reproduce,
    _add_audit,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``opendp-wgm`` parser with one subparser per command."""
    parser = _Parser(
        prog=PROG,
        description="Differentially private domain discovery (Weighted Gaussian Mechanism), top-k and k-hitting "
        "sets over an unknown item domain, on Polars, built on OpenDP.",
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
