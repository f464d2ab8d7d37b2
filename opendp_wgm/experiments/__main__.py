"""``python -m opendp_wgm.experiments {set-union,top-k,hitting-set} --data DIR --out DIR ...``"""

import sys

from opendp_wgm.experiments import main_reproduce

if __name__ == "__main__":
    sys.exit(main_reproduce())
