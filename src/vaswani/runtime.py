"""Where torch runs: the device (`pick_device`), bf16 autocast, and torch.compile's failures in one line."""

from __future__ import annotations

import contextlib
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
