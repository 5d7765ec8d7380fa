"""A part's dense tiles, compiled: filled from the slabs a layer reads, stepped, and
compressed back into nonzero runs. Knows nothing of Dask.

:func:`dense_layer` runs the dense step (:func:`~sdnn_dask.core.kernels.dense_step`) over
a layer's inputs a cache-sized chunk of rows at a time: :func:`_fill_tile` writes each
chunk's input tile from the slabs, and the output tile is kept as a tile or appended to
:class:`~.layout.BlockCSC` runs with :func:`_append_nonzeros` (an AVX-512 compress-store,
an LLVM intrinsic, where the CPU has it). :func:`tile_to_blocks` compresses a slab's tile
the same way. These hot loops call one another and are compiled together, so they are
kept in one module.
"""

from __future__ import annotations

import llvmlite.binding
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...core.kernels.steps import dense_step_sized

# --- Appending a run's nonzeros: AVX-512 compress-store where the CPU has it -------------

_LANES = 16


@intrinsic
def _compress16(typingctx, src, start, rank, rstart, oi, ox, w):  # pragma: no cover
    """Append the nonzeros of ``src[start:start + 16]`` to ``ox`` from ``w``, and the
    matching ``rank[rstart:rstart + 16]`` to ``oi``; returns how many (LLVM's
    ``masked.compressstore``: one ``vcompressps`` per array with AVX-512)."""
    sig = types.intp(src, start, rank, rstart, oi, ox, w)

    def codegen(context, builder, signature, args):
        s_, start_, r_, rstart_, oi_, ox_, w_ = args
        s_ty, _, r_ty, _, oi_ty, ox_ty, _ = signature.args
        f32, i32 = ir.FloatType(), ir.IntType(32)
        vf, vi = ir.VectorType(f32, _LANES), ir.VectorType(i32, _LANES)
        vmask = ir.VectorType(ir.IntType(1), _LANES)

        def at(ty, value, offset, vty):
            data = context.make_array(ty)(context, builder, value).data
            return builder.bitcast(builder.gep(data, [offset]), vty.as_pointer())

        values = builder.load(at(s_ty, s_, start_, vf), align=4)
        ranks = builder.load(at(r_ty, r_, rstart_, vi), align=4)
        mask = builder.fcmp_unordered("!=", values, ir.Constant(vf, [0.0] * _LANES))
        for vty, vec, ty, arr, name in ((vf, values, ox_ty, ox_, "v16f32"),
                                        (vi, ranks, oi_ty, oi_, "v16i32")):
            store = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [vty, vty.as_pointer(), vmask]),
                f"llvm.masked.compressstore.{name}")
            builder.call(store, [vec, at(ty, arr, w_, vty), mask])
        bits = builder.bitcast(mask, ir.IntType(_LANES))
        popcount = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.IntType(_LANES), [ir.IntType(_LANES)]),
            f"llvm.ctpop.i{_LANES}")
        return builder.zext(builder.call(popcount, [bits]), context.get_value_type(types.intp))

    return sig, codegen


def _has_avx512() -> bool:
    """Whether numba compiles for this CPU and it has AVX-512 (compress-store in one
    instruction; elsewhere LLVM splits it into per-lane stores, slower than a plain loop)."""
    if numba.config.CPU_NAME not in (None, "host"):
        return False
    try:
        return bool(llvmlite.binding.get_host_cpu_features().get("avx512f", False))
    except Exception:  # pragma: no cover - no feature query on this platform
        return False


_COMPRESS = _has_avx512()


@numba.njit(nogil=True, cache=True)
def _append_nonzeros_scalar(src, start, m, rank, rstart, oi, ox, w):  # pragma: no cover
    """:func:`_append_nonzeros` one entry at a time (needs the one spare entry)."""
    for r in range(m):  # no branch on the value: half-dense runs would mispredict often
        z = src[start + r]
        oi[w] = rank[rstart + r]
        ox[w] = z
        w += z != 0.0
    return w


