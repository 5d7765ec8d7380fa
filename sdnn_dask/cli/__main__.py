"""``python -m sdnn_dask.cli``: the same as the ``sdnn-dask`` command."""

import sys

from . import main

sys.exit(main())
