"""Generated toy tasks (copy, reverse) for checking that training works, no files needed."""

from __future__ import annotations

import random

_ALPHABET = "abcdefghij"


def toy_pairs(task: str, size: int, max_len: int, seed: int) -> list[tuple[str, str]]:
    """Random strings over a 10-letter alphabet (length 2..max_len) and their copy or reversal."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(size):
        text = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(2, max_len)))
        pairs.append((text, text[::-1] if task == "reverse" else text))
    return pairs
