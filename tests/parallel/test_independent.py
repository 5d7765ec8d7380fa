"""Every executor path against answers it shares no code with.

The expected outputs come from :mod:`dense_reference` (dense float64 NumPy; integer
networks make float32 sums exact, so the match is exact, cancellations and positive biases
included). The expected communication of model parallelism comes from the partition and
the activations' nonzero pattern alone: which columns each part must read from each other
part (the structure of ``W``), and how many nonzeros and rows those columns hold.
"""

from __future__ import annotations

import time

import dask.config
import numpy as np
import pytest
import scipy.sparse as sp
from dense_reference import dense_infer, integer_inputs, integer_network

from sdnn_dask.core.network import Network
from sdnn_dask.parallel import TRANSPORTS, DataParallelExecutor, ModelParallelExecutor, run_serial
from sdnn_dask.partition import (
    ROW_PARTITIONS,
    NeuronPartition,
    make_neuron_partition,
    make_row_partition,
)

N, LAYERS, ROWS = 96, 7, 230


@pytest.fixture(autouse=True)
def every_row_computed():
    """The counts recounted here (pieces exchanged, rows received) are every row's: the
    papers' setting, identical rows not merged (test_model_dedup and test_dedup compare
    the two)."""
    with dask.config.set({"sdnn.kernel.dedup": False}):
        yield


@pytest.fixture(scope="module", params=["positive", "mixed", "negative"])
def problem(request):
    """A positive bias (every row lives on; cancelled sums must stay bias-free), per-neuron
    biases of both signs, and a negative bias (rows die)."""
    rng = np.random.default_rng(11)
    weights, bias, _ = integer_network(rng, N, LAYERS, 6 / N, request.param)
    ymax = 4.0
    inputs = integer_inputs(rng, ROWS, N, 0.03)
    net = Network(weights, bias=bias, ymax=ymax)
    return net, inputs, _activations(weights, bias, ymax, inputs)


def _activations(weights, bias, ymax, inputs) -> list[np.ndarray]:
    """Y_0 .. Y_L, densely, by the independent recurrence."""
    ys = [inputs.toarray().astype(np.float64)]
    for w in weights:
        ys.append(dense_infer([w], bias, ymax, ys[-1]))
    return ys


def test_the_problem_is_not_trivial(problem):
    net, _, ys = problem
    final = ys[-1]
    assert 0 < np.count_nonzero(final.any(axis=1))
    assert (final == net.ymax).any() and ((final > 0) & (final < net.ymax)).any()
    if (net.bias < 0).all():
        assert np.count_nonzero(final.any(axis=1)) < ROWS  # some rows die
    # sums that cancel to exactly zero occur, so the bias rule is exercised
    z = ys[0] @ net.layers[0].toarray()
    touched = (ys[0] != 0).astype(float) @ (net.layers[0].toarray() != 0)
    assert ((z == 0) & (touched > 0)).any()


