"""Summed PSS of a command and every process it starts (client, nanny, workers), sampled
every 0.2 s: the peak of the sum, each process's peak, and the sum's peak in each phase
(a phase starts at each progress line the command prints on stderr).

    python benchmarks/bench_training_memory.py [--limit-gb 20] -- sdnn-dask train ...

The command is killed (its process group) when the sum passes ``--limit-gb``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

import psutil


def _pss(process: psutil.Process) -> int:
    try:
        info = process.memory_full_info()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return 0
    return int(getattr(info, "pss", info.rss))


def _label(process: psutil.Process) -> str:
    try:
        line = " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return str(process.pid)
    if "spawn_main" in line or "multiprocessing" in line:
        return f"worker/nanny {process.pid}"
    return f"{line[:40]} {process.pid}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-gb", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    root = psutil.Process(child.pid)
    phase = ["start"]
    phases: dict[str, int] = {}
    peaks: dict[str, int] = {}
    peak = [0]
    killed = [False]
    t0 = time.perf_counter()

    def sample() -> None:
        while child.poll() is None:
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            total = 0
            for p in procs:
                pss = _pss(p)
                total += pss
                name = _label(p)
                peaks[name] = max(peaks.get(name, 0), pss)
            peak[0] = max(peak[0], total)
            phases[phase[0]] = max(phases.get(phase[0], 0), total)
            if total > args.limit_gb * 1e9 and not killed[0]:
                killed[0] = True
                print(f"KILLING: {total / 1e9:.2f} GB > {args.limit_gb} GB in {phase[0]}",
                      file=sys.stderr, flush=True)
                os.killpg(child.pid, signal.SIGKILL)
            time.sleep(args.interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    assert child.stderr is not None
    for line in child.stderr:
        sys.stderr.write(f"[{time.perf_counter() - t0:7.1f} s] {line}")
        text = line.strip()
        if text:
            phase[0] = text[:70]
    code = child.wait()
    thread.join()
    print(f"\nexit {code}{' (killed for memory)' if killed[0] else ''}; "
          f"{time.perf_counter() - t0:.0f} s")
    print(f"peak summed PSS: {peak[0] / 1e9:.2f} GB")
    print("per-process peaks (GB):")
    for name, value in sorted(peaks.items(), key=lambda kv: -kv[1])[:6]:
        print(f"  {value / 1e9:6.2f}  {name}")
    print("summed PSS peak per phase (GB, the phase a progress line starts):")
    for name, value in phases.items():
        print(f"  {value / 1e9:6.2f}  {name}")
    return code


if __name__ == "__main__":
    sys.exit(main())
