"""Parallel text in: read plain or gzipped UTF-8 files, validate them, normalise, filter, report.

Nothing is dropped silently: every removed pair is counted under its reason, and the counts are
printed by the trainer and saved in the model directory.
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class DataError(ValueError):
    """Input data that cannot be used; the message names the file and the fix."""


# NUL and the Unicode line/paragraph separators would split or corrupt lines downstream.
_NORMALISE = str.maketrans({"\x00": " ", "\r": " ", "\u2028": " ", "\u2029": " "})


def read_lines(path: str | Path, invalid_utf8: str = "error") -> list[str]:
    """Lines of a plain or .gz UTF-8 file, without line ends, normalised (NUL, CR, U+2028/9 -> space).

    `invalid_utf8="error"` raises a DataError naming the file and line; "replace" substitutes U+FFFD.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as error:
        raise DataError(f"{path}: cannot read ({error})") from None
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, line in enumerate(lines, start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            if invalid_utf8 != "error":
                text = line.decode("utf-8", errors="replace")
            else:
                raise DataError(
                    f"{path}, line {number}: invalid UTF-8 at byte {error.start}; fix the file or set "
                    "data.invalid_utf8: replace"
                ) from None
        out.append(text.translate(_NORMALISE).strip())
    return out


def read_parallel(src_path: str | Path, tgt_path: str | Path, invalid_utf8: str = "error") -> list[tuple[str, str]]:
    """Aligned (source, target) lines; different line counts are an error naming both files."""
    src, tgt = read_lines(src_path, invalid_utf8), read_lines(tgt_path, invalid_utf8)
    if len(src) != len(tgt):
        raise DataError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; parallel files need one "
            "sentence per line, aligned"
        )
    return list(zip(src, tgt, strict=True))


@dataclass
class FilterReport:
    """How many pairs were kept, and how many removed for each reason."""

    total: int = 0
    kept: int = 0
    removed: Counter = field(default_factory=Counter)

    def lines(self) -> list[str]:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.removed.items())) or "none"
        return [f"{self.kept} of {self.total} pairs kept; removed: {reasons}"]

    def to_dict(self) -> dict:
        return {"total": self.total, "kept": self.kept, "removed": dict(self.removed)}


def filter_pairs(
    pairs: Sequence[tuple[list[int], list[int]]], max_len: int, max_ratio: float, min_len_for_ratio: int = 5,
    on_removed: Callable[[int, str], None] | None = None,
) -> tuple[list[int], FilterReport]:
    """Indices of the tokenized pairs to keep: both sides non-empty, at most max_len tokens, and a
    length ratio of at most max_ratio (checked when both sides exceed min_len_for_ratio tokens)."""
    report = FilterReport(total=len(pairs))
    keep = []
    for i, (src, tgt) in enumerate(pairs):
        reason = None
        if not src or not tgt:
            reason = "empty source or target"
        elif len(src) > max_len or len(tgt) > max_len:
            reason = f"longer than data.max_len={max_len}"
        elif min(len(src), len(tgt)) > min_len_for_ratio and max(len(src), len(tgt)) > max_ratio * min(
            len(src), len(tgt)
        ):
            reason = f"length ratio above data.max_len_ratio={max_ratio}"
        if reason is None:
            keep.append(i)
        else:
            report.removed[reason] += 1
            if on_removed is not None:
                on_removed(i, reason)
    report.kept = len(keep)
    return keep, report
