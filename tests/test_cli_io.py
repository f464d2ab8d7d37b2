"""The ``opendp-wgm`` command's inputs (files by suffix, SQL databases), outputs (stdout, JSON, NDJSON, gzip,
``--format``) and ``--dry-run`` (the release curve), run in-process through :func:`opendp_wgm.cli.main`."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from opendp_wgm.cli import main

N_USERS = 300
#: ε = 1, δ = 1e-5, Δ0 = 100 (the defaults): σ ≈ 3.88, T ≈ 20.8. "a" (300 users, weight 300/√2 ≈ 212) is
#: released with overwhelming probability; a solo item (weight 1/√2) with probability ≈ 1e-7 each.
COMMON = "a"


@pytest.fixture
def frame() -> pl.DataFrame:
    users = [u for u in range(N_USERS) for _ in range(2)]
    items = [x for u in range(N_USERS) for x in (COMMON, f"solo{u}")]
    return pl.DataFrame({"uid": users, "thing": items}, schema={"uid": pl.Int64, "thing": pl.String})


def _run(capsys: pytest.CaptureFixture[str], *argv: object, command: str = "discover") -> tuple[int, str, str]:
    code = main([command, *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


COLUMNS = ("--user", "uid", "--item", "thing")


def _write(frame: pl.DataFrame, path: Path) -> None:
    """``frame`` in the format of ``path``'s suffix (gzip'd when it ends in .gz)."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".csv", ".tsv")):
        data = frame.write_csv(separator="\t" if name.endswith(".tsv") else ",").encode()
    elif name.endswith((".ndjson", ".jsonl")):
        data = frame.write_ndjson().encode()
    else:
        frame.write_parquet(path)
        return
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


# --------------------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    ["data.csv", "data.tsv", "data.csv.gz", "data.tsv.gz", "data.parquet", "data.pq", "data.ndjson", "data.jsonl",
     "data.ndjson.gz", "data.jsonl.gz", "DATA.NDJSON"],
)
def test_every_input_kind_releases_the_common_item(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, frame: pl.DataFrame, name: str
) -> None:
    source, output = tmp_path / name, tmp_path / "released.parquet"
    _write(frame, source)
    code, out, err = _run(capsys, source, *COLUMNS, "-o", output)
    assert code == 0, err
    assert out == ""
    released = pl.read_parquet(output)
    assert released["thing"].to_list() == [COMMON]
    assert f"{source}: {2 * N_USERS:,} rows (not private)" in err


def test_ndjson_keeps_json_types(capsys: pytest.CaptureFixture[str], tmp_path: Path, frame: pl.DataFrame) -> None:
    """JSON strings stay strings ("007" and "7" are two items); JSON numbers stay numbers."""
    source, output = tmp_path / "ids.ndjson", tmp_path / "released.parquet"
    ids = pl.DataFrame({"user": list(range(600)), "item": ["007" if u % 2 else "7" for u in range(600)]})
    ids.write_ndjson(source)
    code, _, err = _run(capsys, source, "-o", output)
    assert code == 0, err
    released = pl.read_parquet(output)
    assert released.schema["item"] == pl.String and sorted(released["item"].to_list()) == ["007", "7"]


@pytest.fixture
def sqlite_db(tmp_path: Path, frame: pl.DataFrame) -> Path:
    path = tmp_path / "events.db"
    with sqlite3.connect(path) as connection:
        connection.execute("create table events (uid integer, thing text, extra text)")
        connection.executemany("insert into events values (?, ?, 'x')", frame.rows())
    connection.close()
    return path


def test_sqlite_uri_and_query(capsys: pytest.CaptureFixture[str], sqlite_db: Path, tmp_path: Path) -> None:
    pytest.importorskip("connectorx", reason="pip install 'opendp-wgm[sql]'")
    output = tmp_path / "released.csv"
    code, out, err = _run(
        capsys, "--uri", f"sqlite://{sqlite_db}", "--query", "select uid, thing from events", *COLUMNS, "-o", output
    )
    assert code == 0, err
    assert out == ""
    assert pl.read_csv(output)["thing"].to_list() == [COMMON]
    assert f"input         --query on sqlite://{sqlite_db}: {2 * N_USERS:,} rows (not private)" in err


