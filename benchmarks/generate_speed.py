"""Generation speed of a decoder-only model: tokens/s for one prompt, on the KV cache and without it
(every step re-runs the whole text), at 64 and 512 generated tokens.

    python benchmarks/generate_speed.py runs/shakespeare [--lengths 64,512] [--repeats 3]

The two ways are checked to give the same tokens (greedy) before they are timed. Medians of `repeats`
runs, timed alternately; results in benchmarks/results/generate_speed.json and as a table on stdout.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from provenance import stamp

from vaswani.decode.generate import Generator

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--prompt", default="ROMEO:")
    parser.add_argument("--lengths", default="64,512")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "benchmarks/results/generate_speed.json"))
    args = parser.parse_args()
    generator = Generator.load(args.model_dir, "cpu")
    prompt = generator.encode(args.prompt)
    results = {
        **stamp(f"the prompt {args.prompt!r}"),
        "model_dir": args.model_dir,
        "threads": torch.get_num_threads(),
        "parameters": generator.model.num_parameters(),
        "prompt_tokens": len(prompt),
        "lengths": {},
    }
    for n in (int(x) for x in args.lengths.split(",")):
        same = generator.generate_ids(prompt, n, greedy_search=True) == generator.generate_ids(
            prompt, n, greedy_search=True, cache=False
        )
        times = {"cached": [], "uncached": []}
        for _ in range(args.repeats):
            for way in times:
                start = time.perf_counter()
                generator.generate_ids(prompt, n, temperature=0.8, top_k=40, seed=1, cache=way == "cached")
                times[way].append(time.perf_counter() - start)
        row = {way: n / statistics.median(t) for way, t in times.items()}
        row["speedup"] = row["cached"] / row["uncached"]
        row["greedy_outputs_equal"] = same
        results["lengths"][n] = row
        print(
            f"{n} tokens: cached {row['cached']:,.0f} tok/s, uncached {row['uncached']:,.0f} tok/s, "
            f"{row['speedup']:.1f}x; greedy outputs equal: {same}",
            flush=True,
        )
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
