"""What the commands share for their input and messages: one output line per input line, warnings on stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console


def stderr_console() -> Console:
    """Where the commands write progress, notes and warnings: vaswani.console's, the trainer's too."""
    from vaswani import console

    return console.stderr_console()


class Lines:
    """The input's lines in chunks and an output taking one line for each, for the commands that answer
    line by line (translate, classify). The input is a plain or .gz file, or standard input (read a line at
    a time from a terminal, so each answer comes at once); invalid UTF-8 is replaced and each line where
    that happened is named in a warning. The output is a file, or standard output; use as a context manager.

        with Lines(args.input, args.output, console) as lines:
            for first, chunk in lines.chunks(4096):
                lines.write(answer(line) for line in chunk)
    """

    def __init__(self, input: str | None, output: str | None, console: Console) -> None:
        from vaswani.data.corpus import LineReader

        self.reader = LineReader(input)  # a missing input is reported before the output is opened
        self.console = console
        self._output_path = output
        self.output: TextIO = sys.stdout

    @property
    def total(self) -> int | None:
        """How many lines a file holds (None for standard input)."""
        return self.reader.total

    def __enter__(self) -> Lines:
        if self._output_path:
            self.output = open(self._output_path, "w", encoding="utf-8")  # closed in __exit__
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.output is not sys.stdout:
            self.output.close()

    def chunks(self, size: int) -> Iterator[tuple[int, list[str]]]:
        """(index of the chunk's first line, its lines), `size` lines at a time (one from a terminal);
        what was written for a chunk is flushed before the next one is read."""
        reader = self.reader
        for first, chunk in reader.chunks(1 if reader.interactive else size):
            for number in reader.replaced:
                self.console.print(f"vaswani: warning: line {number}: invalid UTF-8, replaced with U+FFFD")
            reader.replaced.clear()
            yield first, chunk
            self.output.flush()

    def text(self) -> str:
        """The whole input as one text (`--document`), each line with invalid UTF-8 named in a warning."""
        text = self.reader.read_text()
        for number in self.reader.replaced:
            self.console.print(f"vaswani: warning: line {number}: invalid UTF-8, replaced with U+FFFD")
        return text

    def write(self, lines: Iterable[str]) -> None:
        """Write `lines`, each ended by a newline."""
        for line in lines:
            self.output.write(line + "\n")
