"""The ``opendp-wgm`` command, run in-process through :func:`opendp_wgm.cli.main`."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from opendp_wgm.cli import main
from tests.engine_modules import patch_engine

N_USERS = 300


def _frame(common: object, solo: list[object], dtype: pl.DataType) -> pl.DataFrame:
    """``N_USERS`` users who all hold ``common``, each also holding one item nobody else holds.

    At ε = 1, δ = 1e-5, Δ0 = 100 (σ ≈ 3.88, T ≈ 20.8) ``common`` has weight 300/√2 ≈ 212 and is released
    with overwhelming probability; a solo item (weight 1/√2) passes with probability ≈ 1e-7 each.
    """
    users = [u for u in range(N_USERS) for _ in range(2)]
    items = [x for u in range(N_USERS) for x in (common, solo[u])]
    return pl.DataFrame({"uid": users, "thing": items}, schema={"uid": pl.Int64, "thing": dtype})


@pytest.fixture
def text_frame() -> pl.DataFrame:
    return _frame("a", [f"solo{u}" for u in range(N_USERS)], pl.String)


@pytest.fixture
def csv_path(tmp_path: Path, text_frame: pl.DataFrame) -> Path:
    path = tmp_path / "data.csv"
    text_frame.write_csv(path)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main(["discover", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_summary(err: str) -> None:
    for part in ("σ = ", "T = ", "budget spent", "Δ0 = 100", "rows", "released", "run time"):
        assert part in err, (part, err)


# --------------------------------------------------------------------------------------------------------
# successful runs
# --------------------------------------------------------------------------------------------------------
def test_demo_prints_release_summary_and_missing_mass(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--demo-users", 2000, "--seed", 0)
    assert code == 0
    assert "noisy_weight" in out
    _assert_summary(err)
    assert "missing mass of the release = 0." in err
    assert "distinct items" in err
    assert "ε = 1, δ = " in err and "max_divergence" in err
    assert "2,000 users" in err and "40,000 rows" in err


def test_csv_releases_the_common_item_only(
    capsys: pytest.CaptureFixture[str], csv_path: Path, tmp_path: Path
) -> None:
    output = tmp_path / "released.csv"
    code, out, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing", "--output", output)
    assert code == 0, err
    assert out == ""  # the release went to the file
    released = pl.read_csv(output)
    assert released.columns == ["thing", "noisy_weight"]
    assert released.schema["thing"] == pl.String
    assert "a" in released["thing"].to_list()
    assert not released["thing"].str.starts_with("solo").any()
    _assert_summary(err)
    assert f"{2 * N_USERS:,} rows" in err
    assert "missing mass" not in err  # only the demo evaluates against the raw data


def test_release_printed_to_stdout_without_output(capsys: pytest.CaptureFixture[str], csv_path: Path) -> None:
    code, out, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing")
    assert code == 0, err
    assert "items released" in out
    assert any(line.startswith("│ a ") for line in out.splitlines()), out
    assert "solo" not in out


def test_parquet_input_and_output_keep_item_dtype(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    frame = _frame(7, list(range(1000, 1000 + N_USERS)), pl.Int32)
    source, output = tmp_path / "data.parquet", tmp_path / "released.pq"
    frame.write_parquet(source)
    code, _, err = _run(capsys, source, "--user", "uid", "--item", "thing", "-o", output, "--epsilon", 2)
    assert code == 0, err
    released = pl.read_parquet(output)
    assert released.schema == pl.Schema({"thing": pl.Int32, "noisy_weight": pl.Float64})
    assert released["thing"].to_list() == [7]
    assert "ε = 2" in err


def test_rho_gives_approximate_zcdp(capsys: pytest.CaptureFixture[str], csv_path: Path) -> None:
    code, _, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing", "--rho", 0.5, "--delta", 1e-6)
    assert code == 0, err
    assert "ρ = 0.5, δ = " in err and "zero_concentrated_divergence" in err
    assert "requested ρ = 0.5, δ = 1e-06" in err


def test_opendp_noise(capsys: pytest.CaptureFixture[str], csv_path: Path) -> None:
    code, out, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing", "--noise", "opendp")
    assert code == 0, err
    assert any(line.startswith("│ a ") for line in out.splitlines()), out
    assert "noise = opendp" in err


def test_compressed_tsv(capsys: pytest.CaptureFixture[str], tmp_path: Path, text_frame: pl.DataFrame) -> None:
    path = tmp_path / "data.tsv.gz"
    path.write_bytes(gzip.compress(text_frame.write_csv(separator="\t").encode()))
    code, out, err = _run(capsys, path, "--user", "uid", "--item", "thing", "--max-contributions", 1)
    assert code == 0, err
    assert any(line.startswith("│ a ") for line in out.splitlines()), out
    assert "Δ0 = 1," in err


def test_separator_option(capsys: pytest.CaptureFixture[str], tmp_path: Path, text_frame: pl.DataFrame) -> None:
    path = tmp_path / "data.csv"
    text_frame.write_csv(path, separator=";")
    code, out, err = _run(capsys, path, "--user", "uid", "--item", "thing", "--separator", ";")
    assert code == 0, err
    assert any(line.startswith("│ a ") for line in out.splitlines()), out


def test_csv_items_that_look_like_integers_are_strings(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # the first 10,000 items look like integers; the last one does not: all are read as String
    n = 10_001
    frame = pl.DataFrame({"user": list(range(n)), "item": [str(u % 3) for u in range(n - 1)] + ["x"]})
    path = tmp_path / "late_text.csv"
    frame.write_csv(path)
    output = tmp_path / "released.parquet"
    code, _, err = _run(capsys, path, "-o", output)
    assert code == 0, err
    released = pl.read_parquet(output)
    assert released.schema["item"] == pl.String
    assert sorted(released["item"].to_list()) == ["0", "1", "2"]


def test_null_rows_are_dropped_and_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text_frame: pl.DataFrame
) -> None:
    path = tmp_path / "nulls.parquet"
    nulls = pl.DataFrame({"uid": [None, 1], "thing": ["a", None]}, schema=text_frame.schema)
    pl.concat([text_frame, nulls]).write_parquet(path)
    code, _, err = _run(capsys, path, "--user", "uid", "--item", "thing")
    assert code == 0, err
    assert "2 rows with a null user or item were dropped" in err


def test_help_mentions_enabled_features(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "--help"]) == 0
    out = capsys.readouterr().out
    assert "honest-but-curious" in out and "--max-contributions" in out


# --------------------------------------------------------------------------------------------------------
# errors: exit status 2 and one line on stderr, no traceback
# --------------------------------------------------------------------------------------------------------
ERROR_CASES = {
    "missing file": (["{tmp}/nope.csv"], "not found"),
    "unsupported suffix": (["{json}"], "unsupported file type '.json'"),
    "missing column": (["{csv}", "--user", "uid", "--item", "nope"], "column 'nope' not found"),
    "epsilon zero": (["--epsilon", "0"], "argument --epsilon: must be in (0.0, inf) (found 0.0)"),
    "epsilon negative": (["--epsilon", "-1"], "argument --epsilon: must be in (0.0, inf) (found -1.0)"),
    "epsilon not a number": (["--epsilon", "one"], "argument --epsilon: invalid float value"),
    "rho zero": (["--rho", "0"], "argument --rho: must be in (0.0, inf) (found 0.0)"),
    "delta zero": (["--delta", "0"], "argument --delta: must be in (0.0, 1.0) (found 0.0)"),
    "delta one": (["--delta", "1"], "argument --delta: must be in (0.0, 1.0) (found 1.0)"),
    "max contributions zero": (["--max-contributions", "0"], "argument --max-contributions: must be an integer >= 1 (found 0)"),
    "epsilon and rho": (["--epsilon", "1", "--rho", "1"], "argument --rho: not allowed with argument --epsilon"),
    "fraction with rho": (["--rho", "1", "--noise-delta-fraction", "0.3"], "--noise-delta-fraction applies only"),
    "output suffix": (["{csv}", "--user", "uid", "--item", "thing", "-o", "{tmp}/out.xlsx"], "unsupported output type"),
    "seed with path": (["{csv}", "--seed", "1"], "--seed applies only to the demo"),
    "bad separator": (["{csv}", "--separator", ";;"], "--separator must be a single"),
    "passes zero": (["--passes", "0"], "argument --passes: must be an integer >= 1 (found 0)"),
    "schema unknown dtype": (["{csv}", "--schema", "uid=Integer"], "dtype must be one of String, Categorical, Int8"),
    "schema not col=dtype": (["{csv}", "--schema", "uid"], "argument --schema: entries must be COL=DTYPE (found 'uid')"),
    "schema unknown column": (["{csv}", "--user", "uid", "--item", "thing", "--schema", "nope=Int64"],
                              "--schema names column(s) ['nope'] not in"),
    "schema on parquet": (["{empty_parquet}", "--schema", "user=Int64"], "--schema applies only to CSV input"),
    "schema on the demo": (["--schema", "user=Int64"], "--schema applies only to CSV input, not to the demo"),
    "schema does not parse": (["{csv}", "--user", "uid", "--item", "thing", "--schema", "thing=Int64"],
                              "(check --schema)"),
    "null dtype item": (["{null_item}"], "--item column 'item' of "),
    "passes not an integer": (["--passes", "two"], "argument --passes: invalid integer: 'two'"),
    "bad engine": (["--engine", "gpu"], "argument --engine: invalid choice: 'gpu'"),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_errors_exit_2_with_one_line(
    case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, csv_path: Path
) -> None:
    json, empty_csv, empty_parquet = tmp_path / "data.json", tmp_path / "empty.csv", tmp_path / "empty.parquet"
    json.write_text("{}")
    empty_csv.write_text("user,item\n")
    pl.DataFrame(schema={"user": pl.Int64, "item": pl.String}).write_parquet(empty_parquet)
    null_item, null_rows = tmp_path / "null_item.parquet", tmp_path / "null_rows.csv"
    pl.DataFrame({"user": [1, 2], "item": [None, None]}, schema={"user": pl.Int64, "item": pl.Null}).write_parquet(
        null_item
    )
    null_rows.write_text("user,item\n1,\n,a\n")
    paths = {"tmp": tmp_path, "csv": csv_path, "json": json, "empty_csv": empty_csv, "empty_parquet": empty_parquet,
             "null_item": null_item, "null_rows": null_rows}
    argv, expected = ERROR_CASES[case]
    code, out, err = _run(capsys, *(a.format(**paths) for a in argv))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("opendp-wgm: error: "), err
    assert expected in err, err
    assert "Traceback" not in err


def test_no_command_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opendp-wgm: error: ") and err.count("\n") == 1


# --------------------------------------------------------------------------------------------------------
# the installed console script
# --------------------------------------------------------------------------------------------------------
def test_console_script_help() -> None:
    script = shutil.which("opendp-wgm")
    if script is None:
        pytest.skip("the opendp-wgm console script is not on PATH (pip install -e .)")
    result = subprocess.run([script, "discover", "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "usage: opendp-wgm discover" in result.stdout
    assert "honest-but-curious" in result.stdout


# --------------------------------------------------------------------------------------------------------
# top-k and hitting-set
# --------------------------------------------------------------------------------------------------------
def _run_command(capsys: pytest.CaptureFixture[str], command: str, *argv: object) -> tuple[int, str, str]:
    code = main([command, *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def ranked_csv(tmp_path: Path) -> Path:
    """400 users hold "a", 50 others hold "b". At ε = 1, δ = 1e-5 (WGM at ε/2: σ ≈ 7.7, T ≈ 42) "a" is
    released and then picked first with overwhelming probability (its score beats b's by 350 users, and a
    round's ε' is ≥ 0.2); so is it by limited-domain top-k (ε' ≈ 1, threshold ≈ 15)."""
    path = tmp_path / "ranked.csv"
    users = list(range(450))
    pl.DataFrame({"uid": users, "thing": ["a"] * 400 + ["b"] * 50}).write_csv(path)
    return path


def test_top_k_demo(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run_command(capsys, "top-k", "--k", 5, "--demo-users", 2000, "--seed", 0)
    assert code == 0, err
    assert "items released; the first 5 by rank" in out and "rank" in out
    assert "opendp-wgm top-k: WGM-then-top-k released 5 items" in err
    for part in ("σ = ", "T = ", "Δ0 = 100", "5 rounds, ε' = ", "stage loss    WGM ε = ", "; peeling ε = ",
                 "budget spent  ε = ", "requested ε = 1, δ = 1e-05", "40,000 rows", "run time"):
        assert part in err, (part, err)
    assert "top-5 missing mass of the release = 0." in err and "(not private)" in err


def test_top_k_limited_domain_demo(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run_command(
        capsys, "top-k", "--k", 3, "--mechanism", "limited-domain", "--demo-users", 1000, "--seed", 1
    )
    assert code == 0, err
    assert "rank" in out
    assert "limited-domain top-k released" in err
    assert "k̄ = 15, Δ0 = 100" in err  # the default k̄ = 5k
    assert "max_divergence" in err and "top-3 missing mass of the release = " in err


@pytest.mark.parametrize(
    "options",
    [[], ["--rho", "0.5", "--split", "0.3"], ["--mechanism", "limited-domain", "--k-bar", "2"]],
    ids=["wgm-epsilon", "wgm-rho", "limited-domain"],
)
def test_top_k_ranks_the_common_item_first(
    capsys: pytest.CaptureFixture[str], ranked_csv: Path, tmp_path: Path, options: list[str]
) -> None:
    output = tmp_path / "top.csv"
    code, out, err = _run_command(
        capsys, "top-k", ranked_csv, "--user", "uid", "--item", "thing", "--k", 1, "-o", output, *options
    )
    assert code == 0, err
    assert out == ""
    released = pl.read_csv(output)
    assert released.columns == ["thing", "rank"]
    assert released.rows() == [("a", 1)]
    assert "450 rows (not private)" in err and "missing mass" not in err  # only the demo evaluates
    assert f"output        {output}" in err


def test_top_k_prints_the_ranking_without_output(capsys: pytest.CaptureFixture[str], ranked_csv: Path) -> None:
    code, out, err = _run_command(capsys, "top-k", ranked_csv, "--user", "uid", "--item", "thing", "--k", 1)
    assert code == 0, err
    assert "1 items released; the first 1 by rank" in out
    assert any(line.startswith("│ a ") for line in out.splitlines()), out


@pytest.mark.parametrize(
    "argv",
    [
        ["top-k", "--k", 3],
        ["top-k", "--k", 3, "--stage-1", "dp-sips", "--rounds", 2],
        ["hitting-set", "--k", 3, "--rho", 0.3],
        ["hitting-set", "--k", 3, "--stage-1", "dp-sips"],
    ],
    ids=["top-k", "top-k-dp-sips", "hitting-set", "hitting-set-dp-sips"],
)
def test_two_stage_commands_calibrate_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[object]
) -> None:
    """The summary's calibration is the measurement's: one calibration per command (was two: the command
    calibrated for its summary, then the ``_from_budget`` constructor calibrated again)."""
    from opendp_wgm.privacy import two_stage_calibration

    calls: list[int] = []
    original = two_stage_calibration._checked_stage_1  # stage 1's calibration, once per two-stage calibration
    monkeypatch.setattr(
        two_stage_calibration, "_checked_stage_1", lambda *a, **o: calls.append(1) or original(*a, **o)
    )
    code, _out, err = _run_command(capsys, *argv, "--demo-users", 300, "--seed", 0)
    assert code == 0, err
    assert len(calls) == 1


def test_hitting_set_demo(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run_command(capsys, "hitting-set", "--k", 4, "--demo-users", 1500, "--seed", 2, "--rho", 0.3)
    assert code == 0, err
    assert "items released; the first 4 by rank" in out
    assert "opendp-wgm hitting-set: WGM-then-peeling released 4 items" in err
    for part in ("σ = ", "T = ", "4 rounds, ε' = ", "stage loss    WGM ρ = ", "; peeling ρ = ",
                 "requested ρ = 0.3", "zero_concentrated_divergence"):
        assert part in err, (part, err)
    assert "1,500 users; the release misses " in err and "(coverage " in err
    assert "the non-private greedy 4-set misses " in err
    assert err.count("(not private)") == 3  # the input, the release's and greedy's missed users


def test_hitting_set_picks_the_common_item(
    capsys: pytest.CaptureFixture[str], ranked_csv: Path, tmp_path: Path
) -> None:
    source, output = tmp_path / "ranked.parquet", tmp_path / "picks.parquet"
    pl.read_csv(ranked_csv).with_columns(pl.col("thing").cast(pl.Categorical)).write_parquet(source)
    code, _out, err = _run_command(
        capsys, "hitting-set", source, "--user", "uid", "--item", "thing", "--k", 1, "-o", output,
        "--noise-delta-fraction", 0.4,
    )
    assert code == 0, err
    released = pl.read_parquet(output)
    assert released.columns == ["thing", "rank"]
    assert released.schema["thing"] == pl.Categorical and released.schema["rank"] == pl.UInt32
    assert released["thing"].cast(pl.String).to_list() == ["a"]
    assert "misses" not in err


@pytest.mark.parametrize(
    ("command", "options", "expected"),
    [
        ("discover", ["--passes", "2"], "2 passes (disjoint user buckets), Polars engine auto"),
        ("top-k", ["--k", "1", "--passes", "2", "--engine", "streaming"],
         "2 passes (disjoint user buckets), Polars engine streaming"),
        ("hitting-set", ["--k", "1", "--passes", "2", "--engine", "in-memory"],
         "2 passes (disjoint user buckets), Polars engine in-memory"),
    ],
)
def test_passes_on_a_parquet_file(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, ranked_csv: Path, tmp_path: Path,
    command: str, options: list[str], expected: str,
) -> None:
    """--passes 2: the WGM (stage 1 of top-k and hitting-set) builds one plan per user bucket, same release."""
    from opendp_wgm.engines import polars as kernel

    plans: list[int] = []
    bounded_lists_plan = kernel.bounded_lists_plan

    def counted(*args, **options):
        plans.append(1)
        return bounded_lists_plan(*args, **options)

    patch_engine(monkeypatch, "bounded_lists_plan", counted)
    source = tmp_path / "ranked.parquet"
    pl.read_csv(ranked_csv).write_parquet(source)
    code, out, err = _run_command(capsys, command, source, "--user", "uid", "--item", "thing", *options)
    assert code == 0, err
    assert len(plans) == 2
    assert any(line.startswith("│ a ") for line in out.splitlines()), out
    assert f"  execution     {expected}" in err


@pytest.mark.parametrize("command", ["top-k", "hitting-set"])
def test_new_commands_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"usage: opendp-wgm {command}" in out
    assert "--k K" in out and "--split S" in out and "honest-but-curious" in out and "(item, rank)" in out
    assert ("--k-bar" in out) == (command == "top-k")
    assert ("--noise-delta-fraction" in out) == (command == "hitting-set")
    assert "--passes N" in out and "--engine {auto,in-memory,streaming}" in out
    assert main(["--help"]) == 0
    assert command in capsys.readouterr().out


NEW_ERROR_CASES = {
    "top-k k zero": (["top-k", "--k", "0"], "argument --k: must be an integer >= 1 (found 0)"),
    "top-k k negative, limited domain": (["top-k", "--k", "-1", "--mechanism", "limited-domain"],
                                         "argument --k: must be an integer >= 1 (found -1)"),
    "top-k without k": (["top-k"], "the following arguments are required: --k"),
    "top-k k-bar with wgm": (["top-k", "--k", "2", "--k-bar", "10"], "--k-bar applies only to --mechanism limited-domain"),
    "top-k k-bar below k": (["top-k", "--k", "5", "--mechanism", "limited-domain", "--k-bar", "4"],
                            "--k (5) must be <= --k-bar (4)"),
    "top-k split one": (["top-k", "--k", "2", "--split", "1"], "argument --split: must be in (0.0, 1.0) (found 1.0)"),
    "top-k split zero": (["top-k", "--k", "2", "--split", "0"], "argument --split: must be in (0.0, 1.0) (found 0.0)"),
    "top-k split negative": (["top-k", "--k", "2", "--split", "-0.5"], "argument --split: must be in (0.0, 1.0) (found -0.5)"),
    "top-k limited domain with rho": (["top-k", "--k", "2", "--mechanism", "limited-domain", "--rho", "0.5"],
                                      "--mechanism limited-domain is (ε, δ)-DP only"),
    "top-k limited domain with split": (["top-k", "--k", "2", "--mechanism", "limited-domain", "--split", "0.5"],
                                        "--split applies only to --mechanism wgm"),
    "top-k limited domain with noise": (["top-k", "--k", "2", "--mechanism", "limited-domain", "--noise", "opendp"],
                                        "--noise applies only to --mechanism wgm"),
    "top-k bad mechanism": (["top-k", "--k", "2", "--mechanism", "greedy"], "argument --mechanism: invalid choice"),
    "top-k noise delta fraction": (["top-k", "--k", "2", "--noise-delta-fraction", "0.3"], "unrecognized arguments"),
    "top-k delta one": (["top-k", "--k", "2", "--delta", "1"], "argument --delta: must be in (0.0, 1.0) (found 1.0)"),
    "top-k passes zero": (["top-k", "--k", "2", "--passes", "0"],
                          "argument --passes: must be an integer >= 1 (found 0)"),
    "top-k bad engine": (["top-k", "--k", "2", "--engine", "gpu"], "argument --engine: invalid choice: 'gpu'"),
    "top-k limited domain with passes": (["top-k", "--k", "2", "--mechanism", "limited-domain", "--passes", "2"],
                                         "--passes applies only to --mechanism wgm"),
    "top-k limited domain with engine": (
        ["top-k", "--k", "2", "--mechanism", "limited-domain", "--engine", "streaming"],
        "--engine applies only to --mechanism wgm",
    ),
    "hitting-set k zero": (["hitting-set", "--k", "0"], "argument --k: must be an integer >= 1 (found 0)"),
    "hitting-set split one": (["hitting-set", "--k", "2", "--split", "1"], "argument --split: must be in (0.0, 1.0) (found 1.0)"),
    "hitting-set split above one": (["hitting-set", "--k", "2", "--split", "1.5"], "argument --split: must be in (0.0, 1.0) (found 1.5)"),
    "hitting-set fraction with rho": (["hitting-set", "--k", "2", "--rho", "1", "--noise-delta-fraction", "0.3"],
                                      "--noise-delta-fraction applies only"),
    "hitting-set k-bar": (["hitting-set", "--k", "2", "--k-bar", "4"], "unrecognized arguments: --k-bar"),
    "hitting-set passes negative": (["hitting-set", "--k", "2", "--passes", "-3"],
                                    "argument --passes: must be an integer >= 1 (found -3)"),
    "hitting-set bad engine": (["hitting-set", "--k", "2", "--engine", "Streaming"],
                               "argument --engine: invalid choice: 'Streaming'"),
    "hitting-set missing column": (["hitting-set", "{csv}", "--k", "2", "--item", "nope", "--user", "uid"],
                                   "column 'nope' not found"),
    "top-k output suffix": (["top-k", "{csv}", "--k", "2", "--user", "uid", "--item", "thing", "-o", "{tmp}/o.xlsx"],
                            "unsupported output type"),
}


@pytest.mark.parametrize("case", list(NEW_ERROR_CASES))
def test_new_command_errors_exit_2_with_one_line(
    case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, csv_path: Path
) -> None:
    argv, expected = NEW_ERROR_CASES[case]
    code, out, err = _run_command(capsys, *(a.format(tmp=tmp_path, csv=csv_path) for a in argv))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("opendp-wgm: error: "), err
    assert expected in err, err
    assert "Traceback" not in err


def test_reproduce_is_a_subcommand(tmp_path, capsys) -> None:
    """`opendp-wgm reproduce` reaches the experiment runner; bad input is a one-line error before any work."""
    from opendp_wgm.cli import main

    assert main(["reproduce", "set-union", "--data", str(tmp_path / "absent"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("opendp-wgm: error:") and "absent" in err[0]
    assert main(["reproduce", "set-union", "--data", str(tmp_path), "--out", str(tmp_path), "--l0", "1,x"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# --------------------------------------------------------------------------------------------------------
# nothing a user gives us is lost or silently changed: the input, an existing output, a partial write
# --------------------------------------------------------------------------------------------------------
def _no_temporaries(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("alias", ["same path", "relative path", "symlink", "hard link"])
@pytest.mark.parametrize("force", [False, True])
def test_output_equal_to_input_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, csv_path: Path, alias: str, force: bool
) -> None:
    before = csv_path.read_bytes()
    (csv_path.parent / "sub").mkdir()
    monkeypatch.chdir(csv_path.parent)
    output = {"same path": csv_path, "relative path": Path("sub", "..", csv_path.name)}.get(alias)
    if output is None:
        output = csv_path.parent / "alias.csv"
        (output.symlink_to if alias == "symlink" else output.hardlink_to)(csv_path)
    code, out, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing", "-o", output, *(["--force"] * force))
    assert code == 2 and out == ""
    assert err.startswith("opendp-wgm: error: --output ") and "is the input file" in err and err.count("\n") == 1
    assert csv_path.read_bytes() == before
    assert _no_temporaries(csv_path.parent)


def test_existing_output_needs_force(capsys: pytest.CaptureFixture[str], csv_path: Path, tmp_path: Path) -> None:
    output = tmp_path / "released.csv"
    output.write_text("keep me\n")
    code, _, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing", "-o", output)
    assert code == 2 and "already exists (add --force to overwrite it)" in err
    assert output.read_text() == "keep me\n"
    code, _, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing", "-o", output, "--force")
    assert code == 0, err
    assert "a" in pl.read_csv(output)["thing"].to_list()
    assert _no_temporaries(tmp_path)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_failed_write_leaves_no_partial_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, csv_path: Path, tmp_path: Path, suffix: str
) -> None:
    """The writer fails midway (after writing some bytes): neither the output nor a temporary file remains,
    and an existing output replaced with --force keeps its old content."""

    def half_write(self: pl.DataFrame, file: Path, *args: object, **kwargs: object) -> None:
        Path(file).write_text("item,noisy_weight\na,")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pl.DataFrame, "write_csv", half_write)
    monkeypatch.setattr(pl.DataFrame, "write_parquet", half_write)
    fresh, existing = tmp_path / f"fresh{suffix}", tmp_path / f"existing{suffix}"
    existing.write_text("old release\n")
    code, _, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing", "-o", fresh)
    assert code == 2 and "No space left on device" in err and err.count("\n") == 1
    assert not fresh.exists()
    code, _, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing", "-o", existing, "--force")
    assert code == 2
    assert existing.read_text() == "old release\n"
    assert _no_temporaries(tmp_path)


@pytest.mark.parametrize("failure", ["access denied", "cannot create a file"])
def test_unwritable_output_directory_is_refused_before_the_release(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, csv_path: Path, tmp_path: Path, failure: str
) -> None:
    import tempfile

    from opendp_wgm import measurements
    from opendp_wgm.cli import _report

    def never(*args: object, **kwargs: object) -> None:
        pytest.fail("the measurement was built or the data read before the output was checked")

    monkeypatch.setattr(measurements, "make_wgm", never)
    monkeypatch.setattr(_report, "_read_input", never)
    if failure == "access denied":  # root passes every permission check: ask os.access directly
        monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)
    else:
        def refuse(*args: object, **kwargs: object) -> None:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    output = tmp_path / "out" / "released.csv"
    output.parent.mkdir()
    code, _, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing", "-o", output)
    assert code == 2 and err.startswith(f"opendp-wgm: error: cannot write {str(output)!r}: ") and err.count("\n") == 1
    assert list(output.parent.iterdir()) == []


# --------------------------------------------------------------------------------------------------------
# CSV ids are strings unless --schema says otherwise
# --------------------------------------------------------------------------------------------------------
def test_csv_items_007_and_7_stay_distinct(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """300 users hold "007", 300 others hold "7": two items, each released (weight 300 >> T ≈ 20.8)."""
    path, output = tmp_path / "ids.csv", tmp_path / "released.parquet"
    path.write_text("user,item\n" + "".join(f"{u},{'007' if u % 2 else '7'}\n" for u in range(600)))
    code, _, err = _run(capsys, path, "-o", output)
    assert code == 0, err
    released = pl.read_parquet(output)
    assert released.schema["item"] == pl.String
    assert sorted(released["item"].to_list()) == ["007", "7"]


def test_csv_users_0012_012_12_stay_distinct(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Users "g", "0g", "00g" for 300 values g each hold item "a" alone: 900 users of weight 1 each. Read as
    integers they would be 300 users (weight 300). σ ≈ 3.88 at ε = 1, so the two are 77σ apart."""
    path, output = tmp_path / "users.csv", tmp_path / "released.csv"
    path.write_text("user,item\n" + "".join(f"{z}{g},a\n" for g in range(1, 301) for z in ("", "0", "00")))
    code, _, err = _run(capsys, path, "-o", output)
    assert code == 0, err
    assert pl.read_csv(output)["noisy_weight"].item() > 600
    # --schema user=Int64 asks for the merge explicitly; item dtypes follow --schema too
    code, _, err = _run(capsys, path, "-o", output, "--force", "--schema", "user=Int64")
    assert code == 0, err
    assert pl.read_csv(output)["noisy_weight"].item() < 600


def test_schema_sets_the_item_dtype(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, output = tmp_path / "ids.csv", tmp_path / "released.parquet"
    path.write_text("user,item\n" + "".join(f"{u},{'007' if u % 2 else '7'}\n" for u in range(600)))
    code, _, err = _run(capsys, path, "-o", output, "--schema", "item=uint16")
    assert code == 0, err
    assert pl.read_parquet(output).schema["item"] == pl.UInt16
    assert pl.read_parquet(output)["item"].to_list() == [7]


def test_release_error_shows_the_callbacks_message(capsys: pytest.CaptureFixture[str], monkeypatch, csv_path) -> None:
    """An error raised inside the release reaches the user as its own last line, not OpenDP's first."""
    import opendp.prelude as dp

    from opendp_wgm import measurements

    def failing(*args: object, **kwargs: object) -> dp.Measurement:
        def function(frame: object) -> object:
            raise RuntimeError("the real reason")

        return dp.m.make_user_measurement(
            dp.user_domain("any", lambda _: True), dp.symmetric_distance(), dp.approximate(dp.max_divergence()),
            function, lambda d_in: (1.0, 1e-5),
        )

    monkeypatch.setattr(measurements, "make_wgm", failing)
    code, _, err = _run(capsys, csv_path, "--user", "uid", "--item", "thing")
    assert code == 2
    assert err == f"opendp-wgm: error: cannot release from {csv_path}: RuntimeError: the real reason\n"


# --------------------------------------------------------------------------------------------------------
# Ctrl-C during the release: exit 130, nothing written, no crash in OpenDP's FFI
# --------------------------------------------------------------------------------------------------------
_SLOW_RELEASE = """
import sys, time
from opendp_wgm.measurements import wgm
original = wgm.release_above_threshold
def slow(*args, **kwargs):  # inside the measurement's callback: announce it, then wait for SIGINT
    print("RELEASING", file=sys.stderr, flush=True)
    time.sleep(120)
    return original(*args, **kwargs)
wgm.release_above_threshold = slow
from opendp_wgm.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_during_the_release_exits_130_and_writes_nothing(
    csv_path: Path, tmp_path: Path, interrupt_when_releasing
) -> None:
    output = tmp_path / "released.parquet"
    code, out, err = interrupt_when_releasing(
        _SLOW_RELEASE, ["discover", str(csv_path), "--user", "uid", "--item", "thing", "-o", str(output)]
    )
    assert code == 130, err
    assert err.strip() == "opendp-wgm: interrupted; nothing was written"
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == [csv_path.name]


# --------------------------------------------------------------------------------------------------------
# start-up: --help, --version and argument errors import nothing heavy
# --------------------------------------------------------------------------------------------------------
_IMPORTS = """
import sys
from opendp_wgm.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("opendp", "numpy", "scipy", "polars", "opendp_wgm.measurements", "opendp_wgm.privacy")
               if m in sys.modules)
print("HEAVY", heavy, code)
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"], ["--version"], ["discover", "--epsilon", "0"], ["top-k", "--help"], ["reproduce", "--help"],
        ["audit", "--help"], ["nope"],
    ],
    ids=["help", "version", "argument error", "command help", "reproduce help", "audit help", "unknown command"],
)
def test_start_up_imports_nothing_heavy(argv: list[str]) -> None:
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run(
        [sys.executable, "-c", _IMPORTS, *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert result.stdout.splitlines()[-1] in ("HEAVY [] 0", "HEAVY [] 2"), result.stdout + result.stderr


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import opendp_wgm

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"opendp-wgm {opendp_wgm.__version__}\n"


def test_reproduce_help_is_the_experiments_help(capsys: pytest.CaptureFixture[str]) -> None:
    """The one-line help listed by `opendp-wgm --help` is the experiments' (kept in cli to start fast);
    `reproduce --help` shows the experiments' arguments, added on first use."""
    from opendp_wgm.cli import reproduce
    from opendp_wgm.experiments import REPRODUCE_DESCRIPTION, REPRODUCE_HELP

    assert reproduce._HELP == REPRODUCE_HELP
    assert main(["--help"]) == 0
    assert "reproduce" in capsys.readouterr().out
    assert main(["reproduce", "--help"]) == 0
    out = capsys.readouterr().out
    assert REPRODUCE_DESCRIPTION.splitlines()[0] in out and "--data" in out


def test_audit_help_is_the_audit_packages_help(capsys: pytest.CaptureFixture[str]) -> None:
    """`audit` is listed with the audit package's one-line help; its arguments are added on first use."""
    from opendp_wgm.cli import audit
    from opendp_wgm.cli._audit import AUDIT_DESCRIPTION, AUDIT_HELP

    assert audit._HELP == AUDIT_HELP
    assert main(["--help"]) == 0
    assert "audit" in capsys.readouterr().out
    assert main(["audit", "--help"]) == 0
    out = capsys.readouterr().out
    assert AUDIT_DESCRIPTION.splitlines()[0] in out and "--mechanism" in out


# --------------------------------------------------------------------------------------------------------
# discover --mechanism dp-sips
# --------------------------------------------------------------------------------------------------------
def test_discover_dp_sips_releases_rounds_and_prints_each_rounds_calibration(
    capsys: pytest.CaptureFixture[str], csv_path: Path, tmp_path: Path
) -> None:
    out_path = tmp_path / "released.parquet"
    code, _, err = _run(
        capsys, csv_path, "--user", "uid", "--item", "thing", "--mechanism", "dp-sips", "--rounds", "2",
        "--ratio", "0.5", "-o", out_path,
    )
    assert code == 0, err
    released = pl.read_parquet(out_path)
    assert released.columns == ["thing", "noisy_weight", "round"] and released["round"].dtype == pl.Int16
    assert "a" in released["thing"].to_list()  # 300 users: released in round 1 or 2
    assert "DP-SIPS (2 rounds)" in err
    # fractions 1/3, 2/3; each round's σ and T on its own line
    assert "round 1 (0.333 of the budget): σ = " in err and "round 2 (0.667 of the budget): σ = " in err
    assert "budget spent  ε = 1, δ = 1e-05" in err


def test_discover_dp_sips_default_is_adaptive_and_prints_both_branches_and_the_one_taken(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_path = tmp_path / "released.parquet"
    code, _, err = _run(capsys, "--demo-users", 2000, "--mechanism", "dp-sips", "-o", out_path)
    assert code == 0, err
    released = pl.read_parquet(out_path)
    assert "DP-SIPS (adaptive: 2 or 3 rounds)" in err and "budget spent  ε = 1, δ = 1e-05" in err
    assert "round 1 (0.01 of the budget): σ = 44.8502" in err and "branch count: σ = 77.6828" in err
    assert "sparse branch: round 2 (0.99 of the budget): σ = 3.90371" in err
    assert "dense branch:  round 2 (0.228 of the budget)" in err and "dense branch:  round 3 (0.762" in err
    dense = released["round"].max() == 3
    assert ("branch        dense (rounds 2 and 3)" in err) == dense
    assert ("branch        sparse (one more round)" in err) == (not dense)
    counts = released.group_by("round").len().sort("round")
    assert "items per round: " + ", ".join(f"{r}: {n:,}" for r, n in counts.iter_rows()) in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "2"], "--rounds applies only with --mechanism dp-sips"),
        (["--mechanism", "dp-sips", "--ratio", "0"], "argument --ratio: must be in (0.0, inf) (found 0.0)"),
        (["--mechanism", "dp-sips", "--rounds", "0"], "must be an integer >= 1"),
        (["--mechanism", "sips"], "invalid choice"),
    ],
)
def test_discover_dp_sips_bad_options(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, _, err = _run(capsys, "--demo-users", 50, *argv)
    assert code == 2 and message in err, err


# --------------------------------------------------------------------------------------------------------
# discover --mechanism partition-selection
# --------------------------------------------------------------------------------------------------------
def test_discover_partition_selection_releases_the_items_only(
    capsys: pytest.CaptureFixture[str], csv_path: Path, tmp_path: Path
) -> None:
    out_path = tmp_path / "released.parquet"
    code, out, err = _run(
        capsys, csv_path, "--user", "uid", "--item", "thing", "--mechanism", "partition-selection", "-o", out_path
    )
    assert code == 0, err
    released = pl.read_parquet(out_path)
    assert released.columns == ["thing"] and "a" in released["thing"].to_list()  # 300 holders ≥ n* = 23
    assert "partition selection released" in err and "budget spent  ε = 1, δ = 1e-05" in err
    code, out, err = _run(capsys, "--demo-users", 500, "--mechanism", "partition-selection")
    assert code == 0 and "items released; the first" in out, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rho", "0.1"], "--mechanism partition-selection needs --epsilon"),
        (["--noise", "opendp"], "--noise and --noise-delta-fraction do not apply"),
        (["--noise-delta-fraction", "0.3"], "--noise and --noise-delta-fraction do not apply"),
    ],
)
def test_discover_partition_selection_bad_options(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = _run(capsys, "--demo-users", 50, "--mechanism", "partition-selection", *argv)
    assert code == 2 and message in err, err


# --------------------------------------------------------------------------------------------------------
# top-k / hitting-set --stage-1 dp-sips
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("command", "name"), [("top-k", "DP-SIPS-then-top-k"), ("hitting-set", "DP-SIPS-then-peeling")]
)
def test_two_stage_dp_sips_stage_1_prints_each_rounds_calibration(
    capsys: pytest.CaptureFixture[str], csv_path: Path, command: str, name: str
) -> None:
    code, out, err = _run_command(
        capsys, command, csv_path, "--user", "uid", "--item", "thing", "--k", "1", "--stage-1", "dp-sips",
        "--rounds", "2", "--ratio", "0.5",
    )
    assert code == 0, err
    assert f"{name} released" in err and "DP-SIPS (2 rounds), 0.5 of the budget:" in err
    # fractions 1/3, 2/3 of stage 1's half of the budget; each round's σ and T on its own line
    assert "round 1 (0.167 of the budget): σ = " in err and "round 2 (0.333 of the budget): σ = " in err
    assert "stage loss    DP-SIPS (2 rounds) ε = 0.5" in err
    assert "budget spent  ε = 1, δ = " in err
    assert "a" in out  # 300 users hold it: the one item released


@pytest.mark.parametrize(
    ("command", "name"), [("top-k", "DP-SIPS-then-top-k"), ("hitting-set", "DP-SIPS-then-peeling")]
)
def test_two_stage_dp_sips_default_is_the_adaptive_schedule(
    capsys: pytest.CaptureFixture[str], command: str, name: str
) -> None:
    """--stage-1 dp-sips without --rounds/--ratio: the dry run prints the adaptive schedule (round 1, the branch
    count, both branches) that the measurement runs, and its stage loss is the adaptive map."""
    from opendp_wgm.privacy.calibrate import calibrate_dp_sips

    code, out, err = _run_command(capsys, command, "--dry-run", "--k", 10, "--stage-1", "dp-sips")
    assert code == 0, err
    err = out + err  # the dry run's report
    assert f"{name} calibrated" in err and "DP-SIPS (adaptive: 2 or 3 rounds), 0.5 of the budget:" in err
    cal = calibrate_dp_sips(epsilon=0.5, delta=5e-6, max_contributions=100, adaptive=True)
    assert cal.statistic_scale is not None
    assert f"branch count: σ = {cal.statistic_scale:.6g}" in err
    assert f"sparse branch: round 2 (0.495 of the budget): σ = {cal.scales[1]:.6g}" in err
    assert f"dense branch:  round 3 (0.381 of the budget): σ = {cal.branch_scales[1]:.6g}" in err
    loss = cal.loss(1)
    assert f"stage loss    DP-SIPS (adaptive: 2 or 3 rounds) ε = {loss[0]:.6g}, δ = {loss[1]:.6g};" in err


@pytest.mark.parametrize("command", ["top-k", "hitting-set"])
def test_two_stage_default_stage_1_is_the_wgm(capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, _, err = _run_command(capsys, command, "--demo-users", 300, "--seed", 1, "--k", 3)
    assert code == 0, err
    assert "calibration   WGM (0.5 of the budget): σ = " in err and "DP-SIPS" not in err


@pytest.mark.parametrize("command", ["top-k", "hitting-set"])
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "2"], "--rounds applies only with --stage-1 dp-sips"),
        (["--stage-1", "wgm", "--ratio", "0.5"], "--ratio applies only with --stage-1 dp-sips"),
        (["--stage-1", "dp-sips", "--ratio", "0"], "argument --ratio: must be in (0.0, inf) (found 0.0)"),
        (["--stage-1", "dp-sips", "--rounds", "0"], "must be an integer >= 1"),
        (["--stage-1", "sips"], "invalid choice"),
    ],
)
def test_two_stage_stage_1_bad_options(
    capsys: pytest.CaptureFixture[str], command: str, argv: list[str], message: str
) -> None:
    code, _, err = _run_command(capsys, command, "--demo-users", 50, "--k", 2, *argv)
    assert code == 2 and message in err, err


def test_top_k_limited_domain_refuses_stage_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run_command(
        capsys, "top-k", "--demo-users", 50, "--k", 2, "--mechanism", "limited-domain", "--stage-1", "dp-sips"
    )
    assert code == 2 and "--stage-1 applies only to --mechanism wgm" in err, err
