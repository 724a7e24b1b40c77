"""Broken HTML as a browser reads it: the text an HTML5 parser (html5lib, the WHATWG rules browsers follow) puts
inside the elements kept as written, against the text our parser keeps (translate/markup/html.py); and pages with
the broken markup met on real pages."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from vaswani.translate.markup import Atom, Run, parse
from vaswani.translate.markup.html import KEPT_BLOCK, KEPT_INLINE, _Events

REAL_PAGES = [  # broken markup as it is met on real pages (documentation, CMS output, pasted snippets)
    "<p>Install it with <code>pip install vaswani</p><p>Then run the tests.</p>",
    "<ul><li>Use <kbd>Ctrl+C<li>Then paste the text.</ul>",
    "<div class='doc'><pre>make install</div><p>The build takes a minute.</p>",
    "<p>Our brand <span translate=no>Acme Cloud</p><p>It runs everywhere.</p>",
    "<table><tr><td><code>x = 1<td>Sets the value.</tr></table>",
    "<p>See <b>this <i>note</b> about it</i>. The end.</p>",
    "<h1>Title<h2>Subtitle</h2><p>Body text here.",
    "<p>Open <a href='x'>the link<p>and read on.</p>",
    "<dl><dt>Term<dd>Its <var>meaning<dt>Next term<dd>More.</dl>",
    "<p class=notranslate>Keep this<p>Translate this.",
    "<section><p>Text <samp>output</section><p>After the section.</p>",
    "<pre>never closed\n<p>The rest of the page.</p>",
]


def _text_of(raw: str) -> str:
    """The text a page fragment shows (its data, comments apart)."""
    parts: list[str] = []
    reader = HTMLParser(convert_charrefs=True)
    reader.CDATA_CONTENT_ELEMENTS = _Events.CDATA_CONTENT_ELEMENTS  # textarea's tags are its text, as a browser reads
    reader.handle_data = parts.append  # type: ignore[method-assign]
    reader.feed(re.sub(r"<!--(?:.*?-->|.*\Z)", "", raw, flags=re.S))  # an unclosed comment runs to the end
    reader.close()
    return "".join(parts)


def ours_kept(page: str) -> str:
    """The text our parser keeps as written because an element says so (kept elements, not comments or tags)."""
    markup, kept = parse(page, "html"), []

    def starts_kept(raw: str) -> bool:
        name = raw[1:].split(">")[0].split()[0].lower() if raw.startswith("<") and len(raw) > 1 else ""
        return (
            name in KEPT_INLINE | KEPT_BLOCK or "translate" in raw.split(">")[0] or "notranslate" in raw.split(">")[0]
        )

    def visit(nodes) -> None:
        for node in nodes:
            if isinstance(node, Atom) and starts_kept(node.raw):
                kept.append(_text_of(node.raw))
            elif not isinstance(node, Atom):
                visit(node.children)

    for part in markup.parts:
        if isinstance(part, Run):
            visit(part.children)
        elif starts_kept(part):
            kept.append(_text_of(part))
    return " ".join("".join(kept).split())


def browser_kept(page: str) -> str:
    """The text an HTML5 parser puts inside elements kept as written (and their descendants)."""
    import html5lib

    out: list[str] = []

    def walk(element, kept: bool) -> None:
        if not isinstance(element.tag, str):  # a comment
            return
        classes = (element.get("class") or "").split()
        kept = kept or element.tag in KEPT_INLINE | KEPT_BLOCK or (element.get("translate") or "").lower() == "no"
        kept = kept or "notranslate" in classes
        if kept and element.text:
            out.append(element.text)
        for child in element:
            walk(child, kept)
            if kept and child.tail:
                out.append(child.tail)

    walk(html5lib.parse(page, treebuilder="etree", namespaceHTMLElements=False), False)
    return " ".join("".join(out).split())
