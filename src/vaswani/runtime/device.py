"""Where torch runs: the device (`pick_device`), bf16 autocast, and torch.compile's failures in one line."""

from __future__ import annotations

import contextlib
import functools
import os
from typing import TypeVar

import torch

T = TypeVar("T")


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast (fp32 weights) when `precision` is "bf16", else nothing."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def compiling(setting: str, fix: str):
    """Where code compiled by torch.compile runs: a failure to compile (no C++ compiler, an operation Dynamo cannot
    trace) becomes a one-line ValueError naming `setting` and `fix`. Errors of the compiled code itself pass.
    Compiled code is cached per CPU kind (`cpu_kind`)."""
    from torch._dynamo.exc import TorchDynamoException, TorchRuntimeError

    try:
        with torch.compiler.config.patch(cache_key_tag=cpu_kind()):
            yield
    except TorchRuntimeError:  # the traced code's own error (a shape that does not fit, ...): not the compiler's
        raise
    except TorchDynamoException as error:
        inner = getattr(error, "inner_exception", None) or error
        lines = [line for line in str(inner).splitlines() if line.strip()] or [""]
        raise ValueError(
            f"{setting}: torch.compile failed ({type(inner).__name__}: {lines[0][:200]}); {fix}"
        ) from error


@functools.cache  # read once: torch reads those variables as it loads, and every compiled step asks
def cpu_kind() -> str:
    """What the CPU code Inductor makes depends on: the vector instructions it picks and oneDNN's, which the
    environment can lower (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA). Inductor's on-disk cache leaves them out of
    its key, so code compiled for one kind ran under the other and gave wrong outputs or corrupted memory (an
    AVX-512 Xeon and the same machine with `ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2`, one cache): this
    string goes into the key."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    settings = [f"{name}={os.environ.get(name, '')}" for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")]
    return " ".join([f"vec_isa={pick_vec_isa()}", *settings])


def pick_device(name: str) -> torch.device:
    """ "auto": the GPU when there is one, else the CPU; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
