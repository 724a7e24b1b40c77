"""Broken HTML as a browser reads it: the text an HTML5 parser (html5lib, the WHATWG rules browsers follow) puts
inside the elements kept as written, against the text our parser keeps (translate/markup/html.py); and pages with
the broken markup met on real pages."""

from __future__ import annotations

import re
from xml.etree import ElementTree

from vaswani.translate.markup import Atom, Run, parse
from vaswani.translate.markup.html import INLINE, INLINE_VOID, KEPT_BLOCK, KEPT_INLINE
from vaswani.translate.markup.html5 import body_content

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


def _document(page: str):
    """`page` parsed by html5lib as a browser parses it: a fragment as part of a standards-mode page (<!DOCTYPE html>:
    a <table> ends an open <p>), a whole document as it says."""
    import html5lib

    whole = re.match(r"(?:\s|<!--.*?-->)*<(?:!doctype|html|head|body)\b", page, re.I | re.S)
    return html5lib.parse(page if whole else "<!DOCTYPE html>" + page, treebuilder="etree", namespaceHTMLElements=False)


def _text_of(raw: str) -> str:
    """The text a piece of a page shows read alone by an HTML5 parser (comments apart)."""

    def text(element) -> str:
        if not isinstance(element.tag, str):  # a comment
            return ""
        return (element.text or "") + "".join(text(child) + (child.tail or "") for child in element)

    return text(_document(raw))  # fragment mode drops what a table moves out


def ours_kept(page: str) -> str:
    """The text our parser keeps as written because an element says so (kept elements, not comments or tags)."""
    markup, kept = parse(page, "html"), []

    def starts_kept(raw: str) -> bool:
        if not (raw.startswith("<") and raw[1:2].isalpha()):  # text, a comment, an end tag
            return False
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
    return " ".join("".join(kept_elements(page)).split())


def kept_elements(page: str) -> list[str]:
    """The text of each element an HTML5 parser reads as kept (the outermost ones), in document order."""

    out: list[list[str]] = []

    def walk(element, kept: bool) -> None:
        if not isinstance(element.tag, str):  # a comment
            return
        classes = (element.get("class") or "").split()
        keeps = kept or element.tag in KEPT_INLINE | KEPT_BLOCK or (element.get("translate") or "").lower() == "no"
        keeps = keeps or "notranslate" in classes
        if keeps and not kept:
            out.append([])
        if keeps and element.text:
            out[-1].append(element.text)
        for child in element:
            walk(child, keeps)
            if keeps and child.tail:
                out[-1].append(child.tail)

    walk(_document(page), False)
    return ["".join(texts) for texts in out]


def shape(page: str, with_text: bool = False) -> tuple:
    """The tree an HTML5 parser builds of `page`, comments apart: with `with_text`, each element's name, attributes,
    children and text in order (whitespace apart); without it, every element's name and attributes with the block
    it stands in (blocks numbered in document order): a translation may put inline elements in another order or
    nesting inside a block (their words moved), never in another block."""

    def sign(element) -> tuple:
        children = [sign(child) for child in element if isinstance(child.tag, str)]
        texts = [element.text or ""]
        for child in element:  # a comment's tail continues the text before it
            if isinstance(child.tag, str):
                texts.append(child.tail or "")
            else:
                texts[-1] += child.tail or ""
        texts = ["".join(text.split()) for text in texts]
        return (element.tag, tuple(sorted(element.attrib.items())), tuple(children), tuple(texts))

    placed: list[tuple] = []
    blocks = [0]

    def place(element, block: int) -> None:
        for child in element:
            if not isinstance(child.tag, str):
                continue
            placed.append((block, child.tag, tuple(sorted(child.attrib.items()))))
            if child.tag in INLINE | KEPT_INLINE | INLINE_VOID:
                place(child, block)
            else:
                blocks[0] += 1
                place(child, blocks[0])

    document = ElementTree.Element("DOCUMENT_ROOT")
    document.append(_document(page))
    content = body_content(document)  # a fragment's elements, wherever the parser put them (head or body)
    if with_text:
        return sign(content)
    place(content, 0)
    return tuple(sorted(placed))
