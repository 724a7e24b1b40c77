"""Which translations to trust: a translation whose confidence (its least sure sentence's, for a text) is under a
threshold the user gives is marked low_confidence, in the CLI's --scores records and the API's translations, so that
it can be checked by a person (`vaswani translate --min-confidence P`, the API's "min_confidence"). What the confidence
is and how well it tells good translations from bad: docs/benchmarks.md, "Confidence" (benchmarks/confidence.py).
"""

from __future__ import annotations

from typing import Any


def check_threshold(below: float | None, name: str = "--min-confidence") -> None:
    """A one-line ValueError unless `below` is a probability (or None: no threshold)."""
    if below is not None and not 0 <= below <= 1:
        raise ValueError(f"{name} {below}: give a confidence between 0 and 1")


def low(confidence: float | None, below: float | None) -> bool:
    """Whether a confidence is under the threshold (an unknown one never is: an empty line, a copied line)."""
    return below is not None and confidence is not None and confidence < below


def flag(record: dict[str, Any], below: float | None) -> int:
    """`record` (a translation's to_dict: a line's, a document's, a marked-up text's) and each of its sentences'
    records marked "low_confidence": true where their confidence is under `below`; returns how many sentences (a
    line: itself) were marked."""
    sentences = record.get("sentences")
    marked = 0
    for sentence in sentences or ():
        if low(sentence.get("confidence"), below):
            sentence["low_confidence"] = True
            marked += 1
    if low(record.get("confidence"), below):
        record["low_confidence"] = True
        marked = marked if sentences is not None else 1
    return marked
