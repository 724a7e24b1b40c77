"""The decoder's key/value cache for incremental decoding: an explicit value, passed in and returned."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

KeyValue = tuple[Tensor, Tensor]


@dataclass(frozen=True)
class KVCache:
    """Per decoder layer: self-attention keys/values of the positions decoded so far, and (for a decoder
    that attends to an encoder) the encoder-decoder keys/values, computed once per source sentence.

    Shape: self_kv[i] 2 x (B, H, t, Dh), cross_kv[i] 2 x (B, H, S, Dh) or cross_kv None (decoder-only)
    """

    self_kv: tuple[KeyValue, ...]
    cross_kv: tuple[KeyValue, ...] | None = None

    @property
    def length(self) -> int:
        """How many target positions the cache holds (t)."""
        return self.self_kv[0][0].size(2)

    @property
    def batch_size(self) -> int:
        return (self.cross_kv or self.self_kv)[0][0].size(0)

    def _map(self, fn, cross: bool = True) -> KVCache:
        self_kv = tuple((fn(k), fn(v)) for k, v in self.self_kv)
        if cross and self.cross_kv is not None:
            return KVCache(self_kv, tuple((fn(k), fn(v)) for k, v in self.cross_kv))
        return KVCache(self_kv, self.cross_kv)

    def dense(self) -> KVCache:
        """Every tensor in the one row-major layout its shape has (the first step's keys/values are views of a
        projection): what a compiled step's guards check, strides of size-1 dimensions included, which
        `Tensor.contiguous` leaves as they are, and of empty ones. Tensors already in that layout are not copied."""
        return self._map(dense)

    def expand(self, beam: int) -> KVCache:
        """Each sentence repeated `beam` times, consecutively: rows b*beam ... b*beam+beam-1 are sentence b."""
        return self._map(lambda t: t.repeat_interleave(beam, dim=0))

    def reorder(self, index: Tensor, cross: bool = True) -> KVCache:
        """Row i of the new cache is row index[i] of this one (beam reordering, dropping finished rows).

        `cross=False` leaves the encoder-decoder keys/values alone, valid when `index` only moves rows
        between hypotheses of the same sentence (the usual beam step), and saves copying them.
        """
        return self._map(lambda t: t.index_select(0, index), cross=cross)

    @staticmethod
    def empty_self_kv(like: Tensor, n_layers: int) -> tuple[KeyValue, ...]:
        """Zero-length self-attention keys/values shaped like `like` (B, H, S, Dh)."""
        B, H, _, Dh = like.shape
        empty = torch.empty(B, H, 0, Dh, dtype=like.dtype, device=like.device)
        return tuple((empty, empty) for _ in range(n_layers))


def dense(t: Tensor) -> Tensor:
    """`t` itself if it is laid out row-major from its own first element, else such a copy."""
    strides, n = [], 1
    for size in reversed(t.shape):
        strides.append(n)
        n *= max(size, 1)  # as torch lays out an empty tensor
    if t.stride() == tuple(reversed(strides)) and t.storage_offset() == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)
