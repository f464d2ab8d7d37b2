"""Composite keys: ``item`` names several columns, the items are their distinct tuples.

The releases run the single-item kernel on one Struct column of the key columns and unnest it back. With
Δ0 at least every user's item count (nothing is subsampled) and noise scales of 10^-12 (a lattice noise of
σ ≈ 10^-6 units, non-zero with probability < 10^-10^11), every release below is a deterministic function of the
data, so a composite-key release must equal the release on one concatenated-string key, mapped back.
"""

from __future__ import annotations

from pathlib import Path

import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm import metrics
from opendp_wgm._spaces import _resolve_space
from opendp_wgm.cli import main
from opendp_wgm.measurements.baselines import make_limited_domain_top_k, make_opendp_key_release
from opendp_wgm.measurements.baselines import policy as bl
from opendp_wgm.measurements.hitting_set import make_user_peeling, make_wgm_hitting_set
from opendp_wgm.measurements.top_k import make_peeling_top_k, make_wgm_top_k

KEYS = ["country", "query"]
TINY = 1e-12  # a noise scale that draws 0 (see the module docstring)
#: (country, query) -> number of users holding it; distinct counts so every ranking is strict
COUNTS = {("fr", "a"): 18, ("fr", "b"): 15, ("de", "a"): 12, ("de", "b"): 9, ("us", "a"): 6, ("fr", "c"): 3}


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")


def pairs_frame() -> pl.DataFrame:
    """Users 0 and 1 hold all six pairs; each pair is also held by its own block of ``COUNTS`` users (so user
    counts are c + 2, distinct, and a user-peeling pick covers only its block after the first); plus a repeated
    row and rows with a null in one key column, which are dropped."""
    rows = [(user, country, query) for user in (0, 1) for country, query in COUNTS]
    start = 2
    for (country, query), c in COUNTS.items():
        rows += [(user, country, query) for user in range(start, start + c)]
        start += c
    rows += [(0, "fr", "a"), (1, None, "a"), (2, "fr", None)]
    return pl.DataFrame(rows, schema={"user": pl.Int64, "country": pl.String, "query": pl.String}, orient="row")


def joined(frame: pl.DataFrame) -> pl.DataFrame:
    """The same data with one String key ``country|query`` (a null key column makes the key null)."""
    return frame.select("user", item=pl.concat_str("country", "query", separator="|"))


def split(release: pl.DataFrame) -> pl.DataFrame:
    """A single-key release mapped back to the key columns, in their place."""
    parts = pl.col("item").str.split_exact("|", 1).struct.rename_fields(KEYS)
    return release.with_columns(parts).unnest("item")


def composite() -> tuple[dp.Domain, dp.Metric]:
    return wgm.user_items_space("user", KEYS)


def single() -> tuple[dp.Domain, dp.Metric]:
    return wgm.user_items_space("user", "item")


def test_space_names_the_key_columns() -> None:
    domain, _ = composite()
    assert domain.descriptor.item == ("country", "query") and domain.descriptor.keys == ("country", "query")
    assert _resolve_space(*composite()).keys == ("country", "query")
    assert _resolve_space(*single()).keys == ("item",)
    assert wgm.user_items_space("user", ["item"])[0].descriptor.item == "item"  # one name: a plain item


