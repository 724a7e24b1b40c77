"""A beam step's best continuations: the m best (hypothesis, next word) pairs of each sentence, found on the device
and read by the host in one copy. Fixed shapes and no synchronisation in `packed_continuations`, so that the static
step (decode/static.py) captures it in its CUDA graph."""

from __future__ import annotations

import torch
from torch import Tensor

from vaswani.decode.top_words import row_topk


def best_continuations(scores: Tensor, log_probs: Tensor, n: int, width: int, m: int) -> tuple[Tensor, Tensor, Tensor]:
    """The m best continuations of each sentence's `width` hypotheses: their summed log-probabilities, the
    hypothesis each extends and its next token, best first, copied to the host at once (`packed_continuations`).
    Shape: scores (n, width), log_probs (n*width, V) -> 3 x (n, m') on the CPU, m' = min(m, width * min(m, V))"""
    # one copy to the host (a synchronisation on a GPU)
    return unpacked_continuations(packed_continuations(scores, log_probs, n, width, m).cpu())


def packed_continuations(scores: Tensor, log_probs: Tensor, n: int, width: int, m: int) -> Tensor:
    """`best_continuations` on the device, packed in one tensor: each row's m best first, then the best of those
    (the same m as over all width x V at once, at less cost: a GPU's top-k over all of a sentence's candidates was
    a sizeable share of a beam step). Fixed shapes, no synchronisation: a CUDA graph captures it (decode/static.py).
    Shape: scores (n, width), log_probs (n*width, V) -> (n, 3m'): scores, hypotheses, words (ids < 2^24 are exact
    in float32)"""
    per_row = min(m, log_probs.size(-1))
    row_log_probs, row_words = row_topk(log_probs, per_row)  # (n*width, per_row): a row's order is its sums' order
    row_scores = row_log_probs + scores.view(n * width, 1)
    top_scores, pick = row_scores.view(n, width * per_row).topk(min(m, width * per_row), dim=1)
    origin, word = pick // per_row, row_words.view(n, width * per_row).gather(1, pick)
    return torch.cat([top_scores, origin.to(top_scores.dtype), word.to(top_scores.dtype)], dim=1)


def unpacked_continuations(packed: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`packed_continuations`'s tensor as scores, hypotheses and words. Shape: (n, 3m') -> 3 x (n, m')"""
    top_scores, origin, word = packed.split(packed.size(1) // 3, dim=1)
    return top_scores, origin.long(), word.long()
