"""opendp-wgm: differentially private domain discovery for OpenDP, on Polars.

The Weighted Gaussian Mechanism (WGM) releases the items that many users hold, under user-level
(ε, δ)-DP or approximate zCDP, when the item domain is unknown; two-stage mechanisms use it to find the
top-k items and a k-hitting set. Importing this package changes nothing outside it: the caller enables
OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from opendp_wgm._version import __version__

if TYPE_CHECKING:
    from opendp_wgm import datasets, metrics
    from opendp_wgm.privacy.calibrate import WGMCalibration, WGMTopKCalibration, calibrate_wgm, calibrate_wgm_top_k
    from opendp_wgm.domains import user_items_space
    from opendp_wgm.measurements import *  # noqa: F403 - the measurements' own __all__
    from opendp_wgm.transformations import (
        make_bound_user_items,
        make_candidate_counts,
        make_weighted_histogram,
        then_bound_user_items,
        then_candidate_counts,
        then_weighted_histogram,
    )

# The public names are imported on first use (PEP 562), so that ``import opendp_wgm.cli`` (the command's
# --help, --version and argument errors) does not import OpenDP, NumPy or the measurements.
#: Public name -> the module that defines it; any other public name is one of the measurements'.
_EXPORTS = {  # in the order of ``__all__``
    "WGMCalibration": "opendp_wgm.privacy.calibrate",
    "WGMTopKCalibration": "opendp_wgm.privacy.calibrate",
    "calibrate_wgm": "opendp_wgm.privacy.calibrate",
    "calibrate_wgm_top_k": "opendp_wgm.privacy.calibrate",
    "datasets": "opendp_wgm.datasets",
    "make_bound_user_items": "opendp_wgm.transformations",
    "make_candidate_counts": "opendp_wgm.transformations",
    "make_weighted_histogram": "opendp_wgm.transformations",
    "metrics": "opendp_wgm.metrics",
    "then_bound_user_items": "opendp_wgm.transformations",
    "then_candidate_counts": "opendp_wgm.transformations",
    "then_weighted_histogram": "opendp_wgm.transformations",
    "user_items_space": "opendp_wgm.domains",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(_EXPORTS[name])
        value = module if module.__name__ == f"{__name__}.{name}" else getattr(module, name)
    elif name == "__all__":
        value = [*_EXPORTS, *importlib.import_module("opendp_wgm.measurements").__all__]
    elif name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # a private name, or a submodule that ``from opendp_wgm import <submodule>`` imports itself
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        measurements = importlib.import_module("opendp_wgm.measurements")
        if name not in measurements.__all__:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(measurements, name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})
