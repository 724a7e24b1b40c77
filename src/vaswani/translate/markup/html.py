"""HTML read for translation from its source by the standard library's parser (html.parser): what is text, which
tags are inline marks around it, what stays as written (translate/markup/__init__.py); html5.py checks the reading
against a browser's.

- Inline elements (`<b>`, `<i>`, `<a href=…>`, `<span …>`, ...) are marks: their tags come back exactly as
  written, attributes and all, around the translated words.
- `<code>`, `<kbd>`, `<samp>`, `<var>`, and any element with `translate="no"` or the class `notranslate`, stay as
  written where they are (atoms inside a sentence); `<pre>`, `<script>`, `<style>`, `<textarea>`, `<svg>`, `<math>`,
  `<template>` stay as written between blocks. So do comments, declarations and processing instructions.
- Such an element never closed ends here at the end tag of an element around it, or at a tag that ends it or its
  paragraph, list item or table cell; with nothing to end it, at the end of the text; `Markup.kept` says so, with
  its line. A page read so, or one a browser reads otherwise, is then read again from the tree an HTML5 parser
  builds (html5.py: a `<code>` never closed is carried on into later paragraphs, as a browser carries it).
- Every other tag is a block: it ends the text before it (`<br>` too: a sentence does not run over a line break).
- Entities are decoded for the model and written back as the input wrote them (`&nbsp;` stays `&nbsp;`); `&`,
  `<` and `>` in translated text are escaped.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from vaswani.translate.markup.model import Markup, MarkupBuilder

INLINE = frozenset(
    "a abbr acronym b bdi bdo big cite data del dfn em font i ins label mark q s small span strike strong sub sup "  # noqa: SIM905
    "time tt u".split()
)
KEPT_INLINE = frozenset({"code", "kbd", "samp", "var"})  # untranslated, inside a sentence
KEPT_BLOCK = frozenset({"pre", "script", "style", "textarea", "svg", "math", "template"})  # untranslated, a block
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())  # noqa: SIM905
INLINE_VOID = frozenset({"img", "wbr", "input"})  # kept as written inside a sentence
# HTML5's tree construction: a start tag of these ends an open <p> ("close a p element")
CLOSES_P = frozenset(
    "address article aside blockquote center details dialog dir div dl fieldset figcaption figure footer form h1 h2 "  # noqa: SIM905
    "h3 h4 h5 h6 header hgroup hr main menu nav ol p pre section summary table ul li dd dt".split()
)
IMPLIED_BY = {  # a start tag that ends the open element of its kind ("generate implied end tags")
    "li": ("li",),
    "dt": ("dt", "dd"),
    "dd": ("dt", "dd"),
    "tr": ("tr", "td", "th"),
    "td": ("td", "th"),
    "th": ("td", "th"),
    "option": ("option",),
}


def _kept(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    values = dict(attrs)
    return (
        tag in KEPT_INLINE
        or tag in KEPT_BLOCK
        or (values.get("translate") or "").lower() == "no"
        or "notranslate" in (values.get("class") or "").split()
    )


# "&#" that does not start a reference html.parser reads: it would take the rest of the text as data, tags and all
# ("&#xZZ;</b>"); the parser is given "_#" there instead, and the text keeps "&#" (a browser shows it as written)
_BROKEN_CHARREF = re.compile(r"&#(?!(?:[0-9]+|[xX][0-9a-fA-F]+)(?:[^0-9a-fA-F]|\Z))")


def _doctype(raw: str) -> bool:
    return raw[:9].lower() == "<!doctype"


class _Events(HTMLParser):
    """The parser's events in order, each with where it starts in the text: (kind, tag, attrs, start)."""

    # raw text to a browser: no tags inside (html.parser knows only script and style)
    CDATA_CONTENT_ELEMENTS = ("script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes")

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=False)
        self.events: list[tuple[str, str, list[tuple[str, str | None]], int]] = []
        self._lines = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def close(self) -> None:
        """The text's end; a comment, declaration or tag it cuts off is one piece kept as written (a browser
        reads an unclosed comment to the end of the page, not as text; html.parser would give it as text)."""
        rest = self.rawdata
        if rest[:1] == "<" and (rest[1:2].isalpha() or rest[1:2] in ("!", "?", "/")):
            self.events.append(("other", "", [], self._at()))
            self.rawdata = ""
        super().close()

    def _at(self) -> int:
        line, column = self.getpos()
        return self._lines[line - 1] + column

    def handle_starttag(self, tag, attrs):
        self.events.append(("start", tag, attrs, self._at()))

    def handle_startendtag(self, tag, attrs):
        self.events.append(("void", tag, attrs, self._at()))

    def handle_endtag(self, tag):
        self.events.append(("end", tag, [], self._at()))

    def handle_data(self, data):
        self.events.append(("data", "", [], self._at()))

    def handle_entityref(self, name):
        self.events.append(("entity", "", [], self._at()))

    def handle_charref(self, name):
        self.events.append(("entity", "", [], self._at()))

    def handle_comment(self, data):
        self.events.append(("other", "", [], self._at()))

    handle_decl = handle_pi = unknown_decl = handle_comment


def escape(char: str) -> str:
    return html.escape(char, quote=False)


class _Kept:
    """An element kept as written while it is open: its raw text so far, the elements opened inside it, and
    whether it is a block (kept between runs) or inline (an atom inside the sentence)."""

    def __init__(self, tag: str, raw: str, start: int, block: bool) -> None:
        self.tag, self.held, self.start, self.block = tag, [raw], start, block
        self.inside: list[str] = []  # elements opened inside it and not yet closed, innermost last


