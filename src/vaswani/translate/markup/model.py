"""A document's markup as data: raw pieces kept as written and runs (nodes.py) in order, the format's way of
writing text, and `MarkupBuilder`, which the formats' parsers (html.py, markdown.py) fill. A run is rendered with its
marks placed by render.py; what is translated and where the marks go: the package's __init__.py.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vaswani.translate.markup.nodes import Atom, Mark, Node, Run, _first_word, url_spans
from vaswani.translate.markup.render import _in_place, render_run

FORMATS = ("text", "html", "markdown")
_REFERENCE = re.compile(r"&(#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{0,31});")


@dataclass
class Markup:
    """A parsed document: raw pieces (kept as written) and runs, in order; `escape` writes a character of
    translated text in the format (HTML's `&amp;`, Markdown's backslashes); `entities`: characters the input wrote
    as entities, written back the same way; `kept`: runs left as written where their markup could not be read
    back (Markdown the parser read differently), each with its reason."""

    parts: list[str | Run]
    escape: Callable[[str], str]
    entities: dict[str, str] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)
    lead: Callable[[str], str] | None = None  # escapes what would start a block at a run's start (Markdown's "1.")
    fits: Callable[[str, str, str, bool], bool] | None = None  # a delimiter between two characters reads as one
    ampersand: str = "&"  # an "&" that would start a character reference ("&amp;" as text), written so

    def write(self, text: str) -> str:
        """Translated text as the format writes it; an "&" that would start a character reference as `ampersand`."""
        out = []
        for i, char in enumerate(text):
            piece = self.entities.get(char) or self.escape(char)
            if piece == "&" and _REFERENCE.match(text, i):
                piece = self.ampersand
            out.append(piece)
        return "".join(out)

    @property
    def runs(self) -> list[Run]:
        return [p for p in self.parts if isinstance(p, Run)]

    def render(self, texts: Sequence[str], places: Sequence[Callable[[Node], tuple[int, int]]]) -> str:
        """The document with each run's text replaced by `texts[i]` and its nodes placed by `places[i]`."""
        out, i = [], 0
        for j, part in enumerate(self.parts):
            if isinstance(part, Run):
                before = self.parts[j - 1][-1:] if j > 0 and isinstance(self.parts[j - 1], str) else ""
                after = self.parts[j + 1][:1] if j + 1 < len(self.parts) and isinstance(self.parts[j + 1], str) else ""
                out.append(render_run(part, texts[i], places[i], self.write, self.lead, self.fits, (before, after)))
                i += 1
            else:
                out.append(part)
        return "".join(out)

    def source(self) -> str:
        """The document written back untranslated (each node where it was): the parse's own check."""
        runs = self.runs
        return self.render([r.text for r in runs], [_in_place] * len(runs))


def pieces(markup: Markup) -> Counter[str]:
    """The multiset of what must come back unchanged: every mark's tags, every atom, every raw piece but
    whitespace (a test's measure: a document and its translation have the same; an atom's lines without their
    indentation, which is the block's). Markdown's "_" and "*" pairs are
    the same emphasis to a reader, counted as "*" (render_run writes one for the other where it must)."""
    counts: Counter[str] = Counter()

    def visit(nodes: Sequence[Node]) -> None:
        for node in nodes:
            if isinstance(node, Atom):  # a line it continues on is indented as its block is (a list item's)
                counts[re.sub(r"\n[ \t]+", "\n", node.raw)] += 1
            else:
                counts[node.open.replace("_", "*") if not node.open.strip("_") else node.open] += 1
                counts[node.close.replace("_", "*") if not node.close.strip("_") else node.close] += 1
                visit(node.children)

    for part in markup.parts:
        if isinstance(part, Run):
            visit(part.children)
        elif part.strip():
            counts[part.strip()] += 1
    return counts


