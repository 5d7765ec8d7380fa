"""Serial sparse training: the reference against finite differences and PyTorch, the
compiled path against the reference, the clamp's convention, SGD by hand, the digits.

Expectations come from outside the code under test: central finite differences of the
loss, PyTorch's autodiff of the same forward built from dense masked matrices, numbers
worked out by hand. The compiled path is then held to the reference on networks whose
values are dyadic (so float32 and float64 agree exactly on every activation, and with
them on which entries are 0, clamped or cancelled to Z == 0).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.core.kernels import forward_block
from sdnn_dask.core.network import Network
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.training import (
    SGD,
    Gradients,
    SparseModel,
    compiled,
    fit,
    init_model,
    load_digits_1024,
    predict,
    reference,
    train_digits,
    train_step,
)


@pytest.fixture(scope="module")
def torch():
    """PyTorch CPU, the independent autodiff (in the test extra; under CI=true a missing
    one fails, see conftest)."""
    torch = pytest.importorskip(
        "torch", reason="PyTorch not installed (pip install torch==2.13.0, in the test "
                        "extra): the gradients are not checked against an independent autodiff")
    torch.set_num_threads(1)  # the machine's cores are shared
    return torch


# --------------------------------------------------------------------------- helpers


def random_patterns(rng, sizes, density):
    """CSR patterns ``sizes[k] x sizes[k+1]`` with every column fed by >= 1 input."""
    patterns = []
    for n_in, n_out in itertools.pairwise(sizes):
        p = sp.random(n_in, n_out, density=density, format="csr", rng=rng)
        p = p + sp.csr_matrix((np.ones(n_out), (rng.integers(0, n_in, n_out),
                                                np.arange(n_out))), shape=(n_in, n_out))
        patterns.append(p.tocsr())
    return patterns


def random_model(rng, sizes, density, classes=4, ymax=1.5, dtype=np.float64, bias=0.3):
    model = init_model(random_patterns(rng, sizes, density), classes, seed=int(rng.integers(1e6)),
                       dtype=dtype, ymax=ymax)
    for b in model.biases:
        b[:] = rng.uniform(-bias, bias, b.shape)
    model.readout_bias[:] = rng.normal(size=classes)
    return model


def dyadic_model(rng, sizes, density, classes=5, ymax=2.0):
    """Weights in {-1, -1/2, 1/2, 1}, biases in {-1, -1/2, 0, 1/2}: every activation is
    exact in float32, sums cancel to exactly 0, clamps hit ymax exactly. Input 0 only
    feeds negative weights, so a row holding only input 0 dies in the first layer."""
    model = random_model(rng, sizes, density, classes, ymax, np.float32)
    for w, b in zip(model.weights, model.biases, strict=True):
        w.data[:] = rng.choice(np.array([-1, -0.5, 0.5, 1], np.float32), w.nnz)
        b[:] = rng.choice(np.array([-1, -0.5, 0, 0.5], np.float32), b.shape)
    w = model.weights[0]
    w.data[w.indptr[0] : w.indptr[1]] = -np.abs(w.data[w.indptr[0] : w.indptr[1]])
    return model


def dyadic_inputs(rng, rows, n, density=0.4):
    """Values in {0, 1/2, 1}; the first tenth of the rows empty, the next tenth only a 1
    in input 0 (they die, see :func:`dyadic_model`)."""
    x = rng.choice(np.array([0.5, 1.0], np.float32), (rows, n))
    x[rng.random((rows, n)) > density] = 0.0
    tenth = max(1, rows // 10)
    x[: 2 * tenth] = 0.0
    x[tenth : 2 * tenth, 0] = 1.0  # Z <= -1/2 wherever it feeds, b <= 1/2: dead
    return x


def flat(grads: Gradients) -> list[np.ndarray]:
    return [np.asarray(a, np.float64) for a in grads.arrays()]


def assert_grads_close(got: Gradients, want: Gradients, rtol=1e-4, scale_tol=2e-6):
    """Each array within ``rtol`` entrywise, plus ``scale_tol`` of the array's largest."""
    names = ([f"W{k}" for k in range(len(want.weights))]
             + [f"b{k}" for k in range(len(want.biases))] + ["R", "c"])
    for name, g, w in zip(names, flat(got), flat(want), strict=True):
        assert g.shape == w.shape, name
        atol = scale_tol * max(np.abs(w).max(), 1e-30)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=name)