@pytest.mark.parametrize("method", ["reference", "kernel"])
def test_serial(problem, method):
    net, inputs, ys = problem
    start = time.perf_counter()
    result = run_serial(net, inputs, method)
    elapsed = time.perf_counter() - start
    np.testing.assert_array_equal(result.output.toarray(), ys[-1])
    assert (result.strategy, result.partition, result.n_workers, result.n_blocks) == (
        method, "none", 1, 1)
    assert result.n_inputs == ROWS and 0 < result.wall_seconds <= elapsed
    survivors = int(np.count_nonzero(ys[-1].any(axis=1)))
    block = result.blocks.iloc[0]
    assert (block["block"], block["rows"], block["survivors"]) == (0, ROWS, survivors)
    assert block["compute_s"] == result.wall_seconds
    layers = result.layers
    assert (layers["block"] == 0).all() and layers["layer"].tolist() == list(range(1, LAYERS + 1))
    assert layers["rows_out"].tolist() == [int(np.count_nonzero(y.any(axis=1))) for y in ys[1:]]
    with pytest.raises(ValueError, match="unknown serial method 'fast'"):
        run_serial(net, inputs, "fast")


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "separate"])
@pytest.mark.parametrize("partition", ROW_PARTITIONS)
def test_data_parallel(client, problem, partition, merge):
    net, inputs, ys = problem
    with dask.config.set({"sdnn.data-parallel.merge-blocks": merge}):
        result = DataParallelExecutor(client, net, warm_up=False).run(
            inputs, partition=partition, n_blocks=3, seed=5)
    np.testing.assert_array_equal(result.output.toarray(), ys[-1])
    assert (result.strategy, result.partition, result.n_blocks, result.n_workers) == (
        "data", partition, 3, 2)
    # which rows each block held, from the partition's definition; what survived in each
    nbuckets = dask.config.get("sdnn.data-parallel.nbuckets")
    rows = make_row_partition(partition, ROWS, 3, seed=5, nbuckets=nbuckets).blocks()
    alive = ys[-1].any(axis=1)
    blocks = result.blocks.sort_values("block")
    assert blocks["rows"].tolist() == [len(r) for r in rows]
    assert blocks["survivors"].tolist() == [int(alive[r].sum()) for r in rows]
    workers = sorted(client.nthreads())
    assert blocks["worker"].tolist() == [workers[b % 2] for b in range(3)]  # static: pinned
    how = "merged" if merge else "alone"
    assert result.params == {"dedup": False, "classes": True, "placement": "static",
                             "merge_blocks": how,
                             "weights": "resident", **(
        {"seed": 5} if partition == "random" else
        {"nbuckets": nbuckets} if partition == "hash" else {})}
    if partition == "random":  # the default seed is 0; the argument overrides the config
        again = DataParallelExecutor(client, net, warm_up=False).run(
            inputs, partition=partition, n_blocks=3, merge=not merge)
        assert again.params == {"dedup": False, "classes": True, "placement": "static",
                                "seed": 0,
                                "weights": "resident",
                                "merge_blocks": "alone" if merge else "merged"}
        np.testing.assert_array_equal(again.output.toarray(), ys[-1])


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "separate"])
@pytest.mark.parametrize("partition", ROW_PARTITIONS)
def test_dynamic_placement(client, problem, partition, merge):
    """Blocks handed to workers as they free up (merged: taken from a queue, survivors
    merged per worker; separate: one task a block): the same answer, every block run
    once, each block's rows, survivors and work those of the partition's definition."""
    net, inputs, ys = problem
    with dask.config.set({"sdnn.data-parallel.merge-blocks": merge}):
        result = DataParallelExecutor(client, net, warm_up=False).run(
            inputs, partition=partition, n_blocks=7, seed=5, placement="dynamic")
    np.testing.assert_array_equal(result.output.toarray(), ys[-1])
    nbuckets = dask.config.get("sdnn.data-parallel.nbuckets")
    rows = make_row_partition(partition, ROWS, 7, seed=5, nbuckets=nbuckets).blocks()
    alive = ys[-1].any(axis=1)
    blocks = result.blocks.sort_values("block")
    assert blocks["block"].tolist() == list(range(7))
    assert blocks["rows"].tolist() == [len(r) for r in rows]
    assert blocks["survivors"].tolist() == [int(alive[r].sum()) for r in rows]
    assert set(blocks["worker"]) <= set(client.nthreads())
    assert result.params["placement"] == "dynamic" and result.n_blocks == 7
    # the work each block did: its live rows summed over the layers, from the recurrence
    from sdnn_dask import records

    frame = records.run_records(result, study="t").sort_values("block")
    live = [sum(int(np.count_nonzero(y[r].any(axis=1))) for y in ys[:-1]) for r in rows]
    assert frame["row_layers"].tolist() == live
    assert frame["placement"].iloc[0] == "dynamic"
    assert frame["merge_blocks"].iloc[0] == ("merged" if merge else "alone")
    with pytest.raises(ValueError, match="placement must be one of static, dynamic"):
        DataParallelExecutor(client, net, warm_up=False).run(inputs, placement="stealing")