def test_sqlite_uri_relative_to_the_current_directory(
    capsys: pytest.CaptureFixture[str], sqlite_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite://events.db (ConnectorX's form, as documented) is ./events.db; sqlite:///events.db is /events.db, and
    its error says how to name ./events.db, before ConnectorX could create an empty /events.db."""
    pytest.importorskip("connectorx", reason="pip install 'opendp-wgm[sql]'")
    monkeypatch.chdir(sqlite_db.parent)
    query = "select uid, thing from events"
    code, out, err = _run(capsys, "--uri", "sqlite://events.db", "--query", query, *COLUMNS, "-o", "-")
    assert code == 0, err
    assert out.startswith(f"thing,noisy_weight\n{COMMON},"), out
    if Path("/events.db").exists():
        pytest.skip("/events.db exists on this machine")
    code, out, err = _run(capsys, "--uri", "sqlite:///events.db", "--query", query, *COLUMNS)
    assert code == 2
    assert err == (
        "opendp-wgm: error: --uri 'sqlite:///events.db': SQLite database file '/events.db' not found "
        "(for ./events.db write sqlite://events.db)\n"
    )
    assert not Path("/events.db").exists()


def test_sqlite_query_with_where_clause(capsys: pytest.CaptureFixture[str], sqlite_db: Path) -> None:
    """The query selects the rows: without the common item's rows nothing is released (solo items only)."""
    pytest.importorskip("connectorx", reason="pip install 'opendp-wgm[sql]'")
    query = f"select uid, thing from events where thing <> '{COMMON}'"
    code, out, err = _run(capsys, "--uri", f"sqlite://{sqlite_db}", "--query", query, *COLUMNS, "-o", "-")
    assert code == 0, err
    assert out == "thing,noisy_weight\n"
    assert f"{N_USERS:,} rows (not private)" in err


def test_database_password_is_not_printed(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    def refuse(query: str, uri: str) -> pl.DataFrame:
        raise RuntimeError(f"connection refused to {uri}")  # a driver may repeat the URI: only its first line

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "connectorx" else find_spec(name, *a))
    monkeypatch.setattr(pl, "read_database_uri", refuse)
    code, _, err = _run(capsys, "--uri", "postgresql://me:s3cret@localhost:5432/db", "--query", "select 1")
    assert code == 2
    assert err == (
        "opendp-wgm: error: cannot read --query from 'postgresql://me:***@localhost:5432/db': "
        "connection refused to postgresql://me:***@localhost:5432/db\n"
    )


SQL_ERRORS = {
    "bad query": (["--uri", "sqlite://{db}", "--query", "select nope from events"], "no such column: nope"),
    "missing table": (["--uri", "sqlite://{db}", "--query", "select * from absent"], "no such table: absent"),
    "missing column": (["--uri", "sqlite://{db}", "--query", "select uid, extra from events", "--user", "uid",
                        "--item", "thing"], "column 'thing' not found in --query on sqlite://"),
    "missing file": (["--uri", "sqlite://{tmp}/absent.db", "--query", "select 1"], "SQLite database file"),
    "query without uri": (["--query", "select 1"], "--uri and --query go together"),
    "uri without query": (["--uri", "sqlite://{db}"], "--uri and --query go together"),
    "path and uri": (["{db}", "--uri", "sqlite://{db}", "--query", "select 1"], "give PATH or --uri, not both"),
    "not a uri": (["--uri", "events.db", "--query", "select 1"], "--uri must be a database URI"),
    "schema with uri": (["--uri", "sqlite://{db}", "--query", "select uid, thing from events", "--schema",
                         "uid=Int64"], "--schema and --separator apply only to CSV input"),
    "output is the database": (["--uri", "sqlite://{db}", "--query", "select uid, thing from events", "-o", "{db}",
                                "--format", "csv", "--force"], "is the input file"),
    "seed with uri": (["--uri", "sqlite://{db}", "--query", "select 1", "--seed", "1"], "--seed applies only to the demo"),
}


@pytest.mark.parametrize("case", list(SQL_ERRORS))
def test_database_errors_exit_2_with_one_line(
    case: str, capsys: pytest.CaptureFixture[str], sqlite_db: Path, tmp_path: Path
) -> None:
    pytest.importorskip("connectorx", reason="pip install 'opendp-wgm[sql]'")
    argv, expected = SQL_ERRORS[case]
    code, out, err = _run(capsys, *(a.format(db=sqlite_db, tmp=tmp_path) for a in argv))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("opendp-wgm: error: "), err
    assert expected in err, err
    assert not (tmp_path / "absent.db").exists()  # ConnectorX would have created it


def test_missing_driver_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sqlite_db: Path
) -> None:
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "connectorx" else find_spec(name, *a))
    code, _, err = _run(capsys, "--uri", f"sqlite://{sqlite_db}", "--query", "select uid, thing from events")
    assert code == 2
    assert err == (
        "opendp-wgm: error: --uri needs the ConnectorX database driver, which is not installed: "
        "pip install 'opendp-wgm[sql]' (or pip install connectorx)\n"
    )


