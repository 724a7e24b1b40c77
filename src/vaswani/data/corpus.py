"""Parallel text in: read plain or gzipped UTF-8 files, validate them, normalise, filter, report.

Nothing is dropped silently: every removed pair is counted under its reason, and the counts are
printed by the trainer and saved in the model directory.
"""

from __future__ import annotations

import gzip
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


class DataError(ValueError):
    """Input data that cannot be used; the message names the file and the fix."""


# NUL and the Unicode line/paragraph separators would split or corrupt lines downstream.
_SPACED = ("\x00", "\r", "\u2028", "\u2029")
# What reading a plain or .gz file may raise: the OS's errors, gzip's (a truncated file: EOFError; not gzip:
# BadGzipFile, an OSError) and zlib's (a corrupt deflate stream: zlib.error, no OSError).
READ_ERRORS = (OSError, EOFError, zlib.error)
BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark, which Windows editors put at a file's start


def without_bom(data: bytes) -> bytes:
    """A file's bytes without the BOM some editors start a UTF-8 file with: an encoding mark, not text (left in, it
    would become part of the first sentence's first word)."""
    return data[len(BOM) :] if data.startswith(BOM) else data


def unreadable(path: str | Path, error: BaseException) -> DataError:
    """The DataError for a file that cannot be read (one of READ_ERRORS): the reason, and what to do about it."""
    damaged = isinstance(error, EOFError | zlib.error | gzip.BadGzipFile)
    fix = "the file is truncated or corrupt: copy or download it again" if damaged else "check that it can be read"
    return DataError(f"{path}: cannot read ({error}); {fix}")


def file_lines(handle: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of a binary file (or standard input) without their line end, split at \\n alone, the BOM at its
    start dropped: a file holding only a BOM has no lines, as read_lines reads it."""
    for number, line in enumerate(handle):
        if number == 0 and line.startswith(BOM):
            line = line[len(BOM) :]
            if not line:
                return
        yield line[:-1] if line.endswith(b"\n") else line


def _normalise(text: str) -> str:
    """NUL, CR and U+2028/9 become spaces (str.replace: far faster than str.translate on clean text)."""
    for char in _SPACED:
        if char in text:
            text = text.replace(char, " ")
    return text


def clean_line(text: str) -> str:
    """NUL, CR and U+2028/9 become spaces; surrounding whitespace goes."""
    return _normalise(text).strip()


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
            raw = without_bom(handle.read())
    except READ_ERRORS as error:
        raise unreadable(path, error) from None
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [decode_line(line, path, number, invalid_utf8) for number, line in enumerate(lines, start=1)]


def decode_lines(
    raw: list[bytes], path: str | Path, first: int, invalid_utf8: str = "error", lowercase: bool = False
) -> list[str]:
    """Lines' bytes (no line ends; line numbers from `first`) as normalised text, as decode_line
    gives them, decoded and normalised a whole chunk at a time (no Python step per character)."""
    try:
        text = b"\n".join(raw).decode("utf-8")
    except UnicodeDecodeError:  # find the line, and replace or report there
        text = "\n".join(decode_line(line, path, first + i, invalid_utf8) for i, line in enumerate(raw))
    text = _normalise(text)  # maps nothing to \n: the line structure is kept
    if lowercase:
        text = text.lower()
    lines = text.split("\n") if raw else []
    return [line.strip() for line in lines]


def decode_line(raw: bytes, path: str | Path, number: int, invalid_utf8: str = "error") -> str:
    """One line's bytes (no line end) as normalised text; invalid UTF-8 is a DataError naming the file
    and line, or, with invalid_utf8="replace", becomes U+FFFD."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        if invalid_utf8 != "error":
            text = raw.decode("utf-8", errors="replace")
        else:
            raise DataError(
                f"{path}, line {number}: invalid UTF-8 at byte {error.start}; fix the file or set "
                "data.invalid_utf8: replace"
            ) from None
    return clean_line(text)


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
    pairs: Sequence[tuple[list[int], list[int]]],
    max_len: int,
    max_ratio: float,
    min_len_for_ratio: int = 5,
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


class LineReader:
    """Lines of a plain or .gz file, or of standard input, in chunks, for translation: invalid UTF-8
    is replaced (never fatal) and the numbers of the lines where that happened are collected in
    `replaced`. Lines split at \\n only, so the output can keep exactly one line per input line."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        if self.path is not None and not self.path.is_file():
            raise DataError(f"{self.path}: file not found")
        self.interactive = self.path is None and sys.stdin.isatty()
        self.replaced: list[int] = []
        self.total = self._count() if self.path is not None else None

    def _open(self) -> IO[bytes]:
        if self.path is None:
            return sys.stdin.buffer
        return gzip.open(self.path, "rb") if self.path.suffix == ".gz" else open(self.path, "rb")

    def _count(self) -> int:
        """The file's lines, counted before any is translated: a truncated or corrupt file is refused at once."""
        try:
            with self._open() as handle:
                return sum(1 for _ in file_lines(handle))
        except READ_ERRORS as error:
            raise unreadable(self.path, error) from None

    def read_text(self) -> str:
        """The whole input as one text, every character and line end kept (for documents); invalid UTF-8 is
        replaced and the lines where that happened are numbered in `replaced`."""
        handle = self._open()
        try:
            data = handle.read()
        except READ_ERRORS as error:
            raise unreadable(self.path or "standard input", error) from None
        finally:
            if handle is not sys.stdin.buffer:
                handle.close()
        data = without_bom(data)  # an encoding mark, not the first word's first character
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            lines = []
            for number, raw in enumerate(data.split(b"\n"), start=1):
                try:
                    lines.append(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    lines.append(raw.decode("utf-8", errors="replace"))
                    self.replaced.append(number)
            return "\n".join(lines)

    def chunks(self, size: int) -> Iterator[tuple[int, list[str]]]:
        """(index of the chunk's first line, its lines), `size` lines at a time."""
        handle, chunk, first = self._open(), [], 0
        try:
            for number, raw in enumerate(file_lines(handle), start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    text = raw.decode("utf-8", errors="replace")
                    self.replaced.append(number)
                chunk.append(clean_line(text))
                if len(chunk) == size:
                    yield first, chunk
                    first, chunk = first + size, []
            if chunk:
                yield first, chunk
        except READ_ERRORS as error:
            raise unreadable(self.path or "standard input", error) from None
        finally:
            if handle is not sys.stdin.buffer:
                handle.close()