def reference_grads(model, x, labels):
    return reference.backward(model, reference.forward(model, x), labels)


def compiled_grads(model, x, labels):
    return compiled.backward(model, compiled.forward(model, x), labels)


# --------------------------------------------------------------------------- the model


def test_init_model_pattern_scale_and_seed():
    net = make_network(1024, 3, seed=2)
    model = init_model(net, classes=10, seed=5)
    again = init_model(net, classes=10, seed=5)
    other = init_model(net, classes=10, seed=6)
    assert model.dtype == np.float32 and model.ymax == net.ymax == 32.0
    assert model.same_pattern(again) and model.n_classes == 10 and model.edges == net.edges
    for w, src in zip(model.weights, net.layers, strict=True):
        assert np.array_equal(w.indptr, src.indptr) and np.array_equal(w.indices, src.indices)
        assert abs(w.data.std() - 0.25) < 0.01  # He: sqrt(2 / 32 inputs)
    assert all(np.array_equal(a, b) for a, b in zip(model.parameters(), again.parameters(),
                                                    strict=True))
    assert not np.array_equal(model.weights[0].data, other.weights[0].data)
    assert all((b == 0).all() for b in model.biases)
    assert init_model(net, 10, dtype=np.float64).dtype == np.float64
    with pytest.raises(TypeError, match="float32 or float64"):
        init_model(net, 10, dtype=np.float16)


def test_init_keeps_stored_zeros_as_edges():
    pattern = sp.csr_matrix((np.array([0.0, 1.0]), np.array([0, 1]), np.array([0, 1, 2])),
                            shape=(2, 2))
    assert init_model([pattern], classes=2).weights[0].nnz == 2


def test_deep_initial_activations_neither_die_nor_explode():
    model = init_model(make_network(1024, 24), classes=10, seed=0, dtype=np.float64)
    x = np.random.default_rng(0).random((16, 1024))
    acts = reference.forward(model, x).activations
    scale = [np.sqrt((a ** 2).mean()) for a in acts]
    assert 0.3 < min(scale) and max(scale) < 3 * scale[0]
    assert (acts[-1].max(axis=1) > 0).all()  # no row dies


def test_model_validation():
    model = init_model([sp.identity(3, format="csr")], classes=2)
    with pytest.raises(ValueError, match="bias of shape"):
        SparseModel(model.weights, [np.zeros(4, np.float32)], model.readout,
                    model.readout_bias, 1.0)
    with pytest.raises(TypeError, match="compiled path runs in float32"):
        compiled.forward(model.astype(np.float64), np.ones((1, 3)))
    with pytest.raises(ValueError, match="labels must be in"):
        reference_grads(model, np.ones((2, 3)), np.array([0, 2]))
    with pytest.raises(ValueError, match="inputs must be rows x 3"):
        compiled.forward(model, np.ones((2, 4)))


# --------------------------------------------------------------------------- reference vs FD


