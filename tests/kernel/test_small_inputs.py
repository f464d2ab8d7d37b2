"""Small inputs never pay for the compiled steps (:mod:`opendp_wgm.kernel._small_inputs`, ``docs/engines.md``
rule 3): below ``COMPILED_FROM_ROWS`` rows, in a process that has not loaded them, every release takes the Polars
plans (the same release) and loads no Numba; once they are loaded, or from that many rows on, the rules as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from opendp_wgm import kernel
from opendp_wgm._spaces import _prepare_frame, _Space
from opendp_wgm.engines.polars import BoundedLists, fresh_seeds
from opendp_wgm.kernel import Plan, plan_for
from opendp_wgm.kernel import plans as kernel_plans

ROOT = Path(__file__).resolve().parents[2]
_COMPILED = "opendp_wgm.engines._kernel_jit"


SPACE = _Space("user", "item", None, False)


def _lists(rows: int) -> BoundedLists:
    rng = np.random.default_rng(5)
    frame = pl.DataFrame({"user": rng.integers(0, rows // 4, rows), "item": rng.integers(0, 50, rows)})
    return BoundedLists(_prepare_frame(frame, SPACE), SPACE, 10, fresh_seeds())


def test_a_small_input_takes_the_polars_plans_until_the_compiled_steps_are_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip(_COMPILED)
    lists = _lists(2_000)
    assert plan_for(lists) is Plan.COMPILED_CODED  # loaded (the suite loads them): the rules as before
    monkeypatch.delitem(sys.modules, _COMPILED)  # not loaded in this process
    assert plan_for(lists) is Plan.POLARS_SPLIT
    assert "fewer than 3·10^6 rows" in kernel_plans._choose(lists, passes=1, engine="auto").reason
    assert plan_for(lists, numba=kernel.Numba.READY) is Plan.COMPILED_CODED  # an explicit state is planned for
    assert _COMPILED not in sys.modules  # the choice loaded nothing
    monkeypatch.setattr(kernel_plans, "COMPILED_FROM_ROWS", 2_000)  # as many rows as the threshold: as before
    assert plan_for(lists) is Plan.COMPILED_CODED


_RELEASES = """
import sys
import numpy as np, polars as pl, opendp.prelude as dp
import opendp_wgm as wgm
dp.enable_features("contrib", "honest-but-curious")
rng = np.random.default_rng(0)
data = pl.DataFrame({"user": rng.integers(0, 3_000, 20_000), "item": rng.zipf(1.5, 20_000) % 500})
space, budget = wgm.user_items_space(), dict(max_contributions=20, epsilon=1.0, delta=1e-5)
wgm.make_wgm_from_budget(*space, **budget)(data)
wgm.make_dp_sips_from_budget(*space, **budget)(data)
wgm.make_wgm_top_k_from_budget(*space, k=5, **budget)(data)
wgm.make_wgm_hitting_set_from_budget(*space, k=5, **budget)(data)
wgm.make_wgm_group_by_from_budget(*space, **budget)(data)
print("NUMBA", "numba" in sys.modules)
"""


def test_small_library_releases_load_no_numba() -> None:
    pytest.importorskip("numba")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", _RELEASES], capture_output=True, text=True, env=env,
                            timeout=300, check=False)
    assert result.stdout.splitlines()[-1:] == ["NUMBA False"], result.stdout + result.stderr
    assert "compiling" not in result.stderr
