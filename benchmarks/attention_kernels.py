"""torch's fused attention kernels on this machine: flash vs math, fp32 vs bf16, forward + backward.

Explains the kernel choice in `vaswani.nn.attention.fused_attention`: on CPU the flash kernel wins in
fp32 and loses in bf16 at sentence lengths.

    python benchmarks/attention_kernels.py --batch 285 --length 16
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from vaswani.runtime.precision import bf16_emulated


def milliseconds(fn, repeats: int = 10) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=285)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=64)
    args = parser.parse_args()
    B, H, T, Dh = args.batch, args.heads, args.length, args.head_dim
    mask = torch.ones(B, 1, 1, T, dtype=torch.bool)
    mask[::3, ..., T * 3 // 4 :] = False  # a third of the sentences padded
    print(f"# (B, H, T, Dh) = ({B}, {H}, {T}, {Dh}), {torch.get_num_threads()} threads, forward + backward, ms")
    print("| dtype | attention | flash | math |")
    print("|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        if dtype == torch.bfloat16 and (reason := bf16_emulated()):
            print(f"| bfloat16 | skipped: {reason} |")
            continue
        qkv = torch.randn(3, B, H, T, Dh, dtype=dtype, requires_grad=True)
        for name, kwargs in (("padding mask", {"attn_mask": mask}), ("causal", {"is_causal": True})):
            times = []
            for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):

                def step(backend=backend, kwargs=kwargs, qkv=qkv):
                    with sdpa_kernel(backend):
                        F.scaled_dot_product_attention(*qkv.unbind(0), **kwargs).sum().backward()

                times.append(milliseconds(step))
            print(f"| {str(dtype).removeprefix('torch.')} | {name} | {times[0]:.1f} | {times[1]:.1f} |")


if __name__ == "__main__":
    main()
