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
