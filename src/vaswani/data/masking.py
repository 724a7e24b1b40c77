"""BERT's masked tokens: which tokens a masked language model predicts, and what it reads in their place."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vaswani.special import PAD_ID

FIRST_REGULAR = 5  # a text tokenizer's ids: PAD 0, BOS 1, EOS 2, UNK 3, <mask> 4, then the text's pieces


def mask_tokens(
    ids: np.ndarray,
    rng: np.random.Generator,
    mask_id: int,
    vocab_size: int,
    prob: float = 0.15,
    first_regular: int = FIRST_REGULAR,
    never: Sequence[int] = (),
) -> tuple[np.ndarray, np.ndarray, int]:
    """BERT's masking (Devlin et al. 2019, §3.1): each regular token is chosen with probability `prob`; a
    chosen token becomes <mask> 80% of the time, a random regular token 10%, and stays itself 10%.
    Special tokens (ids below `first_regular`: PAD, BOS, EOS, UNK, <mask>; and the ids in `never`, an
    imported tokenizer's special tokens) are never chosen. At least one token per batch is chosen, so every
    batch has something to predict.

    Shape: ids (B, T) -> inputs (B, T), targets (B, T) (the original at chosen positions, PAD elsewhere), count
    """
    regular = (ids >= first_regular) & ~np.isin(ids, np.asarray(never, dtype=ids.dtype))
    chosen = (rng.random(ids.shape) < prob) & regular
    if not chosen.any() and regular.any():
        flat = np.flatnonzero(regular)
        chosen.flat[flat[rng.integers(len(flat))]] = True
    action = rng.random(ids.shape)
    inputs = ids.copy()
    inputs[chosen & (action < 0.8)] = mask_id
    random_ones = chosen & (action >= 0.8) & (action < 0.9)
    inputs[random_ones] = rng.integers(first_regular, vocab_size, size=int(random_ones.sum()))
    targets = np.where(chosen, ids, PAD_ID)
    return inputs, targets, int(chosen.sum())
