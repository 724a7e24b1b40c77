"""What every results file in benchmarks/results/ names first: the commit it measured (with "-dirty" where the package
or the benchmarks differed from it), the date, the CPU and its kind, the cores, and the data split.

    from provenance import stamp
    Path(out).write_text(json.dumps({**stamp("Multi30k test_2016_flickr"), **result}, indent=1) + "\n")
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

from vaswani.runtime.machine import cpu_name

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The short hash of HEAD, "-dirty" added where src/ or benchmarks/ hold changes not committed."""
    run = lambda *args: subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT).stdout.strip()  # noqa: E731
    head = run("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if run("status", "--porcelain", "--", "src", "benchmarks") else "")


def cpu() -> str:
    """The CPU's name and kind (flags do not tell its speed, but they tell which kernels run: docs/benchmarks.md)."""
    flags = ""
    with contextlib.suppress(OSError):
        flags = Path("/proc/cpuinfo").read_text()
    if "avx512_bf16" in flags:
        kind = "AVX-512 with bf16"
    elif "avx512f" in flags:
        kind = "AVX-512"
    elif "avx2" in flags:
        kind = "AVX2 only"
    else:
        kind = "no AVX2"
    return f"{cpu_name()} ({kind})"


def stamp(split: str) -> dict:
    """The fields every results file starts with; `split`: the data measured on (or what it is, where none)."""
    return {
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu(),
        "cores": len(os.sched_getaffinity(0)),
        "split": split,
    }
