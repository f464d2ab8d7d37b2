"""Tests for `opendp_wgm.datasets`: the synthetic generator and the loaders of the shared data folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from opendp_wgm import datasets
from opendp_wgm.datasets import (
    DATASETS,
    load,
    load_imdb_50k,
    load_reddit_pushshift,
    load_steam_200k,
    synthetic_zipf,
)


# ---------------------------------------------------------------------------------------------------------
# synthetic_zipf
# ---------------------------------------------------------------------------------------------------------
class TestSyntheticZipf:
    def test_shape_and_dtypes(self) -> None:
        df = synthetic_zipf(50, 7, seed=1)
        assert df.shape == (350, 2)
        assert df.schema == pl.Schema({"user": pl.Int64, "item": pl.Int64})
        assert df.get_column("user").to_list() == np.repeat(np.arange(50), 7).tolist()
        assert df.get_column("item").min() >= 1
        assert df.null_count().sum_horizontal().item() == 0

    def test_column_names(self) -> None:
        df = synthetic_zipf(2, 3, seed=0, user="u", item="x")
        assert df.columns == ["u", "x"]

    def test_seed_determinism(self) -> None:
        assert synthetic_zipf(100, 5, seed=7).equals(synthetic_zipf(100, 5, seed=7))
        assert not synthetic_zipf(100, 5, seed=7).equals(synthetic_zipf(100, 5, seed=8))
        rng = np.random.default_rng(3)
        assert synthetic_zipf(10, 2, seed=rng).height == 20

    def test_duplicates_kept_and_exponent_shapes_the_tail(self) -> None:
        heavy = synthetic_zipf(2000, 20, exponent=1.1, seed=0)
        light = synthetic_zipf(2000, 20, exponent=3.0, seed=0)
        assert heavy.height == light.height == 40000
        assert light.unique().height < light.height  # raw draws: repeated items inside a user are kept
        assert heavy.get_column("item").n_unique() > light.get_column("item").n_unique()
        # P(X = 1) = 1 / zeta(3) ~ 0.832 for s = 3
        share = (light.get_column("item") == 1).mean()
        assert share == pytest.approx(0.8319, abs=0.01)

    @pytest.mark.parametrize(
        ("kwargs", "error", "message"),
        [
            (
                {"n_users": 0, "items_per_user": 1},
                ValueError,
                r"`n_users` must be an integer >= 1 \(found 0\)",
            ),
            ({"n_users": 1.5, "items_per_user": 1}, TypeError, r"`n_users` must be an integer"),
            (
                {"n_users": 1, "items_per_user": 0},
                ValueError,
                r"`items_per_user` must be an integer >= 1 \(found 0\)",
            ),
            (
                {"n_users": 1, "items_per_user": 1, "exponent": 1.0},
                ValueError,
                r"`exponent` must be in \(1.0, inf\)",
            ),
            (
                {"n_users": 1, "items_per_user": 1, "exponent": float("nan")},
                ValueError,
                r"`exponent` must be finite",
            ),
            (
                {"n_users": 1, "items_per_user": 1, "exponent": "2"},
                TypeError,
                r"`exponent` must be a real number",
            ),
            ({"n_users": 1, "items_per_user": 1, "user": "a", "item": "a"}, ValueError, r"`user` and `item` must be different columns \(found both 'a'\)"),
            ({"n_users": 1, "items_per_user": 1, "item": 0}, TypeError, r"`item` must be a non-empty column name \(found 0\)"),
        ],
    )
    def test_validation(self, kwargs: dict, error: type[Exception], message: str) -> None:
        with pytest.raises(error, match=message):
            synthetic_zipf(**kwargs)


# ---------------------------------------------------------------------------------------------------------
# loaders against the statistics table of shared/data/README.md
# ---------------------------------------------------------------------------------------------------------
# name, loader options, users, items, distinct pairs, rows with unique=False (None: not a README figure)
README_STATS = [
    ("steam_200k", {}, 12_393, 5_155, 128_804, 129_511),
    ("amazon_magazine_subscriptions", {}, 72_098, 2_428, 88_318, 89_689),
    ("reddit_pushshift", {}, 969, 14_947, 93_983, None),
    ("reddit_pushshift", {"kind": "submissions"}, 7_811, 11_474, 181_223, None),
    ("movielens_100k", {}, 943, 1_682, 100_000, 100_000),
    ("movielens_latest_small", {}, 610, 9_724, 100_836, 100_836),
    ("lastfm_hetrec2011", {}, 1_892, 17_632, 92_834, 92_834),
    ("fimi_retail", {}, 88_162, 16_470, 908_576, 908_576),
    ("bookcrossing_caserec", {}, 2_946, 17_384, 272_678, 272_678),
    ("anime_caserec", {}, 5_000, 7_390, 520_609, 520_609),
    ("retailrocket_caserec", {}, 3_431, 8_885, 79_595, None),
]

NATURAL_DTYPES = {
    "steam_200k": pl.Int64,
    "amazon_magazine_subscriptions": pl.String,
    "reddit_pushshift": pl.String,
    "imdb_50k": pl.String,
}


def check_stats(df: pl.DataFrame, users: int, items: int, pairs: int) -> None:
    assert df.columns == ["user", "item"]
    assert df.null_count().sum_horizontal().item() == 0
    assert df.get_column("user").n_unique() == users
    assert df.get_column("item").n_unique() == items
    assert df.height == pairs  # unique=True: one row per distinct pair
    assert df.unique().height == pairs


@pytest.mark.parametrize(
    ("name", "options", "users", "items", "pairs", "rows"),
    README_STATS,
    ids=[f"{s[0]}{'-' + s[1]['kind'] if s[1] else ''}" for s in README_STATS],
)
def test_loader_matches_readme(
    shared_data: Path, name: str, options: dict, users: int, items: int, pairs: int, rows: int | None
) -> None:
    df = load(name, shared_data, **options)
    check_stats(df, users, items, pairs)
    dtype = NATURAL_DTYPES.get(name, pl.Int64)
    assert df.schema == pl.Schema({"user": dtype, "item": dtype})
    # each loader also accepts its directory directly (and the registry holds it)
    assert DATASETS[name](shared_data / name, **options).equals(df)
    raw = load(name, shared_data, unique=False, **options)
    assert raw.height >= pairs
    assert raw.unique().height == pairs
    if rows is not None:
        assert raw.height == rows


@pytest.fixture(scope="module")
def imdb(shared_data: Path) -> pl.DataFrame:
    return load_imdb_50k(shared_data / "imdb_50k")


def test_imdb_matches_readme(imdb: pl.DataFrame) -> None:
    check_stats(imdb, 50_000, 111_611, 6_992_030)
    assert imdb.schema == pl.Schema({"user": pl.String, "item": pl.String})
    per_user = imdb.group_by("user").len().get_column("len")
    assert per_user.max() == 983
    counts = imdb.group_by("item").len()
    assert counts.get_column("len").max() == 49_558  # users holding the most frequent word
    assert (counts.get_column("len") == 1).sum() == 47_243
    assert not counts.get_column("item").str.contains("<|>|[A-Z]").any()  # `<br />` gone, lower-cased


def test_imdb_tokeniser_on_a_small_file(tmp_path: Path) -> None:
    file = tmp_path / "imdb_50k_reviews.csv"
    pl.DataFrame(
        {
            "review_id": ["r0", "r1"],
            "text": ["Don't stop.<br /><br />STOP don't, it's 10/10!", "a'b' 'c x--y <br />z"],
        }
    ).write_csv(file)
    df = load_imdb_50k(tmp_path)
    assert df.filter(pl.col("user") == "r0").get_column("item").to_list() == ["don't", "stop", "it's", "10"]
    assert df.filter(pl.col("user") == "r1").get_column("item").to_list() == ["a'b", "c", "x", "y", "z"]
    raw = load_imdb_50k(file, unique=False)
    assert raw.filter(pl.col("user") == "r0").height == 7


def test_steam_options(shared_data: Path) -> None:
    path = shared_data / "steam_200k"
    by_id = load_steam_200k(path)
    named = load_steam_200k(path, original_ids=True)
    check_stats(named, 12_393, 5_155, 128_804)
    assert named.schema == pl.Schema({"user": pl.Int64, "item": pl.String})
    assert named.row(0) == (151603712, "The Elder Scrolls V Skyrim")
    both = load_steam_200k(path / "game_purchase.dat.gz", include_play=True, unique=False)
    assert both.height == 200_000
    assert both.unique(maintain_order=True).equals(by_id)  # play rows add no pairs


def test_reddit_drops_deleted_and_reads_one_file(shared_data: Path) -> None:
    path = shared_data / "reddit_pushshift"
    comments = load_reddit_pushshift(path)
    assert "[deleted]" not in comments.get_column("user").to_list()
    one = load_reddit_pushshift(path / "RC_2005-12.jsonl.gz")
    assert 0 < one.height < comments.height
    with pytest.raises(
        ValueError, match=r"`kind` must be one of \{'comments', 'submissions'\} \(found 'posts'\)"
    ):
        load_reddit_pushshift(path, kind="posts")  # type: ignore[arg-type]


def test_uncompressed_copy_is_found(shared_data: Path, tmp_path: Path) -> None:
    import gzip

    target = tmp_path / "movielens_100k"
    target.mkdir()
    with (
        gzip.open(shared_data / "movielens_100k" / "u.data.gz", "rb") as src,
        open(target / "u.data", "wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    assert load("movielens_100k", tmp_path).equals(load("movielens_100k", shared_data))


# ---------------------------------------------------------------------------------------------------------
# errors (no shared data needed)
# ---------------------------------------------------------------------------------------------------------
def test_unknown_name_lists_known() -> None:
    with pytest.raises(ValueError, match=r"unknown dataset 'nope'; known datasets: \[.*'steam_200k'.*\]"):
        load("nope", "/anywhere")


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_missing_path(name: str, tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=rf"`{name}` data not found: '.*{name}' does not exist \(expected"
    ):
        load(name, tmp_path)
    (tmp_path / name).mkdir()
    with pytest.raises(FileNotFoundError, match=rf"no `{name}` raw file in '.*{name}': expected"):
        load(name, tmp_path)


def test_public_names() -> None:
    assert set(datasets.__all__) >= {"DATASETS", "load", "synthetic_zipf"} | {f"load_{n}" for n in DATASETS}


# ---------------------------------------------------------------------------------------------------------
# item names instead of integer ids
# ---------------------------------------------------------------------------------------------------------
NAMED = {
    "steam_200k": "The Elder Scrolls V Skyrim",
    "lastfm_hetrec2011": "Duran Duran",
    "movielens_100k": "Kolya (1996)",
    "movielens_latest_small": "Toy Story (1995)",
    "anime_caserec": "Elfen Lied",
}


@pytest.mark.parametrize("name", list(NAMED))
def test_item_names_are_one_to_one_with_the_ids(shared_data: Path, name: str) -> None:
    by_id = load(name, shared_data)
    named = load(name, shared_data, item_names=True)
    assert named.schema == pl.Schema({"user": by_id.schema["user"], "item": pl.String})
    assert named.get_column("user").equals(by_id.get_column("user"))  # same rows, in the same order
    pairs = pl.DataFrame({"id": by_id.get_column("item"), "name": named.get_column("item")}).unique()
    assert pairs.height == by_id.get_column("item").n_unique() == named.get_column("item").n_unique()
    assert NAMED[name] in named.get_column("item").to_list()
    assert named.get_column("item").null_count() == 0


def test_movielens_titles_listed_twice_keep_their_ids(shared_data: Path) -> None:
    named = load("movielens_100k", shared_data, item_names=True).get_column("item")
    twice = named.filter(named.str.contains(r" \[#\d+\]$")).unique().to_list()
    assert "Body Snatchers (1993) [#573]" in twice and "Body Snatchers (1993) [#670]" in twice


def test_steam_item_names_keep_the_user_ids(shared_data: Path) -> None:
    named = load_steam_200k(shared_data / "steam_200k", item_names=True)
    assert named.row(0) == (load_steam_200k(shared_data / "steam_200k").row(0)[0], "The Elder Scrolls V Skyrim")


def test_item_names_of_a_small_copy(tmp_path: Path) -> None:
    """Two ids share a name (each gets its id appended), one id has no name (it keeps its number as text)."""
    folder = tmp_path / "lastfm_hetrec2011"
    folder.mkdir()
    (folder / "user_artists.dat").write_text("userID\tartistID\tweight\n1\t10\t5\n1\t11\t3\n2\t12\t1\n2\t13\t1\n")
    (folder / "artists.dat").write_text("id\tname\turl\tpictureURL\n10\tAbba\tu\tp\n11\tTwin\tu\tp\n12\tTwin\tu\tp\n")
    named = load("lastfm_hetrec2011", tmp_path, item_names=True)
    assert named.rows() == [(1, "Abba"), (1, "Twin [#11]"), (2, "Twin [#12]"), (2, "13")]
