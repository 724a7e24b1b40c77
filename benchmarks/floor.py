"""The matrix-product floor: how fast any faithful implementation could possibly be.

Every implementation of the paper's model does the same matrix products (the linear layers and the
pre-softmax projection); they differ in everything around them. Timing those products alone, back
to back on the same shapes and dtype with torch's own kernels, gives a lower bound on the time of a
training step or a decoding run. Attention's own products, softmax, layer norm, the loss and the
search are left out, so the bound is optimistic: no implementation on these kernels gets there.
`race.py` divides it into the peers' times to show the largest ratio any implementation could reach.
"""

from __future__ import annotations

import math
import time

import torch
from torch import Tensor

from vaswani import ModelConfig

Shape = tuple[int, int, int, int]  # (rows, in_features, out_features, how many such layers)


def _layer_shapes(c: ModelConfig, enc_rows: int, dec_rows: int, cross_kv: bool = True) -> list[Shape]:
    D, F, Le, Ld = c.d_model, c.d_ff, c.n_layers, c.decoder_layers
    encoder = [(enc_rows, D, 3 * D, Le), (enc_rows, D, D, Le), (enc_rows, D, F, Le), (enc_rows, F, D, Le)]
    decoder = [(dec_rows, D, 3 * D, Ld), (dec_rows, D, D, 3 * Ld), (dec_rows, D, F, Ld), (dec_rows, F, D, Ld)]
    kv = [(enc_rows, D, 2 * D, Ld)] if cross_kv else []
    return [s for s in encoder + kv + decoder if s[0] > 0]


def training_shapes(c: ModelConfig, src: Tensor, tgt_in: Tensor, real_tokens: int) -> list[Shape]:
    """The linear layers of one teacher-forced pass, and the pre-softmax projection of the real
    (non-padding) target tokens only: the least any implementation must multiply."""
    return [*_layer_shapes(c, src.numel(), tgt_in.numel()), (real_tokens, c.d_model, c.tgt_vocab_size, 1)]


def decoding_seconds(c: ModelConfig, batch: int, src_len: int, rows: int, steps: int, dtype: torch.dtype) -> float:
    """Encoding `batch` sentences of `src_len` once, then `steps` one-token steps over `rows` rows."""
    step = [*_layer_shapes(c, 0, rows, cross_kv=False), (rows, c.d_model, c.tgt_vocab_size, 1)]
    encode = gemm_seconds(_layer_shapes(c, batch * src_len, 0), dtype, backward=False)
    return encode + gemm_seconds(step, dtype, backward=False, loops=steps)


def gemm_seconds(shapes: list[Shape], dtype: torch.dtype, backward: bool, loops: int = 1, repeats: int = 3) -> float:
    """Best time of `repeats` runs of: `loops` times, x @ W^T for every layer of `shapes`, each with its
    own weight as in the model (and with `backward`, the two products of its gradients: dY @ W and
    dY^T @ x), on random tensors of `dtype`."""
    layers = []
    for m, k, n, count in shapes:
        x, grad = torch.randn(m, k, dtype=dtype), torch.randn(m, n, dtype=dtype)
        layers += [(x, torch.randn(n, k, dtype=dtype), grad) for _ in range(count)]

    def once() -> None:
        for _ in range(loops):
            for x, w, grad in layers:
                torch.mm(x, w.t())
                if backward:
                    torch.mm(grad, w)
                    torch.mm(grad.t(), x)

    once()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        once()
        best = min(best, time.perf_counter() - start)
    return best
