"""A worker killed mid-run (SIGKILL of its process, for real) on a LocalCluster of its own.

What happens, per strategy (see README, Faults):

- data: the blocks the dead worker held were scattered, so Dask cannot recompute them and
  cancels their tasks (``FutureCancelledError``, "already forgotten"); the executor sends
  them again and reruns them: the run still equals the serial reference.
- model and hybrid: the tasks are pinned to the dead worker's address, which its nanny
  does not bring back; the run raises ``WorkerLostError`` at once, and the next run on the
  same executor places its plans on the workers connected then and is right. (Why it
  polls: Dask keeps a pinned task whose worker died waiting for ever, without an error.)
  With the direct transport the surviving parts stop too (no part waits for a piece that
  will never come) and the run's state is gone from every worker; a run interrupted by
  the caller (``KeyboardInterrupt``) or cancelled (``client.cancel``) leaves no task behind.
- compare: a run that raises leaves ``results/`` exactly as it was.

Each test checks that the kill really landed mid-run (and fails loudly otherwise): the
victim was running one of the run's tasks when it was killed, and afterwards is no longer
connected while its nanny's new worker is.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import dask
import numpy as np
import pytest
from distributed import Future, wait

from sdnn_dask.cli import main
from sdnn_dask.cluster import local_client
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import (
    DataParallelExecutor,
    ModelParallelExecutor,
    WorkerLostError,
    run_serial,
)
from sdnn_dask.parallel.faults import connected, gather_pinned, lost_reasons
from sdnn_dask.parallel.transport.exchange import RunAborted
from sdnn_dask.parallel.transport.run import active_runs
from sdnn_dask.study.training_comparison import make_trainer
from sdnn_dask.testing import assert_same_result
from sdnn_dask.training import SGD, fit, fit_trainer, init_model

pytestmark = pytest.mark.timeout(240)

KILL_DELAY = 0.3  # seconds between seeing the victim run a task of the run and killing it
PROMPT = 30.0  # seconds a run may take to raise after the kill (it takes about 0.1)
PROMPT_DIRECT = 2.0  # the direct transport's promise
PREFIX = {"graph": "step-", "direct": "part-"}  # keys of a run's tasks


class Killer(threading.Thread):
    """SIGKILL the process of the first worker seen running a task whose key starts with
    ``prefix``, ``delay`` seconds after seeing it (watching the scheduler from a thread)."""

    def __init__(self, client, prefix: str, delay: float = KILL_DELAY, timeout: float = 120):
        super().__init__(daemon=True)
        self.client, self.prefix, self.delay, self.timeout = client, prefix, delay, timeout
        self.pids: dict[str, int] = client.run(os.getpid)
        self.victim: str | None = None
        self.killed_at: float | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline and self.victim is None:
                for address, keys in self.client.processing().items():
                    if address in self.pids and any(str(k).startswith(self.prefix)
                                                    for k in keys):
                        time.sleep(self.delay)
                        os.kill(self.pids[address], signal.SIGKILL)
                        self.victim, self.killed_at = address, time.monotonic()
                        return
                time.sleep(0.01)
        except BaseException as error:  # reported by check()
            self.error = error

    def check(self, ended_at: float) -> str:
        """Join; assert the kill happened before ``ended_at`` and the nanny replaced the
        worker (new address, new process). Returns the victim's address."""
        self.join(timeout=self.timeout)
        assert self.error is None, f"the killer thread failed: {self.error!r}"
        assert self.victim is not None, (
            f"no worker was killed: no {self.prefix}* task was seen running (run too short?)")
        assert self.killed_at < ended_at, "the worker was killed after the run had ended"
        deadline = time.monotonic() + 60
        while True:  # the scheduler drops the victim, its nanny starts a new worker
            workers = set(self.client.nthreads())
            if self.victim not in workers and len(workers) == len(self.pids):
                break
            assert time.monotonic() < deadline, (
                f"60 s after the kill the workers are {sorted(workers)}; expected "
                f"{len(self.pids)}, without {self.victim}")
            time.sleep(0.1)
        pids = self.client.run(os.getpid)
        assert self.victim not in pids and self.pids[self.victim] not in pids.values()
        return self.victim


