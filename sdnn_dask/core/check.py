"""The check policy: when a float32 result is "the same" as the exact answer.

Float32 sums taken in different orders differ in their last bits, and on some rows the
challenge recurrence amplifies that: with RadiX-Net weights every input feeds 32 outputs
with weight 1/16, so a difference can double from layer to layer, and a value that lands
next to the ReLU threshold can be zero in one correct implementation and positive in
another. Comparing two float32 results with one fixed tolerance then gives false FAILs on
such rows (and a tolerance loose enough for them would let wrong answers through on all
the others).

So a result is checked against a float64 run of the same recurrence that also carries,
for every activation, a rigorous bound on how far *any* float32 evaluation of it can be
(:func:`bounded_reference`): per layer,

    E_z = e_prev @ |W|  +  gamma_n * (|y_prev| @ |W|)      (error in, and the sums' rounding)
    E   = E_z + u * |z + b|                                (the bias add's rounding)

with ``u = 2**-24`` and ``gamma_n = n u / (1 - n u)`` for sums of ``n`` products (``n``
the most nonzeros of any column of ``W``, plus one). Each entry is then *decided* or not:

- ``z + b <= -E``: zero in every float32 evaluation (error 0);
- ``z + b >= ymax + E``: clamped to ``ymax`` in every one (error 0);
- ``E < z + b < ymax - E``: the value ``z + b``, within ``E``;
- otherwise (within ``E`` of 0 or of ``ymax``, or a sum within its bound of exactly 0,
  where the bias rule could flip): undecided, and so is its row, from that layer on.

A result PASSes (:func:`check_result`) iff, on every decided row, it has exactly the
float64 pattern (so the same category) and every value within its bound (plus the float32
rounding of the value itself). Undecided rows are reported, and checked only against the
truth when there is one. Weights, biases and inputs are taken exactly as the float32
network holds them, so the float64 run differs from a float32 one by rounding alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from .kernels.hashing import SEED, mix
from .network import Network, as_csr32

#: Unit roundoff of float32.
U32 = 2.0 ** -24


@dataclass
class BoundedReference:
    """The float64 answer, each activation's float32 error bound, and the undecided rows.

    Attributes
    ----------
    output
        ``rows x N`` float64 CSR: the final activations of the decided rows (undecided
        rows are empty here).
    bound
        float64 CSR with ``output``'s pattern: the largest difference any float32
        evaluation can have from each value.
    undecided
        Sorted 0-based ids of the rows on which some layer's ReLU or clamp decision lies
        within rounding (not checked by value or category).
    undecided_layer
        For each undecided row, the first layer where that happened.
    rows_per_layer
        Rows stepped through each layer (identical rows once where ``dedup`` merged
        them); ``None`` where not counted.
    """

    output: sp.csr_matrix
    bound: sp.csr_matrix
    undecided: np.ndarray
    undecided_layer: np.ndarray
    rows_per_layer: np.ndarray | None = None

    @property
    def categories(self) -> np.ndarray:
        """0-based ids of the decided rows nonzero after the last layer."""
        return np.flatnonzero(np.diff(self.output.indptr)).astype(np.int64)


def bounded_reference(network: Network, inputs: sp.spmatrix | sp.sparray, *,
                      dedup: bool = False) -> BoundedReference:
    """Run the recurrence in float64 with error bounds (see the module docstring).

    Rows are dropped as soon as they are dead (every entry zero with margin: exactly zero
    in any float32 evaluation) or undecided, so the cost is close to a float64 run of the
    plain reference.

    Parameters
    ----------
    network, inputs
        The network and the ``rows x N`` inputs (taken exactly as float32).
    dedup
        Before each layer, merge the live rows that are identical in pattern and float64
        values (:func:`_merge_identical`): each is stepped once, with the elementwise
        largest of its members' error bounds, and its verdicts (dead, undecided) hold for
        every member. The values are the same bits as without it; a bound can only be
        larger (so a row can only become undecided, never wrongly decided), and is the
        same where the merged rows had the same bounds. Deep challenge layers, where the
        survivors converge to a few distinct rows, then cost a few rows each.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sdnn_dask.core.network import Network
    >>> net = Network([sp.identity(2, format="csr") * 2] * 2, bias=-1.0, ymax=32)
    >>> ref = bounded_reference(net, sp.csr_matrix([[1.0, 0.5], [3.0, 0.0]]))
    >>> ref.output.toarray().tolist(), ref.undecided.tolist()
    ([[1.0, 0.0], [9.0, 0.0]], [])
    >>> # a sum that cancels to 0, with a positive bias: float32 rounding could flip it
    >>> w = sp.csr_matrix([[1.0, 0.0], [-1.0, 0.0]])
    >>> bounded_reference(Network([w], bias=0.5, ymax=32), sp.csr_matrix([[1.0, 1.0]])
    ...                   ).undecided.tolist()
    [0]
    >>> # three equal rows are stepped as one
    >>> ref = bounded_reference(net, sp.csr_matrix([[3.0, 0.0]] * 3), dedup=True)
    >>> ref.output.toarray().tolist(), ref.rows_per_layer.tolist()
    ([[9.0, 0.0], [9.0, 0.0], [9.0, 0.0]], [1, 1])
    """
    y32 = as_csr32(inputs)
    n_rows, n = y32.shape
    if n != network.n_neurons:
        raise ValueError(f"inputs have {n} columns, the network has {network.n_neurons} "
                         "neurons")
    bias = network.bias.astype(np.float64)
    ymax = float(np.float32(network.ymax))
    # live rows as CSR arrays, with each entry's error bound beside its value
    yp, yi = y32.indptr.astype(np.int64), y32.indices.astype(np.int32)
    yx = y32.data.astype(np.float64)
    ye = np.zeros_like(yx)  # the inputs are exact
    owner = np.arange(n_rows)  # each input row's live row; -1 once dead or undecided
    undecided: list[np.ndarray] = []
    undecided_layer: list[np.ndarray] = []
    stepped: list[int] = []
    for layer, w32 in enumerate(network.layers, start=1):
        if len(yp) == 1:  # no live row
            break
        if dedup and len(yp) > 2:  # two rows or more
            yp, yi, yx, ye, group = _merge_identical(yp, yi, yx, ye)
            if group is not None:
                owner = _follow(owner, group)
        stepped.append(len(yp) - 1)
        w = sp.csr_matrix(w32)
        # the most terms of any column's sum (a count per column, without a transpose)
        n_terms = _most_per_column(w.indices, n) + 1
        gamma = n_terms * U32 / (1.0 - n_terms * U32)
        # float32 weights go in as they are: each product is formed in float64, exactly
        # as from a float64 copy
        yp, yi, yx, ye, jump = _bounded_layer(yp, yi, yx, ye, w.indptr, w.indices, w.data,
                                              bias, ymax, gamma, n)
        if jump.any():  # every input row stepped as an undecided row is undecided
            hit = np.flatnonzero((owner >= 0) & jump[np.maximum(owner, 0)])
            undecided.append(hit)
            undecided_layer.append(np.full(len(hit), layer))
        counts = np.diff(yp)
        alive = counts > 0  # dead and undecided rows have no entries left
        if not alive.all():  # renumber the rest
            yp = np.concatenate([[0], np.cumsum(counts[alive])])
            owner = _follow(owner, np.where(alive, np.cumsum(alive) - 1, -1))
    out = sp.csr_matrix((n_rows, n), dtype=np.float64)
    bound = sp.csr_matrix((n_rows, n), dtype=np.float64)
    rows = np.flatnonzero(owner >= 0)
    if len(rows):  # each input row gets its live row's entries (identical rows share one)
        lengths = np.zeros(n_rows, np.int64)
        lengths[rows] = np.diff(yp)[owner[rows]]
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        indices, values, errors = _gather_rows(yp, yi, yx, ye, owner, indptr)
        out = sp.csr_matrix((values, indices, indptr), shape=(n_rows, n))
        bound = sp.csr_matrix((errors, indices.copy(), indptr.copy()), shape=(n_rows, n))
    ids = np.concatenate(undecided) if undecided else np.empty(0, np.int64)
    first = np.concatenate(undecided_layer) if undecided_layer else np.empty(0, np.int64)
    order = np.argsort(ids, kind="stable")
    return BoundedReference(out, bound, ids[order].astype(np.int64), first[order],
                            np.asarray(stepped, dtype=np.int64))


def _follow(owner: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``owner`` (input row -> live row, -1 for none) after the live rows are renumbered
    by ``new`` (old live row -> new live row, -1 for dropped)."""
    return np.where(owner >= 0, new[np.maximum(owner, 0)], -1)


