"""The ``opendp-wgm`` command keeps the machine, the user's secrets and the user's files safe: a huge ``--k`` is
harmless or refused up front, a database password is never printed, ``reproduce`` never silently replaces
results, a duplicate column name is refused, SIGTERM leaves no temporary file, and NaN ids are dropped as nulls
are, and said so."""

from __future__ import annotations

import signal
from pathlib import Path

import opendp.prelude as dp
import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm.cli import main

N_USERS = 300
#: ε = 1, δ = 1e-5, Δ0 = 100 (the defaults): "a" (300 users) is released with overwhelming probability, a solo
#: item (one user each) with probability ≈ 1e-7 each.
COMMON = "a"
COLUMNS = ("--user", "uid", "--item", "thing")


@pytest.fixture
def frame() -> pl.DataFrame:
    users = [u for u in range(N_USERS) for _ in range(2)]
    items = [x for u in range(N_USERS) for x in (COMMON, f"solo{u}")]
    return pl.DataFrame({"uid": users, "thing": items}, schema={"uid": pl.Int64, "thing": pl.String})


@pytest.fixture
def csv_path(tmp_path: Path, frame: pl.DataFrame) -> Path:
    path = tmp_path / "data.csv"
    frame.write_csv(path)
    return path


def _run(capsys: pytest.CaptureFixture[str], command: str, *argv: object) -> tuple[int, str, str]:
    code = main([command, *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _error(err: str) -> str:
    """The one error line of a refused command."""
    assert err.count("\n") == 1 and err.startswith("opendp-wgm: error: "), err
    return err.removeprefix("opendp-wgm: error: ").strip()


# --------------------------------------------------------------------------------------------------------
# a huge k: planning and releasing cost nothing in k, or k is refused from the parameters alone
# --------------------------------------------------------------------------------------------------------
HUGE_K = 10**12  # a list of k placeholders would need 8 TB


@pytest.mark.parametrize("command", ["top-k", "hitting-set"])
def test_huge_k_dry_run_costs_nothing_in_k(capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, out, err = _run(capsys, command, "--k", HUGE_K, "--dry-run")
    assert code == 0, err
    assert f"peeling: {HUGE_K} rounds" in out


@pytest.mark.parametrize(("command", "stage_1"), [("top-k", "wgm"), ("top-k", "dp-sips"), ("hitting-set", "wgm")])
def test_huge_k_releases_every_candidate_at_most(
    capsys: pytest.CaptureFixture[str], csv_path: Path, command: str, stage_1: str
) -> None:
    """k above the number of candidates releases the candidates (in noisy order): the run does not grow with k."""
    code, out, err = _run(capsys, command, csv_path, *COLUMNS, "--k", HUGE_K, "--stage-1", stage_1, "-o", "-")
    assert code == 0, err
    assert out.splitlines()[1:] == [f"{COMMON},1"]
    assert f"peeling: {HUGE_K} rounds" in err


def test_top_k_stage_losses_are_the_peeling_map(capsys: pytest.CaptureFixture[str]) -> None:
    """The summary's peeling loss is the map of the peeling measurement charged k rounds (here k = 7)."""
    from opendp_wgm.measurements.top_k import make_peeling_top_k
    from opendp_wgm.privacy.calibrate import calibrate_wgm_top_k

    for budget, measure in ((["--epsilon", 1], dp.approximate(dp.max_divergence())), (["--rho", 0.1], None)):
        code, out, _ = _run(capsys, "top-k", "--k", 7, *budget, "--dry-run")
        assert code == 0
        kwargs = {"epsilon": 1.0} if measure is not None else {"rho": 0.1}
        cal = calibrate_wgm_top_k(k=7, max_contributions=100, delta=1e-5, **kwargs)
        peeling = make_peeling_top_k(
            *wgm.user_items_space(), candidates=list(range(7)), k=7, scale=cal.peel_scale, output_measure=measure,
            delta=cal.peel_delta if measure is not None else None,
        )
        first = "ε" if measure is not None else "ρ"
        value, delta = peeling.map(1)
        assert f"; peeling {first} = {value:.6g}, δ = {delta:.6g}\n" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--k", 10**9], "--k-bar (default 5·K) must be <= 10,000,000 (found 5,000,000,000)"),
        (["--k", 10, "--k-bar", 10**7 + 1], "--k-bar must be <= 10,000,000 (found 10,000,001)"),
    ],
)
def test_limited_domain_refuses_a_huge_k_bar_before_reading(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[object], message: str
) -> None:
    """The limited domain holds k̄ + 1 scores: k̄ is bounded (a parameter), checked before the data is read."""
    absent = tmp_path / "absent.csv"  # never opened
    code, out, err = _run(capsys, "top-k", absent, "--mechanism", "limited-domain", *argv)
    assert code == 2 and out == ""
    assert _error(err).startswith(message)


def test_library_limited_domain_bounds_k_bar() -> None:
    from opendp_wgm.measurements.baselines.limited_domain import LD_MAX_K_BAR

    space = wgm.user_items_space()
    kwargs = {"k": 10, "max_contributions": 10, "epsilon": 1.0, "delta": 1e-5}
    wgm.make_limited_domain_top_k(*space, k_bar=LD_MAX_K_BAR, **kwargs)
    with pytest.raises(ValueError, match=r"`k_bar` must be an integer <= 10000000 \(found 10000000001\)"):
        wgm.make_limited_domain_top_k(*space, k_bar=10**10 + 1, **kwargs)


def test_library_constructors_take_a_huge_k_harmlessly(frame: pl.DataFrame) -> None:
    """The peeling constructors charge k rounds in their maps and select at most the candidates: nothing is sized
    by k (planned, calibrated and released under a second on a small frame)."""
    from opendp_wgm.measurements.top_k import make_peeling_top_k
    from opendp_wgm.privacy.calibrate import calibrate_user_peeling, calibrate_wgm_hitting_set, calibrate_wgm_top_k

    space = wgm.user_items_space("uid", "thing")
    stage_1 = {"max_contributions": 100, "wgm_scale": 4.0, "wgm_threshold": 25.0, "peel_scale": 10.0}
    measurements = [
        make_peeling_top_k(*space, candidates=[COMMON, "solo0"], k=HUGE_K, scale=2.0),
        wgm.make_user_peeling(*space, candidates=[COMMON, "solo0"], k=HUGE_K, scale=2.0),
        wgm.make_wgm_top_k(*space, k=HUGE_K, **stage_1),
        wgm.make_wgm_hitting_set(*space, k=HUGE_K, **stage_1),
    ]
    for measurement in measurements:
        assert measurement.map(1)[0] > 0
        assert measurement(frame).height <= 2
    budget = {"epsilon": 1.0, "delta": 1e-5}
    assert calibrate_wgm_top_k(k=HUGE_K, max_contributions=100, **budget).k == HUGE_K
    assert calibrate_wgm_hitting_set(k=HUGE_K, max_contributions=100, **budget).k == HUGE_K
    assert calibrate_user_peeling(k=HUGE_K, **budget) > 0


# --------------------------------------------------------------------------------------------------------
# a database URI's secrets are never printed
# --------------------------------------------------------------------------------------------------------
SECRET_URIS = {
    "user info": ("postgresql://me:s3cr%40t@db.example.org/shop", "postgresql://me:***@db.example.org/shop"),
    "query string": ("postgresql://me@db.example.org/shop?password=s3cr%40t&sslmode=require",
                     "postgresql://me@db.example.org/shop?password=***&sslmode=require"),
    "both, and a token": ("mysql://me:s3cr%40t@db.example.org/shop?access_token=tok3n",
                          "mysql://me:***@db.example.org/shop?access_token=***"),
}


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch, frame: pl.DataFrame) -> list[str]:
    """ConnectorX replaced: a query with ``fail`` in it raises an error quoting the URI and the decoded
    password (as drivers may), any other returns ``frame``. Returns the URIs the driver was given."""
    import importlib.util

    given: list[str] = []

    def read_database_uri(query: str, uri: str) -> pl.DataFrame:
        given.append(uri)
        if "fail" in query:
            raise RuntimeError(f"authentication failed for {uri} (password 's3cr@t')\ndetails {uri}")
        return frame

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "connectorx" else find_spec(name, *a)
    )
    monkeypatch.setattr(pl, "read_database_uri", read_database_uri)
    return given


