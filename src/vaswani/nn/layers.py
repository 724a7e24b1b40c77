"""Position-wise feed-forward network (§3.3) and the Transformer layer (§3.1), encoder and decoder alike.

Every sub-layer is wrapped as `LayerNorm(x + Dropout(Sublayer(x)))` (post-norm, the paper) or
`x + Dropout(Sublayer(LayerNorm(x)))` (pre-norm, an option); `_pre` and `_post` hold the difference.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.nn.attention import MultiHeadAttention
from vaswani.nn.cache import GrowingSlot, KeyValue, StaticSlot
from vaswani.nn.dropout import Dropout
from vaswani.nn.unpad import TokenRows

ACTIVATIONS = {
    "relu": F.relu,  # §3.3
    "gelu": F.gelu,  # BERT's (erf)
    "gelu_tanh": partial(F.gelu, approximate="tanh"),  # GPT-2's "gelu_new"
    "silu": F.silu,  # Marian's "swish"
}


class FeedForward(nn.Module):
    """max(0, x W1 + b1) W2 + b2, the same for every position (§3.3); GELU, its tanh form or SiLU as options.

    Shape: (B, L, D) -> (B, L, D)
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu") -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.activation(self.linear1(x)))


class OutputTransform(nn.Module):
    """BERT's masked-LM head transform (model.output_transform): LayerNorm(activation(x W + b)), between the
    last layer and the pre-softmax projection.

    Shape: (..., D) -> (..., D)
    """

    def __init__(self, d_model: int, activation: str, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.activation = ACTIVATIONS[activation]
        self.norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.activation(self.dense(x)))


class TransformerLayer(nn.Module):
    """One layer of §3.1: self-attention, encoder-decoder attention when `cross`, then feed-forward.

    The encoder layer (cross=False, bidirectional), the decoder layer (cross=True, causal) and a
    decoder-only layer (cross=False, causal) are this one module, in blocks as torch's own layer
    (`_sa_block`, `_mha_block`, `_ff_block`). Teacher-forced training and incremental decoding are the
    same code: new self-attention keys and values are appended to `past` (None in training) and returned.
    """

    def __init__(self, config: ModelConfig, cross: bool = False) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        n_sublayers = 3 if cross else 2
        self.norms = nn.ModuleList(nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) for _ in range(n_sublayers))
        self.dropout = Dropout(config.dropout)  # §5.4: residual dropout on each sub-layer's output
        self.self_attn = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout)
        # The decoder's encoder-decoder attention (§3.2.3); None in encoder and decoder-only layers.
        self.cross_attn = (
            MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout) if cross else None
        )
        self.feed_forward = FeedForward(config.d_model, config.d_ff, config.activation)

    def _pre(self, x: Tensor, i: int) -> Tensor:
        return self.norms[i](x) if self.norm_first else x

    def _post(self, x: Tensor, i: int) -> Tensor:
        return x if self.norm_first else self.norms[i](x)

    def _sa_block(
        self,
        x: Tensor,
        mask: Tensor | None,
        causal: bool,
        past: KeyValue | StaticSlot | GrowingSlot | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None, KeyValue]:
        q, k, v = self.self_attn.project_self(x)
        if isinstance(past, (StaticSlot, GrowingSlot)):  # written in place (a static cache's `mask` hides the rest)
            k, v = past.write(k, v)
        elif past is not None:
            k = torch.cat([past[0], k], dim=2)  # (B, H, t + T, Dh)
            v = torch.cat([past[1], v], dim=2)
        h, weights = self.self_attn.attend(q, k, v, mask, causal, need_weights)
        return h, weights, (k, v)

    def _mha_block(
        self, x: Tensor, memory_kv: KeyValue, memory_mask: Tensor | None, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        q = self.cross_attn.project_query(x)
        return self.cross_attn.attend(q, *memory_kv, mask=memory_mask, need_weights=need_weights)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.feed_forward(x)

    def forward_rows(self, x: Tensor, rows: TokenRows, mask: Tensor) -> Tensor:
        """An encoder layer (self-attention, feed-forward) over a padded batch's real tokens held as rows
        (nn/unpad.py): `forward` without the padding's positions, for inference.

        Shape: x (N, D), mask (B, 1, 1, S) -> (N, D)
        """
        x = self._post(x + self.dropout(self.self_attn.attend_rows(self._pre(x, 0), rows, mask)), 0)
        i = len(self.norms) - 1
        return self._post(x + self.dropout(self._ff_block(self._pre(x, i))), i)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        past: KeyValue | StaticSlot | GrowingSlot | None = None,
        memory_kv: KeyValue | None = None,
        memory_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, KeyValue, tuple[Tensor | None, Tensor | None]]:
        """`mask` (bool, True = may attend) and/or `causal` for the self-attention; `memory_kv` the
        encoder-decoder keys/values of a layer built with `cross`.

        Shape: x (B, T, D), mask broadcastable to (B, H, T, t + T), past 2 x (B, H, t, Dh),
               memory_kv 2 x (B, H, S, Dh), memory_mask (B, 1, 1, S)
               -> (B, T, D), self keys/values 2 x (B, H, t + T, Dh), weights (B, H, T, t + T), (B, H, T, S)
        """
        h, self_weights, kv = self._sa_block(self._pre(x, 0), mask, causal, past, need_weights)
        x = self._post(x + self.dropout(h), 0)
        cross_weights = None
        if self.cross_attn is not None:
            if memory_kv is None:
                raise ValueError("this layer attends to an encoder's output: pass memory_kv")
            h, cross_weights = self._mha_block(self._pre(x, 1), memory_kv, memory_mask, need_weights)
            x = self._post(x + self.dropout(h), 1)
        i = len(self.norms) - 1
        x = self._post(x + self.dropout(self._ff_block(self._pre(x, i))), i)
        return x, kv, (self_weights, cross_weights)