@numba.njit(nogil=True, cache=True)
def _append_nonzeros(src, start, m, rank, rstart, oi, ox, w):  # pragma: no cover
    """Append the nonzeros of ``src[start:start + m]`` to ``ox`` from ``w`` and their
    ``rank[rstart + r]`` to ``oi``; returns the new end. ``oi`` and ``ox`` must have room
    for one entry more than are appended."""
    r = 0
    if _COMPRESS:
        while r + _LANES <= m:
            w += _compress16(src, start + r, rank, rstart + r, oi, ox, w)
            r += _LANES
    return _append_nonzeros_scalar(src, start + r, m - r, rank, rstart + r, oi, ox, w)


@numba.njit(nogil=True, cache=True)
def tile_to_blocks(tile, columns, used, nnz, block):  # pragma: no cover
    """The :class:`BlockCSC` arrays of the tile rows ``columns`` (``nnz`` nonzeros in
    all), ``block`` tile columns a block; the tile columns not ``used`` are dropped."""
    m, n = tile.shape[1], columns.shape[0]
    below = np.zeros(m + 1, np.int64)
    for r in range(m):
        below[r + 1] = below[r] + used[r]
    rank = below[:m].astype(np.int32)  # exact for the rows used; the others hold zeros
    n_blocks = max(1, (m + block - 1) // block)
    starts = np.empty((n_blocks, n + 1), np.int64)
    bounds = np.empty(n_blocks + 1, np.int64)
    oi = np.empty(nnz + 1, np.int32)  # one spare: _append_nonzeros may write one past
    ox = np.empty(nnz + 1, np.float32)
    flat = tile.reshape(-1)
    w = 0
    for b in range(n_blocks):
        r0, r1 = min(m, b * block), min(m, (b + 1) * block)
        bounds[b] = below[r0]
        for j in range(n):
            starts[b, j] = w
            w = _append_nonzeros(flat, columns[j] * m + r0, r1 - r0, rank, r0, oi, ox, w)
        starts[b, n] = w
    bounds[n_blocks] = below[m]
    return starts, oi[:w], ox[:w], bounds


# --- The layer's inputs, as the compiled helpers take them -------------------------------
#
# Input ``i`` is a slab's values in :class:`BlockCSC` form: column ``c`` of block ``b`` is
# ``vals[i][starts[i][b, c]:starts[i][b, c + 1]]`` at rows ``idxs[i]``, block ``b`` holding
# rows ``bounds[i][b]:bounds[i][b + 1]``; or, when ``dense[i]``, a tile flattened as one
# block holding every row (``starts[i][0, c] = c * rows``, no ``idxs``). Its column
# ``srcs[i][j]`` is the layer's input ``tiles[i][j]``; its row ``r`` is the union's row
# ``poss[i][r]``, or ``r`` when ``same[i]`` (its rows are the union). One tuple entry per
# input: numba compiles once per number of inputs.


@numba.njit(nogil=True, cache=True)
def padded(rows):  # pragma: no cover
    """``rows`` rounded up to a multiple of 16 (64 bytes of float32)."""
    return (rows + 15) // 16 * 16


@numba.njit(nogil=True, cache=True)
def _fill_tile(starts, bounds, idxs, vals, poss, same, dense, srcs, tiles, cur, bases, rcur,
               cblk, c0, m, yt):  # pragma: no cover
    """Write union rows ``c0 .. c0 + m`` of every input into the first ``m`` columns of
    the tile ``yt`` (``n_in x width``), zeros in the other ``width - m``.

    Cursors carried from chunk to chunk (chunks come in order): ``rcur[i]``, the first
    row of input ``i`` not yet reached (inputs whose rows are not the union's);
    ``cblk[i]``, the block its column cursors are in, and ``cur[bases[i] + j]``, where
    the unread entries of its column ``srcs[i][j]`` start in that block.
    """
    width = yt.shape[1]
    c1 = c0 + m
    uc0 = np.uint64(c0)
    for i in range(len(vals)):
        st, br, idx, val, pos = starts[i], bounds[i], idxs[i], vals[i], poss[i]
        src, til = srcs[i], tiles[i]
        if same[i]:
            a, b = c0, c1
        else:  # the input's rows landing in this chunk: a..b
            a = rcur[i]
            b = a
            while b < pos.shape[0] and pos[b] < c1:
                b += 1
            rcur[i] = b
        # (1-D views of tile rows and runs: numba then vectorises the copies)
        if dense[i]:
            for j in range(src.shape[0]):
                dst = yt[til[j]]
                if same[i]:
                    run = val[st[0, src[j]] + c0 : st[0, src[j]] + c1]
                    for r in range(m):
                        dst[r] = run[r]
                    for r in range(m, width):
                        dst[r] = 0.0
                    continue
                run = val[st[0, src[j]] : st[0, src[j] + 1]]
                for r in range(width):
                    dst[r] = 0.0
                # rows the union lacks map to the next union row: zero in these columns,
                # and written before that row's own value, they never clobber it
                for r in range(a, b):
                    dst[np.uint64(pos[r]) - uc0] = run[r]
            continue
        n_blocks = st.shape[0]
        lo = cblk[i]  # first block ending after row a
        while lo + 1 < n_blocks and br[lo + 1] <= a:
            lo += 1
        hi = lo  # last block starting before row b
        while hi + 1 < n_blocks and br[hi + 1] < b:
            hi += 1
        base = bases[i]
        for j in range(src.shape[0]):
            dst = yt[til[j]]
            for r in range(width):
                dst[r] = 0.0
            c = src[j]
            p = cur[base + j] if lo == cblk[i] else st[lo, c]
            for blk in range(lo, hi + 1):
                if blk > lo:
                    p = st[blk, c]
                end = st[blk, c + 1]
                if br[blk + 1] > b:  # the block runs past the chunk: stop at row b
                    n = 0
                    for q in range(p, end):  # (rows increase: a count finds the cut)
                        n += idx[q] < b
                    end = p + n
                # unsigned indices: no negative-index wraparound, so no check per entry
                if same[i]:
                    for q in range(p, end):
                        dst[np.uint64(idx[q]) - uc0] = val[q]
                else:
                    for q in range(p, end):
                        dst[np.uint64(pos[np.uint64(idx[q])]) - uc0] = val[q]
                p = end
            cur[base + j] = p
        cblk[i] = hi


@numba.njit(nogil=True, cache=True)
def dense_layer(starts, bounds, idxs, vals, poss, same, dense, srcs, tiles, n_in, n_rows,
                 chunk_rows, wtp, wti, wtx, bias, ymax, order, row_tile, y_buf, z_buf, oi,
                 ox, copy_of):  # pragma: no cover
    """The dense step over the ``n_rows`` union rows of the inputs, ``chunk_rows`` at a
    time: each chunk's input and output tiles live in the cache-sized buffers ``y_buf``
    and ``z_buf``, as in the serial kernel.

    The output is a tile if the first chunk with survivors is at least half nonzero, else
    a :class:`BlockCSC` with a block per chunk, its runs appended to the scratch buffers
    ``oi``/``ox`` (grown when short) and copied out at the end; ``copy_of``
    (:attr:`~.plans.LayerPlan.copy_of`) says which outputs are copies. Returns ``(as_tile, tile,
    starts, indices, data, block_rows, alive, nnz, oi, ox)``: the unused form is empty;
    ``alive`` marks the union rows kept.
    """
    n_out = wtp.shape[0] - 1
    ones = np.ones(n_out, np.int32)
    n_inputs = len(vals)
    bases = np.zeros(n_inputs + 1, np.int64)
    for i in range(n_inputs):
        bases[i + 1] = bases[i] + srcs[i].shape[0]
    cur = np.empty(bases[n_inputs], np.int64)
    covered = np.zeros(n_in, np.bool_)
    for i in range(n_inputs):
        for j in range(srcs[i].shape[0]):
            cur[bases[i] + j] = starts[i][0, srcs[i][j]]
            covered[tiles[i][j]] = True
    bare = np.flatnonzero(~covered)  # inputs no source provides: zero in every chunk
    rcur = np.zeros(n_inputs, np.int64)
    cblk = np.zeros(n_inputs, np.int64)
    n_chunks = (n_rows + chunk_rows - 1) // chunk_rows
    out_starts = np.zeros((n_chunks, n_out + 1), np.int64)
    out_bounds = np.zeros(n_chunks + 1, np.int64)
    n_blocks = 0
    rank = np.empty(chunk_rows, np.int32)
    keep = np.empty(chunk_rows, np.int64)
    alive = np.zeros(n_rows, np.bool_)
    decided = False
    as_tile = False
    out = np.empty((0, 0), np.float32)
    w = 0
    n_alive = 0
    total = 0
    for c in range(n_chunks):
        c0 = c * chunk_rows
        m = min(n_rows, c0 + chunk_rows) - c0
        width = padded(m)  # zero rows up to a 64-byte multiple: every tile row aligned
        yt = y_buf[: n_in * width].reshape((n_in, width))
        for t in bare:
            yt[t, :] = 0.0
        _fill_tile(starts, bounds, idxs, vals, poss, same, dense, srcs, tiles, cur,
                   bases[:n_inputs], rcur, cblk, c0, m, yt)
        zt = z_buf[: n_out * width].reshape((n_out, width))
        chunk_alive, nnz = dense_step_sized(yt, wtp, wti, wtx, bias, ymax, zt, row_tile,
                                            order, ones, copy_of)
        total += nnz
        k = 0
        for r in range(m):
            rank[r] = n_alive + k
            if chunk_alive[r]:
                keep[k] = r
                k += 1
        if k == 0:
            continue
        if not decided:  # tile when it is the smaller form (4 bytes an entry, 8 a nonzero)
            decided = True
            as_tile = 2 * nnz >= n_out * k
            if as_tile:
                out = np.empty((n_out, n_rows - c0), np.float32)
        alive[c0 : c0 + m] = chunk_alive[:m]  # (the padding rows are zero: dead)
        if as_tile:
            for j in range(n_out):
                dst = out[j, n_alive : n_alive + k]
                src = zt[j]
                if k == m:
                    for r in range(m):
                        dst[r] = src[r]
                else:
                    for q in range(k):
                        dst[q] = src[keep[q]]
        else:
            if w + nnz + 1 > oi.shape[0]:  # grow, doubling, so appends stay amortised O(1)
                size = max(2 * oi.shape[0], w + nnz + 1)
                oi2 = np.empty(size, np.int32)
                ox2 = np.empty(size, np.float32)
                oi2[:w] = oi[:w]
                ox2[:w] = ox[:w]
                oi = oi2
                ox = ox2
            flat = zt.reshape(-1)
            for j in range(n_out):
                out_starts[n_blocks, j] = w
                w = _append_nonzeros(flat, j * width, m, rank, 0, oi, ox, w)
            out_starts[n_blocks, n_out] = w
            out_bounds[n_blocks + 1] = n_alive + k
            n_blocks += 1
        n_alive += k
    if as_tile:
        if n_alive < out.shape[1]:
            out = np.ascontiguousarray(out[:, :n_alive])
        return (True, out, out_starts[:1], oi[:0], ox[:0], out_bounds[:2], alive, total,
                oi, ox)
    n_blocks = max(n_blocks, 1)  # none survived: one empty block
    return (False, out, out_starts[:n_blocks].copy(), oi[:w].copy(), ox[:w].copy(),
            out_bounds[: n_blocks + 1].copy(), alive, total, oi, ox)
