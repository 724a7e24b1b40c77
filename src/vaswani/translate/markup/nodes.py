"""The pieces a document's markup is made of: marks (a pair of tags or delimiters around part of a run's text),
atoms (what stays as written inside the text), runs (one block's text with its marks and atoms), and where URLs are
in a text (kept as atoms). Built by `MarkupBuilder` (model.py), rendered by render.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_URL_STARTS = ("http://", "https://", "ftp://", "www.", "mailto:")
_URL_TRAILING = ".,;:!?'\")]}»>"
_URL_LEADING = "(<[{\"'«"


@dataclass(eq=False)
class Atom:
    """Something kept as written inside a run's text, at character `at` (`before`: the whitespace before it in the
    source, taken out of the text so that the sentence reads as it would without it)."""

    raw: str
    at: int
    before: str = ""
    joined: bool = False  # written right after another atom in the source (two code spans side by side)
    last: bool = False  # an element never closed, ended by the tag after it: text after it would fall inside it
    opens: bool | None = None  # a pair's start (True) or end (False) left as written, unpaired here: its other
    # delimiter is in another run ("*a  \nb*") or crossed by a pair that closed first


@dataclass(eq=False)
class Mark:
    """A pair of tags (or Markdown delimiters) as written, around the run's text [start, end)."""

    open: str
    close: str
    start: int
    end: int
    key: str = ""  # what closes it: a tag's name, a delimiter's kind
    children: list[Mark | Atom] = field(default_factory=list)
    joined: bool = False  # opened right after an atom (where it is never closed, its tag is an atom joined so)
    blank: bool = False  # around whitespace only (<b>&nbsp;</b>): it keeps its place, it takes no word


Node = Mark | Atom


@dataclass(frozen=True)
class Run:
    """One block's inline content: the text to translate, and the marks and atoms inside it (a forest, in order)."""

    text: str
    children: tuple[Node, ...]
    bare: str = ""  # the first word as the input wrote it, unescaped, where it starts no block (a table's "#")


def _first_word(text: str) -> str:
    """The characters before the first whitespace (what decides whether a line starts a block)."""
    return text.split(maxsplit=1)[0] if text.strip() and not text[:1].isspace() else ""


def url_spans(text: str) -> list[tuple[int, int]]:
    """Where URLs are in `text`: whitespace-separated words that begin as a URL does (after an opening bracket or
    quote), without trailing punctuation."""
    spans, start = [], None
    for i, char in enumerate(text + " "):
        if char.isspace():
            if start is not None:
                word = text[start:i]
                lead = len(word) - len(word.lstrip(_URL_LEADING))
                scheme = next((s for s in _URL_STARTS if word[lead:].lower().startswith(s)), None)
                end = start + len(word.rstrip(_URL_TRAILING))
                if scheme is not None and end > start + lead + len(scheme):  # more than "mailto:" or "www."
                    spans.append((start + lead, end))
                start = None
        elif start is None:
            start = i
    return spans