@pytest.mark.parametrize(
    "make",
    [
        lambda space: wgm.make_wgm(*space, max_contributions=6, scale=TINY, threshold=1.0),
        lambda space: wgm.make_wgm(
            *space, max_contributions=6, scale=TINY, threshold=1.0, passes=3, engine="streaming"
        ),
        lambda space: wgm.make_dp_sips(*space, max_contributions=6, scales=[TINY, TINY], thresholds=[5.0, 1.0]),
        lambda space: make_wgm_top_k(
            *space, k=3, max_contributions=6, wgm_scale=TINY, wgm_threshold=1.0, peel_scale=TINY
        ),
        lambda space: make_wgm_hitting_set(
            *space, k=3, max_contributions=6, wgm_scale=TINY, wgm_threshold=1.0, peel_scale=TINY
        ),
        lambda space: bl.make_policy_gaussian(*space, max_contributions=6, scale=TINY, threshold=0.5, alpha=1e11)  # cap 0.6 > T,
    ],
    ids=["wgm", "wgm-passes-streaming", "dp-sips", "wgm-top-k", "wgm-hitting-set", "policy-gaussian"],
)
def test_release_equals_the_concatenated_key_release(make) -> None:  # type: ignore[no-untyped-def]
    frame = pairs_frame()
    ours = make(composite())(frame)
    theirs = split(make(single())(joined(frame)))
    assert ours.columns[:2] == KEYS and ours.columns == theirs.columns
    assert ours.schema == theirs.schema
    assert ours.height >= 3
    ordered = "rank" not in ours.columns  # a ranked release is in rank order: compare as it is
    assert ours.equals(theirs.sort(KEYS) if ordered else theirs)


def test_top_k_ranks_pairs_by_their_user_counts() -> None:
    release = make_wgm_top_k(*composite(), k=3, max_contributions=6, wgm_scale=TINY, wgm_threshold=1.0, peel_scale=TINY)
    assert release(pairs_frame()).rows() == [("fr", "a", 1), ("fr", "b", 2), ("de", "a", 3)]


def test_candidates_as_a_frame_of_the_key_columns() -> None:
    # columns in any order; counts of distinct users, 0 for a pair nobody holds
    candidates = pl.DataFrame({"query": ["b", "a", "z"], "country": ["de", "fr", "fr"]})
    assert wgm.make_candidate_counts(*composite(), candidates=candidates)(pairs_frame()) == [11, 20, 0]
    peeled = make_peeling_top_k(*composite(), candidates=candidates, k=2, scale=TINY)(pairs_frame())
    assert peeled.rows() == [("fr", "a", 1), ("de", "b", 2)]
    covered = make_user_peeling(*composite(), candidates=candidates, k=1, scale=TINY)(pairs_frame())
    assert covered.rows() == [("fr", "a", 1)]


def test_candidates_keep_the_data_dtypes() -> None:
    """String candidates on Categorical / Int16 key columns: cast exactly, the release keeps the data's dtypes."""
    frame = pairs_frame().with_columns(pl.col("query").cast(pl.Categorical), country=pl.col("country").rank("dense"))
    frame = frame.with_columns(pl.col("country").cast(pl.Int16))
    candidates = pl.DataFrame({"country": [2, 1], "query": ["a", "b"]})  # Int64, String
    peeled = make_peeling_top_k(*composite(), candidates=candidates, k=2, scale=TINY)(frame)
    assert peeled.schema == pl.Schema({"country": pl.Int16, "query": pl.Categorical(), "rank": pl.UInt32})
    assert peeled.rows() == [(2, "a", 1), (1, "b", 2)]  # fr = 2 (20 users), de = 1 (11 users holding b)
    lossy = make_peeling_top_k(*composite(), candidates=candidates.with_columns(country=pl.Series([1.5, 2.0])), k=1, scale=1.0)
    with pytest.raises(dp.OpenDPException, match=r"exactly representable in the item column's type Int16 \(found \[1.5\]\)"):
        lossy(frame)


def test_lazyframe_domain_checks_candidates_at_construction() -> None:
    domain = dp.lazyframe_domain(
        [
            dp.series_domain("user", dp.atom_domain(T=dp.i64)),
            dp.series_domain("country", dp.atom_domain(T=dp.String)),
            dp.series_domain("query", dp.atom_domain(T=dp.String)),
        ]
    )
    metric = dp.symmetric_id_distance(pl.col("user"))
    release = wgm.make_wgm(domain, metric, item=KEYS, max_contributions=6, scale=TINY, threshold=1.0)(
        pairs_frame().lazy()
    )
    assert release.columns == [*KEYS, "noisy_weight"] and release.height == 6
    with pytest.raises(TypeError, match="`candidates` must have the item column's type"):
        wgm.make_candidate_counts(domain, metric, item=KEYS, candidates=pl.DataFrame({"country": [1], "query": ["a"]}))
    with pytest.raises(ValueError, match="item column 'nope' not found in `input_domain`"):
        wgm.make_wgm(domain, metric, item=["country", "nope"], max_contributions=1, scale=1.0, threshold=1.0)
    with pytest.raises(ValueError, match="`item` must differ from the user column"):
        wgm.make_wgm(domain, metric, item=["country", "user"], max_contributions=1, scale=1.0, threshold=1.0)


