"""How many threads torch runs: one per CPU this process may use that other work leaves free when it starts.

torch starts one OpenMP thread per core. Beside another CPU-bound process, one of them shares a core with it,
and every parallel region waits for that slowest thread: the whole run slows far below a fair share of the
machine (docs/benchmarks.md, "Serving"; benchmarks/fair_share.py). So the command line counts,
over a fifth of a second at start, how busy the CPUs it may use are (/proc/stat, the process's affinity), and
runs one thread per free one: all of them on an idle machine, one fewer per busy process.
`VASWANI_THREADS=N` (or OpenMP's OMP_NUM_THREADS) sets the number instead. Not called on import:
`vaswani.cli.main` calls `settle_threads`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

SAMPLE_S = 0.2  # how long the CPUs are watched at start
STAT = Path("/proc/stat")


def cpu_times(cpus: set[int], stat: Path = STAT) -> dict[int, tuple[int, int]] | None:
    """(busy, total) jiffies of each CPU in `cpus` since boot; None where /proc/stat cannot be read (not Linux)."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            idle = values[3] + values[4]
            out[int(name[3:])] = (sum(values) - idle, sum(values))
    return out or None


def busy_cpus(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> float:
    """How many CPUs' worth of work ran between two `cpu_times` readings (0.0 to the number of CPUs)."""
    busy = 0.0
    for cpu, (b1, t1) in after.items():
        b0, t0 = before.get(cpu, (b1, t1))
        if t1 > t0:
            busy += (b1 - b0) / (t1 - t0)
    return busy


def free_threads(allowed: int, busy: float) -> int:
    """Threads for `allowed` CPUs of which `busy` are taken by other work: the free ones, at least one."""
    return max(1, min(allowed, round(allowed - busy)))


def settle_threads(sample_s: float = SAMPLE_S) -> str | None:
    """Set torch's thread count to the free CPUs (see the module); returns one line for the log where it ran fewer
    threads than torch would have, else None. VASWANI_THREADS, or OMP_NUM_THREADS, decides instead."""
    if os.environ.get("VASWANI_THREADS"):
        threads = int(os.environ["VASWANI_THREADS"])
        if threads < 1:
            raise ValueError(f"VASWANI_THREADS must be a positive number of threads, got {threads}")
        torch.set_num_threads(threads)
        return None
    if os.environ.get("OMP_NUM_THREADS"):
        return None  # torch has read it
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    before = cpu_times(cpus)
    if before is None:
        return None
    time.sleep(sample_s)
    after = cpu_times(cpus)
    if after is None:
        return None
    busy = busy_cpus(before, after)
    threads = free_threads(len(cpus), busy)
    if threads >= torch.get_num_threads():
        return None
    torch.set_num_threads(threads)
    return (
        f"threads: {threads} of {len(cpus)} CPUs: other work kept {busy:.1f} CPUs busy at start (one thread per "
        "free CPU keeps a fair share; VASWANI_THREADS=N sets the number)"
    )