def test_dynamic_placement_gives_every_worker_a_first_block(client, problem):
    """As many blocks as workers: each worker runs one (a worker asking ahead for its
    next block must not take the other's first)."""
    net, inputs, ys = problem
    executor = DataParallelExecutor(client, net, warm_up=False)
    for _ in range(3):
        result = executor.run(inputs, n_blocks=2, placement="dynamic")
        np.testing.assert_array_equal(result.output.toarray(), ys[-1])
        assert result.blocks["worker"].nunique() == 2
    one = executor.run(inputs, n_blocks=1, placement="dynamic")  # fewer blocks than workers
    np.testing.assert_array_equal(one.output.toarray(), ys[-1])


def _expected_communication(net, partition, ys, workers: int) -> dict[int, dict[str, int]]:
    """Per layer: the columns every part reads from other parts (``columns_in``), the
    nonzeros and rows (with a nonzero in them) of those columns, and the bytes of the
    pieces that cross workers to carry them (``bytes_moved``).

    Part ``p`` runs on worker ``p % workers``. A source sends each other worker one piece:
    the union of the columns its parts there read, with the rows that hold a nonzero in
    them. At these sizes (at most 256 rows, under half the entries nonzero) a sparse piece
    is one block of column-major runs: int64 row ids, int32 row and float32 value per
    nonzero, int64 run starts per column plus one, two int64 block bounds
    (``sdnn_dask.parallel.slabs.BlockCSC``); a piece at least half full is a float32
    tile, 4 bytes an entry, beside its row ids. When it serves several parts, their int32
    column positions too.
    """
    parts = partition.parts
    expected = {}
    for layer, w in enumerate(net.layers, start=1):
        y = ys[layer - 1]
        assert y.shape[0] <= 256 and 2 * np.count_nonzero(y) < y.size  # one block, no tiles
        reads = w.tocsc()  # column c of W: the inputs output neuron c reads
        totals = dict.fromkeys(["columns_in", "nnz_in", "rows_received", "bytes_moved"], 0)
        reading: dict[tuple[int, int], np.ndarray] = {}  # (reader, source) -> columns
        for p in range(partition.k):
            own = np.flatnonzero(parts[layer] == p)
            needed = np.unique(np.concatenate(
                [reads.indices[reads.indptr[c]:reads.indptr[c + 1]] for c in own]
                or [np.empty(0, np.int32)]))
            for q in range(partition.k):
                cols = needed[parts[layer - 1][needed] == q]
                if q != p and len(cols):  # what part p reads from another part
                    reading[p, q] = cols
                    block = y[:, cols]
                    totals["columns_in"] += len(cols)
                    totals["nnz_in"] += int(np.count_nonzero(block))
                    totals["rows_received"] += int(np.count_nonzero(block.any(axis=1)))
        for q in range(partition.k):  # one piece per source and other worker with readers
            for worker in {p % workers for p, s in reading if s == q} - {q % workers}:
                served = [p for p, s in reading if s == q and p % workers == worker]
                cols = np.unique(np.concatenate([reading[p, q] for p in served]))
                block = y[:, cols]
                rows, nnz = np.count_nonzero(block.any(axis=1)), np.count_nonzero(block)
                labels = 4 * len(cols) if len(served) > 1 else 0
                values = (4 * len(cols) * rows if rows and 2 * nnz >= len(cols) * rows
                          else 8 * nnz + 8 * (len(cols) + 1) + 16)
                totals["bytes_moved"] += int(8 * rows + values + labels)
        expected[layer] = totals
    return expected


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("method", "k", "row_groups"),
                         [("block", 2, 1), ("per-level", 3, 1), ("hash", 2, 2)])
