"""What a release from the command imports (:mod:`opendp_wgm.cli._startup`): OpenDP's core without its extras,
context and accuracy, no Numba for a small input, no SciPy, no pyarrow, and of the package only the mechanism
it runs; the deferred modules still work when touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from opendp_wgm.cli import _startup
from opendp_wgm.engines import polars as kernel
from opendp_wgm.engines.polars import _compiled_steps
from opendp_wgm.kernel import COMPILED_FROM_ROWS

ROOT = Path(__file__).resolve().parents[1]

_RELEASE = """
import sys
from opendp_wgm.cli import main
code = main(sys.argv[1:])
unused = (
    "sklearn", "scipy", "pandas", "numba", "pyarrow", "opendp.context", "opendp.accuracy", "opendp.extras.polars",
    "opendp.extras.numpy", "opendp_wgm.measurements.baselines", "opendp_wgm.measurements.auto_contributions",
    "opendp_wgm.measurements.group_by", "opendp_wgm.samplers.selection", "opendp_wgm.metrics",
)
loaded = sorted(m for m in unused if m in sys.modules)
import opendp.prelude as dp
pca = dp.sklearn.decomposition.PCA  # touched: the deferred extra loads and works as always
import opendp.extras.sklearn.decomposition as decomposition
print("LOADED", loaded, code, pca is decomposition.PCA, "sklearn" in sys.modules)
"""


def test_a_small_release_imports_only_what_it_uses(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(7)
    path, output = tmp_path / "data.parquet", tmp_path / "released.csv"
    users = pl.Series("user", rng.permutation(np.repeat(np.arange(300), 5))).cast(pl.String)
    pl.DataFrame({"user": users, "item": rng.integers(0, 20, users.len())}).write_parquet(path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", _RELEASE, "discover", str(path), "-o", str(output)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert result.stdout.splitlines()[-1] == "LOADED [] 0 True True", result.stdout + result.stderr
    assert pl.read_csv(output).columns == ["item", "noisy_weight"]


def test_the_extras_are_left_alone_once_opendp_is_imported() -> None:
    """In a process that imported OpenDP already (a test, a notebook calling ``main``), nothing is replaced."""
    import opendp.prelude  # noqa: F401

    before = dict(sys.modules)
    _startup._defer_unused_extras()
    _startup._core_first_prelude()
    assert sys.modules == before


_PRELUDE_NAMES = """
import sys
if sys.argv[1] == "core-first":
    from opendp_wgm.cli._startup import _core_first_prelude
    _core_first_prelude()
    import opendp.prelude as dp
    assert "opendp.context" not in sys.modules and "opendp.extras.polars" not in sys.modules
    early = {name: value for name, value in vars(dp).items() if not name.startswith("__")}
    dp.len  # the first name outside the core: the real prelude runs in the module
    assert all(vars(dp)[name] is value for name, value in early.items()), "a core name was rebound"
    assert "__getattr__" not in vars(dp)
import opendp.prelude as dp
print(sorted(name for name in vars(dp) if not name.startswith("__")))
"""


def test_the_core_first_prelude_becomes_the_prelude_unchanged() -> None:
    """Before its first look-up of another name, every name it has is bound as the prelude binds it; after it,
    it has the prelude's names, no more and no fewer."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    names = [
        subprocess.run([sys.executable, "-c", _PRELUDE_NAMES, mode], capture_output=True, text=True, env=env,
                       timeout=120, check=True).stdout
        for mode in ("core-first", "real")
    ]
    assert names[0] == names[1] and "len" in names[0]


def test_no_cold_compiled_import_keeps_numba_out_unless_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    jit = pytest.importorskip("opendp_wgm.engines._kernel_jit")
    with kernel.no_cold_compiled_import():
        assert kernel.kernel_jit() is jit  # loaded already: used as always
        monkeypatch.delitem(sys.modules, "opendp_wgm.engines._kernel_jit")
        assert kernel.kernel_jit() is None  # not loaded: not imported, the Polars plans run
    assert kernel.kernel_jit() is jit  # outside the block: as always (the module imported once, cached)


def test_only_a_small_input_defers_the_compiled_steps() -> None:
    with _startup._compiled_steps(COMPILED_FROM_ROWS - 1):
        assert _compiled_steps._cold_import_deferred
    assert not _compiled_steps._cold_import_deferred
    with _startup._compiled_steps(COMPILED_FROM_ROWS):
        assert not _compiled_steps._cold_import_deferred


def test_the_console_entry_tunes_the_collector_of_its_own_process_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_console`` (the script, ``python -m``) raises the first threshold and freezes at the end; ``main``
    (what a test or a notebook calls) leaves the collector alone."""
    import gc

    import opendp_wgm.cli as cli

    calls: list[object] = []
    monkeypatch.setattr(gc, "set_threshold", lambda *t: calls.append(("threshold", t)))
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(cli, "main", lambda: calls.append("main") or 3)
    assert cli._console() == 3
    assert calls == [("threshold", (100_000, *gc.get_threshold()[1:])), "main", "freeze"]
