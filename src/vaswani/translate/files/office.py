"""Office documents: Word (DOCX), PowerPoint (PPTX), OpenDocument text (ODT) and presentations (ODP).

Every paragraph of every part that holds visible text is translated (files/paragraphs.py): DOCX's body with its
lists and (nested) tables, headers, footers, footnotes, endnotes and text boxes; PPTX's slides (titles, bodies, shapes,
tables, SmartArt) and speaker notes; ODT's and ODP's content with their styles' headers and footers, notes, frames and
speaker notes; and the document's title in its properties. A paragraph's properties, numbering, pictures, fields,
sections, and every part with no text, are written back as they were.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from lxml import etree

from vaswani.translate.files.base import FileError, Parsed, segments, sniff
from vaswani.translate.files.package import Package, to_bytes
from vaswani.translate.files.paragraphs import DRAWING, WORD, InlineParagraph, RunParagraph

DC = "http://purl.org/dc/elements/1.1/"
ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_OOXML_KINDS = {  # a part only this kind of package has: what a misnamed file is said to hold
    "word/document.xml": "DOCX",
    "ppt/presentation.xml": "PPTX",
    "xl/workbook.xml": "XLSX",
}
_ODF_KINDS = {
    "application/vnd.oasis.opendocument.text": "ODT",
    "application/vnd.oasis.opendocument.presentation": "ODP",
    "application/vnd.oasis.opendocument.spreadsheet": "ODS",
    "application/epub+zip": "EPUB",
}


def _kind_of(package: Package) -> str | None:
    """What a package holds, by its parts (DOCX, PPTX, ODT, ...; None: none of them)."""
    for part, kind in _OOXML_KINDS.items():
        if part in package.parts:
            return kind
    mimetype = package.parts.get("mimetype", b"").decode("ascii", "replace").strip()
    return _ODF_KINDS.get(mimetype)


class _Office:
    """What the four formats share: the package read within bounds, its kind checked, its paragraphs collected
    from the parts that hold text, and the package written back with those parts replaced."""

    name = ""
    extensions: tuple[str, ...] = ()
    media_type = ""
    label = ""  # "a DOCX document"
    first: str | None = None  # the entry a package of the format starts with, stored (ODF's mimetype)

    def parts(self, package: Package) -> list[str]:
        raise NotImplementedError

    def paragraphs(self, root: etree._Element) -> list[RunParagraph | InlineParagraph]:
        raise NotImplementedError

    def read(self, data: bytes) -> Parsed:
        if sniff(data) == "pdf":
            raise FileError(_PDF)
        package = Package.read(data, self.label)
        kind = _kind_of(package)
        if kind is None:
            raise FileError(f"is not {self.label}: a ZIP package without the parts of one")
        if kind != self.name.upper():
            raise FileError(
                f"holds {kind} content, not {self.label}: name it .{kind.lower()} or give --format {kind.lower()}"
            )
        self.check(package)
        roots = {name: package.xml(name) for name in self.parts(package)}
        units: list[tuple[Callable[[str], None], str]] = []
        touched = set()  # the parts with text in them: the others are written back byte for byte
        translated: list[etree._Element] = []  # the paragraphs translated, whose language marks become the target's
        for name, root in roots.items():
            for paragraph in self.paragraphs(root):
                if paragraph.fragment.worth_translating():
                    units.append((paragraph.write, paragraph.fragment.html))
                    touched.add(name)
                    translated.append(paragraph.p)
        title = self.title(roots)
        units += title
        touched |= {name for name in ("docProps/core.xml", "meta.xml") if title and name in roots}

        def write(translations: list[str], target: str | None) -> bytes:
            for (put, _), text in zip(units, translations, strict=True):
                put(text)
            if target:
                for p in translated:
                    self.relabel(p, target)
            changed = {name: to_bytes(roots[name], self.standalone) for name in touched}
            return package.write(changed, first=self.first)

        return Parsed([fragment for _, fragment in units], write)

    standalone: bool | None = None

    def check(self, package: Package) -> None:
        """Refuse what this format cannot translate though it reads (an encrypted ODF document)."""

    def relabel(self, p: etree._Element, target: str) -> None:
        """A translated paragraph's language marks set to `target` (spelling and hyphenation follow them): Word's
        `w:lang`, DrawingML's `lang` on run properties. ODF keeps its languages in styles, shared with text left
        untranslated, and is left as it was."""

    def title(self, roots: dict[str, etree._Element]) -> list[tuple[Callable[[str], None], str]]:
        """The document's title in its properties, as a fragment and where it goes."""
        for name in ("docProps/core.xml", "meta.xml"):
            root = roots.get(name)
            title = None if root is None else root.find(f".//{{{DC}}}title")
            if title is not None and title.text and any(c.isalpha() for c in title.text):
                paragraph = _PlainText(title)
                return [(paragraph.write, paragraph.fragment)]
        return []


