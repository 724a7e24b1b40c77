"""What `precision: auto` measures and chooses on this machine, for a few models and batch shapes.

    python benchmarks/precision.py
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python benchmarks/precision.py   # as an AVX2-only CPU

Training rows: the recipe's 4,000-token batches (measured at vaswani.runtime.precision.MAX_ROWS rows, forward and
backward); decoding rows: sentences x beam per step (64 x 4, 64 x 1, 1 x 4), forward only. Each cell: bf16's
speed as a multiple of fp32's in the model's own matrix products, and the choice `auto` makes from it (for
decoding always fp32, vaswani/runtime/precision.py: the measurement is what an explicit bf16 would be warned with).
"""

from __future__ import annotations

import time

import torch

from vaswani import ModelConfig
from vaswani.runtime.machine import cpu_name
from vaswani.runtime.precision import choose

CASES = [
    ("training, 4,000 tokens", 4000, True),
    ("decoding, 64 x beam 4", 256, False),
    ("decoding, 64 greedy", 64, False),
    ("decoding, 1 x beam 4", 4, False),
]


def main() -> None:
    print(f"# {cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| model | " + " | ".join(name for name, _, _ in CASES) + " | seconds to measure all |")
    print("|---|" + "---|" * (len(CASES) + 1))
    for preset, vocab in (("tiny", 8000), ("small", 8000), ("base", 37000)):
        config = ModelConfig.preset(preset, vocab_size=vocab)
        cells, start = [], time.perf_counter()
        for _, rows, training in CASES:
            # decoding's auto is fp32 by rule, never timed: an explicit bf16 is what is measured there
            choice = choose("auto" if training else "bf16", config, torch.device("cpu"), rows, training)
            m, chosen = choice.measurement, choice.precision if training else "fp32 (auto)"
            cells.append(f"{'<= ' if m.emulated else ''}{m.bf16_speedup:.2f}x -> {chosen}" if m else chosen)
        seconds = time.perf_counter() - start
        print(f"| {preset} (d {config.d_model}, V {vocab}) | " + " | ".join(cells) + f" | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
