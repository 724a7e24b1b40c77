"""Token-budget batches from length arrays, with reproducible shuffling (§5.1: batched by length).

Everything here works on numpy arrays of lengths, never on Python objects per sentence, so that
batching ten million pairs costs a few bytes per pair and a few seconds (docs/benchmarks.md, "Data preparation").
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from vaswani.special import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class Batch:
    """Right-padded tensors of one batch. Shape: src (B, S), tgt_in and tgt_out (B, T).

    `tgt_tokens` is counted when the batch is collated (on the host, ahead of the step), so the
    training step never has to synchronise with the device to learn it."""

    src: Tensor
    tgt_in: Tensor  # BOS + target
    tgt_out: Tensor  # target + EOS
    tgt_tokens: int = 0
    # Fine-tuning with λ (vaswani finetune, finetune.original_src): the last `replay` rows are pairs of the
    # original training data, with `replay_tokens` target tokens; tgt_tokens counts the others only.
    replay: int = 0
    replay_tokens: int = 0

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return Batch(
            self.src.to(device, non_blocking=non_blocking),
            self.tgt_in.to(device, non_blocking=non_blocking),
            self.tgt_out.to(device, non_blocking=non_blocking),
            self.tgt_tokens,
            self.replay,
            self.replay_tokens,
        )

    def pin_memory(self) -> Batch:  # called by DataLoader(pin_memory=True)
        pinned = self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory()
        return Batch(*pinned, self.tgt_tokens, self.replay, self.replay_tokens)


def with_replay(batch: Batch, original: Batch, pad_id: int) -> Batch:
    """`batch` with the rows of `original` (pairs of the original training data) after its own, padded to
    one length, so one forward pass serves both losses. Shape: (B1, .) + (B2, .) -> (B1 + B2, .)"""

    def join(a: Tensor, b: Tensor) -> Tensor:
        L = max(a.size(1), b.size(1))
        pad = lambda t: torch.nn.functional.pad(t, (0, L - t.size(1)), value=pad_id)  # noqa: E731
        return torch.cat([pad(a), pad(b)])

    return Batch(
        join(batch.src, original.src),
        join(batch.tgt_in, original.tgt_in),
        join(batch.tgt_out, original.tgt_out),
        batch.tgt_tokens,
        original.src.size(0),
        original.tgt_tokens,
    )


def collate(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    source_eos: bool = True,
) -> Batch:
    """Source gets EOS appended (unless `source_eos` is False: model.source_eos); the target becomes BOS + y
    (decoder input) and y + EOS (prediction). Sides may be lists or numpy arrays of any integer type."""
    S = max(len(s) for s, _ in pairs) + source_eos
    T = max(len(t) for _, t in pairs) + 1
    src = np.full((len(pairs), S), pad_id, dtype=np.int64)
    tgt_in = np.full((len(pairs), T), pad_id, dtype=np.int64)
    tgt_out = np.full((len(pairs), T), pad_id, dtype=np.int64)
    tokens = 0
    for row, (s, t) in enumerate(pairs):
        src[row, : len(s)] = s
        if source_eos:
            src[row, len(s)] = eos_id
        tgt_in[row, 0] = bos_id
        tgt_in[row, 1 : len(t) + 1] = t
        tgt_out[row, : len(t)] = t
        tgt_out[row, len(t)] = eos_id
        tokens += len(t) + 1
    return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out), tokens)


def _costs(lengths) -> np.ndarray:
    """Padded positions one pair needs: its longer side + EOS / BOS (int32: a few bytes per pair)."""
    lengths = np.asarray(lengths)
    if lengths.size == 0:
        return np.zeros(0, dtype=np.int32)
    return lengths.max(axis=1).astype(np.int32) + 1


class Batches(Sequence[np.ndarray]):
    """Batches of pair indices as one array cut at `bounds`: batch k is order[bounds[k]:bounds[k + 1]].
    A few bytes per pair and no Python object per batch (10M pairs make ~200,000 batches)."""

    def __init__(self, order: np.ndarray, bounds: np.ndarray) -> None:
        self.order, self.bounds = order, bounds

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        if not -len(self) <= k < len(self):
            raise IndexError(f"batch {k} of {len(self)}")
        k %= len(self)
        return self.order[self.bounds[k] : self.bounds[k + 1]]

    def take(self, indices: np.ndarray) -> Batches:
        """Batches whose pair indices are indices[...] of these (a sample's positions to pair numbers)."""
        return Batches(indices[self.order], self.bounds)


def token_batches(lengths, max_tokens: int, seed: int, bucketed: bool = True) -> Batches:
    """Index arrays (int32) whose padded size (rows x longest side) stays within max_tokens.

    `lengths`: (source, target) lengths, an (N, 2) array or a list of pairs.
    bucketed: sort by length (random tie-breaks from `seed`) so that a batch holds similar lengths;
    otherwise take the sentences in a random order (naive batching, for comparison). A pair longer
    than the budget on its own gets a batch of its own rather than a crash.
    """
    costs = _costs(lengths)
    n = len(costs)
    if n == 0:
        return Batches(np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64))
    # int32 indices and a stable (radix) sort of small integer keys: ~12 bytes per pair at the peak,
    # not the ~60 of int64 copies (10M pairs: benchmarks/data_scale.py).
    order = np.random.default_rng(seed).permutation(n).astype(np.int32)
    if bucketed:
        keys = costs[order]
        if keys.max() <= np.iinfo(np.uint16).max:
            keys = keys.astype(np.uint16)  # numpy's stable sort is a radix sort for 16-bit keys: much faster
        by_cost = np.argsort(keys, kind="stable")
        order, keys = order[by_cost], keys[by_cost]
        del by_cost
        return _pack_sorted(order, keys, max_tokens)
    bounds, start, longest = [0], 0, 0
    for i, cost in enumerate(costs[order].tolist()):  # naive batching: a comparison, not the fast path
        if i > start and max(longest, cost) * (i - start + 1) > max_tokens:
            bounds.append(i)
            start, longest = i, 0
        longest = max(longest, cost)
    return Batches(order, np.array([*bounds, n], dtype=np.int64))


