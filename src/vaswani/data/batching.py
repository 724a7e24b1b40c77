"""Token-budget batches from length arrays, with reproducible shuffling (§5.1: batched by length).

Everything here works on numpy arrays of lengths, never on Python objects per sentence, so that
batching ten million pairs costs a few bytes per pair and a few seconds (see docs/benchmarks.md).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from vaswani.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class Batch:
    """Right-padded tensors of one batch. Shape: src (B, S), tgt_in and tgt_out (B, T).

    `tgt_tokens` is counted when the batch is collated (on the host, ahead of the step), so the
    training step never has to synchronise with the device to learn it."""

    src: Tensor
    tgt_in: Tensor  # BOS + target
    tgt_out: Tensor  # target + EOS
    tgt_tokens: int = 0

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return Batch(self.src.to(device, non_blocking=non_blocking), self.tgt_in.to(device, non_blocking=non_blocking),
                     self.tgt_out.to(device, non_blocking=non_blocking), self.tgt_tokens)

    def pin_memory(self) -> Batch:  # called by DataLoader(pin_memory=True)
        return Batch(self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory(), self.tgt_tokens)


def collate(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int = PAD_ID, bos_id: int = BOS_ID,
            eos_id: int = EOS_ID) -> Batch:
    """Source gets EOS appended; the target becomes BOS + y (decoder input) and y + EOS (prediction).
    Sides may be lists or numpy arrays of any integer type."""
    S = max(len(s) for s, _ in pairs) + 1
    T = max(len(t) for _, t in pairs) + 1
    src = np.full((len(pairs), S), pad_id, dtype=np.int64)
    tgt_in = np.full((len(pairs), T), pad_id, dtype=np.int64)
    tgt_out = np.full((len(pairs), T), pad_id, dtype=np.int64)
    tokens = 0
    for row, (s, t) in enumerate(pairs):
        src[row, : len(s)] = s
        src[row, len(s)] = eos_id
        tgt_in[row, 0] = bos_id
        tgt_in[row, 1 : len(t) + 1] = t
        tgt_out[row, : len(t)] = t
        tgt_out[row, len(t)] = eos_id
        tokens += len(t) + 1
    return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out), tokens)


def _costs(lengths) -> np.ndarray:
    """Padded positions one pair needs: its longer side + EOS / BOS."""
    lengths = np.asarray(lengths)
    if lengths.size == 0:
        return np.zeros(0, dtype=np.int64)
    return lengths.max(axis=1).astype(np.int64) + 1


def token_batches(lengths, max_tokens: int, seed: int, bucketed: bool = True) -> list[np.ndarray]:
    """Index arrays whose padded size (rows x longest side) stays within max_tokens.

    `lengths`: (source, target) lengths, an (N, 2) array or a list of pairs.
    bucketed: sort by length (random tie-breaks from `seed`) so that a batch holds similar lengths;
    otherwise take the sentences in a random order (naive batching, for comparison). A pair longer
    than the budget on its own gets a batch of its own rather than a crash.
    """
    costs = _costs(lengths)
    n = len(costs)
    if n == 0:
        return []
    order = np.random.default_rng(seed).permutation(n)
    if bucketed:
        order = order[np.argsort(costs[order], kind="stable")]
        return _pack_sorted(order, costs[order], max_tokens)
    batches, start, longest = [], 0, 0
    for i, cost in enumerate(costs[order].tolist()):  # naive batching: a comparison, not the fast path
        if i > start and max(longest, cost) * (i - start + 1) > max_tokens:
            batches.append(order[start:i])
            start, longest = i, 0
        longest = max(longest, cost)
    batches.append(order[start:])
    return batches


def _pack_sorted(order: np.ndarray, sorted_costs: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Greedy packing of pairs sorted by cost: a batch grows while (rows + 1) x the newest (longest)
    cost fits; one binary search per batch instead of a Python step per pair."""
    n, batches, start = len(order), [], 0
    rows_index = np.arange(1, n + 1, dtype=np.int64)
    while start < n:
        # rows k fit when sorted_costs[start + k - 1] * k <= max_tokens; that product grows with k.
        hi = min(n - start, max(1, max_tokens // int(sorted_costs[start])))
        fits = sorted_costs[start : start + hi] * rows_index[:hi] <= max_tokens
        k = max(1, int(np.searchsorted(~fits, True)))  # first row that does not fit
        batches.append(order[start : start + k])
        start += k
    return batches


@functools.lru_cache(maxsize=2)  # asked for every batch; computed once per epoch
def epoch_order(n_batches: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The shuffled order of batches for one epoch, a function of (seed, epoch) only: resumable."""
    order = list(range(n_batches))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return tuple(order)


def padding_fraction(lengths, batches: Sequence[np.ndarray]) -> float:
    """Share of padded positions over source and target tensors of all batches."""
    lengths = np.asarray(lengths, dtype=np.int64)
    real = padded = 0
    for batch in batches:
        rows = lengths[np.asarray(batch)]
        S, T = rows.max(axis=0) + 1
        padded += len(batch) * int(S + T)
        real += int(rows.sum()) + 2 * len(batch)
    return 1.0 - real / padded if padded else 0.0
