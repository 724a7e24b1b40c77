"""Search over the decoder's KV cache: greedy decoding (beam search and sampling come next)."""

from __future__ import annotations

import torch
from torch import Tensor

from vaswani.nn import Transformer


def max_lengths(src: Tensor, pad_id: int, a: float, b: int) -> Tensor:
    """Maximum output length a * source_length + b per sentence (§6.1: input length + 50). Shape: (B,)"""
    return ((src != pad_id).sum(1).float() * a + b).long().clamp(min=1)


@torch.no_grad()
def greedy(model: Transformer, src: Tensor, max_len_a: float = 1.0, max_len_b: int = 50) -> list[list[int]]:
    """Most probable token at each step, on the KV cache; the encoder runs once, and sentences that
    finished are dropped from the batch so they stop costing compute. Returns ids without BOS/EOS.

    Shape: src (B, S) -> B lists of token ids
    """
    c = model.config
    memory, memory_mask = model.encode(src)
    limits = max_lengths(src, c.pad_id, max_len_a, max_len_b)  # (B,)
    out = torch.full((src.size(0), int(limits.max())), c.pad_id, dtype=torch.long)
    lengths = torch.zeros(src.size(0), dtype=torch.long)
    active = torch.arange(src.size(0))
    tokens = torch.full((src.size(0),), c.bos_id, dtype=torch.long, device=src.device)
    cache = None
    for step in range(out.size(1)):
        logits, cache = model.decode_step(tokens, memory, memory_mask, cache)
        tokens = logits.argmax(-1)  # (b,)
        finished = (tokens == c.eos_id).cpu()
        out[active[~finished], step] = tokens.cpu()[~finished]
        lengths[active[~finished]] = step + 1
        finished |= limits[active] <= step + 1
        if finished.all():
            break
        if finished.any():
            keep = (~finished).nonzero().squeeze(1)
            active = active[keep]
            keep = keep.to(src.device)
            tokens, memory_mask, cache = tokens[keep], memory_mask[keep], cache.reorder(keep)
    return [out[i, : lengths[i]].tolist() for i in range(src.size(0))]
