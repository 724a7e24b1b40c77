"""decode.static_cache: the decoder's step on keys/values in buffers allocated once, and on a GPU replayed as CUDA
graphs.

A search step of the dynamic cache (steps.EncoderDecoderSteps) launches some two hundred small kernels, and each
step the cache grows by a concatenation. Here every buffer is allocated once per engine (`StaticKVCache`: as many
rows as the engine serves, the longest output and source seen, rounded up), a step writes its keys/values in
place at a position held on the device, and attention reads the leading part of the buffers through a mask. So a
step has fixed shapes: on CUDA it is captured once per shape as a CUDA graph and then replayed with one launch
(`torch.cuda.CUDAGraph`, one memory pool for all of them). Shapes are rounded up (`bucket`), so a few graphs serve
every batch: rows that finish leave the batch, and the rows beyond them up to the bucket compute values nobody reads.
On a CPU the same step runs eagerly (what tests compare with the dynamic cache: identical outputs).

A beam search's step is one graph too (`continuations`, `fused`): the rows kept by the last step reordered in the
buffers, the decoder's step, the log-softmax with its banned words, and each sentence's best continuations
(continuations.packed_continuations), so that a step is a graph replay, three small copies in and one out,
instead of some seventy launches and four synchronisations around the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.decode.continuations import packed_continuations, unpacked_continuations
from vaswani.decode.steps import EncoderDecoderSteps, Steps, additive_mask
from vaswani.nn.cache import StaticKVCache

ROUND_POSITIONS = 32  # self-attention and source lengths are rounded up to a multiple of this


BUCKETS = sorted({m << i for i in range(24) for m in (1, 3)})  # 1, 2, 3, 4, 6, 8, 12, 16, 24, ...


def bucket(n: int, most: int) -> int:
    """The row count a step of n rows runs at: the next power of two or 1.5 times one, at most `most` (16 shapes
    up to 256 rows, at most a third of the rows wasted)."""
    return min(next(size for size in BUCKETS if size >= n), most)


def rounded(n: int, most: int) -> int:
    return min(-(-n // ROUND_POSITIONS) * ROUND_POSITIONS, most)


@dataclass(frozen=True)
class BeamStep:
    """One beam step's shape and rules: n sentences of `width` rows at `position`, buffers of `length` positions and
    `source_length` source positions, the m best continuations, the `banned` words (V,) bool, banned after the
    softmax or before it, and with `eos` the next step's inputs chained (StaticDecoding.continuations)."""

    n: int
    width: int
    position: int
    length: int
    source_length: int
    m: int
    banned: Tensor
    after_softmax: bool
    eos: int | None = None


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
        self.fused = self.graphs  # beam steps as one graph each (`continuations`); eager on a CPU where set (tests)
        self.cast_weights = True  # under bf16 autocast with graphs, the linear layers cast once per batch (refresh)
        self.chains = self.graphs  # a fused beam step launches the next one before its results are read
        self._host: list[Tensor] = []  # two pinned buffers the chained steps' results are copied to
        self.pad_output = self.device.type == "cuda"  # refresh
        self.rows = rows
        self.cache: StaticKVCache | None = None
        self._captured: dict[tuple, tuple[torch.cuda.CUDAGraph, Tensor]] = {}
        self._tokens: Tensor | None = None  # a graph's input ids, (cache rows,)
        self._scores: Tensor | None = None  # a beam graph's summed log-probabilities per row, (cache rows,)
        self._rows: Tensor | None = None  # a beam graph's reordering (row i takes row _rows[i]), (cache rows,)
        self._banned: Tensor | None = None  # a beam graph's banned words, (V,) bool
        self._banned_from: Tensor | None = None  # the mask last copied into _banned
        self._pool = None
        self._logits: Tensor | None = None  # what every graph writes its logits to, (cache rows, V)
        self._output: tuple[Tensor, Tensor] | None = None  # the padded (cast) output projection (refresh)
        self._weights: dict[str, Tensor] = {}  # the decoder's linear layers cast to autocast's dtype (refresh)
        self._decoder = _StaticDecoder(model.decoder)
        self._linears = {name for name, m in model.decoder.named_modules() if isinstance(m, torch.nn.Linear)}

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
        self._scores = torch.zeros(rows, dtype=torch.float32, device=like.device)
        self._rows = torch.arange(rows, device=like.device)
        self._forget_graphs()
        self._logits = None

    def _forget_graphs(self) -> None:
        """The graphs dropped (they read buffers that are being replaced), and their memory pool with them: a new
        graph captured into a pool whose graphs are all gone, while a tensor of it lives on (a beam graph's output),
        fails an internal assertion of torch's allocator (seen on an H200, torch 2.11)."""
        if self._captured and self.graphs:  # a chained step launched ahead may still run one of them
            torch.cuda.current_stream(self.device).synchronize()
        self._captured.clear()
        self._pool = None

    def refresh(self) -> None:
        """At the start of each batch, the weights the graphs read copied in place from the model's current ones.
        On a GPU, where the vocabulary is not a multiple of `pad_vocab` (OPUS-MT's 58,101 words): the output
        projection in rows padded to one (a product whose output rows are not aligned to 16 bytes runs on a slow
        kernel in cuBLAS: docs/benchmarks.md, "GPU decoding"). Under bf16 (fp16) autocast with graphs:
        the decoder's linear layers and the output projection in that dtype, cast once per batch where autocast
        would cast them at every step (the same values: autocast rounds them alike)."""
        weight, bias = self.model.output_weight, self.model.logit_bias
        V, D = weight.shape
        kind = self.device.type
        cast = self.graphs and self.cast_weights and torch.is_autocast_enabled(kind)
        low = torch.get_autocast_dtype(kind) if cast else None
        padded = -(-V // self.pad_vocab) * self.pad_vocab if self.pad_output else V
        if padded == V and low is None:
            self._output, self._weights = None, {}
            return
        dtype = low or weight.dtype
        if self._output is None or self._output[0].dtype != dtype:
            with torch.inference_mode(False):  # new buffers: the graphs read the old ones
                self._output = (weight.new_zeros(padded, D, dtype=dtype), weight.new_zeros(padded, dtype=dtype))
                self._weights = {
                    f"decoder.{name}": p.detach().to(low, copy=True)
                    for name, p in self.model.decoder.named_parameters()
                    if low is not None and name.rpartition(".")[0] in self._linears
                }
            self._forget_graphs()
        self._output[0][:V].copy_(weight)
        self._output[1][:V].copy_(bias if bias is not None else 0.0)
        params = dict(self.model.decoder.named_parameters())
        for name, cast in self._weights.items():
            cast.copy_(params[name.removeprefix("decoder.")])

    def _step(self, tokens: Tensor, view) -> Tensor:
        """The model's static step, with the padded (cast) output projection and the cast linear layers where there
        are. Shape: (n,) -> (n, V)"""
        if self._output is None:
            return self.model.static_step(tokens, view)
        if self._weights:
            hidden = torch.func.functional_call(self._decoder, self._weights, (tokens[:, None], view))[:, -1]
        else:
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
            view, tokens_b = self.cache.view(b, length, source_length), self._tokens[:b]

            def into_logits(logits: Tensor) -> Tensor:  # one output buffer for every graph
                if self._logits is None or self._logits.dtype != logits.dtype:
                    with torch.inference_mode(False):
                        rows = self.cache.rows
                        self._logits = torch.empty(rows, logits.size(-1), dtype=logits.dtype, device=self.device)
                return self._logits[:b].copy_(logits)

            self._captured[key] = self._capture(lambda: into_logits(self._step(tokens_b, view)))
        graph, logits = self._captured[key]
        graph.replay()
        return logits[:n]

    def continuations(self, inputs: tuple[Tensor, Tensor, Tensor | None] | None, beam: BeamStep) -> Tensor:
        """One beam step of n sentences' `width` hypotheses (`beam`), as steps.Steps.best_continuations computes it,
        on this step: first the rows reordered, then the step at `position`, its log-probabilities with the `banned`
        words at -inf (before the softmax, or after it), and each sentence's m best continuations; on a GPU one graph.
        `inputs`: the tokens, summed log-probabilities and reordering (row i takes row rows[i]; None: as they are),
        or None where the last step left them in the buffers (`eos`). With `eos`, the step also leaves there the
        next step's inputs for all n sentences: the first `width` continuations that do not end in EOS, as
        beam.beam_search keeps them, so that the next step can run before the host has read this one (chained).
        Shape: tokens (n*width,), scores (n, width), banned (V,) bool -> (n, 3m') on the device
        (continuations.packed_continuations)"""
        n, width, position, m, after_softmax, eos = (
            beam.n,
            beam.width,
            beam.position,
            beam.m,
            beam.after_softmax,
            beam.eos,
        )
        length, source_length = beam.length, beam.source_length
        cache, rows_n = self.cache, n * width
        cache.position.fill_(position)
        reorder = inputs is None or inputs[2] is not None
        if inputs is not None:
            tokens, scores, rows = inputs
            self._tokens[:rows_n].copy_(tokens)
            self._scores[:rows_n].copy_(scores.view(-1))
            if rows is not None:  # the rows after them keep stale (valid) indices: rows nobody reads
                self._rows[:rows_n].copy_(rows)
        self._set_banned(beam.banned)
        b = bucket(n, cache.rows // width) if self.graphs else n  # sentences: whole groups of `width` rows
        view = cache.view(b * width, length, source_length)
        tokens_b, scores_b = self._tokens[: b * width], self._scores[: b * width].view(b, width)
        rows_b, next_inputs = self._rows[: b * width], (self._tokens, self._scores, self._rows)

        def step(reorder_by: Tensor | None, chain_into: tuple[Tensor, Tensor, Tensor]) -> Tensor:
            if reorder_by is not None:
                cache.reorder(reorder_by, length, source_length, cross=False)
            packed = self._continuations(tokens_b, scores_b, view, m, self._banned, after_softmax)
            if eos is not None:
                _chain(packed, eos, width, chain_into)
            return packed

        if not self.graphs:
            return step(rows_b if reorder else None, next_inputs)[:n]
        key = ("beam", b, width, length, source_length, m, reorder, after_softmax, eos)
        if key not in self._captured:
            identity = torch.arange(b * width, device=self.device)
            scratch = tuple(torch.empty_like(x) for x in next_inputs)
            # the warm-up reorders nothing (an identity) and chains into scratch buffers: the inputs stay the replay's
            self._captured[key] = self._capture(
                lambda: step(rows_b if reorder else None, next_inputs),
                warm_up=lambda: step(identity if reorder else None, scratch),
            )
        graph, packed = self._captured[key]
        graph.replay()
        return packed[:n]

    def _set_banned(self, banned: Tensor) -> None:
        """The banned words in the buffer a graph reads, copied only when they change."""
        if banned is not self._banned_from:
            if self._banned is None or self._banned.shape != banned.shape:
                with torch.inference_mode(False):
                    self._banned = torch.zeros_like(banned)
            self._banned.copy_(banned)
            self._banned_from = banned

    def compact(self, kept: Tensor, width: int, written: int, source_length: int) -> None:
        """Between chained steps (`continuations` with `eos`), only the sentences `kept` (their positions among
        those of the last step) go on: the cache's rows (self-attention up to `written`, encoder-decoder) and the next
        step's inputs gathered, its reordering renumbered. Shape: kept (n',)"""
        rows = (kept[:, None] * width + torch.arange(width, device=kept.device)).view(-1)
        self.cache.reorder(rows, written, source_length, cross=True)
        m = rows.numel()
        self._tokens[:m] = self._tokens.index_select(0, rows)
        self._scores[:m] = self._scores.index_select(0, rows)
        old = self._rows.index_select(0, rows)  # rows of the last step's layout, each of a kept sentence
        place = torch.zeros(self.cache.rows, dtype=torch.long, device=kept.device)  # a sentence's new position
        place.index_copy_(0, kept, torch.arange(kept.numel(), device=kept.device))
        self._rows[:m] = place.index_select(0, old // width) * width + old % width

    def _continuations(
        self, tokens: Tensor, scores: Tensor, view, m: int, banned: Tensor, after_softmax: bool
    ) -> Tensor:
        logits = self._step(tokens, view).float()
        if after_softmax:
            log_probs = F.log_softmax(logits, dim=-1).masked_fill(banned, float("-inf"))
        else:
            log_probs = F.log_softmax(logits.masked_fill(banned, float("-inf")), dim=-1)
        n, width = scores.shape
        return packed_continuations(scores, log_probs, n, width, m)

    def _capture(self, body, warm_up=None) -> tuple[torch.cuda.CUDAGraph, Tensor]:
        """`body()` captured as a CUDA graph, and what it returns (written by each replay). `warm_up()` (by default
        `body`) runs once before, on a side stream, and must leave the buffers as a replay does: it writes what the
        step writes (the same tokens at the same position)."""
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
            (warm_up or body)()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool), cast:
            out = body()
        return graph, out


def _chain(packed: Tensor, eos: int, width: int, into: tuple[Tensor, Tensor, Tensor]) -> None:
    """The next beam step's inputs from this one's best continuations, as beam.beam_search makes them: each
    sentence's first `width` continuations that do not end in EOS (best first), their words, summed
    log-probabilities and the rows they extend, written into `into` (tokens, scores, rows). Shape: packed (b, 3m)"""
    top_scores, origin, word = unpacked_continuations(packed)
    b, m = word.shape
    rank = torch.arange(m, device=word.device) + (word == eos) * m
    live = rank.argsort(dim=1)[:, :width]  # (b, width)
    tokens, scores, rows = into
    tokens[: b * width].copy_(word.gather(1, live).view(-1))
    scores[: b * width].copy_(top_scores.gather(1, live).view(-1))
    base = torch.arange(b, device=word.device)[:, None] * width
    rows[: b * width].copy_((base + origin.gather(1, live)).view(-1))


class _StaticDecoder(torch.nn.Module):
    """The decoder's static step as a module's forward, for torch.func.functional_call (cast weights)."""

    def __init__(self, decoder) -> None:
        super().__init__()
        self.decoder = decoder

    def forward(self, tokens: Tensor, view) -> Tensor:
        return self.decoder.static_step(tokens, view)


class StaticSteps(EncoderDecoderSteps):
    """The step protocol of steps.py on a StaticDecoding: the sources encoded once, their encoder-decoder
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
        self.pending: Tensor | None = None  # a reordering the next fused step applies (reorder)
        self.ahead: tuple[Tensor, torch.cuda.Event | None] | None = None  # the next step's results, launched
        self.kept: Tensor | None = None  # the sentences of the step ahead that go on (reorder)
        self._banned_masks: dict[bool, Tensor] = {}  # ban_eos -> (V,) bool

    def limits(self, a: float, b: int) -> Tensor:
        """As EncoderDecoderSteps.limits; the buffers are made ready for the longest output here."""
        limits = super().limits(a, b)
        cross_kv, mask = self._cross
        like = cross_kv[0][0]
        self.shape = self.static.prepare(mask.size(0), int(limits.max()), self.source_length, like)
        self.static.cache.load(cross_kv, mask, self.shape[1])
        self._cross = None
        return limits

    def _room(self) -> None:
        if self.shape is None:
            raise RuntimeError("StaticSteps.limits must be called before the first step")
        if self.written >= self.shape[0]:
            raise ValueError(f"the static cache holds {self.shape[0]} positions; this step needs more")

    def _logits(self, tokens: Tensor) -> Tensor:
        self._room()
        if self.ahead is not None:
            raise RuntimeError("a chained beam step is in flight: the search must go on with best_continuations")
        if self.pending is not None:
            self.static.cache.reorder(self.pending, self.written, self.shape[1], cross=False)
            self.pending = None
        logits = self.static.run(tokens, self.written, *self.shape)
        self.written += 1
        return logits

    def best_continuations(
        self,
        tokens: Tensor,
        scores: Tensor,
        n: int,
        width: int,
        m: int,
        ban_eos: bool = False,
        ban_eos_next: bool | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Steps.best_continuations as one step of the static decoding (`StaticDecoding.continuations`: one graph
        on a GPU) where it is `fused`, the reordering of the step before applied in it. Where it also `chains`
        (a GPU; from the second step on, when the beam is full), each step leaves the next one's inputs on the device
        and the next step is launched before this one's results are read: the host's bookkeeping of a step runs
        while the GPU computes the next. The next step runs for every sentence of this one; those the host then
        finds done are dropped from its results and from the buffers (`StaticDecoding.compact`) before the step
        after. `ban_eos_next`: whether the next step bans EOS (None: unknown, no step ahead)."""
        if not self.static.fused or self.forced is not None:  # a forced first step: Steps.step's scores
            return super().best_continuations(tokens, scores, n, width, m, ban_eos)
        static, after = self.static, self.ban_after_softmax
        chain = self.static.chains and width * 2 == m
        eos = self.model.config.eos_id if chain else None
        if self.ahead is not None:  # this step was launched by the last call: its results, of the sentences kept
            result, select = self.ahead, None
            if self.kept is not None:
                # to the host without waiting (`cpu()` would wait for the step before the next is launched)
                select = self.kept.to("cpu", non_blocking=True)
                if result[1] is not None:
                    result = (result[0], torch.cuda.Event())
                    result[1].record(torch.cuda.current_stream(static.device))
                static.compact(self.kept, width, self.written, self.shape[1])
        else:
            self._room()
            inputs = (tokens, scores, self.pending)
            beam = BeamStep(n, width, self.written, *self.shape, m, self._mask(ban_eos), after, eos)
            packed = static.continuations(inputs, beam)
            result, select = self._to_host(packed), None
            self.pending = None
            self.written += 1
        self.ahead, self.kept = None, None
        if chain and ban_eos_next is not None and self.written < self.shape[0]:  # the next step, launched now
            mask = self._mask(ban_eos_next)
            packed = static.continuations(None, BeamStep(n, width, self.written, *self.shape, m, mask, after, eos))
            self.ahead = self._to_host(packed)
            self.written += 1
        packed, event = result
        if event is not None:
            event.synchronize()
        if select is not None:
            packed = packed.index_select(0, select)
        return unpacked_continuations(packed.clone())

    def _mask(self, ban_eos: bool) -> Tensor:
        """`banned_ids` as a (V,) bool mask on the device."""
        if ban_eos not in self._banned_masks:
            device = self.static.device
            mask = torch.zeros(self.model.output_weight.size(0), dtype=torch.bool, device=device)
            self._banned_masks[ban_eos] = mask.index_fill_(0, self.banned_ids(ban_eos, device), True)
        return self._banned_masks[ban_eos]

    def _to_host(self, packed: Tensor) -> tuple[Tensor, torch.cuda.Event | None]:
        """`packed` copied to the host: on a GPU without waiting, into one of two pinned buffers (a step and the one
        launched after it), with the event to wait for."""
        if packed.device.type != "cuda":
            return packed, None
        shape = (self.static.cache.rows, packed.size(1))
        buffers = self.static._host
        if not buffers or buffers[0].shape != shape:
            with torch.inference_mode(False):
                buffers[:] = [torch.empty(shape, pin_memory=True) for _ in range(2)]
        buffers.reverse()
        host = buffers[0][: packed.size(0)]
        host.copy_(packed, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.static.device))
        return host, event

    def reorder(self, index: Tensor, kept: Tensor | None) -> None:
        cache, rows = self.static.cache, self.rows
        if self.ahead is not None:  # the next step, launched, reordered its rows itself: only the sentences kept
            self.rows, self.kept = index.numel(), kept
            return
        if self.pending is not None:  # not applied yet: both at once
            index, self.pending = self.pending.index_select(0, index), None
        self.rows = index.numel()
        if index.numel() > cache.rows:  # more rows than the buffers hold (beam search's first step widened)
            self.static.rows = index.numel()
            self.static.prepare(index.numel(), self.shape[0], self.shape[1], cache.cross_mask)
            self.static.cache.reorder(index, self.written, self.shape[1], source=cache)
            return
        # the encoder-decoder keys/values are per row here: copied where inputs left or a beam widened
        cross = kept is not None or index.numel() != rows
        if self.static.fused and not cross:  # hypotheses of each sentence swap: in the next step's graph
            self.pending = index
            return
        cache.reorder(index, self.written, self.shape[1], cross=cross)
