"""A document's markup as data: raw pieces kept as written and runs of text with their marks (pairs of tags or
delimiters around part of the text) and atoms (what stays as written inside the text); `MarkupBuilder`, which the
formats' parsers (markup_html.py, markup_markdown.py) fill; a run rendered with its marks placed. What is translated
and where the marks go: markup.py.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vaswani.translate.align import word_spans

FORMATS = ("text", "html", "markdown")
_URL_STARTS = ("http://", "https://", "ftp://", "www.", "mailto:")
_URL_TRAILING = ".,;:!?'\")]}»>"
_URL_LEADING = "(<[{\"'«"
_REFERENCE = re.compile(r"&(#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{0,31});")


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


def _first_word(text: str) -> str:
    """The characters before the first whitespace (what decides whether a line starts a block)."""
    return text.split(maxsplit=1)[0] if text.strip() and not text[:1].isspace() else ""


def _mark_blanks(nodes: Sequence[Node], text: str) -> None:
    """Mark.blank for each pair in the finished run `text` (its places final: whitespace an atom took out may
    have gone back before it)."""
    for node in nodes:
        if isinstance(node, Mark):
            node.blank = node.end > node.start and not text[node.start : node.end].strip()
            _mark_blanks(node.children, text)


def _entity_kept(char: str) -> bool:
    return char in "&<>\"'" or (ord(char) > 127 and (not char.isspace() or char == "\xa0"))


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


def _raw_of(pieces: Sequence[tuple[str, str]], start: int, end: int) -> str:
    """The raw form of decoded characters [start, end): literal pieces sliced, entities and escapes whole."""
    out, position = [], 0
    for decoded, raw in pieces:
        a, b = position, position + len(decoded)
        if b > start and a < end:
            out.append(raw[max(start, a) - a : min(end, b) - a] if decoded == raw else raw)
        position = b
    return "".join(out)


def _in_place(node: Node) -> tuple[int, int]:
    return (node.at, node.at) if isinstance(node, Atom) else (node.start, node.end)


def render_run(
    run: Run,
    text: str,
    place: Callable[[Node], tuple[int, int]],
    write: Callable[[str], str],
    lead: Callable[[str], str] | None = None,
    fits: Callable[[str, str, str, bool], bool] | None = None,
    around: tuple[str, str] = ("", ""),
) -> str:
    """`text` (a run's translation, or its own text) with the run's marks and atoms put at `place(node)`: each
    node's span clipped into its parent's, siblings in order of place and kept from overlapping, so that the
    output is well nested whatever the alignment said. A mark squeezed out by a sibling that took its words takes
    the nearest word no sibling holds (an empty pair of Markdown delimiters would not read back as one).
    `fits(delimiter, before, after, opening)`: whether a mark's delimiter between those characters opens (closes)
    its pair; where it does not, a space beside it makes it (`around`: the characters written before and after the
    run, which a delimiter at its edge sits beside)."""
    out: list[str] = []
    delimiters: list[tuple[int, bool]] = []  # where marks' opens and closes are in `out`
    pairs: list[tuple[int, int]] = []  # where each mark's open and close are in `out`
    words = word_spans(text)
    after_atom = [False]  # the last thing written was an atom

    def add(piece: str) -> None:
        """Translated text; a word right after an atom that ends in one (a URL) is kept apart from it."""
        piece = _led(write(piece), None if out else lead, run.bare)
        last = next((x for x in reversed(out) if x), "")
        glued = after_atom[0] and piece[:1].isalnum() and (last[-1:].isalnum() or bool(url_spans(last.lstrip())))
        out.append(" " + piece if glued else piece)

    def emit(nodes: Sequence[Node], lo: int, hi: int, parent: Mark | None = None) -> None:
        spans, position = _sibling_spans(nodes, lo, hi, place, text, words), lo
        other = _keep_delimiters_apart(spans, parent, lo, hi, words, place)
        for a, b, _, node in spans:
            a, b = max(a, position), max(b, a, position)
            add(text[position:a])
            after_atom[0] = after_atom[0] and a == position
            if (node.raw if isinstance(node, Atom) else node.open).startswith("["):
                _no_image(out)
            if isinstance(node, Atom):
                if node.opens is not None:
                    delimiters.append((len(out), node.opens))
                out.append(_atom_written(node, next((p for p in reversed(out) if p), ""), after_atom[0]))
                after_atom[0] = True
            else:
                swap = _other_delimiter if node in other else str
                opened = len(out)
                delimiters.append((opened, True))
                out.append(swap(node.open))
                after_atom[0] = False  # a tag between two atoms: they are not side by side
                emit(node.children, a, b, node)
                delimiters.append((len(out), False))
                pairs.append((opened, len(out)))
                out.append(swap(node.close))
                after_atom[0] = False
            position = b
        add(text[position:hi])

    emit(run.children, 0, len(text))
    return "".join(out if fits is None else _fitted(out, delimiters, pairs, around, fits))


def _led(piece: str, lead: Callable[[str], str] | None, bare: str) -> str:
    """A run's first text escaped by `lead` where it would start a block, unless its first word is the one the input
    wrote bare at that place (`Run.bare`: it started no block there)."""
    if lead is None or (bare and _first_word(piece) == bare):
        return piece
    return lead(piece)


def _fitted(
    out: list[str],
    delimiters: list[tuple[int, bool]],
    pairs: list[tuple[int, int]],
    around: tuple[str, str],
    fits: Callable[..., bool],
) -> list[str]:
    """`out` with each delimiter (its index, opening or not) given the space it needs (_space_to_fit), judged
    beside the characters around the run too; then each pair kept from CommonMark's rule of three
    (_rule_of_three)."""
    padded = [around[0], *out, around[1]]
    for k, opening in delimiters:
        _space_to_fit(padded, k + 1, opening, fits)
    for opened, closed in pairs:
        _rule_of_three(padded, opened + 1, closed + 1, fits)
    return padded[1:-1]


def _delimiter_run(out: list[str], k: int) -> tuple[int, str, str]:
    """The length of the run of out[k]'s delimiter character that out[k] is written in (its neighbours' bare
    characters joined to it, an escaped one not), and the characters before and after that run."""
    text = "".join(out)
    start = sum(len(piece) for piece in out[:k])
    start += len(out[k]) - len(out[k].lstrip())
    char = text[start]
    end = start
    while end < len(text) and text[end] == char:
        end += 1
    while start > 0 and text[start - 1] == char and not text[: start - 1].endswith("\\"):
        start -= 1
    return end - start, text[start - 1 : start], text[end : end + 1]


def _last_word_moved(out: list[str], previous: int, k: int) -> bool:
    """out[k], an opening delimiter with nothing after it in its run, put before the last word of out[previous]
    (plain text): "a b*" + a hard break opens nothing, "a *b" does. Whether it was moved."""
    text = out[previous]
    word = len(text) - len(text.rstrip())
    start = len(text.rstrip()) - len(text.rstrip().split()[-1]) if text.strip() else 0
    if not text.strip() or word or not text[start:].isalnum():
        return False
    out[previous], out[k] = text[:start], out[k] + text[start:]
    return True


def _rule_of_three(out: list[str], opened: int, closed: int, fits: Callable[..., bool]) -> None:
    """A pair of `*` or `_` whose runs could each open and close is not read as a pair where their lengths add up
    to a multiple of three (CommonMark's rule of three: "__a_ b_\\_" is no emphasis): the run that could do both
    given a space on its outer side, so that it only opens (closes)."""
    if not out[opened].strip() or out[opened].strip()[0] not in "*_":
        return
    first, before_open, after_open = _delimiter_run(out, opened)
    last, before_close, after_close = _delimiter_run(out, closed)
    if (first + last) % 3 or (first % 3 == 0 and last % 3 == 0):
        return
    char = out[opened].strip()[0]
    if fits(char, before_close, after_close, True) and fits(char, before_close, after_close, False):
        out[closed] = out[closed] + " "
    if fits(char, before_open, after_open, True) and fits(char, before_open, after_open, False):
        out[opened] = " " + out[opened]


def _atom_written(node: Atom, written: str, after_atom: bool) -> str:
    """An atom as written after `written` (the last piece out): with the whitespace it had before it, or a space
    where the placement put it right after another atom it was apart from in the source, or a URL after a word."""
    before = node.before or (" " if after_atom and not node.joined else "")
    if not before and written[-1:].isalnum() and node.raw[:1].isalnum():
        before = " "
    return ("" if written[-1:].isspace() else before) + node.raw


def _no_image(out: list[str]) -> None:
    """A "!" of the text written right before a Markdown link's "[" escaped: "![" would start an image."""
    last = next((j for j in range(len(out) - 1, -1, -1) if out[j]), None)
    if last is not None and out[last].endswith("!") and not out[last].endswith("\\!"):
        out[last] = out[last][:-1] + "\\!"


def _space_to_fit(out: list[str], k: int, opening: bool, fits: Callable[[str, str, str, bool], bool]) -> None:
    """out[k], a delimiter (a pair's, or one left unpaired), moved by a space where that makes it open (close) as
    it did in the source and it would not where the placement put it: "word_x_" opens no emphasis, "word _x_"
    does; an unpaired start put before a space ("a* b") goes onto the next word ("a *b")."""
    delimiter = out[k].lstrip()

    def same_run(j: int | None) -> bool:  # a piece of the same delimiter character right beside it ("~~" "~~")
        return j is not None and bool(out[j]) and not out[j].strip(delimiter[:1])

    def beside(j: int, step: int) -> int | None:
        return next((i for i in range(j + step, len(out) if step > 0 else -1, step) if out[i]), None)

    previous, following = beside(k, -1), beside(k, 1)
    last = following is None or following == len(out) - 1  # nothing after it in the run (`out` is padded)
    emphasis = delimiter[:1] in ("*", "_", "~")  # an HTML tag left unclosed opens wherever it is
    if opening and emphasis and last and previous is not None and previous > 0 and _last_word_moved(out, previous, k):
        return  # a start left last in its run (its pair ends in the next one) goes before the run's last word
    # a run of one character written by several pairs is read as one run: its first piece (an opening) or its last
    # (a closing) decides, looking past the others
    if (opening and same_run(previous) and out[k] == delimiter) or (not opening and same_run(following)):
        return
    while opening and same_run(following):
        following = beside(following, 1)
    while not opening and same_run(previous) and out[k] == delimiter:
        previous = beside(previous, -1)
    before = (
        out[k][-len(delimiter) - 1]
        if len(out[k]) > len(delimiter)
        else out[previous][-1]
        if previous is not None
        else ""
    )
    after = "" if following is None else out[following][0]
    if fits(delimiter, before, after, opening):
        return
    if not opening and out[k] != delimiter and previous is not None:  # the space that keeps two atoms apart
        bare = out[previous][-1]
        if fits(delimiter, bare, after, False):
            out[k] = delimiter
            return
    blank = (" ", "\t", "\n")  # a space as Markdown reads one (Python's isspace() also takes "\x1f", which is not)
    if opening and after in blank and len(out[following]) > 1:  # the space after it goes before it
        out[following] = out[following][1:]
        after = out[following][0]
    elif not opening and before in blank and previous is not None and len(out[previous]) > 1 and out[k] == delimiter:
        out[previous] = out[previous][:-1]  # the space before it goes after it
        before = out[previous][-1]
    if opening and before not in blank and fits(delimiter, " ", after, True):
        out[k] = " " + delimiter
    elif not opening and after and after not in blank and fits(delimiter, before, " ", False):
        out[k] = out[k] + " "


def _sibling_spans(
    nodes: Sequence[Node], lo: int, hi: int, place: Callable[[Node], tuple[int, int]], text: str, words
) -> list[tuple[int, int, int, Node]]:
    """(start, end, order, node) of siblings placed in [lo, hi): clipped into it, kept from overlapping in order of
    place, trimmed to words; a mark left empty takes the nearest word no sibling holds. In order of place."""
    wanted = []
    for order, node in enumerate(nodes):
        # an atom never closed goes right before the tag that ended it: text after it would fall inside it
        a, b = (hi, hi) if isinstance(node, Atom) and node.last else place(node)
        a = min(max(a, lo), hi)
        wanted.append((a, min(max(b, a), hi), order, node))
    wanted.sort(key=lambda s: (s[0], s[2]))
    spans, position = [], lo
    for a, b, order, node in wanted:
        a = max(a, position)
        spans.append((a, max(b, a), order, node))
        position = max(b, a)
    for i, (a, b, order, node) in enumerate(spans):
        blank = isinstance(node, Mark) and node.blank
        if a < b and not blank:  # a clipped span starts and ends on a word, never on the space beside it
            a += len(text[a:b]) - len(text[a:b].lstrip())
            b -= len(text[a:b]) - len(text[a:b].rstrip())
            spans[i] = (a, b, order, node)
        if a == b and isinstance(node, Mark) and node.end > node.start and not blank:
            taken = [(x, y) for x, y, _, _ in spans if x < y]
            free = [w for w in words if lo <= w[0] and w[1] <= hi and not any(x < w[1] and w[0] < y for x, y in taken)]
            if free:
                x, y = min(free, key=lambda w: abs(w[0] - a))
                spans[i] = (x, x + _core_end(text[x:y]), order, node)
            else:
                _word_given_up(spans, i, words, text)
    spans.sort(key=lambda s: (s[0], s[2]))
    return spans


def _word_given_up(spans: list[tuple[int, int, int, Node]], i: int, words, text: str) -> None:
    """spans[i], a mark left empty with no free word, takes the edge word of a sibling mark beside it that holds
    two words or more (an empty pair of delimiters would not read back as one)."""
    a, _, order, node = spans[i]
    for j in sorted(range(len(spans)), key=lambda j: abs(spans[j][0] - a)):
        x, y, other_order, other = spans[j]
        held = [w for w in words if x <= w[0] and w[1] <= y]
        if j == i or not isinstance(other, Mark) or other.children or len(held) < 2:
            continue
        w = held[-1] if a >= y else held[0]  # the word at the sibling's edge nearest to this mark
        if a >= y:
            spans[j] = (x, held[-2][1], other_order, other)
        else:
            spans[j] = (held[1][0], y, other_order, other)
        spans[i] = (w[0], w[0] + _core_end(text[w[0] : w[1]]), order, node)
        return


def _same_delimiter(outer: Mark, inner: Node) -> bool:
    """Markdown's emphasis nested in emphasis of the same character ("*" in "*"): written side by side at both
    ends ("**x**") they would read back as one pair of another kind ("***x***", emphasis around strong emphasis,
    and "~~~~x~~~~" read back as themselves)."""
    return isinstance(inner, Mark) and inner.open == outer.open and outer.open in ("*", "_")


def _keep_delimiters_apart(
    spans: list[tuple[int, int, int, Node]],
    parent: Mark | None,
    lo: int,
    hi: int,
    words: Sequence[tuple[int, int]],
    place: Callable[[Node], tuple[int, int]],
) -> list[Node]:
    """Siblings' spans adjusted (in place) so that no pair shares both ends with a pair around it written with the
    same delimiter: a pair holding one word that holds such a pair takes in the next free word (or the one
    before); a pair that would cover all of such a parent's words keeps the one at its end in the source. Returns
    the pairs left sharing both ends (their parent's one word): written with the other character ("*_x_*")."""
    inside = [(max(x, lo), min(y, hi)) for x, y in words if x < hi and lo < y]  # words clipped into [lo, hi)
    other: list[Node] = []
    for i, (a, b, order, node) in enumerate(spans):
        if parent is not None and _same_delimiter(parent, node) and len(inside) <= 1:
            if parent.open[:1] in "*_" and (not inside or (a, b) == inside[0]):
                other.append(node)
        elif parent is not None and _same_delimiter(parent, node):
            if (a, b) == (inside[0][0], inside[-1][1]):  # all of the parent's text
                x, y = inside[0] if node.start == parent.start else inside[-1]
                spans[i] = (x, y, order, node)
        elif isinstance(node, Mark) and any(
            _same_delimiter(node, child) and place(child)[0] <= a and place(child)[1] >= b for child in node.children
        ):  # a pair inside it of the same delimiter placed over all of it
            held = [w for w in inside if a <= w[0] and w[1] <= b]
            taken = [(x, y) for j, (x, y, _, _) in enumerate(spans) if j != i and x < y]
            free = [w for w in inside if not any(x < w[1] and w[0] < y for x, y in taken)]
            after = [w for w in free if w[0] >= b]
            before = [w for w in free if w[1] <= a]
            if len(held) == 1 and (after or before):
                spans[i] = (a, after[0][1], order, node) if after else (before[-1][0], b, order, node)
    return other


def _other_delimiter(delimiter: str) -> str:
    """Markdown's other emphasis character, as many times ("_" for "*", "**" for "__")."""
    return delimiter.translate(str.maketrans("*_", "_*"))


def _punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def _core_end(word: str) -> int:
    end = len(word)
    while end > 0 and _punctuation(word[end - 1]):
        end -= 1
    return end or len(word)


def _core_start(word: str) -> int:
    start = 0
    while start < len(word) and _punctuation(word[start]):
        start += 1
    return start if start < len(word) else 0