@pytest.mark.parametrize(("name", "found"), [("data.json", "'.json'"), ("data.xlsx", "'.xlsx'"), ("data", "'(no suffix)'"),
                                              ("data.txt.gz", "'.txt.gz'")])
def test_unknown_input_suffix(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, found: str) -> None:
    path = tmp_path / name
    path.write_text("user,item\n1,a\n")
    code, _, err = _run(capsys, path)
    assert code == 2 and f"unsupported file type {found}" in err and ".ndjson.gz" in err, err


# --------------------------------------------------------------------------------------------------------
# outputs
# --------------------------------------------------------------------------------------------------------
def test_output_dash_writes_csv_to_stdout_and_the_summary_to_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, frame: pl.DataFrame
) -> None:
    source = tmp_path / "data.csv"
    frame.write_csv(source)
    code, out, err = _run(capsys, source, *COLUMNS, "-o", "-")
    assert code == 0, err
    released = pl.read_csv(out.encode())
    assert released.columns == ["thing", "noisy_weight"] and released["thing"].to_list() == [COMMON]
    assert "items released" not in out and "σ = " not in out  # stdout is the CSV and nothing else
    assert "σ = " in err and "output        stdout" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]  # nothing written beside the input


@pytest.mark.parametrize("command", ["top-k", "hitting-set"])
def test_ranked_commands_write_csv_to_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, frame: pl.DataFrame, command: str
) -> None:
    source = tmp_path / "data.parquet"
    frame.write_parquet(source)
    code, out, err = _run(capsys, source, *COLUMNS, "--k", 1, "-o", "-", command=command)
    assert code == 0, err
    assert out == f"thing,rank\n{COMMON},1\n"


def _read_output(path: Path) -> pl.DataFrame:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        assert raw[:2] == b"\x1f\x8b", "not gzip"
        raw = gzip.decompress(raw)
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".json"):
        return pl.DataFrame(json.loads(raw))
    if name.endswith((".ndjson", ".jsonl")):
        return pl.DataFrame([json.loads(line) for line in raw.decode().splitlines()])
    return pl.read_csv(raw, separator="\t" if name.endswith(".tsv") else ",")


