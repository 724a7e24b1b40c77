"""HTML read for translation by the standard library's parser (html.parser): what is text, which tags are inline
marks around it, what stays as written (translate/markup/__init__.py).

- Inline elements (`<b>`, `<i>`, `<a href=…>`, `<span …>`, ...) are marks: their tags come back exactly as
  written, attributes and all, around the translated words.
- `<code>`, `<kbd>`, `<samp>`, `<var>`, and any element with `translate="no"` or the class `notranslate`, stay as
  written where they are (atoms inside a sentence); `<pre>`, `<script>`, `<style>`, `<textarea>`, `<svg>`, `<math>`,
  `<template>` stay as written between blocks. So do comments, declarations and processing instructions.
- Every other tag is a block: it ends the text before it (`<br>` too: a sentence does not run over a line break).
- Entities are decoded for the model and written back as the input wrote them (`&nbsp;` stays `&nbsp;`); `&`,
  `<` and `>` in translated text are escaped.
"""

from __future__ import annotations

import html
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


def _kept(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    values = dict(attrs)
    return (
        tag in KEPT_INLINE
        or tag in KEPT_BLOCK
        or (values.get("translate") or "").lower() == "no"
        or "notranslate" in (values.get("class") or "").split()
    )


def _doctype(raw: str) -> bool:
    return raw[:9].lower() == "<!doctype"


class _Events(HTMLParser):
    """The parser's events in order, each with where it starts in the text: (kind, tag, attrs, start)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=False)
        self.events: list[tuple[str, str, list[tuple[str, str | None]], int]] = []
        self._lines = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

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


def parse_html(text: str) -> Markup:
    """`text` (an HTML document or fragment) as raw pieces and runs (translate/markup/__init__.py)."""
    events = _Events(text)
    events.feed(text)
    events.close()
    starts = [e[3] for e in events.events] + [len(text)]
    builder = MarkupBuilder(escape)
    kept: list[str] = []  # inside an element kept as written: its tag names, innermost last
    kept_block = False
    held: list[str] = []  # the kept element's raw text so far
    for i, (kind, tag, attrs, start) in enumerate(events.events):
        raw = text[start : starts[i + 1]]
        if kept:
            held.append(raw)
            if kind == "start" and tag == kept[0] and tag not in VOID:
                kept.append(tag)
            elif kind == "end" and tag == kept[0]:
                kept.pop()
            if not kept:
                builder.raw("".join(held)) if kept_block else builder.atom("".join(held))
            continue
        if kind == "start" and _kept(tag, attrs) and tag not in VOID:
            kept, held = [tag], [raw]
            kept_block = tag in KEPT_BLOCK or tag not in INLINE | KEPT_INLINE
        elif kind == "data":
            builder.text(raw)
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
    if kept:  # an element kept as written never closed: the rest of the text is its
        builder.raw("".join(held)) if kept_block else builder.atom("".join(held))
    return builder.finish()
