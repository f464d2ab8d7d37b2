"""``python -m opendp_wgm.cli``: the ``opendp-wgm`` command."""

import sys

from opendp_wgm.cli import main

sys.exit(main())