@pytest.mark.parametrize(
    "name", ["out.json", "out.ndjson", "out.jsonl", "out.csv.gz", "out.tsv.gz", "out.json.gz", "out.ndjson.gz", "out.TSV"]
)
def test_every_output_kind(capsys: pytest.CaptureFixture[str], tmp_path: Path, frame: pl.DataFrame, name: str) -> None:
    source, output = tmp_path / "data.csv", tmp_path / name
    frame.write_csv(source)
    code, out, err = _run(capsys, source, *COLUMNS, "-o", output)
    assert code == 0, err
    assert out == ""
    released = _read_output(output)
    assert released.columns == ["thing", "noisy_weight"]
    assert released["thing"].to_list() == [COMMON] and released["noisy_weight"][0] > 100
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize(
    ("name", "format_", "check"),
    [("release.txt", "json", "json"), ("release.out", "ndjson", "ndjson"), ("release.csv", "tsv", "tsv"),
     ("release.dat", "parquet", "parquet"), ("release.bin.gz", "csv", "csv.gz")],
)
def test_format_overrides_the_suffix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, frame: pl.DataFrame, name: str, format_: str, check: str
) -> None:
    source, output = tmp_path / "data.csv", tmp_path / name
    frame.write_csv(source)
    code, _, err = _run(capsys, source, *COLUMNS, "-o", output, "--format", format_)
    assert code == 0, err
    if check == "parquet":
        released = pl.read_parquet(output)
    else:
        copy = tmp_path / f"copy.{check}"
        copy.write_bytes(output.read_bytes())
        released = _read_output(copy)
    assert released["thing"].to_list() == [COMMON]


@pytest.mark.parametrize("format_", ["json", "ndjson", "tsv"])
def test_format_to_stdout(capsys: pytest.CaptureFixture[str], tmp_path: Path, frame: pl.DataFrame, format_: str) -> None:
    source = tmp_path / "data.csv"
    frame.write_csv(source)
    code, out, err = _run(capsys, source, *COLUMNS, "-o", "-", "--format", format_)
    assert code == 0, err
    if format_ == "json":
        rows = json.loads(out)
    elif format_ == "ndjson":
        rows = [json.loads(line) for line in out.splitlines()]
    else:
        rows = pl.read_csv(out.encode(), separator="\t").to_dicts()
    assert [row["thing"] for row in rows] == [COMMON]


OUTPUT_ERRORS = {
    "format without output": (["--format", "json"], "--format applies to --output"),
    "parquet to stdout": (["-o", "-", "--format", "parquet"], "--format parquet needs a file"),
    "gzip'd parquet": (["-o", "{tmp}/out.parquet.gz"], "Parquet is compressed inside; drop the .gz"),
    "unknown suffix": (["-o", "{tmp}/out.xlsx"], "unsupported output type '.xlsx'"),
    "bad format": (["-o", "-", "--format", "xml"], "argument --format: invalid choice: 'xml'"),
    "output is the ndjson input": (["-o", "{ndjson}", "--force"], "is the input file"),
    "existing json": (["-o", "{existing}"], "already exists (add --force to overwrite it)"),
}


@pytest.mark.parametrize("case", list(OUTPUT_ERRORS))
def test_output_errors_exit_2_before_the_release(
    case: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    frame: pl.DataFrame,
) -> None:
    from opendp_wgm.cli import _report

    def never(*args: object, **kwargs: object) -> None:
        pytest.fail("the data was read before the output was checked")

    monkeypatch.setattr(_report, "_read_input", never)
    source, existing = tmp_path / "data.ndjson", tmp_path / "existing.json"
    frame.write_ndjson(source)
    existing.write_text("keep me")
    argv, expected = OUTPUT_ERRORS[case]
    code, out, err = _run(capsys, source, *COLUMNS, *(a.format(tmp=tmp_path, ndjson=source, existing=existing) for a in argv))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and expected in err, err
    assert existing.read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_failed_gzip_write_leaves_no_partial_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, frame: pl.DataFrame
) -> None:
    source, existing = tmp_path / "data.csv", tmp_path / "existing.csv.gz"
    frame.write_csv(source)
    existing.write_bytes(gzip.compress(b"old release\n"))
    real_open = gzip.open

    def half_open(file: object, mode: str = "rb", *args: object, **kwargs: object) -> object:
        handle = real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]
        if "w" in mode:
            handle.write(b"thing,noisy")
            handle.close()
            raise OSError(28, "No space left on device")
        return handle

    monkeypatch.setattr(gzip, "open", half_open)
    code, _, err = _run(capsys, source, *COLUMNS, "-o", existing, "--force")
    assert code == 2 and "No space left on device" in err and err.count("\n") == 1
    assert gzip.decompress(existing.read_bytes()) == b"old release\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.slow
