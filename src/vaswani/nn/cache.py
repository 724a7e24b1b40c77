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

    The encoder-decoder keys/values have a row per source, the self-attention ones a row per hypothesis: g
    consecutive rows (a sentence's beam, `group`) share their source's row (MultiHeadAttention.attend), so a beam
    of k holds one copy of them, not k.

    Shape: self_kv[i] 2 x (B, H, t, Dh), cross_kv[i] 2 x (B / g, H, S, Dh) or cross_kv None (decoder-only)
    """

    self_kv: tuple[KeyValue, ...]
    cross_kv: tuple[KeyValue, ...] | None = None

    @property
    def length(self) -> int:
        """How many target positions the cache holds (t)."""
        return self.self_kv[0][0].size(2)

    @property
    def batch_size(self) -> int:
        """Rows of hypotheses (B)."""
        return self.self_kv[0][0].size(0)

    @property
    def group(self) -> int:
        """Consecutive hypothesis rows per source row (g): 1, or a beam's width."""
        return group(self.batch_size, self.cross_kv)

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
        """Each hypothesis repeated `beam` times, consecutively: rows b*beam ... b*beam+beam-1 are row b's copies;
        they share its source's encoder-decoder keys/values (one copy)."""
        return self._map(lambda t: t.repeat_interleave(beam, dim=0), cross=False)

    def reorder(self, index: Tensor, kept: Tensor | None = None) -> KVCache:
        """Row i of the new cache is row index[i] of this one (beam reordering, dropping finished rows); the
        sources `kept` (their positions among this cache's source rows) keep their encoder-decoder keys/values,
        all of them when None. Each source's rows stay consecutive and as many per source: `index` moves rows
        between hypotheses of the same sentence, widens a beam, or drops the rows of sentences not kept."""
        self_kv = tuple((k.index_select(0, index), v.index_select(0, index)) for k, v in self.self_kv)
        if kept is None or self.cross_kv is None:
            return KVCache(self_kv, self.cross_kv)
        return KVCache(self_kv, tuple((k.index_select(0, kept), v.index_select(0, kept)) for k, v in self.cross_kv))

    @staticmethod
    def empty_self_kv(like: Tensor, n_layers: int) -> tuple[KeyValue, ...]:
        """Zero-length self-attention keys/values shaped like `like` (B, H, S, Dh)."""
        B, H, _, Dh = like.shape
        empty = torch.empty(B, H, 0, Dh, dtype=like.dtype, device=like.device)
        return tuple((empty, empty) for _ in range(n_layers))


def group(rows: int, cross_kv: tuple[KeyValue, ...] | None) -> int:
    """Consecutive hypothesis rows per row of encoder-decoder keys: 1 without them."""
    return 1 if cross_kv is None else rows // cross_kv[0][0].size(0)


def dense(t: Tensor) -> Tensor:
    """`t` itself if it is laid out row-major from its own first element, else such a copy."""
    strides, n = [], 1
    for size in reversed(t.shape):
        strides.append(n)
        n *= max(size, 1)  # as torch lays out an empty tensor
    if t.stride() == tuple(reversed(strides)) and t.storage_offset() == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


@dataclass(frozen=True)
class StaticSlot:
    """One decoder layer's self-attention keys/values in a preallocated buffer: `write` puts the step's keys and
    values at `position` in place and returns the whole buffer, the positions not yet written hidden by the mask
    that goes with it (StaticView.visible). Shape: k, v (n, H, L, Dh); position () long"""

    k: Tensor
    v: Tensor
    position: Tensor

    def write(self, k: Tensor, v: Tensor) -> KeyValue:
        """Shape: k, v (n, H, 1, Dh) -> 2 x (n, H, L, Dh)"""
        self.k.index_copy_(2, self.position.view(1), k)
        self.v.index_copy_(2, self.position.view(1), v)
        return self.k, self.v


@dataclass(frozen=True)
class StaticView:
    """What one decoding step of fixed shapes reads and writes: the first `n` rows of a StaticKVCache, `L`
    self-attention positions and `S` source positions of it. The same views of the same buffers at every step, so
    a step can be captured once as a CUDA graph and replayed (decode/static.py)."""

    self_kv: tuple[StaticSlot, ...]
    cross_kv: tuple[KeyValue, ...]
    cross_mask: Tensor  # (n, 1, 1, S) additive: 0 on the source's tokens, -inf on padding
    position: Tensor  # () long: the target position this step feeds

    def visible(self) -> Tensor:
        """The additive self-attention mask: 0 on the positions written so far and this one, -inf after.
        Shape: (1, 1, 1, L)"""
        L = self.self_kv[0].k.size(2)
        after = torch.arange(L, device=self.position.device) > self.position
        return torch.zeros(L, dtype=self.cross_mask.dtype, device=after.device).masked_fill(after, float("-inf"))[
            None, None, None
        ]


class StaticKVCache:
    """The decoder's keys/values in buffers allocated once, written in place: `rows` hypotheses, `length` target
    positions and `source_length` source positions at most; views of their leading parts serve each batch
    (StaticView). Outputs are the dynamic KVCache's (tests/decode/test_static.py); the shapes stay fixed, which is
    what a CUDA graph needs.

    Shape: self k/v per layer (rows, H, length, Dh), cross k/v (rows, H, source_length, Dh), cross_mask
    (rows, 1, 1, source_length)
    """

    def __init__(
        self, n_layers: int, heads: int, d_head: int, rows: int, length: int, source_length: int, like: Tensor
    ) -> None:
        def buffer(n: int) -> Tensor:
            return torch.zeros(rows, heads, n, d_head, dtype=like.dtype, device=like.device)

        self.self_kv = tuple((buffer(length), buffer(length)) for _ in range(n_layers))
        self.cross_kv = tuple((buffer(source_length), buffer(source_length)) for _ in range(n_layers))
        self.cross_mask = torch.zeros(rows, 1, 1, source_length, dtype=like.dtype, device=like.device)
        self.position = torch.zeros((), dtype=torch.long, device=like.device)
        self.rows, self.length, self.source_length = rows, length, source_length
        self.dtype, self.device = like.dtype, like.device

    def fits(self, rows: int, length: int, source_length: int, dtype: torch.dtype) -> bool:
        big_enough = rows <= self.rows and length <= self.length and source_length <= self.source_length
        return big_enough and dtype == self.dtype

    def view(self, n: int, length: int, source_length: int) -> StaticView:
        L, S = length, source_length
        return StaticView(
            tuple(StaticSlot(k[:n, :, :L], v[:n, :, :L], self.position) for k, v in self.self_kv),
            tuple((k[:n, :, :S], v[:n, :, :S]) for k, v in self.cross_kv),
            self.cross_mask[:n, :, :, :S],
            self.position,
        )

    def load(self, cross_kv: tuple[KeyValue, ...], mask: Tensor, source_length: int) -> None:
        """A new batch: the encoder-decoder keys/values of its rows (B, H, s, Dh) and their additive mask
        (B, 1, 1, s) at the start of the buffers, the rest up to `source_length` masked."""
        B, s = mask.size(0), mask.size(-1)
        for (k, v), (k_new, v_new) in zip(self.cross_kv, cross_kv, strict=True):
            k[:B, :, :s].copy_(k_new)
            v[:B, :, :s].copy_(v_new)
        self.cross_mask[:B, :, :, :s].copy_(mask)
        self.cross_mask[:B, :, :, s:source_length].fill_(float("-inf"))

    def reorder(
        self, index: Tensor, written: int, source_length: int, cross: bool = True, source: StaticKVCache | None = None
    ) -> None:
        """Rows index[i] (of `source`, by default this cache) become rows i, in place: the `written` self-attention
        positions, and with `cross` the encoder-decoder keys/values and mask (not needed where only hypotheses of
        one sentence swap)."""
        m, S, source = index.numel(), source_length, source or self
        for (k, v), (k_from, v_from) in zip(self.self_kv, source.self_kv, strict=True):
            k[:m, :, :written] = k_from[:, :, :written].index_select(0, index)
            v[:m, :, :written] = v_from[:, :, :written].index_select(0, index)
        if not cross:
            return
        for (k, v), (k_from, v_from) in zip(self.cross_kv, source.cross_kv, strict=True):
            k[:m, :, :S] = k_from[:, :, :S].index_select(0, index)
            v[:m, :, :S] = v_from[:, :, :S].index_select(0, index)
        self.cross_mask[:m, :, :, :S] = source.cross_mask[:, :, :, :S].index_select(0, index)


class GrowingKVCache:
    """The decoder's self-attention keys/values in buffers that grow in place, for a search that owns its cache (a
    value it never reuses): a step writes its positions into them and attends to the positions written (views of
    them, the same values: tests/nn/test_cache.py); a beam step gathers its rows a layer at a time (reorder); the
    encoder-decoder keys/values are a KVCache's, one row per source. Where a KVCache copies every layer's keys at
    each step (torch.cat) and again at each reorder, and holds the old and the new copy until the step ends, this
    holds one copy: ~75 MB less at beam 4 x 32 rows, 24 positions, of a 6-layer d_model 512 decoder.
    `Transformer.decode_step` takes it for a KVCache and returns it, advanced.

    Shape: buffers (rows, H, capacity, Dh) per layer; self_kv[i] 2 x (rows, H, length, Dh) views
    """

    CHUNK = 8  # positions a buffer grows by, at least: a copy of it every CHUNK steps, at most CHUNK - 1 unused

    def __init__(self, cache: KVCache) -> None:
        self.keys = [k.clone(memory_format=torch.contiguous_format) for k, _ in cache.self_kv]
        self.values = [v.clone(memory_format=torch.contiguous_format) for _, v in cache.self_kv]
        self.cross_kv = cache.cross_kv
        self.length, self.rows = cache.length, cache.batch_size
        self.spare: Tensor | None = None  # the buffer the last reorder left: the next one gathers into it

    @property
    def batch_size(self) -> int:
        return self.rows

    @property
    def group(self) -> int:
        return group(self.rows, self.cross_kv)

    @property
    def self_kv(self) -> tuple[KeyValue, ...]:
        t, n = self.length, self.rows
        return tuple((k[:n, :, :t], v[:n, :, :t]) for k, v in zip(self.keys, self.values, strict=True))

    def slot(self, layer: int) -> GrowingSlot:
        """Layer `layer`'s writer for the step after the `length` positions held."""
        return GrowingSlot(self, layer)

    def advance(self, positions: int) -> GrowingKVCache:
        """Every layer has written `positions` more: they are held now."""
        self.length += positions
        return self

    def write(self, layer: int, k: Tensor, v: Tensor) -> KeyValue:
        """Shape: k, v (rows, H, T, Dh) -> 2 x (rows, H, length + T, Dh), views of the buffers"""
        t, n, T = self.length, self.rows, k.size(2)  # decode_step checked the rows
        if t + T > self.keys[layer].size(2) or self.keys[layer].dtype != k.dtype:  # no room, or bf16 keys came
            room = max(-(-(t + T) // self.CHUNK) * self.CHUNK, self.keys[layer].size(2))
            self.keys[layer] = self._moved(self.keys[layer], room, dtype=k.dtype)
            self.values[layer] = self._moved(self.values[layer], room, dtype=v.dtype)
        keys, values = self.keys[layer], self.values[layer]
        keys[:n, :, t : t + T] = k
        values[:n, :, t : t + T] = v
        return keys[:n, :, : t + T], values[:n, :, : t + T]

    def _moved(
        self,
        buffer: Tensor,
        capacity: int,
        index: Tensor | None = None,
        into: Tensor | None = None,
        dtype: torch.dtype | None = None,
        first: int = 0,
    ) -> Tensor:
        """The held positions of `buffer`'s rows from position `first` on (rows `index` of them, in that order) in the
        first rows and positions of a buffer of as many rows as `buffer` has (the rows a search has dropped are room a
        join may use) and `capacity` positions (in `dtype`, by default the buffer's), gathered straight into it: `into`
        where it has that shape, else a new one. Shape: (R, H, L, Dh) -> (max(R, rows), H, capacity, Dh)"""
        R, H, _, Dh = buffer.shape
        held = buffer[: self.rows, :, first : self.length]
        rows = self.rows if index is None else index.numel()
        shape, dtype = (max(R, rows), H, capacity, Dh), dtype or buffer.dtype  # rows to spare kept (a join's)
        fits = into is not None and into.shape == shape and into.dtype == dtype
        new = into if fits else buffer.new_empty(shape, dtype=dtype)
        if index is None:
            new[:rows, :, : self.length - first] = held
        else:
            torch.index_select(held, 0, index, out=new[:rows, :, : self.length - first])
        return new

    def reorder(self, index: Tensor, kept: Tensor | None = None, first: int = 0) -> GrowingKVCache:
        """As KVCache.reorder: row i becomes row index[i], gathered a layer at a time into the buffer the layer
        before left (all are alike; the last one left is kept for the next reorder), so one buffer more than the
        layers hold, not twice as many, and a step allocates none (this cache's earlier views are overwritten).
        `first`: the positions before it are dropped in the same gather (a continuous batch's columns that every
        running row has left behind, nn/rows_cache.py)."""
        spare = self.spare
        for buffers in (self.keys, self.values):
            for i, buffer in enumerate(buffers):
                buffers[i], spare = self._moved(buffer, buffer.size(2), index, into=spare, first=first), buffer
        self.rows, self.length, self.spare = index.numel(), self.length - first, spare
        if kept is not None and self.cross_kv is not None:
            self.cross_kv = tuple((k.index_select(0, kept), v.index_select(0, kept)) for k, v in self.cross_kv)
        return self


@dataclass(frozen=True)
class GrowingSlot:
    """One layer's writer into a GrowingKVCache (what a layer's self-attention takes as `past`)."""

    cache: GrowingKVCache
    layer: int

    def write(self, k: Tensor, v: Tensor) -> KeyValue:
        return self.cache.write(self.layer, k, v)