@pytest.mark.parametrize("case", list(SECRET_URIS))
def test_uri_secrets_are_redacted_in_errors(
    capsys: pytest.CaptureFixture[str], fake_driver: list[str], case: str
) -> None:
    uri, shown = SECRET_URIS[case]
    code, out, err = _run(capsys, "discover", "--uri", uri, "--query", "select fail")
    assert code == 2 and out == ""
    assert fake_driver == [uri]  # the driver gets the URI as it was given
    assert _error(err).startswith(f"cannot read --query from {shown!r}: authentication failed for {shown} "), err
    for secret in ("s3cr", "tok3n"):
        assert secret not in err


@pytest.mark.parametrize("case", list(SECRET_URIS))
def test_uri_secrets_are_redacted_in_the_summary(
    capsys: pytest.CaptureFixture[str], fake_driver: list[str], case: str
) -> None:
    uri, shown = SECRET_URIS[case]
    code, out, err = _run(capsys, "discover", "--uri", uri, "--query", "select uid, thing", *COLUMNS, "-o", "-")
    assert code == 0, err
    assert out.startswith(f"thing,noisy_weight\n{COMMON},")
    assert f"input         --query on {shown}: {2 * N_USERS:,} rows" in err
    assert "s3cr" not in err and "tok3n" not in err


