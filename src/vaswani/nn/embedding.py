"""Token embeddings scaled by sqrt(d_model) (§3.4) and positional encodings (§3.5)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.nn.dropout import Dropout


class TokenEmbedding(nn.Module):
    """Embedding lookup multiplied by sqrt(d_model); its weight doubles as the pre-softmax matrix.

    Shape: ids (B, L) -> (B, L, D)
    """

    def __init__(self, vocab_size: int, d_model: int, scale: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        # §3.4: "we multiply those weights by sqrt(d_model)" (model.scale_embeddings; GPT-2 and BERT do not)
        self.scale = math.sqrt(d_model) if scale else 1.0
        # tensor2tensor's initialiser: N(0, d_model^-0.5), so scaled embeddings start at unit variance.
        nn.init.normal_(self.weight, mean=0.0, std=d_model**-0.5)

    def forward(self, ids: Tensor) -> Tensor:
        x = F.embedding(ids, self.weight)
        return x * self.scale if self.scale != 1.0 else x


def sinusoid_table(length: int, d_model: int, start: int = 0) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...) for pos in [start, start+length).

    Computed in float64 so that far positions keep their precision. Shape: -> (length, D)
    """
    position = torch.arange(start, start + length, dtype=torch.float64)[:, None]  # (L, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = position * inv_freq  # (L, ceil(D/2))
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal positions for any length: the first `length` (model.max_positions) are tabulated once,
    later ones (a language model generating past its context) computed for the call and not kept.

    `forward` never changes the module, so threads may share it (vaswani serve). Not part of the state dict;
    nothing about it is learned or bounded.
    """

    def __init__(self, d_model: int, length: int = 1024) -> None:
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", sinusoid_table(length, d_model), persistent=False)

    def forward(self, start: int, length: int) -> Tensor:
        """Shape: -> (length, D)"""
        if start + length <= self.table.size(0):
            return self.table[start : start + length]
        return sinusoid_table(length, self.d_model, start).to(self.table.device)

    def at(self, position: Tensor) -> Tensor:
        """The encoding of positions given as a tensor, read on the device (a CUDA graph's step; one per row of a
        continuous batch). Shape: position () -> (1, D); (n,) -> (n, D)"""
        return self.table.index_select(0, position.view(-1))


class LearnedPositions(nn.Module):
    """Learned absolute positions (Table 3 row E), bounded by max_positions.

    They start at unit scale, the scale of the sqrt(d_model)-scaled token embeddings they are added to (GPT and
    BERT start both tables at one std too). Started at N(0, d_model^-0.5), as the unscaled token table is, they
    are ~sqrt(d_model) times smaller and Adam needs hundreds of updates to grow them: nanoGPT's CPU recipe then
    ended at a clearly higher held-out loss than from unit scale (docs/benchmarks.md, "Quality").
    """

    def __init__(self, d_model: int, max_positions: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_positions, d_model))
        nn.init.normal_(self.weight, mean=0.0, std=1.0)

    def forward(self, start: int, length: int) -> Tensor:
        """Shape: -> (length, D)"""
        if start + length > self.weight.size(0):
            raise ValueError(
                f"position {start + length - 1} is beyond model.max_positions={self.weight.size(0)} of the "
                "learned positional embeddings; shorten the input or use positions: sinusoidal"
            )
        return self.weight[start : start + length]

    def at(self, position: Tensor) -> Tensor:
        """Shape: position () -> (1, D); (n,) -> (n, D)"""
        return self.weight.index_select(0, position.view(-1))


class Embeddings(nn.Module):
    """Dropout(token embedding * sqrt(d_model) + position), as the input to each stack (§3.4, §5.4).

    `norm` (model.embedding_norm, BERT's): a LayerNorm over the sum, before the dropout; None: none.
    `segments` (model.segments, BERT's token type embeddings): one vector per segment, added to each position's
    sum (segment A, 0, where no segment ids are given); None: none.
    """

    def __init__(
        self,
        tokens: TokenEmbedding,
        positions: nn.Module,
        dropout: float,
        norm: nn.Module | None = None,
        segments: int = 0,
    ):
        super().__init__()
        self.tokens = tokens
        self.positions = positions
        self.segments = nn.Parameter(torch.empty(segments, tokens.weight.size(1)).normal_()) if segments else None
        self.norm = norm if norm is not None else nn.Identity()
        self.dropout = Dropout(dropout)

    def forward(self, ids: Tensor, start: int | Tensor = 0, segments: Tensor | None = None) -> Tensor:
        """Shape: ids (B, L), segments None or (B, L) -> (B, L, D), positions start, ..., start + L - 1; a tensor
        `start` (L is 1) is read on the device: shape () one position for every row, (B,) one per row (a continuous
        batch's rows, decode/continuous.py)"""
        x = self.tokens(ids)
        if self.segments is not None:
            x = x + (self.segments[0] if segments is None else F.embedding(segments, self.segments)).to(x.dtype)
        if isinstance(start, Tensor):
            positions = self.positions.at(start)
            positions = positions[:, None] if start.dim() == 1 else positions  # (B, 1, D): a row's own
        else:
            positions = self.positions(start, ids.size(1))
        return self.dropout(self.norm(x + positions.to(x.dtype)))
