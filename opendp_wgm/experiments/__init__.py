"""The paper's experiments, reproducible with one call (or ``opendp-wgm reproduce``).

>>> from opendp_wgm.experiments import reproduce          # doctest: +SKIP
>>> reproduce("set-union", data_dir="../shared/data", out_dir="/tmp/results")  # doctest: +SKIP

See :func:`reproduce` for the experiments, methods, grids and outputs, and ``docs/results.md`` for a full run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opendp_wgm.experiments._cli import (
    REPRODUCE_DESCRIPTION,
    REPRODUCE_EPILOG,
    REPRODUCE_HELP,
    add_reproduce_arguments,
    main_reproduce,
    run_reproduce,
)
from opendp_wgm.experiments._config import DEFAULT_DATASETS, EXPERIMENTS, METHODS

if TYPE_CHECKING:  # imported on first use (below), re-exported for type checkers
    from opendp_wgm.experiments._runner import ReproduceResult as ReproduceResult
    from opendp_wgm.experiments._runner import reproduce as reproduce

__all__ = [
    "DEFAULT_DATASETS",
    "EXPERIMENTS",
    "METHODS",
    "REPRODUCE_DESCRIPTION",
    "REPRODUCE_EPILOG",
    "REPRODUCE_HELP",
    "ReproduceResult",
    "add_reproduce_arguments",
    "main_reproduce",
    "reproduce",
    "run_reproduce",
]


def __getattr__(name: str) -> Any:
    """The runner's names, imported on first use (PEP 562): it imports OpenDP and the measurements, which
    ``opendp-wgm reproduce --help`` (the parser and its texts above) does not need."""
    if name in ("ReproduceResult", "reproduce"):
        from opendp_wgm.experiments import _runner

        value = getattr(_runner, name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
