"""Label-smoothed cross-entropy (§5.4, ε_ls = 0.1) over the real (non-pad) target tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothed_cross_entropy(
    hidden: Tensor, weight: Tensor, target: Tensor, smoothing: float = 0.1, pad_id: int = 0
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy of `softmax(hidden @ weight.T)`, and how many tokens it sums.

    Only the positions whose target is not padding are projected onto the vocabulary: the largest
    matrix multiply of a training step skips the padding instead of computing logits to ignore.
    The value and its gradient equal `F.cross_entropy(logits, target, label_smoothing=smoothing,
    ignore_index=pad_id, reduction="sum")` on the full logits (tested). The softmax runs in float32
    under autocast.

    Shape: hidden (B, T, D), weight (V, D), target (B, T) -> loss (), tokens ()
    """
    if hidden.shape[:-1] != target.shape or hidden.size(-1) != weight.size(-1):
        raise ValueError(
            f"expected hidden (B, T, D), weight (V, D) and target (B, T), got {tuple(hidden.shape)}, "
            f"{tuple(weight.shape)} and {tuple(target.shape)}"
        )
    real = target != pad_id  # (B, T)
    logits = F.linear(hidden[real], weight)  # (N, V), N real tokens
    return _SmoothedCrossEntropy.apply(logits, target[real], smoothing), real.sum()


class _SmoothedCrossEntropy(torch.autograd.Function):
    """sum over rows of (1 - ε) (lse - x_target) + ε (lse - mean(x)), with lse = logsumexp(x).

    Written out because its gradient is one expression, softmax(x) - (1 - ε) onehot - ε / V, which
    the backward computes in place in one new (N, V) tensor (subtract lse, exp, subtract ε / V, scale),
    where autograd through F.cross_entropy allocates several (log_softmax backward, the smoothing
    term's dense fill and add); that was ~16% of a training step on the Multi30k model
    (docs/benchmarks.md).
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, smoothing: float) -> Tensor:
        x = logits.float()  # (N, V)
        lse = torch.logsumexp(x, dim=-1)  # (N,)
        nll = lse - x.gather(1, target[:, None]).squeeze(1)
        uniform = lse - x.mean(dim=-1)  # cross-entropy against the uniform distribution
        ctx.save_for_backward(logits, target, lse)
        ctx.smoothing = smoothing
        return ((1.0 - smoothing) * nll + smoothing * uniform).sum()

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        logits, target, lse = ctx.saved_tensors
        eps, V = ctx.smoothing, logits.size(-1)
        out = torch.sub(logits, lse[:, None]).exp_()  # softmax, float32 (type promotion, no copy of bf16 logits)
        out.sub_(eps / V).mul_(grad)
        out.scatter_add_(1, target[:, None], (-(1.0 - eps) * grad).expand(target.size(0), 1))
        return out.to(logits.dtype), None, None