def test_limited_domain_top_k_unnests() -> None:
    release = make_limited_domain_top_k(*composite(), k=2, k_bar=2, max_contributions=6, epsilon=50.0, delta=1e-6)
    assert release(pairs_frame()).rows() == [("fr", "a", 1), ("fr", "b", 2)]


def test_nulls_in_any_key_column_are_dropped() -> None:
    counts = wgm.make_candidate_counts(*composite(), candidates=pl.DataFrame({"country": ["fr"], "query": ["a"]}))
    assert counts(pairs_frame()) == [20]  # the rows (1, None, "a") and (2, "fr", None) name no pair
    rows = wgm.make_bound_user_items(*composite(), max_contributions=6)(pairs_frame()).collect()
    assert rows.columns == ["user", *KEYS] and rows.null_count().sum_horizontal().item() == 0


# ---------------------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("item", "error", "match"),
    [
        ([], ValueError, r"`item` must name at least one column \(found \[\]\)"),
        (["country", "country"], ValueError, r"`item` must name distinct columns"),
        (["country", ""], TypeError, r"`item` must be a non-empty column name"),
        (["country", "user"], ValueError, r"`user` and `item` must be different columns \(found 'user' in both\)"),
        ({"country": 1}, TypeError, r"`item` must be a non-empty column name or a list of them"),
    ],
)
def test_bad_item_columns(item: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        wgm.user_items_space("user", item)  # type: ignore[arg-type]


def test_missing_key_column_in_the_data() -> None:
    m = wgm.make_wgm(*wgm.user_items_space("user", ["country", "city"]), max_contributions=1, scale=1.0, threshold=1.0)
    with pytest.raises(dp.OpenDPException, match=r"column\(s\) \['city'\] not found in the data"):
        m(pairs_frame())


@pytest.mark.parametrize(
    ("candidates", "error", "match"),
    [
        (["fr", "de"], TypeError, r"`candidates` must be a DataFrame with the key columns \['country', 'query'\]"),
        (pl.DataFrame({"country": ["fr"], "city": ["a"]}), TypeError, r"must be a DataFrame with the key columns"),
        (pl.DataFrame({"country": ["fr", None], "query": ["a", "b"]}), ValueError, "must not contain nulls"),
        (pl.DataFrame({"country": ["fr", "fr"], "query": ["a", "a"]}), ValueError, "must be distinct"),
    ],
)
def test_bad_candidates(candidates: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make_peeling_top_k(*composite(), candidates=candidates, k=1, scale=1.0)  # type: ignore[arg-type]


def test_opendp_key_release_refuses_a_composite_key() -> None:
    with pytest.raises(ValueError, match=r"`item` must be one column for OpenDP's key release .*\['country', 'query'\]"):
        make_opendp_key_release(*composite(), max_contributions=2, epsilon=1.0, delta=1e-6)


def test_spark_refuses_a_composite_key_but_in_keys_with_statistics() -> None:
    """On Spark a composite key runs in make_wgm_group_by only (tests/engines/test_spark_group_by.py)."""
    pytest.importorskip("pyspark", reason='pyspark is not installed: pip install "opendp-wgm[spark]"')
    from opendp_wgm.spark import make_wgm, spark_user_items_space

    space = spark_user_items_space("user", KEYS)
    with pytest.raises(ValueError, match=r"`item` must be one column on the Spark engine .*\['country', 'query'\]"):
        make_wgm(*space, max_contributions=2, scale=1.0, threshold=5.0)


def test_tumult_refuses_a_composite_key_first() -> None:
    from opendp_wgm.engines.tumult import _check_domain

    with pytest.raises(ValueError, match=r"`item` must be one column on the Tumult engine"):
        _check_domain(None, "user", KEYS)


# ---------------------------------------------------------------------------------------------------------
# metrics
# ---------------------------------------------------------------------------------------------------------
def test_metrics_of_a_composite_truth_equal_the_concatenated_key() -> None:
    frame, released = pairs_frame().drop_nulls(), pl.DataFrame({"country": ["fr", "de"], "query": ["a", "b"]})
    truth = metrics.Truth.of(frame, item=KEYS)
    assert (truth.total_mass, truth.n_users, truth.column) == (75, 65, "country,query")
    single = joined(frame)
    released_single = released.select(item=pl.concat_str(KEYS, separator="|"))
    for name in ("missing_mass", "captured_mass", "linf_missing_mass", "missed_users", "coverage"):
        function = getattr(metrics, name)
        expected = function(single, released_single)
        assert function(frame, released, item=KEYS) == expected, name
        assert function(truth, released, item=KEYS) == expected, name
    assert metrics.top_k_missing_mass(frame, released, 2, item=KEYS) == metrics.top_k_missing_mass(
        single, released_single, 2
    )
    assert metrics.missing_mass(frame, [("fr", "a"), ("de", "b")], item=KEYS) == metrics.missing_mass(
        single, ["fr|a", "de|b"]
    )
    assert metrics.cardinality(released, item=KEYS) == 2


# ---------------------------------------------------------------------------------------------------------
# the CLI: --item country,query (in-process, as tests/test_cli.py)
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def pairs_csv(tmp_path: Path) -> Path:
    """400 users hold (fr, 07) and a pair of their own; (fr, 7) is held by 50 others: 07 and 7 stay two
    queries (read as strings), and at ε = 1, δ = 1e-5 (σ ≈ 3.9, T ≈ 21) (fr, 07) is released and ranked first
    with overwhelming probability, no solo pair is (each ≈ 1e-7)."""
    users = [u for u in range(400) for _ in range(2)] + list(range(400, 450))
    countries = ["fr", "de"] * 400 + ["fr"] * 50
    queries = [q for u in range(400) for q in ("07", f"solo{u}")] + ["7"] * 50
    path = tmp_path / "pairs.csv"
    pl.DataFrame({"uid": users, "country": countries, "query": queries}).write_csv(path)
    return path


def _cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["discover", "top-k", "hitting-set"])
def test_cli_composite_item(command: str, capsys: pytest.CaptureFixture[str], pairs_csv: Path, tmp_path: Path) -> None:
    output = tmp_path / "released.csv"
    k = [] if command == "discover" else ["--k", 1]
    code, _, err = _cli(capsys, command, pairs_csv, "--user", "uid", "--item", "country,query", *k, "-o", output)
    assert code == 0, err
    released = pl.read_csv(output, schema_overrides={"query": pl.String})
    assert released.columns[:2] == KEYS
    assert released.columns[2] == ("noisy_weight" if command == "discover" else "rank")
    assert ("fr", "07") in set(released.select(KEYS).iter_rows())
    assert not released["query"].str.starts_with("solo").any()
    assert "850 rows" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--item", "country,,query"], "argument --item: must be COL or COL,COL,... with non-empty names"),
        (["--item", "country,country"], "argument --item: must name distinct columns (found 'country,country')"),
        (["--item", "country,city"], "column 'city' not found in"),
        (["--item", "country,uid"], "`user` and `item` must be different columns (found 'uid' in both)"),
    ],
)
def test_cli_bad_composite_item(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str], pairs_csv: Path
) -> None:
    code, out, err = _cli(capsys, "discover", pairs_csv, "--user", "uid", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("opendp-wgm: error: "), err
    assert expected in err, err


def test_cli_demo_takes_one_item_column(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "discover", "--item", "country,query")
    assert code == 2 and "--item must name one column for the demo (found 'country,query')" in err
