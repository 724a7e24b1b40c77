"""The int8 kernels torch has on a CPU, side by side with float32, at a decoding step's sizes: what `--precision int8`
(nn/cpu_linear/int8.py) was chosen from.

Products of an OPUS-MT-sized model (d_model 512, d_ff 2048, 58,101 words) at 32 rows (greedy, batch 32) and 128
(beam 4): milliseconds per product, each candidate with its own activation quantization included, and its error
against the float32 product (relative, Frobenius norm). The rows' magnitudes differ (log-normal, as a batch's
sentences' do), which is where quantizing the activations per row or per tensor differs; "per row" are
nn/cpu_linear/int8.py's own layers (FbgemmWeight, OnednnWeight), the others written here.

    python benchmarks/int8_kernels.py
    python benchmarks/int8_kernels.py --quick          # float32 and the fbgemm and oneDNN products only
    python benchmarks/int8_kernels.py --small          # a small model's layers, float32 packed against int8:
                                                       # where int8.FLOAT32_BELOW was chosen
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2 python benchmarks/int8_kernels.py
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
import torch.nn.functional as F

from vaswani.nn.cpu_linear.int8 import FbgemmWeight, OnednnWeight
from vaswani.nn.cpu_linear.onednn_fp32 import PackedLinear, packed_available
from vaswani.runtime.machine import cpu_name

SHAPES = [(512, 2048), (2048, 512), (512, 1536), (512, 58101)]  # (in, out): d_ff, back, W^Q W^K W^V, the output
# a d_model 128 model's W^O, W^Q W^K W^V, d_ff and back, a d_model 256 one's W^O, 512 x 512, its output projection
SMALL_SHAPES = [(128, 128), (128, 384), (128, 512), (512, 128), (256, 256), (512, 512), (128, 6000)]


def timed(run, n: int = 20) -> float:
    for _ in range(3):
        run()
    start = time.perf_counter()
    for _ in range(n):
        run()
    return (time.perf_counter() - start) / n * 1e3


def candidates(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, quick: bool = False) -> dict:
    scale = w.abs().amax(1) / 127
    wq = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    runs = {"float32": lambda: F.linear(x, w, b)}
    if packed_available():
        packed_fp32 = PackedLinear(w, b)
        runs["float32, oneDNN packed"] = lambda: packed_fp32(x)
    if not quick:
        _slow_candidates(runs, x, w, b, scale, wq)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        zero = torch.zeros(w.size(0), dtype=torch.long)
        qw = torch.quantize_per_channel(w, scale.double(), zero, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(qw, b)
    runs["fbgemm linear_dynamic, per tensor"] = lambda: torch.ops.quantized.linear_dynamic(x, packed, True)
    per_row = FbgemmWeight(w, b)
    runs["fbgemm, per row (chosen)"] = lambda: per_row(x)
    onednn = torch.ops.onednn.qlinear_prepack(wq, list(x.shape))

    def onednn_qlinear():  # per-tensor asymmetric uint8 activations
        lo, hi = x.aminmax()
        s = float((hi - lo).clamp(min=1e-8) / 255)
        zp = round(-float(lo) / s)
        xq = torch.clamp(torch.round(x / s) + zp, 0, 255).to(torch.uint8)
        return torch.ops.onednn.qlinear_pointwise(
            xq, s, zp, onednn, scale, zero, b, 1.0, 0, torch.float32, "none", [], ""
        )  # fmt: skip

    runs["onednn qlinear_pointwise, per tensor"] = onednn_qlinear
    onednn_per_row = OnednnWeight(w, b)
    runs["onednn, per row"] = lambda: onednn_per_row(x)
    reference = F.linear(x, w, b)
    out = {}
    for name, run in runs.items():
        try:
            error = float((run() - reference).norm() / reference.norm())
            out[name] = (timed(run), error)
        except (RuntimeError, NotImplementedError) as failure:
            out[name] = (None, str(failure).splitlines()[0][:60])
    return out


def _slow_candidates(runs: dict, x, w, b, scale, wq) -> None:
    """The kernels that run reference loops where the CPU lacks VNNI (10-25x float32 on an AVX2 CPU)."""

    def int_mm():  # per-row activation scales, int8 x int8 -> int32 (torch._int_mm)
        s = x.abs().amax(1, keepdim=True).clamp(min=1e-8) / 127
        return torch._int_mm(torch.round(x / s).to(torch.int8), wq.t()) * s * scale + b

    runs["torch._int_mm"] = int_mm
    runs["aten._weight_int8pack_mm"] = lambda: torch.ops.aten._weight_int8pack_mm(x, wq, scale) + b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="float32, fbgemm and oneDNN only")
    parser.add_argument("--small", action="store_true", help="a small model's layers at 16, 64 and 256 rows")
    args = parser.parse_args()
    torch.manual_seed(0)
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"# {cpu_name()} ({capability}), torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    rows = {}
    for m in (16, 64, 256) if args.small else (32, 128):
        for k, n in SMALL_SHAPES if args.small else SHAPES:
            x = torch.randn(m, k) * torch.exp(0.5 * torch.randn(m, 1))  # rows of different magnitudes
            w, b = torch.randn(n, k) * k**-0.5, torch.randn(n) * 0.1
            rows[(m, k, n)] = candidates(x, w, b, args.quick or args.small)
    names = list(next(iter(rows.values())))
    print("| rows x in -> out | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for (m, k, n), result in rows.items():
        cells = []
        for name in names:
            ms, error = result[name]
            cells.append(f"{ms:.3f} ms ({error:.1%})" if ms is not None else f"fails: {error}")
        print(f"| {m} x {k} -> {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
