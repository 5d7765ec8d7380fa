"""``python -m sdnn_dask``: the same as the ``sdnn-dask`` command."""

import sys

from .cli import main

sys.exit(main())
