"""Attention masks: the one place that knows the mask convention.

Masks are bool and True means "may attend", the convention of
`torch.nn.functional.scaled_dot_product_attention`. They broadcast against attention scores of
shape (B, H, T_query, T_key). Padding is on the right of every sequence.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens, for any query.

    Shape: ids (B, L) -> mask (B, 1, 1, L)
    """
    return (ids != pad_id)[:, None, None, :]


def causal_mask(query_len: int, key_len: int | None = None, device: torch.device | None = None) -> Tensor:
    """Query i may attend key j when j <= i + (key_len - query_len).

    With a cache the queries are the last `query_len` of `key_len` positions, so the diagonal is
    aligned bottom-right (§3.2.3: each position sees itself and what came before it).

    Shape: -> mask (query_len, key_len)
    """
    key_len = query_len if key_len is None else key_len
    if key_len < query_len:
        raise ValueError(f"causal_mask needs key_len >= query_len, got {key_len} < {query_len}")
    ones = torch.ones(query_len, key_len, dtype=torch.bool, device=device)
    return ones.tril(diagonal=key_len - query_len)


def target_mask(tgt: Tensor, pad_id: int) -> Tensor:
    """Causal and target padding combined, for decoder self-attention.

    With right padding the causal mask alone already hides every pad key from every real query,
    which is why the decoder's fast path uses only `is_causal`; this mask is the explicit form.

    Shape: tgt (B, T) -> mask (B, 1, T, T)
    """
    return causal_mask(tgt.size(1), device=tgt.device) & padding_mask(tgt, pad_id)
