"""Decoding speed with the KV cache vs a decoder that re-runs the whole prefix at every step.

Both decoders are the same search code (vaswani.decode.search, `cache=True` vs `cache=False`) on the
same model and the same batches of Multi30k test_2016_flickr sources, run alternately batch by
batch; their outputs are checked to be identical, so the work is equal and the time ratio is the
speed-up. Then the cost of one decoding step at target position 200 vs position 20 for one long
sequence (with the cache it should stay nearly flat; without it, it grows with the prefix).

    python benchmarks/decoding.py --model-dir runs/multi30k_en_de --sentences 200
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from vaswani.data.batching import collate
from vaswani.data.corpus import read_lines
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import beam_search, greedy, length_batches
from vaswani.evaluate import language_of
from vaswani.runtime.allocator import keep_freed_memory
from vaswani.translate.translator import Translator

ROOT = Path(__file__).resolve().parents[1]


def search_speed(translator: Translator, sources: list[list[int]], beam: int, batch_size: int) -> dict:
    model, c = translator.model, translator.model.config
    seconds = {True: 0.0, False: 0.0}
    tokens = 0
    request = DecodeRequest.of(beam_size=beam)  # the paper's search otherwise: α 0.6, input length + 50
    for indices in length_batches(sources, batch_size):
        chunk = [sources[i] for i in indices]
        src = collate([(s, []) for s in chunk], c.pad_id, c.bos_id, c.eos_id).src
        outputs = {}
        for cache in (True, False):
            began = time.perf_counter()
            with torch.inference_mode():
                if beam == 1:
                    outputs[cache] = [h.tokens for h in greedy(model, src, request, cache=cache)]
                else:
                    outputs[cache] = [hyps[0].tokens for hyps in beam_search(model, src, request, cache=cache)]
            seconds[cache] += time.perf_counter() - began
        assert outputs[True] == outputs[False], "cached and uncached search disagree"
        tokens += sum(len(t) + 1 for t in outputs[True])  # + EOS
    return {"tokens": tokens, "cached": tokens / seconds[True], "uncached": tokens / seconds[False]}


@torch.inference_mode()
def step_cost(translator: Translator, positions: tuple[int, int], repeats: int, cache: bool) -> list[float]:
    """Seconds per decoding step of one sequence around each target position (median of 11 steps)."""
    model, c = translator.model, translator.model.config
    src = torch.randint(4, c.src_vocab_size, (1, 20))
    memory, mask = model.encode(src)
    last = max(positions) + 6
    costs: dict[int, list[float]] = {p: [] for p in positions}
    for _ in range(repeats):
        state, prefix = None, torch.full((1, 1), c.bos_id)
        for position in range(last):
            began = time.perf_counter()
            if cache:
                _, state = model.decode_step(prefix[:, -1], memory, mask, state)
            else:
                model.decode_step(prefix, memory, mask)
            elapsed = time.perf_counter() - began
            for p in positions:
                if abs(position - p) <= 5:
                    costs[p].append(elapsed)
            prefix = torch.cat([prefix, torch.randint(4, c.tgt_vocab_size, (1, 1))], dim=1)
    return [statistics.median(costs[p]) for p in positions]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="a trained model directory (vaswani train)")
    parser.add_argument("--src", help="source file (default: Multi30k test_2016_flickr in the model's source language)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    keep_freed_memory()
    translator = Translator.load(args.model_dir, device="cpu")
    lang = language_of(translator.config.data.train_src or "")
    src_path = args.src or ROOT / f"../shared/data/multi30k/raw/test_2016_flickr.{lang}.gz"
    lines = read_lines(src_path)[: args.sentences]
    sources = translator.tokenizer.encode_src(lines)
    print(
        f"model {args.model_dir}: {translator.model.num_parameters():,} parameters; {len(lines)} sentences "
        f"of {src_path}; torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print("\n| search | cached tok/s | uncached tok/s | speed-up |\n|---|---|---|---|")
    for beam in (1, 4):
        r = search_speed(translator, sources, beam, args.batch_size)
        name = "greedy" if beam == 1 else f"beam {beam}"
        print(f"| {name} | {r['cached']:,.0f} | {r['uncached']:,.0f} | {r['cached'] / r['uncached']:.2f}x |")
    print("\n| decoder | step at position 20 | step at position 200 | ratio |\n|---|---|---|---|")
    for cache in (True, False):
        early, late = step_cost(translator, (20, 200), args.repeats, cache)
        name = "KV cache" if cache else "no cache (re-run prefix)"
        print(f"| {name} | {early * 1e3:.2f} ms | {late * 1e3:.2f} ms | {late / early:.2f}x |")


if __name__ == "__main__":
    main()
