r"""Synthetic data and loaders for the public user → item-set datasets used in the paper's experiments.

Every loader returns a Polars ``DataFrame`` with two columns, ``user`` and ``item``, one row per
(user, item) occurrence. Ids keep their natural type: integers stay ``Int64``; text tokens, review ids,
Reddit authors and Amazon ids (ASINs, reviewer ids) are ``String``. With ``unique=True`` (the default)
duplicate (user, item) rows are dropped, so each user holds a *set*; the first occurrence is kept, in file
order.

``path`` is either the dataset's directory, laid out as in the shared data folder (``<data>/<name>/``), or the
raw file itself (gzip-compressed or not). The raw formats are described in the shared data folder's
``README.md`` and in each directory's ``SOURCE.md``. The data is not part of this package: several licenses
forbid redistribution.

Unlike the paper's reference ``datasets.py``, the loaders read the raw files with
Polars (no Python loop over rows), need neither NLTK nor tqdm, and return a table rather than a list of lists.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from opendp_wgm.datasets._read import TOKEN_PATTERN as TOKEN_PATTERN
from opendp_wgm.datasets._read import PathLike
from opendp_wgm.datasets.loaders import (
    load_amazon_magazine_subscriptions,
    load_anime_caserec,
    load_bookcrossing_caserec,
    load_fimi_retail,
    load_imdb_50k,
    load_lastfm_hetrec2011,
    load_movielens_100k,
    load_movielens_latest_small,
    load_reddit_pushshift,
    load_retailrocket_caserec,
    load_steam_200k,
)
from opendp_wgm.datasets.synthetic import synthetic_zipf

__all__ = [
    "DATASETS",
    "load",
    "load_amazon_magazine_subscriptions",
    "load_anime_caserec",
    "load_bookcrossing_caserec",
    "load_fimi_retail",
    "load_imdb_50k",
    "load_lastfm_hetrec2011",
    "load_movielens_100k",
    "load_movielens_latest_small",
    "load_reddit_pushshift",
    "load_retailrocket_caserec",
    "load_steam_200k",
    "synthetic_zipf",
]


#: Loader of each dataset, by the name of its directory in the shared data folder.
DATASETS: dict[str, Callable[..., pl.DataFrame]] = {
    "steam_200k": load_steam_200k,
    "imdb_50k": load_imdb_50k,
    "amazon_magazine_subscriptions": load_amazon_magazine_subscriptions,
    "reddit_pushshift": load_reddit_pushshift,
    "movielens_100k": load_movielens_100k,
    "movielens_latest_small": load_movielens_latest_small,
    "lastfm_hetrec2011": load_lastfm_hetrec2011,
    "fimi_retail": load_fimi_retail,
    "bookcrossing_caserec": load_bookcrossing_caserec,
    "anime_caserec": load_anime_caserec,
    "retailrocket_caserec": load_retailrocket_caserec,
}


def load(name: str, data_dir: PathLike, **options: Any) -> pl.DataFrame:
    """Load dataset ``name`` from ``<data_dir>/<name>``.

    Parameters
    ----------
    name
        A key of :data:`DATASETS`, e.g. ``"steam_200k"``.
    data_dir
        The folder holding one directory per dataset (the shared data folder).
    **options
        Passed to the loader, e.g. ``unique=False`` or ``kind="submissions"`` for ``reddit_pushshift``.

    Returns
    -------
    polars.DataFrame
        Columns ``user`` and ``item``.

    Raises
    ------
    ValueError
        If ``name`` is not a known dataset (the message lists the known ones).
    FileNotFoundError
        If ``<data_dir>/<name>`` or its raw file is missing (the message says which path and which file).

    Examples
    --------
    >>> load("no_such_set", "data")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown dataset 'no_such_set'; known datasets: ['amazon_magazine_subscriptions', ...]
    """
    if name not in DATASETS:
        msg = f"unknown dataset {name!r}; known datasets: {sorted(DATASETS)}"
        raise ValueError(msg)
    return DATASETS[name](Path(data_dir).expanduser() / name, **options)
