"""float32 linear layers at a decoding step's shapes: oneDNN's packed weight (what cpu_linear/onednn_fp32.py runs),
MKL's packed
weight and `F.linear`, side by side in one process on this CPU.

The shapes are the OPUS-MT-sized model's (d_model 512, d_ff 2,048, 58,101 words): 128 rows for beam 4 over 32
sentences, 32 for greedy. oneDNN's weight is reordered for a number of rows (cpu_linear/onednn_fp32.py: 64); it is timed
reordered for 64 and for 128. Each kernel runs `--repeats` times in turns (each time enough products for ~0.2 s);
the median GFLOP/s is printed as a Markdown table for docs/benchmarks.md.

    python benchmarks/linear_kernels.py                # ~2 minutes on 2 cores
    python benchmarks/linear_kernels.py --small        # the quick model's shapes (d_model 128, d_ff 256, 6,000 words)

At a small model's shapes oneDNN's call costs more than its product saves (cpu_linear/onednn_fp32.py float32_layer).
"""

from __future__ import annotations

import argparse
import time
from statistics import median

import torch
import torch.nn.functional as F

from vaswani.runtime.machine import cpu_name

SHAPES = (  # rows, in, out, what
    (128, 512, 1536, "self-attention's W^Q W^K W^V, beam 4 x 32"),
    (128, 512, 512, "W^O, encoder-decoder W^Q"),
    (128, 512, 2048, "feed-forward, in"),
    (128, 2048, 512, "feed-forward, out"),
    (128, 512, 58101, "the output layer"),
    (32, 512, 2048, "feed-forward, in: greedy, 32 sentences"),
    (32, 512, 58101, "the output layer, greedy"),
)
SMALL = (  # configs/multi30k_de_en_quick.yaml's model: greedy and beam 4 over batches of 64 sentences
    (64, 128, 384, "self-attention's W^Q W^K W^V, greedy x 64"),
    (64, 128, 128, "W^O, encoder-decoder W^Q"),
    (64, 128, 256, "feed-forward, in"),
    (64, 256, 128, "feed-forward, out"),
    (64, 128, 6000, "the output layer"),
    (256, 128, 128, "W^O, beam 4 x 64"),
    (256, 128, 6000, "the output layer, beam 4"),
)


def products(rows: int, d_in: int, d_out: int) -> tuple[dict, torch.Tensor]:
    """Each kernel's product of random (rows, d_in) inputs by one random layer, and F.linear's result."""
    weight, bias, x = torch.randn(d_out, d_in), torch.randn(d_out), torch.randn(rows, d_in)
    dnn = {r: torch.ops.mkldnn._reorder_linear_weight(weight, r) for r in (64, 128)}
    mkl = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
    kernels = {
        "dnn64": lambda: torch.ops.mkldnn._linear_pointwise(x, dnn[64], bias, "none", [], ""),
        "dnn128": lambda: torch.ops.mkldnn._linear_pointwise(x, dnn[128], bias, "none", [], ""),
        "mkl": lambda: torch.ops.mkl._mkl_linear(x, mkl, weight, bias, rows),
        "linear": lambda: F.linear(x, weight, bias),
    }
    return kernels, F.linear(x, weight, bias)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="a small model's shapes (SMALL) instead of OPUS-MT's")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"CPU: {cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}\n")
    print("| rows x in x out | oneDNN packed for 64 rows | for 128 rows | MKL packed | F.linear | (GFLOP/s; µs) |")
    print("|---|---|---|---|---|---|")
    for rows, d_in, d_out, what in SMALL if args.small else SHAPES:
        kernels, reference = products(rows, d_in, d_out)
        for name, run in kernels.items():
            if not torch.allclose(run(), reference, rtol=1e-3, atol=1e-3):
                raise SystemExit(f"{name} differs from F.linear at {rows}x{d_in}x{d_out}")
        flops = 2 * rows * d_in * d_out
        times: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(args.repeats):
            for name, run in kernels.items():
                n = max(3, int(0.2 * 100e9 / flops))  # ~0.2 s at 100 GFLOP/s
                run()
                start = time.perf_counter()
                for _ in range(n):
                    run()
                times[name].append((time.perf_counter() - start) / n)
        speed = {name: flops / median(ts) / 1e9 for name, ts in times.items()}
        print(
            f"| {rows} x {d_in:,} x {d_out:,} ({what}) | {speed['dnn64']:.0f} | {speed['dnn128']:.0f} | "
            f"{speed['mkl']:.0f} | {speed['linear']:.0f} | {median(times['dnn64']) * 1e6:.0f} / "
            f"{median(times['linear']) * 1e6:.0f} |"
        )


if __name__ == "__main__":
    main()
