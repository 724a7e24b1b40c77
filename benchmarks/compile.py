"""torch.compile for the training step, against eager, on this machine: `train.compile`'s default comes from here.

The quick Multi30k recipe's model (configs/multi30k_de_en_quick.yaml: 4+4 layers, d_model 128, vocabulary 8,000),
a training step as the trainer runs it (forward, the chunked loss, backward, fused Adam) in the precision asked,
on random batches of four shapes that alternate as length buckets do; the compiled module with dynamic shapes.
Reports the compile time (the first round of shapes) and the mean step time after it, in both modes, side by side.

    python benchmarks/compile.py --precision bf16 --rounds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from vaswani.config import Config
from vaswani.nn import build_model
from vaswani.runtime import autocast, cpu_name
from vaswani.train.loss import label_smoothed_cross_entropy
from vaswani.train.tasks.base import HiddenStates

SHAPES = [(120, 14, 16), (100, 18, 17), (80, 22, 24), (150, 11, 12)]  # (sentences, source, target length)


def run(compiled: bool, precision: str, rounds: int, vocab: int) -> tuple[float, float]:
    config = Config.load("configs/multi30k_de_en_quick.yaml").model
    config = dataclasses.replace(config, src_vocab_size=vocab, tgt_vocab_size=vocab)
    torch.manual_seed(0)
    model = build_model(config)
    step_module = HiddenStates(model)
    if compiled:
        step_module = torch.compile(step_module, dynamic=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    device = torch.device("cpu")

    def step(B: int, S: int, T: int) -> None:
        src, tgt_in, tgt_out = (torch.randint(4, vocab, (B, n)) for n in (S, T, T))
        with autocast(device, precision):
            loss, _ = label_smoothed_cross_entropy(step_module(src, tgt_in), model.output_weight, tgt_out)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    started = time.perf_counter()
    for shape in SHAPES:
        step(*shape)
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(rounds):
        for shape in SHAPES:
            step(*shape)
    return first, (time.perf_counter() - started) / (rounds * len(SHAPES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"# {cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads, {args.precision}")
    eager_first, eager = run(False, args.precision, args.rounds, 8000)
    compiled_first, compiled = run(True, args.precision, args.rounds, 8000)
    print(f"eager:    first round {eager_first:.1f} s, then {eager * 1e3:.1f} ms a step")
    print(f"compiled: first round {compiled_first:.1f} s (compiling), then {compiled * 1e3:.1f} ms a step")
    print(f"compiled / eager step time: {compiled / eager:.2f}")


if __name__ == "__main__":
    main()
