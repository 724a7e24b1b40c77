"""How many threads torch runs: one per CPU this process may use, within its container's CPU quota, that other
work leaves free when it starts.

torch starts one OpenMP thread per CPU it sees. It does not read the container's CPU quota: in a `--cpus=2` container
on a 64-core host it runs 64 threads on two CPUs' worth of time, and the kernel throttles them in turns. Beside
another CPU-bound process, one thread shares a core with it, and every parallel region waits for that slowest
thread: the whole run slows far below a fair share of the machine (docs/benchmarks.md, "Serving";
benchmarks/fair_share.py). So the command line sets the count, up or down from torch's default, to:

- the CPU quota, where it allows fewer CPUs than the process may run on: cgroup v2 `cpu.max` of the process's cgroup
  and of each parent (a parent's limit applies too; the smallest wins), or cgroup v1 `cpu.cfs_quota_us` over
  `cpu.cfs_period_us`, rounded up. Here the CPUs' busyness is not read: /proc/stat counts the whole host, whose
  other tenants' load is not ours to share, since the quota already is our share;
- else the CPUs of the process's affinity that other work leaves free, counted over a fifth of a second at start
  (/proc/stat): all of them on an idle machine, one fewer per busy process.

The user's number wins: `VASWANI_THREADS=N`, else OpenMP's `OMP_NUM_THREADS`, else MKL's `MKL_NUM_THREADS` (an empty
value counts as unset; anything but a whole number ≥ 1 is an error naming the variable). Not called on import:
`vaswani.cli.main` calls `settle_threads`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import torch

SAMPLE_S = 0.2  # how long the CPUs are watched at start
ROOT = Path("/")  # where /proc and /sys/fs/cgroup are read from (tests: a fake tree)
STAT = ROOT / "proc/stat"
USER_VARIABLES = ("VASWANI_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")  # the first one set wins


class Quota(NamedTuple):
    """A CPU quota: how many CPUs' worth of time it allows (rounded up) and where it was read, for the log."""

    cpus: int
    source: str


def parse_threads(name: str, value: str) -> int:
    """The thread count in environment variable `name`; ValueError naming the variable, the value and the fix."""
    text = value.strip()
    if name == "OMP_NUM_THREADS":
        text = text.split(",")[0].strip()  # OpenMP's list for nested levels: the first is the outer one
    if text.isascii() and text.isdigit() and int(text) >= 1:
        return int(text)
    fix = "unset it to let vaswani choose"
    raise ValueError(f"{name} must be a whole number of threads, 1 or more, got {value!r} ({fix})")


def user_threads(environ: Mapping[str, str]) -> tuple[str, int] | None:
    """(variable, threads) of the first of USER_VARIABLES set to a non-empty value; None where none is."""
    for name in USER_VARIABLES:
        value = environ.get(name)
        if value is not None and value.strip():
            return name, parse_threads(name, value)
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def quota_cpus(quota: int, period: int) -> int | None:
    """CPUs' worth of time a quota of `quota` µs per `period` µs allows, rounded up, at least 1; None: no quota."""
    if quota <= 0 or period <= 0:
        return None  # cgroup v1 writes -1 for none
    return max(1, math.ceil(quota / period))


