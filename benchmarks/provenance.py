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


def uncommitted() -> list[str]:
    """The files of src/ and benchmarks/ that differ from HEAD: the code measured, not its results (a benchmark that
    writes its results file as it goes must not find itself "dirty")."""
    done = subprocess.run(
        ["git", "status", "--porcelain", "--", "src", "benchmarks", ":(exclude)benchmarks/results"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return [line[3:] for line in done.stdout.splitlines() if line.strip()]


def commit(changed: list[str] | None = None) -> str:
    """The short hash of HEAD, "-dirty" added where src/ or benchmarks/ (its results aside) hold changes not
    committed (`changed`: uncommitted()'s, where the caller has it)."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = uncommitted() if changed is None else changed
    return (done.stdout.strip() or "unknown") + ("-dirty" if dirty else "")


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
    changed = uncommitted()
    return {
        "commit": commit(changed),
        **({"uncommitted": changed} if changed else {}),  # which files "-dirty" means
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu(),
        "cores": len(os.sched_getaffinity(0)),
        "split": split,
    }
