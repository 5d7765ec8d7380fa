"""Column slabs and the per-part layer step of model parallelism. Knows nothing of Dask.

In model parallelism each part owns some neurons of every level. Its activations for a
level are a :class:`Slab`: the rows (global ids) that have a nonzero in the part's columns,
and those rows' values for its columns. One layer on part ``p`` is::

    Y_l[:, own_p] = Y_{l-1}[:, needed_p] @ W_l[needed_p, own_p]   (+ bias, clamp)

where ``needed_p`` are the level ``l-1`` neurons feeding the columns ``p`` owns. The other
parts send ``p`` only the columns of ``needed_p`` they own (:func:`take_columns`), and
:func:`part_layer_step` joins those pieces and runs the same compiled step as the serial
kernel (:func:`~sdnn_dask.core.kernels.sparse_step` or :func:`~sdnn_dask.core.kernels.dense_step`)
on the part's slice of the weights. :func:`make_part_plans` precomputes every part's
slices and index maps once per (network, partition).

Values are stored column-major, because the dense step reads and writes transposed
(``neurons x rows``) tiles, a few hundred rows at a time: a :class:`BlockCSC` (row blocks
of about a tile's width, each column by column) or, once at least half the entries are
nonzero and it is the smaller form, a dense ``columns x rows`` tile. Filling an input tile
from either, and either from an output tile, is then a sequential read and a contiguous
write per tile row, never a strided write per entry.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import llvmlite.binding
import numba
import numpy as np
import scipy.sparse as sp
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import config
from ..core.kernels import ROW_TILE, SETUP_ROWS, dense_step, sparse_step
from ..core.network import Network, as_csr32
from ..partition.neurons import NeuronPartition

#: Per-layer trace of one part: what each tuple of :attr:`Slab.trace` holds.
PART_TRACE_COLUMNS = [
    "layer", "mode", "rows_in", "rows_out", "nnz_out", "seconds",
    "columns_in", "pieces_in", "nnz_in", "rows_received",
]

#: Rows per block of a :class:`BlockCSC` made from row-major input or cut from a tile:
#: the dense step's tiles of N = 1024 are 256 rows wide (``sdnn.kernel.chunk-bytes``).
BLOCK_ROWS = 256


@dataclass
class BlockCSC:
    """A sparse ``rows x columns`` float32 matrix as consecutive blocks of rows, each
    stored column by column (CSC).

    Filling a dense tile of a few hundred rows then reads each column's run of the block
    the tile covers, and the runs of one block lie one after the other: a plain CSC would
    have the tile read a short run from every column's far-apart list instead, waiting on
    memory for each.

    Attributes
    ----------
    indices
        int32 row (from 0, over all blocks) of every entry; increasing within each run.
    data
        float32 value of every entry (no zeros).
    starts
        int64 ``n_blocks x (columns + 1)``: block ``b``'s entries of column ``j`` are
        ``starts[b, j]:starts[b, j + 1]``; ``starts[b, columns]`` is where block ``b``
        ends and block ``b + 1`` starts.
    block_rows
        int64, ``n_blocks + 1`` increasing bounds: block ``b`` holds rows
        ``block_rows[b]:block_rows[b + 1]``.
    """

    indices: np.ndarray
    data: np.ndarray
    starts: np.ndarray
    block_rows: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)``."""
        return int(self.block_rows[-1]), int(self.starts.shape[1] - 1)

    @property
    def nnz(self) -> int:
        """Stored entries."""
        return int(self.data.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays."""
        return int(self.indices.nbytes + self.data.nbytes + self.starts.nbytes
                   + self.block_rows.nbytes)

    def tocoo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(row, column, value)`` of every entry."""
        runs = np.diff(self.starts, axis=1).ravel()
        columns = np.tile(np.arange(self.shape[1]), self.starts.shape[0])
        return self.indices, np.repeat(columns, runs), self.data

    @classmethod
    def empty(cls, columns: int) -> BlockCSC:
        """No rows."""
        return cls(np.empty(0, np.int32), np.empty(0, np.float32),
                   np.zeros((1, columns + 1), np.int64), np.zeros(2, np.int64))

    @classmethod
    def from_csr(cls, matrix: sp.spmatrix | sp.sparray, block: int = BLOCK_ROWS) -> BlockCSC:
        """``matrix`` (converted to canonical float32 CSR) in blocks of ``block`` rows."""
        csr = as_csr32(matrix)
        starts, indices, data, bounds = _csr_to_blocks(csr.indptr, csr.indices, csr.data,
                                                       csr.shape[1], block)
        return cls(indices, data, starts, bounds)


@dataclass
class Slab:
    """One part's activations for some columns of one level.

    The values are held in exactly one of two column-major forms: ``blocks``, or
    ``tile`` when at least half the entries are nonzero (4 bytes an entry against 8 a
    nonzero: then the tile is the smaller).

    Attributes
    ----------
    rows
        Sorted global ids (int64) of the rows that have a nonzero in these columns.
    blocks
        ``len(rows) x columns`` :class:`BlockCSC` (its rows are positions in ``rows``),
        or ``None``.
    tile
        ``columns x len(rows)`` float32 C-contiguous array (the values transposed, as the
        dense step's tiles are), or ``None``.
    trace
        Per-layer tuples (:data:`PART_TRACE_COLUMNS`) of the part that made it, carried
        from layer to layer so the last slab holds the part's whole history.
    columns
        For a piece cut for several parts at once (:func:`take_columns` with
        ``label=True``): the positions, in the source slab, of its columns. ``None`` for
        a part's own slab and for a piece cut for one part (its columns are then exactly
        the ones that part reads).
    tile_nnz
        Nonzeros of ``tile`` (counted when not given).
    """

    rows: np.ndarray
    blocks: BlockCSC | None = None
    tile: np.ndarray | None = None
    trace: list[tuple] = field(default_factory=list, repr=False)
    columns: np.ndarray | None = None
    tile_nnz: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.blocks is None) == (self.tile is None):
            raise ValueError("a Slab holds its values as exactly one of blocks or tile")
        if self.tile is not None and self.tile_nnz is None:
            self.tile_nnz = int(np.count_nonzero(self.tile))

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays it holds (what a transfer carries, before framing)."""
        total = self.rows.nbytes + (0 if self.columns is None else self.columns.nbytes)
        values = self.tile.nbytes if self.tile is not None else self.blocks.nbytes
        return int(total + values)

    @property
    def n_columns(self) -> int:
        """Columns it holds."""
        return int(self.tile.shape[0] if self.tile is not None else self.blocks.shape[1])

    @property
    def nnz(self) -> int:
        """Nonzero values it holds."""
        return int(self.tile_nnz if self.tile is not None else self.blocks.nnz)

    def coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(row position, column, value)`` of every nonzero."""
        if self.tile is not None:
            column, row = np.nonzero(self.tile)
            return row, column, self.tile[column, row]
        return self.blocks.tocoo()

    def to_csr(self) -> sp.csr_matrix:
        """The values as a ``len(rows) x columns`` float32 CSR."""
        row, column, value = self.coo()
        return as_csr32(sp.csr_matrix((value, (row, column)),
                                      shape=(len(self.rows), self.n_columns)))

    @classmethod
    def empty(cls, columns: int, trace: list[tuple] | None = None) -> Slab:
        """A slab with no rows."""
        return cls(np.empty(0, np.int64), blocks=BlockCSC.empty(columns),
                   trace=list(trace or []))

    @classmethod
    def from_rows(cls, matrix: sp.spmatrix | sp.sparray, columns: np.ndarray) -> Slab:
        """The slab of ``matrix[:, columns]`` (rows numbered from 0), empty rows dropped."""
        csr = as_csr32(matrix)
        colmap = np.full(csr.shape[1], -1, np.int64)
        colmap[columns] = np.arange(len(columns))
        op, oi, ox, kept = _select_columns(csr.indptr, csr.indices, csr.data, colmap)
        starts, indices, data, bounds = _csr_to_blocks(op, oi, ox, len(columns), BLOCK_ROWS)
        return cls(kept, blocks=BlockCSC(indices, data, starts, bounds))


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
def _select_columns(indptr, indices, data, colmap):  # pragma: no cover
    """Keep the entries whose column maps to ``>= 0`` (renumbered), and the rows left
    nonempty. ``colmap`` must be increasing where it is not -1, so indices stay sorted."""
    nrows = indptr.shape[0] - 1
    op = np.zeros(nrows + 1, np.int64)
    oi = np.empty(indices.shape[0], np.int32)
    ox = np.empty(indices.shape[0], np.float32)
    kept = np.empty(nrows, np.int64)
    nkept = 0
    nnz = 0
    for r in range(nrows):
        start = nnz
        for p in range(indptr[r], indptr[r + 1]):
            c = colmap[indices[p]]
            if c >= 0:
                oi[nnz] = c
                ox[nnz] = data[p]
                nnz += 1
        if nnz > start:
            kept[nkept] = r
            nkept += 1
            op[nkept] = nnz
    return op[: nkept + 1], oi[:nnz], ox[:nnz], kept[:nkept]


