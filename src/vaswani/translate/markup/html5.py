"""A page as a browser reads it: html5lib builds its tree by the WHATWG HTML5 parsing rules that browsers follow.
html.py reads a page for translation from its source, so that a well-formed page's markup comes back exactly as it
was written; where the markup is broken a browser may read it otherwise (an element closed by a tag further on, a
formatting element carried on into later paragraphs, text in a table moved out before it, a stray cell dropped).
So every page is read both ways, and where the text to translate (block by block) or the text kept as written
differs, or html.py had to recover (an element it kept never closed, an inline tag without its pair, which a
translation would move with its words), the page is rewritten as the browser's tree, well formed, and read from
it: what is translated, and what is kept, is what a browser shows. `Markup.kept` says so, with the lines of the
broken markup.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

from vaswani.translate.markup.html import INLINE, INLINE_VOID, KEPT_BLOCK, KEPT_INLINE, VOID, parse_html
from vaswani.translate.markup.model import Markup
from vaswani.translate.markup.nodes import Atom, Run

# a whole document (its <html>, <head> or <body> given, or a doctype) is read as one; anything else as a fragment of
# a <body>, as a page's content is
_WHOLE = re.compile(r"\A(?:\s|<!--.*?-->)*<(?:!doctype|html|head|body)\b", re.IGNORECASE | re.DOTALL)
REWRITTEN = "read as a browser reads it (HTML5) and written back well formed"  # ends the note of a page rewritten
_SHOWN_ERRORS = 3  # a page's first few parse errors are named in `kept`; the rest are counted
_TEXT_ONLY = frozenset({"textarea", "title", "script", "style", "xmp", "iframe", "noembed", "noframes"})


@dataclass(frozen=True)
class Reading:
    """What a reader takes from a page: the text to translate, one entry per block (whitespace apart), and the
    text kept as written (inside `<code>`, `<pre>`, `translate="no"`, ...), whitespace apart."""

    runs: tuple[str, ...]
    kept: str


def _name(element: Any) -> str | None:
    """An element's tag without its namespace (<svg> and <math> have one); None for a comment or a doctype."""
    if not isinstance(element.tag, str) or element.tag.startswith("<!"):
        return None
    return element.tag.rsplit("}", 1)[-1]


def _keeps(element: Any, tag: str) -> bool:
    """Whether the element is kept as written, as html.py decides it from a start tag."""
    return (
        tag in KEPT_INLINE
        or tag in KEPT_BLOCK
        or (element.get("translate") or "").lower() == "no"
        or "notranslate" in (element.get("class") or "").split()
    )


