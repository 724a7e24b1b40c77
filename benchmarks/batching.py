"""Bucketed vs naive batching on Multi30k de->en: padding fraction and training throughput, side by side.

Uses the training pipeline itself (configs/multi30k_de_en.yaml: joint BPE, filters, token budget):
the same sentences are batched two ways, bucketed by length (vaswani's default) or in random
order (naive), and training steps of the recipe's model alternate between the two.

    python benchmarks/batching.py --steps 30
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import torch

from vaswani.config import Config
from vaswani.data.batching import collate, padding_fraction, token_batches
from vaswani.data.parallel import ParallelRecipe
from vaswani.data.prepare import open_or_prepare
from vaswani.data.tokenizer import Tokenizer
from vaswani.nn import Transformer
from vaswani.runtime.allocator import keep_freed_memory
from vaswani.train.loader import EpochPlan, load_run_data
from vaswani.train.loss import label_smoothed_cross_entropy

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "multi30k_de_en.yaml"))
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    keep_freed_memory()
    config = Config.load(args.config)
    with tempfile.TemporaryDirectory() as tmp:
        recipe = ParallelRecipe.from_config(config.data, config.model.share_embeddings, config.train.seed)
        prepared = open_or_prepare(recipe, Path(tmp) / "prepared", log=print)
        data = load_run_data(prepared, Tokenizer.load(prepared.directory), config.data)
        train = prepared.train
        lengths = train.lengths
        ways = {
            "bucketed": EpochPlan(data, config.data.max_tokens, config.train.seed).batches(0),
            "naive": token_batches(lengths, config.data.max_tokens, config.train.seed, bucketed=False),
        }
        _race(args, config, data, train, ways)


def _race(args, config, data, train, ways) -> None:
    lengths = train.lengths
    model_config = dataclasses.replace(
        config.model, src_vocab_size=data.tokenizer.src_vocab_size, tgt_vocab_size=data.tokenizer.tgt_vocab_size
    )
    c = model_config
    rates: dict[str, list[float]] = {name: [] for name in ways}
    torch.manual_seed(0)
    models = {name: Transformer(model_config) for name in ways}
    optims = {
        name: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
        for name, m in models.items()
    }
    for step in range(args.steps + 3):
        for name, batches in ways.items():
            batch = collate(
                [train.pair(i) for i in batches[step % len(batches)].tolist()], c.pad_id, c.bos_id, c.eos_id
            )
            start = time.perf_counter()
            loss, tokens = label_smoothed_cross_entropy(
                models[name].hidden_states(batch.src, batch.tgt_in),
                models[name].output_weight,
                batch.tgt_out,
                0.1,
                c.pad_id,
            )
            (loss / tokens).backward()
            optims[name].step()
            optims[name].zero_grad(set_to_none=True)
            if step >= 3:
                rates[name].append(int(tokens) / (time.perf_counter() - start))
    print(
        f"# {len(train)} pairs, max_tokens {config.data.max_tokens}, model d_model {c.d_model} "
        f"{c.n_layers}+{c.decoder_layers} layers, vocabulary {c.src_vocab_size}, {args.steps} steps each, fp32"
    )
    print("| batching | batches per epoch | padding (src + tgt) | target tok/s (median) |")
    print("|---|---|---|---|")
    for name, batches in ways.items():
        print(
            f"| {name} | {len(batches)} | {padding_fraction(lengths, batches):.1%} | "
            f"{statistics.median(rates[name]):,.0f} |"
        )
    ratio = statistics.median(rates["bucketed"]) / statistics.median(rates["naive"])
    print(f"bucketed / naive throughput: {ratio:.2f}x")


if __name__ == "__main__":
    main()