def test_model_and_hybrid(client, problem, method, k, row_groups, transport):
    net, inputs, ys = problem
    if method == "per-level":  # every level split its own way, as hypergraph ones are
        rng = np.random.default_rng(4)
        partition = NeuronPartition("random", k, rng.integers(0, k, size=(LAYERS + 1, N)))
    else:
        partition = make_neuron_partition(net, k, method, seed=4)
    result = ModelParallelExecutor(client, net, warm_up=False).run(
        inputs, partition=partition, row_groups=row_groups, transport=transport)
    np.testing.assert_array_equal(result.output.toarray(), ys[-1])
    assert (result.strategy, result.parts, result.transport) == (
        "model" if row_groups == 1 else "hybrid", k, transport)
    assert result.n_blocks == k * row_groups and (result.row_groups or 1) == row_groups
    assert (result.params["k"], result.params["row_groups"], result.params["transport"]) == (
        k, row_groups, transport)
    assert result.params.get("row_partition") == ("block" if row_groups > 1 else None)
    if transport == "direct":  # each part's waiting and sending: within the run's wall time
        layers = result.layers
        for column in ("wait_s", "send_s", "serialise_s", "deserialise_s"):
            per_part = layers.groupby("block")[column].sum()
            assert (layers[column] >= 0).all() and per_part.max() <= result.wall_seconds
    # each part's survivors: the rows of its group alive in the columns it owns
    group_rows = np.array_split(np.arange(ROWS), row_groups)
    blocks = result.blocks.sort_values("block")
    expected_survivors = [
        int(ys[-1][np.ix_(rows, partition.owned(LAYERS, p))].any(axis=1).sum())
        for rows in group_rows for p in range(k)]
    assert blocks["survivors"].tolist() == expected_survivors
    if row_groups != 1:
        return  # the row groups split the rows: the per-layer totals below are for one group
    comm = result.communication.set_index("layer")
    expected = _expected_communication(net, partition, ys, len(client.nthreads()))
    for layer, values in expected.items():
        got = {name: int(comm.loc[layer, name]) for name in values}
        assert got == values, f"layer {layer}"
    assert result.bytes_moved == sum(v["bytes_moved"] for v in expected.values())
    assert result.predicted_volume == sum(v["columns_in"] for v in expected.values())


def test_model_parallel_defaults(client, problem):
    """A partition named, not given: made with seed 0, k = the workers."""
    net, inputs, ys = problem
    result = ModelParallelExecutor(client, net, warm_up=False).run(inputs, partition="random")
    np.testing.assert_array_equal(result.output.toarray(), ys[-1])
    assert result.params["seed"] == 0 and result.parts == 2 and result.transport == "direct"


def test_transfer_logs_are_widened_never_narrowed(client):
    from sdnn_dask.parallel.transfers import _widen, widen_transfer_logs

    widen_transfer_logs(client)
    assert set(client.run(_widen, maxlen=0).values()) == {200_000}  # the documented default
    widen_transfer_logs(client, maxlen=300_000)
    assert set(client.run(_widen, maxlen=10).values()) == {300_000}  # never narrowed


def test_dask_sizes_a_network_by_its_arrays():
    from dask.sizeof import sizeof

    w = sp.csr_matrix(np.eye(4, dtype=np.float32))  # 4 values, 4 indices, 5 pointers
    net = Network([w, w], bias=-0.5)
    # two layers of 4 float32 values, 4 int32 indices and 5 int32 pointers; 4 biases
    assert sizeof(net) == 2 * (16 + 16 + 20) + 16
    _ = net.output_order  # transposes and orders built: they count too
    extra = sum(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes for m in net.transposed)
    assert sizeof(net) == 2 * (16 + 16 + 20) + 16 + extra + sum(
        o.nbytes for o in net.output_order)