@numba.njit(nogil=True, cache=True)
def _gather_rows(yp, yi, yx, ye, owner, indptr):  # pragma: no cover - compiled
    """The CSR arrays of the input rows (``indptr`` given): each row ``i`` with
    ``owner[i] >= 0`` gets live row ``owner[i]``'s entries, in place, without the
    intermediate copies of fancy indexing."""
    nnz = indptr[-1]
    indices = np.empty(nnz, np.int32)
    values = np.empty(nnz, np.float64)
    errors = np.empty(nnz, np.float64)
    for i in range(owner.shape[0]):
        s = owner[i]
        if s < 0:
            continue
        d = indptr[i]
        for p in range(yp[s], yp[s + 1]):
            indices[d] = yi[p]
            values[d] = yx[p]
            errors[d] = ye[p]
            d += 1
    return indices, values, errors


def _merge_identical(yp: np.ndarray, yi: np.ndarray, yx: np.ndarray, ye: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                np.ndarray | None]:
    """Keep one row of each set of live rows equal in pattern and float64 bits.

    Returns the merged CSR arrays and bounds, and each old row's new row (``None`` when no
    two rows were equal: the arrays are returned as they were).

    Why the merged bound (the elementwise largest of the members'; they share a pattern)
    is sound: a member's values are the representative's, so its next layer's sums are
    too, and the bound recurrence ``E_z = e_prev @ |W| + gamma (|y_prev| @ |W|)`` is
    nondecreasing in ``e_prev`` (``|W| >= 0``). With a larger bound every decision
    :func:`_bounded_layer` takes is one the member's own bound would take too (``z + b <=
    -E`` implies it for a smaller ``E``; likewise the clamp), or the entry is kept with a
    bound covering its zero, or the row is called undecided: never a wrong verdict, only a
    weaker one. So the merged row's bounds hold for every member through every later layer.
    """
    first = _identical_rows(yp, yi, yx)
    own = np.arange(len(first))
    reps = first == own
    if reps.all():
        return yp, yi, yx, ye, None
    renumber = np.cumsum(reps) - 1  # the new row of each representative
    group = renumber[first]
    counts = np.diff(yp)
    keep = np.repeat(reps, counts)
    new_p = np.concatenate([[0], np.cumsum(counts[reps])])
    # each entry's place in its representative's row: the same offset (same pattern)
    offset = np.arange(len(yi)) - np.repeat(yp[:-1], counts)
    target = np.repeat(new_p[group], counts) + offset
    new_e = np.zeros(int(new_p[-1]))
    np.maximum.at(new_e, target, ye)
    return new_p, yi[keep], yx[keep], new_e, group


