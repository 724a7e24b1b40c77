"""Process-level settings that make CPU training faster; called by the command line, never on import."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys

import torch

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> bool:
    """Ask glibc to serve large blocks from the heap and keep freed memory for reuse.

    By default glibc maps every block over 32 MiB afresh and unmaps it when freed, so each training
    step page-faults its largest tensors (logits, their gradients) into existence again: on a 2-core
    CPU that was a third of the step's time. Returns False where the C library is not glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1))


def release_freed_memory() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim): after a large one-off
    allocation, such as building an epoch's batches, which keep_freed_memory would otherwise hold."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast (fp32 weights) when `precision` is "bf16", else nothing."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def pick_device(name: str) -> torch.device:
    """ "auto": the GPU when there is one, else the CPU; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), to name next to every timing."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