def _closes(tag: str, open_: list[str]) -> int | None:
    """Where in `open_` (open elements, outermost first) the element that a start tag `tag` ends stands, by the
    HTML5 parsing rules a browser follows, where it ends one through the inline elements inside it: `<p>` and the
    blocks end an open `<p>`; `<li>`, `<dt>`/`<dd>`, table rows and cells, options end the open one of their kind.
    None where it ends nothing."""
    kin = IMPLIED_BY.get(tag, ())
    if tag in CLOSES_P:
        kin = (*kin, "p")
    for i in range(len(open_) - 1, -1, -1):
        if open_[i] in kin:
            return i
        if open_[i] not in INLINE | KEPT_INLINE:  # a block between them: the start tag nests inside it
            return None
    return None


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


class _Reader:
    """The events turned into the builder's calls, with the stack of open elements a browser would hold, so that
    an element kept as written and never closed ends where a browser ends it (an ancestor's end tag, a block that
    ends its paragraph), or at the end of the text; either way the reader says so in `Markup.kept`."""

    def __init__(self, text: str) -> None:
        self.text, self.builder = text, MarkupBuilder(escape)
        self.open: list[str] = []  # elements open outside kept ones, outermost first
        self.kept: _Kept | None = None

    def event(self, kind: str, tag: str, attrs: list[tuple[str, str | None]], raw: str, start: int) -> None:
        if self.kept is not None and self._inside_kept(kind, tag, raw):
            return
        if kind == "start" and tag not in VOID:
            self._implied_end(tag)
        if kind == "start" and _kept(tag, attrs) and tag not in VOID:
            self.kept = _Kept(tag, raw, start, tag in KEPT_BLOCK or tag not in INLINE | KEPT_INLINE)
            return
        if kind == "start" and tag not in VOID:
            self.open.append(tag)
        elif kind == "end" and tag in self.open:
            del self.open[len(self.open) - 1 - self.open[::-1].index(tag) :]
        self._build(kind, tag, raw)

    def _inside_kept(self, kind: str, tag: str, raw: str) -> bool:
        """True where the event belongs to the kept element; False where it ends it first (said in `kept`)."""
        kept = self.kept
        assert kept is not None
        if kind == "end" and tag in kept.inside:
            del kept.inside[len(kept.inside) - 1 - kept.inside[::-1].index(tag) :]
        elif kind == "end" and tag == kept.tag:
            kept.held.append(raw)
            self._end_kept()
            return True
        elif kind == "end" and tag in self.open:  # last before it where it closes the pair it is in
            self._end_kept(f"kept as written up to </{tag}>", last=self.builder.closes(tag))
            return False
        elif kind == "start" and tag not in VOID:
            ended = _closes(tag, [*self.open, kept.tag, *kept.inside])
            if ended is not None and ended <= len(self.open):  # it ends the kept element, or one around it
                self._end_kept(f"kept as written up to <{tag}>")
                return False
            if ended is not None:  # it ends an element inside the kept one
                del kept.inside[ended - len(self.open) - 1 :]
            kept.inside.append(tag)
        kept.held.append(raw)
        return True

    def _end_kept(self, recovered: str | None = None, last: bool = True) -> None:
        """The kept element written as one piece; `recovered`: where it ended though never closed ("up to </p>",
        said in `kept`), `last`: its atom stays right before the tag that ended it."""
        kept, self.kept = self.kept, None
        assert kept is not None
        if recovered is not None:
            line = _line(self.text, kept.start)
            said = f"line {line}: <{kept.tag}> not closed; {recovered}: close it where it ends"
            self.builder.markup.kept.append(said)
        held = "".join(kept.held)
        self.builder.raw(held) if kept.block else self.builder.atom(held, last=last and recovered is not None)

    def _implied_end(self, tag: str) -> None:
        """A start tag that ends an open paragraph, list item, row, ... pops it (and what is open inside it)."""
        ended = _closes(tag, self.open)
        if ended is not None:
            del self.open[ended:]

    def _build(self, kind: str, tag: str, raw: str) -> None:
        builder = self.builder
        if kind == "data":  # "&amp" without its ";" is still "&" to a browser (HTML5's legacy references)
            builder.text(html.unescape(raw), raw) if "&" in raw else builder.text(raw)
        elif kind == "entity":
            builder.text(html.unescape(raw), raw)
        elif kind == "start" and tag in INLINE:
            builder.open(raw, tag)
        elif kind == "end" and tag in INLINE:
            builder.close(raw, tag)
        elif (kind in ("start", "void") and tag in INLINE_VOID) or (kind == "other" and not _doctype(raw)):
            builder.atom(raw)
        else:
            builder.raw(raw)

    def finish(self) -> Markup:
        if self.kept is not None:  # never closed, nothing ended it: the rest of the text is its
            self._end_kept("everything after it kept as written (to translate the rest)")
        return self.builder.finish()


def parse_html(text: str) -> Markup:
    """`text` (an HTML document or fragment) as raw pieces and runs (translate/markup/__init__.py)."""
    events = _Events(text)
    events.feed(_BROKEN_CHARREF.sub("_#", text))  # the same length: the events' places hold in `text`
    events.close()
    starts = [e[3] for e in events.events] + [len(text)]
    reader = _Reader(text)
    for i, (kind, tag, attrs, start) in enumerate(events.events):
        reader.event(kind, tag, attrs, text[start : starts[i + 1]], start)
    return reader.finish()
