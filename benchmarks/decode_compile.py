"""decode.compile against eager decoding, side by side in one process: the quick recipe's model (untrained, 8,000
subwords), three batches of random sources (lengths 9, 14, 21), exactly 20 steps per sentence, the two searches
alternating, the median of `--rounds`. Both are warmed up first (the compiled one compiles there).

    python benchmarks/decode_compile.py --batch 1 --beam 4
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from vaswani.config import Config
from vaswani.decode import search
from vaswani.decode.request import DecodeRequest
from vaswani.nn import build_model
from vaswani.runtime.machine import cpu_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    config = Config.load("configs/multi30k_de_en_quick.yaml").model
    config = dataclasses.replace(config, src_vocab_size=8000, tgt_vocab_size=8000)
    torch.manual_seed(0)
    model = build_model(config).eval().to(device)
    steps = {"eager": None, "compiled": search.compiled_step(model)}
    sources = [torch.randint(4, 8000, (args.batch, n), device=device) for n in (9, 14, 21)]

    request = DecodeRequest.of(beam_size=args.beam, max_len_a=0, max_len_b=20, min_len=20)

    def run(step) -> float:
        began = time.perf_counter()
        with torch.inference_mode():
            for src in sources:
                if args.beam == 1:
                    search.greedy(model, src, request, step=step)
                else:
                    search.beam_search(model, src, request, step=step)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - began

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    threads = torch.get_num_threads()
    print(f"# {where}, torch {torch.__version__}, {threads} threads; batch {args.batch}, beam {args.beam}")
    for step in steps.values():
        run(step)
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            seconds[name].append(run(step))
    per_step = {name: statistics.median(s) / (len(sources) * 20) for name, s in seconds.items()}
    for name, s in per_step.items():
        print(f"{name}: {s * 1e3:.2f} ms a step")
    print(f"compiled vs eager: {per_step['eager'] / per_step['compiled']:.2f}x")


if __name__ == "__main__":
    main()
