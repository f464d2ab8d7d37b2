"""The experiment runner: end to end on a tiny synthetic data set, metrics, bad input, interruption, CLI."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

from opendp_wgm import metrics
from opendp_wgm.datasets import synthetic_zipf
from opendp_wgm.experiments import _runner, main_reproduce, reproduce
from opendp_wgm.experiments._config import METHODS, parse_grid
from opendp_wgm.experiments._truth import Truth

HAS_TOP_K = importlib.util.find_spec("opendp_wgm.measurements.top_k") is not None
HAS_HITTING_SET = importlib.util.find_spec("opendp_wgm.measurements.hitting_set") is not None


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """A data folder holding one tiny data set in MovieLens 100K's raw format (u.data, tab-separated)."""
    root = tmp_path_factory.mktemp("data")
    (root / "movielens_100k").mkdir()
    df = synthetic_zipf(300, 12, exponent=1.4, seed=7)
    raw = df.with_columns(rating=pl.lit(5), ts=pl.lit(0))
    raw.write_csv(root / "movielens_100k" / "u.data", separator="\t", include_header=False)
    return root


def test_set_union_end_to_end(data_dir: Path, tmp_path: Path) -> None:
    result = reproduce(
        "set-union",
        data_dir=data_dir,
        out_dir=tmp_path,
        datasets=["movielens_100k"],
        trials=2,
        l0=(1, 5),
        progress=False,
    )
    rows = result.rows
    # 7 methods x 2 settings x 2 trials + Policy Greedy, partition selection and the two Δ0-auto methods
    # (Δ0-free) x 2 trials
    assert rows.height == 36
    assert set(rows["variant"]) == set(METHODS["set-union"]) >= {
        "wgm", "opendp_key_release", "dp_sips", "dp_sips_r2", "dp_sips_default"
    }
    for variant in ("dp_sips", "dp_sips_r2", "dp_sips_default"):
        sips = rows.filter(pl.col("variant") == variant)
        assert sips.height == 4 and sorted(sips["x"].to_list()) == [1, 1, 5, 5]
        assert sips["missing_mass"].is_between(0, 1).all()
    assert rows.filter(pl.col("variant") == "policy_greedy")["x"].null_count() == 2
    assert rows.filter(pl.col("variant") == "partition_selection")["x"].null_count() == 2
    for variant in ("wgm_auto", "dp_sips_auto"):  # Δ0 chosen privately: the chosen grid point is recorded
        auto = rows.filter(pl.col("variant") == variant)
        assert auto["x"].null_count() == 2
        assert set(auto["max_contributions"].to_list()) <= {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}
    assert rows["missing_mass"].is_between(0, 1).all() and (rows["runtime_s"] > 0).all()
    assert (rows["missing_mass"] + rows["captured_mass"] - 1).abs().max() < 1e-12
    text = result.summary_md.read_text(encoding="utf-8")
    assert "| WGM |" in text and "Δ0 = 5" in text and "OpenDP key release" in text
    assert "| DP-SIPS |" in text and "| DP-SIPS R=2 (0.1, 0.9) |" in text
    assert {p.name for p in result.plots} == {
        "set-union_missing_mass.png",
        "set-union_linf_missing_mass.png",
        "set-union_cardinality.png",
        "set-union_runtime.png",
    }
    assert all(p.stat().st_size > 1000 for p in result.plots)
    assert pl.read_csv(result.summary_csv).height == 18  # 7 methods x 2 + greedy, partition selection, 2 auto


@pytest.mark.skipif(not HAS_TOP_K, reason="top_k module not available")
def test_top_k_end_to_end(data_dir: Path, tmp_path: Path) -> None:
    result = reproduce(
        "top-k", data_dir=data_dir, out_dir=tmp_path, datasets="movielens_100k", trials=1, k="2,4",
        k_bar_multipliers=(1, 5), max_contributions=5, progress=False,
    )
    assert result.rows.height == 6  # (WGM-then-top-k + 2 limited-domain variants) x 2 k
    assert set(result.rows["variant"]) == {"wgm_top_k", "limited_domain_k", "limited_domain_5k"}
    ld = result.rows.filter(pl.col("variant") == "limited_domain_5k")
    assert ld["k_bar"].to_list() == [10, 20]
    assert (result.rows["cardinality"] <= result.rows["k"]).all()
    assert (result.rows["top_k_missing_mass"] >= 0).all()
    assert len(result.plots) == 4