def _fd_margins(model, x):
    """Smallest distance of any pre-activation from a kink: ``Z + b`` from 0 and from
    ymax, and ``Z`` from 0 (where the bias switches on), over the entries with Z != 0."""
    cache = reference.forward(model, x)
    margin = np.inf
    for k, (w, b) in enumerate(zip(model.weights, model.biases, strict=True)):
        z = cache.activations[k] @ w.toarray()
        zb = z + b
        nz = z != 0
        if nz.any():
            margin = min(margin, np.abs(z[nz]).min(), np.abs(zb[nz]).min(),
                         np.abs(zb[nz] - model.ymax).min())
    return margin, cache


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reference_gradients_match_finite_differences(seed):
    rng = np.random.default_rng(seed)
    model = random_model(rng, [16, 16, 16, 16], density=0.3, classes=4, ymax=1.5)
    x = rng.random((5, 16))
    x[rng.random((5, 16)) < 0.3] = 0.0
    labels = rng.integers(0, 4, 5)
    margin, cache = _fd_margins(model, x)
    eps = 1e-6
    assert margin > 100 * eps  # no kink within reach of the differences
    acts = cache.activations
    assert any((a == model.ymax).any() for a in acts[1:])  # clamping is exercised
    assert any((a == 0).any() for a in acts[1:])
    _, grads = reference.backward(model, cache, labels)
    for p, g in zip(model.parameters(), grads.arrays(), strict=True):
        flat_p = p.reshape(-1)
        fd = np.empty(flat_p.size)
        for q in range(flat_p.size):
            keep = flat_p[q]
            flat_p[q] = keep + eps
            up = reference.loss(model, x, labels)
            flat_p[q] = keep - eps
            down = reference.loss(model, x, labels)
            flat_p[q] = keep
            fd[q] = (up - down) / (2 * eps)
        np.testing.assert_allclose(g.reshape(-1), fd, rtol=1e-5, atol=1e-8)
    assert sum(np.count_nonzero(g) for g in grads.weights) > 0


# --------------------------------------------------------------------------- compiled vs reference


