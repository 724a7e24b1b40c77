"""decode.static_cache: the decoder's step on keys/values in buffers allocated once, and on a GPU replayed as CUDA
graphs.

A search step of the dynamic cache (search.EncoderDecoderSteps) launches some two hundred small kernels, and each
step the cache grows by a concatenation. Here every buffer is allocated once per engine (`StaticKVCache`: as many
rows as the engine serves, the longest output and source seen, rounded up), a step writes its keys/values in
place at a position held on the device, and attention reads the leading part of the buffers through a mask. So a
step has fixed shapes: on CUDA it is captured once per shape as a CUDA graph and then replayed with one launch
(`torch.cuda.CUDAGraph`, one memory pool for all of them). Shapes are rounded up (`bucket`), so a few graphs serve
every batch: rows that finish leave the batch, and the rows beyond them up to the bucket compute values nobody reads.
On a CPU the same step runs eagerly (what tests compare with the dynamic cache: identical outputs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.decode.search import EncoderDecoderSteps, Steps, additive_mask
from vaswani.nn.cache import StaticKVCache

ROUND_POSITIONS = 32  # self-attention and source lengths are rounded up to a multiple of this


BUCKETS = sorted({m << i for i in range(24) for m in (1, 3)})  # 1, 2, 3, 4, 6, 8, 12, 16, 24, ...


def bucket(n: int, most: int) -> int:
    """The row count a step of n rows runs at: the next power of two or 1.5 times one, at most `most` (16 shapes
    up to 256 rows, at most a third of the rows wasted)."""
    return min(next(size for size in BUCKETS if size >= n), most)


def rounded(n: int, most: int) -> int:
    return min(-(-n // ROUND_POSITIONS) * ROUND_POSITIONS, most)


class StaticDecoding:
    """The static-cache step of one model for an engine's life: its buffers, and on CUDA (`graphs`) its captured
    graphs. Pass it as a search's `step`. `rows`: the rows the engine serves (decode.batch_size x beam), so that
    the buffers are allocated once. Not for concurrent searches: one search at a time uses it (a server's engine
    runs its batches one after another)."""

    def __init__(self, model, rows: int = 1, graphs: bool = True, pad_vocab: int = 64) -> None:
        self.model = model
        self.pad_vocab = pad_vocab  # on a GPU the output projection's rows are padded to a multiple of this
        self.device = next(model.parameters()).device
        self.graphs = graphs and self.device.type == "cuda"
        self.pad_output = self.device.type == "cuda"  # refresh
        self.rows = rows
        self.cache: StaticKVCache | None = None
        self._captured: dict[tuple[int, int, int], tuple[torch.cuda.CUDAGraph, Tensor]] = {}
        self._tokens: Tensor | None = None  # a graph's input ids, (cache rows,)
        self._pool = None
        self._logits: Tensor | None = None  # what every graph writes its logits to, (cache rows, V)
        self._output: tuple[Tensor, Tensor] | None = None  # the padded output projection (refresh)

    def start_steps(self, model, src: Tensor, beam: int, ban_after_softmax: bool) -> Steps:
        if model is not self.model:
            raise ValueError("this static-cache step belongs to another model")
        steps = StaticSteps(self, src, beam)
        steps.ban_after_softmax = ban_after_softmax
        return steps

    def prepare(self, rows: int, length: int, source_length: int, like: Tensor) -> tuple[int, int]:
        """Buffers for `rows` hypotheses, `length` target and `source_length` source positions (grown when
        needed, which drops the graphs captured on the old ones); returns the lengths a step runs at."""
        c = self.model.config
        L, S = rounded(length, c.max_positions), rounded(source_length, 1 << 30)
        if self.cache is None or not self.cache.fits(rows, L, S, like.dtype):
            with torch.inference_mode(False):  # normal tensors: written in place in and outside inference mode
                self._allocate(rows, L, S, like)
        return L, S

    def _allocate(self, rows: int, L: int, S: int, like: Tensor) -> None:
        """New buffers at least as large as the old ones of the same dtype; the graphs captured on those dropped."""
        c, old = self.model.config, self.cache
        most = (old.rows, old.length, old.source_length) if old is not None and old.dtype == like.dtype else (0, 0, 0)
        rows, L, S = max(rows, self.rows, most[0]), max(L, most[1]), max(S, most[2])
        self.cache = StaticKVCache(c.decoder_layers, c.n_heads, c.d_head, rows, L, S, like)
        self._tokens = torch.zeros(rows, dtype=torch.long, device=like.device)
        self._captured.clear()
        self._logits = None

    def refresh(self) -> None:
        """On a GPU, where the vocabulary is not a multiple of `pad_vocab` (OPUS-MT's 58,101 words): the output
        projection's weight and bias copied into rows padded to one, in place (the graphs read them), at the start of
        each batch so that they are the model's current ones. A product whose output rows are not aligned to 16
        bytes runs on a slow kernel (cuBLAS: docs/benchmarks.md, "Decoding with CUDA graphs")."""
        weight, bias = self.model.output_weight, self.model.logit_bias
        V, D = weight.shape
        if not self.pad_output or V % self.pad_vocab == 0:
            return
        if self._output is None:
            padded = -(-V // self.pad_vocab) * self.pad_vocab
            with torch.inference_mode(False):
                self._output = (weight.new_zeros(padded, D), weight.new_zeros(padded))
        self._output[0][:V].copy_(weight)
        self._output[1][:V].copy_(bias if bias is not None else 0.0)

    def _step(self, tokens: Tensor, view) -> Tensor:
        """The model's static step, with the padded output projection where there is one. Shape: (n,) -> (n, V)"""
        if self._output is None:
            return self.model.static_step(tokens, view)
        hidden = self.model.decoder.static_step(tokens[:, None], view)[:, -1]
        return F.linear(hidden, *self._output)[:, : self.model.output_weight.size(0)]

    def run(self, tokens: Tensor, position: int, length: int, source_length: int) -> Tensor:
        """Logits of one step: `tokens` (n,) at target position `position`. Shape: -> (n, V)"""
        n, cache = tokens.size(0), self.cache
        cache.position.fill_(position)
        if not self.graphs:
            return self._step(tokens, cache.view(n, length, source_length))
        b = bucket(n, cache.rows)
        self._tokens[:n].copy_(tokens)
        key = (b, length, source_length)
        if key not in self._captured:
            self._captured[key] = self._capture(b, length, source_length)
        graph, logits = self._captured[key]
        graph.replay()
        return logits[:n]

    def _capture(self, b: int, length: int, source_length: int) -> tuple[torch.cuda.CUDAGraph, Tensor]:
        """One step of `b` rows as a CUDA graph. The warm-up run before the capture writes what the step writes
        (the same tokens at the same position), so it leaves the cache as the replay does."""
        view, tokens = self.cache.view(b, length, source_length), self._tokens[:b]
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        # autocast's cache of cast weights lives for its context only, and a graph would keep reading it after
        kind = self.device.type
        cast = torch.autocast(
            kind, torch.get_autocast_dtype(kind), enabled=torch.is_autocast_enabled(kind), cache_enabled=False
        )
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side), cast:
            logits = self._step(tokens, view)
        torch.cuda.current_stream(self.device).wait_stream(side)
        if self._logits is None or self._logits.dtype != logits.dtype:  # one output for every graph
            with torch.inference_mode(False):
                self._logits = torch.empty(self.cache.rows, logits.size(-1), dtype=logits.dtype, device=self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool), cast:
            self._logits[:b].copy_(self._step(tokens, view))
        return graph, self._logits[:b]


