"""Adversarial command lines (issue 34): each mistake is one ``error:`` line at exit 2, and
Ctrl-C one line at exit 130, with no traceback and no worker log before them.

Every case goes through the real command line (``main`` in this process, or
``python -m sdnn_dask`` where signals, worker processes or a hang are what is tested) on
tiny problems, with real LocalClusters.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_run import ENV, one_error_line, run, spawned_workers
from cli_run import interrupt as interrupt_when

from sdnn_dask.cli import main
from sdnn_dask.cluster.limits import local_worker_limit

#: Serial runs only on a tiny generated problem: nothing to start but the command.
SERIAL = ["-N", "1024", "-L", "2", "-n", "50", "--partitions", "none", "--model", "none",
          "--hybrid", "none", "--no-write", "-q"]
INTERRUPTED = "interrupted; nothing was written for unfinished runs\n"


def command(*argv: str, timeout: float = 120, memory: int | None = None
            ) -> subprocess.CompletedProcess:
    """``python -m sdnn_dask argv`` in its own process group, killed whole on a timeout
    (the old code hung on some of these: the test then fails instead of hanging), its
    address space capped at ``memory`` bytes if given (the old code went for the memory on
    others: a MemoryError then, not the machine swapping)."""
    def limit() -> None:
        if memory is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    proc = subprocess.Popen([sys.executable, "-m", "sdnn_dask", *argv], env=ENV,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"sdnn-dask {' '.join(argv)} still running after {timeout} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def interrupt(argv: list[str], workers: int, after: float) -> tuple[int, str]:
    """Ctrl-C to ``sdnn-dask argv`` ``after`` seconds once its ``workers`` worker
    processes exist (:func:`cli_run.interrupt`). Returns the exit code and stderr."""
    return interrupt_when(argv, lambda proc: len(spawned_workers(proc.pid)) >= workers,
                          after=after, limit=120, waiting="the workers did not start in time")


# --------------------------------------------------------------------------- --workers


@pytest.mark.parametrize("workers", ["100000", "limit + 1"])
def test_more_local_workers_than_the_machine_hosts_are_refused_up_front(workers):
    """The old code started 100000 worker processes and hung, deaf to Ctrl-C."""
    limit, _ = local_worker_limit()
    n = str(limit + 1) if workers == "limit + 1" else workers
    proc = command("compare", *SERIAL, "--workers", n, timeout=60)
    assert proc.returncode == 2
    message = one_error_line(proc.stderr)
    assert message.startswith(f"error: --workers {n}: a LocalCluster on this machine takes at "
                              f"most {limit} worker processes")
    assert "max-workers-per-core" in message or "min-worker-memory" in message


def test_the_local_limit_follows_the_setting(tmp_path):
    """The rule is a setting: one worker per core refuses cores + 1 (through the Dask
    config's environment variables, as a user would set it)."""
    import dask.system

    cores = dask.system.CPU_COUNT
    env = {**ENV, "DASK_SDNN__LOCAL__MAX_WORKERS_PER_CORE": "1"}
    proc = subprocess.run([sys.executable, "-m", "sdnn_dask", "infer", "--strategy", "data",
                           "-L", "2", "-n", "20", "--workers", str(cores + 1), "-q"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert one_error_line(proc.stderr).startswith(
        f"error: --workers {cores + 1}: a LocalCluster on this machine takes at most {cores} "
        "worker processes (1 per core")


def test_more_slurm_workers_than_the_limit_are_refused_before_any_job(capsys):
    """No sbatch is run: the old code imported dask-jobqueue and submitted 5000 jobs (or
    failed on the missing extra instead of saying the number is the problem)."""
    code, err = run(["infer", "--cluster", "slurm", "--workers", "5000", "-L", "2"], capsys)
    assert code == 2
    assert one_error_line(err) == ("error: --workers 5000: a SLURM cluster asks for at most "
                                   "1000 workers (each job waits in the queue with "
                                   "everyone's; sdnn.slurm.max-workers allows more)\n")


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("argv, message", [
    (["--lr", "inf"], "error: --lr: lr must be a number in (0, 1000] (past it training "
                      "diverges to NaN weights), got inf"),
    (["--lr", "1e999"], "error: --lr: lr must be a number in (0, 1000] (past it training "
                        "diverges to NaN weights), got inf"),
    (["--lr", "nan"], "error: --lr: lr must be a number in (0, 1000], got nan"),
    (["--momentum", "nan"], "error: --momentum: momentum must be in [0, 1), got nan"),
    (["--momentum=-inf"], "error: --momentum: momentum must be in [0, 1), got -inf"),
])
def test_training_rates_are_checked_up_front(argv, message, capsys):
    """``--lr inf`` trained on: NaN losses and a FAIL verdict at exit 1."""
    code, err = run(["train", "-L", "2", "--workers", "2", "--no-write", "-q", *argv], capsys)
    assert code == 2
    assert one_error_line(err).startswith(message)


@pytest.mark.parametrize("argv, cut", [
    (["train", "--task", "x" * 100_000], "...(100"),       # argparse's invalid choice
    (["train", "--model", "x" * 100_000], "'...(100000 chars); choose from"),
    (["train", "--batches", "x" * 100_000], "'...(100000 chars)"),
    (["infer", "--strategy", "model", "--partition", "x" * 100_000], "...(1000"),
])
def test_a_huge_value_is_quoted_cut(argv, cut, capsys):
    """The old code quoted each in full: a 100 kB ``error:`` line."""
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "-L", "2", "-q"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert cut in err
    assert len(err.splitlines()[-1]) < 1100, err[-2000:]


#: An address space generous for the command, far short of what the old code reached for.
CAPPED = 4 * 2**30


@pytest.mark.parametrize("argv, message", [
    (["train", "--batches", "100000000"], "error: --batches 100000000 with --steps 3: the "
                                          "inputs and one step's activations of a 1024-2 "
                                          "network alone take"),
    (["infer", "--strategy", "kernel", "-n", "1000000000000"], "error: --inputs "
                                                               "1000000000000: "),
    (["compare", "-n", "100", "--tile", "1000000000"], "error: --inputs 100 x --tile "
                                                       "1000000000: "),
    (["generate", "OUT", "-n", "1000000000000"], "error: --inputs 1000000000000: "),
])
def test_sizes_past_memory_are_refused_before_anything_is_made(argv, message, tmp_path):
    """The old code made them: a MemoryError traceback, or the machine swapping (here,
    under a capped address space, the traceback)."""
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    extra = ["--no-write"] if argv[0] == "train" else []
    proc = command(*argv, "-L", "2", *extra, "-q", memory=CAPPED)
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc.stderr).startswith(message)
    assert "would take about" in proc.stderr or "alone take" in proc.stderr


def test_a_digits_batch_over_the_training_rows_is_refused(capsys):
    """The old code ran an epoch as one step of every row and reported it as batch 5000."""
    pytest.importorskip("sklearn", reason="the digits need the train extra")
    code, err = run(["train", "--task", "digits", "-L", "2", "--batch", "5000", "--epochs",
                     "1", "--workers", "2", "--no-write", "-q"], capsys)
    assert code == 2
    assert one_error_line(err).startswith("error: --batch 5000: more rows than the ")


# --------------------------------------------------------------------------- quiet workers


@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory) -> Path:
    """A tiny network store whose second layer has one column changed in place (same size,
    so nothing shows until a reader checks the file)."""
    folder = tmp_path_factory.mktemp("store")
    assert main(["generate", str(folder), "-N", "1024", "-L", "3", "--store-only", "-q"]) == 0
    [store] = folder.glob("*.store")
    indices = np.load(store / "l2.indices.npy", mmap_mode="r+")
    indices[5] = 1000 if indices[5] != 1000 else 1001
    indices.flush()
    del indices
    return store


def test_a_task_error_on_a_worker_is_one_error_line(damaged_store):
    """Data parallelism streams the store on the workers: the damaged layer raises in a
    task there. The old code let the worker log its ``Compute Failed`` blob (and a task
    cancelled on close) on the terminal before the client's ``error:`` line."""
    proc = command("infer", "--data", str(damaged_store), "-N", "1024", "-L", "3", "-n",
                   "100", "--strategy", "data", "--workers", "2", "--weights", "streamed",
                   "-q")
    assert proc.returncode == 2, proc.stderr
    message = one_error_line(proc.stderr)
    assert "l2.indices.npy" in message
    assert "Compute Failed" not in proc.stderr and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- Ctrl-C

#: A compare long enough to be interrupted mid-run (20 repeats of every strategy).
LONG_COMPARE = ["compare", "-N", "1024", "-L", "30", "-n", "3000", "--workers", "2",
                "--model", "block", "--hybrid", "none", "--repeat", "20", "--no-write",
                "-q"]


def test_ctrl_c_during_compare_is_one_line():
    """The old code printed a KeyboardInterrupt traceback from every worker process (66
    lines for two) around its own line: the workers share the terminal's process group."""
    code, err = interrupt(LONG_COMPARE, workers=2, after=3.0)
    assert code == 130
    assert err == INTERRUPTED


def test_ctrl_c_while_the_workers_start_is_one_line():
    """Interrupted as soon as the worker processes exist, still importing: nothing from
    them, and the half-started cluster closed before the line is printed."""
    code, err = interrupt(LONG_COMPARE, workers=2, after=0.0)
    assert code == 130
    assert err == INTERRUPTED


def test_a_heartbeat_that_meets_the_closing_scheduler_is_quiet():
    """Under load, a worker's heartbeat can meet the scheduler closing on the way out of a
    Ctrl-C (seen once in 12 with the cores busy): that record is dropped; a scheduler that
    cannot be reached is still reported, and so is everything else."""
    import logging

    from distributed.comm.core import CommClosedError

    from sdnn_dask.cluster.quiet import quiet_worker_logs

    quiet_worker_logs()
    logger = logging.getLogger("distributed.worker")

    def kept(message: str, error: BaseException | None) -> bool:
        info = (type(error), error, None) if error is not None else None
        record = logger.makeRecord(logger.name, logging.ERROR, __file__, 1, message, (),
                                   info)
        return all(f.filter(record) for f in logger.filters)

    heartbeat = "Failed to communicate with scheduler during heartbeat."
    assert not kept(heartbeat, CommClosedError("in <TCP (closed)>: Stream is closed"))
    assert kept(heartbeat, OSError("Timed out trying to connect"))
    assert not kept("Compute Failed", None)
    assert kept("Worker is at 95% memory usage", None)