SHAPES = {
    "tiny": ([16, 16, 16, 16], 0.3, 5),
    "square-64": ([64] * 5, 0.15, 37),
    "past-a-row-tile": ([96, 96, 96], 0.1, 300),  # rows > 256: the kernels' row tiles
    "rectangular": ([24, 40, 16, 30], 0.2, 50),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_compiled_matches_reference_exactly_on_dyadic_networks(shape):
    sizes, density, rows = SHAPES[shape]
    rng = np.random.default_rng(list(SHAPES).index(shape))
    model = dyadic_model(rng, sizes, density)
    x = dyadic_inputs(rng, rows, sizes[0])
    labels = rng.integers(0, model.n_classes, rows)
    ref = reference.forward(model, x)
    got = compiled.forward(model, x)
    for a_ref, a_got in zip(ref.activations, got.activations, strict=True):
        np.testing.assert_array_equal(a_got.T, a_ref)  # exact: dyadic values
    # the cases the kernels must get right are all here
    live_in = x.any(axis=1)
    assert (live_in & ~ref.activations[-1].any(axis=1)).any(), "no row dies"
    assert any((a == model.ymax).any() for a in ref.activations[1:]), "nothing clamped"
    fed = [ref.activations[k] @ (w.toarray() != 0) for k, w in enumerate(model.weights)]
    cancelled = any(((f > 0) & ~nz).any() for f, nz in zip(fed, ref.z_nonzero, strict=True))
    assert cancelled, "no sum cancels to Z == 0"
    loss_ref, g_ref = reference.backward(model, ref, labels)
    loss_got, g_got = compiled.backward(model, got, labels)
    assert loss_got == pytest.approx(loss_ref, rel=1e-6)
    assert_grads_close(g_got, g_ref)
    assert all(g.dtype == np.float32 for g in g_got.arrays())


@pytest.mark.parametrize("layers, rows", [(2, 70), (3, 300)])
def test_compiled_matches_reference_on_radixnet(layers, rows):
    rng = np.random.default_rng(layers)
    model = init_model(make_network(1024, layers, seed=1), classes=10, seed=3)
    for b in model.biases:
        b[:] = rng.uniform(-0.2, 0.1, b.shape)
    x = rng.random((rows, 1024), dtype=np.float32)
    x[rng.random(x.shape) < 0.5] = 0.0
    labels = rng.integers(0, 10, rows)
    loss_ref, g_ref = reference_grads(model, x, labels)
    loss_got, g_got = compiled_grads(model, x, labels)
    assert loss_got == pytest.approx(loss_ref, rel=1e-5)
    assert_grads_close(g_got, g_ref, rtol=1e-3, scale_tol=1e-5)


def test_layer_pieces_compose_as_the_reference_layer():
    """The per-layer functions (what a parallel trainer calls) on a rectangular layer."""
    rng = np.random.default_rng(7)
    model = dyadic_model(rng, [40, 72], 0.2, ymax=1.0)
    w, b = model.weights[0], model.biases[0]
    y_prev = dyadic_inputs(rng, 260, 40)
    dy = rng.standard_normal((260, 72)).astype(np.float32)
    y_ref, nz = reference.layer_forward(y_prev, w, b, model.ymax)
    delta_ref, db_ref, dy_prev_ref = reference.layer_backward(dy, y_ref, nz, w, model.ymax)
    g_ref = reference.sampled_gradient(y_prev, delta_ref, w)

    out = np.empty((72, 260), np.float32)
    compiled.layer_forward_t(np.ascontiguousarray(y_prev.T), w.T.tocsr(), b, model.ymax, out)
    np.testing.assert_array_equal(out.T, y_ref)
    dt, db = compiled.delta_t(np.ascontiguousarray(dy.T), out, model.ymax)
    np.testing.assert_allclose(dt.T, delta_ref, rtol=1e-6)
    np.testing.assert_allclose(db, db_ref, rtol=1e-4, atol=1e-4)
    ypt = np.ascontiguousarray(y_prev.T)
    dypt, g, none = compiled.layer_backward_t(dt, ypt, w)
    assert none is None
    np.testing.assert_allclose(dypt.T, dy_prev_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g, g_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(compiled.sampled_gradient_t(ypt, dt, w), g, rtol=1e-6,
                               atol=1e-6)
    # the mask of the layer below applied on the way out: delta_t of dY_prev, in one pass
    delta_prev, g_masked, db_prev = compiled.layer_backward_t(dt, ypt, w, mask_ymax=1.0)
    want, want_db = compiled.delta_t(dypt, ypt, 1.0)
    np.testing.assert_array_equal(delta_prev, want)
    np.testing.assert_allclose(db_prev, want_db, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(g_masked, g)
    assert (want == 0).any() and (want != 0).any() and (ypt == 1.0).any()
    # the sampled product equals the dense product read on the pattern
    dense = y_prev.astype(np.float64).T @ delta_ref
    coo = w.tocoo()
    np.testing.assert_allclose(g_ref, dense[coo.row, coo.col], rtol=1e-12, atol=1e-12)


def test_forward_is_bit_identical_to_the_inference_kernel():
    net = make_network(1024, 6, seed=3)
    model = init_model(net, classes=10, seed=0)
    for b in model.biases:
        b[:] = -0.05
    model.ymax = 0.5  # some entries clamp
    x = np.random.default_rng(0).random((300, 1024), dtype=np.float32)
    x[x < 0.6] = 0.0
    tiles = compiled.forward(model, x).activations
    inference = Network(model.weights, bias=-0.05, ymax=0.5)
    out = forward_block(inference, sp.csr_matrix(x), dense_threshold=0.0).to_csr()
    assert (tiles[-1] == 0.5).any() and (tiles[-1] == 0).any()
    np.testing.assert_array_equal(tiles[-1].T, out.toarray())


def test_compiled_sees_updated_weights():
    """The compiled path keeps W^T beside W: an update of W.data must reach it."""
    rng = np.random.default_rng(3)
    model = random_model(rng, [32, 32, 32], 0.2, dtype=np.float32)
    x = rng.random((9, 32), dtype=np.float32)
    before = compiled.forward(model, x).logits.copy()
    model.weights[1].data *= 2
    after = compiled.forward(model, x).logits
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, reference.forward(model, x).logits, rtol=1e-5,
                               atol=1e-5)


# --------------------------------------------------------------------------- the convention


def convention_model(dtype):
    """One layer, 3 inputs, 5 neurons; input rows [1, 1, 0]; ymax 3:

    neuron 0: Z = 1, b = -1  -> Z + b = 0 exactly       -> Y = 0, derivative 0
    neuron 1: Z = 2, b = 1   -> Z + b = 3 = ymax exactly -> Y = 3, derivative 0
    neuron 2: its input is 0 -> Z = 0, no bias (b = .5)  -> Y = 0, derivative 0
    neuron 3: Z = 1 - 1 = 0  -> cancelled, no bias       -> Y = 0, derivative 0
    neuron 4: Z = .5, b = .25                             -> Y = .75, derivative 1
    """
    rows = [0, 1, 0, 1, 2, 0, 1, 0]
    cols = [0, 0, 1, 1, 2, 3, 3, 4]
    vals = [0.5, 0.5, 1.0, 1.0, 1.0, 1.0, -1.0, 0.5]
    w = sp.csr_matrix((np.array(vals, dtype), (rows, cols)), shape=(3, 5))
    model = init_model([w], classes=2, dtype=dtype, ymax=3.0)
    model.weights[0].data[:] = w.data  # init drew random values: put the hand-made ones back
    model.biases[0][:] = [-1.0, 1.0, 0.5, 0.5, 0.25]
    model.readout[:] = np.arange(1, 11, dtype=dtype).reshape(5, 2) / 10  # every dY nonzero
    return model


@pytest.mark.parametrize("path", ["reference", "compiled"])
def test_clamp_derivative_is_zero_at_exactly_zero_and_exactly_ymax(path):
    model = convention_model(np.float64 if path == "reference" else np.float32)
    x = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    labels = np.array([0, 1])
    if path == "reference":
        cache = reference.forward(model, x)
        y = cache.activations[1]
        _, grads = reference.backward(model, cache, labels)
    else:
        cache = compiled.forward(model, x)
        y = cache.activations[1].T
        _, grads = compiled.backward(model, cache, labels)
    np.testing.assert_array_equal(y, [[0, 3, 0, 0, 0.75]] * 2)
    db = grads.biases[0]
    assert db[:4].tolist() == [0, 0, 0, 0] and db[4] != 0
    w = model.weights[0].tocoo()
    g = grads.weights[0]
    assert (g[w.col < 4] == 0).all()
    assert (g[w.col == 4] != 0).all()
    # the one live neuron: dL/db = sum_r dL/dY[r, 4], and dL/dW[0, 4] the same (x[r, 0] = 1)
    dlogits = (_softmax(model.readout_bias + y @ model.readout) - np.eye(2)[labels]) / 2
    dy4 = (dlogits @ model.readout.T)[:, 4]
    rel = 1e-12 if path == "reference" else 1e-5
    assert g[w.col == 4][0] == pytest.approx(dy4.sum(), rel=rel)
    assert db[4] == pytest.approx(dy4.sum(), rel=rel)


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_layer_backward_mask_at_the_edges():
    y = np.array([[0.0, 2.0, 0.5, 2.0 - 2 ** -20, 2 ** -20]])
    nz = np.array([[False, True, True, True, True]])
    dy = np.ones((1, 5))
    w = sp.identity(5, format="csr")
    delta, db, _ = reference.layer_backward(dy, y, nz, w, ymax=2.0)
    assert delta.tolist() == [[0, 0, 1, 1, 1]] and db.tolist() == [0, 0, 1, 1, 1]
    dt, db32 = compiled.delta_t(dy.T.astype(np.float32), y.T.astype(np.float32), 2.0)
    assert dt.T.tolist() == [[0, 0, 1, 1, 1]] and db32.tolist() == [0, 0, 1, 1, 1]


# --------------------------------------------------------------------------- against PyTorch


def torch_gradients(torch, model: SparseModel, x, labels):
    """The same forward in torch, dense weight matrices masked by the pattern."""
    f64 = torch.float64
    ws = [torch.tensor(w.toarray(), dtype=f64, requires_grad=True) for w in model.weights]
    masks = [torch.tensor(_pattern_dense(w), dtype=f64) for w in model.weights]
    bs = [torch.tensor(b, dtype=f64, requires_grad=True) for b in model.biases]
    r = torch.tensor(model.readout, dtype=f64, requires_grad=True)
    c = torch.tensor(model.readout_bias, dtype=f64, requires_grad=True)
    y = torch.tensor(x, dtype=f64)
    for w, m, b in zip(ws, masks, bs, strict=True):
        z = y @ (w * m)
        y = torch.where(z != 0, torch.clamp(z + b, 0.0, model.ymax), torch.zeros_like(z))
    logits = y @ r + c
    value = torch.nn.functional.cross_entropy(logits, torch.tensor(labels))
    value.backward()
    dws = []
    for w, torch_w in zip(model.weights, ws, strict=True):
        coo = w.tocoo()  # CSR order, the gradients' order
        dws.append(torch_w.grad.numpy()[coo.row, coo.col])
    return float(value.detach()), Gradients(dws, [b.grad.numpy() for b in bs], r.grad.numpy(),
                                   c.grad.numpy())


def _pattern_dense(w):
    out = np.zeros(w.shape, bool)
    coo = w.tocoo()
    out[coo.row, coo.col] = True
    return out


@pytest.mark.parametrize("sizes, density, rows", [([32, 32, 32, 32], 0.2, 7),
                                                  ([20, 48, 12], 0.25, 30)])
def test_reference_and_compiled_match_torch(torch, sizes, density, rows):
    rng = np.random.default_rng(sum(sizes))
    model = random_model(rng, sizes, density, classes=6, ymax=1.0, dtype=np.float32)
    x = rng.random((rows, sizes[0]), dtype=np.float32)
    x[rng.random(x.shape) < 0.4] = 0.0
    labels = rng.integers(0, 6, rows)
    acts = reference.forward(model, x).activations
    assert any((a == model.ymax).any() for a in acts[1:])  # some entries are clamped
    loss_t, g_t = torch_gradients(torch, model, x, labels)
    loss_ref, g_ref = reference_grads(model, x, labels)
    assert loss_ref == pytest.approx(loss_t, rel=1e-12)
    assert_grads_close(g_ref, g_t, rtol=1e-9, scale_tol=1e-12)
    loss_c, g_c = compiled_grads(model, x, labels)
    assert loss_c == pytest.approx(loss_t, rel=1e-5)
    assert_grads_close(g_c, g_t, rtol=1e-3, scale_tol=1e-5)


def test_compiled_matches_torch_on_radixnet(torch):
    rng = np.random.default_rng(11)
    model = init_model(make_network(1024, 2, seed=4), classes=10, seed=1)
    x = rng.random((24, 1024), dtype=np.float32)
    labels = rng.integers(0, 10, 24)
    loss_t, g_t = torch_gradients(torch, model, x, labels)
    loss_c, g_c = compiled_grads(model, x, labels)
    assert loss_c == pytest.approx(loss_t, rel=1e-5)
    assert_grads_close(g_c, g_t, rtol=1e-3, scale_tol=1e-5)


def test_sgd_matches_torch(torch):
    rng = np.random.default_rng(5)
    model = random_model(rng, [12, 12, 12], 0.4, classes=3, dtype=np.float64)
    x, labels = rng.random((6, 12)), rng.integers(0, 3, 6)
    params = [torch.tensor(p.copy(), requires_grad=True) for p in model.parameters()]
    n = model.n_layers
    decayed = [*params[:n], params[-2]]
    plain = [*params[n:-2], params[-1]]
    opt_t = torch.optim.SGD([{"params": decayed, "weight_decay": 0.01},
                             {"params": plain, "weight_decay": 0.0}], lr=0.1, momentum=0.9)
    opt = SGD(model, lr=0.1, momentum=0.9, weight_decay=0.01)
    for _ in range(3):
        _, grads = reference_grads(model, x, labels)
        for t, g in zip(params, grads.arrays(), strict=True):
            t.grad = torch.tensor(g)
        opt_t.step()
        opt.step(grads)
        for t, p in zip(params, model.parameters(), strict=True):
            np.testing.assert_allclose(p, t.detach().numpy(), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_torch_fails_under_ci(tmp_path, ci):
    """Without PyTorch the torch tests skip locally and fail under CI=true (conftest)."""
    (tmp_path / "torch.py").write_text(
        'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path),
                                                      env.get("PYTHONPATH")]))
    if ci:
        env["CI"] = ci
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                          "-rs", "-o", "addopts=", f"{__file__}::test_sgd_matches_torch"],
                         env=env, capture_output=True, text=True, timeout=120)
    if ci:
        assert run.returncode == 1, run.stdout
        assert "CI=true and this test would have skipped: PyTorch not installed" in run.stdout
    else:
        assert run.returncode == 0, run.stdout
        assert "1 skipped" in run.stdout and "PyTorch not installed" in run.stdout