class StaticSteps(EncoderDecoderSteps):
    """The step protocol of search.py on a StaticDecoding: the sources encoded once, their encoder-decoder
    keys/values copied into the static buffers; rows reordered in place."""

    def __init__(self, static: StaticDecoding, src: Tensor, beam: int) -> None:
        Steps.__init__(self, static.model, True)
        model = static.model
        self.static = static
        static.refresh()
        memory, mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
        cross_kv = model.decoder.start_cache(memory).cross_kv
        additive = additive_mask(mask, cross_kv[0][0])
        self._cross = (
            tuple((k.repeat_interleave(beam, dim=0), v.repeat_interleave(beam, dim=0)) for k, v in cross_kv),
            additive.repeat_interleave(beam, dim=0),
        )
        self.source_length = src.size(1)
        self.first = torch.full((src.size(0) * beam,), model.config.bos_id, dtype=torch.long, device=src.device)
        self.rows = self.first.numel()  # rows the last step fed
        self.source_lengths = (src != model.config.pad_id).sum(1).cpu()
        self.cache, self.prefix, self.written, self.shape = None, None, 0, None

    def limits(self, a: float, b: int) -> Tensor:
        """As EncoderDecoderSteps.limits; the buffers are made ready for the longest output here."""
        limits = super().limits(a, b)
        cross_kv, mask = self._cross
        like = cross_kv[0][0]
        self.shape = self.static.prepare(mask.size(0), int(limits.max()), self.source_length, like)
        self.static.cache.load(cross_kv, mask, self.shape[1])
        self._cross = None
        return limits

    def _logits(self, tokens: Tensor) -> Tensor:
        if self.shape is None:
            raise RuntimeError("StaticSteps.limits must be called before the first step")
        if self.written >= self.shape[0]:
            raise ValueError(f"the static cache holds {self.shape[0]} positions; this step needs more")
        logits = self.static.run(tokens, self.written, *self.shape)
        self.written += 1
        return logits

    def reorder(self, index: Tensor, kept: Tensor | None) -> None:
        cache, rows = self.static.cache, self.rows
        self.rows = index.numel()
        if index.numel() > cache.rows:  # more rows than the buffers hold (beam search's first step widened)
            self.static.rows = index.numel()
            self.static.prepare(index.numel(), self.shape[0], self.shape[1], cache.cross_mask)
            self.static.cache.reorder(index, self.written, self.shape[1], source=cache)
            return
        # the encoder-decoder keys/values are per row here: copied where inputs left or a beam widened
        cache.reorder(index, self.written, self.shape[1], cross=kept is not None or index.numel() != rows)
