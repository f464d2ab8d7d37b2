"""The loaders of the public user → item-set datasets used in the paper's experiments (the package's docstring
describes what they return)."""

from __future__ import annotations

import gzip
import textwrap
from typing import Any, Literal

import polars as pl

from opendp_wgm._docs import fill_doc
from opendp_wgm._validation import _check_choice
from opendp_wgm.datasets._read import (
    PathLike,
    _explode_tokens,
    _finish,
    _is_gzip,
    _read_delimited,
    _resolve,
    _resolve_many,
    _tokens,
    _with_item_names,
)


def _load_table(
    path: PathLike, name: str, stem: str, columns: dict[str, Any], *, unique: bool,
    names: tuple[str, dict[str, Any]] | None = None,
) -> pl.DataFrame:
    """Dataset ``name``'s one delimited file ``stem[.gz]`` (``path``, or in it), its ``columns`` read by
    :func:`_read_delimited`; with ``names`` (the stem of a file next to it and how to read it), each integer item
    replaced by its name (:func:`_with_item_names`)."""
    file = _resolve(path, name, (f"{stem}.gz", stem))
    lf = _read_delimited(file, **columns)
    if names is not None:
        names_stem, options = names
        lf = _with_item_names(lf, _resolve(file.parent, name, (f"{names_stem}.gz", names_stem)), **options)
    return _finish(lf, unique=unique)


#: Width of a filled docstring line after the four spaces of the docstring's own indentation.
_DOC_WIDTH = 112


def _table_doc(directory: str, stem: str, counts: str, names: tuple[str, str, str] | None = None) -> str:
    """The Parameters and Returns sections of a loader of one file ``stem[.gz]`` of integer ids that holds no
    duplicate pairs; ``names`` = (what the names are, the stem of their file, one of them) adds ``item_names``."""
    parameters = [
        "path",
        f"    The ``{directory}`` directory, or ``{stem}[.gz]`` itself.",
        "unique",
        "    Drop duplicate (user, item) rows (there are none).",
    ]
    columns = "Columns ``user`` and ``item``, both ``Int64``."
    if names is not None:
        what, names_stem, noun = names
        parameters += ["item_names", *textwrap.wrap(
            f"Return {what} (``String``) from ``{names_stem}[.gz]`` instead of the integer ids (one-to-one: a {noun}"
            f' several ids share gets its id appended, ``"{noun.capitalize()} [#id]"``).',
            width=_DOC_WIDTH, initial_indent="    ", subsequent_indent="    ",
        )]
        columns = f"Columns ``user`` and ``item``, both ``Int64`` (``item`` a ``String`` {noun} with ``item_names``)."
    returns = ["polars.DataFrame", f"    {columns}", f"    {counts}"]
    return "\n".join(["Parameters", "----------", *parameters, "", "Returns", "-------", *returns])


def load_steam_200k(
    path: PathLike,
    *,
    unique: bool = True,
    include_play: bool = False,
    original_ids: bool = False,
    item_names: bool = False,
) -> pl.DataFrame:
    """Load Steam 200k (Kaggle tamber/steam-video-games, CaseRecommender re-indexing): user → purchased games.

    Reads ``game_purchase.dat.gz`` (tab-separated; ``User_ID``, ``Game_ID``, ``Purchase``).

    Parameters
    ----------
    path
        The ``steam_200k`` directory, or ``game_purchase.dat[.gz]`` itself.
    unique
        Drop duplicate (user, item) rows (the purchase file holds 707 duplicate lines, as the original).
    include_play
        Also read ``game_play.dat.gz`` from the same directory (every played game was purchased, so this adds
        rows but no new pairs).
    original_ids
        Map ``user`` to the original Steam user id (``Real_ID``, ``Int64``) and ``item`` to the game title
        (``String``) with ``user_info.dat.gz`` and ``item_info.dat.gz``; by default the re-indexed integer ids
        are returned (one-to-one with the originals, so every statistic is the same).
    item_names
        Map ``item`` to the game title (``String``) with ``item_info.dat.gz``, keeping the re-indexed user ids
        (the titles are one-to-one with the game ids). ``original_ids`` implies it.

    Returns
    -------
    polars.DataFrame
        Columns ``user`` and ``item`` (``Int64`` ids by default). 12,393 users, 5,155 items and 128,804
        distinct pairs (129,511 purchase rows).
    """
    purchase = _resolve(path, "steam_200k", ("game_purchase.dat.gz", "game_purchase.dat"))
    lf = _read_delimited(purchase, user="User_ID", item="Game_ID")
    if include_play:
        play = _resolve(purchase.parent, "steam_200k", ("game_play.dat.gz", "game_play.dat"))
        lf = pl.concat([lf, _read_delimited(play, user="User_ID", item="Game_ID")])
    if original_ids:
        users = _resolve(purchase.parent, "steam_200k", ("user_info.dat.gz", "user_info.dat"))
        items = _resolve(purchase.parent, "steam_200k", ("item_info.dat.gz", "item_info.dat"))
        user_map = _read_delimited(users, user="New_ID", item="Real_ID")  # (user = New_ID, item = Real_ID)
        item_map = pl.read_csv(items, separator="\t", quote_char=None, schema_overrides={"Game_ID": pl.Int64})
        lf = (
            lf.join(user_map.rename({"item": "real_id"}), on="user", how="left", maintain_order="left")
            .join(item_map.lazy(), left_on="item", right_on="Game_ID", how="left", maintain_order="left")
            .select(pl.col("real_id").alias("user"), pl.col("Game Name").alias("item"))
        )
    elif item_names:
        items = _resolve(purchase.parent, "steam_200k", ("item_info.dat.gz", "item_info.dat"))
        lf = _with_item_names(lf, items, id_column="Game_ID", name_column="Game Name")
    return _finish(lf, unique=unique)