# --------------------------------------------------------------------------- SGD by hand


def constant_model(value):
    w = sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 1.0]]))
    model = init_model([w], classes=1, dtype=np.float64)
    for p in model.parameters():
        p[...] = value
    return model


def constant_grads(model, value):
    return Gradients(*[[np.full_like(p, value) for p in group] for group in (
        [w.data for w in model.weights], model.biases)],
        np.full_like(model.readout, value), np.full_like(model.readout_bias, value))


def test_sgd_momentum_and_weight_decay_by_hand():
    model = constant_model(1.0)
    opt = SGD(model, lr=0.1, momentum=0.9, weight_decay=0.01)
    opt.step(constant_grads(model, 0.5))
    opt.step(constant_grads(model, 0.5))
    # decayed (W, R): v1 = 0.5 + 0.01 = 0.51, p1 = 1 - 0.051 = 0.949;
    #   v2 = 0.9 * 0.51 + 0.5 + 0.01 * 0.949 = 0.96849, p2 = 0.949 - 0.096849 = 0.852151
    # not decayed (b, c): v1 = 0.5, p1 = 0.95; v2 = 0.45 + 0.5 = 0.95, p2 = 0.855
    np.testing.assert_allclose(model.weights[0].data, 0.852151, rtol=1e-14)
    np.testing.assert_allclose(model.readout, 0.852151, rtol=1e-14)
    np.testing.assert_allclose(model.biases[0], 0.855, rtol=1e-14)
    np.testing.assert_allclose(model.readout_bias, 0.855, rtol=1e-14)


