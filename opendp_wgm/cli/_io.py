"""Reading the input (CSV/TSV, NDJSON and Parquet scans, ``--schema``, SQL databases through ``--uri`` and
``--query``, checks before the release) and writing the output safely (never onto an input, ``--force``,
writable before the release, temporary file then rename; or to stdout)."""

from __future__ import annotations

import argparse
import gzip
import os
import re
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import polars as pl
from polars._typing import PolarsDataType

from opendp_wgm.cli._args import (
    _DEFAULT_DEMO_USERS,
    _DEMO_EXPONENT,
    _DEMO_ITEMS_PER_USER,
    _OUTPUT_FORMATS,
    _STDOUT,
)
from opendp_wgm.cli._errors import CLIError, _library_errors, _one_line

#: Input suffixes (lower case) and how they are read. ``scan_csv`` and ``scan_ndjson`` also decompress ``.gz``
#: (in memory: a gzip stream cannot be scanned lazily).
_CSV_SUFFIXES = {".csv": ",", ".tsv": "\t", ".csv.gz": ",", ".tsv.gz": "\t"}
_NDJSON_SUFFIXES = (".ndjson", ".jsonl", ".ndjson.gz", ".jsonl.gz")
_PARQUET_SUFFIXES = (".parquet", ".pq")
#: Output suffixes and their format; a text format may end in ``.gz`` as well (gzip-compressed).
_OUTPUT_SUFFIXES = {
    ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".ndjson": "ndjson",
    ".jsonl": "ndjson",
}
#: The extra that installs the database driver of ``--uri`` (ConnectorX, through ``pl.read_database_uri``).
_SQL_EXTRA = "pip install 'opendp-wgm[sql]' (or pip install connectorx)"


@dataclass(frozen=True)
class _Input:
    """The data to release from: a lazy plan (a file) or an in-memory frame (the demo)."""

    frame: pl.LazyFrame | pl.DataFrame
    label: str
    rows: int
    #: rows dropped for a null (or, in a float column, NaN) user or item
    null_rows: int
    demo: bool
    #: whether a user or item column is a float (Float32/Float64) column, whose NaN is read as null
    floats: bool = False

    @property
    def missing(self) -> str:
        """What a dropped row lacks, for the summary: "a null" or, with a float column, "a null or NaN"."""
        return "a null or NaN" if self.floats else "a null"


def _suffix(path: Path) -> str:
    """``.csv``, ``.csv.gz``, ``.parquet``, ... in lower case."""
    suffixes = [s.lower() for s in path.suffixes]
    if len(suffixes) >= 2 and suffixes[-1] == ".gz":
        return "".join(suffixes[-2:])
    return suffixes[-1] if suffixes else ""


def _check_unique_names(path: Path, names: Sequence[str | None]) -> None:
    """Refuse a file whose header (its schema, public) names a column twice: a scan would rename the second
    (``user_duplicated_0``) or drop it, and the command would read one of them without a word."""
    counts = Counter("" if name is None else name for name in names)
    repeated = [name for name, count in counts.items() if count > 1]
    if repeated:
        raise CLIError(
            f"the columns of {str(path)!r} must have distinct names (found {repeated} more than once): "
            "rename them in the file"
        )


def _header(path: Path, separator: str) -> list[str | None]:
    """The column names of a CSV as its first line states them (duplicates kept); none for an empty file."""
    try:
        first = pl.read_csv(path, has_header=False, n_rows=1, separator=separator, infer_schema=False)
    except pl.exceptions.NoDataError:
        return []  # the scan reports the empty file
    except (pl.exceptions.PolarsError, OSError) as err:
        raise CLIError(f"cannot read {str(path)!r}: {_one_line(err)}") from err
    return list(first.row(0)) if first.height else []


def _parquet_names(path: Path) -> list[str]:
    """The column names a Parquet file's schema states (duplicates kept: Polars' schema drops them), from its
    footer (:mod:`._parquet_footer`, no pyarrow); pyarrow only reads a footer that reader does not know."""
    from opendp_wgm.cli._parquet_footer import parquet_column_names

    try:
        return parquet_column_names(path)
    except OSError:  # unreadable: the scan reports it
        return []
    except ValueError:
        pass
    try:
        import pyarrow.parquet as pq  # installed with opendp[polars]
    except ImportError:  # pragma: no cover - not Parquet as far as we can tell: the scan reports it
        return []
    try:
        return list(pq.read_schema(path).names)
    except (OSError, ValueError):  # not Parquet: the scan reports it
        return []