def load_imdb_50k(path: PathLike, *, unique: bool = True) -> pl.DataFrame:
    """Load IMDB 50k movie reviews: each review is a user, its words are the items.

    Reads ``imdb_50k_reviews.csv.gz`` (columns ``review_id`` and ``text``). Tokenisation follows the shared
    data README: replace ``<br />`` by a space, lower-case, take the tokens matching
    ``[a-z0-9]+(?:'[a-z0-9]+)*``, then explode into rows.

    Parameters
    ----------
    path
        The ``imdb_50k`` directory, or ``imdb_50k_reviews.csv[.gz]`` itself.
    unique
        Drop repeated words within a review; with ``False`` every token occurrence is a row.

    Returns
    -------
    polars.DataFrame
        Columns ``user`` (``review_id``, ``String``) and ``item`` (word, ``String``). 50,000 users,
        111,611 items, 6,992,030 distinct pairs. Takes about 2 s.
    """
    file = _resolve(path, "imdb_50k", ("imdb_50k_reviews.csv.gz", "imdb_50k_reviews.csv"))
    reviews = pl.read_csv(
        file, columns=["review_id", "text"], schema_overrides={"review_id": pl.String, "text": pl.String}
    )
    documents = reviews.select(
        pl.col("review_id").alias("user"),
        _tokens(pl.col("text").str.replace_all("<br />", " ", literal=True)).alias("item"),
    )
    return _explode_tokens(documents, unique=unique)


def load_amazon_magazine_subscriptions(path: PathLike, *, unique: bool = True) -> pl.DataFrame:
    """Load Amazon Review Data (2018) Magazine_Subscriptions ratings: reviewer → rated magazines.

    Reads ``Magazine_Subscriptions.csv.gz`` (no header; columns item (ASIN), user (reviewerID), rating,
    timestamp: note that the item comes first). All ratings are kept.

    Parameters
    ----------
    path
        The ``amazon_magazine_subscriptions`` directory, or ``Magazine_Subscriptions.csv[.gz]`` itself.
    unique
        Drop duplicate (user, item) rows.

    Returns
    -------
    polars.DataFrame
        Columns ``user`` and ``item``, both ``String``. 72,098 users, 2,428 items, 88,318 distinct pairs
        (89,689 rows).
    """
    columns = {"user": 1, "item": 0, "dtype": pl.String, "separator": ",", "quote_char": '"'}
    return _load_table(path, "amazon_magazine_subscriptions", "Magazine_Subscriptions.csv", columns, unique=unique)


