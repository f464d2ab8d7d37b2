"""Shared pytest fixtures, and the order in which ``pytest -n 2`` hands the tests to its workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, hand each worker one test at a time (``--maxschedchunk 1``, unless given).

    By default a worker is handed a quarter of its share of the tests at once, so a worker can be left holding
    long tests while the other has nothing left to run; one at a time, with the slow tests first (below), the
    two workers finish within about one short test of each other.
    """
    if getattr(config.option, "maxschedchunk", "absent") is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests marked ``slow`` first, each group in its collected order (a stable sort): under ``-n 2`` a
    long test started last would keep one worker busy after the other has finished."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Load the compiled steps once, where Numba is installed: a release of fewer than 3·10^6 rows takes them only
    once they are loaded (``opendp_wgm.kernel._small_inputs``), and the tests' frames are small, so without this
    they would test the compiled paths or not depending on what ran before. The tests of that rule unload them."""
    import contextlib

    with contextlib.suppress(ImportError):
        import opendp_wgm.engines._kernel_jit  # noqa: F401


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder: ``../shared/data`` beside the checkout, or ``$OPENDP_WGM_DATA``.

    Tests that use it are skipped when the folder is absent.
    """
    default = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    path = Path(os.environ.get("OPENDP_WGM_DATA", default)).expanduser()
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path} (set OPENDP_WGM_DATA to its location)")
    return path


def _interrupt_when_releasing(
    code: str, arguments: list[str], *, ready: str = "RELEASING", signum: int = 2
) -> tuple[int, str, str]:
    """Run ``python -c code *arguments``, send ``signum`` (default SIGINT) once it prints ``ready`` on stderr
    (e.g. from inside the measurement's callback), and return its status, stdout and stderr; never a crash in
    OpenDP's FFI."""
    import signal
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    process = subprocess.Popen(
        [sys.executable, "-c", code, *arguments],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        # a background job ignores SIGINT; the test process starts no thread before forking
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line == f"{ready}\n", line + process.stderr.read()
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert "double free" not in err and "Traceback" not in err, err
    return process.returncode, out, err


@pytest.fixture
def interrupt_when_releasing():  # type: ignore[no-untyped-def]
    """:func:`_interrupt_when_releasing`, for the Ctrl-C tests of the command-line entry points."""
    return _interrupt_when_releasing
