"""The loaders' shared readers: resolving a dataset's raw file, reading delimited text, tokenising documents."""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl

#: Token pattern of the shared data README: a run of letters/digits, with inner apostrophes ("don't").
TOKEN_PATTERN = r"[a-z0-9]+(?:'[a-z0-9]+)*"

PathLike = str | os.PathLike[str]

def _resolve_many(path: PathLike, name: str, patterns: Sequence[str]) -> list[Path]:
    """The raw files of dataset ``name``: ``path`` itself if it is a file, else the files in directory
    ``path`` matching the first of ``patterns`` (glob patterns or plain file names) that matches any."""
    p = Path(path).expanduser()
    if p.is_file():
        return [p]
    expected = " or ".join(repr(f) for f in patterns)
    if p.is_dir():
        for pattern in patterns:
            found = sorted(f for f in p.glob(pattern) if f.is_file())
            if found:
                return found
        msg = f"no `{name}` raw file in {str(p)!r}: expected {expected} there (shared data folder layout)"
        raise FileNotFoundError(msg)
    msg = (
        f"`{name}` data not found: {str(p)!r} does not exist"
        f" (expected the dataset's directory holding {expected}, or that file)"
    )
    raise FileNotFoundError(msg)


def _resolve(path: PathLike, name: str, filenames: Sequence[str]) -> Path:
    """The one raw file of dataset ``name``: ``path`` itself, or the first of ``filenames`` inside it."""
    return _resolve_many(path, name, filenames)[0]


def _finish(frame: pl.LazyFrame | pl.DataFrame, *, unique: bool) -> pl.DataFrame:
    """Select ``user``, ``item``, drop nulls, optionally drop duplicate pairs (keeping file order)."""
    lf = frame.lazy().select("user", "item").drop_nulls()
    if unique:
        lf = lf.unique(maintain_order=True)
    return lf.collect()


def _read_delimited(
    file: Path,
    *,
    user: str | int,
    item: str | int,
    dtype: type[pl.DataType] = pl.Int64,
    separator: str = "\t",
    quote_char: str | None = None,
) -> pl.LazyFrame:
    """Read two columns of a (possibly gzip-compressed) delimited file, renamed to ``user`` and ``item``.

    ``user`` and ``item`` are both header names (the file has a header), or both 0-based positions (it has none).
    """
    if isinstance(user, str) and isinstance(item, str):
        frame = pl.read_csv(
            file,
            separator=separator,
            quote_char=quote_char,
            columns=[user, item],
            schema_overrides={user: dtype, item: dtype},
        )
        frame = frame.rename({user: "user", item: "item"})
    elif isinstance(user, int) and isinstance(item, int):
        frame = pl.read_csv(
            file, separator=separator, quote_char=quote_char, has_header=False, infer_schema=False
        )
        frame = frame.select(pl.nth(user).cast(dtype).alias("user"), pl.nth(item).cast(dtype).alias("item"))
    else:  # pragma: no cover - a bug guard: the loaders pass two names or two positions
        raise TypeError(f"`user` and `item` must both be names or both be positions (found {user!r}, {item!r})")
    return frame.lazy()


def _with_item_names(
    lf: pl.LazyFrame,
    names_file: Path,
    *,
    id_column: str | int,
    name_column: str | int,
    separator: str = "\t",
    quote_char: str | None = None,
    encoding: str = "utf-8",
) -> pl.LazyFrame:
    """Replace the integer ``item`` of ``lf`` by its name read from ``names_file`` (a delimited file with a
    header when the columns are names, without one when they are 0-based positions).

    Names stay one-to-one with the ids, so every statistic is unchanged: a name that several ids share
    (MovieLens lists a few films twice) gets its id appended, ``"Emma (1996) [#838]"``, and an id the file
    does not name keeps its number as text.
    """
    opener = gzip.open if _is_gzip(names_file) else open
    with opener(names_file, "rb") as handle:
        text = handle.read().decode(encoding)
    header = isinstance(id_column, str)
    table = pl.read_csv(
        text.encode(), separator=separator, quote_char=quote_char, has_header=header, infer_schema=False
    )
    ids = pl.col(id_column) if isinstance(id_column, str) else pl.nth(id_column)
    names = pl.col(name_column) if isinstance(name_column, str) else pl.nth(name_column)
    table = table.select(ids.cast(pl.Int64).alias("_id"), names.alias("_name"))
    table = table.with_columns(
        pl.when(pl.col("_name").is_duplicated())
        .then(pl.format("{} [#{}]", "_name", "_id"))
        .otherwise(pl.col("_name"))
        .alias("_name")
    )
    return (
        lf.join(table.lazy(), left_on="item", right_on="_id", how="left", maintain_order="left")
        .with_columns(pl.col("_name").fill_null(pl.col("item").cast(pl.String)).alias("item"))
        .drop("_name")
    )


def _tokens(text: pl.Expr) -> pl.Expr:
    """Lower-case ``text`` and extract the README's tokens as a list per row."""
    return text.str.to_lowercase().str.extract_all(TOKEN_PATTERN)


def _explode_tokens(documents: pl.DataFrame, *, unique: bool) -> pl.DataFrame:
    """``documents`` has ``user`` and ``item`` = list of tokens; return one row per (user, token)."""
    if not unique:
        return _finish(documents.lazy().explode("item"), unique=False)
    # Deduplicate inside each document first (cheap, per row); a global pass is needed only when a user
    # has several documents.
    lf = documents.lazy().with_columns(pl.col("item").list.unique(maintain_order=True)).explode("item")
    if documents.get_column("user").is_unique().all():
        return _finish(lf, unique=False)
    return _finish(lf, unique=True)


def _is_gzip(file: Path) -> bool:
    with open(file, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"