@fill_doc(table=_table_doc(
    "movielens_100k", "u.data", "943 users, 1,682 items, 100,000 pairs.", names=("movie titles", "u.item", "title")
))
def load_movielens_100k(path: PathLike, *, unique: bool = True, item_names: bool = False) -> pl.DataFrame:
    """Load MovieLens 100K: user → rated movies (ratings of any value).

    Reads ``u.data.gz`` (tab-separated, no header: user id, item id, rating, timestamp).

    {table}
    """
    # u.item: pipe-separated, no header, Latin-1
    names = ("u.item", {"id_column": 0, "name_column": 1, "separator": "|", "encoding": "latin-1"})
    return _load_table(
        path, "movielens_100k", "u.data", {"user": 0, "item": 1}, unique=unique, names=names if item_names else None
    )


@fill_doc(table=_table_doc(
    "movielens_latest_small", "ratings.csv", "610 users, 9,724 items, 100,836 pairs.",
    names=("movie titles", "movies.csv", "title"),
))
def load_movielens_latest_small(path: PathLike, *, unique: bool = True, item_names: bool = False) -> pl.DataFrame:
    """Load MovieLens Latest Small (ml-latest-small): user → rated movies.

    Reads ``ratings.csv.gz`` (header ``userId,movieId,rating,timestamp``).

    {table}
    """
    csv = {"separator": ",", "quote_char": '"'}
    names = ("movies.csv", {"id_column": "movieId", "name_column": "title", **csv})
    return _load_table(
        path, "movielens_latest_small", "ratings.csv", {"user": "userId", "item": "movieId", **csv}, unique=unique,
        names=names if item_names else None,
    )


@fill_doc(table=_table_doc(
    "lastfm_hetrec2011", "user_artists.dat", "1,892 users, 17,632 items, 92,834 pairs.",
    names=("artist names", "artists.dat", "name"),
))
def load_lastfm_hetrec2011(path: PathLike, *, unique: bool = True, item_names: bool = False) -> pl.DataFrame:
    """Load Last.fm HetRec 2011: user → top-50 listened artists.

    Reads ``user_artists.dat.gz`` (tab-separated, header ``userID, artistID, weight``, CRLF line ends).

    {table}
    """
    names = ("artists.dat", {"id_column": "id", "name_column": "name"})
    return _load_table(
        path, "lastfm_hetrec2011", "user_artists.dat", {"user": "userID", "item": "artistID"}, unique=unique,
        names=names if item_names else None,
    )


@fill_doc(table=_table_doc("fimi_retail", "retail.dat", "88,162 users, 16,470 items, 908,576 pairs."))
def load_fimi_retail(path: PathLike, *, unique: bool = True) -> pl.DataFrame:
    """Load the FIMI ``retail`` market baskets: each basket (line) is a user, its product ids are the items.

    Reads ``retail.dat.gz``: one basket per line, space-separated integer item ids. ``user`` is the 0-based
    line number; empty tokens are dropped.

    {table}
    """
    file = _resolve(path, "fimi_retail", ("retail.dat.gz", "retail.dat"))
    opener = gzip.open if _is_gzip(file) else open
    with opener(file, "rb") as handle:
        text = handle.read().decode("utf-8")
    # One string, split into lines and tokens by Polars, so the user id is exactly the line number.
    lf = (
        pl.LazyFrame({"item": [text]})
        .select(pl.col("item").str.split("\n"))
        .explode("item")
        .with_row_index("user")
        .select(
            pl.col("user").cast(pl.Int64),
            pl.col("item").str.strip_chars().str.split(" "),
        )
        .explode("item")
        .filter(pl.col("item").str.len_bytes() > 0)
        .with_columns(pl.col("item").cast(pl.Int64))
    )
    return _finish(lf, unique=unique)