@numba.njit(nogil=True, cache=True)
def _identical_rows(yp, yi, yx):  # pragma: no cover - compiled
    """For each CSR row, the first row equal to it (pattern and float64 bits; itself when
    none is): rows are hashed, and a row is merged only after an exact comparison with
    the earlier row of its hash (a hash collision keeps both)."""
    nrows = yp.shape[0] - 1
    bits = yx.view(np.uint64)
    h = np.empty(nrows, np.uint64)
    for r in range(nrows):
        acc = SEED
        for p in range(yp[r], yp[r + 1]):
            acc = mix(mix(acc, np.uint64(yi[p])), bits[p])
        h[r] = mix(acc, np.uint64(yp[r + 1] - yp[r]))
    order = np.argsort(h, kind="mergesort")  # stable: a hash's rows in row order
    first = np.arange(nrows)
    reps = np.empty(nrows, np.int64)
    i = 0
    while i < nrows:
        j = i
        while j < nrows and h[order[j]] == h[order[i]]:
            j += 1
        m = 0  # distinct rows of this hash so far
        for a in range(i, j):
            r = order[a]
            length = yp[r + 1] - yp[r]
            for t in range(m):
                s = reps[t]
                if yp[s + 1] - yp[s] != length:
                    continue
                same = True
                for k in range(length):
                    if yi[yp[r] + k] != yi[yp[s] + k] or bits[yp[r] + k] != bits[yp[s] + k]:
                        same = False
                        break
                if same:
                    first[r] = s
                    break
            if first[r] == r:
                reps[m] = r
                m += 1
        i = j
    return first