def _scan(path: Path, separator: str | None, schema: dict[str, type[pl.DataType]]) -> pl.LazyFrame:
    """A lazy scan of ``path`` chosen by its suffix; ``schema`` (CSV only) fixes the dtypes of those columns.

    A CSV header or a Parquet schema that names a column twice is refused (:func:`_check_unique_names`).
    """
    suffix = _suffix(path)
    if suffix in _CSV_SUFFIXES:
        sep = _CSV_SUFFIXES[suffix] if separator is None else separator
        _check_unique_names(path, _header(path, sep))
        return pl.scan_csv(path, separator=sep, schema_overrides=schema)
    if suffix not in (*_NDJSON_SUFFIXES, *_PARQUET_SUFFIXES):
        known = ", ".join([*_CSV_SUFFIXES, *_NDJSON_SUFFIXES, *_PARQUET_SUFFIXES])
        raise CLIError(f"cannot read {str(path)!r}: unsupported file type {suffix or '(no suffix)'!r} (use {known})")
    for option, value in (("--separator", separator), ("--schema", schema)):
        if value:
            raise CLIError(f"{option} applies only to CSV input, not to {path}")
    if suffix in _NDJSON_SUFFIXES:
        return pl.scan_ndjson(path)
    _check_unique_names(path, _parquet_names(path))
    return pl.scan_parquet(path)


def _check_separator(separator: str | None) -> str | None:
    if separator is None:
        return None
    separator = {"\\t": "\t", "tab": "\t"}.get(separator, separator)
    if len(separator.encode()) != 1:
        raise CLIError(f"--separator must be a single one-byte character (found {separator!r})")
    return separator


#: Query-string keys of a database URI whose values are secrets (``?password=...``, ``sslpassword``, ``pwd``,
#: ``access_token``, ``api_key``, ...), matched anywhere in the key, case-insensitively.
_SECRET_KEY = re.compile(r"pass|pwd|secret|token|key|credential|auth", re.IGNORECASE)


def _uri_secrets(uri: str) -> set[str]:
    """The secrets written in ``uri``: the password of its user info (``user:password@``; read up to the last
    ``@`` before the path, and up to the last ``@`` before the query, so that an unencoded ``/``, ``?`` or ``@``
    in it is still found) and the values of its secret query parameters, each also percent-decoded."""
    from urllib.parse import unquote, unquote_plus

    rest = uri.partition("://")[2] or uri
    head, _, query = rest.partition("?")
    found = []
    for part in (rest.partition("/")[0], head):
        userinfo = part[: part.rfind("@")] if "@" in part else ""
        if ":" in userinfo:
            found.append(userinfo.partition(":")[2])
    for pair in re.split(r"[&;]", query.partition("#")[0]):
        key, sep, value = pair.partition("=")
        if sep and _SECRET_KEY.search(unquote_plus(key)):
            found.append(value)
    return {form for value in found for form in (value, unquote(value), unquote_plus(value)) if form}


