"""Process-level settings that make CPU training faster; called by the command line, never on import."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import torch

T = TypeVar("T")
# The training loss projects onto the vocabulary this many rows at a time (train/loss.py). On a CPU 256 rows
# x 8,000 float32 logits (8 MB) stay in cache between the passes over them (docs/benchmarks.md). A GPU wants
# large products and few launches: up to 2^26 logits (256 MB float32) a chunk, 8,388 rows at 8,000 subwords.
CPU_LOSS_CHUNK = 256
GPU_LOSS_LOGITS = 1 << 26


def loss_chunk_rows(device_type: str, vocab_size: int) -> int:
    """Rows of logits the training loss computes at a time on this kind of device."""
    if device_type == "cpu":
        return CPU_LOSS_CHUNK
    return max(CPU_LOSS_CHUNK, GPU_LOSS_LOGITS // max(1, vocab_size))


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast (fp32 weights) when `precision` is "bf16", else nothing."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def compiling(setting: str, fix: str):
    """Where code compiled by torch.compile runs: a failure to compile (no C++ compiler, an operation Dynamo cannot
    trace) becomes a one-line ValueError naming `setting` and `fix`. Errors of the compiled code itself pass."""
    from torch._dynamo.exc import TorchDynamoException, TorchRuntimeError

    try:
        yield
    except TorchRuntimeError:  # the traced code's own error (a shape that does not fit, ...): not the compiler's
        raise
    except TorchDynamoException as error:
        inner = getattr(error, "inner_exception", None) or error
        lines = [line for line in str(inner).splitlines() if line.strip()] or [""]
        raise ValueError(
            f"{setting}: torch.compile failed ({type(inner).__name__}: {lines[0][:200]}); {fix}"
        ) from error


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


class ComputeThread:
    """One long-lived thread for all of a service's torch work: loading the model, measuring its precision,
    decoding. PyTorch's OpenMP runs a thread's parallel regions 1.5-2.5x slower once another thread of the
    process has run its own (measured on the quick model, AMD EPYC, 2 cores: a batch of 3 sentences 147 ms
    instead of 56, of 40 sentences 379 ms instead of 196, when loaded on the main thread and decoded on a
    worker), so a server loads and decodes on this thread and its event loop never runs a torch operation.

        compute = ComputeThread()
        translator = compute.call(Translator.load, "runs/quick")
    """

    def __init__(self, name: str = "vaswani-compute") -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """Run `function(*args, **kwargs)` on the thread, after what was submitted before."""
        future: Future[T] = Future()
        self._calls.put((function, args, kwargs, future))
        return future

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`submit`, then wait for the result (or its exception)."""
        return self.submit(function, *args, **kwargs).result()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def close(self) -> None:
        """Stop after what was submitted."""
        self._calls.put(None)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            function, args, kwargs, future = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function(*args, **kwargs))
            except BaseException as error:  # handed to whoever waits
                future.set_exception(error)
