"""The package's progress display (:mod:`opendp_wgm._progress`): a bar on a terminal, a bounded number of plain
lines in a log."""

from __future__ import annotations

import io

import pytest

from opendp_wgm._progress import _LINES, _progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("total", [1, 3, 10, 11, 999, 10**6])
def test_a_log_gets_at_most_a_line_per_tenth(total: int) -> None:
    stream = io.StringIO()
    with _progress(total, desc="runs", unit="run", stream=stream) as bar:
        bar.set_postfix_str("last")
        step = max(1, total // 1000)  # at most 1000 updates
        for _ in range(total // step):
            bar.update(step)
        bar.update(total % step)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert len(lines) == min(total, _LINES)
    assert lines[0].startswith("runs: ") and " run (" in lines[0]
    assert lines[-1].startswith(f"runs: {total:,}/{total:,} run (100%) [") and lines[-1].endswith("] last")


def test_a_log_gets_nothing_when_disabled_or_without_lines() -> None:
    for options in ({"enabled": False}, {"lines": False}):
        stream = io.StringIO()
        bar = _progress(100, desc="x", unit="step", stream=stream, **options)
        bar.update(100)
        bar.close()
        assert stream.getvalue() == ""


def test_a_terminal_gets_a_bar() -> None:
    stream = _Terminal()
    bar = _progress(4, desc="stages", unit="stage", stream=stream)
    for _ in range(4):
        bar.update(1)
    bar.close()
    assert "\r" in stream.getvalue() and "4/4" in stream.getvalue()
    stream = _Terminal()
    bar = _progress(4, desc="stages", unit="stage", stream=stream, enabled=False)
    bar.update(4)
    bar.close()
    assert stream.getvalue() == ""


def test_the_audit_writes_a_few_lines_to_a_log(capsys: pytest.CaptureFixture[str]) -> None:
    import opendp.prelude as dp

    import opendp_wgm as wgm
    from opendp_wgm.audit import audit, shared_item_pair

    dp.enable_features("contrib", "honest-but-curious")  # as the audit's own tests (the library asserts them)
    m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=1, scale=1.0, threshold=3.0)
    audit(m, shared_item_pair(3, users=10), trials=400)  # 800 releases, progress on, stderr captured (no tty)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert 1 <= len(lines) <= _LINES and lines[-1].startswith("audit: 800/800 release (100%)")


def _pty(columns: int) -> tuple[int, io.TextIOWrapper]:
    """A pseudo-terminal of ``columns`` columns: its master descriptor and its slave end as a text stream."""
    fcntl, pty, struct, termios = (pytest.importorskip(name) for name in ("fcntl", "pty", "struct", "termios"))
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24 if columns else 0, columns, 0, 0))
    return master, open(slave, "w", encoding="utf-8")


def _written(master: int) -> str:
    import os

    os.set_blocking(master, False)
    chunks = []
    while True:
        try:
            chunks.append(os.read(master, 1 << 16))
        except BlockingIOError:
            return b"".join(chunks).decode()


@pytest.mark.parametrize(("columns", "bar"), [(80, True), (0, False)])
def test_a_pty_of_zero_columns_gets_lines_not_an_empty_bar(columns: int, bar: bool) -> None:
    master, stream = _pty(columns)
    try:
        with _progress(4, desc="stages", unit="stage", stream=stream) as display:
            for _ in range(4):
                display.update(1)
        stream.flush()
        written = _written(master)
    finally:
        stream.close()
    if bar:
        assert "\r" in written and "4/4" in written
    else:  # the lines of a log: four steps, a line each, no carriage return of a bar
        assert "\r" not in written.replace("\r\n", "\n")
        assert [line.split(" (")[0] for line in written.splitlines()] == [f"stages: {n}/4 stage" for n in range(1, 5)]


def test_reproduce_writes_a_few_lines_to_a_log(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """``reproduce`` with its progress on, stderr a log (captured: no tty): at most a line per tenth of the runs,
    no bar redraws."""
    import polars as pl

    from opendp_wgm.cli import main
    from opendp_wgm.datasets import synthetic_zipf

    (tmp_path / "data" / "movielens_100k").mkdir(parents=True)
    raw = synthetic_zipf(200, 8, exponent=1.4, seed=3).with_columns(rating=pl.lit(5), ts=pl.lit(0))
    raw.write_csv(tmp_path / "data" / "movielens_100k" / "u.data", separator="\t", include_header=False)
    code = main(["reproduce", "set-union", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
                 "--datasets", "movielens_100k", "--methods", "wgm", "--trials", "3", "--l0", "1,2,3,4,5,6,7",
                 "--no-plots"])
    assert code == 0
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("set-union: ")]
    assert "\r" not in err
    assert 1 <= len(progress) <= _LINES and progress[-1].startswith("set-union: 21/21 run (100%)")


def test_discover_writes_no_bar_to_a_log(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """``discover`` with stderr a log: its summary only (no stage bar, no carriage return)."""
    from opendp_wgm.cli import main

    assert main(["discover", "--demo-users", "300", "-o", str(tmp_path / "released.csv")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and any(line.startswith("opendp-wgm discover: WGM released") for line in err.splitlines())
    assert not any(line.startswith(("calibrating", "reading", "releasing")) for line in err.splitlines())
