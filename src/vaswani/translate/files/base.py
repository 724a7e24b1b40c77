"""The one interface every file format is behind, and what the formats share.

A format reads a file's bytes into a `Parsed` file: the texts to translate, each an HTML fragment (a paragraph's
runs as `<span data-k="N">` marks, what is no text as `<img data-k="N">` atoms, a line break as `<br data-k="N">`),
and a way to write the file back from their translations. The front (files/__init__.py) translates every fragment
of the file in one call, as markup is translated (translate/markup: each mark back on the words aligned to the
ones it wrapped), so that a long file is batched as a whole.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, Protocol

OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # an encrypted OOXML file, or a .doc/.ppt of Office 97-2003


def sniff(data: bytes) -> str | None:
    """What `data` is by its first bytes: "zip", "ole", "pdf", or None (text)."""
    if data.startswith(b"PK\x03\x04") or data.startswith(b"PK\x05\x06"):
        return "zip"
    if data.startswith(OLE):
        return "ole"
    if data.lstrip()[:5] == b"%PDF-":
        return "pdf"
    return None


class FileError(ValueError):
    """A file that cannot be translated: the message says what is wrong with it and what to do, on one line (a
    parser's own message inside it, lxml's with its line breaks, is put on one)."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


@dataclass
class Parsed:
    """A file read for translation: its `fragments` (HTML) and `write(translations, target) -> bytes`, the file
    with each fragment replaced by its translation (`target`: the target language's ISO code, or None)."""

    fragments: list[str]
    write: Callable[[list[str], str | None], bytes]
    notes: list[str] = field(default_factory=list)  # what the reader left untranslated, and why


class FileFormat(Protocol):
    """A file format: its name (--format), the extensions it is picked by, its media type, and its reader."""

    name: str
    extensions: tuple[str, ...]
    media_type: str

    def read(self, data: bytes) -> Parsed: ...


class Fragment:
    """An HTML fragment under construction: text escaped, marks and atoms numbered, their objects kept by number."""

    def __init__(self, start: int = 0) -> None:
        self.parts: list[str] = []
        self.items: dict[int, Any] = {}
        self.start = start  # the first number (fragments joined into one number their items apart)

    def _new(self, item: Any) -> int:
        k = self.start + len(self.items)
        self.items[k] = item
        return k

    def text(self, text: str) -> None:
        self.parts.append(html.escape(text, quote=False))

    def open(self, item: Any, tag: str = "span") -> int:
        k = self._new(item)
        self.parts.append(f'<{tag} data-k="{k}">')
        return k

    def close(self, tag: str = "span") -> None:
        self.parts.append(f"</{tag}>")

    def atom(self, item: Any) -> int:
        k = self._new(item)
        self.parts.append(f'<img data-k="{k}">')
        return k

    def line_break(self, item: Any) -> int:
        k = self._new(item)
        self.parts.append(f'<br data-k="{k}">')
        return k

    @property
    def html(self) -> str:
        return "".join(self.parts)

    def worth_translating(self) -> bool:
        """Whether the fragment holds a letter outside its tags (a number, a symbol or nothing is kept as it is)."""
        return any(c.isalpha() for _, text in segments(self.html) if isinstance(text, str) for c in text)


# One piece of a translated fragment: (the data-k numbers of the marks around it, outermost first; its text), or
# (the marks around it; the data-k number of an atom or line break, as an int).
Segment = tuple[tuple[int, ...], str | int]


def segments(fragment: str) -> Iterator[Segment]:
    """A translated fragment read back: its text pieces with the marks around them, and its atoms, in order."""
    reader = _Segments()
    reader.feed(fragment)
    reader.close()
    yield from reader.out


class _Segments(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[int | None] = []
        self.out: list[Segment] = []

    def _marks(self) -> tuple[int, ...]:
        return tuple(k for k in self.stack if k is not None)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        k = dict(attrs).get("data-k")
        if tag in ("img", "br"):
            if k is not None:
                self.out.append((self._marks(), int(k)))
            return
        self.stack.append(int(k) if k is not None else None)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag("img" if tag in ("img", "br") else tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not data:
            return
        marks = self._marks()
        if self.out and self.out[-1][0] == marks and isinstance(self.out[-1][1], str):
            self.out[-1] = (marks, self.out[-1][1] + data)
        else:
            self.out.append((marks, data))


def placed_items(fragment: str, atoms: Iterable[int]) -> list[Segment]:
    """`segments(fragment)`, with each of `atoms` (data-k numbers) that the fragment lost (none should be) appended
    at its end, so that nothing of the file is dropped."""
    out = list(segments(fragment))
    seen = {s[1] for s in out if isinstance(s[1], int)}
    return out + [((), k) for k in atoms if k not in seen]