@pytest.fixture(autouse=True)
def every_row_computed():
    """The kills must land inside a task, and the run lengths below are every row's and
    every neuron's: with identical rows and identical neurons computed once a 30000-row
    block of 1024-120 takes about 0.1 s, within KILL_DELAY of being seen (CI saw the
    victim's results gathered before it died; with only classes off, 0.3 s, and it raced
    once)."""
    with dask.config.set({"sdnn.kernel.dedup": False, "sdnn.kernel.classes": False}):
        yield


@pytest.fixture(scope="module")
def network():
    return make_network(1024, 120, seed=0)


@pytest.fixture(scope="module")
def data_problem(network):
    inputs = make_inputs(60000, 1024, seed=0)  # ~1 s a block of the two: the kill lands inside
    return inputs, run_serial(network, inputs, "kernel")


@pytest.fixture(scope="module")
def model_problem(network):
    inputs = make_inputs(6000, 1024, seed=1)  # ~3-7 s a run here
    return inputs, run_serial(network, inputs, "kernel")


@pytest.fixture
def cluster():
    """Two single-threaded worker processes with nannies: a killed worker is restarted,
    under a new address."""
    with local_client(2) as client:
        yield client


def test_data_parallel_survives_a_killed_worker(cluster, network, data_problem):
    inputs, reference = data_problem
    executor = DataParallelExecutor(cluster, network)
    killer = Killer(cluster, "run_block")
    killer.start()
    result = executor.run(inputs, partition="hash")
    victim = killer.check(time.monotonic())
    assert_same_result(result, reference)
    # the victim ran a block when it died; that block was sent again and ran elsewhere
    assert victim not in set(result.blocks["worker"])
    assert len(result.blocks) == 2 and result.blocks["rows"].sum() == inputs.shape[0]
    # the next run uses the restarted worker too (weights, allocator and kernels set up)
    again = executor.run(inputs, partition="block")
    assert_same_result(again, reference)
    assert set(again.blocks["worker"]) == set(cluster.nthreads())


def test_data_parallel_merged_blocks_survive_a_killed_worker(cluster, network, data_problem):
    """Several blocks a worker: one task runs them all, merged (``run_blocks``); the dead
    worker's blocks are sent again and that task reruns elsewhere."""
    inputs, reference = data_problem
    executor = DataParallelExecutor(cluster, network)
    killer = Killer(cluster, "run_blocks")
    killer.start()
    result = executor.run(inputs, partition="hash", n_blocks=6)
    victim = killer.check(time.monotonic())
    assert_same_result(result, reference)
    assert victim not in set(result.blocks["worker"])
    assert sorted(result.blocks["block"]) == list(range(6))


def test_dynamic_placement_raises_on_a_killed_worker_then_recovers(cluster, network,
                                                                   data_problem):
    """Which blocks the dead worker had taken from the queue is its own state: the run
    raises, and the next one (on the restarted worker too) is right."""
    inputs, reference = data_problem
    executor = DataParallelExecutor(cluster, network)
    killer = Killer(cluster, "drain_queue")
    killer.start()
    with pytest.raises(WorkerLostError, match=r"data run aborted: worker .* died mid-run"):
        executor.run(inputs, partition="hash", n_blocks=16, placement="dynamic")
    raised_at = time.monotonic()
    victim = killer.check(raised_at)
    assert raised_at - killer.killed_at < PROMPT, "the run did not fail promptly"
    again = executor.run(inputs, partition="hash", n_blocks=16, placement="dynamic")
    assert_same_result(again, reference)
    assert victim not in set(again.blocks["worker"])


def _settled(client, timeout: float = PROMPT_DIRECT, prefix: str = "part-") -> None:
    """Within ``timeout`` no task of a direct run (keys starting with ``prefix``) is
    processing and no worker holds a run's state."""
    deadline = time.monotonic() + timeout
    while True:
        busy = [k for keys in client.processing().values() for k in keys
                if str(k).startswith(prefix)]
        state = {w: t for w, t in active_runs(client).items() if t}
        if not busy and not state:
            return
        assert time.monotonic() < deadline, (
            f"{timeout} s on, tasks still processing: {busy}; run state on workers: {state}")
        time.sleep(0.05)