@numba.njit(nogil=True, cache=True)
def _most_per_column(indices, n):  # pragma: no cover - compiled
    """The most entries of any column, from a CSR matrix's column indices (2 ms against
    ``np.bincount``'s 5-9 ms at N = 65536, on each of the deep layers that cost little
    else)."""
    count = np.zeros(n, np.int64)
    for j in indices:
        count[j] += 1
    return count.max() if n else 0


@numba.njit(nogil=True, cache=True)
def _bounded_layer(yp, yi, yx, ye, wp, wi, wx, bias, ymax, gamma, n):  # pragma: no cover
    """One layer in float64 with error bounds (module docstring), row by row.

    ``ye`` are the errors of the entries ``yx`` (same pattern). Returns the output CSR
    ``(op, oi, ox)``, its errors ``oe`` (same pattern), and per row whether the bias
    rule could flip on it; such a row's entries are left out (it is dropped), as are a
    dead row's (it has none).

    Each row's sums are taken in the same order as a plain row-by-row scatter (its
    entries in CSR order, each one's weights in CSR order), so the bits do not depend on
    how the columns are found: a sparse row lists the columns it touches and sorts them,
    a dense one scans all ``n``. The output arrays are sized once, by each row's most
    possible entries (the columns its entries feed, at most ``n``): never grown or
    copied, and the memory never written is never taken from the system. (A walk down
    each column of ``W`` gathering from four dense rows at once gives the same bits but
    measured slower at N = 65536: 20 s against 15 s CPU for the 2416 survivors' first
    3 layers.)
    """
    nrows = yp.shape[0] - 1
    reach = np.empty(nrows, np.int64)  # each row's most output entries
    total = 0
    for r in range(nrows):
        s = 0
        for p in range(yp[r], yp[r + 1]):
            s += wp[yi[p] + 1] - wp[yi[p]]
        reach[r] = min(s, n)
        total += reach[r]
    op = np.zeros(nrows + 1, np.int64)
    oi = np.empty(total, np.int32)
    ox = np.empty(total, np.float64)
    oe = np.empty(total, np.float64)
    # the three sums of a column side by side: one cache line per product, not three
    acc = np.zeros((n, 3))
    touched = np.zeros(n, np.bool_)
    cols = np.empty(n, np.int32)
    jump = np.zeros(nrows, np.bool_)
    nnz = 0
    for r in range(nrows):
        listed = reach[r] * 8 < n  # few columns: list them rather than scan all n
        m = 0
        for p in range(yp[r], yp[r + 1]):
            k = yi[p]
            v = yx[p]
            av = abs(v)
            ev = ye[p]
            for q in range(wp[k], wp[k + 1]):
                j = wi[q]
                wv = wx[q]
                aw = abs(wv)
                if listed and not touched[j]:
                    cols[m] = j
                    m += 1
                touched[j] = True
                acc[j, 0] += v * wv
                acc[j, 1] += av * aw
                acc[j, 2] += ev * aw
        if listed:
            cols[:m].sort()
        else:
            m = n
        start = nnz
        for t in range(m):
            j = cols[t] if listed else t
            if not touched[j]:
                continue
            zz = acc[j, 0]
            ez = acc[j, 2] + gamma * acc[j, 1]
            b = bias[j]
            pp = zz + b
            ep = ez + U32 * abs(pp)
            # a float32 sum can be exactly 0 where |z| <= ez (then no bias is added), or
            # nonzero where float64 cancelled: a jump, if the bias can leave a positive value
            flip = abs(zz) <= ez and b + ez + U32 * abs(b) > 0.0
            if flip:
                jump[r] = True
            zero = (not flip) if zz == 0.0 else pp <= -ep
            if not zero:
                top = pp >= ymax + ep and not flip
                oi[nnz] = j
                ox[nnz] = min(max(pp, 0.0), ymax)
                oe[nnz] = 0.0 if top else ep
                nnz += 1
            acc[j, 0] = 0.0
            acc[j, 1] = 0.0
            acc[j, 2] = 0.0
            touched[j] = False
        if jump[r]:  # undecided: dropped with its entries
            nnz = start
        op[r + 1] = nnz
    return op, oi[:nnz], ox[:nnz], oe[:nnz], jump


