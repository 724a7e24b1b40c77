"""Label-smoothed cross-entropy (§5.4, ε_ls = 0.1) over the real (non-pad) target tokens."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from vaswani.runtime.loss_chunks import loss_chunk_rows


def label_smoothed_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    target: Tensor,
    smoothing: float = 0.1,
    pad_id: int = 0,
    chunk_rows: int | None = None,
    bias: Tensor | None = None,
    words: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy of `softmax(hidden @ weight.T + bias)`, and how many tokens it sums.

    Only the positions whose target is not padding are projected onto the vocabulary, `chunk_rows` of
    them at a time (default: loss_chunks.loss_chunk_rows, 256 on a CPU, larger on a GPU): the pre-softmax
    projection, the loss and its gradient are computed chunk by chunk (on a CPU while the chunk's logits are in
    cache), and no (tokens x vocabulary) tensor is kept for backward.
    The value and its gradients equal `F.cross_entropy(logits, target, label_smoothing=smoothing,
    ignore_index=pad_id, reduction="sum")` on the full logits (tested). Under autocast the projection
    runs in the autocast dtype and the softmax in float32, as autocast would run them.

    `bias`: the logits' bias (model.output_bias: Marian's final_logits_bias, BERT's MLM head), or None.
    `words`: the ids the softmax covers (Transformer.output_ids(), model.output_words target), else every row of
    `weight`: only those rows are projected, ε is spread over them, and a target outside them (a dev set's piece
    the training targets never had) is left out of the loss and of the count.
    Shape: hidden (B, T, D), weight (V, D), target (B, T), bias (V,), words (W,) -> loss (), tokens ()
    """
    if hidden.shape[:-1] != target.shape or hidden.size(-1) != weight.size(-1):
        raise ValueError(
            f"expected hidden (B, T, D), weight (V, D) and target (B, T), got {tuple(hidden.shape)}, "
            f"{tuple(weight.shape)} and {tuple(target.shape)}"
        )
    if chunk_rows is None:
        chunk_rows = loss_chunk_rows(hidden.device.type, weight.size(0))
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    real = target != pad_id  # (B, T)
    if words is not None:  # the targets renumbered among `words`; -1 outside them
        position = torch.full((weight.size(0),), -1, dtype=torch.long, device=target.device)
        position[words] = torch.arange(len(words), device=target.device)
        target = position[target]
        real &= target >= 0
        weight, bias = weight[words], None if bias is None else bias[words]
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    with_grad = torch.is_grad_enabled() and (
        hidden.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    chunking = _Chunking(smoothing, dtype, chunk_rows, with_grad)
    loss = _ProjectedSmoothedCrossEntropy.apply(hidden[real], weight, target[real], chunking, bias)
    return loss, real.sum()


@dataclass(frozen=True)
class _Chunking:
    """How the loss runs: label smoothing ε, the products' dtype, rows of logits at a time, and whether the
    gradients are computed (in the forward pass)."""

    smoothing: float
    dtype: torch.dtype
    chunk_rows: int
    with_grad: bool


class _ProjectedSmoothedCrossEntropy(torch.autograd.Function):
    """sum over rows of (1 - ε) (lse - x_target) + ε (lse - mean(x)), x = h W^T, lse = logsumexp(x).

    The loss is the end of the graph, so its gradient with respect to the logits is known in the
    forward pass: softmax(x) - (1 - ε) onehot - ε / V. Each chunk's logits are computed, turned into
    that gradient in place and multiplied back onto W and h at once; backward only scales the two
    saved gradients. Writing and reading the whole (N, V) logits and their gradient instead (float32
    cast, logsumexp, softmax in backward, its cast back) made a bf16 training step of the Multi30k
    model measurably slower, side by side in the trainer.
    """

    @staticmethod
    def forward(
        ctx,
        hidden: Tensor,
        weight: Tensor,
        target: Tensor,
        chunking: _Chunking,
        bias: Tensor | None,
    ) -> Tensor:
        smoothing, dtype, chunk_rows, with_grad = (
            chunking.smoothing,
            chunking.dtype,
            chunking.chunk_rows,
            chunking.with_grad,
        )
        h, w = hidden.to(dtype), weight.to(dtype)  # (N, D), (V, D)
        V = w.size(0)
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        grad_h = torch.empty_like(h) if with_grad else None
        grad_w = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if with_grad else None
        grad_b = torch.zeros(V, dtype=torch.float32, device=w.device) if with_grad and bias is not None else None
        for start in range(0, h.size(0), chunk_rows):
            rows, t = h[start : start + chunk_rows], target[start : start + chunk_rows, None]
            x = (rows @ w.T).float()  # (n, V) logits; a fresh float32 tensor, changed in place below
            if bias is not None:
                x += bias.float()
            mean = x.mean(dim=-1)
            picked = x.gather(1, t).squeeze(1)
            top = x.amax(dim=-1, keepdim=True)
            e = x.sub_(top).exp_()  # exp(x - max)
            norm = e.sum(dim=-1)
            lse = top.squeeze(1) + norm.log()
            total += ((1.0 - smoothing) * (lse - picked) + smoothing * (lse - mean)).sum()
            if with_grad:
                g = e.mul_(norm.reciprocal()[:, None]).sub_(smoothing / V)  # softmax - ε / V
                g.scatter_add_(1, t, g.new_full(t.shape, smoothing - 1.0))
                if grad_b is not None:
                    grad_b += g.sum(0)
                g = g.to(dtype)
                grad_h[start : start + chunk_rows] = g @ w
                grad_w += g.T @ rows
        if with_grad:
            ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.dtypes = hidden.dtype, weight.dtype, None if bias is None else bias.dtype
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad_h, grad_w, grad_b = ctx.saved_tensors
        grad_bias = None if grad_b is None else (grad_b * grad).to(ctx.dtypes[2])
        return (
            (grad_h * grad).to(ctx.dtypes[0]),
            (grad_w * grad).to(ctx.dtypes[1]),
            None,
            None,
            grad_bias,
        )
