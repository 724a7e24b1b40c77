"""The encoder and decoder stacks and the encoder-decoder Transformer (§3.1, Figure 1)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.nn.attention import MultiHeadAttention
from vaswani.nn.cache import GrowingKVCache, KVCache, StaticView
from vaswani.nn.embedding import Embeddings, LearnedPositions, SinusoidalPositions, TokenEmbedding
from vaswani.nn.layers import TransformerLayer
from vaswani.nn.masks import padding_mask
from vaswani.nn.rows_cache import RowsKVCache
from vaswani.nn.unpad import TokenRows, at_inference

# The logit of a word the output layer does not produce (model.output_words target): finite, so that a forced
# word (a glossary's, a scored reference's) still has a score, and representable in float16; exp(-10,000) is 0.
NEVER = -1e4


def _positions(config: ModelConfig) -> nn.Module:
    if config.positions == "learned":
        return LearnedPositions(config.d_model, config.max_positions)
    return SinusoidalPositions(config.d_model, config.max_positions)


def _embeddings(config: ModelConfig, tokens: TokenEmbedding, segments: int = 0) -> Embeddings:
    norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.embedding_norm else None
    return Embeddings(tokens, _positions(config), config.dropout, norm, segments)


def _final_norm(config: ModelConfig) -> nn.Module:
    # Pre-norm leaves the last residual sum unnormalised, so each stack ends with a LayerNorm.
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else nn.Identity()


@dataclass
class AttentionWeights:
    """Attention weights of every layer and head, for inspection.

    Shape: encoder[i] (B, H, S, S), decoder_self[i] (B, H, T, T), cross[i] (B, H, T, S)
    """

    encoder: list[Tensor]
    decoder_self: list[Tensor]
    cross: list[Tensor]


class Encoder(nn.Module):
    """N encoder layers over embedded source tokens."""

    def __init__(self, config: ModelConfig, tokens: TokenEmbedding) -> None:
        super().__init__()
        self.embed = _embeddings(config, tokens, config.segments)
        self.layers = nn.ModuleList(TransformerLayer(config) for _ in range(config.n_layers))
        self.norm = _final_norm(config)

    def forward(
        self,
        src: Tensor,
        mask: Tensor,
        need_weights: bool = False,
        segments: Tensor | None = None,
        unpad: bool = False,
    ) -> tuple[Tensor, list[Tensor]]:
        """`unpad`: at inference, the layers' position-wise work on the real tokens only where the batch has
        padding enough (nn/unpad.py); the memory then holds zeros at the padding (masked wherever it is read).
        Shape: src (B, S), mask (B, 1, 1, S), segments None or (B, S) -> memory (B, S, D), weights n_layers x
        (B, H, S, S)"""
        x = self.embed(src, segments=segments)
        rows = TokenRows.worth_it(mask) if unpad and not need_weights and not self.training else None
        if rows is not None:
            x = rows.pack(x)  # (N, D)
            for layer in self.layers:
                x = layer.forward_rows(x, rows, mask)
            return rows.pad(self.norm(x)), []
        weights = []
        for layer in self.layers:
            x, _, (w, _) = layer(x, mask=mask, need_weights=need_weights)
            weights.append(w)
        return self.norm(x), weights if need_weights else []


class Decoder(nn.Module):
    """N causal layers over embedded target tokens, attending to the encoder output when `cross`
    (the paper's decoder), or to nothing else (a decoder-only language model, GPT)."""

    def __init__(self, config: ModelConfig, tokens: TokenEmbedding, cross: bool = True) -> None:
        super().__init__()
        self.embed = _embeddings(config, tokens)
        self.layers = nn.ModuleList(TransformerLayer(config, cross=cross) for _ in range(config.decoder_layers))
        self.norm = _final_norm(config)
        self.n_heads, self.d_head = config.n_heads, config.d_head

    def start_cache(self, memory: Tensor) -> KVCache:
        """Encoder-decoder keys/values of every layer, computed once; no target positions yet."""
        cross_kv = tuple(layer.cross_attn.project_key_value(memory) for layer in self.layers)
        return KVCache(KVCache.empty_self_kv(cross_kv[0][0], len(self.layers)), cross_kv)

    def empty_cache(self, batch_size: int, device: torch.device | None = None) -> KVCache:
        """A decoder-only cache holding no positions yet."""
        like = torch.empty(batch_size, self.n_heads, 0, self.d_head, device=device)
        return KVCache(KVCache.empty_self_kv(like, len(self.layers)))

    def static_step(self, tokens: Tensor, cache: StaticView) -> Tensor:
        """One step on a static cache: each row's token at position `cache.position`, its keys/values written
        there in place. Fixed shapes and no host synchronisation (a CUDA graph captures it).

        Shape: tokens (n, 1) -> hidden (n, 1, D)
        """
        x = self.embed(tokens, start=cache.position)
        visible = cache.visible()
        for layer, slot, cross_kv in zip(self.layers, cache.self_kv, cache.cross_kv, strict=True):
            x, _, _ = layer(x, mask=visible, past=slot, memory_kv=cross_kv, memory_mask=cache.cross_mask)
        return self.norm(x)

    def rows_step(self, tokens: Tensor, cache: RowsKVCache) -> Tensor:
        """One step of a continuous batch (nn/rows_cache.py): each row's token at its own position, its keys and
        values written in the cache's next column, the columns before the row's start hidden from it.

        Shape: tokens (rows,) -> hidden (rows, 1, D)
        """
        x = self.embed(tokens[:, None], start=cache.positions())
        visible = cache.visible()
        for i, layer in enumerate(self.layers):
            x, _, _ = layer(
                x, mask=visible, past=cache.slot(i), memory_kv=cache.cross_kv[i], memory_mask=cache.cross_mask
            )
        cache.advance(1)
        return self.norm(x)

    def forward(
        self,
        tgt: Tensor,
        memory_mask: Tensor,
        cache: KVCache | GrowingKVCache,
        self_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, KVCache, list[tuple[Tensor | None, Tensor | None]]]:
        """Decode `tgt` as the positions after the `cache.length` already in the cache (a KVCache, or a
        GrowingKVCache, written in place and returned).

        Shape: tgt (B, T), memory_mask (B, 1, 1, S) -> hidden (B, T, D), cache of length t + T, weights
        """
        x = self.embed(tgt, start=cache.length)
        self_kv, weights = [], []
        cross = cache.cross_kv or (None,) * len(self.layers)
        growing = isinstance(cache, GrowingKVCache)
        pasts = [cache.slot(i) for i in range(len(self.layers))] if growing else cache.self_kv
        for layer, past, cross_kv in zip(self.layers, pasts, cross, strict=True):
            x, kv, w = layer(
                x,
                mask=self_mask,
                causal=self_mask is None,
                past=past if cache.length or growing else None,
                memory_kv=cross_kv,
                memory_mask=memory_mask,
                need_weights=need_weights,
            )
            self_kv.append(kv)
            weights.append(w)
        cache = cache.advance(tgt.size(1)) if growing else KVCache(tuple(self_kv), cache.cross_kv)
        return self.norm(x), cache, weights if need_weights else []


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    Example:
        >>> model = Transformer(ModelConfig.preset("small", vocab_size=8000))
        >>> logits = model(src, tgt_in)  # (B, T, V)
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        src_tokens = TokenEmbedding(config.src_vocab_size, config.d_model, config.scale_embeddings)
        tgt_tokens = (
            src_tokens
            if config.share_embeddings
            else TokenEmbedding(config.tgt_vocab_size, config.d_model, config.scale_embeddings)
        )
        self.encoder = Encoder(config, src_tokens)
        self.decoder = Decoder(config, tgt_tokens)
        # §3.4: the pre-softmax linear shares the embedding matrix (no bias). Untied, it is a matrix of its own,
        # registered under the name every reader uses (the property below), so the state dict calls it that too.
        own = own_output_weight(config)
        self._parameters["output_weight"] = own
        # model.output_bias: a bias on the logits (Marian's final_logits_bias), zero until trained or imported.
        self.output_bias = nn.Parameter(torch.zeros(config.tgt_vocab_size)) if config.output_bias else None
        # model.output_words target: which target words the output layer can produce (set by `vaswani train`
        # from the training targets, saved with the weights); None: all of them.
        words = torch.ones(config.tgt_vocab_size, dtype=torch.bool) if config.output_words == "target" else None
        self.register_buffer("output_words", words)
        self.output_projection: nn.Module | None = None  # what `logits` runs instead, where set (int8 decoding)
        self.output_kind: type[nn.Module] | None = (
            None  # its kind (nn/cpu_linear/onednn_fp32.py replace_linears), for OutputRows
        )
        init_weights(self)

    @property
    def output_weight(self) -> Tensor:
        """The pre-softmax matrix: the target embedding when tied, else its own. Shape: (V_tgt, D)"""
        own = self._parameters["output_weight"]
        return self.decoder.embed.tokens.weight if own is None else own

    @property
    def logit_bias(self) -> Tensor | None:
        """What decoding and exports add to the logits: output_bias, and NEVER on the words the output layer does
        not produce (model.output_words target). Shape: (V_tgt,) or None"""
        if self.output_words is None:
            return self.output_bias
        bias = self.output_bias
        if bias is None:
            bias = self.output_weight.new_zeros(len(self.output_words))
        return bias.masked_fill(~self.output_words, NEVER)

    def output_ids(self) -> Tensor | None:
        """The ids of the words the output layer produces, ascending (the training loss's softmax covers these
        only); None: every word. Shape: (W,)"""
        return None if self.output_words is None else self.output_words.nonzero().squeeze(1)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Shape: src (B, S) -> memory (B, S, D), memory_mask (B, 1, 1, S)"""
        check_ids(src, "src")
        mask = padding_mask(src, self.config.pad_id)
        memory, _ = self.encoder(src, mask, unpad=at_inference())
        return memory, mask

    def decode(self, tgt_in: Tensor, memory: Tensor, memory_mask: Tensor) -> Tensor:
        """Teacher-forced decoding of the shifted-right target: final decoder states, before the
        pre-softmax projection (training computes its loss from these, see train/loss.py).

        Shape: tgt_in (B, T), memory (B, S, D), memory_mask (B, 1, 1, S) -> hidden (B, T, D)
        """
        check_ids(tgt_in, "tgt_in")
        hidden, _, _ = self.decoder(tgt_in, memory_mask, self.decoder.start_cache(memory))
        return hidden

    def hidden_states(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Shape: src (B, S), tgt_in (B, T) -> hidden (B, T, D)"""
        memory, memory_mask = self.encode(src)
        return self.decode(tgt_in, memory, memory_mask)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Shape: src (B, S), tgt_in (B, T) -> logits (B, T, V)"""
        return self.logits(self.hidden_states(src, tgt_in))

    def logits(self, hidden: Tensor, rows: OutputRows | None = None) -> Tensor:
        """`rows`: the output layer over some words only (a shortlist), NEVER for the others.
        Shape: hidden (..., D) -> logits (..., V)"""
        if rows is not None:
            return rows(hidden)
        if self.output_projection is not None:  # int8 decoding (nn/cpu_linear/int8.py)
            return self.output_projection(hidden)
        return F.linear(hidden, self.output_weight, self.logit_bias)

    def decode_step(
        self,
        tokens: Tensor,
        memory: Tensor,
        memory_mask: Tensor,
        cache: KVCache | GrowingKVCache | None = None,
        rows: OutputRows | None = None,
    ) -> tuple[Tensor, KVCache | GrowingKVCache]:
        """Incremental decoding: feed the next token(s), get their logits and the extended cache.

        Pass `cache=None` on the first step; the encoder-decoder keys/values are computed then, once. `rows`: the
        output layer over a shortlist's words (`OutputRows`), the others' logits NEVER.
        Shape: tokens (B,) -> logits (B, V); tokens (B, t) -> logits (B, t, V); memory (B, S, D)
        """
        one = tokens.dim() == 1
        tokens = tokens[:, None] if one else tokens  # (B, t)
        check_ids(tokens, "tokens")
        if cache is None:
            cache = self.decoder.start_cache(memory)
        if cache.batch_size != tokens.size(0):
            raise ValueError(f"tokens has batch size {tokens.size(0)} but the cache holds {cache.batch_size} rows")
        hidden, cache, _ = self.decoder(tokens, memory_mask, cache)
        logits = self.logits(hidden[:, -1] if one else hidden, rows)
        return logits, cache

    def rows_step(self, tokens: Tensor, cache: RowsKVCache, rows: OutputRows | None = None) -> Tensor:
        """`decode_step` on a continuous batch's cache (nn/rows_cache.py): rows that joined at different steps, each
        at its own position; the cache is advanced in place. Shape: tokens (rows,) -> logits (rows, V)"""
        check_ids(tokens[:, None], "tokens")
        return self.logits(self.decoder.rows_step(tokens, cache)[:, -1], rows)

    def static_step(self, tokens: Tensor, cache: StaticView) -> Tensor:
        """`decode_step` on a static cache (nn/cache.py StaticKVCache): the same logits, fixed shapes, the cache
        written in place. Shape: tokens (n,) -> logits (n, V)"""
        return self.logits(self.decoder.static_step(tokens[:, None], cache)[:, -1])

    def attention_weights(self, src: Tensor, tgt_in: Tensor) -> AttentionWeights:
        """Per-layer, per-head attention weights of a teacher-forced pass (the normal path keeps none)."""
        check_ids(src, "src")
        check_ids(tgt_in, "tgt_in")
        memory_mask = padding_mask(src, self.config.pad_id)
        memory, encoder = self.encoder(src, memory_mask, need_weights=True)
        cache = self.decoder.start_cache(memory)
        _, _, decoder = self.decoder(tgt_in, memory_mask, cache, need_weights=True)
        return AttentionWeights(encoder, [w[0] for w in decoder], [w[1] for w in decoder])

    def num_parameters(self) -> int:
        """Distinct trainable parameters (a shared matrix counts once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


class OutputRows(nn.Module):
    """The output layer over the words `ids` only (a vocabulary shortlist, decode/shortlist.py): their logits as the
    whole layer computes them (the same kind of layer, packed or int8, over their rows of the matrix: each row's
    arithmetic is its own), NEVER for every other word. `allowed` (inputs, W): which of the words each input may
    produce, the others NEVER too; an input's rows are consecutive and as many per input (the step protocol's
    rows), and `keep(kept)` follows the inputs that go on. Made once per batch: the step's product shrinks from V
    words to W. Shape: hidden (rows, D) or (rows, t, D) -> logits (rows, V) or (rows, t, V)"""

    def __init__(self, model: Transformer, ids: Tensor, allowed: Tensor | None = None) -> None:
        super().__init__()
        self.ids, self.vocab, self.allowed = ids, model.config.tgt_vocab_size, allowed
        with torch.no_grad():
            weight = model.output_weight.index_select(0, ids)  # (W, D)
            bias = model.logit_bias
            bias = None if bias is None else bias.index_select(0, ids)
            kind = model.output_kind  # PackedLinear or Int8Linear (decoding on a CPU): one of that kind, these rows
            self.layer = kind(weight, bias, ()) if kind is not None else None
        self.weight, self.bias = (weight, bias) if self.layer is None else (None, None)

    def keep(self, kept: Tensor) -> None:
        """Only the inputs `kept` (their positions among those still running) go on."""
        if self.allowed is not None:
            self.allowed = self.allowed.index_select(0, kept)

    def forward(self, hidden: Tensor) -> Tensor:
        some = self.layer(hidden) if self.layer is not None else F.linear(hidden, self.weight, self.bias)  # (..., W)
        if self.allowed is not None:
            banned = ~self.allowed.repeat_interleave(some.size(0) // self.allowed.size(0), dim=0)  # (rows, W)
            some.masked_fill_(banned if some.dim() == 2 else banned[:, None], NEVER)  # the layer's own output
        logits = some.new_full((*some.shape[:-1], self.vocab), NEVER)  # (..., V)
        return logits.index_copy_(logits.dim() - 1, self.ids, some)


def own_output_weight(config: ModelConfig) -> nn.Parameter | None:
    """The pre-softmax matrix of a model whose output is not tied to its target embedding (model.tie_output
    false), initialised as the embeddings are; None when tied. Shape: (V_tgt, D)"""
    if config.tie_output:
        return None
    return nn.Parameter(torch.empty(config.tgt_vocab_size, config.d_model).normal_(0.0, config.d_model**-0.5))


def init_weights(model: nn.Module) -> None:
    """Xavier-uniform for every projection, per W^Q/W^K/W^V block, as the tensor2tensor reference."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)
        if isinstance(module, MultiHeadAttention):
            for block in module.in_proj.weight.data.chunk(3):  # W^Q, W^K, W^V: each D x D
                nn.init.xavier_uniform_(block)


def check_ids(ids: Tensor, name: str) -> None:
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype not in (torch.long, torch.int32):
        got = f"shape {tuple(ids.shape)} and dtype {ids.dtype}" if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"{name} must be token ids of shape (batch, length) with dtype torch.long, got {got}")
    if ids.size(1) == 0:
        raise ValueError(f"{name} has length 0; every sequence needs at least one token (e.g. EOS)")