@dataclass(frozen=True)
class Verdict:
    """Whether a float32 result agrees with a :class:`BoundedReference`.

    Attributes
    ----------
    passed
        True iff every value of every decided row is within its bound of the float64
        reference (so every row the reference says is certainly nonzero, or certainly
        zero, is so in the result).
    wrong_rows
        0-based ids of the first decided rows that differ, for the message.
    n_wrong
        How many decided rows differ.
    max_abs_diff
        Largest difference from the float64 reference on decided rows.
    n_undecided
        Rows not checked (the bias rule could flip on them; see the module docstring).
    """

    passed: bool
    wrong_rows: tuple[int, ...]
    n_wrong: int
    max_abs_diff: float
    n_undecided: int

    def __str__(self) -> str:
        if self.passed:
            text = ("PASS: every value within float32 rounding of the float64 reference "
                    f"(largest difference {self.max_abs_diff:.3g})")
        else:
            text = (f"FAIL: {self.n_wrong} row(s) differ from the float64 reference beyond "
                    f"float32 rounding (first, 1-based: {[r + 1 for r in self.wrong_rows]})")
        if self.n_undecided:
            text += f"; {self.n_undecided} row(s) not checked (bias rule within rounding)"
        return text


def check_result(output: sp.spmatrix | sp.sparray, reference: BoundedReference) -> Verdict:
    """Check a float32 result against the bounded float64 reference (module docstring).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sdnn_dask.core.network import Network
    >>> net = Network([sp.identity(2, format="csr") * 2] * 2, bias=-1.0, ymax=32)
    >>> ref = bounded_reference(net, sp.csr_matrix([[1.0, 0.5], [3.0, 0.0]]))
    >>> check_result(sp.csr_matrix([[1.0, 0.0], [9.0, 0.0]]), ref).passed
    True
    >>> check_result(sp.csr_matrix([[1.0, 0.0], [9.001, 0.0]]), ref).wrong_rows
    (1,)
    """
    a = sp.csr_matrix(output)
    ref = reference.output
    undecided = len(reference.undecided)
    if a.shape != ref.shape:
        return Verdict(False, (), a.shape[0], float("inf"), undecided)
    if a.dtype not in (np.float32, np.float64) or not a.has_canonical_format:
        # a copy (summing sorts in place, and the caller's indices may be shared);
        # duplicates summed as float64
        a = sp.csr_matrix(output, dtype=np.float64, copy=True)
        a.sum_duplicates()
    skip = np.zeros(a.shape[0], np.bool_)
    skip[reference.undecided] = True
    # row by row, without the whole-matrix differences (GBs at N = 65536)
    bad, largest = _compare_rows(a.indptr, a.indices, a.data, ref.indptr, ref.indices,
                                 ref.data, reference.bound.indptr, reference.bound.indices,
                                 reference.bound.data, skip)
    bad = np.flatnonzero(bad)
    return Verdict(not len(bad), tuple(int(r) for r in bad[:5]), len(bad), float(largest),
                   undecided)


@numba.njit(nogil=True, cache=True)
def _compare_rows(ap, ai, ax, rp, ri, rx, bp, bi, bx, skip):  # pragma: no cover - compiled
    """Per row (``skip``: undecided, not compared), whether some column's ``|a - ref|``
    exceeds ``bound + U32 |ref|`` (absent entries 0; rows in column order), and the
    largest ``|a - ref|`` (NaN if one is NaN, as ``np.max``)."""
    nrows = ap.shape[0] - 1
    bad = np.zeros(nrows, np.bool_)
    largest = 0.0
    for r in range(nrows):
        if skip[r]:
            continue
        p, q, s = ap[r], rp[r], bp[r]
        while p < ap[r + 1] or q < rp[r + 1] or s < bp[r + 1]:
            j = ai[p] if p < ap[r + 1] else 2 ** 62
            if q < rp[r + 1] and ri[q] < j:
                j = ri[q]
            if s < bp[r + 1] and bi[s] < j:
                j = bi[s]
            va = 0.0
            if p < ap[r + 1] and ai[p] == j:
                va = np.float64(ax[p])
                p += 1
            vr = 0.0
            if q < rp[r + 1] and ri[q] == j:
                vr = rx[q]
                q += 1
            vb = 0.0
            if s < bp[r + 1] and bi[s] == j:
                vb = bx[s]
                s += 1
            d = abs(va - vr)
            if (d - (vb + U32 * abs(vr))) > 0.0:
                bad[r] = True
            if d != d or largest != largest:
                largest = np.nan
            elif d > largest:
                largest = d
    return bad, largest
