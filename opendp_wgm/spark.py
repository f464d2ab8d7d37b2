"""``opendp_wgm.spark``: the Spark engine's public import path (documented, kept source-compatible).

The engine lives in :mod:`opendp_wgm.engines.spark`; this module re-exports its public names.
"""

from opendp_wgm.engines.spark import *
from opendp_wgm.engines.spark import __all__ as __all__
