"""The Transformer's two descendants on the same layers: a decoder-only causal language model (GPT,
Radford et al. 2018) and an encoder-only masked language model (BERT, Devlin et al. 2019), each with an
optional classifier over one pooled position for fine-tuning.

Both have one vocabulary, token embeddings scaled by sqrt(d_model) and shared with the pre-softmax
projection (§3.4), and the positions, norms and initialisation of the encoder-decoder model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.nn.cache import KVCache
from vaswani.nn.dropout import Dropout
from vaswani.nn.embedding import TokenEmbedding
from vaswani.nn.layers import OutputTransform
from vaswani.nn.masks import padding_mask
from vaswani.nn.transformer import Decoder, Encoder, check_ids, init_weights, own_output_weight
from vaswani.nn.unpad import at_inference


def pair_segments(ids: Tensor, sep_id: int) -> Tensor:
    """BERT's token type ids of sentence pairs `[CLS] a [SEP] b [SEP]`: 0 up to the first [SEP], 1 after it
    (padding too, which no real position attends to). Shape: (B, T) -> (B, T)"""
    sep = (ids == sep_id).long()
    return (sep.cumsum(1) - sep).clamp(max=1)


class _LanguageModel(nn.Module):
    """What both descendants share: the tied output projection (after BERT's transform, model.output_transform)
    and the classification head (after BERT's pooler, model.pooler)."""

    config: ModelConfig

    def _finish(self, config: ModelConfig) -> None:
        # GPT's and BERT's classifier: a linear layer on one position's final state, after dropout; BERT's
        # pooler (model.pooler) first passes that state through a dense layer and tanh.
        self.classifier = nn.Linear(config.d_model, config.n_classes) if config.n_classes else None
        self.pooler = nn.Linear(config.d_model, config.d_model) if config.n_classes and config.pooler else None
        transform = OutputTransform(config.d_model, config.activation, config.layer_norm_eps)
        self.output_transform = transform if config.output_transform else None
        # model.output_bias: a bias on the logits (GPT-2 has none; BERT's MLM head has one)
        self.output_bias = nn.Parameter(torch.zeros(config.tgt_vocab_size)) if config.output_bias else None
        self.classifier_dropout = Dropout(config.dropout)
        self._parameters["output_weight"] = own_output_weight(config)  # model.tie_output false: its own matrix
        self.output_projection: nn.Module | None = None  # what `logits` runs instead, where set (int8 decoding)
        self.output_kind: type[nn.Module] | None = None  # its kind (nn/cpu_linear/onednn_fp32.py replace_linears)
        init_weights(self)

    @property
    def stack(self) -> Encoder | Decoder:
        raise NotImplementedError

    @property
    def output_weight(self) -> Tensor:
        """The pre-softmax matrix: the token embedding, or a matrix of its own (model.tie_output false).
        Shape: (V, D)"""
        own = self._parameters["output_weight"]
        return self.stack.embed.tokens.weight if own is None else own

    def head_states(self, hidden: Tensor) -> Tensor:
        """What the pre-softmax projection reads: the final states, through model.output_transform where the
        model has one (the training loss projects these). Shape: (..., D) -> (..., D)"""
        return hidden if self.output_transform is None else self.output_transform(hidden)

    def logits(self, hidden: Tensor) -> Tensor:
        """Shape: hidden (..., D) -> logits (..., V)"""
        if self.output_projection is not None:  # int8 decoding (nn/cpu_linear/int8.py)
            return self.output_projection(self.head_states(hidden))
        return F.linear(self.head_states(hidden), self.output_weight, self.output_bias)

    def forward(self, ids: Tensor) -> Tensor:
        """Shape: ids (B, T) -> logits (B, T, V)"""
        return self.logits(self.hidden_states(ids))

    def hidden_states(self, ids: Tensor) -> Tensor:
        raise NotImplementedError

    def pooled(self, hidden: Tensor, ids: Tensor) -> Tensor:
        """The state the classifier reads: the first position, the last that is not padding, or the mean over
        the positions that are not padding. Shape: hidden (B, T, D), ids (B, T) -> (B, D)"""
        if self.config.pooling == "first":
            return hidden[:, 0]
        if self.config.pooling == "mean":
            real = (ids != self.config.pad_id).unsqueeze(-1).to(hidden.dtype)
            return (hidden * real).sum(1) / real.sum(1).clamp(min=1)
        last = (ids != self.config.pad_id).sum(1).clamp(min=1) - 1  # right-padded rows
        return hidden[torch.arange(ids.size(0), device=ids.device), last]

    def classify(self, ids: Tensor, hidden: Tensor | None = None) -> Tensor:
        """Class logits of each sequence (pass `hidden` when it is computed already).
        Shape: ids (B, T) -> (B, n_classes)"""
        if self.classifier is None:
            raise ValueError("this model has no classifier (model.n_classes is 0); fine-tune it with vaswani finetune")
        hidden = self.hidden_states(ids) if hidden is None else hidden
        pooled = self.pooled(hidden, ids)  # (B, D)
        if self.pooler is not None:
            pooled = torch.tanh(self.pooler(pooled))
        return self.classifier(self.classifier_dropout(pooled))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


class CausalLM(_LanguageModel):
    """Decoder-only: N causal self-attention layers (no encoder-decoder attention), the next token predicted
    at every position. Generation feeds one token at a time on the KV cache (`decode_step`).

    Example:
        >>> lm = CausalLM(ModelConfig(type="decoder_only", src_vocab_size=68, tgt_vocab_size=68))
        >>> logits = lm(ids)  # (B, T, V): logits[:, t] predicts ids[:, t + 1]
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        tokens = TokenEmbedding(config.tgt_vocab_size, config.d_model, config.scale_embeddings)
        self.decoder = Decoder(config, tokens, cross=False)
        self._finish(config)

    @property
    def stack(self) -> Decoder:
        return self.decoder

    def hidden_states(self, ids: Tensor) -> Tensor:
        """Shape: ids (B, T) -> (B, T, D); right padding never reaches a real position (causal)."""
        check_ids(ids, "ids")
        hidden, _, _ = self.decoder(ids, None, self.decoder.empty_cache(ids.size(0), ids.device))
        return hidden

    def decode_step(self, tokens: Tensor, cache: KVCache | None = None) -> tuple[Tensor, KVCache]:
        """Feed the next token(s) after the `cache.length` positions in the cache.
        Shape: tokens (B,) -> logits (B, V); tokens (B, t) -> logits (B, t, V)"""
        one = tokens.dim() == 1
        tokens = tokens[:, None] if one else tokens
        check_ids(tokens, "tokens")
        if cache is None:
            cache = self.decoder.empty_cache(tokens.size(0), tokens.device)
        if cache.batch_size != tokens.size(0):
            raise ValueError(f"tokens has batch size {tokens.size(0)} but the cache holds {cache.batch_size} rows")
        hidden, cache, _ = self.decoder(tokens, None, cache)
        return self.logits(hidden[:, -1] if one else hidden), cache


class MaskedLM(_LanguageModel):
    """Encoder-only: N bidirectional layers; trained to predict masked tokens from both sides (BERT).

    Example:
        >>> mlm = MaskedLM(ModelConfig(type="encoder_only", src_vocab_size=8000, tgt_vocab_size=8000))
        >>> logits = mlm(ids)  # (B, T, V): at each position, the token that was there
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config, TokenEmbedding(config.src_vocab_size, config.d_model, config.scale_embeddings))
        self._finish(config)

    @property
    def stack(self) -> Encoder:
        return self.encoder

    def hidden_states(self, ids: Tensor) -> Tensor:
        """Shape: ids (B, T) -> (B, T, D); padding is masked out of every attention. With model.pairs, each row is
        a sentence pair `[CLS] a [SEP] b [SEP]`: the tokens after its first [SEP] are segment B."""
        check_ids(ids, "ids")
        segments = pair_segments(ids, self.config.eos_id) if self.config.pairs else None
        hidden, _ = self.encoder(ids, padding_mask(ids, self.config.pad_id), segments=segments, unpad=at_inference())
        return hidden  # at inference zeros at the padding, which no pooling and no masked word reads