def test_plain_sgd_by_hand_and_the_pattern_survives_a_zero_weight():
    model = constant_model(0.05)
    indptr, indices = model.weights[0].indptr.copy(), model.weights[0].indices.copy()
    SGD(model, lr=0.1).step(constant_grads(model, 0.5))  # 0.05 - 0.1 * 0.5 = 0 exactly
    w = model.weights[0]
    assert w.nnz == 3 and w.data.tolist() == [0.0, 0.0, 0.0]
    assert np.array_equal(w.indptr, indptr) and np.array_equal(w.indices, indices)


def test_training_steps_keep_the_pattern():
    rng = np.random.default_rng(2)
    model = init_model(make_network(1024, 3), classes=10, seed=0)
    before = model.copy()
    arrays = [(w.indptr, w.indices) for w in model.weights]
    x, labels = rng.random((32, 1024), dtype=np.float32), rng.integers(0, 10, 32)
    opt = SGD(model, lr=0.05, momentum=0.9, weight_decay=1e-4)
    losses = [train_step(model, x, labels, opt) for _ in range(5)]
    assert losses[-1] < losses[0]
    assert model.same_pattern(before)
    for (p, i), w in zip(arrays, model.weights, strict=True):
        assert w.indptr is p and w.indices is i  # the very same arrays, untouched
    assert not np.array_equal(model.weights[0].data, before.weights[0].data)