@pytest.mark.parametrize("transport", ["direct", "graph"])
@pytest.mark.parametrize("row_groups", [1, 2], ids=["model", "hybrid"])
def test_model_parallel_raises_on_a_killed_worker_then_recovers(cluster, network,
                                                                model_problem, data_problem,
                                                                row_groups, transport):
    # the direct transport is fast: give it the larger input so the kill lands mid-run
    inputs, reference = data_problem if transport == "direct" else model_problem
    strategy = "model" if row_groups == 1 else "hybrid"
    executor = ModelParallelExecutor(cluster, network)
    killer = Killer(cluster, PREFIX[transport])
    killer.start()
    with pytest.raises(WorkerLostError, match=f"{strategy} run aborted: worker .* died "
                                              "mid-run.*run it again") as raised:
        executor.run(inputs, partition="hash", k=2, row_groups=row_groups,
                     transport=transport)
    raised_at = time.monotonic()
    victim = killer.check(raised_at)
    assert raised.value.strategy == strategy and raised.value.lost == [victim]
    prompt = PROMPT_DIRECT if transport == "direct" else PROMPT
    assert raised_at - killer.killed_at < prompt, "the run did not fail promptly"
    if transport == "direct":
        _settled(cluster)
    # the same executor places its plans again, on the workers connected now
    result = executor.run(inputs, partition="hash", k=2, row_groups=row_groups,
                          transport=transport)
    assert_same_result(result, reference)
    assert result.strategy == strategy and result.bytes_moved > 0
    assert set(result.blocks["worker"]) == set(cluster.nthreads())


def _later(seconds: float, action) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def _when_running(client, action, timeout: float = 60, prefix: str = "part-"
                  ) -> threading.Thread:
    """Call ``action(keys)`` from a thread once tasks of a direct run (keys starting with
    ``prefix``) are processing."""
    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            keys = [k for ks in client.processing().values() for k in ks
                    if str(k).startswith(prefix)]
            if keys:
                time.sleep(KILL_DELAY)
                action(keys)
                return
            time.sleep(0.01)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_direct_run_interrupted_by_the_caller_leaves_nothing_behind(cluster, network,
                                                                    data_problem):
    inputs, reference = data_problem
    executor = ModelParallelExecutor(cluster, network)
    # Ctrl-C as a terminal gives it (importing dask_jobqueue, as other tests do, replaces
    # the handler with one that exits)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        watcher = _when_running(cluster, lambda keys: _thread.interrupt_main())
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            executor.run(inputs, partition="hash", k=2)
        watcher.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 30
    _settled(cluster)
    assert_same_result(executor.run(inputs, partition="hash", k=2), reference)


def test_direct_run_cancelled_by_the_client_leaves_nothing_behind(cluster, network,
                                                                  data_problem):
    inputs, reference = data_problem
    executor = ModelParallelExecutor(cluster, network)
    watcher = _when_running(cluster, lambda keys: cluster.cancel(
        [Future(k, cluster) for k in keys]))
    with pytest.raises(RunAborted, match="cancelled"):
        executor.run(inputs, partition="hash", k=2)
    watcher.join()
    _settled(cluster)
    assert_same_result(executor.run(inputs, partition="hash", k=2), reference)


def _pinned_task(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_a_task_pinned_to_a_dead_worker_waits_forever_unless_guarded(cluster):
    """Why model runs poll their workers: Dask keeps a pinned task whose worker died (and
    came back under another address) waiting, with no error, for ever."""
    victim = sorted(connected(cluster))[0]  # as an executor does: its process is seen
    future = cluster.submit(_pinned_task, 20, workers=[victim], allow_other_workers=False,
                            pure=False)
    killer = Killer(cluster, "_pinned_task")
    killer.start()
    assert killer.check(time.monotonic() + 20) == victim
    with cluster.as_current(), pytest.raises(TimeoutError):
        wait([future], timeout=3)  # nothing it needs was lost: it just waits
    assert future.status == "pending"
    start = time.monotonic()
    with pytest.raises(WorkerLostError, match=f"model run aborted: worker {victim} died"):
        gather_pinned(cluster, [future], [victim], strategy="model")
    assert time.monotonic() - start < PROMPT
    assert future.cancelled()


def test_a_worker_that_stops_answering_is_not_said_to_have_died():
    """A worker alive but cut off (here stopped with SIGSTOP: its connections stay open,
    its heartbeats stop) is removed by the scheduler for missed heartbeats. The old message
    said it "died mid-run"; it is said to have stopped answering, hung or cut off."""
    with dask.config.set({"distributed.scheduler.worker-ttl": "1s"}), \
            local_client(2) as client:
        victim = sorted(client.nthreads())[0]
        pid = client.run(os.getpid)[victim]
        future = client.submit(_pinned_task, 60, workers=[victim], allow_other_workers=False,
                               pure=False)
        deadline = time.monotonic() + 60
        while not client.processing().get(victim):
            assert time.monotonic() < deadline, "the pinned task never started"
            time.sleep(0.05)
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(WorkerLostError) as raised:
                gather_pinned(client, [future], [victim], strategy="model")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)  # its nanny may have killed it already
    assert raised.value.lost == [victim] and raised.value.reasons == {victim: "unanswering"}
    assert (f"model run aborted: worker {victim} stopped answering mid-run (the scheduler "
            "missed its heartbeats: hung or cut off from the network)") in str(raised.value)
    assert "died" not in str(raised.value)


