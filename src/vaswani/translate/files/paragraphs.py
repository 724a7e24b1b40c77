"""A paragraph of an office document as an HTML fragment for the aligner, and back (files/base.py).

OOXML (Word's `w:p`, DrawingML's `a:p` in slides) keeps a paragraph's text in runs, each with its own formatting
(`rPr`): the formatting most of the text has is the paragraph's base, the others become `<span>` marks, a hyperlink an
`<a>` mark, a tab, a picture, a field or a bookmark an atom, a line break a `<br>`. The translated fragment is written
back as runs: each piece of text with the formatting of the mark around it, every atom as the element it was.

ODF (`text:p`, `text:h`) keeps text inline: `text:span` and `text:a` become marks (nested as they were), `text:s`
spaces, `text:line-break` a `<br>`, any other element (a note, a frame, a field, a bookmark) an atom.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

from lxml import etree

from vaswani.translate.files.base import Fragment, placed_items

XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


@dataclass(frozen=True)
class Runs:
    """The element names of a run-based paragraph (OOXML): Word's or DrawingML's."""

    ns: str
    properties: str  # the paragraph's own properties, kept first
    run_properties: str
    link: str | None  # an element around runs (Word's hyperlink); DrawingML's hyperlinks are run properties
    text_children: frozenset[str]  # what a run may hold and still be text
    breaks: frozenset[str]  # a line break: inside a run (Word) or beside runs (DrawingML)
    kept_last: frozenset[str]  # a paragraph's end properties (DrawingML's endParaRPr)
    volatile: tuple[str, ...] = ()  # run property attributes that differ between runs of the same look

    def tag(self, name: str) -> str:
        return f"{{{self.ns}}}{name}"


WORD = Runs(
    "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    "pPr",
    "rPr",
    "hyperlink",
    frozenset({"t", "tab", "br", "cr", "noBreakHyphen", "softHyphen", "lastRenderedPageBreak"}),
    frozenset({"br", "cr"}),
    frozenset(),
)
DRAWING = Runs(
    "http://schemas.openxmlformats.org/drawingml/2006/main",
    "pPr",
    "rPr",
    None,
    frozenset({"t"}),
    frozenset({"br"}),
    frozenset({"endParaRPr"}),
    ("lang", "altLang", "dirty", "err", "smtClean", "smtId"),
)


class RunParagraph:
    """An OOXML paragraph read as a fragment; `write(translated)` puts the translation's runs in its place."""

    def __init__(self, p: etree._Element, names: Runs) -> None:
        self.p, self.n = p, names
        self.fragment = Fragment()
        self.looks: dict[str, etree._Element | None] = {}  # a formatting's key: its run properties
        self.base = self._base_look()
        self._open: str | None = None  # the look of the span open in the fragment
        field: list[etree._Element] = []
        for child in p:
            name = etree.QName(child).localname if isinstance(child.tag, str) else ""
            if name == names.properties or name in names.kept_last:
                continue
            if field or self._field_char(child) == "begin":
                field.append(child)
                if self._field_ends(field):
                    self._atom(list(field))
                    field.clear()
            elif name == "r" and self._is_text(child):
                self._run(child)
            elif names.link is not None and name == names.link:
                self._close()
                self.fragment.open(("link", child), "a")
                for run in child:
                    self._run(run) if self._is_text(run) else self._atom([run])
                self._close()
                self.fragment.close("a")
            elif name in names.breaks:
                self._close()
                self.fragment.line_break(("atom", [child]))
            else:
                self._atom([child])
        if field:  # a field never ended: kept as it was
            self._atom(field)
        self._close()

    def _key(self, run: etree._Element) -> str:
        props = run.find(self.n.tag(self.n.run_properties))
        if props is None:
            return ""
        props = copy.deepcopy(props)
        for attribute in self.n.volatile:
            props.attrib.pop(attribute, None)
        key = etree.tostring(props, encoding="unicode")
        self.looks.setdefault(key, run.find(self.n.tag(self.n.run_properties)))
        return key

    def _base_look(self) -> str:
        """The formatting most of the paragraph's text has: written without a mark."""
        counts: dict[str, int] = {}
        links = [c for c in self.p if self.n.link is not None and c.tag == self.n.tag(self.n.link)]
        for run in [*self.p.findall(self.n.tag("r")), *(r for link in links for r in link.findall(self.n.tag("r")))]:
            text = "".join(t.text or "" for t in run.iter(self.n.tag("t")))
            counts[self._key(run)] = counts.get(self._key(run), 0) + len(text)
        return max(counts, key=counts.__getitem__) if counts else ""

    def _is_text(self, run: etree._Element) -> bool:
        if not isinstance(run.tag, str) or etree.QName(run).localname != "r":
            return False
        inside = [etree.QName(c).localname for c in run if isinstance(c.tag, str)]
        return all(name in self.n.text_children or name == self.n.run_properties for name in inside)

    def _field_char(self, element: etree._Element) -> str | None:
        char = element.find(self.n.tag("fldChar"))
        return None if char is None else char.get(self.n.tag("fldCharType"))

    def _field_ends(self, field: list[etree._Element]) -> bool:
        depth = 0
        for element in field:
            kind = self._field_char(element)
            depth += {"begin": 1, "end": -1}.get(kind or "", 0)
        return depth == 0

    def _run(self, run: etree._Element) -> None:
        key = self._key(run)
        for child in list(run):
            name = etree.QName(child).localname if isinstance(child.tag, str) else ""
            if name == "t":
                self._text(key, child.text or "")
            elif name == "noBreakHyphen":
                self._text(key, "\u2011")
            elif name in ("tab",) or (name in self.n.breaks):
                self._close()
                lone = self._new_run(key)
                lone.append(child)
                item = ("atom", [lone])
                self.fragment.line_break(item) if name in self.n.breaks else self.fragment.atom(item)
            # softHyphen, lastRenderedPageBreak: a hint for the source's words, dropped

    def _text(self, key: str, text: str) -> None:
        if key != self._open:
            self._close()
            if key != self.base:
                self.fragment.open(("look", key))
                self._open = key
        self.fragment.text(text)

    def _close(self) -> None:
        if self._open is not None:
            self.fragment.close()
            self._open = None

    def _atom(self, elements: list[etree._Element]) -> None:
        self._close()
        self.fragment.atom(("atom", elements))

    def _new_run(self, key: str) -> etree._Element:
        run = etree.Element(self.n.tag("r"))
        props = self.looks.get(key)
        if props is not None:
            run.append(copy.deepcopy(props))
        return run

    def write(self, translated: str) -> None:
        items = self.fragment.items
        atoms = [k for k, item in items.items() if item[0] == "atom"]
        kept = [c for c in self.p if isinstance(c.tag, str) and etree.QName(c).localname == self.n.properties]
        last = [c for c in self.p if isinstance(c.tag, str) and etree.QName(c).localname in self.n.kept_last]
        for child in list(self.p):
            self.p.remove(child)
        self.p.extend(kept)
        link_of, container = None, self.p
        for marks, what in placed_items(translated, atoms):
            link = next((k for k in marks if items[k][0] == "link"), None)
            if link != link_of:
                link_of, container = link, self.p
                if link is not None:
                    original = items[link][1]
                    container = etree.SubElement(self.p, original.tag, dict(original.attrib))
            if isinstance(what, int):
                container.extend(items[what][1])
                continue
            look = next((items[k][1] for k in reversed(marks) if items[k][0] == "look"), self.base)
            run = self._new_run(look)
            text = etree.SubElement(run, self.n.tag("t"))
            text.text = what
            if what != what.strip() and self.n is WORD:
                text.set(XML_SPACE, "preserve")
            container.append(run)
        self.p.extend(last)