@pytest.mark.skipif(not HAS_HITTING_SET, reason="hitting_set module not available")
def test_hitting_set_end_to_end(data_dir: Path, tmp_path: Path) -> None:
    result = reproduce(
        "hitting-set", data_dir=data_dir, out_dir=tmp_path, datasets=["movielens_100k"], trials=1, k=(3,),
        max_contributions=5, progress=False,
    )
    rows = result.rows
    assert rows.height == 3
    greedy = rows.filter(pl.col("variant") == "greedy")["missed_users"][0]
    assert greedy <= rows["missed_users"].min()  # the non-private greedy covers best (up to ties)
    assert {p.name for p in result.plots} == {"hitting-set_missed_users.png", "hitting-set_runtime.png"}


def test_truth_metrics_agree_with_the_metrics_module() -> None:
    rng = np.random.default_rng(3)
    df = synthetic_zipf(200, 8, exponent=1.2, seed=11)
    truth = Truth.of(df)
    items = df["item"].unique().to_numpy()
    for size in (0, 1, 5, 30):
        released = pl.DataFrame({"item": rng.choice(np.concatenate((items, [10**9])), size, replace=False)})
        su = truth.set_union(released)
        assert su["missing_mass"] == pytest.approx(metrics.missing_mass(df, released))
        assert su["linf_missing_mass"] == pytest.approx(metrics.linf_missing_mass(df, released))
        assert truth.hitting_set(released)["missed_users"] == metrics.missed_users(df, released)
        k = max(size, 1)
        tk = truth.top_k(released, k)
        assert tk["top_k_missing_mass"] == pytest.approx(metrics.top_k_missing_mass(df, released, k))
        assert tk["top_k_l1_loss"] == pytest.approx(metrics.top_k_l1_loss(df, released, k))


def test_truth_top_k_l1_loss_matches_items_to_ranks_in_output_order() -> None:
    """As the reference: the j-th released item against the j-th largest count (metrics' order="output")."""
    df = synthetic_zipf(200, 8, exponent=1.2, seed=11)
    ranked = df.unique().group_by("item").len().sort("len", "item", descending=True)["item"]
    released = pl.DataFrame({"item": ranked[:5].reverse()})  # the true top-5, worst first
    loss = Truth.of(df).top_k(released, 5)["top_k_l1_loss"]
    assert loss == metrics.top_k_l1_loss(df, released, 5, order="output") > 0
    assert metrics.top_k_l1_loss(df, released, 5) == 0


# ------------------------------------------------------------------------------------------------------
# bad input: clear errors, before any data is read
# ------------------------------------------------------------------------------------------------------
@pytest.fixture
def no_loading(monkeypatch):
    def fail(*args, **kwargs):  # pragma: no cover - reached only if validation is late
        raise AssertionError("data were read before the input was validated")

    monkeypatch.setattr(_runner, "_load", fail)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"experiment": "set_union"}, ValueError, "unknown experiment 'set_union'"),
        ({"methods": ["wgm", "magic"]}, ValueError, r"unknown method\(s\) \['magic'\]"),
        ({"methods": []}, ValueError, "`methods` must not be empty"),
        ({"datasets": ["no_such_set"]}, ValueError, r"unknown data set\(s\) \['no_such_set'\]"),
        ({"datasets": ["steam_200k"]}, FileNotFoundError, r"data set folder\(s\) \['steam_200k'\] not found"),
        ({"l0": []}, ValueError, "`l0` grid is empty"),
        ({"l0": "1,abc"}, ValueError, "non-numeric 'abc'"),
        ({"l0": [1, 2.5]}, ValueError, "must be integers >= 1"),
        ({"l0": [0]}, ValueError, "must be integers >= 1"),
        ({"l0": [5, 5]}, ValueError, "duplicates"),
        ({"experiment": "top-k", "k": ""}, ValueError, "`k` grid is empty"),
        ({"experiment": "top-k", "k": "5,1000000000"}, ValueError,
         "limited domain's k̄ = k x multiplier must be <= 10,000,000 \\(found 1,000,000,000 x 10\\)"),
        ({"trials": 0}, ValueError, "`trials` must be an integer >= 1"),
        ({"epsilon": -1.0}, ValueError, "`epsilon` must be in"),
        ({"delta": 1.0}, ValueError, "`delta` must be in"),
    ],
)
def test_bad_input_fails_before_any_work(data_dir, tmp_path, no_loading, kwargs, error, match) -> None:
    params = {"experiment": "set-union", "data_dir": data_dir, "out_dir": tmp_path, "datasets": ["movielens_100k"]}
    params |= kwargs
    experiment = params.pop("experiment")
    with pytest.raises(error, match=match):
        reproduce(experiment, **params, progress=False)
    assert not (tmp_path / "set-union").exists()