def test_a_lost_worker_is_said_to_have_died_only_when_known():
    """Died: its process, on this machine, has ended. Lost (died or unreachable): it still
    runs (cut off), it ran on another machine, or it was never seen."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    here, there = "tcp://127.0.0.1:1", "tcp://10.255.255.1:1"
    known = {here: ("127.0.0.1", proc.pid), there: ("10.255.255.1", proc.pid)}
    try:
        assert lost_reasons(None, [here, there], known) == {here: "lost", there: "lost"}
    finally:
        proc.kill()
        proc.wait()
    assert lost_reasons(None, [here, there], known) == {here: "died", there: "lost"}
    died = WorkerLostError("model", [here], reasons={here: "died"})
    assert f"worker {here} died mid-run. Its tasks were cancelled" in str(died)
    for reasons in ({there: "lost"}, None):  # None: a worker never seen from here
        unknown = WorkerLostError("data", [there], reasons=reasons)
        assert (f"data run aborted: worker {there} was lost mid-run (died or unreachable). "
                "Its tasks were cancelled") in str(unknown)
        assert unknown.reasons == {there: "lost"}
    mixed = WorkerLostError("model", [here, there], reasons={here: "died", there: "lost"})
    assert "was lost mid-run (died or unreachable)" in str(mixed)
    nobody = WorkerLostError("hybrid", [])
    assert "a worker holding part of its data was lost mid-run (died or unreachable)" in str(
        nobody)


def test_compare_leaves_results_untouched_when_a_run_fails(cluster, tmp_path, capsys):
    """``sdnn-dask compare`` on the cluster; a worker killed during its model run."""
    results = tmp_path / "results"
    results.mkdir()
    old = {"records.csv": "study,run_id\nold,1\n", "layers.csv": "study,run_id\nold,1\n",
           "summary.md": "# the previous study\n"}
    for name, text in old.items():
        (results / name).write_text(text)
    killer = Killer(cluster, PREFIX["direct"], delay=0.1)  # compare's default transport
    killer.start()
    code = main(["compare", "-N", "1024", "-L", "120", "-n", "20000", "--seed", "1",
                 "--partitions", "none", "--model", "hash", "--hybrid", "none",
                 "--no-warm-up",  # the killer must hit the timed run, not the warm-up
                 "--cluster", cluster.scheduler.address, "--results", str(results), "-q"])
    killer.check(time.monotonic())
    err = capsys.readouterr().err
    assert code == 3, err
    assert "error: model run aborted" in err and "nothing was returned or recorded" in err
    # every file as it was, nothing new (no plot, no temporary files)
    assert sorted(p.name for p in results.iterdir()) == sorted(old)
    assert {name: (results / name).read_text() for name in old} == old


@pytest.mark.parametrize("strategy", ["data", "model", "hybrid"])
def test_a_worker_killed_just_before_a_run(cluster, network, model_problem, strategy):
    """Killed between two runs, before the scheduler has noticed: placing the data fails
    under the executor, which places it again on the workers left (no CommClosedError)."""
    inputs, reference = model_problem
    executor = (DataParallelExecutor(cluster, network) if strategy == "data"
                else ModelParallelExecutor(cluster, network))
    kwargs = {} if strategy == "data" else {"k": 2, "row_groups": 1 + (strategy == "hybrid")}
    executor.run(inputs[:500], **kwargs)
    pids = cluster.run(os.getpid)
    victim = sorted(pids)[0]
    os.kill(pids[victim], signal.SIGKILL)
    result = executor.run(inputs, **kwargs)
    assert_same_result(result, reference)
    assert victim not in set(result.blocks["worker"])


def test_copying_to_a_worker_killed_just_before_ends(network):
    """keep_on, asked to copy weights to a worker killed a moment before (the scheduler
    may still list it), ends with an error the executors place again on, never waits for
    ever: Dask's replicate retried the dead worker in a loop that never ended (CI)."""
    from distributed.comm.core import CommClosedError

    from sdnn_dask.parallel.placement import keep_on

    # the abandoned replicate retries the dead worker until the cluster closes, each
    # connection attempt up to this timeout (30 s by default: the test's teardown)
    with dask.config.set({"distributed.comm.timeouts.connect": "3s"}), \
            local_client(2) as cluster:
        pids = cluster.run(os.getpid)
        workers = sorted(pids)
        weights = cluster.scatter(network, workers=workers[1:], hash=False)
        os.kill(pids[workers[0]], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises((CommClosedError, RuntimeError)):
            keep_on(cluster, weights, workers)
        assert time.monotonic() - start < 60


# ------------------------------------------------------------------ training loops

#: Keys of a trainer's slot tasks (its id, then "-loop-").
TRAINER_PREFIX = {"data": "sdnn-train-", "model": "sdnn-mptrain-", "hybrid": "sdnn-mptrain-"}


@pytest.fixture(scope="module")
def training_rows():
    """Rows enough for an epoch of 10 steps of 512 at 120 layers (~1 s a step here)."""
    x = make_inputs(5120, 1024, seed=2).toarray()
    return x, np.random.default_rng(2).integers(0, 10, x.shape[0])


def _fit(client, network, strategy, x, y):
    trainer = make_trainer(client, strategy, "block", init_model(network, 10, seed=1), k=2,
                           row_groups=2, lr=0.01, momentum=0.9)
    return trainer, lambda: fit_trainer(trainer, x, y, x[:64], y[:64], epochs=1, batch=512)


def _fits_as_serial(client, network, strategy, x, y):
    """A new trainer's epoch on the workers connected now equals the serial epoch's."""
    trainer, run = _fit(client, network, strategy, x, y)
    with trainer:
        history = run()
    serial = init_model(network, 10, seed=1)
    expected = fit(serial, x, y, x[:64], y[:64], epochs=1, batch=512,
                   optimizer=SGD(serial, 0.01, momentum=0.9))
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-3)


