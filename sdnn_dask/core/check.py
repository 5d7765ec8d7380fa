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
    """

    output: sp.csr_matrix
    bound: sp.csr_matrix
    undecided: np.ndarray
    undecided_layer: np.ndarray

    @property
    def categories(self) -> np.ndarray:
        """0-based ids of the decided rows nonzero after the last layer."""
        return np.flatnonzero(np.diff(self.output.indptr)).astype(np.int64)


def bounded_reference(network: Network, inputs: sp.spmatrix | sp.sparray
                      ) -> BoundedReference:
    """Run the recurrence in float64 with error bounds (see the module docstring).

    Rows are dropped as soon as they are dead (every entry zero with margin: exactly zero
    in any float32 evaluation) or undecided, so the cost is close to a float64 run of the
    plain reference.

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
    live = np.arange(n_rows)
    undecided: list[np.ndarray] = []
    undecided_layer: list[np.ndarray] = []
    for layer, w32 in enumerate(network.layers, start=1):
        if not len(live):
            break
        w = w32.astype(np.float64)
        n_terms = int(np.diff(w.tocsc().indptr).max(initial=0)) + 1
        gamma = n_terms * U32 / (1.0 - n_terms * U32)
        yp, yi, yx, ye, jump = _bounded_layer(yp, yi, yx, ye, w.indptr, w.indices, w.data,
                                              bias, ymax, gamma, n)
        bad_rows = np.flatnonzero(jump)
        if len(bad_rows):
            undecided.append(live[bad_rows])
            undecided_layer.append(np.full(len(bad_rows), layer))
        counts = np.diff(yp)
        alive = (counts > 0) & ~jump
        if not alive.all():  # drop dead and undecided rows
            keep = np.repeat(alive, counts)
            yi, yx, ye = yi[keep], yx[keep], ye[keep]
            yp = np.concatenate([[0], np.cumsum(counts[alive])])
            live = live[alive]
    y = sp.csr_matrix((yx, yi, yp), shape=(len(live), n))
    e = sp.csr_matrix((ye, yi.copy(), yp.copy()), shape=(len(live), n))
    out = sp.csr_matrix((n_rows, n), dtype=np.float64)
    bound = sp.csr_matrix((n_rows, n), dtype=np.float64)
    if len(live):
        coo, eco = y.tocoo(), e.tocoo()
        out = sp.csr_matrix((coo.data, (live[coo.row], coo.col)), shape=(n_rows, n))
        bound = sp.csr_matrix((eco.data, (live[eco.row], eco.col)), shape=(n_rows, n))
    ids = np.concatenate(undecided) if undecided else np.empty(0, np.int64)
    first = np.concatenate(undecided_layer) if undecided_layer else np.empty(0, np.int64)
    order = np.argsort(ids, kind="stable")
    return BoundedReference(out, bound, ids[order].astype(np.int64), first[order])


@numba.njit(nogil=True, cache=True)
def _bounded_layer(yp, yi, yx, ye, wp, wi, wx, bias, ymax, gamma, n):  # pragma: no cover
    """One layer in float64 with error bounds (module docstring), row by row.

    ``ye`` are the errors of the entries ``yx`` (same pattern). Returns the output CSR
    ``(op, oi, ox)``, its errors ``oe`` (same pattern), and per row whether the bias
    rule could flip on it."""
    nrows = yp.shape[0] - 1
    z = np.zeros(n)
    mag = np.zeros(n)
    err = np.zeros(n)
    touched = np.zeros(n, np.bool_)
    cap = max(1024, 2 * yx.shape[0])
    op = np.zeros(nrows + 1, np.int64)
    oi = np.empty(cap, np.int32)
    ox = np.empty(cap, np.float64)
    oe = np.empty(cap, np.float64)
    jump = np.zeros(nrows, np.bool_)
    nnz = 0
    for r in range(nrows):
        for p in range(yp[r], yp[r + 1]):
            k = yi[p]
            v = yx[p]
            av = abs(v)
            ev = ye[p]
            for q in range(wp[k], wp[k + 1]):
                j = wi[q]
                wv = wx[q]
                aw = abs(wv)
                touched[j] = True
                z[j] += v * wv
                mag[j] += av * aw
                err[j] += ev * aw
        if nnz + n > cap:
            cap = max(2 * cap, nnz + n)
            oi2 = np.empty(cap, np.int32)
            ox2 = np.empty(cap, np.float64)
            oe2 = np.empty(cap, np.float64)
            oi2[:nnz] = oi[:nnz]
            ox2[:nnz] = ox[:nnz]
            oe2[:nnz] = oe[:nnz]
            oi, ox, oe = oi2, ox2, oe2
        for j in range(n):
            if not touched[j]:
                continue
            zz = z[j]
            ez = err[j] + gamma * mag[j]
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
            z[j] = 0.0
            mag[j] = 0.0
            err[j] = 0.0
            touched[j] = False
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
    a = sp.csr_matrix(output, dtype=np.float64)
    ref = reference.output
    undecided = len(reference.undecided)
    if a.shape != ref.shape:
        return Verdict(False, (), a.shape[0], float("inf"), undecided)
    keep = np.ones(a.shape[0])
    keep[reference.undecided] = 0.0
    mask = sp.diags(keep, format="csr")
    diff = abs(mask @ (a - ref)).tocsr()
    tolerance = mask @ (reference.bound + U32 * abs(ref))
    over = (diff - tolerance).tocsr()  # > 0 exactly where a value is out of its bound
    over.data = (over.data > 0).astype(np.float64)
    over.eliminate_zeros()
    bad = np.flatnonzero(np.diff(over.indptr))
    largest = float(diff.data.max()) if diff.nnz else 0.0
    return Verdict(not len(bad), tuple(int(r) for r in bad[:5]), len(bad), largest,
                   undecided)