class _PlainText:
    """An element of plain text (a title): its text as a fragment, and back."""

    def __init__(self, element: etree._Element) -> None:
        self.element, self.fragment = element, html.escape(element.text or "", quote=False)

    def write(self, translated: str) -> None:
        self.element.text = "".join(text for _, text in segments(translated) if isinstance(text, str))


_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_W_LANG = f"{{{_W}}}lang"
_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_DRAWING_PROPERTIES = tuple(f"{{{_A}}}{name}" for name in ("rPr", "endParaRPr", "defRPr"))
_PDF = (
    "is a PDF, which vaswani does not translate: convert it to DOCX first "
    "(e.g. libreoffice --headless --convert-to docx FILE)"
)


class _Ooxml(_Office):
    """DOCX and PPTX: the parts that `_PARTS` matches and the properties' title, paragraphs of `RUNS`'s names."""

    standalone = True

    def relabel(self, p: etree._Element, target: str) -> None:
        for element in p.iter(_W_LANG):
            for side in ("val", "eastAsia", "bidi"):  # the language of each script the run's text may be in
                if element.get(f"{{{_W}}}{side}"):
                    element.set(f"{{{_W}}}{side}", target)
        for element in p.iter(*_DRAWING_PROPERTIES):
            if element.get("lang"):
                element.set("lang", target)

    _PARTS: re.Pattern[str]
    RUNS = WORD

    def parts(self, package: Package) -> list[str]:
        core = ["docProps/core.xml"] if "docProps/core.xml" in package.parts else []
        return [name for name in package.parts if self._PARTS.fullmatch(name)] + core

    def paragraphs(self, root: etree._Element) -> list[RunParagraph | InlineParagraph]:
        return [RunParagraph(p, self.RUNS) for p in root.iter(self.RUNS.tag("p"))]


class Docx(_Ooxml):
    name, extensions, label = "docx", (".docx",), "a DOCX document"
    media_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    _PARTS = re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes)\.xml")


class Pptx(_Ooxml):
    name, extensions, label, RUNS = "pptx", (".pptx",), "a PPTX presentation", DRAWING
    media_type = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
    _PARTS = re.compile(r"ppt/(slides/slide\d+|notesSlides/notesSlide\d+|diagrams/(data|drawing)\d+)\.xml")


class _OpenDocument(_Office):
    first = "mimetype"

    def parts(self, package: Package) -> list[str]:
        return [name for name in ("content.xml", "styles.xml", "meta.xml") if name in package.parts]

    def check(self, package: Package) -> None:
        manifest = package.parts.get("META-INF/manifest.xml", b"")
        if b"encryption-data" in manifest:
            raise FileError("is encrypted (password-protected): save it without a password and translate that")
        if "content.xml" not in package.parts:
            raise FileError(f"is not a complete {self.label}: it lacks content.xml")

    def paragraphs(self, root: etree._Element) -> list[RunParagraph | InlineParagraph]:
        return [
            InlineParagraph(p, ODF_TEXT) for p in root.iter(f"{{{ODF_TEXT}}}p", f"{{{ODF_TEXT}}}h") if not _in_field(p)
        ]


def _in_field(p: etree._Element) -> bool:
    """A paragraph inside a generated index (a table of contents' body): regenerated by the reader, not ours."""
    return any(etree.QName(a).localname == "index-body" for a in p.iterancestors())


class Odt(_OpenDocument):
    name, extensions, label = "odt", (".odt",), "an ODT document"
    media_type = "application/vnd.oasis.opendocument.text"


class Odp(_OpenDocument):
    name, extensions, label = "odp", (".odp",), "an ODP presentation"
    media_type = "application/vnd.oasis.opendocument.presentation"
