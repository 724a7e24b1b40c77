"""Each row's best words over a large vocabulary, found through the maxima of its chunks: a decoding step's top-k
and argmax over an OPUS-MT-sized vocabulary run several times faster so on a CPU than torch's own, with topk's
values and argmax's index (its first maximum) exactly (tests/decode/test_top_words.py).

A row's m largest values lie in the m chunks of CHUNK words whose maxima are largest: any chunk holding one of them
has a maximum at least as large, and fewer than m chunks can have a larger one. So the maxima (one pass over the
row, the fastest reduction torch has) pick m chunks, and only those m * CHUNK words are searched. A vocabulary too
small for 4m chunks of CHUNK words is cut in chunks of SMALL_CHUNK (a beam over a small model's target words).
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK = 256  # words per chunk: 227 chunks at 58,101 words
SMALL_CHUNK = 64  # words per chunk where V has fewer than 4m chunks of CHUNK


def _chunked(x: Tensor, m: int) -> tuple[Tensor, int, int] | None:
    """x's whole chunks as (R, n, size), n and their size, where chunking pays (a CPU, many chunks per pick), else
    None."""
    R, V = x.shape
    size = CHUNK if 4 * m <= V // CHUNK else SMALL_CHUNK
    n = V // size
    if x.device.type != "cpu" or n < 4 * m or x.stride(1) != 1:
        return None
    return x[:, : n * size].view(R, n, size), n, size


def row_topk(x: Tensor, m: int) -> tuple[Tensor, Tensor]:
    """`x.topk(m, dim=1)`: each row's m largest values, best first, and their words. Among words of equal value at
    the m-th place the pick may differ from topk's (whose order among ties is unspecified too).
    Shape: x (R, V) -> values, words (R, m)"""
    chunked = _chunked(x, m)
    if chunked is None:
        return x.topk(m, dim=1)
    chunks, n, size = chunked
    R, V = x.shape
    best = chunks.amax(dim=2).topk(m, dim=1).indices  # (R, m): the chunks with the largest maxima
    candidates = chunks.gather(1, best[:, :, None].expand(R, m, size)).reshape(R, m * size)
    words = (best[:, :, None] * size + torch.arange(size, device=x.device)).view(R, m * size)
    if n * size < V:  # the words after the last whole chunk are candidates as they are
        candidates = torch.cat([candidates, x[:, n * size :]], dim=1)
        words = torch.cat([words, torch.arange(n * size, V, device=x.device).expand(R, -1)], dim=1)
    values, position = candidates.topk(m, dim=1)
    return values, words.gather(1, position)


def row_argmax(x: Tensor) -> Tensor:
    """`x.argmax(dim=1)`: each row's first word of the largest value. Shape: x (R, V) -> (R,)"""
    chunked = _chunked(x, 1)
    if chunked is None:
        return x.argmax(dim=1)
    chunks, n, size = chunked
    R, V = x.shape
    maxima = chunks.amax(dim=2)  # (R, n)
    chunk = maxima.argmax(dim=1)  # the first chunk holding the row's maximum (of its whole chunks)
    best = chunk * size + chunks[torch.arange(R, device=x.device), chunk].argmax(dim=1)
    if n * size < V:  # a larger value after the last whole chunk
        tail, at = x[:, n * size :].max(dim=1)
        best = torch.where(tail > maxima.gather(1, chunk[:, None])[:, 0], at + n * size, best)
    return best
