"""The decoder's keys/values for a running batch whose rows join and leave at any step (continuous batching,
decode/continuous.py): each row has its own positions, and each source its own encoder-decoder keys/values."""

from __future__ import annotations

import torch
from torch import Tensor

from vaswani.nn.cache import GrowingKVCache, KeyValue, KVCache


class RowsKVCache(GrowingKVCache):
    """A GrowingKVCache whose rows need not have started together. Every step writes one column for every row (the
    `length`-th); a row that joined when the cache held `start` columns holds its own positions in columns start,
    start + 1, ..., so the token a step feeds it is at position `length - start` (`positions`), and the columns
    before its start are hidden from it (`visible`: -inf, their keys zeros). The encoder-decoder keys/values have a
    row per source, `width` consecutive hypothesis rows each, padded to the longest source, with an additive mask per
    source (`cross_mask`). `join` adds sources (and their `width` rows each) at the next step; `reorder` keeps rows
    and sources (as GrowingKVCache's: finished sentences leave at once) and drops the columns every row has left
    behind. Where every row started together the mask is None: the step is the one a batch that started
    together runs (Transformer.decode_step).

    Shape: buffers (rows, H, capacity, Dh) per layer, cross_kv[i] 2 x (sources, H, S, Dh), cross_mask
    (sources, 1, 1, S), start (rows,) long
    """

    ROOM = 8  # sentences' rows a buffer grows by beyond a join's, at least

    def __init__(self, n_layers: int, heads: int, d_head: int, width: int, dtype: torch.dtype, device) -> None:
        none = torch.zeros(0, heads, 0, d_head, dtype=dtype, device=device)
        empty = tuple((none, none) for _ in range(n_layers))
        super().__init__(KVCache(empty, empty))
        self.width = width
        self.cross_mask = torch.zeros(0, 1, 1, 0, dtype=dtype, device=device)
        self.start = torch.zeros(0, dtype=torch.long, device=device)

    @property
    def group(self) -> int:
        return self.width

    @property
    def sources(self) -> int:
        return self.cross_mask.size(0)

    def join(self, cross_kv: tuple[KeyValue, ...], mask: Tensor) -> None:
        """n new sources' encoder-decoder keys/values (each layer's (n, H, s, Dh)) and additive mask (n, 1, 1, s):
        `width` rows each, appended after the rows held, starting at the next column."""
        n, s, rows = mask.size(0), mask.size(-1), mask.size(0) * self.width
        S = max(s, self.cross_mask.size(-1))
        self.cross_kv = tuple(
            (_stacked(k_old, k, S), _stacked(v_old, v, S))
            for (k_old, v_old), (k, v) in zip(self.cross_kv, cross_kv, strict=True)
        )
        masks = mask.new_full((self.sources + n, 1, 1, S), float("-inf"))  # in the keys' dtype (bf16 under autocast)
        masks[: self.sources, ..., : self.cross_mask.size(-1)] = self.cross_mask
        masks[self.sources :, ..., :s] = mask
        self.cross_mask = masks
        held, total = self.rows, self.rows + rows
        for buffers in (self.keys, self.values):
            for i, buffer in enumerate(buffers):
                if total > buffer.size(0):  # room for this join and some more, not one copy per join
                    grown = buffer.new_empty(total + max(rows, self.ROOM * self.width), *buffer.shape[1:])
                    grown[:held, :, : self.length] = buffer[:held, :, : self.length]
                    buffers[i] = buffer = grown
                buffer[held:total, :, : self.length] = 0  # the columns hidden from the new rows: zeros, never NaN
        self.start = torch.cat([self.start, self.start.new_full((rows,), self.length)])
        self.rows += rows

    def positions(self) -> Tensor:
        """The position each row's next token is at. Shape: (rows,)"""
        return self.length - self.start

    def visible(self) -> Tensor | None:
        """The additive self-attention mask of the next step: -inf on the columns before each row's start; None
        where every row started at the first column (nothing to hide). Shape: (rows, 1, 1, length + 1)"""
        if not bool(self.start.any()):
            return None
        hidden = torch.arange(self.length + 1, device=self.start.device) < self.start[:, None]
        mask = torch.zeros(hidden.shape, dtype=self.cross_mask.dtype, device=hidden.device)
        return mask.masked_fill_(hidden, float("-inf"))[:, None, None]

    def reorder(self, index: Tensor, kept: Tensor | None = None) -> RowsKVCache:
        """As GrowingKVCache.reorder, each row's start and each kept source's mask with it; the columns before every
        kept row's start (written by rows that have left) are dropped in the same gather, so a row's keys span its
        own positions and those of rows that started before it and are still running."""
        start = self.start.index_select(0, index)
        first = int(start.min()) if index.numel() else self.length
        super().reorder(index, kept, first)
        self.start = start - first
        if kept is not None:
            self.cross_mask = self.cross_mask.index_select(0, kept)
            longest = int((self.cross_mask[:, 0, 0] == 0).sum(1).max()) if self.sources else 0
            if longest < self.cross_mask.size(-1):  # the longest source has left: its padding goes too
                self.cross_kv = tuple((k[:, :, :longest], v[:, :, :longest]) for k, v in self.cross_kv)
                self.cross_mask = self.cross_mask[..., :longest]
        return self


def _stacked(old: Tensor, new: Tensor, length: int) -> Tensor:
    """`old`'s rows then `new`'s, each padded with zeros to `length` positions. Shape: (N, H, S, Dh), (n, H, s, Dh)
    -> (N + n, H, length, Dh)"""
    both = new.new_zeros(old.size(0) + new.size(0), new.size(1), length, new.size(3))
    both[: old.size(0), :, : old.size(2)] = old
    both[old.size(0) :, :, : new.size(2)] = new
    return both