HAS_PIPELINE_DP = importlib.util.find_spec("pipeline_dp") is not None


@pytest.mark.skipif(not HAS_PIPELINE_DP, reason="pipeline_dp (extra [peers]) not installed")
def test_pipeline_dp_peer_runs_on_request_only(data_dir: Path, tmp_path: Path) -> None:
    result = reproduce(
        "set-union",
        data_dir=data_dir,
        out_dir=tmp_path,
        datasets=["movielens_100k"],
        methods="wgm,pipeline_dp",
        trials=2,
        l0=(1, 5),
        progress=False,
    )
    peer = result.rows.filter(pl.col("variant") == "pipeline_dp")
    assert peer.height == 4 and sorted(peer["x"].to_list()) == [1, 1, 5, 5]
    assert peer["missing_mass"].is_between(0, 1).all()
    # truncated geometric at ε = 1, δ = 1e-5 on 300 Zipf users: the head items are released, not nothing
    assert (peer["cardinality"] > 0).all() and (peer["missing_mass"] < 0.9).all()
    assert "PipelineDP select_partitions" in result.summary_md.read_text(encoding="utf-8")
    assert "pipeline_dp" not in METHODS["set-union"]  # optional: never in a default run


def test_pipeline_dp_peer_releases_items_of_the_input_dtype() -> None:
    pytest.importorskip("pipeline_dp")
    from opendp_wgm.experiments._peers import pipeline_dp_selection

    frame = pl.DataFrame({"user": [f"u{i}" for i in range(3000)], "item": ["a"] * 2000 + ["b"] * 1000})
    released = pipeline_dp_selection(1, epsilon=1.0, delta=1e-5)(frame)
    assert released.schema == pl.Schema({"item": pl.String})
    assert sorted(released["item"].to_list()) == ["a", "b"]  # 1000 users each: released with probability ≈ 1


def test_a_missing_peer_package_fails_before_any_work(data_dir, tmp_path, no_loading, monkeypatch) -> None:
    from opendp_wgm.experiments import _config

    monkeypatch.setitem(_config._NEEDS, "pipeline_dp", ("no_such_package_xyz", "peers"))
    with pytest.raises(ModuleNotFoundError, match=r'method .pipeline_dp. needs .* pip install -e "\.\[peers\]"'):
        reproduce(
            "set-union", data_dir=data_dir, out_dir=tmp_path, datasets=["movielens_100k"], methods="pipeline_dp",
            progress=False,
        )
    assert not (tmp_path / "set-union").exists()


def test_missing_data_folder(tmp_path, no_loading) -> None:
    with pytest.raises(FileNotFoundError, match=r"data folder .* does not exist"):
        reproduce("set-union", data_dir=tmp_path / "nowhere", out_dir=tmp_path, progress=False)


def test_parse_grid_accepts_integral_floats_and_strings() -> None:
    assert parse_grid("l0", "1, 50,100") == (1, 50, 100)
    assert parse_grid("l0", [100.0, 7]) == (100, 7)
    assert parse_grid("k", 5) == (5,)


