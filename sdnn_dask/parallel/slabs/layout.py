"""The per-part data of model parallelism: a :class:`Slab` of rows and their values for
some columns, held column-major as a :class:`BlockCSC` or a dense tile, and the pieces cut
from it for other parts (:func:`take_columns`). Knows nothing of Dask.

In model parallelism each part owns some neurons of every level. Its activations for a
level are a :class:`Slab`: the rows (global ids) that have a nonzero in the part's columns,
and those rows' values for its columns. The other parts send a part only the columns it
reads from them (:func:`take_columns`).

Values are stored column-major, because the dense step reads and writes transposed
(``neurons x rows``) tiles, a few hundred rows at a time: a :class:`BlockCSC` (row blocks
of about a tile's width, each column by column) or, once at least half the entries are
nonzero and it is the smaller form, a dense ``columns x rows`` tile. Filling an input tile
from either, and either from an output tile, is then a sequential read and a contiguous
write per tile row, never a strided write per entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np
import scipy.sparse as sp

from ...core.network import as_csr32
from .tiles import tile_to_blocks

#: Per-layer trace of one part: what each tuple of :attr:`Slab.trace` holds.
PART_TRACE_COLUMNS = [
    "layer", "mode", "rows_in", "rows_out", "nnz_out", "seconds",
    "columns_in", "pieces_in", "nnz_in", "rows_received", "distinct_out",
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
        starts, indices, data, bounds = csr_to_blocks(csr.indptr, csr.indices, csr.data,
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

    def row_nnz(self) -> np.ndarray:
        """Nonzeros of each row."""
        if self.tile is not None:
            return np.count_nonzero(self.tile, axis=0)
        v = self.blocks
        return np.bincount(v.indices[v.data != 0], minlength=len(self.rows))

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
        starts, indices, data, bounds = csr_to_blocks(op, oi, ox, len(columns), BLOCK_ROWS)
        return cls(kept, blocks=BlockCSC(indices, data, starts, bounds))


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
def csr_to_blocks(indptr, indices, data, n_columns, block):  # pragma: no cover
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
def blocks_rows_used(starts, indices, columns, n_rows):  # pragma: no cover
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
    used, n_used, nnz = blocks_rows_used(starts, indices, columns, n_rows)
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
def tile_rows_used(tile, columns):  # pragma: no cover
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


def take_columns(slab: Slab, positions: np.ndarray, *, label: bool = False) -> Slab:
    """The piece of ``slab`` with the columns at ``positions`` (increasing), empty rows
    dropped; carries no trace. ``label`` records ``positions`` in the piece
    (:attr:`Slab.columns`), for pieces that serve several parts.

    A piece is a tile if at least half its entries are nonzero (then it is the smaller
    form: 4 bytes an entry against 8 a nonzero and 8 a column per block), else a
    :class:`BlockCSC`, whichever form the slab has: the one saturated row the deep layers
    carry once identical rows are merged moves as 4 bytes a column, not 16.
    """
    if len(positions) == slab.n_columns and not label:  # every column: nothing to cut
        if slab.tile is None and _dense_enough(slab.blocks, len(slab.rows)):
            return Slab(slab.rows, tile=_blocks_tile(slab.blocks, len(slab.rows)))
        return Slab(slab.rows, blocks=slab.blocks, tile=slab.tile, tile_nnz=slab.tile_nnz)
    positions = np.ascontiguousarray(positions, dtype=np.int64)
    if slab.tile is not None:
        piece = _tile_piece(slab.rows, slab.tile, positions)
    else:
        v = slab.blocks
        starts, indices, data, bounds, kept = _take_block_columns(
            v.starts, v.indices, v.data, v.block_rows, positions, len(slab.rows))
        rows = slab.rows if len(kept) == len(slab.rows) else slab.rows[kept]
        blocks = BlockCSC(indices, data, starts, bounds)
        piece = (Slab(rows, tile=_blocks_tile(blocks, len(rows)), tile_nnz=blocks.nnz)
                 if _dense_enough(blocks, len(rows)) else Slab(rows, blocks=blocks))
    if label:
        piece.columns = positions.astype(np.int32)
    return piece


def _dense_enough(blocks: BlockCSC, n_rows: int) -> bool:
    """Whether a tile of these values is no larger than the blocks (half full or more)."""
    return n_rows > 0 and 2 * blocks.nnz >= blocks.shape[1] * n_rows


def _blocks_tile(blocks: BlockCSC, n_rows: int) -> np.ndarray:
    """``blocks`` as a ``columns x n_rows`` float32 tile."""
    return _fill_from_blocks(blocks.starts, blocks.indices, blocks.data,
                             np.zeros((blocks.shape[1], n_rows), np.float32))


@numba.njit(nogil=True, cache=True)
def _fill_from_blocks(starts, indices, data, tile):  # pragma: no cover - compiled
    for b in range(starts.shape[0]):
        for j in range(starts.shape[1] - 1):
            for p in range(starts[b, j], starts[b, j + 1]):
                tile[j, indices[p]] = data[p]
    return tile


def _tile_piece(rows: np.ndarray, tile: np.ndarray, positions: np.ndarray) -> Slab:
    """The rows ``positions`` of ``tile`` (columns of the slab), in the smaller form."""
    used, n_used, nnz = tile_rows_used(tile, positions)
    every_row = n_used == len(rows)
    kept = rows if every_row else rows[used]
    if 2 * nnz >= len(positions) * n_used:
        sub = tile[positions] if every_row else tile[np.ix_(positions, np.flatnonzero(used))]
        return Slab(kept, tile=np.ascontiguousarray(sub), tile_nnz=int(nnz))
    starts, indices, data, bounds = tile_to_blocks(tile, positions, used, nnz, BLOCK_ROWS)
    return Slab(kept, blocks=BlockCSC(indices, data, starts, bounds))
