"""Small inputs take the Polars plans while the compiled steps are not loaded (``docs/engines.md``, *Which plan
computes the histogram*, rule 2).

Loading the compiled steps costs more than they save on a small input: importing Numba and loading their cached
code takes 0.4 to 0.9 s per process, and a first-use compile (cold cache) 8 to 11 s per path on 2 cores, where
the Polars plans release steam_200k (1.3·10^5 rows) in 0.02 to 0.04 s; at 10^7 rows the compiled steps save more
than a second per release (``benchmarks/bench_first_release.py``). So below :data:`COMPILED_FROM_ROWS` input rows,
a release in a process that has not loaded them yet runs the Polars plans and paths (the same release, bit for
bit); once they are loaded (a larger release ran), every release may use them. The row count is the input's, a
fact of the data for its curator (it chooses a plan, never what is released).
"""

from __future__ import annotations

import importlib.util
import sys
from contextlib import AbstractContextManager, nullcontext

import polars as pl

from opendp_wgm.engines.polars import import_deferred, no_cold_compiled_import

__all__ = ["COMPILED_FROM_ROWS", "cold", "compiled_steps_for", "small_and_cold"]

#: From this many input rows on, a release may load the compiled steps; below, only where they are loaded already.
COMPILED_FROM_ROWS = 3 * 10**6

_COMPILED_MODULE = "opendp_wgm.engines._kernel_jit"


def cold() -> bool:
    """Whether a release here would load the compiled steps first: Numba is installed, this process has not
    imported them, and it is not inside :func:`~opendp_wgm.engines.polars.no_cold_compiled_import` (where they are
    not loaded whatever the size: no rows need counting). Imports nothing (``sys.modules`` and an import-system
    lookup)."""
    if import_deferred() or _COMPILED_MODULE in sys.modules:
        return False
    return importlib.util.find_spec("numba") is not None


def compiled_steps_for(rows: int) -> AbstractContextManager[None]:
    """The context of a release of ``rows`` input rows: below :data:`COMPILED_FROM_ROWS`,
    :func:`~opendp_wgm.engines.polars.no_cold_compiled_import` (the compiled steps run only if loaded already);
    from it on, nothing changes."""
    return no_cold_compiled_import() if rows < COMPILED_FROM_ROWS else nullcontext()


def small_and_cold(lf: pl.LazyFrame) -> AbstractContextManager[None]:
    """:func:`compiled_steps_for` the rows of ``lf`` where the compiled steps are :func:`cold` (then ``lf``'s rows
    are counted: free for a collected frame, a read of a scan's columns), else nothing (nothing read)."""
    if not cold():
        return nullcontext()
    return compiled_steps_for(lf.select(pl.len()).collect().item())