def test_broken_pipe_on_stdout_exits_quietly(tmp_path: Path, frame: pl.DataFrame) -> None:
    """`opendp-wgm ... -o - | head -1`: the reader closes the pipe early; no traceback, status 141."""
    import os
    import subprocess
    import sys

    source = tmp_path / "data.csv"
    big = pl.DataFrame({"uid": list(range(20_000)), "thing": [f"i{u % 50}" for u in range(20_000)]})
    big.write_csv(source)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    script = (
        "import sys, polars as pl\n"
        "from opendp_wgm.cli import main\n"
        "class Closed:\n"
        "    def write(self, text): raise BrokenPipeError(32, 'Broken pipe')\n"
        "    def flush(self): pass\n"
        "sys.stdout = Closed()\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "discover", str(source), "--user", "uid", "--item", "thing", "-o", "-"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------------------------------------
# --dry-run: σ, T and the release curve; nothing read, nothing released
# --------------------------------------------------------------------------------------------------------
def _curve_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("release curve")) + 2
    rows = []
    for line in lines[start:]:
        cells = line.split()
        if not cells or not cells[0].isdigit():
            break
        rows.append(cells)
    return rows


def _point(out: str, level: str, case: str) -> int:
    line = next(line for line in out.splitlines() if line.startswith(f"  {level} reached at "))
    part = next(p for p in line.split("c = ")[1:] if f"({case})" in p)
    return int(part.split()[0].replace(",", ""))


@pytest.fixture
def never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from opendp_wgm.cli import _report

    def never(*args: object, **kwargs: object) -> None:
        pytest.fail("--dry-run read the data")

    monkeypatch.setattr(_report, "_read_input", never)


def test_dry_run_prints_sigma_threshold_and_the_curve(capsys: pytest.CaptureFixture[str], never_read: None) -> None:
    from scipy.stats import norm

    from opendp_wgm.privacy.calibrate import calibrate_wgm

    code, out, err = _run(capsys, "--dry-run", "--epsilon", 1, "--delta", 1e-5, "--max-contributions", 100)
    assert code == 0, err
    assert err == ""
    cal = calibrate_wgm(epsilon=1.0, delta=1e-5, max_contributions=100)
    assert "no data read, nothing released" in out
    assert f"σ = {cal.scale:.6g}, T = {cal.threshold:.6g}, Δ0 = 100" in out
    rows = _curve_rows(out)
    users = np.array([int(r[0]) for r in rows])
    best = np.array([float(r[1]) for r in rows])
    worst = np.array([float(r[2]) for r in rows])
    assert np.all(np.diff(users) > 0)
    assert np.all(np.diff(best) >= 0) and np.all(np.diff(worst) >= 0)  # monotone in c
    # an independent computation: the continuous normal tail with the unrounded weights 1 and 1/√Δ0
    np.testing.assert_allclose(best, norm.sf((cal.threshold - users) / cal.scale), atol=1e-4)
    np.testing.assert_allclose(worst, norm.sf((cal.threshold - users / 10) / cal.scale), atol=1e-4)
    c50, c95 = _point(out, "50%", "1 item each"), _point(out, "95%", "1 item each")
    assert c50 <= c95 and best[-1] >= 0.95  # the table goes past the 95% point
    assert norm.sf((cal.threshold - c95) / cal.scale) >= 0.95 - 1e-9 > norm.sf((cal.threshold - c95 + 1) / cal.scale)
    assert norm.sf((cal.threshold - c50) / cal.scale) >= 0.5 > norm.sf((cal.threshold - c50 + 1) / cal.scale)
    w50 = _point(out, "50%", "100 items each")  # weight 1/√100 = 0.1 each
    assert norm.sf((cal.threshold - 0.1 * w50) / cal.scale) >= 0.5 - 1e-4
    assert norm.sf((cal.threshold - 0.1 * (w50 - 1)) / cal.scale) < 0.5 + 1e-4