# ------------------------------------------------------------------------------------------------------
# an interrupted run keeps its rows; --resume finishes it
# ------------------------------------------------------------------------------------------------------
def test_interrupted_run_keeps_rows_and_resumes(data_dir, tmp_path, monkeypatch) -> None:
    calls = {"n": 0}
    original = _runner._metrics

    def interrupt_after_three(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(_runner, "_metrics", interrupt_after_three)
    params = {
        "data_dir": data_dir,
        "out_dir": tmp_path,
        "datasets": ["movielens_100k"],
        "methods": ["wgm"],
        "trials": 3,
        "l0": (1, 2),
        "progress": False,
    }
    with pytest.raises(KeyboardInterrupt):
        reproduce("set-union", **params)
    assert pl.read_csv(tmp_path / "set-union" / "trials.csv").height == 3
    monkeypatch.setattr(_runner, "_metrics", original)
    result = reproduce("set-union", **params, resume=True)
    assert result.rows.height == 6
    assert result.rows.select("x", "trial").n_unique() == 6


# ------------------------------------------------------------------------------------------------------
# the command-line entry point
# ------------------------------------------------------------------------------------------------------
def test_main_reproduce(data_dir, tmp_path, capsys) -> None:
    assert main_reproduce(["--help"]) == 0
    assert "set-union" in capsys.readouterr().out
    code = main_reproduce(["set-union", "--data", str(data_dir), "--out", str(tmp_path), "--l0", "1,x"])
    assert code == 2
    assert "non-numeric 'x'" in capsys.readouterr().err
    code = main_reproduce(["set-union", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path)])
    assert code == 2 and "does not exist" in capsys.readouterr().err
    code = main_reproduce(
        ["set-union", "--data", str(data_dir), "--out", str(tmp_path), "--datasets", "movielens_100k",
         "--methods", "wgm,policy_greedy", "--trials", "1", "--l0", "3", "--no-progress", "--no-plots"]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "2 trial rows" in out and "summary.md" in out and "plot:" not in out
    assert not list((tmp_path / "set-union").glob("*.png"))


def test_missing_matplotlib_fails_before_any_work(data_dir, tmp_path, no_loading, monkeypatch) -> None:
    real = importlib.util.find_spec
    def find_spec(name, *args):
        return None if name == "matplotlib" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ImportError, match=r"pip install 'opendp-wgm\[plot\]'"):
        reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, datasets=["movielens_100k"], progress=False)


_RESUME_PARAMS = {
    "datasets": ["movielens_100k"],
    "methods": ["wgm"],
    "trials": 2,
    "l0": (1, 2),
    "progress": False,
    "plot": False,
}


def test_resume_with_other_settings_is_refused(data_dir, tmp_path) -> None:
    """The run's settings are stored beside its rows; a resume that differs would mix two runs: refused."""
    reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, **_RESUME_PARAMS)
    trials_csv = tmp_path / "set-union" / "trials.csv"
    before = trials_csv.read_bytes()
    assert (tmp_path / "set-union" / "config.json").exists()
    changed = {**_RESUME_PARAMS, "l0": (1, 3)}
    with pytest.raises(ValueError, match=r"different settings: epsilon \(earlier run: 1.0, now: 0.5\); "
                       r"max_contributions_grid \(earlier run: \[1, 2\], now: \[1, 3\]\)"):
        reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, **changed, epsilon=0.5, resume=True)
    assert trials_csv.read_bytes() == before
    # the same settings resume (nothing left to do); a fresh run (--force) may change them
    assert reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, **_RESUME_PARAMS, resume=True).rows.height == 4
    assert reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, **changed, force=True).rows.height == 4


