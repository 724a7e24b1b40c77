"""How the process's C library keeps freed memory: large blocks served from the heap and kept for reuse, so that
each step's largest tensors (training's logits and their gradients, a decoding step's logits over a large
vocabulary) do not page-fault into existence again at every step. Torch-free: the command line sets it at start.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_GLIBC_DEFAULT = 128 * 1024  # both thresholds' starting values in glibc
_keeping = False  # keep_freed_memory is in effect


def keep_freed_memory(largest: int = 1 << 30) -> bool:
    """Ask glibc to serve blocks of up to `largest` bytes from the heap and keep up to as much freed memory for reuse.

    By default glibc maps every block over 32 MiB afresh and unmaps it when freed, so each training
    step page-faults its largest tensors (logits, their gradients) into existence again: on a 2-core
    CPU that was a large share of the step's time. A command that knows its largest tensor (a server: its batch bound
    times the vocabulary, `step_bytes`) passes it, so that what the heap keeps is sized to the model and the batch,
    not to a fixed GiB. Returns False where the C library is not glibc.
    """
    global _keeping
    largest = min(max(largest, _GLIBC_DEFAULT), (1 << 31) - 1)
    _keeping = _thresholds(largest, largest)
    return _keeping


def step_bytes(rows: int, vocabulary: int) -> int:
    """The largest tensor of a decoding step of `rows` hypotheses: its float32 scores over the vocabulary, twice (the
    logits and their log-softmax where it is not written in place), and a margin for the allocator's own rounding."""
    return 2 * rows * vocabulary * 4 + (4 << 20)


def _thresholds(mmap: int, trim: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap)) and bool(mallopt(_M_TRIM_THRESHOLD, trim))


@contextlib.contextmanager
def freed_memory_returned():
    """Within: glibc's own rule for large blocks (each mapped apart, and given back when freed), where
    keep_freed_memory is in effect; kept again after. For loading a model and then replacing its weights (packed
    or int8 copies, cpu_linear/onednn_fp32.py): each weight freed is given back at once, where kept freed memory was
    not reused
    for the copies, which are laid out otherwise: a lower peak for an OPUS-MT-sized model, float32 packed
    (docs/benchmarks.md, "CPU decoding", peak memory)."""
    if not _keeping:
        yield
        return
    _thresholds(_GLIBC_DEFAULT, _GLIBC_DEFAULT)
    try:
        yield
    finally:
        release_freed_memory()
        keep_freed_memory()


def release_freed_memory() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim): after a large one-off
    allocation, such as building an epoch's batches, which keep_freed_memory would otherwise hold."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