def _cgroup_dirs(mount: Path, path: str) -> list[Path]:
    """The cgroup `path` (as /proc/self/cgroup names it) under `mount`, then each parent up to `mount` itself."""
    parts = [p for p in path.split("/") if p not in ("", ".", "..")]
    return [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _smallest(quotas: list[Quota | None]) -> Quota | None:
    found = [q for q in quotas if q is not None]
    return min(found, key=lambda q: q.cpus) if found else None


def _v2_quota(directory: Path) -> Quota | None:
    fields = (_read(directory / "cpu.max") or "").split()  # "max 100000": none; "200000 100000": 2 CPUs
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None
    cpus = quota_cpus(int(fields[0]), int(fields[1]))
    return Quota(cpus, f"cgroup v2 cpu.max {fields[0]}/{fields[1]}") if cpus else None


def _v1_quota(directory: Path) -> Quota | None:
    quota = (_read(directory / "cpu.cfs_quota_us") or "").strip()
    period = (_read(directory / "cpu.cfs_period_us") or "").strip()
    if not quota.lstrip("-").isdigit() or not period.isdigit():
        return None
    cpus = quota_cpus(int(quota), int(period))
    return Quota(cpus, f"cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us {quota}/{period}") if cpus else None


def cpu_quota(root: Path = ROOT) -> Quota | None:
    """The smallest CPU quota over the process's cgroup and its parents (v1 where the cpu controller is there, else
    v2); None where none is set or /proc/self/cgroup cannot be read (not Linux)."""
    lines = (_read(root / "proc/self/cgroup") or "").splitlines()
    entries = [line.split(":", 2) for line in lines if line.count(":") >= 2]
    cgroup = root / "sys/fs/cgroup"
    for _, controllers, path in entries:
        if "cpu" in controllers.split(","):
            names = [controllers, "cpu,cpuacct", "cpu"]
            mount = next((cgroup / n for n in names if (cgroup / n).is_dir()), cgroup / "cpu")
            return _smallest([_v1_quota(d) for d in _cgroup_dirs(mount, path)])
    for _, controllers, path in entries:
        if controllers == "":  # "0::/path": the unified (v2) hierarchy
            return _smallest([_v2_quota(d) for d in _cgroup_dirs(cgroup, path)])
    return None


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


def measured_threads(cpus: set[int], root: Path = ROOT, sample_s: float = SAMPLE_S) -> tuple[int, str] | None:
    """The thread count for a process that may run on `cpus` (see the module) and, for the log, why; None where
    neither a quota nor /proc/stat can be read (not Linux: torch's default stays)."""
    quota = cpu_quota(root)
    if quota is not None and quota.cpus < len(cpus):
        return quota.cpus, f"the container's CPU quota, {quota.source}"
    before = cpu_times(cpus, root / "proc/stat")
    if before is not None:
        time.sleep(sample_s)
        after = cpu_times(cpus, root / "proc/stat")
        if after is not None:
            busy = busy_cpus(before, after)
            threads = free_threads(len(cpus), busy)
            return threads, f"{threads} of {len(cpus)} CPUs free: other work kept {busy:.1f} CPUs busy at start"
    return None


def settle_threads(
    sample_s: float = SAMPLE_S, root: Path = ROOT, environ: Mapping[str, str] | None = None
) -> str | None:
    """Set torch's thread count (see the module): the user's number, or the measured one, raised or lowered from
    torch's default. Returns one line for the log where it runs fewer threads than torch would have, else None.
    ValueError where a variable of USER_VARIABLES holds no whole number ≥ 1."""
    chosen = user_threads(os.environ if environ is None else environ)
    if chosen is not None:
        torch.set_num_threads(chosen[1])  # torch reads OMP_NUM_THREADS itself, but not in the order above
        return None
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    measured = measured_threads(cpus, root, sample_s)
    default = torch.get_num_threads()
    if measured is None or measured[0] == default:
        return None
    threads, reason = measured
    torch.set_num_threads(threads)
    if threads > default:  # torch counted physical cores only: nothing for the log (every command would say it)
        return None
    return f"threads: {threads} ({reason}; torch would run {default}; VASWANI_THREADS=N sets the number)"


class ThreadGovernor:
    """settle_threads' rule kept true while a long-running process works (a server), not only at its start: every
    `every` seconds `tick` counts the CPUs that other processes kept busy since the last tick (/proc/stat's busy time
    less this process's own CPU time) and sets torch's threads to the CPUs they left free, within the CPU quota. Beside
    a busy process a thread that shares its core holds up every parallel region; one thread fewer keeps a fair share
    (docs/benchmarks.md, "Serving"). Call it from the thread that runs torch. Idle where the user chose the number
    (VASWANI_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS) or /proc/stat cannot be read."""

    def __init__(self, every: float = 2.0, root: Path = ROOT, environ: Mapping[str, str] | None = None) -> None:
        self.every, self.stat = every, root / "proc/stat"
        self.cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
        quota = cpu_quota(root)
        self.allowed = min(len(self.cpus), quota.cpus) if quota is not None else len(self.cpus)
        self.times = cpu_times(self.cpus, self.stat)
        self.enabled = user_threads(os.environ if environ is None else environ) is None and self.times is not None
        self.wall, self.own = time.monotonic(), time.process_time()

    def tick(self) -> int | None:
        """The thread count set now where it changed, else None (most calls: before `every` has passed)."""
        now = time.monotonic()
        if not self.enabled or now - self.wall < self.every:
            return None
        times, own = cpu_times(self.cpus, self.stat), time.process_time()
        if times is None:
            return None
        mine = (own - self.own) / (now - self.wall)  # CPUs' worth this process used
        others = max(0.0, busy_cpus(self.times, times) - mine)
        self.times, self.wall, self.own = times, now, own
        threads = free_threads(self.allowed, others)
        if threads == torch.get_num_threads():
            return None
        torch.set_num_threads(threads)
        return threads