def test_an_earlier_run_is_never_replaced_silently(data_dir, tmp_path, capsys) -> None:
    """Without --resume or --force a run into a folder holding trials.csv is refused before any work (as
    --output refuses an existing file without --force); --force starts afresh."""
    from opendp_wgm.cli import main

    reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, **_RESUME_PARAMS)
    trials_csv = tmp_path / "set-union" / "trials.csv"
    before = trials_csv.read_bytes()
    with pytest.raises(FileExistsError, match=r"trials\.csv' already holds the trials of an earlier run: add "
                       r"--resume to continue it, --force to start afresh \(its rows are replaced\), or choose"):
        reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, **_RESUME_PARAMS)
    argv = ["reproduce", "set-union", "--data", str(data_dir), "--out", str(tmp_path), "--datasets", "movielens_100k",
            "--methods", "wgm", "--trials", "1", "--l0", "3", "--no-progress", "--no-plots"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("opendp-wgm: error: ") and "already holds the trials of an earlier run" in err
    assert main([*argv, "--resume", "--force"]) == 2
    assert "--resume and --force contradict" in capsys.readouterr().err
    assert trials_csv.read_bytes() == before
    assert main([*argv, "--force"]) == 0
    assert pl.read_csv(trials_csv).height == 1  # replaced by the new run's one trial


def test_resume_without_stored_settings_is_refused(data_dir, tmp_path) -> None:
    reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, **_RESUME_PARAMS)
    (tmp_path / "set-union" / "config.json").unlink()
    with pytest.raises(ValueError, match=r"cannot resume: .*config\.json' is missing"):
        reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, **_RESUME_PARAMS, resume=True)


def test_truncated_last_row_is_redone_not_counted(data_dir, tmp_path) -> None:
    """An interruption mid-write leaves a last row without its newline: resume drops it and runs that trial."""
    reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, **_RESUME_PARAMS)
    trials_csv = tmp_path / "set-union" / "trials.csv"
    lines = trials_csv.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) == 5  # header + 4 rows
    last = lines[-1]
    cut = ",".join(last.split(",")[:10])  # through the trial number and ε, δ: short of the metrics
    trials_csv.write_text("".join(lines[:-1]) + cut, encoding="utf-8")
    result = reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, **_RESUME_PARAMS, resume=True)
    assert result.rows.height == 4
    assert result.rows.select("x", "trial").n_unique() == 4
    assert result.rows["missing_mass"].null_count() == 0
    assert trials_csv.read_text(encoding="utf-8").endswith("\n")


# ------------------------------------------------------------------------------------------------------
# Ctrl-C: exit 130, the rows written so far kept, no crash in OpenDP's FFI
# ------------------------------------------------------------------------------------------------------
_SLOW_SECOND_RELEASE = """
import sys, time
from opendp_wgm.measurements import wgm
original, calls = wgm.release_above_threshold, []
def slow(*args, **kwargs):  # the second release waits for SIGINT inside the measurement's callback
    calls.append(1)
    if len(calls) == 2:
        print("RELEASING", file=sys.stderr, flush=True)
        time.sleep(120)
    return original(*args, **kwargs)
wgm.release_above_threshold = slow
{entry}
"""
_ENTRIES = {
    "opendp-wgm reproduce": "from opendp_wgm.cli import main\nsys.exit(main(['reproduce', *sys.argv[1:]]))",
    "python -m opendp_wgm.experiments": "from opendp_wgm.experiments import main_reproduce\n"
    "sys.exit(main_reproduce(sys.argv[1:]))",
}


@pytest.mark.parametrize("entry", list(_ENTRIES))
def test_ctrl_c_during_a_trial_exits_130_and_keeps_the_rows(
    entry: str, data_dir: Path, tmp_path: Path, interrupt_when_releasing
) -> None:
    arguments = ["set-union", "--data", str(data_dir), "--out", str(tmp_path), "--datasets", "movielens_100k",
                 "--methods", "wgm", "--trials", "2", "--l0", "3", "--no-progress", "--no-plots"]
    code, _, err = interrupt_when_releasing(_SLOW_SECOND_RELEASE.format(entry=_ENTRIES[entry]), arguments)
    assert code == 130, err
    trials = tmp_path / "set-union" / "trials.csv"
    assert err.strip() == (
        f"opendp-wgm reproduce: interrupted; the trials done so far are kept in {trials} (rerun with --resume)"
    )
    assert pl.read_csv(trials).height == 1  # the first trial, whole
    resumed = reproduce("set-union", data_dir=data_dir, out_dir=tmp_path, datasets=["movielens_100k"],
                        methods=["wgm"], trials=2, l0=(3,), progress=False, plot=False, resume=True)
    assert resumed.rows.height == 2 and sorted(resumed.rows["trial"].to_list()) == [0, 1]
