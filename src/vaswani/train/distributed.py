"""A distributed run: the process group (joined when torchrun started this process, left together) and what
the ranks exchange, each written once: rank 0's decisions and clock to all, every rank's state to all, sums."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch
import torch.distributed as dist

from vaswani.runtime.device import pick_device

T = TypeVar("T")


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


def from_rank0(value: T, world: int) -> T:
    """Rank 0's `value` on every rank (what rank 0 alone decided: a precision, validation results); the value
    itself in a single process."""
    if world == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gathered(value: T, world: int) -> list[T]:
    """Every rank's `value`, in rank order (a single process: its own, alone)."""
    if world == 1:
        return [value]
    everyone: list = [None] * world
    dist.all_gather_object(everyone, value)
    return everyone


def rank0_clock(seconds: float, world: int) -> float:
    """Rank 0's elapsed seconds on every rank, where time decides (max_time, a time-based schedule): all ranks then
    stop at the same step and use the same learning rate."""
    if world == 1:
        return seconds
    value = torch.tensor([seconds], dtype=torch.float64)
    dist.broadcast(value, src=0)
    return float(value.item())


def summed(value: torch.Tensor, world: int) -> torch.Tensor:
    """`value` summed over the ranks, in place (a device tensor: no host synchronisation)."""
    if world > 1:
        dist.all_reduce(value)
    return value


def barrier(world: int) -> None:
    """Wait for every rank (nothing in a single process)."""
    if world > 1:
        dist.barrier()
