"""Training-step throughput: vaswani's Transformer against torch.nn.Transformer, side by side.

Both models get the same embeddings (scaled, shared with the pre-softmax matrix, sinusoidal
positions), the same dimensions, the same batches, the same optimiser (fused Adam) and the same
allocator setting, and the same loss: torch's label-smoothed cross-entropy (ε = 0.1) over full logits.
Steps alternate between the two models so that drift of the machine's speed hits both alike; the
table reports target tokens/s (median over steps) and the ratio.

Batches have the sentence lengths of Multi30k de->en (word counts x 1.3 for subwords), bucketed to
about --max-tokens target tokens, with random token ids.

    python benchmarks/train_step.py                      # d_model 256, 3+3 layers, fp32 and bf16
    python benchmarks/train_step.py --steps 30 --dtypes fp32
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani import ModelConfig, Transformer
from vaswani.nn.embedding import Embeddings, SinusoidalPositions, TokenEmbedding
from vaswani.runtime.allocator import keep_freed_memory
from vaswani.runtime.machine import cpu_name
from vaswani.runtime.precision import bf16_emulated

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "multi30k" / "raw"


class TorchBaseline(nn.Module):
    """torch.nn.Transformer (post-norm, no final norms) between our embeddings and output matrix,
    called the way its documentation and tutorials do: padding masks for all three attentions and
    a causal mask."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.pad_id = c.pad_id
        self.tokens = TokenEmbedding(c.src_vocab_size, c.d_model)
        self.src_embed = Embeddings(self.tokens, SinusoidalPositions(c.d_model), c.dropout)
        self.tgt_embed = Embeddings(self.tokens, SinusoidalPositions(c.d_model), c.dropout)
        self.core = nn.Transformer(
            c.d_model,
            c.n_heads,
            c.n_layers,
            c.decoder_layers,
            c.d_ff,
            c.dropout,
            batch_first=True,
            layer_norm_eps=c.layer_norm_eps,
        )
        self.core.encoder.norm = None
        self.core.decoder.norm = None

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=tgt_in.device)
        src_pad, tgt_pad = src == self.pad_id, tgt_in == self.pad_id
        hidden = self.core(
            self.src_embed(src),
            self.tgt_embed(tgt_in),
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return F.linear(hidden, self.tokens.weight)


def multi30k_lengths(limit: int) -> list[tuple[int, int]]:
    """(source, target) subword lengths, +1 for EOS, estimated from Multi30k de->en word counts."""
    files = [DATA / "train.de.gz", DATA / "train.en.gz"]
    if all(f.exists() for f in files):
        with gzip.open(files[0], "rt") as de, gzip.open(files[1], "rt") as en:
            pairs = [(len(s.split()), len(t.split())) for s, t in zip(de, en, strict=True)]
    else:  # no corpus beside the checkout: a similar length distribution
        rng = random.Random(0)
        pairs = [(max(1, int(rng.gauss(11, 4))), max(1, int(rng.gauss(12, 4)))) for _ in range(29000)]
    return [(math.ceil(s * 1.3) + 1, math.ceil(t * 1.3) + 1) for s, t in pairs[:limit]]


def make_batches(lengths: list[tuple[int, int]], max_tokens: int, vocab: int, seed: int = 0) -> list[tuple]:
    """Length-sorted batches of at most max_tokens padded target positions, in shuffled order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i][1], lengths[i][0]))
    batches, current = [], []
    for i in order:
        longest = max([lengths[j][1] for j in current] + [lengths[i][1]])
        if current and longest * (len(current) + 1) > max_tokens:
            batches.append(current)
            current = []
        current.append(i)
    batches.append(current)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for batch in batches:
        S = max(lengths[i][0] for i in batch)
        T = max(lengths[i][1] for i in batch)
        src = torch.zeros(len(batch), S, dtype=torch.long)
        tgt = torch.zeros(len(batch), T + 1, dtype=torch.long)
        for row, i in enumerate(batch):
            s, t = lengths[i]
            src[row, :s] = torch.randint(3, vocab, (s,), generator=gen)
            tgt[row, 0] = 1  # BOS
            tgt[row, 1 : t + 1] = torch.randint(3, vocab, (t,), generator=gen)
        out.append((src, tgt[:, :-1], tgt[:, 1:]))
    random.Random(seed).shuffle(out)
    return out


def logits_loss(model: nn.Module, batch: tuple) -> Tensor:
    """The usual way: full (B, T, V) logits, then torch's label-smoothed cross-entropy."""
    src, tgt_in, tgt_out = batch
    logits = model(src, tgt_in)
    return F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=0, label_smoothing=0.1)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: tuple, autocast: bool, loss_fn) -> None:
    device = batch[0].device.type
    with torch.autocast(device, dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
        loss = loss_fn(model, batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure(config: ModelConfig, batches: list[tuple], steps: int, warmup: int, autocast: bool) -> dict[str, float]:
    """Target tokens/s of vaswani and torch.nn.Transformer on the same batches."""
    torch.manual_seed(0)
    runs = {"vaswani": (Transformer(config), logits_loss), "torch": (TorchBaseline(config), logits_loss)}
    return alternate(runs, batches, steps, warmup, autocast)


def alternate(
    runs: dict[str, tuple[nn.Module, Callable]],
    batches: list[tuple],
    steps: int,
    warmup: int,
    autocast: bool,
    device: torch.device | None = None,
    overall: frozenset[str] = frozenset(),
) -> dict[str, float]:
    """Target tokens/s of each (model, loss_fn) (median over steps), steps alternating between the models;
    on `device` (a GPU's steps are timed to their end: synchronised before and after). The names in
    `overall` get all tokens over all seconds instead, warm-up steps included: a compiled step's compiling
    (again for each new shape) is slow steps that a median, or leaving out the warm-up, would hide."""
    device = device or torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    runs = {name: (model.to(device), loss_fn) for name, (model, loss_fn) in runs.items()}
    batches = [tuple(t.to(device) for t in batch) for batch in batches]
    optims = {
        name: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
        for name, (m, _) in runs.items()
    }
    rates: dict[str, list[float]] = {name: [] for name in runs}
    totals = {name: [0, 0.0] for name in runs}  # tokens, seconds
    for i in range(warmup + steps):
        batch = batches[i % len(batches)]
        tokens = int((batch[2] != 0).sum())
        for name, (model, loss_fn) in runs.items():
            sync()
            start = time.perf_counter()
            train_step(model.train(), optims[name], batch, autocast, loss_fn)
            sync()
            seconds = time.perf_counter() - start
            if i >= warmup:
                rates[name].append(tokens / seconds)
            totals[name][0] += tokens
            totals[name][1] += seconds
    return {
        name: totals[name][0] / totals[name][1] if name in overall else statistics.median(r)
        for name, r in rates.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-tokens", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--dropout", type=float, default=None, help="override the preset's dropout")
    args = parser.parse_args()
    keep_freed_memory()  # for both models alike: no page faults of fresh large tensors each step

    overrides = {} if args.dropout is None else {"dropout": args.dropout}
    config = ModelConfig.preset(args.preset, vocab_size=args.vocab_size, **overrides)
    batches = make_batches(multi30k_lengths(12000), args.max_tokens, args.vocab_size)
    tokens = statistics.mean(int((b[2] != 0).sum()) for b in batches)
    print(
        f"# {cpu_name()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; preset {args.preset} (d_model {config.d_model}, "
        f"{config.n_layers}+{config.decoder_layers} layers, dropout {config.dropout}), vocabulary "
        f"{args.vocab_size}, {len(batches)} batches of ~{tokens:.0f} target tokens"
    )
    print("| precision | vaswani tok/s | torch.nn.Transformer tok/s | ratio |")
    print("|---|---|---|---|")
    for dtype in args.dtypes.split(","):
        if dtype == "bf16" and (reason := bf16_emulated()):
            print(f"| bf16 | skipped: {reason} |", flush=True)
            continue
        rates = measure(config, batches, args.steps, args.warmup, dtype == "bf16")
        ours, theirs = rates["vaswani"], rates["torch"]
        print(f"| {dtype} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