@pytest.mark.parametrize("strategy", ["data", "model", "hybrid"])
def test_a_training_loop_raises_on_a_killed_worker_then_recovers(cluster, network,
                                                                 training_rows, strategy):
    """A worker killed while its slots run an epoch: the fit raises WorkerLostError
    naming it within 2 s, no run state is left on the survivor, the broken trainer
    closes, and a new trainer's fit on the workers connected then equals the serial
    fit."""
    x, y = training_rows
    trainer, run = _fit(cluster, network, strategy, x, y)
    killer = Killer(cluster, TRAINER_PREFIX[strategy])
    killer.start()
    with pytest.raises(WorkerLostError, match=f"{strategy} run aborted: worker .* died "
                                              "mid-run") as caught:
        run()
    raised_at = time.monotonic()
    victim = killer.check(raised_at)
    assert victim in str(caught.value)
    assert raised_at - killer.killed_at < PROMPT_DIRECT, "the fit did not fail promptly"
    _settled(cluster, prefix=TRAINER_PREFIX[strategy])
    trainer.close()  # the lost worker skipped, the survivor's state dropped
    _fits_as_serial(cluster, network, strategy, x[:1024], y[:1024])


def test_a_training_loop_interrupted_by_the_caller_leaves_nothing_behind(
        cluster, network, training_rows):
    x, y = training_rows
    trainer, run = _fit(cluster, network, "model", x, y)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        watcher = _when_running(cluster, lambda keys: _thread.interrupt_main(),
                                prefix=TRAINER_PREFIX["model"])
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            run()
        watcher.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 30
    _settled(cluster, prefix=TRAINER_PREFIX["model"])
    trainer.close()
    _fits_as_serial(cluster, network, "model", x[:1024], y[:1024])
