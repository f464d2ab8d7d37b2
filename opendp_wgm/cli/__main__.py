"""``python -m opendp_wgm.cli``: the ``opendp-wgm`` command."""

import sys

from opendp_wgm.cli import _console

sys.exit(_console())
