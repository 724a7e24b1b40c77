"""A small random parallel corpus written as train files."""

import random
from pathlib import Path

WORDS = [
    "a",
    "man",
    "woman",
    "child",
    "dog",
    "ball",
    "street",
    "water",
    "red",
    "blue",
    "green",
    "playing",
    "running",
    "walking",
    "holding",
    "through",
    "under",
    "beside",
    "the",
    "with",
    "young",
    "old",
    "small",
    "large",
    "sitting",
    "standing",
    "looking",
]


def write_corpus(directory: Path, n: int = 120, seed: int = 0, name: str = "train") -> dict[str, str]:
    """n random caption-like pairs (the target is the source reversed word by word) as train files."""
    rng = random.Random(seed)
    src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(n)]
    tgt = [" ".join(reversed(line.split())) for line in src]
    (directory / f"{name}.src").write_text("\n".join(src) + "\n")
    (directory / f"{name}.tgt").write_text("\n".join(tgt) + "\n")
    return {"train_src": str(directory / f"{name}.src"), "train_tgt": str(directory / f"{name}.tgt")}