def test_fit_on_both_backends_agrees():
    """A few steps of the reference and the compiled path follow the same trajectory."""
    rng = np.random.default_rng(8)
    model32 = random_model(rng, [24, 24, 24], 0.3, classes=3, dtype=np.float32)
    model64 = model32.astype(np.float64)
    x = rng.random((40, 24), dtype=np.float32)
    y = rng.integers(0, 3, 40)
    runs = []
    for backend, model in (("compiled", model32), ("reference", model64)):
        opt = SGD(model, lr=0.05, momentum=0.5)
        runs.append(fit(model, x[:30], y[:30], x[30:], y[30:], epochs=3, batch=8,
                        optimizer=opt, backend=backend, seed=1))
    np.testing.assert_allclose(runs[0].loss, runs[1].loss, rtol=1e-4)
    assert list(runs[0].columns) == ["epoch", "loss", "train_accuracy", "test_accuracy",
                                     "seconds"]
    np.testing.assert_allclose(model32.readout, model64.readout, rtol=1e-3, atol=1e-5)
    assert (predict(model32, x) == predict(model64, x, backend="reference")).mean() > 0.9


# --------------------------------------------------------------------------- the digits


@pytest.fixture(scope="module")
def sklearn():
    return pytest.importorskip("sklearn", reason="scikit-learn not installed "
                               "(pip install 'sdnn_dask[train]'): the digits are not run")


