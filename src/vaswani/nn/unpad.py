"""A padded batch's real tokens as rows, for the encoder at inference: its position-wise work (the linear layers,
the feed-forward network, residuals and layer norms: nearly all of its arithmetic) skips the padding, as
CTranslate2's encoder does; the attention alone runs on the padded layout (docs/benchmarks.md, "CPU decoding").
"""

from __future__ import annotations

import torch
from torch import Tensor

# Below this share of padding positions the copies in and out of the padded layout (two a layer) would cost about
# what the rows save: length-sorted batches gain little, batches as they come much more (benchmarks/unpad.py).
MIN_PADDING = 0.05


def at_inference() -> bool:
    """Whether an encoder called now may drop its padding: no gradients asked for (training keeps the padded layout,
    one compiled graph of fixed structure) and not being compiled (the real tokens' count is data-dependent)."""
    return not torch.is_grad_enabled() and not torch.compiler.is_compiling()


class TokenRows:
    """The real tokens of a right-padded batch, in order, one row each (N of them).

    Shape: mask (B, 1, 1, S), bool, True = a real token
    """

    def __init__(self, mask: Tensor) -> None:
        self.batch, self.length = mask.size(0), mask.size(-1)
        self.index = mask.reshape(self.batch * self.length).nonzero().squeeze(1)  # (N,)

    @classmethod
    def worth_it(cls, mask: Tensor) -> TokenRows | None:
        """The batch's real tokens where at least MIN_PADDING of its positions are padding, else None (and where
        it has none: a batch of empty sources keeps the padded path, whose attention gives them zeros)."""
        rows = cls(mask)
        n = rows.index.numel()
        return rows if 0 < n <= (1 - MIN_PADDING) * rows.batch * rows.length else None

    def pack(self, x: Tensor) -> Tensor:
        """Shape: x (B, S, ...) -> (N, ...)"""
        return x.flatten(0, 1).index_select(0, self.index)

    def pad(self, x: Tensor) -> Tensor:
        """Zeros at the padding (finite: attention multiplies a masked value by a zero weight).

        Shape: x (N, ...) -> (B, S, ...)
        """
        out = x.new_zeros(self.batch * self.length, *x.shape[1:])
        return out.index_copy_(0, self.index, x).view(self.batch, self.length, *x.shape[1:])
