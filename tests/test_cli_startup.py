"""What a release from the command imports (:mod:`opendp_wgm.cli._startup`): OpenDP without its scikit-learn
extras, and no Numba for a small input; the deferred modules still work when touched."""

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
loaded = sorted(m for m in ("sklearn", "scipy.stats", "pandas", "numba") if m in sys.modules)
import opendp.prelude as dp
pca = dp.sklearn.decomposition.PCA  # touched: the deferred extra loads and works as always
import opendp.extras.sklearn.decomposition as decomposition
print("LOADED", loaded, code, pca is decomposition.PCA, "sklearn" in sys.modules)
"""


def test_a_small_release_imports_neither_scikit_learn_nor_numba(tmp_path: Path) -> None:
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
    assert sys.modules == before


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
