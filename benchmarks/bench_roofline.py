"""A roofline of the serial kernel: per layer the useful FMAs, the FMAs computed, the bytes
touched and the rate reached, against this machine's measured FMA peak and memory
bandwidth, with neuron classes off (before) and on (after).

    python benchmarks/bench_roofline.py                    # 1024-120 x 60000, 65536-20 x 6000
    python benchmarks/bench_roofline.py --sizes 1024 --csv roofline.csv

First, in this process and before any kernel runs, one core's peaks:

* FP32 FMA peak: a compiled loop over 16 independent 16-lane float32 vectors, each
  updated ``a = a * x + y`` (``fastmath``: LLVM keeps them in 16 zmm registers and emits
  16 ``vfmadd`` per pass, so nothing but the FMA pipes limits it); best of 5. The same
  without ``fastmath`` (32 vectors, a ``vmulps`` and a ``vaddps`` each: the kernel's own
  instructions, which it does not contract so as to round as the reference does) is
  printed beside it.
* Memory: a compiled sum over 1 GiB of float32 (read bandwidth), ``np.copyto`` of 1 GiB
  into 1 GiB already touched (copy bandwidth, bytes read + bytes written), and the same
  sum over 512 KiB read many times (L2 read bandwidth); best of 3 each.

Then for each size, a network of generated RadiX-Net layers on generated official-like
inputs: one run of each mode with every layer step counted (the run also warms the
process up: compiled steps, transposes and classes found), then ``--repeat`` timed runs
of each, interleaved, without counting; the counted and the timed runs must agree on
every layer's rows and nonzeros, and classes on must give the bits of classes off.

Per layer (numbers from the counted run, seconds from the timed ones, the least of the
``--repeat``):

* ``useful``: 32 x the nonzeros into the layer (the inputs' for layer 1, else the previous
  layer's ``nnz_out``: every neuron counted, also with classes): the multiply-adds the
  layer needs, whatever computes them.
* ``computed``: the multiply-adds the steps actually did: a dense step on a tile of ``r``
  rows does ``r x nnz(W^T)`` (``N x 32`` plain; ``classes x 32`` with classes); a sparse
  step ``sum`` over its inputs' nonzeros of their rows of ``W`` (32 each); classes' scatter
  the same over the classes' columns (2 each on RadiX-Net). Rows computed once by
  deduplication (``sdnn.kernel.dedup``, on in both modes) count once.
* ``bytes``: the least traffic a step needs, each array once: a dense step reads its input
  tile and writes its output tile (``4 x width x rows`` each) and reads the weights it
  uses (``W^T``'s CSR and the bias); a sparse step reads its input CSR and the rows of
  ``W`` its nonzeros use (8 bytes an entry) and writes its output (CSR, or the classes'
  dense tile for the scatter). Conversions between tiles and CSR and compactions are in
  the seconds but neither in the FMAs nor in the bytes.
* ``bound``: min(FMA peak, intensity x copy bandwidth), intensity = computed / bytes;
  ``share``: the computed rate over that bound.

``seconds`` is the trace's: the layer's steps with their conversions and compactions,
not the repacks and deduplication between layers.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import numba
import numpy as np
import pandas as pd

from sdnn_dask.core.kernels import chunks as chunks_module
from sdnn_dask.core.kernels import forward as forward_module
from sdnn_dask.core.kernels import forward_block
from sdnn_dask.data.radixnet import make_inputs, make_network

#: The two problems of issue 44: N -> (layers, input rows).
SIZES = {1024: (120, 60000), 65536: (20, 6000)}
#: Layer groups of the compact table (1-based, inclusive).
GROUPS = [(1, 1), (2, 2), (3, 6), (7, 15), (16, 20), (1, 20)]

_LANES = 16  # float32 lanes of a 512-bit vector
_VECTORS = 16  # independent accumulators: 2 FMA pipes x 4-cycle latency needs >= 8


@numba.njit(fastmath=True, cache=True)
def _fma_loop(acc, iters, x, y):  # pragma: no cover - compiled
    # 256 = _VECTORS x _LANES, a literal so LLVM unrolls it into 16 zmm registers
    for _ in range(iters):
        for i in range(256):
            acc[i] = acc[i] * x + y
    return acc.sum()


@numba.njit(cache=True)
def _mul_add_loop(acc, iters, x, y):  # pragma: no cover - compiled
    # no fastmath: a multiply then an add, each rounded, as the kernel's steps do; 512
    # = 32 vectors, enough to cover the two instructions' latency
    for _ in range(iters):
        for i in range(512):
            acc[i] = acc[i] * x + y
    return acc.sum()


@numba.njit(fastmath=True, cache=True)
def _read_sum(a, times):  # pragma: no cover - compiled
    total = np.float32(0.0)
    for _ in range(times):
        s = np.float32(0.0)
        for i in range(a.shape[0]):
            s += a[i]
        total += s
    return total


def _best(run, repeat: int) -> float:
    """Least seconds of ``repeat`` calls of ``run()``."""
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _memory_bandwidth() -> tuple[float, float]:
    """Read and copy bandwidth (GB/s) over 1 GiB of float32, touched first; the arrays
    are freed on return."""
    big = np.ones(1 << 28, np.float32)
    _read_sum(big[:1024], 1)
    read = big.nbytes / _best(lambda: _read_sum(big, 1), 3) / 1e9
    dst = np.zeros_like(big)
    copy = 2 * big.nbytes / _best(lambda: np.copyto(dst, big), 3) / 1e9
    return read, copy


def measure_peaks() -> dict[str, float]:
    """One core's FP32 FMA peak (GFMA/s) and memory bandwidths (GB/s), measured here.

    Returns
    -------
    dict
        ``gfma`` FMA peak; ``mul_add`` the same with a multiply and an add (the
        kernel's instructions: it does not contract them, to round as the reference
        does), G multiply-adds/s; ``read``, ``copy``, ``l2_read`` bandwidths (``copy`` counts
        bytes read plus bytes written).
    """
    x, y = np.float32(0.999), np.float32(0.001)  # a -> y / (1 - x): no overflow, no denormals
    acc = np.full(_VECTORS * _LANES, 0.5, np.float32)
    _fma_loop(acc, 10, x, y)
    iters = 20_000_000
    gfma = acc.size * iters / _best(lambda: _fma_loop(acc, iters, x, y), 5) / 1e9
    acc2 = np.full(2 * acc.size, 0.5, np.float32)
    _mul_add_loop(acc2, 10, x, y)
    mul_add = acc2.size * (iters // 2) / _best(lambda: _mul_add_loop(acc2, iters // 2, x, y),
                                                5) / 1e9
    read, copy = _memory_bandwidth()
    small = np.ones(128 * 1024, np.float32)  # 512 KiB: in L2 (1 MiB a core)
    times = 4000
    l2 = small.nbytes * times / _best(lambda: _read_sum(small, times), 3) / 1e9
    return {"gfma": gfma, "mul_add": mul_add, "read": read, "copy": copy, "l2_read": l2}


class StepCounter:
    """Counts, per layer, the FMAs and bytes of every step the kernel runs, by wrapping
    the compiled steps where :class:`~sdnn_dask.core.kernels.chunks.Chunk` calls them and
    the layer loop that says which layer is running. Only for an untimed run: restores
    everything on exit."""

    _STEPS = ("dense_step", "dense_step_sized", "sparse_step", "scatter_step")

    def __init__(self) -> None:
        self.layer = -1
        self.rows: defaultdict[tuple[int, str], dict[str, float]] = defaultdict(
            lambda: {"computed": 0.0, "bytes": 0.0, "rows": 0.0, "calls": 0.0})
        self._saved: dict[str, object] = {}

    def _add(self, path: str, rows: int, fmas: float, nbytes: float) -> None:
        entry = self.rows[(self.layer, path)]
        entry["computed"] += fmas
        entry["bytes"] += nbytes
        entry["rows"] += rows
        entry["calls"] += 1

    def __enter__(self) -> StepCounter:
        stepper = forward_module._Stepper
        self._saved["advance"] = advance = stepper.advance

        def counted_advance(this, chunk, k):
            self.layer = k
            return advance(this, chunk, k)

        stepper.advance = counted_advance
        for name in self._STEPS:
            self._saved[name] = getattr(chunks_module, name)
        dense, sized = self._saved["dense_step"], self._saved["dense_step_sized"]
        sparse, scatter = self._saved["sparse_step"], self._saved["scatter_step"]

        def dense_bytes(yt, wtp, wti, wtx, bias, order):
            rows = yt.shape[1]
            n_out = order.shape[0]
            return rows, 4 * (yt.shape[0] + n_out) * rows + (
                wtp.nbytes + wti.nbytes + wtx.nbytes + bias.nbytes)

        def counted_dense(yt, wtp, wti, wtx, bias, ymax, zt, row_tile, order):
            rows, nbytes = dense_bytes(yt, wtp, wti, wtx, bias, order)
            fmas = rows * float(np.sum(wtp[order + 1] - wtp[order]))
            self._add("dense", rows, fmas, nbytes)
            return dense(yt, wtp, wti, wtx, bias, ymax, zt, row_tile, order)

        def counted_sized(yt, wtp, wti, wtx, bias, ymax, zt, row_tile, order, sizes,
                          copy_of):
            rows, nbytes = dense_bytes(yt, wtp, wti, wtx, bias, order)
            computed = order if not copy_of.size else order[copy_of[order] < 0]  # copies: 0
            fmas = rows * float(np.sum(wtp[computed + 1] - wtp[computed]))
            self._add("dense", rows, fmas, nbytes + sizes.nbytes)
            return sized(yt, wtp, wti, wtx, bias, ymax, zt, row_tile, order, sizes, copy_of)

        def used_rows(yi, wp):
            """The entries of ``W``'s rows the inputs' nonzeros use: per nonzero (FMAs),
            and of the distinct rows (bytes read, 8 an entry)."""
            lengths = np.diff(wp)
            return float(lengths[yi].sum()), 8.0 * float(lengths[np.unique(yi)].sum())

        def counted_sparse(yp, yi, yx, wp, wi, wx, bias, ymax, n_out, compact):
            out = sparse(yp, yi, yx, wp, wi, wx, bias, ymax, n_out, compact)
            fmas, weights = used_rows(yi, wp)
            op, oi, ox, _ = out
            nbytes = (yp.nbytes + yi.nbytes + yx.nbytes + weights + bias.nbytes + op.nbytes
                      + oi.nbytes + ox.nbytes)
            self._add("sparse", yp.shape[0] - 1, fmas, nbytes)
            return out

        def counted_scatter(yp, yi, yx, rp, ri, rx, bias, ymax, zt, sizes):
            fmas, weights = used_rows(yi, rp)
            nbytes = (yp.nbytes + yi.nbytes + yx.nbytes + weights + bias.nbytes
                      + sizes.nbytes + 4 * zt.size)
            self._add("scatter", yp.shape[0] - 1, fmas, nbytes)
            return scatter(yp, yi, yx, rp, ri, rx, bias, ymax, zt, sizes)

        chunks_module.dense_step = counted_dense
        chunks_module.dense_step_sized = counted_sized
        chunks_module.sparse_step = counted_sparse
        chunks_module.scatter_step = counted_scatter
        return self

    def __exit__(self, *exc) -> None:
        forward_module._Stepper.advance = self._saved.pop("advance")
        for name, step in self._saved.items():
            setattr(chunks_module, name, step)
        self._saved.clear()

    def layers(self, n_layers: int) -> pd.DataFrame:
        """Per layer (0-based index): computed FMAs, bytes, rows stepped, the steps'
        paths."""
        out = pd.DataFrame(0.0, index=range(n_layers), columns=["computed", "bytes", "rows"])
        paths: defaultdict[int, list[str]] = defaultdict(list)
        for (k, path), entry in sorted(self.rows.items()):
            for column in out.columns:
                out.loc[k, column] += entry[column]
            paths[k].append(path)
        out["path"] = ["+".join(paths[k]) or "-" for k in range(n_layers)]
        return out


def _same_bits(a, b) -> bool:
    a, b = a.to_csr(), b.to_csr()
    return (np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.data.view(np.uint32), b.data.view(np.uint32)))


def run_size(n: int, n_layers: int, rows: int, repeat: int, seed: int
             ) -> tuple[pd.DataFrame, dict[bool, float]]:
    """Per layer and mode (classes off, on): the counted work and the least seconds of
    ``repeat`` timed runs; and each mode's least whole-block seconds."""
    net = make_network(n, n_layers, seed=seed)
    x = make_inputs(rows, n, seed=seed)
    counted, traces, outputs = {}, {}, {}
    for classes in (False, True):
        with StepCounter() as counter:
            outputs[classes] = forward_block(net, x, classes=classes)
        counted[classes] = counter.layers(n_layers)
        traces[classes] = outputs[classes].trace
        # the steps counted must have seen every row the trace says went in, before the
        # first layer that steps rows merged by deduplication (its trace has fewer
        # distinct rows out than rows out; it and the later ones step fewer rows)
        trace = traces[classes]
        merged = np.flatnonzero(trace["distinct_out"] < trace["rows_out"])
        plain = slice(0, merged[0] if len(merged) else n_layers)
        seen = counted[classes]["rows"].to_numpy()[plain]
        if not np.array_equal(seen, trace["rows_in"].to_numpy()[plain]):
            raise SystemExit(f"N = {n}, classes {classes}: the steps counted saw {seen} "
                             f"rows, the trace says {trace['rows_in'].to_numpy()[plain]}")
    if not _same_bits(outputs[False], outputs[True]):
        raise SystemExit(f"N = {n}: classes on and off give different outputs")
    seconds = {c: np.full(n_layers, np.inf) for c in (False, True)}
    whole = {False: np.inf, True: np.inf}
    keys = ["rows_in", "rows_out", "nnz_out", "distinct_out"]
    for _ in range(repeat):
        for classes in (False, True):  # interleaved: a drifting machine hits both
            start = time.perf_counter()
            out = forward_block(net, x, classes=classes)
            whole[classes] = min(whole[classes], time.perf_counter() - start)
            if not out.trace[keys].equals(traces[classes][keys]):
                raise SystemExit(f"N = {n}: the timed run's layers differ from the counted")
            seconds[classes] = np.minimum(seconds[classes], out.trace["seconds"].to_numpy())
    nnz_in = np.concatenate([[x.nnz], traces[False]["nnz_out"].to_numpy()[:-1]])
    frames = []
    for classes in (False, True):
        trace, work = traces[classes], counted[classes]
        frames.append(pd.DataFrame({
            "N": n, "layer": trace["layer"].to_numpy(), "classes": "on" if classes else "off",
            "path": work["path"].to_numpy(), "rows_in": trace["rows_in"].to_numpy(),
            "useful": 32.0 * nnz_in, "computed": work["computed"].to_numpy(),
            "bytes": work["bytes"].to_numpy(), "seconds": seconds[classes]}))
    return pd.concat(frames, ignore_index=True), whole