@numba.njit(nogil=True, cache=True)
def _csr_to_blocks(indptr, indices, data, n_columns, block):  # pragma: no cover
    """A CSR with ``n_columns`` columns as :class:`BlockCSC` arrays ``(starts, indices,
    data, block_rows)``, ``block`` rows a block; rows come out increasing in every run
    (they are visited in order)."""
    n_rows = indptr.shape[0] - 1
    n_blocks = max(1, (n_rows + block - 1) // block)
    nnz = indptr[n_rows]
    starts = np.zeros((n_blocks, n_columns + 1), np.int64)
    bounds = np.zeros(n_blocks + 1, np.int64)
    bi = np.empty(nnz, np.int32)
    bx = np.empty(nnz, np.float32)
    count = np.zeros(n_columns + 1, np.int64)
    cur = np.empty(n_columns, np.int64)
    w = 0
    for b in range(n_blocks):
        r0, r1 = min(n_rows, b * block), min(n_rows, (b + 1) * block)
        bounds[b + 1] = r1
        count[:] = 0
        for p in range(indptr[r0], indptr[r1]):
            count[indices[p] + 1] += 1
        starts[b, 0] = w
        for j in range(n_columns):
            starts[b, j + 1] = starts[b, j] + count[j + 1]
            cur[j] = starts[b, j]
        for r in range(r0, r1):
            for p in range(indptr[r], indptr[r + 1]):
                c = indices[p]
                q = cur[c]
                bi[q] = r
                bx[q] = data[p]
                cur[c] = q + 1
        w = starts[b, n_columns]
    return starts, bi, bx, bounds


@numba.njit(nogil=True, cache=True)
def _blocks_rows_used(starts, indices, columns, n_rows):  # pragma: no cover
    """Which of a :class:`BlockCSC`'s ``n_rows`` rows have a nonzero in ``columns``, how
    many, and how many nonzeros those columns hold."""
    used = np.zeros(n_rows, np.bool_)
    nnz = 0
    for b in range(starts.shape[0]):
        for c in columns:
            nnz += starts[b, c + 1] - starts[b, c]
            for p in range(starts[b, c], starts[b, c + 1]):
                used[indices[p]] = True
    return used, int(used.sum()), nnz


@numba.njit(nogil=True, cache=True)
def _take_block_columns(starts, indices, data, bounds, columns, n_rows):  # pragma: no cover
    """The :class:`BlockCSC` arrays of ``columns`` (increasing) of one with ``n_rows``
    rows, the rows left empty dropped (renumbered), and the positions of the rows kept."""
    used, n_used, nnz = _blocks_rows_used(starts, indices, columns, n_rows)
    below = np.zeros(n_rows + 1, np.int64)  # rows kept before each row: its new number
    for r in range(n_rows):
        below[r + 1] = below[r] + used[r]
    every_row = n_used == n_rows
    n_blocks, n = starts.shape[0], columns.shape[0]
    ns = np.empty((n_blocks, n + 1), np.int64)
    ni = np.empty(nnz, np.int32)
    nx = np.empty(nnz, np.float32)
    w = 0
    for b in range(n_blocks):
        for j in range(n):
            ns[b, j] = w
            for p in range(starts[b, columns[j]], starts[b, columns[j] + 1]):
                ni[w] = indices[p] if every_row else below[indices[p]]
                nx[w] = data[p]
                w += 1
        ns[b, n] = w
    nb = np.empty(n_blocks + 1, np.int64)
    for b in range(n_blocks + 1):
        nb[b] = below[bounds[b]]
    return ns, ni, nx, nb, np.flatnonzero(used)


@numba.njit(nogil=True, cache=True)
def _tile_rows_used(tile, columns):  # pragma: no cover
    """Which rows (tile columns) have a nonzero in the tile rows ``columns``, how many,
    and how many nonzeros those tile rows hold."""
    n_rows = tile.shape[1]
    used = np.zeros(n_rows, np.bool_)
    nnz = 0
    for j in range(columns.shape[0]):
        row = tile[columns[j]]
        for r in range(n_rows):
            nonzero = row[r] != 0.0
            used[r] |= nonzero
            nnz += nonzero
    return used, int(used.sum()), nnz


@numba.njit(nogil=True, cache=True)
def _tile_to_blocks(tile, columns, used, nnz, block):  # pragma: no cover
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


def take_columns(slab: Slab, positions: np.ndarray, *, label: bool = False) -> Slab:
    """The piece of ``slab`` with the columns at ``positions`` (increasing), empty rows
    dropped; carries no trace. ``label`` records ``positions`` in the piece
    (:attr:`Slab.columns`), for pieces that serve several parts.

    A piece cut from a tile is a tile if at least half its entries are nonzero (then it
    is the smaller form), else a :class:`BlockCSC`.
    """
    if len(positions) == slab.n_columns and not label:  # every column: nothing to cut
        return Slab(slab.rows, blocks=slab.blocks, tile=slab.tile, tile_nnz=slab.tile_nnz)
    positions = np.ascontiguousarray(positions, dtype=np.int64)
    if slab.tile is not None:
        piece = _tile_piece(slab.rows, slab.tile, positions)
    else:
        v = slab.blocks
        starts, indices, data, bounds, kept = _take_block_columns(
            v.starts, v.indices, v.data, v.block_rows, positions, len(slab.rows))
        rows = slab.rows if len(kept) == len(slab.rows) else slab.rows[kept]
        piece = Slab(rows, blocks=BlockCSC(indices, data, starts, bounds))
    if label:
        piece.columns = positions.astype(np.int32)
    return piece


def _tile_piece(rows: np.ndarray, tile: np.ndarray, positions: np.ndarray) -> Slab:
    """The rows ``positions`` of ``tile`` (columns of the slab), in the smaller form."""
    used, n_used, nnz = _tile_rows_used(tile, positions)
    every_row = n_used == len(rows)
    kept = rows if every_row else rows[used]
    if 2 * nnz >= len(positions) * n_used:
        sub = tile[positions] if every_row else tile[np.ix_(positions, np.flatnonzero(used))]
        return Slab(kept, tile=np.ascontiguousarray(sub), tile_nnz=int(nnz))
    starts, indices, data, bounds = _tile_to_blocks(tile, positions, used, nnz, BLOCK_ROWS)
    return Slab(kept, blocks=BlockCSC(indices, data, starts, bounds))


def piece_for(plan_layer: LayerPlan, destinations: list[int], slab: Slab) -> Slab:
    """What a part sends to the parts ``destinations`` (all on one worker) in one layer:
    the union of the columns they read from it, sent once."""
    if len(destinations) == 1:
        return take_columns(slab, plan_layer.take[destinations[0]])
    positions = np.unique(np.concatenate([plan_layer.take[p] for p in destinations]))
    return take_columns(slab, positions, label=True)


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
def _padded(rows):  # pragma: no cover
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
def _dense_layer(starts, bounds, idxs, vals, poss, same, dense, srcs, tiles, n_in, n_rows,
                 chunk_rows, wtp, wti, wtx, bias, ymax, order, row_tile, y_buf, z_buf, oi,
                 ox):  # pragma: no cover
    """The dense step over the ``n_rows`` union rows of the inputs, ``chunk_rows`` at a
    time: each chunk's input and output tiles live in the cache-sized buffers ``y_buf``
    and ``z_buf``, as in the serial kernel.

    The output is a tile if the first chunk with survivors is at least half nonzero, else
    a :class:`BlockCSC` with a block per chunk, its runs appended to the scratch buffers
    ``oi``/``ox`` (grown when short) and copied out at the end. Returns ``(as_tile, tile,
    starts, indices, data, block_rows, alive, nnz, oi, ox)``: the unused form is empty;
    ``alive`` marks the union rows kept.
    """
    n_out = wtp.shape[0] - 1
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
        width = _padded(m)  # zero rows up to a 64-byte multiple: every tile row aligned
        yt = y_buf[: n_in * width].reshape((n_in, width))
        for t in bare:
            yt[t, :] = 0.0
        _fill_tile(starts, bounds, idxs, vals, poss, same, dense, srcs, tiles, cur,
                   bases[:n_inputs], rcur, cblk, c0, m, yt)
        zt = z_buf[: n_out * width].reshape((n_out, width))
        chunk_alive, nnz = dense_step(yt, wtp, wti, wtx, bias, ymax, zt, row_tile, order)
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


@numba.njit(nogil=True, cache=True)
def _gather_csr(starts, bounds, idxs, vals, poss, same, dense, srcs, tiles, n_in,
                n_rows):  # pragma: no cover
    """The inputs as one row-major ``n_rows x n_in`` CSR, column indices increasing in
    every row, for the sparse step."""
    n_inputs = len(vals)
    owner = np.full(n_in, -1, np.int64)
    which = np.empty(n_in, np.int64)
    xp = np.zeros(n_rows + 1, np.int64)
    for i in range(n_inputs):
        st, idx, val, pos, src = starts[i], idxs[i], vals[i], poss[i], srcs[i]
        for j in range(src.shape[0]):
            owner[tiles[i][j]] = i
            which[tiles[i][j]] = j
            c = src[j]
            for blk in range(st.shape[0]):
                for p in range(st[blk, c], st[blk, c + 1]):
                    if dense[i]:
                        if val[p] == 0.0:
                            continue
                        r = p - st[0, c]
                    else:
                        r = idx[p]
                    xp[(r if same[i] else pos[r]) + 1] += 1
    for r in range(n_rows):
        xp[r + 1] += xp[r]
    cur = xp[:n_rows].copy()
    xi = np.empty(xp[n_rows], np.int32)
    xx = np.empty(xp[n_rows], np.float32)
    for t in range(n_in):  # inputs in order: every row's columns come out sorted
        i = owner[t]
        if i < 0:
            continue
        st, idx, val, pos = starts[i], idxs[i], vals[i], poss[i]
        c = srcs[i][which[t]]
        for blk in range(st.shape[0]):
            for p in range(st[blk, c], st[blk, c + 1]):
                if dense[i]:
                    if val[p] == 0.0:
                        continue
                    r = p - st[0, c]
                else:
                    r = idx[p]
                if not same[i]:
                    r = pos[r]
                q = cur[r]
                xi[q] = t
                xx[q] = val[p]
                cur[r] = q + 1
    return xp, xi, xx


class _Scratch(threading.local):
    """Per-thread buffers reused by every step the thread runs: Dask workers page-fault
    on fresh large allocations (see :mod:`sdnn_dask.parallel.allocator`), and a step's temporaries
    would be fresh every layer. Each is as large as the largest step has needed."""

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype: type) -> np.ndarray:
        """A buffer of at least ``size`` items starting on a 64-byte boundary (numpy
        gives 16: a tile row would then straddle cache lines in every vector load)."""
        buf = self.buffers.get(name)
        if buf is None or buf.shape[0] < size:
            size = max(size, 0 if buf is None else buf.shape[0] * 5 // 4)
            raw = np.empty(size + 64, dtype)
            skip = (-raw.ctypes.data % 64) // raw.itemsize
            buf = raw[skip : skip + size]
            self.buffers[name] = buf
        return buf

    def keep(self, name: str, buf: np.ndarray) -> None:
        self.buffers[name] = buf


_scratch = _Scratch()


@dataclass
class _Input:
    """What one source provides a layer: some columns of a slab, and where they go.

    ``columns`` are positions in ``slab`` (``None``: all of them), ``put`` their positions
    among the layer's inputs; ``used`` marks the slab rows with a nonzero there (``None``:
    every row), ``nnz`` counts the nonzeros and ``n_rows`` the rows used.
    """

    slab: Slab
    columns: np.ndarray | None
    put: np.ndarray
    used: np.ndarray | None = None
    nnz: int = 0
    n_rows: int = 0

    def __post_init__(self) -> None:
        slab = self.slab
        if self.columns is None or len(self.columns) == slab.n_columns:
            self.columns = None
            self.nnz, self.n_rows = slab.nnz, len(slab.rows)
            return
        self.columns = np.ascontiguousarray(self.columns, dtype=np.int64)
        if slab.tile is not None:
            self.used, self.n_rows, nnz = _tile_rows_used(slab.tile, self.columns)
        else:
            v = slab.blocks
            self.used, self.n_rows, nnz = _blocks_rows_used(v.starts, v.indices,
                                                            self.columns, len(slab.rows))
        self.nnz = int(nnz)
        if self.n_rows == len(slab.rows):
            self.used = None

    @property
    def rows(self) -> np.ndarray:
        """Global ids of the rows used."""
        return self.slab.rows if self.used is None else self.slab.rows[self.used]


def _provided(given: Slab, wanted: np.ndarray, put: np.ndarray) -> _Input:
    """The columns at source positions ``wanted`` out of what a source part provided: its
    whole slab, a piece cut for this part alone, or a labelled piece for several parts."""
    if given.n_columns == len(wanted):  # exactly the columns wanted (a superset of equal
        return _Input(given, None, put)  # size is equal)
    if given.columns is None:  # the source's whole slab (same worker)
        return _Input(given, wanted, put)
    return _Input(given, np.searchsorted(given.columns, wanted), put)


def _union_rows(inputs: list[_Input]) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """The sorted union of the rows the inputs use, and each input's slab row positions
    in it (``None`` where its rows are the union itself). A slab row the union lacks
    (zero in the columns read) gets the position of the next union row."""
    first = inputs[0].slab.rows
    if all(s.used is None and (s.slab.rows is first or np.array_equal(s.slab.rows, first))
           for s in inputs):
        return first, [None] * len(inputs)
    top = max(int(s.slab.rows[-1]) for s in inputs) + 1
    mask = np.zeros(top, np.bool_)
    for s in inputs:
        mask[s.rows] = True
    rows = np.flatnonzero(mask)
    below = np.cumsum(mask)  # union rows at or before each id
    positions: list[np.ndarray | None] = []
    for s in inputs:
        if s.used is None and len(s.slab.rows) == len(rows):
            positions.append(None)  # all its rows, as many as the union: the union
        else:
            r = s.slab.rows
            positions.append(below[r] - mask[r])
    return rows, positions


def _kernel_args(inputs: list[_Input], positions: list[np.ndarray | None]) -> tuple:
    """The inputs as the tuples the compiled helpers take (see :func:`_fill_tile`)."""
    no_indices, no_positions = np.empty(0, np.int32), np.empty(0, np.int64)
    starts, bounds, idxs, vals, poss, srcs, tiles = [], [], [], [], [], [], []
    for s, pos in zip(inputs, positions, strict=True):
        slab = s.slab
        n, rows = slab.n_columns, len(slab.rows)
        if slab.tile is not None:
            starts.append((np.arange(n + 1, dtype=np.int64) * rows).reshape(1, n + 1))
            bounds.append(np.array([0, rows], np.int64))
            idxs.append(no_indices)
            vals.append(slab.tile.reshape(-1))
        else:
            v = slab.blocks
            starts.append(np.ascontiguousarray(v.starts, dtype=np.int64))
            bounds.append(np.ascontiguousarray(v.block_rows, dtype=np.int64))
            idxs.append(np.ascontiguousarray(v.indices, dtype=np.int32))
            vals.append(np.ascontiguousarray(v.data, dtype=np.float32))
        poss.append(no_positions if pos is None else pos)
        srcs.append(np.arange(n, dtype=np.int64) if s.columns is None else s.columns)
        tiles.append(np.ascontiguousarray(s.put, dtype=np.int64))
    same = np.array([pos is None for pos in positions])
    dense = np.array([s.slab.tile is not None for s in inputs])
    return (tuple(starts), tuple(bounds), tuple(idxs), tuple(vals), tuple(poss), same, dense,
            tuple(srcs), tuple(tiles))


@dataclass
class LayerPlan:
    """What one part needs to run one layer, and to serve the next parts.

    Attributes
    ----------
    own
        Global ids of the level ``l`` neurons the part computes (sorted).
    needed
        Global ids of the level ``l-1`` neurons it reads (sorted).
    w, wt
        ``W_l[needed, own]`` and its transpose, float32 CSR.
    order
        Visiting order of the output neurons for the dense step.
    bias
        Bias of the owned neurons.
    put
        Source part -> positions in ``needed`` of the columns that part provides (the
        part's own entry included).
    take
        Destination part -> positions in the part's own level ``l-1`` slab of the
        columns that destination needs in layer ``l`` (the part itself included).
    fetch
        Source part -> positions in that part's level ``l-1`` slab of the columns this
        part reads from it (``fetch[q]`` here is ``take[p]`` in part ``q``'s plan).
    """

    own: np.ndarray
    needed: np.ndarray
    w: sp.csr_matrix = field(repr=False)
    wt: sp.csr_matrix = field(repr=False)
    order: np.ndarray = field(repr=False)
    bias: np.ndarray = field(repr=False)
    put: dict[int, np.ndarray] = field(repr=False)
    take: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    fetch: dict[int, np.ndarray] = field(default_factory=dict, repr=False)


@dataclass
class PartPlan:
    """Everything part ``part`` of a neuron partition holds: one :class:`LayerPlan` per
    layer, the clamp, and the level-0 columns it owns."""

    part: int
    k: int
    inputs: np.ndarray
    layers: list[LayerPlan] = field(repr=False)
    ymax: float
    dense_threshold: float
    chunk_bytes: int = 1 << 20

    @property
    def nbytes(self) -> int:
        """Bytes of its weight slices and index maps."""
        total = 0
        for lp in self.layers:
            for m in (lp.w, lp.wt):
                total += m.data.nbytes + m.indices.nbytes + m.indptr.nbytes
            total += lp.own.nbytes + lp.needed.nbytes + lp.order.nbytes + lp.bias.nbytes
            total += sum(a.nbytes for a in lp.put.values())
            total += sum(a.nbytes for a in lp.take.values())
            total += sum(a.nbytes for a in lp.fetch.values())
        return total

    def sources(self, layer: int) -> list[int]:
        """Parts (other than this one) that send columns to this part in ``layer``."""
        return [q for q in self.layers[layer - 1].put if q != self.part]

    def destinations(self, layer: int) -> list[int]:
        """Parts (other than this one) this part sends columns to in ``layer``."""
        return [p for p in self.layers[layer - 1].take if p != self.part]


def make_part_plans(network: Network, partition: NeuronPartition, *,
                    dense_threshold: float | None = None,
                    chunk_bytes: int | None = None) -> list[PartPlan]:
    """Slice the network's weights and index maps for every part of ``partition``.

    ``dense_threshold`` and ``chunk_bytes`` default to ``sdnn.kernel.*``, as in
    :func:`~sdnn_dask.core.kernels.forward_block`.
    """
    if dense_threshold is None:
        dense_threshold = config.get("kernel.dense-threshold")
    if chunk_bytes is None:
        chunk_bytes = config.get("kernel.chunk-bytes")
    partition._check_network(network)
    k = partition.k
    parts = partition.parts
    owned = [[np.flatnonzero(parts[level] == p) for p in range(k)]
             for level in range(partition.n_levels)]
    # position of every neuron of a level within its owner's slab
    position = np.empty(parts.shape, np.int64)
    for level, parts_owned in enumerate(owned):
        for ids in parts_owned:
            position[level, ids] = np.arange(len(ids))
    plans = [PartPlan(p, k, owned[0][p], [], float(network.ymax), float(dense_threshold),
                      int(chunk_bytes)) for p in range(k)]
    for layer, wt in enumerate(network.transposed, start=1):
        prev_owner = parts[layer - 1]
        prev_pos = position[layer - 1]
        order = network.output_order[layer - 1]
        layer_plans = []
        for p in range(k):
            own = owned[layer][p]
            wt_own = wt[own]
            needed = np.unique(wt_own.indices).astype(np.int64)
            wt_sub = as_csr32(wt_own[:, needed])
            w_sub = as_csr32(wt_sub.T)
            source = prev_owner[needed]
            put = {int(q): np.flatnonzero(source == q) for q in np.unique(source)}
            # the network's dense-step order restricted to the owned neurons, renumbered
            # (local input ids follow global ones, so the grouping it makes still holds)
            in_order = order[parts[layer][order] == p]
            layer_plans.append(LayerPlan(
                own=own, needed=needed, w=w_sub, wt=wt_sub, order=position[layer][in_order],
                bias=np.ascontiguousarray(network.bias[own]), put=put))
        for p, lp in enumerate(layer_plans):
            for q, positions in lp.put.items():
                # the columns q sends p, as positions in q's own slab (increasing, since
                # needed is sorted and positions within an owner follow global order)
                layer_plans[q].take[p] = prev_pos[lp.needed[positions]]
                lp.fetch[q] = layer_plans[q].take[p]
        for p in range(k):
            plans[p].layers.append(layer_plans[p])
    return plans


def part_layer_step(plan: PartPlan, layer: int, own_prev: Slab,
                    received: dict[int, Slab]) -> Slab:
    """Run ``layer`` (1-based) on one part.

    Parameters
    ----------
    plan
        The part's plan.
    layer
        Layer number, 1-based.
    own_prev
        The part's own level ``layer - 1`` slab (all the columns it owns).
    received
        Source part -> what it provided: its whole level ``layer - 1`` slab (a part on the
        same worker), the piece it cut for this part, or a labelled piece it cut for
        several parts on this worker (:func:`piece_for`).

    Returns
    -------
    Slab
        The part's level ``layer`` slab, its trace extended by this layer: a tile when
        the dense step's output is at least half nonzero, else a :class:`BlockCSC`.
    """
    start = time.perf_counter()
    lp = plan.layers[layer - 1]
    # the columns read, straight out of what was given: nothing is cut or copied here
    inputs: list[_Input] = []
    if plan.part in lp.put:
        inputs.append(_Input(own_prev, lp.take[plan.part], lp.put[plan.part]))
    for q, given in received.items():
        if q not in lp.fetch:
            raise ValueError(f"layer {layer}: part {plan.part} reads nothing from part {q}")
        n_given = given.n_columns
        if n_given < len(lp.fetch[q]) or (given.columns is not None
                                          and len(given.columns) != n_given):
            raise ValueError(f"layer {layer}: part {q} provided {n_given} columns to part "
                             f"{plan.part}, which reads {len(lp.fetch[q])} of them")
        inputs.append(_provided(given, lp.fetch[q], lp.put[q]))
    n_in, n_out = len(lp.needed), len(lp.own)
    foreign = inputs[len(inputs) - len(received):]
    # columns_in, pieces_in, nnz_in, rows_received: what came from other parts
    stats = (n_in - len(lp.put.get(plan.part, ())), len(foreign),
             sum(s.nnz for s in foreign), sum(s.n_rows for s in foreign))
    live = [s for s in inputs if s.nnz]
    if not live or n_out == 0:
        trace = [*own_prev.trace, (layer, "none", 0, 0, 0, time.perf_counter() - start,
                                   *stats)]
        return Slab.empty(n_out, trace)
    rows, positions = _union_rows(live)
    n_rows = len(rows)
    nnz_in = sum(s.nnz for s in live)
    args = _kernel_args(live, positions)
    ymax = np.float32(plan.ymax)
    dense = nnz_in >= plan.dense_threshold * (1.0 + SETUP_ROWS / n_rows) * n_in * n_rows
    if dense:
        chunk_rows = max(1, plan.chunk_bytes // (4 * max(n_in, n_out)))
        if chunk_rows >= ROW_TILE:  # whole row tiles of the dense step (496-row chunks
            chunk_rows -= chunk_rows % ROW_TILE  # made hypergraph parts 10% slower)
        rows_t = _padded(min(chunk_rows, n_rows))
        out_hint = nnz_in * n_out // n_in + n_out * rows_t + 1
        as_tile, tile, starts, indices, data, bounds, alive, nnz, oi, ox = _dense_layer(
            *args, n_in, n_rows, chunk_rows, lp.wt.indptr, lp.wt.indices, lp.wt.data,
            lp.bias, ymax, lp.order, ROW_TILE, _scratch.get("y", n_in * rows_t, np.float32),
            _scratch.get("z", n_out * rows_t, np.float32),
            _scratch.get("oi", out_hint, np.int32), _scratch.get("ox", out_hint, np.float32))
        _scratch.keep("oi", oi)
        _scratch.keep("ox", ox)
        out_rows = rows[alive]
        if as_tile:
            out = Slab(out_rows, tile=tile, tile_nnz=int(nnz))
        else:
            out = Slab(out_rows, blocks=BlockCSC(indices, data, starts, bounds))
        mode = "dense"
    else:
        xp, xi, xx = _gather_csr(*args, n_in, n_rows)
        if xp[-1] < np.iinfo(np.int32).max:  # the serial kernel's index type
            xp = xp.astype(np.int32)
        op, oi, ox, kept = sparse_step(xp, xi, xx, lp.w.indptr, lp.w.indices, lp.w.data,
                                       lp.bias, ymax, n_out, True)
        starts, indices, data, bounds = _csr_to_blocks(op, oi, ox, n_out, BLOCK_ROWS)
        out = Slab(rows[kept], blocks=BlockCSC(indices, data, starts, bounds))
        mode = "sparse"
    out.trace = [*own_prev.trace, (layer, mode, n_rows, len(out.rows), out.nnz,
                                   time.perf_counter() - start, *stats)]
    return out


def forward_parts(network: Network, partition: NeuronPartition,
                  inputs: sp.spmatrix | sp.sparray, *, dense_threshold: float | None = None,
                  chunk_bytes: int | None = None) -> tuple[sp.csr_matrix, list[Slab]]:
    """Model parallelism in one process: every part, layer by layer, no Dask.

    The executor's reference for what each part computes; also handy for debugging a
    partition. Returns the ``rows x N`` output (original neuron order) and every part's
    last slab (with its trace).
    """
    y = as_csr32(inputs)
    if y.shape[1] != network.n_neurons:
        raise ValueError(f"inputs have {y.shape[1]} columns, the network has "
                         f"{network.n_neurons} neurons")
    plans = make_part_plans(network, partition, dense_threshold=dense_threshold,
                            chunk_bytes=chunk_bytes)
    slabs = [Slab.from_rows(y, plan.inputs) for plan in plans]
    for layer in range(1, network.n_layers + 1):
        slabs = [
            part_layer_step(plan, layer, slabs[p], {
                q: piece_for(plans[q].layers[layer - 1], [p], slabs[q])
                for q in plan.sources(layer)})
            for p, plan in enumerate(plans)
        ]
    return assemble(slabs, [plan.layers[-1].own for plan in plans], y.shape), slabs


def assemble(slabs: list[Slab], columns: list[np.ndarray], shape: tuple[int, int],
             row_ids: np.ndarray | None = None) -> sp.csr_matrix:
    """Join the parts' last slabs into one ``shape`` CSR in the original neuron order.

    ``columns[p]`` are the global ids of part ``p``'s columns; ``row_ids`` maps slab rows
    to output rows (identity when omitted).
    """
    r, c, v = [], [], []
    for slab, cols in zip(slabs, columns, strict=True):
        row, col, data = slab.coo()
        rows = slab.rows[row]
        r.append(rows if row_ids is None else row_ids[rows])
        c.append(cols[col])
        v.append(data)
    if not r:
        return sp.csr_matrix(shape, dtype=np.float32)
    return as_csr32(sp.csr_matrix((np.concatenate(v), (np.concatenate(r), np.concatenate(c))),
                                  shape=shape))


def warm_up_parts() -> str:
    """Compile (or load from numba's cache) the part step's helpers in this process, for
    one to four inputs a layer, dense and sparse, so no part step's time includes
    compilation. Executors run it on their workers beside
    :func:`~sdnn_dask.core.kernels.warm_up_kernels`."""
    from ..partition import make_neuron_partition

    n = 64
    rng = np.random.default_rng(0)
    layers = [sp.random(n, n, density=0.2, format="csr", dtype=np.float32, rng=rng)
              + sp.identity(n, format="csr", dtype=np.float32) for _ in range(3)]
    tiny = Network(layers, bias=-0.05, ymax=4.0, name="warm-up")
    x = sp.random(300, n, density=0.3, format="csr", dtype=np.float32, rng=rng)
    for k in range(1, 5):
        partition = make_neuron_partition(tiny, k, "block")
        for threshold in (0.0, 2.0):
            forward_parts(tiny, partition, x, dense_threshold=threshold)
    return "ok"
