"""A chunk of a block's live rows: stepped one layer at a time, repacked as rows die.

A :class:`Chunk` holds some live rows of a block, sparse (CSR) or as a dense transposed
tile in two buffers of a :class:`BufferPool`; :meth:`Chunk.step` runs one layer with the
step its density calls for (:mod:`.steps`) and compacts the rows that die away, and
:meth:`Chunk.repack` puts the survivors of several chunks into full ones.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..csr import column_nnz, compact_columns, csr_to_dense_t, dense_t_to_csr, stack_rows
from .classes import ClassLayer, ClassSpace
from .steps import (
    ROW_TILE,
    SETUP_ROWS,
    StoredLayer,
    canonical,
    dense_step,
    dense_step_sized,
    dense_step_w,
    scatter_step,
    sparse_step,
    sparse_step_uniform,
)

_NO_COPIES = np.empty(0, np.int64)


class BufferPool:
    """Equal-size float32 buffers, reused within one :func:`forward_block` call.

    Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` on workers, which makes every large
    allocation an mmap with fresh page faults; allocating per layer or per repack cost
    workers ~30% against the same kernel in a plain process. The pool is dropped when the
    call returns, so nothing outlives it.
    """

    def __init__(self, size: int):
        self.size = size
        self._free: list[np.ndarray] = []

    def take(self) -> np.ndarray:
        return self._free.pop() if self._free else np.empty(self.size, np.float32)

    def give(self, *buffers: np.ndarray) -> None:
        self._free.extend(buffers)


class Chunk:
    """Live rows of part of a block: block-local ids and activations, sparse or dense.

    A dense chunk holds two pooled buffers of ``chunk_rows`` columns; each layer writes
    into the spare one and compacts back into the other, so no layer allocates.

    The activations' columns are neurons, or, with ``space`` set, the classes of the
    last layer's output neurons (:mod:`.classes`): one column a class, its value that of
    every neuron in it. :attr:`width` is the number of columns; :attr:`nnz` counts
    neurons either way.
    """

    def __init__(self, live: np.ndarray, csr: sp.csr_matrix | None = None,
                 space: ClassSpace | None = None):
        self.live = live
        self.csr = csr
        self.space = space
        self.width = int(csr.shape[1]) if csr is not None else 0
        self._buffers: list[np.ndarray] | None = None
        self._current = 0
        self.nnz = 0
        if csr is not None:
            self.nnz = int(csr.nnz) if space is None else int(space.row_nnz(csr).sum())

    @property
    def dense_t(self) -> np.ndarray | None:
        """The live rows as a dense ``n x rows`` tile (a view of the current buffer)."""
        if self._buffers is None:
            return None
        return self._view(self._current, len(self.live))

    def _view(self, which: int, rows: int, width: int | None = None) -> np.ndarray:
        width = self.width if width is None else width
        return self._buffers[which][: width * rows].reshape(width, rows)

    def _tile_nnz(self, tile: np.ndarray) -> int:
        """Neuron nonzeros of a tile (or columns of it) in this chunk's columns."""
        return (int(np.count_nonzero(tile)) if self.space is None
                else self.space.tile_nnz(tile))

    def _attach(self, pool: BufferPool, capacity: int, width: int | None = None) -> None:
        if width is not None:
            self.width = width
        self._capacity = capacity
        self._buffers = [pool.take(), pool.take()]
        self._current = 0

    def release(self, pool: BufferPool) -> None:
        """Return the buffers to the pool (the chunk is no longer used)."""
        if self._buffers is not None:
            pool.give(*self._buffers)
            self._buffers = None

    def step(self, w: sp.csr_matrix, wt: sp.csr_matrix | None, order: np.ndarray,
             bias: np.ndarray, ymax: np.float32, threshold: float, pool: BufferPool,
             capacity: int) -> str:
        """Advance one layer in place, dropping rows that die; returns the mode used.

        Without ``wt`` a dense layer runs :func:`dense_step_w` on ``w``, ``order`` then
        being an :class:`InputOrder`; else :func:`dense_step` on ``wt``, in output
        ``order``.
        """
        if self.space is not None:  # a plain layer takes neurons
            self.expand(pool, capacity)
        stored = w if isinstance(w, StoredLayer) else None
        rows, n = len(self.live), w.shape[1]
        # A dense layer costs ~n_out * 32 loop set-ups whatever the row count, so few rows
        # need a higher density to pay for it (measured crossover: ~5 rows when full).
        dense = self.nnz >= threshold * (1.0 + SETUP_ROWS / rows) * n * rows
        if dense:
            w = canonical(w)
            self._to_dense(pool, capacity)
            out = self._view(1 - self._current, rows)
            if wt is None:  # streamed: no transpose, ``order`` an InputOrder
                alive, self.nnz = dense_step_w(self.dense_t, w.indptr, w.indices, w.data,
                                               bias, ymax, out, ROW_TILE, order.order,
                                               order.fours)
            else:
                alive, self.nnz = dense_step(self.dense_t, wt.indptr, wt.indices, wt.data,
                                             bias, ymax, out, ROW_TILE, order)
            self._current = 1 - self._current
            self._keep_stepped(out, alive, pool)
            return "dense"
        c = self.to_csr(pool)
        if stored is not None:  # as the store keeps it: no columns widened, no values
            u = stored.uniform
            op, oi, ox, kept = sparse_step_uniform(c.indptr, c.indices, c.data, u.indices,
                                                   u.row_nnz, u.value, bias, ymax, n, True)
        else:
            op, oi, ox, kept = sparse_step(c.indptr, c.indices, c.data, w.indptr, w.indices,
                                           w.data, bias, ymax, n, True)
        self.csr = sp.csr_matrix((ox, oi, op), shape=(len(kept), n))
        self.live, self.nnz = self.live[kept], int(ox.shape[0])
        return "sparse"

    def step_classes(self, layer: ClassLayer, ymax: np.float32, pool: BufferPool,
                     capacity: int) -> str:
        """Advance one layer with its outputs in classes (:mod:`.classes`), in place,
        dropping rows that die; returns the mode used.

        Sparse rows over neurons (a block's inputs) are scattered straight into a tile
        over the classes (:func:`scatter_step`); anything else steps on a dense tile
        (:func:`dense_step_sized`), each input read from the row its neuron or class is
        kept in. The terms and their order are the plain steps', so are the bits.
        """
        space = layer.space
        rows = len(self.live)
        if self.csr is not None and self.space is None:
            c, r = self.csr, layer.scatter
            if self._buffers is None:
                self._attach(pool, capacity)
            out = self._view(1 - self._current, rows, space.n)
            alive, self.nnz = scatter_step(c.indptr, c.indices, c.data, r.indptr, r.indices,
                                           r.data, layer.bias, ymax, out, space.sizes)
            self.csr, mode = None, "sparse"
        else:
            self._to_dense(pool, capacity)
            wt, order = layer.step_weights(self.space)
            out = self._view(1 - self._current, rows, space.n)
            alive, self.nnz = dense_step_sized(self.dense_t, wt.indptr, wt.indices, wt.data,
                                               layer.bias, ymax, out, ROW_TILE, order,
                                               space.sizes, _NO_COPIES)
            mode = "dense"
        self._current = 1 - self._current
        self.space, self.width = space, space.n
        self._keep_stepped(out, alive, pool)
        return mode

    def _to_dense(self, pool: BufferPool, capacity: int) -> None:
        """The live rows as a dense tile in pooled buffers (if they are sparse)."""
        if self._buffers is None:
            c = self.csr
            self._attach(pool, capacity)
            csr_to_dense_t(c.indptr, c.indices, c.data, self.dense_t)
            self.csr = None

    def _keep_stepped(self, out: np.ndarray, alive: np.ndarray, pool: BufferPool) -> None:
        """After a dense step into ``out`` (now the current buffer): its ``alive`` rows
        compacted into the other buffer, which becomes current; the buffers back to the
        pool if none is left."""
        if not alive.all():
            keep = int(alive.sum())
            compact_columns(out, alive, self._view(1 - self._current, keep))
            self.live = self.live[alive]
            self._current = 1 - self._current
        if not len(self.live):
            self.release(pool)

    def expand(self, pool: BufferPool | None, capacity: int) -> None:
        """Columns over classes back to columns over neurons (each class's value in
        every neuron of the class)."""
        space = self.space
        if space is None:
            return
        if self._buffers is None:
            self.csr = space.expand_csr(self.csr)
        else:
            n = space.classes.shape[0]  # the pool's buffers hold N x capacity
            rows = len(self.live)
            np.take(self.dense_t, space.classes, axis=0, out=self._view(1 - self._current,
                                                                         rows, n))
            self._current = 1 - self._current
        self.space, self.width = None, space.classes.shape[0]

    def keep(self, alive: np.ndarray, pool: BufferPool) -> None:
        """Keep only the ``alive`` rows (a mask over :attr:`live`), as a step that
        drops rows does."""
        if alive.all():
            return
        if self._buffers is not None:
            self.nnz -= int(self.row_nnz()[~alive].sum())
            keep = int(alive.sum())
            compact_columns(self.dense_t, alive, self._view(1 - self._current, keep))
            self._current = 1 - self._current
            self.live = self.live[alive]
            if not len(self.live):
                self.release(pool)
            return
        self.csr = self.csr[alive]
        self.live, self.nnz = self.live[alive], int(self.csr.nnz)

    def row_nnz(self) -> np.ndarray:
        """Nonzeros of each live row."""
        if not len(self.live):  # every row died: the tile is gone
            return np.zeros(0, np.int64)
        if self.space is not None:
            return (self.space.row_nnz(self.csr) if self.csr is not None
                    else self.space.column_nnz(self.dense_t))
        if self.csr is not None:
            return np.diff(self.csr.indptr)
        return column_nnz(self.dense_t)

    def neuron_csr(self, pool: BufferPool | None = None) -> sp.csr_matrix:
        """The live rows as CSR over neurons (``len(live) x N``), whatever the columns."""
        csr = self.to_csr(pool)
        return csr if self.space is None else self.space.expand_csr(csr)

    def to_csr(self, pool: BufferPool | None = None) -> sp.csr_matrix:
        """The live rows as CSR (``len(live) x width``, over neurons or classes as the
        chunk's columns are); a dense chunk becomes sparse."""
        if self.csr is None:
            self.csr = dense_t_to_csr(self.dense_t)
            if pool is not None:
                self.release(pool)
            self._buffers = None
        return self.csr

    @staticmethod
    def repack_if_half_empty(chunks: list[Chunk], chunk_rows: int, n: int,
                             pool: BufferPool) -> list[Chunk]:
        """``chunks``, repacked (:meth:`repack`) if they fill half their tiles or less."""
        live_rows = sum(len(c.live) for c in chunks)
        if len(chunks) > 1 and len(chunks) >= 2 * -(-live_rows // chunk_rows):
            return Chunk.repack(chunks, chunk_rows, n, pool)
        return chunks

    @staticmethod
    def repack(chunks: list[Chunk], chunk_rows: int, n: int, pool: BufferPool
               ) -> list[Chunk]:
        """The rows of ``chunks``, in order of their ids, as full chunks of ``chunk_rows``
        (the last may be short); the old chunks' buffers go back to the pool.

        Every chunk's ids increase (:class:`_Stepper` relies on it). One block's chunks
        hold consecutive id ranges, so they only need putting end to end; chunks of
        several blocks may interleave, and are then merged by id.
        """
        chunks = sorted(chunks, key=lambda c: c.live[0])
        spaces = {None if c.space is None else c.space.layer for c in chunks}
        if len(spaces) > 1:  # columns of several kinds: all over neurons
            for c in chunks:
                c.expand(pool, chunk_rows)
        space, n = chunks[0].space, chunks[0].width
        live = np.concatenate([c.live for c in chunks])
        order = None if np.all(live[1:] > live[:-1]) else np.argsort(live, kind="stable")
        if all(c._buffers is None for c in chunks):
            csr = stack_rows([c.csr for c in chunks])
            if order is not None:
                live, csr = live[order], csr[order]
            return [Chunk(live[s : s + chunk_rows], csr=csr[s : s + chunk_rows], space=space)
                    for s in range(0, len(live), chunk_rows)]
        if order is not None:
            return Chunk._merge_dense(chunks, live, order, chunk_rows, n, pool)
        packed = []
        for s in range(0, len(live), chunk_rows):
            part = Chunk(live[s : s + chunk_rows], space=space)
            part._attach(pool, chunk_rows, n)
            packed.append(part)
        # copy each source chunk's columns into the destination chunks they fall in
        position = 0
        for c in chunks:
            source = c.dense_t
            if source is None:  # a sparse chunk among dense ones
                source = np.empty((n, len(c.live)), np.float32)
                csr_to_dense_t(c.csr.indptr, c.csr.indices, c.csr.data, source)
            done = 0
            while done < len(c.live):
                part = packed[position // chunk_rows]
                at = position % chunk_rows
                take = min(len(c.live) - done, chunk_rows - at)
                part.dense_t[:, at : at + take] = source[:, done : done + take]
                part.nnz += part._tile_nnz(source[:, done : done + take])
                done += take
                position += take
            c.release(pool)
        return packed

    @staticmethod
    def _merge_dense(chunks: list[Chunk], live: np.ndarray, order: np.ndarray,
                     chunk_rows: int, n: int, pool: BufferPool) -> list[Chunk]:
        """:meth:`repack` of chunks whose ids interleave: gather the columns by id."""
        every = np.empty((n, len(live)), np.float32)
        at = 0
        for c in chunks:
            if c.dense_t is not None:
                every[:, at : at + len(c.live)] = c.dense_t
            else:
                csr_to_dense_t(c.csr.indptr, c.csr.indices, c.csr.data,
                                every[:, at : at + len(c.live)])
            at += len(c.live)
            c.release(pool)
        live = live[order]
        packed = []
        space = chunks[0].space
        for s in range(0, len(live), chunk_rows):
            part = Chunk(live[s : s + chunk_rows], space=space)
            part._attach(pool, chunk_rows, n)
            np.take(every, order[s : s + chunk_rows], axis=1, out=part.dense_t)
            part.nnz = part._tile_nnz(part.dense_t)
            packed.append(part)
        return packed