@pytest.mark.parametrize(
    "options",
    [["--epsilon", 1], ["--epsilon", 0.001], ["--epsilon", 1000], ["--mechanism", "dp-sips"]],
    ids=["epsilon 1", "epsilon 0.001", "epsilon 1000", "dp-sips"],
)
def test_dry_run_curve_spans_every_column(
    capsys: pytest.CaptureFixture[str], never_read: None, options: list[object]
) -> None:
    """The table starts where the best case reaches 0.001 (the c below it said in one line) and ends where every
    column, the worst case Δ0 = 100 items each included, has reached 0.99; no cell reads as a negative zero."""
    code, out, err = _run(capsys, "--dry-run", *options)
    assert code == 0, err
    assert "-0.0" not in out
    rows = _curve_rows(out)
    users = np.array([int(r[0]) for r in rows])
    table = np.array([[float(x) for x in r[1:]] for r in rows])
    assert 2 <= len(rows) <= 40 and np.all(np.diff(users) > 0)
    assert table[0].max() >= 0.001 - 5e-5  # the first row is the first c at 0.001 or more (4 decimals shown)
    assert f"  (c < {users[0]:,}: below 0.0010 in every column)" in out.splitlines()
    assert table[0].min() < 0.99  # the curve is seen rising, not only its top
    assert np.all(table[-1] >= 0.99), table[-1]  # every column, Δ0's included, has reached 0.99


def test_dry_run_rho_prints_the_epsilon_equivalent(capsys: pytest.CaptureFixture[str], never_read: None) -> None:
    from opendp_wgm.privacy.gaussian import rho_to_epsilon

    code, out, _ = _run(capsys, "--dry-run", "--rho", 0.5, "--delta", 1e-6)
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("  ε equivalent"))
    epsilon = float(line.split("ε = ")[1].split()[0])
    delta = float(line.split("at δ = ")[1].split()[0])
    assert 0.5 < epsilon <= rho_to_epsilon(0.5, 1e-6)  # OpenDP's conversion is at least as tight
    assert 1e-6 < delta <= 2e-6


def test_epsilon_runs_print_no_epsilon_equivalent(capsys: pytest.CaptureFixture[str], never_read: None) -> None:
    code, out, _ = _run(capsys, "--dry-run", "--epsilon", 1)
    assert code == 0 and "ε equivalent" not in out


def test_release_with_rho_prints_the_epsilon_equivalent(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, frame: pl.DataFrame
) -> None:
    source = tmp_path / "data.csv"
    frame.write_csv(source)
    code, _, err = _run(capsys, source, *COLUMNS, "--rho", 0.5)
    assert code == 0, err
    assert "ε equivalent  ε = " in err


def test_dry_run_dp_sips_combines_the_rounds(capsys: pytest.CaptureFixture[str], never_read: None) -> None:
    from opendp_wgm.privacy.calibrate import calibrate_dp_sips
    from opendp_wgm.privacy.threshold import release_probability

    code, out, err = _run(capsys, "--dry-run", "--mechanism", "dp-sips", "--rounds", 3, "--ratio", 0.5)
    assert code == 0, err
    cal = calibrate_dp_sips(epsilon=1.0, delta=1e-5, max_contributions=100, rounds=3, ratio=0.5)
    for i, (scale, threshold) in enumerate(zip(cal.scales, cal.thresholds, strict=True), start=1):
        assert f"round {i} ({cal.fractions[i - 1]:.3g} of the budget): σ = {scale:.6g}, T = {threshold:.6g}" in out
    rows = _curve_rows(out)
    users = np.array([int(r[0]) for r in rows])
    table = np.array([[float(x) for x in r[1:]] for r in rows])  # round 1..3, all rounds, worst case
    per_round = np.stack([release_probability(users, scale=s, threshold=t) for s, t in zip(cal.scales, cal.thresholds, strict=True)])
    np.testing.assert_allclose(table[:, :3], per_round.T, atol=5e-5)
    np.testing.assert_allclose(table[:, 3], 1 - np.prod(1 - per_round, axis=0), atol=5e-5)
    assert np.all(table[:, 3] >= table[:, :3].max(axis=1) - 5e-5)
    assert "round 3 alone (1 item each): 50% at c = " in out
    assert _point(out, "50%", "1 item each") <= _point(out, "95%", "1 item each")