def _pack_sorted(order: np.ndarray, sorted_costs: np.ndarray, max_tokens: int) -> Batches:
    """Greedy packing of pairs sorted by cost: a batch grows while (rows + 1) x the newest (longest)
    cost fits. Within a run of equal costs c every batch has max_tokens // c rows, so a run is cut at
    once; only a batch that spans two runs needs a search. Steps: ~2 per distinct length, not per batch."""
    n, bounds, start = len(order), [np.zeros(1, dtype=np.int64)], 0
    rows_index = np.arange(1, max(1, max_tokens) + 1, dtype=np.int64)  # no batch has more rows than this
    while start < n:
        cost = int(sorted_costs[start])
        rows = max(1, max_tokens // cost)
        run_end = int(np.searchsorted(sorted_costs, cost, side="right"))  # first pair of a larger cost
        whole = (run_end - start) // rows
        bounds.append(np.arange(start + rows, start + whole * rows + 1, rows, dtype=np.int64))
        start += whole * rows
        if start >= n:
            break
        # rows k fit when sorted_costs[start + k - 1] * k <= max_tokens; that product grows with k.
        hi = min(n - start, max(1, max_tokens // int(sorted_costs[start])))
        fits = sorted_costs[start : start + hi] * rows_index[:hi] <= max_tokens
        start += max(1, int(np.searchsorted(~fits, True)))  # first row that does not fit
        bounds.append(np.array([start], dtype=np.int64))
    return Batches(order, np.concatenate(bounds))


def epoch_order(n_batches: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The shuffled order of batches for one epoch, a function of (seed, epoch) only: resumable."""
    order = list(range(n_batches))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return tuple(order)


def padding_fraction(lengths, batches: Sequence[np.ndarray]) -> float:
    """Share of padded positions over source and target tensors of all batches."""
    if not len(batches):
        return 0.0
    if isinstance(batches, Batches):
        starts, sizes, members = batches.bounds[:-1], np.diff(batches.bounds), batches.order
    else:
        sizes = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
        starts, members = np.concatenate([[0], np.cumsum(sizes)[:-1]]), np.concatenate(batches)
    rows = np.asarray(lengths)[members].astype(np.int32) + 1  # (pairs, 2) with EOS / BOS
    longest = np.maximum.reduceat(rows, starts, axis=0).astype(np.int64)  # (batches, 2)
    padded = int((longest.sum(axis=1) * sizes).sum())
    return 1.0 - int(rows.sum()) / padded if padded else 0.0