def test_digits_data(sklearn):
    data = load_digits_1024(seed=0)
    again = load_digits_1024(seed=0)
    assert data.x_train.shape == (1437, 1024) and data.x_test.shape == (360, 1024)
    assert data.x_train.dtype == np.float32
    assert data.x_train.min() == 0.0 and data.x_train.max() == 1.0
    assert np.array_equal(data.x_test, again.x_test) and np.array_equal(data.y_test,
                                                                         again.y_test)
    assert not np.array_equal(load_digits_1024(seed=1).y_test, data.y_test)
    assert sorted(np.unique(data.y_test)) == list(range(10))
    nearest = load_digits_1024(seed=0, method="nearest")
    images = nearest.x_train.reshape(-1, 32, 32)
    assert np.array_equal(images, np.kron(images[:, ::4, ::4], np.ones((4, 4))))


def test_digits_without_scikit_learn_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn now raises
    with pytest.raises(ImportError, match=r"pip install 'sdnn_dask\[train\]'"):
        load_digits_1024()


def test_train_digits_learns(sklearn):
    t0 = time.perf_counter()
    history = train_digits(layers=4, epochs=10, batch=32, lr=0.01, seed=0)
    seconds = time.perf_counter() - t0
    assert list(history.columns) == ["epoch", "loss", "train_accuracy", "test_accuracy",
                                     "seconds"]
    assert history.epoch.tolist() == list(range(1, 11))
    loss = history.loss.to_numpy()
    assert loss[-1] < 0.25 * loss[0]  # the loss falls ...
    assert (np.diff(loss) < 0).sum() >= 7  # ... nearly every epoch
    assert history.test_accuracy.iloc[-1] >= 0.90
    assert history.train_accuracy.iloc[-1] >= 0.90
    assert seconds < 60


def test_train_digits_reference_backend_runs(sklearn):
    history, model = train_digits(layers=1, epochs=1, batch=64, lr=0.02, seed=1,
                                  backend="reference", return_model=True)
    assert model.dtype == np.float64 and len(history) == 1
    assert history.test_accuracy.iloc[0] > 0.5


def test_network_as_pattern_ignores_its_values():
    net = Network([sp.identity(4, format="csr") * 3], bias=-7.0, ymax=5.0)
    model = init_model(net, classes=2, seed=0)
    assert model.ymax == 5.0 and (model.biases[0] == 0).all()
    assert not np.allclose(model.weights[0].data, 3.0)


def test_backward_into_one_vector_gives_the_same_gradients():
    """``backward(..., out=v)``: the same bits as the arrays it returns otherwise, every
    gradient a view of ``v`` in the order of ``parameters()`` (what data parallelism
    reduces without a copy)."""
    from sdnn_dask.data.radixnet import make_network
    from sdnn_dask.training import compiled, init_model

    rng = np.random.default_rng(3)
    model = init_model(make_network(1024, 3), classes=10, seed=1)
    x, labels = rng.random((19, 1024), dtype=np.float32), rng.integers(0, 10, 19)
    _, plain = compiled.backward(model, compiled.forward(model, x), labels)
    size = sum(p.size for p in model.parameters())
    out = np.full(size, np.nan, np.float32)
    _, viewed = compiled.backward(model, compiled.forward(model, x), labels, out=out)
    np.testing.assert_array_equal(out, np.concatenate([a.ravel() for a in plain.arrays()]))
    for a, b in zip(plain.arrays(), viewed.arrays(), strict=True):
        np.testing.assert_array_equal(a, b)
        assert np.shares_memory(b, out)
    with pytest.raises(ValueError, match="float32 vector"):
        compiled.backward(model, compiled.forward(model, x), labels, out=out[:-1])