class _Walk:
    """The tree's text gathered into blocks to translate and the text kept as written."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = [[]]
        self.kept: list[str] = []

    def element(self, element: Any, kept: bool) -> None:
        tag = _name(element)
        if tag is None:  # a comment: shown nowhere
            return
        keeps = kept or _keeps(element, tag)
        block = tag not in INLINE | KEPT_INLINE | INLINE_VOID
        if block and not kept:
            self._break()
        self.text(element.text, keeps)
        for child in element:
            self.element(child, keeps)
            self.text(child.tail, keeps)
        if block and not kept:
            self._break()

    def text(self, text: str | None, kept: bool) -> None:
        if text:
            (self.kept if kept else self.runs[-1]).append(text)

    def _break(self) -> None:
        if self.runs[-1]:
            self.runs.append([])

    def reading(self) -> Reading:
        runs = ("".join("".join(run).split()) for run in self.runs)
        return Reading(tuple(run for run in runs if run), "".join("".join(self.kept).split()))


def tree(page: str) -> tuple[Any, list[str]]:
    """The page's tree as a browser builds it, and its parse errors as html5lib words them, each with its line. A
    fragment is parsed as a document is (html5lib's fragment mode drops what a table moves out before it), and its
    root then holds what the document's head and body hold, in order."""
    import html5lib

    parser = html5lib.HTMLParser(tree=html5lib.getTreeBuilder("etree", fullTree=True), namespaceHTMLElements=False)
    whole = _WHOLE.match(page) is not None  # a fragment is read as part of a standards-mode page (a <table> ends a <p>)
    root = parser.parse(page if whole else "<!DOCTYPE html>" + page)
    errors = []
    for (line, _column), code, values in parser.errors:
        if code.startswith("expected-doctype") or code == "unexpected-doctype":  # a page may well have none
            continue
        errors.append(f"line {line}: {_worded(code, values or {})}")
    return root if whole else body_content(root), errors


def _worded(code: str, values: dict) -> str:
    """A parse error as html5lib words it, but the adoption agency's (named by the algorithm's steps) in plain words."""
    from html5lib.constants import E

    if code.startswith("adoption-agency"):
        return f"</{values.get('name', '')}> misnested: it closes elements opened inside it"
    try:
        return (E.get(code, code) % values).rstrip(".")
    except (KeyError, TypeError, ValueError):  # a message whose fields html5lib left out
        return code


def body_content(root: Any) -> Any:
    """The content of a document (the root of html5lib's tree) parsed from a fragment: its head's elements, then
    its body's text and elements."""
    from xml.etree.ElementTree import Element

    html = root.find("html")
    fragment = Element("DOCUMENT_FRAGMENT")
    fragment.extend(html.find("head"))
    body = html.find("body")
    if len(fragment):
        fragment[-1].tail = (fragment[-1].tail or "") + (body.text or "")
    else:
        fragment.text = body.text
    fragment.extend(body)
    return fragment


def browser_reading(root: Any) -> Reading:
    """What a browser shows of the tree: its blocks of text to translate, and its text kept as written."""
    walk = _Walk()
    walk.text(root.text, False)
    for child in root:
        walk.element(child, False)
        walk.text(child.tail, False)
    return walk.reading()


def _kept_text(raw: str) -> str:
    """The text of an element kept as written (its raw source), where `raw` starts one; else nothing."""
    if not raw.startswith("<") or not raw[1:2].isalpha():
        return ""
    root, _ = tree(raw)
    first = next(iter(root), None)
    tag = _name(first) if first is not None else None
    if tag is None or not _keeps(first, tag):
        return ""
    walk = _Walk()
    walk.element(first, True)
    return "".join(walk.kept)


def our_reading(parts: list[Any]) -> Reading:
    """What html.py's reading translates (its runs) and keeps as written (its kept elements, inside runs or
    between them), as a `Reading`."""
    runs, kept = [], []

    def visit(nodes: Any, shown: list[tuple[int, str]]) -> None:
        for node in nodes:
            if isinstance(node, Atom) and node.raw.startswith("<"):
                kept.append(_kept_text(node.raw))
            elif isinstance(node, Atom):  # a URL: shown as text, kept as written
                shown.append((node.at, html.unescape(node.raw)))
            else:
                visit(node.children, shown)

    for part in parts:
        if isinstance(part, Run):
            shown: list[tuple[int, str]] = []
            visit(part.children, shown)
            text = part.text
            for at, raw in sorted(shown, reverse=True):
                text = text[:at] + raw + text[at:]
            runs.append("".join(text.split()))
        else:
            kept.append(_kept_text(part))
    return Reading(tuple(run for run in runs if run), "".join("".join(kept).split()))


_TAG = re.compile(r"</?([A-Za-z][^\s/>]*)[^>]*>")


def lone_inline_tag(parts: list[Any]) -> bool:
    """Whether a run holds an inline element's start or end tag without its pair: a translation moves it with the
    words, where a browser closes or drops it by rules of its own (`<b><b>x</b>` is one <b> inside another)."""

    def lone(nodes: Any) -> bool:
        for node in nodes:
            if isinstance(node, Atom):
                tag = _TAG.fullmatch(node.raw)
                if tag is not None and tag.group(1).lower() in INLINE:
                    return True
            elif lone(node.children):
                return True
        return False

    return any(isinstance(part, Run) and lone(part.children) for part in parts)


def written(root: Any) -> str:
    """The tree written back as HTML, well formed: every element closed, attributes quoted, text escaped."""
    import html5lib
    from html5lib.serializer import HTMLSerializer

    serializer = HTMLSerializer(
        omit_optional_tags=False, quote_attr_values="always", minimize_boolean_attributes=False, resolve_entities=False
    )
    return serializer.render(_writable(html5lib.getTreeWalker("etree")(root)))


def _writable(tokens: Any) -> Any:
    """The tree walker's tokens as markup can write them: no end tag for a void element (html5lib's serializer would
    close a <wbr>), and no tags inside an element whose content is text (html5lib may put a formatting element it
    reopens inside a <textarea>: written, it would read as text)."""
    inside: list[str] = []
    for token in tokens:
        kind, name = token["type"], token.get("name")
        if kind == "EndTag" and name in VOID:
            continue
        if inside and kind in ("StartTag", "EndTag", "EmptyTag") and not (kind == "EndTag" and name == inside[-1]):
            continue
        if kind == "StartTag" and name in _TEXT_ONLY:
            inside.append(name)
        elif kind == "EndTag" and inside and name == inside[-1]:
            inside.pop()
        yield token


def repair_notes(errors: list[str], own: list[str]) -> list[str]:
    """What `Markup.kept` says of a page rewritten as a browser reads it: the broken markup (our reader's notes of
    elements not closed, then html5lib's parse errors), each with its line."""
    seen = [note.split(";")[0] for note in own]
    notes = list(dict.fromkeys([*seen, *errors]))
    shown = notes[:_SHOWN_ERRORS] + ([f"and {len(notes) - _SHOWN_ERRORS} more"] if len(notes) > _SHOWN_ERRORS else [])
    return [f"{'; '.join(shown) or 'markup a browser reads otherwise'}: {REWRITTEN}"]


def parse_as_browser(text: str) -> Markup:
    """`text` (an HTML page or fragment) read by html.py from its source, or, where a browser reads it otherwise,
    from the browser's tree written back well formed (`Markup.kept` then names the broken markup)."""
    markup = parse_html(text)
    if not any(c in text for c in "<&\x00"):  # plain text: nothing a browser reads otherwise (it drops a NUL)
        return markup
    root, errors = tree(text)
    if not markup.kept and not lone_inline_tag(markup.parts) and our_reading(markup.parts) == browser_reading(root):
        return markup  # html.py read it from its source as a browser reads it, nothing to recover
    repaired = parse_html(written(root))
    repaired.kept[:] = repair_notes(errors, markup.kept)
    return repaired
