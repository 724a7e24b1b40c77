"""Model FLOPs: what one training step computes, counted by hand, and the share of the device's peak it reaches
(model FLOPs utilisation, MFU, as in PaLM, Chowdhery et al. 2022, appendix B).

A matrix product of (m x k) by (k x n) is 2mkn FLOPs. Per token, with d = d_model, f = d_ff, V the vocabulary,
S the source length and T the target length of its sequence:

    encoder layer, per source token       8d^2 (Q, K, V, output) + 4Sd (scores, weighted sum) + 4df (feed-forward)
    decoder layer, per target token       8d^2 + 4Td (self-attention) + 4d^2 + 4Sd (cross-attention: Q, output,
                                          scores, sum) + 4df; and 4d^2 per source token (cross K, V), per layer
    decoder-only layer, per token         8d^2 + 4Td + 4df
    pre-softmax projection                2dV per predicted token (the loss projects only those: train/loss.py),
                                          + 2d^2 through model.output_transform (BERT's MLM head)
    classifier, per classified sequence   2dC (C classes) + 2d^2 through model.pooler (BERT's)

Training is three times the forward pass (the backward pass computes two products per forward one). Causal
self-attention is counted over all T keys, as PaLM counts it; embeddings, norms, softmax, activations and biases
are left out. Padding is not counted: MFU measures useful work.

    training_flops(config, src_lengths=[20, 31], tgt_lengths=[22, 29], predicted=51)
    mfu(flops_per_s, device, "bf16")           # 0.41, or None where the peak is unknown
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import torch

from vaswani.config import ModelConfig
from vaswani.families import family

# Dense (no sparsity) peak TFLOP/s of NVIDIA GPUs by precision, from NVIDIA's data sheets: (name fragment, bf16,
# tf32, fp32). bf16 is the fp16 tensor-core figure where the GPU has no bf16 (V100, T4, P100: fp16 only).
GPU_PEAKS: tuple[tuple[str, float, float, float], ...] = (
    ("GH200", 989.0, 494.7, 66.9),
    ("H200", 989.0, 494.7, 66.9),
    ("H100 PCIe", 756.0, 378.0, 51.2),  # before "H100": a name matches the first fragment it contains
    ("H100", 989.0, 494.7, 66.9),  # SXM
    ("B200", 2250.0, 1100.0, 80.0),
    ("A100", 312.0, 156.0, 19.5),  # before "A10"
    ("A800", 312.0, 156.0, 19.5),
    ("L40S", 362.0, 183.0, 91.6),
    ("L40", 181.0, 90.5, 90.5),
    ("L4", 121.0, 60.0, 30.3),  # after "L40S" and "L40"
    ("A10", 125.0, 62.5, 31.2),
    ("RTX 4090", 165.2, 82.6, 82.6),
    ("RTX 3090", 71.0, 35.6, 35.6),
    ("V100", 125.0, 15.7, 15.7),
    ("T4", 65.0, 8.1, 8.1),
    ("P100", 18.7, 9.3, 9.3),
)


def forward_flops(
    config: ModelConfig,
    src_lengths: Sequence[int] | None,
    tgt_lengths: Sequence[int] | None,
    predicted: int,
    classified: int = 0,
) -> float:
    """FLOPs of one forward pass over a batch: sequences of `src_lengths` (read by an encoder) and/or
    `tgt_lengths` (read by a decoder), one pair per example for an encoder-decoder, `predicted` tokens
    projected onto the vocabulary and `classified` sequences through the classifier. The per-token counts
    above, summed: linear in the lengths for the products with weights, quadratic for attention (sums of S^2,
    T^2 and S*T over the batch)."""
    d, f, V = config.d_model, config.d_ff, config.tgt_vocab_size
    stack = family(config.type).stack
    if stack == "encoder-decoder":
        if src_lengths is None or tgt_lengths is None or len(src_lengths) != len(tgt_lengths):
            raise ValueError("an encoder-decoder needs a source and a target length per example")
        cross = 4 * d * sum(S * T for S, T in zip(src_lengths, tgt_lengths, strict=True))
    else:
        if (src_lengths if stack == "encoder" else tgt_lengths) is None:
            raise ValueError(f"a {stack}-only model needs the lengths of the sequences it reads")
        cross = 0
    total = 2.0 * d * (V + (d if config.output_transform else 0)) * predicted
    if classified and config.n_classes:
        total += 2.0 * d * (config.n_classes + (d if config.pooler else 0)) * classified
    if src_lengths is not None and stack != "decoder":  # encoder layers, and the decoder's cross K, V
        S, S2 = sum(src_lengths), sum(n * n for n in src_lengths)
        total += config.n_layers * (S * (8 * d * d + 4 * d * f) + 4 * d * S2)
        if stack == "encoder-decoder":
            total += config.decoder_layers * (4 * d * d * S + cross)
    if tgt_lengths is not None and stack != "encoder":  # decoder layers: self-attention, FFN (+ cross Q, O)
        T, T2 = sum(tgt_lengths), sum(n * n for n in tgt_lengths)
        per_token = 8 * d * d + 4 * d * f + (4 * d * d if stack == "encoder-decoder" else 0)
        total += config.decoder_layers * (T * per_token + 4 * d * T2)
    return total


def training_flops(
    config: ModelConfig,
    src_lengths: Sequence[int] | None,
    tgt_lengths: Sequence[int] | None,
    predicted: int,
    classified: int = 0,
) -> float:
    """FLOPs of one training pass (forward and backward) over a batch: three forward passes."""
    return 3.0 * forward_flops(config, src_lengths, tgt_lengths, predicted, classified)


def lengths(ids: torch.Tensor, pad_id: int) -> list[int]:
    """The unpadded length of each row of a right-padded (B, T) batch, read on the host."""
    return (ids != pad_id).sum(1).tolist()


def tf32_matmuls() -> bool:
    """Whether CUDA float32 matrix products may run in TF32 (torch.backends.cuda.matmul.allow_tf32)."""
    return bool(torch.backends.cuda.matmul.allow_tf32)


def peak_flops(device: torch.device, precision: str) -> tuple[float, str] | None:
    """The device's dense peak FLOP/s in `precision` ("bf16", or "fp32": TF32 where CUDA lets matrix products
    use it) and where the figure comes from; None for a GPU not in GPU_PEAKS. On a CPU: the matrix-product
    rate measured here (a 1,024-square product, best of three), since a CPU's peak cannot be read off its name."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for fragment, bf16, tf32, fp32 in GPU_PEAKS:
            if fragment in name:
                if precision == "bf16":
                    return bf16 * 1e12, f"{name} dense bf16 peak"
                if tf32_matmuls():
                    return tf32 * 1e12, f"{name} dense TF32 peak"
                return fp32 * 1e12, f"{name} fp32 peak"
        return None
    if device.type == "cpu":
        return _cpu_matmul_rate(precision, torch.get_num_threads()), "measured CPU matrix-product rate"
    return None


@functools.cache
def _cpu_matmul_rate(precision: str, threads: int) -> float:
    n = 1024
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=generator).to(dtype)
    b = torch.randn(n, n, generator=generator).to(dtype)
    torch.mm(a, b)  # creates the kernel
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
        if best > 1.0:  # emulated bf16 (a product takes seconds): one product says enough
            break
    return 2.0 * n**3 / best


def mfu(flops_per_s: float, device: torch.device, precision: str) -> float | None:
    """Model FLOPs utilisation: achieved model FLOP/s over the device's peak (None where it is unknown)."""
    peak = peak_flops(device, precision)
    return None if peak is None else flops_per_s / peak[0]
