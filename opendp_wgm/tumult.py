"""``opendp_wgm.tumult``: the Tumult Core adapter's public import path (documented, kept source-compatible).

The adapter lives in :mod:`opendp_wgm.engines.tumult`; this module re-exports its public names.
"""

from opendp_wgm.engines.tumult import *
from opendp_wgm.engines.tumult import __all__ as __all__
