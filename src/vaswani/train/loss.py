"""Label-smoothed cross-entropy (§5.4, ε_ls = 0.1) over the real (non-pad) target tokens."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_cross_entropy(
    hidden: Tensor, weight: Tensor, target: Tensor, smoothing: float = 0.1, pad_id: int = 0
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy of `softmax(hidden @ weight.T)`, and how many tokens it sums.

    Only the positions whose target is not padding are projected onto the vocabulary: the largest
    matrix multiply of a training step skips the padding instead of computing logits to ignore.
    The value equals `F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id,
    reduction="sum")` on the full logits (tested). The softmax runs in float32 under autocast.

    Shape: hidden (B, T, D), weight (V, D), target (B, T) -> loss (), tokens ()
    """
    if hidden.shape[:-1] != target.shape or hidden.size(-1) != weight.size(-1):
        raise ValueError(
            f"expected hidden (B, T, D), weight (V, D) and target (B, T), got {tuple(hidden.shape)}, "
            f"{tuple(weight.shape)} and {tuple(target.shape)}"
        )
    real = target != pad_id  # (B, T)
    logits = F.linear(hidden[real], weight)  # (N, V), N real tokens
    loss = F.cross_entropy(logits.float(), target[real], label_smoothing=smoothing, reduction="sum")
    return loss, real.sum()
