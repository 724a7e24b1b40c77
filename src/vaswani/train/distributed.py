"""The process group of a distributed run: joined when torchrun started this process, left together."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist

from vaswani.runtime import pick_device


@contextmanager
def process_group(device: str = "auto") -> Iterator[None]:
    """Join the process group torchrun describes (WORLD_SIZE > 1 in the environment; nccl on a GPU, gloo
    on the CPU) for the body, and leave it afterwards. A single process (no torchrun) runs the body alone.

    After a body that succeeds every rank waits for the others before leaving: rank 0 still validates and
    saves while the others are done."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        backend = "nccl" if pick_device(device).type == "cuda" else "gloo"
        dist.init_process_group(backend)
    try:
        yield
        if dist.is_initialized():
            dist.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