@pytest.mark.parametrize("command", ["top-k", "hitting-set"])
def test_dry_run_of_two_stage_commands_is_the_candidate_curve(
    capsys: pytest.CaptureFixture[str], never_read: None, command: str
) -> None:
    code, out, err = _run(capsys, "--dry-run", "--k", 5, command=command)
    assert code == 0, err
    assert "release curve: P(an item held by c users is a stage-1 candidate)" in out
    assert "peeling: 5 rounds" in out


def test_dry_run_plot_writes_a_png(capsys: pytest.CaptureFixture[str], tmp_path: Path, never_read: None) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "curve.png"
    code, out, err = _run(capsys, "--dry-run", "--mechanism", "dp-sips", "--plot", plot)
    assert code == 0, err
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot          {plot}" in out


DRY_RUN_ERRORS = {
    "plot without dry run": (["discover", "--plot", "{tmp}/c.png"], "--plot applies only with --dry-run"),
    "output with dry run": (["discover", "--dry-run", "-o", "-"], "--output does not apply with --dry-run"),
    "format with dry run": (["discover", "--dry-run", "--format", "csv"], "--format does not apply with --dry-run"),
    "plot not png": (["discover", "--dry-run", "--plot", "{tmp}/c.pdf"], "its name must end in .png"),
    "limited domain": (["top-k", "--k", "2", "--mechanism", "limited-domain", "--dry-run"],
                       "limited-domain top-k has none"),
    "plot directory missing": (["discover", "--dry-run", "--plot", "{tmp}/absent/c.png"], "cannot write --plot"),
}


@pytest.mark.parametrize("case", list(DRY_RUN_ERRORS))
def test_dry_run_errors(case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv, expected = DRY_RUN_ERRORS[case]
    code = main([a.format(tmp=tmp_path) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and expected in err, err
    assert list(tmp_path.iterdir()) == []


def test_nested_items_to_csv_are_refused_before_the_release(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """CSV cannot hold a struct item: refused after reading the schema, before the measurement is invoked;
    JSON keeps the struct."""
    import opendp.prelude as dp

    from opendp_wgm import measurements

    source = tmp_path / "pairs.parquet"
    pl.DataFrame({"user": list(range(N_USERS)), "item": [{"a": 1, "b": "x"}] * N_USERS}).write_parquet(source)
    make_wgm = measurements.make_wgm

    def never(*args: object, **kwargs: object) -> dp.Measurement:
        def function(frame: object) -> object:
            raise AssertionError("released before the output format was checked")

        return dp.m.make_user_measurement(*make_wgm(*args, **kwargs).input_space, dp.approximate(dp.max_divergence()),
                                          function, lambda d_in: (1.0, 1e-5))

    with monkeypatch.context() as patch:
        patch.setattr(measurements, "make_wgm", never)
        for output in ("-", str(tmp_path / "out.csv.gz")):
            code, out, err = _run(capsys, source, "-o", output)
            assert code == 2 and out == "", err
            assert "cannot write column(s) ['item'] (Struct" in err and "use --format json or ndjson" in err, err
    output = tmp_path / "out.json"
    code, _, err = _run(capsys, source, "-o", output)
    assert code == 0, err
    assert json.loads(output.read_text())[0]["item"] == {"a": 1, "b": "x"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "pairs.parquet"]


def test_existing_plot_needs_force(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "curve.png"
    plot.write_bytes(b"keep me")
    code, _, err = _run(capsys, "--dry-run", "--plot", plot)
    assert code == 2 and "already exists (add --force to overwrite it)" in err
    assert plot.read_bytes() == b"keep me"
    code, _, err = _run(capsys, "--dry-run", "--plot", plot, "--force")
    assert code == 0, err
    assert plot.read_bytes()[:4] == b"\x89PNG"