def _redacted(text: str, uri: str | None = None) -> str:
    """``text`` with every secret of the database URI ``uri`` (default: ``text`` itself) replaced by ``***``.

    ``postgresql://me:secret@host/db`` → ``postgresql://me:***@host/db``, ``...db?password=secret&sslmode=require``
    → ``...db?password=***&sslmode=require``; a driver's message that quotes the URI, or only the password, is
    redacted with ``uri``. Every message of the command that echoes a URI goes through this one helper.
    """
    for secret in sorted(_uri_secrets(text if uri is None else uri), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _sqlite_file(uri: str) -> Path | None:
    """The database file of an ``sqlite://`` URI (``sqlite:///abs/path.db``, ``sqlite://relative.db``)."""
    scheme, sep, rest = uri.partition("://")
    return Path(rest.split("?", 1)[0]) if sep and scheme.lower() == "sqlite" and rest else None


def _input_files(args: argparse.Namespace) -> list[Path]:
    """The files the command reads (PATH, or the SQLite database of --uri): --output must be none of them."""
    if args.path is not None:
        return [args.path]
    file = None if args.uri is None else _sqlite_file(args.uri)
    return [] if file is None else [file]


def _read_database(uri: str, query: str) -> pl.LazyFrame:
    """The rows of ``query`` on the database at ``uri``, with ``pl.read_database_uri`` (ConnectorX).

    The result is read into memory (a database cursor is not a lazy scan); the query should select the user
    and item columns only. An ``sqlite://`` file must exist (ConnectorX would create an empty one).
    """
    import importlib.util

    if importlib.util.find_spec("connectorx") is None:
        raise CLIError(f"--uri needs the ConnectorX database driver, which is not installed: {_SQL_EXTRA}")
    scheme, sep, rest = uri.partition("://")
    if not sep or not scheme or not rest:
        raise CLIError(f"--uri must be a database URI such as sqlite://path/to.db (found {_redacted(uri)!r})")
    file = _sqlite_file(uri)
    if file is not None and not file.is_file():
        # ConnectorX reads sqlite:// + path: sqlite:///events.db is /events.db (SQLAlchemy's would be relative)
        hint = f" (for ./{file.name} write sqlite://{file.name})" if Path(file.name).is_file() else ""
        raise CLIError(f"--uri {_redacted(uri)!r}: SQLite database file {str(file)!r} not found{hint}")
    try:
        return pl.read_database_uri(query, uri).lazy()
    except Exception as err:  # ConnectorX raises RuntimeError/ValueError/panics with the database's message
        message = _redacted(_one_line(err), uri)  # a driver may quote the URI, or its password
        raise CLIError(f"cannot read --query from {_redacted(uri)!r}: {message}") from err


def _check_frame(
    lf: pl.LazyFrame,
    label: str,
    user: str,
    item: str | tuple[str, ...],
    schema: dict[str, type[pl.DataType]] | None,
) -> _Input:
    """Check the columns of ``lf`` and their dtypes, and count its rows (and rows with a null user or item).

    A composite key's columns (``item``, a tuple) are each checked as an item column is; a null in any of them
    drops the row. In a float user or item column (the dtype, public) NaN is read as null: such a row is dropped
    and counted with the null rows (NaN is a missing value; grouped, all NaN user ids would be one "user" holding
    many people's rows, and a NaN item could be released).
    """
    keys = (item,) if isinstance(item, str) else item
    if user in keys:
        raise CLIError(f"--user and --item must name different columns (both are {user!r})")
    try:
        columns = lf.collect_schema()
    except pl.exceptions.NoDataError:
        raise CLIError(f"{label} has no rows") from None
    except (pl.exceptions.PolarsError, OSError) as err:
        raise CLIError(f"cannot read {label!r}: {_one_line(err)}") from err
    missing = [c for c in (user, *keys) if c not in columns]
    if missing:
        names = ("column " if len(missing) == 1 else "columns ") + " and ".join(repr(c) for c in missing)
        raise CLIError(f"{names} not found in {label}; its columns are {columns.names()} (choose with --user/--item)")
    unknown = [c for c in schema or {} if c not in columns]
    if unknown:
        raise CLIError(f"--schema names column(s) {unknown} not in {label}; its columns are {columns.names()}")
    for option, column in (("--user", user), *(("--item", key) for key in keys)):
        if columns[column] == pl.Null:
            raise CLIError(f"{option} column {column!r} of {label} must have values (found dtype Null: all null)")
    floats = [column for column in (user, *keys) if columns[column].is_float()]
    lf = lf.select(user, *keys).with_columns(pl.col(column).fill_nan(None) for column in floats)
    try:
        null_row = pl.any_horizontal(pl.col(user, *keys).is_null())
        counts = lf.select(rows=pl.len(), null_rows=null_row.sum()).collect()
    except (pl.exceptions.PolarsError, OSError) as err:
        hint = " (check --schema)" if schema else ""
        raise CLIError(f"cannot read {label!r}: {_one_line(err)}{hint}") from err
    # no rows, or no row with both a user and an item, is a data set like any other (its neighbour holds one
    # user): the release runs, and releases nothing but noise can put there
    return _Input(lf, label, int(counts["rows"][0]), int(counts["null_rows"][0]), demo=False, floats=bool(floats))


def _open_checked(
    path: Path,
    separator: str | None,
    user: str,
    item: str | tuple[str, ...],
    schema: dict[str, type[pl.DataType]] | None,
) -> _Input:
    """Scan ``path``, check its columns and their dtypes, and count its rows (and rows with a null user or item).

    A CSV's user and item columns are read as String unless ``schema`` says otherwise: guessing their types
    would merge ids such as ``007`` and ``7`` (two items into one; two users into one "user" holding several
    people's rows under one person's bound). The count parses both columns in full, so a value
    that does not fit a ``schema`` dtype fails here, before any measurement is invoked. A composite key's
    columns (``item``, a tuple) are each read and checked as an item column is; a null in any of them drops
    the row.
    """
    keys = (item,) if isinstance(item, str) else item
    overrides = dict(schema or {})
    if _suffix(path) in _CSV_SUFFIXES:
        overrides = dict.fromkeys((user, *keys), pl.String) | overrides
    return _check_frame(_scan(path, separator, overrides), str(path), user, item, schema)


def _read_input(args: argparse.Namespace) -> _Input:
    """Open PATH lazily, or run --query on --uri (or draw the demo), check its columns, their dtypes and its
    rows (not a release)."""
    user, item = args.user, args.item
    if user == item:
        raise CLIError(f"--user and --item must name different columns (both are {user!r})")
    if args.uri is not None:
        if args.schema is not None or args.separator is not None:
            raise CLIError("--schema and --separator apply only to CSV input, not to --uri (the database has types)")
        label = f"--query on {_redacted(args.uri)}"
        return _check_frame(_read_database(args.uri, args.query), label, user, item, None)
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
    if not path.exists():
        raise CLIError(f"input file not found: {str(path)!r}")
    if path.is_dir():
        raise CLIError(f"input {str(path)!r} is a directory, expected a CSV, NDJSON or Parquet file")
    return _open_checked(path, _check_separator(args.separator), user, item, args.schema)


def _check_source(args: argparse.Namespace) -> None:
    """The data options agree (before any work): PATH or --uri with --query, demo options only for the demo."""
    if args.uri is not None and args.path is not None:
        raise CLIError("give PATH or --uri, not both")
    if (args.uri is None) != (args.query is None):
        raise CLIError("--uri and --query go together: --uri names the database, --query selects the rows")
    if args.uri is not None or args.path is not None:
        for option in ("demo_users", "seed"):
            if getattr(args, option) is not None:
                raise CLIError(f"--{option.replace('_', '-')} applies only to the demo (without PATH or --uri)")


def _output_format(path: Path | None, format_: str | None) -> tuple[str, bool]:
    """The format of the release and whether it is gzip-compressed: ``--format``, else the suffix of ``path``
    (a trailing ``.gz`` compresses a text format); stdout (``path`` None) is CSV unless ``--format`` says."""
    if path is None:
        if format_ == "parquet":
            raise CLIError("--output - writes text: --format parquet needs a file")
        return format_ or "csv", False
    suffixes = [s.lower() for s in path.suffixes]
    compressed = bool(suffixes) and suffixes[-1] == ".gz"
    suffix = suffixes[-2] if compressed and len(suffixes) >= 2 else (suffixes[-1] if suffixes else "")
    found = _OUTPUT_SUFFIXES.get(suffix)
    if format_ is None and found is None:
        known = ", ".join([*_OUTPUT_SUFFIXES, ".csv.gz", ".tsv.gz", ".json.gz", ".ndjson.gz"])
        raise CLIError(
            f"cannot write {str(path)!r}: unsupported output type {_suffix(path) or '(no suffix)'!r} "
            f"(use {known}, or --format {{{','.join(_OUTPUT_FORMATS)}}})"
        )
    chosen = format_ or found
    assert chosen is not None
    if compressed and chosen == "parquet":
        raise CLIError(f"cannot write {str(path)!r}: Parquet is compressed inside; drop the .gz")
    return chosen, compressed


def _serialise(released: pl.DataFrame, format_: str, file: Path | None = None) -> str | None:
    """Write ``released`` in ``format_`` to ``file``, or return it as text when ``file`` is None."""
    if format_ == "parquet":
        assert file is not None  # refused for stdout by _output_format
        released.write_parquet(file)
        return None
    if format_ in ("csv", "tsv"):
        return released.write_csv(file, separator="\t" if format_ == "tsv" else ",")
    if format_ == "json":
        if file is None:
            return released.write_json()
        released.write_json(file)
        return None
    return released.write_ndjson(file)


def _holds_binary(dtype: PolarsDataType) -> bool:
    """Whether ``dtype`` is Binary or nests a Binary."""
    if isinstance(dtype, pl.Struct):
        return any(_holds_binary(f.dtype) for f in dtype.fields)
    if isinstance(dtype, (pl.List, pl.Array)):
        return _holds_binary(dtype.inner)
    return dtype == pl.Binary


@dataclass(frozen=True)
class _Output:
    """Where the release goes: ``path``, through ``temp``, a file created beside it before the release; or
    stdout (``path`` and ``temp`` None).

    Creating ``temp`` early proves that the directory is writable before any budget is spent; the release is
    written to ``temp`` and renamed onto ``path`` (atomic on one file system), so ``path`` is either complete
    or untouched, and :meth:`discard` removes ``temp`` on any failure.
    """

    path: Path | None
    temp: Path | None
    format: str
    compressed: bool

    @property
    def name(self) -> str:
        return "stdout" if self.path is None else str(self.path)

    def check_schema(self, schema: pl.Schema) -> None:
        """Refuse, before the release, a CSV/TSV output of nested columns (which CSV cannot hold)."""
        nested = [name for name, dtype in schema.items() if dtype.is_nested()]
        if nested and self.format in ("csv", "tsv"):
            raise CLIError(
                f"cannot write column(s) {nested} ({schema[nested[0]]}) to {self.name} as {self.format.upper()}: "
                "use --format json or ndjson, or a .parquet file"
            )
        binary = [name for name, dtype in schema.items() if _holds_binary(dtype)]
        if binary and self.format != "parquet":  # Polars writes Binary to neither CSV nor JSON (it panics)
            raise CLIError(
                f"cannot write column(s) {binary} ({schema[binary[0]]}) to {self.name} as {self.format.upper()}: "
                "use a .parquet file"
            )

    def commit(self, released: pl.DataFrame, stdout: TextIO) -> None:
        if self.path is None or self.temp is None:
            try:
                text = _serialise(released, self.format)
            except pl.exceptions.PolarsError as err:
                raise CLIError(f"cannot write the release to stdout: {_one_line(err)}") from err
            assert text is not None
            stdout.write(text if text.endswith("\n") or not text else text + "\n")
            stdout.flush()
            return
        try:
            if self.compressed:
                text = _serialise(released, self.format)
                assert text is not None
                with gzip.open(self.temp, "wb") as handle:
                    handle.write(text.encode())
            else:
                _serialise(released, self.format, self.temp)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self.temp, 0o666 & ~umask)  # the mode of a plain new file, not the temporary's 0600
            os.replace(self.temp, self.path)
        except (OSError, pl.exceptions.PolarsError) as err:
            raise CLIError(f"cannot write {str(self.path)!r}: {_one_line(err)}") from err

    def discard(self) -> None:
        if self.temp is not None:
            self.temp.unlink(missing_ok=True)


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same resolved path, or a hard link / symlink to it."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def _prepare_output(
    path: Path | None, inputs: Sequence[Path], *, force: bool, format_: str | None = None
) -> _Output | None:
    """Check, before any work, that the release can be written to ``path`` without losing data.

    ``path`` ``-`` is stdout (CSV unless ``format_``). Otherwise refuses an input file (even with ``--force``),
    an existing file without ``--force``, a directory, an unknown suffix (unless ``format_``), and a missing
    or unwritable directory; then creates the temporary file beside ``path``.
    """
    if path is None:
        if format_ is not None:
            raise CLIError("--format applies to --output (a file, or - for stdout)")
        return None
    if str(path) == _STDOUT:
        return _Output(None, None, *_output_format(None, format_))
    path = path.expanduser()
    format_, compressed = _output_format(path, format_)
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
            return _Output(path, Path(temp.name), format_, compressed)
    except OSError as err:
        raise CLIError(f"cannot write {str(path)!r}: {_one_line(err)}") from err
