"""The paper's experiments, reproducible with one call (or ``opendp-wgm reproduce``).

>>> from opendp_wgm.experiments import reproduce          # doctest: +SKIP
>>> reproduce("set-union", data_dir="../shared/data", out_dir="/tmp/results")  # doctest: +SKIP

See :func:`reproduce` for the experiments, methods, grids and outputs, and ``docs/results.md`` for a full run.
"""

from opendp_wgm.experiments._cli import (
    REPRODUCE_DESCRIPTION,
    REPRODUCE_EPILOG,
    REPRODUCE_HELP,
    add_reproduce_arguments,
    main_reproduce,
    run_reproduce,
)
from opendp_wgm.experiments._config import DEFAULT_DATASETS, EXPERIMENTS, METHODS
from opendp_wgm.experiments._runner import ReproduceResult, reproduce

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
