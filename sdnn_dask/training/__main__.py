"""``python -m sdnn_dask.training [--layers 4 --epochs 10 ...]``: the digits task."""

from .digits import main

if __name__ == "__main__":
    raise SystemExit(main())
