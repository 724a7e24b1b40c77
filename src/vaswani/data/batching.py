"""Token-budget batches from length buckets, with reproducible shuffling (§5.1: batched by length)."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Batch:
    """Right-padded tensors of one batch. Shape: src (B, S), tgt_in and tgt_out (B, T)"""

    src: Tensor
    tgt_in: Tensor  # BOS + target
    tgt_out: Tensor  # target + EOS

    @property
    def tgt_tokens(self) -> int:
        return int((self.tgt_out != 0).sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device))


def collate(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int, bos_id: int, eos_id: int) -> Batch:
    """Source gets EOS appended; the target becomes BOS + y (decoder input) and y + EOS (prediction)."""
    S = max(len(s) for s, _ in pairs) + 1
    T = max(len(t) for _, t in pairs) + 1
    src = torch.full((len(pairs), S), pad_id, dtype=torch.long)
    tgt_in = torch.full((len(pairs), T), pad_id, dtype=torch.long)
    tgt_out = torch.full((len(pairs), T), pad_id, dtype=torch.long)
    for row, (s, t) in enumerate(pairs):
        src[row, : len(s) + 1] = torch.tensor([*s, eos_id])
        tgt_in[row, : len(t) + 1] = torch.tensor([bos_id, *t])
        tgt_out[row, : len(t) + 1] = torch.tensor([*t, eos_id])
    return Batch(src, tgt_in, tgt_out)


def _cost(src_len: int, tgt_len: int) -> int:
    return max(src_len, tgt_len) + 1  # + EOS / BOS


def token_batches(lengths: Sequence[tuple[int, int]], max_tokens: int, seed: int, bucketed: bool = True
                  ) -> list[list[int]]:
    """Index lists whose padded size (rows x longest side) stays within max_tokens.

    bucketed: sort by length (random tie-breaks from `seed`) so that a batch holds similar lengths;
    otherwise take the sentences in a random order (naive batching, for comparison). A pair longer
    than the budget on its own gets a batch of its own rather than a crash.
    """
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    if bucketed:
        order.sort(key=lambda i: _cost(*lengths[i]))
    batches, current, longest = [], [], 0
    for i in order:
        cost = _cost(*lengths[i])
        if current and max(longest, cost) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, cost)
    if current:
        batches.append(current)
    return batches


@functools.lru_cache(maxsize=2)  # asked for every batch; computed once per epoch
def epoch_order(n_batches: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The shuffled order of batches for one epoch, a function of (seed, epoch) only: resumable."""
    order = list(range(n_batches))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return tuple(order)


def padding_fraction(lengths: Sequence[tuple[int, int]], batches: Sequence[Sequence[int]]) -> float:
    """Share of padded positions over source and target tensors of all batches."""
    real = padded = 0
    for batch in batches:
        S = max(lengths[i][0] for i in batch) + 1
        T = max(lengths[i][1] for i in batch) + 1
        padded += len(batch) * (S + T)
        real += sum(s + t + 2 for s, t in (lengths[i] for i in batch))
    return 1.0 - real / padded if padded else 0.0