def add_rates(table: pd.DataFrame, peaks: dict[str, float]) -> pd.DataFrame:
    """Rates, intensity, roofline bound and share of it, from the summed columns."""
    table = table.copy()
    table["useful_gfma_s"] = table["useful"] / table["seconds"] / 1e9
    table["computed_gfma_s"] = table["computed"] / table["seconds"] / 1e9
    table["fma_per_byte"] = table["computed"] / table["bytes"]
    table["bound_gfma_s"] = np.minimum(peaks["gfma"], table["fma_per_byte"] * peaks["copy"])
    table["share"] = table["computed_gfma_s"] / table["bound_gfma_s"]
    return table


def grouped(layers: pd.DataFrame, n_layers: int) -> pd.DataFrame:
    """The layers summed in :data:`GROUPS` (those within the network), and all layers."""
    groups = [(a, b) for a, b in GROUPS if b <= n_layers]
    if n_layers > 20:
        groups += [(21, n_layers), (1, n_layers)]
    rows = []
    for (n, classes), part in layers.groupby(["N", "classes"], sort=False):
        for a, b in groups:
            sel = part[(part["layer"] >= a) & (part["layer"] <= b)]
            paths = sorted({p for text in sel["path"] for p in text.split("+") if p != "-"})
            rows.append({"N": n, "layers": f"{a}" if a == b else f"{a}-{b}",
                         "classes": classes, "path": "+".join(paths),
                         "rows_in": int(sel["rows_in"].iloc[0]),
                         **sel[["useful", "computed", "bytes", "seconds"]].sum().to_dict()})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES),
                        choices=list(SIZES), help="N of the problems to run")
    parser.add_argument("--repeat", type=int, default=1,
                        help="timed runs of each mode (the least seconds per layer)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", type=Path, help="also write the per-layer table here")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    peaks = measure_peaks()
    print(f"one core: FP32 FMA peak {peaks['gfma']:.1f} GFMA/s (multiply then add: "
          f"{peaks['mul_add']:.1f} G/s); read {peaks['read']:.1f} "
          f"GB/s, copy {peaks['copy']:.1f} GB/s (read + write), L2 read "
          f"{peaks['l2_read']:.1f} GB/s; bound = min(peak, FMA/byte x copy bandwidth)")
    pd.set_option("display.width", 250)
    fmt = {"useful": "{:.3g}".format, "computed": "{:.3g}".format, "bytes": "{:.3g}".format,
           "seconds": "{:.4f}".format, "useful_gfma_s": "{:.2f}".format,
           "computed_gfma_s": "{:.2f}".format, "fma_per_byte": "{:.2f}".format,
           "bound_gfma_s": "{:.1f}".format, "share": "{:.3f}".format}
    every = []
    for n in args.sizes:
        n_layers, rows = SIZES[n]
        layers, whole = run_size(n, n_layers, rows, args.repeat, args.seed)
        every.append(layers)
        shown = add_rates(layers[layers["layer"] <= 20], peaks)
        print(f"\nN = {n}: {n}-{n_layers} x {rows} inputs, layers 1-20")
        print(shown.to_string(index=False, formatters=fmt))
        groups = add_rates(grouped(layers, n_layers), peaks)
        print(f"\nN = {n}, layers summed")
        print(groups.to_string(index=False, formatters=fmt))
        for (a, b) in [(1, 20)] + ([(21, n_layers)] if n_layers > 20 else []):
            sel = layers[(layers["layer"] >= a) & (layers["layer"] <= b)]
            off = sel.loc[sel["classes"] == "off", "seconds"].sum()
            on = sel.loc[sel["classes"] == "on", "seconds"].sum()
            print(f"layers {a}-{b}: {off:.4f} s before, {on:.4f} s after: {off / on:.1f}x")
        print(f"whole block: {whole[False]:.3f} s before, {whole[True]:.3f} s after: "
              f"{whole[False] / whole[True]:.1f}x")
    if args.csv:
        add_rates(pd.concat(every, ignore_index=True), peaks).to_csv(args.csv, index=False)
        print(f"\nwrote {args.csv}")


if __name__ == "__main__":
    main()
