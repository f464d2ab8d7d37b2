"""Never compile in silence (:mod:`opendp_wgm.engines.compile_notice`): one notice before a compile that the
cache does not answer (cold), none on a warm run; from the library a log record, from the command a line on
stderr."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from opendp_wgm.engines import compile_notice as _compile_notice
from opendp_wgm.engines.compile_notice import LOGGER, NOTICE

ROOT = Path(__file__).resolve().parents[1]

_PROBE = """
from numba import njit

@njit(cache=True)
def ours(x):
    return x + 1

@njit(cache=True)
def theirs(x):
    return x * 2
"""

_RUN = """
import sys
from opendp_wgm.engines import compile_notice as _compile_notice
_compile_notice._PACKAGES = ("probe_ours",)  # the probe's module stands for the package's compiled modules
_compile_notice.watch_compiles()
import probe_ours, probe_theirs
for name in sys.argv[1:]:
    getattr(probe_ours if name == "ours" else probe_theirs, name)(1)
print("DONE", file=sys.stderr)
"""


def _run(folder: Path, *names: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]), "NUMBA_CACHE_DIR": str(folder / "cache")}
    result = subprocess.run([sys.executable, "-c", _RUN, *names], capture_output=True, text=True, env=env,
                            timeout=300, check=True)
    return result.stderr


def test_a_cold_cache_announces_the_compile_once_and_a_warm_one_says_nothing(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    (tmp_path / "probe_ours.py").write_text(_PROBE)
    (tmp_path / "probe_theirs.py").write_text(_PROBE)
    assert _run(tmp_path, "theirs") == "DONE\n"  # a compile of someone else's function: not ours to announce
    assert _run(tmp_path, "ours") == f"{NOTICE}\nDONE\n"  # cold: the notice (logging's last resort: stderr)
    assert _run(tmp_path, "ours") == "DONE\n"  # warm: loaded from the cache, no compile, nothing said
    assert sorted(p.suffix for p in (tmp_path / "cache").rglob("*ours*")) == [".nbc", ".nbi"]


def _event(module: str, *, start: bool) -> SimpleNamespace:
    dispatcher = SimpleNamespace(py_func=SimpleNamespace(__module__=module))
    return SimpleNamespace(is_start=start, is_end=not start, data={"dispatcher": dispatcher})


def test_one_notice_per_burst_of_the_package_compiles(caplog: pytest.LogCaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(_compile_notice.time, "monotonic", lambda: now[0])
    notice = _compile_notice._Notice()
    ours, theirs = "opendp_wgm.engines._kernel_jit", "my_notebook"
    caplog.set_level(logging.WARNING, logger=LOGGER.name)
    for module, start in [(ours, True), (ours, True), (ours, False), (ours, False),  # nested: one compile
                          (theirs, True), (theirs, False),  # not the package's: ignored
                          (ours, True), (ours, False)]:  # right after: the same burst
        notice.notify(_event(module, start=start))
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [(LOGGER.name, logging.WARNING, NOTICE)]
    now[0] = _compile_notice._QUIET_SECONDS + 1  # a minute later: another path's first use, announced again
    notice.notify(_event(ours, start=True))
    assert len(caplog.records) == 2


def test_the_command_prints_the_notice_as_one_line_on_its_stderr() -> None:
    from opendp_wgm.cli._startup import _compile_notices

    stream = io.StringIO()
    with _compile_notices(stream):
        LOGGER.warning(NOTICE)
    assert stream.getvalue() == f"opendp-wgm: {NOTICE}\n"
    assert LOGGER.handlers == [] and LOGGER.propagate  # restored
