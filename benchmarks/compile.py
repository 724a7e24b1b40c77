"""torch.compile for the training step, against eager, on this machine: `train.compile`'s default comes from here.

The quick Multi30k recipe's model (configs/multi30k_de_en_quick.yaml: d_model 128, vocabulary 8,000; 4+4 layers when
the results in docs/benchmarks.md were taken),
a training step as the trainer runs it (forward, the chunked loss, backward, fused Adam) in the precision asked,
on random batches of four shapes that alternate as length buckets do; the compiled module with dynamic shapes.
Reports the compile time (the first round of shapes) and the mean step time after it, in both modes, side by side.

    python benchmarks/compile.py --precision bf16 --rounds 5
    python benchmarks/compile.py --device cuda --preset base --scale 13 --precision bf16   # ~25k-token batches
    python benchmarks/compile.py --device cuda --preset base --scale 13 --profile          # where a step's time goes
    python benchmarks/compile.py --device cuda --preset base --scale 13 --attention sdpa,composed --compile-best

`--profile` runs one more round of shapes under torch.profiler and reports, on a GPU, the device time by kind of
kernel (matrix products, attention, the optimizer, compiled (Triton) and other element-wise kernels), the ten
longest kernels and the share of the wall time the device sat idle (a step bound by launching, not computing); on
a CPU, the ten operators with the most time of their own.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

import vaswani.nn.attention
from vaswani.config import Config, ModelConfig
from vaswani.nn import build_model
from vaswani.runtime.device import autocast
from vaswani.runtime.flops import mfu, training_flops
from vaswani.runtime.machine import cpu_name
from vaswani.train.loss import label_smoothed_cross_entropy
from vaswani.train.tasks.base import HiddenStates

SHAPES = [(120, 14, 16), (100, 18, 17), (80, 22, 24), (150, 11, 12)]  # (sentences, source, target length)


KINDS = (  # a kernel's kind by its name, first match (cuDNN's attention kernels are named sm90_ too)
    ("attention", ("flash", "fmha", "attention", "sdpa", "efficient")),
    ("matrix products", ("gemm", "cutlass", "nvjet", "sm90_", "sm80_", "cublas", "matmul", "mm_")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("compiled element-wise", ("triton",)),
)


def _kind(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, keys in KINDS if any(key in lowered for key in keys)), "other element-wise")


def profile_round(step, device: torch.device) -> None:
    """One round of SHAPES under torch.profiler: device time by kind of kernel, the ten longest kernels, and
    how much of the wall time the device was idle."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    started = time.perf_counter()
    with profile(activities=activities) as prof:
        for shape in SHAPES:
            step(*shape)
    wall = time.perf_counter() - started
    if device.type != "cuda":  # on a CPU the operators' own time: the ten longest
        print(f"  profiled round: wall {wall * 1e3:.1f} ms")
        for row in sorted(prof.key_averages(), key=lambda r: -r.self_cpu_time_total)[:10]:
            print(f"    {row.self_cpu_time_total / 1e3:8.1f} ms  {row.key[:110]}")
        return
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    by_kind: dict[str, float] = {}
    by_name: dict[str, float] = {}
    for event in kernels:
        us = event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
        by_kind[_kind(event.name)] = by_kind.get(_kind(event.name), 0.0) + us
        by_name[event.name] = by_name.get(event.name, 0.0) + us
    busy = sum(by_kind.values()) / 1e6
    print(f"  profiled round: wall {wall * 1e3:.1f} ms, device busy {busy * 1e3:.1f} ms "
          f"({busy / wall:.0%}; idle {1 - busy / wall:.0%}), {len(kernels)} kernels")  # fmt: skip
    for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:24} {us / 1e3:8.1f} ms  {us / 1e6 / busy:6.1%}")
    for name, us in sorted(by_name.items(), key=lambda kv: -kv[1])[:10]:
        print(f"    {us / 1e3:8.1f} ms  {name[:110]}")


def run(
    config: ModelConfig,
    compiled: bool,
    precision: str,
    rounds: int,
    device: torch.device,
    scale: int,
    profiled: bool = False,
) -> tuple[float, float]:
    torch.manual_seed(0)
    model = build_model(config).to(device)
    step_module = HiddenStates(model)
    if compiled:
        step_module = torch.compile(step_module, dynamic=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    vocab = config.tgt_vocab_size

    def step(B: int, S: int, T: int) -> None:
        src, tgt_in, tgt_out = (torch.randint(4, vocab, (B * scale, n), device=device) for n in (S, T, T))
        with autocast(device, precision):
            loss, _ = label_smoothed_cross_entropy(step_module(src, tgt_in), model.output_weight, tgt_out)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()

    started = time.perf_counter()
    for shape in SHAPES:
        step(*shape)
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(rounds):
        for shape in SHAPES:
            step(*shape)
    seconds = (time.perf_counter() - started) / (rounds * len(SHAPES))
    if profiled:
        profile_round(step, device)
    return first, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", help="a model preset instead of the quick recipe's model (e.g. base)")
    parser.add_argument("--scale", type=int, default=1, help="sentences per batch times this")
    parser.add_argument("--profile", action="store_true", help="where a step's time goes (module docstring)")
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--attention", default="sdpa", help="on a GPU, comma-separated: sdpa, no-cudnn, composed "
                        "(vaswani/nn/attention.py CUDA_ATTENTION)")  # fmt: skip
    parser.add_argument("--compile-best", action="store_true", help="compile only the fastest eager attention")
    args = parser.parse_args()
    device = torch.device(args.device)
    config = Config.load("configs/multi30k_de_en_quick.yaml").model
    config = ModelConfig.preset(args.preset, vocab_size=8000) if args.preset else config
    config = dataclasses.replace(config, src_vocab_size=8000, tgt_vocab_size=8000)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    layers = f"{config.n_layers}+{config.decoder_layers} layers"
    print(f"# {where}, torch {torch.__version__}, {torch.get_num_threads()} threads, {args.precision}, "
          f"d_model {config.d_model}, {layers}, batches x{args.scale}")  # fmt: skip
    flops = sum(training_flops(config, [S] * B * args.scale, [T] * B * args.scale, B * T * args.scale)
                for B, S, T in SHAPES) / len(SHAPES)  # fmt: skip
    tokens = sum(B * T * args.scale for B, _, T in SHAPES) / len(SHAPES)
    steps: dict[tuple[str, str], float] = {}
    for name in args.modes.split(","):  # every attention's eager step first
        for attention in args.attention.split(","):
            if (
                name == "compiled"
                and args.compile_best
                and attention != min((a for a, mode in steps if mode == "eager"), key=lambda a: steps[a, "eager"])
            ):
                continue  # only the attention whose eager step was fastest is compiled
            vaswani.nn.attention.CUDA_ATTENTION = attention
            first, seconds = run(
                config, name == "compiled", args.precision, args.rounds, device, args.scale, args.profile
            )
            steps[attention, name] = seconds
            share = mfu(flops / seconds, device, args.precision)
            print(f"{name}, attention {attention}: first round {first:.1f} s, then {seconds * 1e3:.1f} ms a step, "
                  f"{tokens / seconds:,.0f} target tokens/s" + (f", MFU {share:.1%}" if share is not None else ""),
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