@pytest.mark.parametrize("uri", ["me:s3cret@db.example.org/shop", "db.example.org/shop?password=s3cret"])
def test_uri_secrets_are_redacted_in_a_malformed_uri(
    capsys: pytest.CaptureFixture[str], fake_driver: list[str], uri: str
) -> None:
    code, _, err = _run(capsys, "discover", "--uri", uri, "--query", "select 1")
    assert code == 2
    assert _error(err).startswith("--uri must be a database URI")
    assert "s3cret" not in err and "***" in err


# --------------------------------------------------------------------------------------------------------
# a column named twice is refused (the header is the schema: public)
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "header", "repeated"),
    [("data.csv", "uid,uid,thing", "['uid']"), ("data.tsv", "uid\tthing\tthing", "['thing']"),
     ("data.csv", "uid,thing,,", "['']"), ("data.csv", '"uid",thing,"uid"', "['uid']")],
)
def test_a_duplicate_csv_header_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, header: str, repeated: str
) -> None:
    """Polars would rename the second column (``uid_duplicated_0``) and the command read the first, silently."""
    sep = "\t" if name.endswith(".tsv") else ","
    path = tmp_path / name
    rows = [sep.join([str(u), str(u + 1), COMMON, ""][: header.count(sep) + 1]) for u in range(N_USERS)]
    path.write_text("\n".join([header, *rows]) + "\n")
    code, out, err = _run(capsys, "discover", path, *COLUMNS, "-o", tmp_path / "released.csv")
    assert code == 2 and out == ""
    assert _error(err) == (
        f"the columns of {str(path)!r} must have distinct names (found {repeated} more than once): rename them in "
        "the file"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_duplicate_parquet_column_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Polars' Parquet scan keeps one of two same-named columns and drops the other, silently."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "data.parquet"
    users = pa.array([u for u in range(N_USERS) for _ in range(2)])
    pq.write_table(pa.table([users, users, pa.array([COMMON, "b"] * N_USERS)], names=["uid", "uid", "thing"]), path)
    code, _, err = _run(capsys, "discover", path, *COLUMNS)
    assert code == 2
    assert "must have distinct names (found ['uid'] more than once)" in _error(err)


# --------------------------------------------------------------------------------------------------------
# SIGTERM (and Ctrl-C) in the middle of the write: the temporary file is removed, the status conventional
# --------------------------------------------------------------------------------------------------------
_PAUSED_WRITE = """
import sys, time
from opendp_wgm.cli import _io
original = _io._serialise
def paused(*args, **kwargs):  # the release is in the temporary file: announce it, then wait for the signal
    result = original(*args, **kwargs)
    print("WRITING", file=sys.stderr, flush=True)
    time.sleep(120)
    return result
_io._serialise = paused
from opendp_wgm.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"]
)
def test_a_signal_in_the_write_removes_the_temporary_file(
    csv_path: Path, tmp_path: Path, interrupt_when_releasing, signum: int, status: int
) -> None:
    output = tmp_path / "released.parquet"
    argv = ["discover", str(csv_path), *COLUMNS, "-o", str(output)]
    code, out, err = interrupt_when_releasing(_PAUSED_WRITE, argv, ready="WRITING", signum=signum)
    assert code == status, err
    assert err.strip() == "opendp-wgm: interrupted; nothing was written"
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == [csv_path.name]  # no output, no .released.parquet.*.tmp


# --------------------------------------------------------------------------------------------------------
# NaN in a float user or item column is a missing value: dropped as a null is, and counted in the summary
# --------------------------------------------------------------------------------------------------------
NAN = float("nan")


@pytest.fixture
def float_path(tmp_path: Path) -> Path:
    """Float ids: N_USERS users holding 1.5 and a solo item each; N_USERS rows of NaN users holding 7.0 (one
    "user" if NaN were an id); N_USERS users holding a NaN item (released, were NaN an item)."""
    users = [float(u) for u in range(N_USERS) for _ in range(2)] + [NAN] * N_USERS
    users += [float(10_000 + u) for u in range(N_USERS)]
    items = [x for u in range(N_USERS) for x in (1.5, float(1_000 + u))] + [7.0] * N_USERS + [NAN] * N_USERS
    path = tmp_path / "floats.parquet"
    pl.DataFrame({"uid": users, "thing": items}, schema={"uid": pl.Float64, "thing": pl.Float64}).write_parquet(path)
    return path


@pytest.mark.parametrize("command", ["discover", "top-k", "hitting-set"])
def test_nan_ids_are_dropped_as_nulls_and_reported(
    capsys: pytest.CaptureFixture[str], float_path: Path, command: str
) -> None:
    k = [] if command == "discover" else ["--k", 3]
    code, out, err = _run(capsys, command, float_path, *COLUMNS, *k, "-o", "-")
    assert code == 0, err
    assert pl.read_csv(out.encode())["thing"].to_list() == [1.5]  # never NaN
    assert f"input         {float_path}: {4 * N_USERS:,} rows (not private)" in err
    assert f"{2 * N_USERS:,} rows with a null or NaN user or item were dropped" in err


def test_nan_in_a_composite_key_drops_the_row(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "keys.parquet"
    users = list(range(2 * N_USERS))
    scores = [0.5] * N_USERS + [NAN] * N_USERS
    pl.DataFrame({"uid": users, "country": ["fr"] * 2 * N_USERS, "score": scores}).write_parquet(path)
    code, out, err = _run(capsys, "discover", path, "--user", "uid", "--item", "country,score", "-o", "-")
    assert code == 0, err
    assert pl.read_csv(out.encode())["score"].to_list() == [0.5]
    assert f"{N_USERS:,} rows with a null or NaN user or item were dropped" in err


def test_only_nan_rows_release_and_say_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """No row with both a user and an item is a data set like any other (its neighbour holds one user): it
    releases (nothing but what noise can put there), and the summary says every row was dropped."""
    path = tmp_path / "nan.parquet"
    pl.DataFrame({"uid": [NAN, 1.0], "thing": ["a", None]}).write_parquet(path)
    code, _, err = _run(capsys, "discover", path, *COLUMNS)
    assert code == 0, err
    assert "2 rows with a null or NaN user or item were dropped" in err


def test_text_ids_keep_the_null_wording(capsys: pytest.CaptureFixture[str], tmp_path: Path, frame: pl.DataFrame) -> None:
    """"NaN" in a text column is an id like any other; only null rows are dropped, and said so."""
    path = tmp_path / "text.parquet"
    extra = pl.DataFrame({"uid": [None, 1], "thing": ["NaN", "NaN"]}, schema=frame.schema)
    pl.concat([frame, extra]).write_parquet(path)
    code, _, err = _run(capsys, "discover", path, *COLUMNS)
    assert code == 0, err
    assert "1 rows with a null user or item were dropped" in err
