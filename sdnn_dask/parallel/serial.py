"""Serial strategies: the plain reference and the compiled kernel, in this process."""

from __future__ import annotations

import socket
import time

import pandas as pd
import scipy.sparse as sp

from ..core.kernels import KernelSettings, forward_block, stream_blocks, warm_up_kernels
from ..core.network import Network, as_csr32
from ..core.reference import infer_reference
from ..core.result import RunResult, network_info
from .peak_memory import read_peak, reset_peak

SERIAL_METHODS = ("reference", "kernel")


def run_serial(network: Network, inputs: sp.spmatrix | sp.sparray,
               method: str = "kernel") -> RunResult:
    """Run inference in this process.

    Parameters
    ----------
    network, inputs
        The network and the ``rows x N`` inputs. The network may be a
        :class:`~sdnn_dask.data.streaming.StreamedNetwork`: the kernel then runs all the rows
        through a layer before the next (:func:`~sdnn_dask.core.kernels.stream_blocks`), and
        the reference reads the layers in order; neither holds more than a few layers.
        The run's block records this process's peak resident memory during the run
        (:mod:`~.peak_memory`: ``peak_rss_bytes``, ``peak_since``).
    method
        ``"reference"``: the plain scipy recurrence
        (:func:`~sdnn_dask.core.reference.infer_reference`);
        ``"kernel"``: the compiled kernel every parallel strategy uses.
    """
    if method not in SERIAL_METHODS:
        raise ValueError(f"unknown serial method {method!r}; choose one of {SERIAL_METHODS}")
    y = as_csr32(inputs)
    host = socket.gethostname()
    params: dict[str, object] = {}
    if method == "reference":
        reset_peak()
        inference = infer_reference(network, y)
        output, seconds = inference.output, inference.seconds
        layers = inference.trace.assign(block=0, mode="reference")
    else:
        streamed = hasattr(network, "kernel_layers")
        if not streamed:
            _ = network.output_order  # built once (with the transposes), outside the clock
        warm_up_kernels()
        reset_peak()  # after the set-up above: the peak of the run itself
        start = time.perf_counter()
        # a network streamed from a store runs layer by layer (read once, in order)
        block = stream_blocks(network, [y])[0] if streamed else forward_block(network, y)
        seconds = time.perf_counter() - start
        output = block.to_csr()
        layers = block.trace.assign(block=0)
        kernel = KernelSettings.resolve()  # what forward_block read
        params["dedup"], params["classes"] = kernel.dedup, kernel.classes
    peak = read_peak()
    survivors = int((output.getnnz(axis=1) > 0).sum())
    blocks = pd.DataFrame([{"block": 0, "worker": f"local:{host}", "rows": y.shape[0],
                            "survivors": survivors, "compute_s": seconds,
                            "peak_rss_bytes": peak.bytes, "peak_since": peak.since}])
    return RunResult(
        strategy=method,
        partition="none",
        network=network_info(network),
        n_inputs=int(y.shape[0]),
        n_workers=1,
        n_blocks=1,
        output=output,
        wall_seconds=seconds,
        blocks=blocks,
        layers=layers,
        params=params,
    )
