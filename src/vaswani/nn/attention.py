"""Scaled dot-product attention (§3.2.1) and multi-head attention (§3.2.2).

The kernel (scores, mask, softmax) is kept apart from the module (projections, heads): two pure
functions compute `softmax(QK^T / sqrt(d_k)) V`, a readable reference that also returns the weights
and the fused `scaled_dot_product_attention`, and are tested equal.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from vaswani.nn.masks import causal_mask
from vaswani.nn.unpad import TokenRows


def _full_mask(mask: Tensor | None, causal: bool, query_len: int, key_len: int, device: torch.device) -> Tensor | None:
    if not causal or query_len == 1:  # one query at the end of the keys sees them all
        return mask
    causal_part = causal_mask(query_len, key_len, device=device)
    return causal_part if mask is None else mask & causal_part


def reference_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """softmax(QK^T / sqrt(d_k)) V, written out; returns the output and the attention weights.

    `mask` is bool, True = may attend, broadcastable to (B, H, T, S). `causal` adds the causal mask
    aligned bottom-right. A query with no key it may attend gets all-zero weights and output.

    Shape: q (B, H, T, Dh), k and v (B, H, S, Dh) -> output (B, H, T, Dh), weights (B, H, T, S)
    """
    mask = _full_mask(mask, causal, q.size(-2), k.size(-2), q.device)
    # §3.2.1: dividing by sqrt(d_k) keeps the logits' variance near 1, away from softmax saturation.
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, S)
    if mask is not None:
        # A finite minimum (not -inf) keeps fully masked rows free of NaN; they are zeroed after.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights


def _causal_flag(q: Tensor, k: Tensor, mask: Tensor | None, causal: bool) -> bool:
    """Whether the kernel's own is_causal flag is the causal mask: it aligns the diagonal top-left, right only
    when T == S and no other mask. A Python bool: under torch.compile's dynamic shapes `T == S` is a symbolic
    value, which scaled_dot_product_attention refuses (the attention then fell back to eager); it is True there
    where q and k have one length by construction (self-attention without a cache), else the explicit mask."""
    if not causal or mask is not None:
        return False
    same = q.size(-2) == k.size(-2)
    if torch.compiler.is_compiling():  # symbolic there (importing this loads sympy: not at start-up)
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        return statically_known_true(same)
    return same


# How attention runs on a CUDA GPU (benchmarks/compile.py --attention measures each): "sdpa" is torch's choice of
# fused kernel; "no-cudnn" the same without cuDNN's; "composed" the reference's products and softmax (scores
# materialized, fused by torch.compile), for keys of at most CUDA_COMPOSED_KEYS positions.
CUDA_ATTENTION = "sdpa"
CUDA_COMPOSED_KEYS = 128


def fused_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False, dropout_p: float = 0.0
) -> Tensor:
    """The same computation as `reference_attention` through torch's fused kernels (no weights).

    Shape: q (B, H, T, Dh), k and v (B, H, S, Dh) -> output (B, H, T, Dh)
    """
    if _on_gpu(q) and CUDA_ATTENTION == "composed" and k.size(-2) <= CUDA_COMPOSED_KEYS:
        return reference_attention(q, k, v, mask, causal, dropout_p)[0]
    use_flag = _causal_flag(q, k, mask, causal)
    if not use_flag:
        mask = _full_mask(mask, causal, q.size(-2), k.size(-2), q.device)
    if q.size(-2) == 1 and not torch.compiler.is_compiling():  # compiled code picks its own layouts
        # A decoding step's (B, H, 1, Dh) query is a strided view of the projection; the CPU kernel is
        # faster on a contiguous one (benchmarks/race.py).
        q = q.contiguous()
    backends = _backends(q)
    with sdpa_kernel(backends) if backends else contextlib.nullcontext():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=use_flag)


def _on_gpu(q: Tensor) -> bool:
    return q.device.type == "cuda"


def _backends(q: Tensor) -> list[SDPBackend] | None:
    """The kernels fused_attention lets torch choose among for `q` (None: any)."""
    if q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16):
        # torch's CPU flash kernel is several times slower than the math kernel in bf16 (forward + backward
        # at sentence lengths; benchmarks/attention_kernels.py), while faster in fp32.
        return [SDPBackend.MATH]
    if _on_gpu(q) and CUDA_ATTENTION == "no-cudnn":
        return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    return None


def fused_backend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False) -> str:
    """The kernel `fused_attention` runs for these inputs: flash_attention, efficient_attention,
    cudnn_attention or math (torch's dispatcher asked, after our CPU bf16 rule); "unknown" where this torch
    does not say. A padded batch carries a mask, which rules out some kernels (flash on CUDA): this tells
    whether the fused kernel is actually used. Shape: as fused_attention"""
    use_flag = _causal_flag(q, k, mask, causal)
    if not use_flag:
        mask = _full_mask(mask, causal, q.size(-2), k.size(-2), q.device)
    if _backends(q) == [SDPBackend.MATH]:
        return "math"
    choose = getattr(torch, "_fused_sdp_choice", None)  # the dispatcher's own choice (a private function)
    if choose is None:
        return "unknown"
    names = {int(getattr(SDPBackend, n)): n.lower() for n in dir(SDPBackend) if n.isupper()}
    return names.get(int(choose(q, k, v, mask, 0.0, use_flag)), "unknown")


def attention_kernels(d_model: int, n_heads: int, device: torch.device, dtype: torch.dtype) -> dict[str, str]:
    """Which kernel each kind of attention of a training batch runs on `device` in `dtype` (fused_backend):
    the encoder's and the cross-attention's over right-padded sources, the decoder's causal self-attention."""
    d_head = d_model // n_heads
    q = torch.zeros(2, n_heads, 7, d_head, device=device, dtype=dtype)
    padded = torch.ones(2, 1, 1, 7, device=device, dtype=torch.bool)
    padded[1, ..., 5:] = False
    return {
        "padded self/cross": fused_backend(q, q, q, padded),
        "causal self": fused_backend(q, q, q, None, causal=True),
    }


class MultiHeadAttention(nn.Module):
    """h attention heads over learned projections, concatenated and projected by W^O (§3.2.2).

    `in_proj` stacks W^Q, W^K and W^V (as torch.nn.MultiheadAttention does), so self-attention
    projects with one matrix multiply and encoder-decoder attention with two.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _split(self, x: Tensor, parts: int) -> tuple[Tensor, ...]:
        B, T, _ = x.shape
        x = x.view(B, T, parts, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)  # (parts, B, H, T, Dh)
        return x.unbind(0)

    def project_self(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values from one sequence. Shape: x (B, T, D) -> 3 x (B, H, T, Dh)"""
        self._check(x, "x")
        return self._split(self.in_proj(x), 3)

    def project_query(self, x: Tensor) -> Tensor:
        """Shape: x (B, T, D) -> q (B, H, T, Dh)"""
        self._check(x, "x")
        return self._split(self._rows(x, 0, self.d_model), 1)[0]

    def project_key_value(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of the encoder output, computed once per source sentence.

        Shape: memory (B, S, D) -> k, v (B, H, S, Dh)
        """
        self._check(memory, "memory")
        return self._split(self._rows(memory, self.d_model, 3 * self.d_model), 2)

    def _rows(self, x: Tensor, start: int, stop: int) -> Tensor:
        """x through rows start..stop-1 of `in_proj` (W^Q, or W^K and W^V); an int8 in_proj (cpu_linear/int8.py) has
        them
        packed apart. Shape: (B, T, D) -> (B, T, stop - start)"""
        if isinstance(self.in_proj, nn.Linear):
            return F.linear(x, self.in_proj.weight[start:stop], self.in_proj.bias[start:stop])
        return self.in_proj.part(start, stop)(x)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of projected heads, concatenated and projected by W^O.

        Keys and values may serve groups of query rows: with B = n * g queries over n rows of keys, g consecutive
        query rows share one row of keys/values (a beam's hypotheses of one source: encoder-decoder attention
        keeps one copy of its keys per sentence). Their queries are attended to as one row of g * T, which is
        the same arithmetic per query; `mask` then has a row per key row, or one per query row (the first of each
        group is read). Not with `causal`.

        Shape: q (B, H, T, Dh), k and v (B or n, H, S, Dh) -> output (B, T, D), weights (B, H, T, S) or None
        """
        out, weights = self._heads(q, k, v, mask, causal, need_weights)
        return self.out_proj(out), weights

    def attend_rows(self, x: Tensor, rows: TokenRows, mask: Tensor) -> Tensor:
        """Self-attention over a padded batch's real tokens held as rows (nn/unpad.py): the projections run on
        those rows only, the attention on the padded layout.

        Shape: x (N, D), mask (B, 1, 1, S) -> (N, D)
        """
        q, k, v = self._split(rows.pad(self.in_proj(x)), 3)  # 3 x (B, H, S, Dh)
        out, _ = self._heads(q, k, v, mask)
        return self.out_proj(rows.pack(out))

    def _heads(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool = False, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """`attend` before W^O: the heads' outputs side by side. Shape: as attend"""
        dropout_p = self.dropout if self.training else 0.0
        B, H, T, Dh = q.shape
        n = k.size(0)
        grouped = n != B
        if grouped:
            if causal or B % n:
                raise ValueError(f"{B} query rows cannot share {n} rows of keys" + (" causally" if causal else ""))
            g = B // n
            q = q.view(n, g, H, T, Dh).transpose(1, 2).reshape(n, H, g * T, Dh)
            if mask is not None and mask.size(0) == B:
                mask = mask[::g]
        if need_weights:
            out, weights = reference_attention(q, k, v, mask, causal, dropout_p)
        else:
            out, weights = fused_attention(q, k, v, mask, causal, dropout_p), None
        if grouped:
            out = out.view(n, H, g, T, Dh).permute(0, 2, 3, 1, 4).reshape(B, T, H * Dh)  # (B, T, D)
            if weights is not None:
                weights = weights.view(n, H, g, T, -1).transpose(1, 2).reshape(B, H, T, -1)
        else:
            out = out.transpose(1, 2).reshape(B, T, H * Dh)  # (B, T, D)
        return out, weights

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Self-attention over `x`, or encoder-decoder attention from `x` to `memory`.

        Shape: x (B, T, D), memory (B, S, D), mask broadcastable to (B, H, T, S)
               -> output (B, T, D), weights (B, H, T, S) when need_weights else None
        """
        if memory is None:
            q, k, v = self.project_self(x)
        else:
            q = self.project_query(x)
            k, v = self.project_key_value(memory)
        return self.attend(q, k, v, mask, causal, need_weights)

    def _check(self, x: Tensor, name: str) -> None:
        if x.dim() != 3 or x.size(-1) != self.d_model or not x.is_floating_point():
            raise ValueError(
                f"{name} must be a float tensor of shape (batch, length, {self.d_model}), "
                f"got shape {tuple(x.shape)} and dtype {x.dtype}"
            )