class InlineParagraph:
    """An ODF paragraph or heading read as a fragment; `write(translated)` puts the translation in its place."""

    def __init__(self, p: etree._Element, text_ns: str) -> None:
        self.p, self.ns = p, text_ns
        self.fragment = Fragment()
        self._emit(p)

    def _emit(self, element: etree._Element) -> None:
        if element.text:
            self.fragment.text(element.text)
        for child in element:
            name = etree.QName(child).localname if isinstance(child.tag, str) else ""
            inline = isinstance(child.tag, str) and etree.QName(child).namespace == self.ns
            if inline and name in ("span", "a"):
                self.fragment.open(("mark", child), "a" if name == "a" else "span")
                self._emit(child)
                self.fragment.close("a" if name == "a" else "span")
            elif inline and name == "s":
                self.fragment.text(" " * int(child.get(f"{{{self.ns}}}c", "1") or 1))
            elif inline and name == "line-break":
                self.fragment.line_break(("atom", child))
            elif inline and name == "soft-page-break":
                pass  # a hint of where the source's page ended
            else:
                self.fragment.atom(("atom", child))
            if child.tail:
                self.fragment.text(child.tail)

    def write(self, translated: str) -> None:
        items = self.fragment.items
        atoms = [k for k, item in items.items() if item[0] == "atom"]
        for child in list(self.p):
            self.p.remove(child)
        self.p.text = None
        opened: list[tuple[int, etree._Element]] = []  # the marks open at this point, outermost first
        for marks, what in placed_items(translated, atoms):
            common = 0
            while common < len(opened) and common < len(marks) and opened[common][0] == marks[common]:
                common += 1
            del opened[common:]
            for k in marks[common:]:
                parent = opened[-1][1] if opened else self.p
                original = items[k][1]
                opened.append((k, etree.SubElement(parent, original.tag, dict(original.attrib))))
            parent = opened[-1][1] if opened else self.p
            if isinstance(what, int):
                atom = items[what][1]
                atom.tail = None
                parent.append(atom)
            else:
                self._write_text(parent, what, at_start=not len(self.p) and not self.p.text)

    def _write_text(self, parent: etree._Element, text: str, at_start: bool) -> None:
        """`text` at the end of `parent`, its runs of spaces as ODF writes them (text:s: a reader collapses them)."""
        position = 0
        for spaces in re.finditer(r" {2,}|^ +" if at_start else r" {2,}", text):
            _append_text(parent, text[position : spaces.start()])
            count = len(spaces.group())
            if not (at_start and spaces.start() == 0):  # the first space as text, the others as one text:s
                _append_text(parent, " ")
                count -= 1
            if count:
                space = etree.SubElement(parent, f"{{{self.ns}}}s")
                if count > 1:
                    space.set(f"{{{self.ns}}}c", str(count))
            position = spaces.end()
        _append_text(parent, text[position:])


def _append_text(parent: etree._Element, text: str) -> None:
    if not text:
        return
    if len(parent):
        parent[-1].tail = (parent[-1].tail or "") + text
    else:
        parent.text = (parent.text or "") + text