class MarkupBuilder:
    """What a format's parser calls, in document order: `text` (decoded, with its raw form), `open`/`close` of an
    inline pair, `atom` (kept as written inside the text), `raw` (kept as written between blocks: ends the run)."""

    def __init__(self, escape: Callable[[str], str]) -> None:
        self.markup = Markup([], escape)
        self._new_run()

    def _new_run(self) -> None:
        self._text: list[str] = []
        self._raws: list[str] = []  # the run's text as the input wrote it
        self._length = 0
        self._fixed = 0  # text before this position holds a node's place: not taken out for an atom's `before`
        self._root = Mark("", "", 0, 0)
        self._stack = [self._root]
        self._pending: list[tuple[str, str]] = []  # text not yet searched for URLs: (decoded, raw)
        self._glued: Atom | None = None  # an atom whose `before` was taken out, no text after it yet
        self._after_atom = False  # nothing but an atom since the last text or tag
        self._since: list[tuple[Node, str]] = []  # positions recorded since then: (node, "start"/"end"/"at")

    def text(self, decoded: str, raw: str | None = None) -> None:
        """Text to translate; `raw`: how the input wrote it (an entity for a character beyond ASCII, or for one
        that markup means, is written back so; not a space or a letter, which a translation is full of)."""
        if raw is not None and raw.startswith("&") and len(decoded) == 1 and _entity_kept(decoded):
            self.markup.entities.setdefault(decoded, raw)
        self._pending.append((decoded, decoded if raw is None else raw))

    def open(self, raw: str, key: str) -> None:
        self._flush()
        mark = Mark(raw, "", self._length, self._length, key, joined=self._after_atom)
        self._stack[-1].children.append(mark)
        self._stack.append(mark)
        self._record(mark, "start")

    def close(self, raw: str, key: str) -> None:
        """The innermost open pair's end, or (an end without its start) an atom. A Markdown delimiter's end (its
        parser paired it) closes its pair through the HTML tags opened inside it and never closed ("*a<b>b*"):
        those stay as written."""
        self._flush()
        keys = self.open_keys()
        if not key.startswith("<") and key in keys:
            inner = keys[len(keys) - 1 - keys[::-1].index(key) + 1 :]
            if all(k.startswith("<") for k in inner):
                for _ in inner:
                    self._unpair()
        if len(self._stack) > 1 and self._stack[-1].key == key:
            mark = self._stack.pop()
            mark.close, mark.end = raw, self._length
            self._record(mark, "end")
        else:
            self.atom(raw)
            self._stack[-1].children[-1].opens = False

    def open_keys(self) -> list[str]:
        """The keys of the pairs open here, outermost first."""
        return [mark.key for mark in self._stack[1:]]

    def closes(self, key: str) -> bool:
        """Whether a close of `key` would end the innermost open pair."""
        return len(self._stack) > 1 and self._stack[-1].key == key

    def atom(self, raw: str, last: bool = False) -> None:
        """`raw` kept as written inside the text; `last`: it goes last in its place's parent (Atom.last)."""
        self._flush()
        self._atom(raw)
        self._stack[-1].children[-1].last = last

    def _atom(self, raw: str) -> None:
        """`raw` kept at this point; the whitespace before it leaves the text (the sentence reads as it would
        without it) unless a word follows it directly (`_add` puts it back: "Eins <img>zwei" is two words)."""
        text = "".join(self._text)
        before = text[max(len(text.rstrip()), self._fixed) :]
        atom = Atom(raw, self._length - len(before), before, self._after_atom and not before)
        if before:
            self._text, self._length = [text[: len(text) - len(before)]], len(text) - len(before)
            if self._glued is None:
                self._glued, self._since = atom, []
        self._stack[-1].children.append(atom)
        self._record(atom, "at")
        self._after_atom = True

    def _record(self, node: Node, field: str) -> None:
        self._fixed = self._length
        self._after_atom = False
        if self._glued is not None and node is not self._glued:
            self._since.append((node, field))

    def raw(self, raw: str) -> None:
        """Kept as written, outside any run: the run so far ends here."""
        self._end_run()
        if raw:
            self.markup.parts.append(raw)

    def finish(self) -> Markup:
        self._end_run()
        return self.markup

    def keep(self, raw: str, reason: str) -> None:
        """A run given up on (its markup not read back): what of it was told so far dropped, the run kept as
        written, the reason recorded."""
        self._new_run()
        self.raw(raw)
        self.markup.kept.append(reason)

    def _end_run(self) -> None:
        self._flush()
        while len(self._stack) > 1:
            self._unpair()
        text = "".join(self._text)
        _mark_blanks(self._root.children, text)
        if self._root.children or text.strip():
            bare = _first_word(text)
            bare = bare if _first_word("".join(self._raws)) == bare else ""
            self.markup.parts.append(Run(text, tuple(self._root.children), bare))
        elif text:
            self.markup.parts.append("".join(self._raws))  # whitespace as written (&nbsp; stays &nbsp;)
        self._new_run()

    def _unpair(self) -> None:
        """The innermost open pair, never closed: its start stays as written, its content goes up."""
        mark = self._stack.pop()
        siblings = self._stack[-1].children
        i = siblings.index(mark)
        for child in mark.children:  # no longer last in their parent: what ended them is beside them now
            if isinstance(child, Atom):
                child.last = False
        first = mark.children[0] if mark.children else None
        if isinstance(first, Atom) and first.at == mark.start and not first.before:
            first.joined = True  # written right after the tag that is now an atom ("<b><b>")
        siblings[i : i + 1] = [Atom(mark.open, mark.start, joined=mark.joined, opens=True), *mark.children]

    def _flush(self) -> None:
        """Pending text added to the run, each URL in it made an atom."""
        if not self._pending:
            return
        decoded = "".join(d for d, _ in self._pending)
        position = 0
        for start, end in url_spans(decoded):
            self._add(decoded[position:start], _raw_of(self._pending, position, start))
            self._atom(_raw_of(self._pending, start, end))
            position = end
        self._add(decoded[position:], _raw_of(self._pending, position, len(decoded)))
        self._pending = []

    def _add(self, text: str, raw: str) -> None:
        if not text:
            return
        glued = self._glued
        if glued is not None and text[0].isalnum():  # two words, not one: the whitespace goes back, before the atom
            self._text.append(glued.before)
            shift = len(glued.before)
            self._length += shift
            glued.at += shift
            for node, field in self._since:
                setattr(node, field, getattr(node, field) + shift)
            glued.before = ""
        self._glued = None
        self._after_atom = False
        self._text.append(text)
        self._raws.append(raw)
        self._length += len(text)


def _mark_blanks(nodes: Sequence[Node], text: str) -> None:
    """Mark.blank for each pair in the finished run `text` (its places final: whitespace an atom took out may
    have gone back before it)."""
    for node in nodes:
        if isinstance(node, Mark):
            node.blank = node.end > node.start and not text[node.start : node.end].strip()
            _mark_blanks(node.children, text)


def _entity_kept(char: str) -> bool:
    return char in "&<>\"'" or (ord(char) > 127 and (not char.isspace() or char == "\xa0"))


def _raw_of(pieces: Sequence[tuple[str, str]], start: int, end: int) -> str:
    """The raw form of decoded characters [start, end): literal pieces sliced, entities and escapes whole."""
    out, position = [], 0
    for decoded, raw in pieces:
        a, b = position, position + len(decoded)
        if b > start and a < end:
            out.append(raw[max(start, a) - a : min(end, b) - a] if decoded == raw else raw)
        position = b
    return "".join(out)
