"""Reading the input (CSV/TSV/Parquet scans, ``--schema``, checks before the release) and writing the output
safely (never onto an input, ``--force``, writable before the release, temporary file then rename), and the
Ctrl-C handler that exits with status 130."""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from opendp_wgm.cli._args import (
    _DEFAULT_DEMO_USERS,
    _DEMO_EXPONENT,
    _DEMO_ITEMS_PER_USER,
)
from opendp_wgm.cli._errors import PROG, CLIError, _library_errors, _one_line

#: Input suffixes (lower case) and how they are read. ``scan_csv`` also decompresses ``.gz``.
_CSV_SUFFIXES = {".csv": ",", ".tsv": "\t", ".csv.gz": ",", ".tsv.gz": "\t"}
_PARQUET_SUFFIXES = (".parquet", ".pq")
_OUTPUT_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")


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
    path: Path,
    separator: str | None,
    user: str,
    item: str | tuple[str, ...],
    schema: dict[str, type[pl.DataType]] | None,
) -> tuple[pl.LazyFrame, int, int]:
    """Scan ``path``, check its columns and their dtypes, and count its rows (and rows with a null user or item).

    A CSV's user and item columns are read as String unless ``schema`` says otherwise: guessing their types
    would merge ids such as ``007`` and ``7`` (two items into one; two users into one "user" holding several
    people's rows under one person's bound). The count parses both columns in full, so a value
    that does not fit a ``schema`` dtype fails here, before any measurement is invoked. A composite key's
    columns (``item``, a tuple) are each read and checked as an item column is; a null in any of them drops
    the row.
    """
    keys = (item,) if isinstance(item, str) else item
    if user in keys:
        raise CLIError(f"--user and --item must name different columns (both are {user!r})")
    overrides = dict(schema or {})
    if _suffix(path) in _CSV_SUFFIXES:
        overrides = dict.fromkeys((user, *keys), pl.String) | overrides
    lf = _scan(path, separator, overrides)
    try:
        columns = lf.collect_schema()
    except pl.exceptions.NoDataError:
        raise CLIError(f"{path} has no rows") from None
    except (pl.exceptions.PolarsError, OSError) as err:
        raise CLIError(f"cannot read {str(path)!r}: {_one_line(err)}") from err
    missing = [c for c in (user, *keys) if c not in columns]
    if missing:
        names = ("column " if len(missing) == 1 else "columns ") + " and ".join(repr(c) for c in missing)
        raise CLIError(f"{names} not found in {path}; its columns are {columns.names()} (choose with --user/--item)")
    unknown = [c for c in schema or {} if c not in columns]
    if unknown:
        raise CLIError(f"--schema names column(s) {unknown} not in {path}; its columns are {columns.names()}")
    for option, column in (("--user", user), *(("--item", key) for key in keys)):
        if columns[column] == pl.Null:
            raise CLIError(f"{option} column {column!r} of {path} must have values (found dtype Null: all null)")
    try:
        null_row = pl.any_horizontal(pl.col(user, *keys).is_null())
        counts = lf.select(rows=pl.len(), null_rows=null_row.sum()).collect()
    except (pl.exceptions.PolarsError, OSError) as err:
        hint = " (check --schema)" if schema else ""
        raise CLIError(f"cannot read {str(path)!r}: {_one_line(err)}{hint}") from err
    rows, null_rows = int(counts["rows"][0]), int(counts["null_rows"][0])
    if rows == 0:
        raise CLIError(f"{path} has no rows")
    if null_rows == rows:
        raise CLIError(f"{path} has no row with both a user and an item (all {rows:,} rows have a null)")
    return lf.select(user, *keys), rows, null_rows


def _read_input(args: argparse.Namespace) -> _Input:
    """Open PATH lazily (or draw the demo), check its columns, their dtypes and its rows (not a release)."""
    user, item = args.user, args.item
    if args.path is None:
        from opendp_wgm.datasets import synthetic_zipf

        if args.schema is not None:
            raise CLIError("--schema applies only to CSV input, not to the demo")
        if not isinstance(item, str):
            raise CLIError(f"--item must name one column for the demo (found {','.join(item)!r})")
        n_users = _DEFAULT_DEMO_USERS if args.demo_users is None else args.demo_users
        with _library_errors():
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
            msg = f"--output {str(path)!r} is the input file: choose another path (the input is never overwritten)"
            raise CLIError(msg)
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