def load_reddit_pushshift(
    path: PathLike,
    *,
    unique: bool = True,
    kind: Literal["comments", "submissions"] = "comments",
) -> pl.DataFrame:
    """Load the Pushshift Reddit dumps: author → words written.

    Reads the newline-delimited JSON dumps: for ``kind="comments"`` every ``RC_*.jsonl.gz`` file and the
    ``body`` field; for ``kind="submissions"`` every ``*_submissions_*.jsonl.gz`` (or ``RS_*``) file and
    ``title + " " + selftext``. Authors ``[deleted]`` (and missing authors) are dropped. Text is lower-cased
    and tokenised with ``[a-z0-9]+(?:'[a-z0-9]+)*`` (values such as ``[removed]`` become words, as in the
    README statistics).

    Parameters
    ----------
    path
        The ``reddit_pushshift`` directory, or one ``.jsonl[.gz]`` dump (``kind`` then says which text
        fields to read).
    unique
        Drop repeated (author, word) rows, across all of an author's posts. With ``False`` every token
        occurrence is a row (the README's "rows before dedup" instead counts distinct words per post:
        128,589 for comments, 196,977 for submissions).
    kind : {'comments', 'submissions'}
        Which dumps to read; they are separate datasets.

    Returns
    -------
    polars.DataFrame
        Columns ``user`` (author) and ``item`` (word), both ``String``. Comments: 969 users, 14,947 items,
        93,983 distinct pairs; submissions: 7,811 users, 11,474 items, 181,223 distinct pairs.
    """
    patterns: tuple[str, ...]
    fields: tuple[str, ...]
    if kind == "comments":
        patterns, fields = ("RC_*.jsonl.gz", "RC_*.jsonl"), ("body",)
    elif kind == "submissions":
        patterns = ("*_submissions_*.jsonl.gz", "*_submissions_*.jsonl", "RS_*.jsonl.gz", "RS_*.jsonl")
        fields = ("title", "selftext")
    else:
        _check_choice("kind", kind, ("comments", "submissions"))
    files = _resolve_many(path, "reddit_pushshift", patterns)
    schema = {"author": pl.String, **dict.fromkeys(fields, pl.String)}
    frames = []
    for file in files:  # a handful of files, not rows
        if _is_gzip(file):
            with gzip.open(file, "rb") as handle:
                # a GzipFile is a binary file object; polars annotates the source as typing.IO only
                frames.append(pl.read_ndjson(handle, schema=schema))  # type: ignore[arg-type]
        else:
            frames.append(pl.read_ndjson(file, schema=schema))
    text = pl.concat_str([pl.col(field).fill_null("") for field in fields], separator=" ")
    documents = (
        pl.concat(frames)
        .filter(pl.col("author").is_not_null() & (pl.col("author") != "[deleted]"))
        .select(pl.col("author").alias("user"), _tokens(text).alias("item"))
    )
    return _explode_tokens(documents, unique=unique)


@fill_doc(table=_table_doc("bookcrossing_caserec", "book_history.dat", "2,946 users, 17,384 items, 272,678 pairs."))
def load_bookcrossing_caserec(path: PathLike, *, unique: bool = True) -> pl.DataFrame:
    """Load Book-Crossing (CaseRecommender's filtered copy): user → accessed books.

    Reads ``book_history.dat.gz`` (tab-separated, header ``user, item, accessed``).

    {table}
    """
    columns = {"user": "user", "item": "item"}
    return _load_table(path, "bookcrossing_caserec", "book_history.dat", columns, unique=unique)


@fill_doc(table=_table_doc(
    "anime_caserec", "anime_history.dat", "5,000 users, 7,390 items, 520,609 pairs.",
    names=("anime titles", "anime_info.dat", "title"),
))
def load_anime_caserec(path: PathLike, *, unique: bool = True, item_names: bool = False) -> pl.DataFrame:
    """Load the Anime recommendations sample (CaseRecommender, 5k users): user → watched anime.

    Reads ``anime_history.dat.gz`` (tab-separated, header ``User_ID, Anime_ID, Feedback``).

    {table}
    """
    names = ("anime_info.dat", {"id_column": "anime_ids", "name_column": "name"})
    return _load_table(
        path, "anime_caserec", "anime_history.dat", {"user": "User_ID", "item": "Anime_ID"}, unique=unique,
        names=names if item_names else None,
    )


def load_retailrocket_caserec(path: PathLike, *, unique: bool = True) -> pl.DataFrame:
    """Load Retailrocket e-commerce events (CaseRecommender's filtered copy): visitor → products.

    Reads and concatenates ``view_ecommerce.dat.gz``, ``add_to_cart_ecommerce.dat.gz`` and
    ``purchase_ecommerce.dat.gz`` (tab-separated, header ``visitorid, itemid, event``). ``path`` must be the
    directory, or one of the three files (then only that file is read).

    Returns
    -------
    polars.DataFrame
        Columns ``user`` and ``item``, both ``Int64``. 3,431 users, 8,885 items, 79,595 distinct pairs.
    """
    files = _resolve_many(path, "retailrocket_caserec", ("*_ecommerce.dat.gz", "*_ecommerce.dat"))
    lf = pl.concat([_read_delimited(file, user="visitorid", item="itemid") for file in files])
    return _finish(lf, unique=unique)
