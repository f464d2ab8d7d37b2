"""``--max-contributions auto`` and ``--auto-fraction`` in the release commands, run in-process."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from opendp_wgm.cli import main
from opendp_wgm.privacy.auto import GRID


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def three_items(tmp_path: Path) -> Path:
    """3000 users holding 3 items each (from 40): at --auto-fraction 0.5 and ε = 50 the choice is Δ0 = 5."""
    users = np.repeat(np.arange(3000), 3)
    items = (users + np.tile(np.arange(3), 3000) * 13) % 40
    path = tmp_path / "data.parquet"
    pl.DataFrame({"user": users, "item": items}).write_parquet(path)
    return path


def _chosen(err: str) -> int:
    match = re.search(r"chosen Δ0 +(\d+) \(private", err)
    assert match, err
    return int(match.group(1))


@pytest.mark.parametrize("mechanism", ["wgm", "dp-sips"])
def test_discover_prints_the_chosen_max_contributions(
    capsys: pytest.CaptureFixture[str], three_items: Path, mechanism: str
) -> None:
    code, _, err = _run(
        capsys, "discover", three_items, "--max-contributions", "auto", "--auto-fraction", "0.5", "--epsilon", "50",
        "--delta", "1e-3", "--mechanism", mechanism,
    )
    assert code == 0, err
    assert _chosen(err) == 5 and "chosen by the histogram" in err
    assert "auto: 0.5 of the budget" in err and "(Δ0 auto)" in err
    assert "budget spent  ε = 50," in err


def test_discover_says_when_the_single_item_test_chose(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # 3000 users holding one item each (from 40): at ε = 50 and half of it on the choice the test's threshold is
    # 2 users (b = 0.6) and its statistic 750
    path = tmp_path / "single.parquet"
    pl.DataFrame({"user": np.arange(3000), "item": np.arange(3000) % 40}).write_parquet(path)
    code, _, err = _run(
        capsys, "discover", path, "--max-contributions", "auto", "--auto-fraction", "0.5", "--epsilon", "50",
        "--delta", "1e-3",
    )
    assert code == 0, err
    assert _chosen(err) == 1 and "chosen by the single-item test" in err


@pytest.mark.parametrize("command", [["top-k", "--k", "3"], ["hitting-set", "--k", "3"]])
def test_two_stage_commands_choose_too(capsys: pytest.CaptureFixture[str], three_items: Path, command: list[str]) -> None:
    code, _, err = _run(
        capsys, *command, three_items, "--max-contributions", "auto", "--auto-fraction", "0.5", "--rho", "50",
        "--delta", "1e-3",
    )
    assert code == 0, err
    assert _chosen(err) == 5


def test_demo_default_fraction(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "discover", "--max-contributions", "auto", "--demo-users", 2000, "--seed", 0)
    assert code == 0
    assert "auto: 0.015 of the budget" in err and _chosen(err) in GRID


def test_dry_run_shows_the_curve_of_every_candidate(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "discover", "--max-contributions", "auto", "--dry-run")
    assert code == 0
    assert "depends on the chosen Δ0" in out
    rows = re.findall(r"^  Δ0 = (\d+) +50% at c = ", out, flags=re.MULTILINE)
    assert [int(r) for r in rows] == list(GRID)
    assert "optimal partition selection" in out  # at Δ0 = 1 under (ε, δ)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["discover", "--auto-fraction", "0.1"], "--auto-fraction applies only with --max-contributions auto"),
        (["discover", "--max-contributions", "auto", "--auto-fraction", "0.6"], "must be in (0.0, 0.5]"),
        (["discover", "--max-contributions", "auto", "--auto-fraction", "0"], "must be in (0.0, 1.0)"),
        (["discover", "--max-contributions", "Auto"], "invalid integer: 'Auto'"),
        (
            ["discover", "--max-contributions", "auto", "--mechanism", "partition-selection"],
            "does not apply to --mechanism partition-selection",
        ),
        (
            ["top-k", "--k", "3", "--max-contributions", "auto", "--mechanism", "limited-domain"],
            "does not apply to --mechanism limited-domain",
        ),
        (["discover", "--max-contributions", "auto", "--dry-run", "--plot", "x.png"], "depends on the chosen Δ0"),
    ],
)
def test_refusals(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    try:  # argparse's type errors exit; the commands' checks return the status
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code  # type: ignore[assignment]
    _, err = capsys.readouterr()
    assert code == 2 and message in err, err
