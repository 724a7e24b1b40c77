"""Position-wise feed-forward network (§3.3) and the encoder and decoder layers (§3.1).

Every sub-layer is wrapped as `LayerNorm(x + Dropout(Sublayer(x)))` (post-norm, the paper) or
`x + Dropout(Sublayer(LayerNorm(x)))` (pre-norm, an option); `_pre` and `_post` hold the difference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.nn.attention import MultiHeadAttention
from vaswani.nn.dropout import Dropout

KeyValue = tuple[Tensor, Tensor]


class FeedForward(nn.Module):
    """max(0, x W1 + b1) W2 + b2, the same for every position (§3.3); GELU as an option.

    Shape: (B, L, D) -> (B, L, D)
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu") -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.activation(self.linear1(x)))


class _ResidualLayer(nn.Module):
    def __init__(self, config: ModelConfig, n_sublayers: int) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        self.norms = nn.ModuleList(nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) for _ in range(n_sublayers))
        self.dropout = Dropout(config.dropout)  # §5.4: residual dropout on each sub-layer's output
        self.feed_forward = FeedForward(config.d_model, config.d_ff, config.activation)

    def _pre(self, x: Tensor, i: int) -> Tensor:
        return self.norms[i](x) if self.norm_first else x

    def _post(self, x: Tensor, i: int) -> Tensor:
        return x if self.norm_first else self.norms[i](x)

    def _feed_forward_block(self, x: Tensor) -> Tensor:
        i = len(self.norms) - 1
        return self._post(x + self.dropout(self.feed_forward(self._pre(x, i))), i)


class EncoderLayer(_ResidualLayer):
    """Self-attention, then feed-forward."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, n_sublayers=2)
        self.self_attn = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout)

    def forward(self, x: Tensor, mask: Tensor | None, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Shape: x (B, S, D), mask (B, 1, 1, S) -> (B, S, D), weights (B, H, S, S) or None"""
        h, weights = self.self_attn(self._pre(x, 0), mask=mask, need_weights=need_weights)
        x = self._post(x + self.dropout(h), 0)
        return self._feed_forward_block(x), weights


class DecoderLayer(_ResidualLayer):
    """Masked self-attention, encoder-decoder attention, then feed-forward.

    Teacher-forced training and incremental decoding are the same code: new keys and values of the
    self-attention are appended to `past` (empty in training) and returned for the next step.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, n_sublayers=3)
        self.self_attn = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout)
        self.cross_attn = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout)

    def forward(
        self, x: Tensor, cross_kv: KeyValue, memory_mask: Tensor | None, past: KeyValue | None = None,
        self_mask: Tensor | None = None, need_weights: bool = False,
    ) -> tuple[Tensor, KeyValue, tuple[Tensor | None, Tensor | None]]:
        """`self_mask` None means causal only, exact for right-padded targets.

        Shape: x (B, T, D), cross_kv 2 x (B, H, S, Dh), memory_mask (B, 1, 1, S), past 2 x (B, H, t, Dh)
               -> (B, T, D), self keys/values 2 x (B, H, t + T, Dh), weights (B, H, T, t + T), (B, H, T, S)
        """
        q, k, v = self.self_attn.project_self(self._pre(x, 0))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)  # (B, H, t + T, Dh)
            v = torch.cat([past[1], v], dim=2)
        h, self_weights = self.self_attn.attend(q, k, v, self_mask, self_mask is None, need_weights)
        x = self._post(x + self.dropout(h), 0)
        q = self.cross_attn.project_query(self._pre(x, 1))
        h, cross_weights = self.cross_attn.attend(q, *cross_kv, mask=memory_mask, need_weights=need_weights)
        x = self._post(x + self.dropout(h), 1)
        return self._feed_forward_block(x), (k, v), (self_weights, cross_weights)
