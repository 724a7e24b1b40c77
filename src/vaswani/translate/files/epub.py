"""E-books (EPUB 2 and 3): each XHTML content document translated as HTML is (translate/markup: its tags back on the
words they wrapped, its head, scripts and styles as written), the navigation document with them, the NCX's titles,
the package's `dc:title` translated and its `dc:language` set to the target; the manifest, the spine, pictures, fonts
and CSS as they were; the `mimetype` entry first and stored, as the format requires.
"""

from __future__ import annotations

import html
import posixpath
import re
from collections.abc import Callable

from lxml import etree

from vaswani.translate.files.base import FileError, Parsed, segments, sniff
from vaswani.translate.files.package import Package, to_bytes

OPF = "http://www.idpf.org/2007/opf"
DC = "http://purl.org/dc/elements/1.1/"
NCX = "http://www.daisy.org/z3986/2005/ncx/"
CONTAINER = "urn:oasis:names:tc:opendocument:xmlns:container"
_XHTML = ("application/xhtml+xml", "text/html")
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_ROOT_LANG = re.compile(rb"<html\b[^>]*?\s(?:xml:)?lang=([\"'])([^\"']*)\1")


class Epub:
    name, extensions, media_type = "epub", (".epub",), "application/epub+zip"
    label = "an EPUB e-book"

    def read(self, data: bytes) -> Parsed:
        if sniff(data) == "pdf":
            raise FileError("is a PDF, which vaswani does not translate: convert it to EPUB or DOCX first")
        package = Package.read(data, self.label)
        if package.parts.get("mimetype", b"").strip() != b"application/epub+zip":
            raise FileError(f"is not {self.label}: its mimetype entry is not application/epub+zip")
        if b"encryption" in package.parts.get("META-INF/encryption.xml", b"") and _encrypts_text(package):
            raise FileError("is encrypted (DRM): only an e-book without DRM can be translated")
        container = package.xml("META-INF/container.xml")
        rootfile = container.find(f".//{{{CONTAINER}}}rootfile")
        if rootfile is None or not rootfile.get("full-path"):
            raise FileError(f"is not a complete {self.label}: META-INF/container.xml names no package document")
        opf_name = rootfile.get("full-path")
        opf = package.xml(opf_name)
        base = posixpath.dirname(opf_name)
        units: list[tuple[Callable[[str], None], str]] = []
        changed: dict[str, bytes] = {}
        documents = []
        for item in opf.iter(f"{{{OPF}}}item"):
            href = posixpath.normpath(posixpath.join(base, item.get("href", "")))
            kind = item.get("media-type", "")
            if kind in _XHTML and href in package.parts:
                units.append((_document(href, package, changed), _text(package.parts[href], href)))
                documents.append(href)
        ncx = next((posixpath.join(base, i.get("href", "")) for i in opf.iter(f"{{{OPF}}}item")
                    if i.get("media-type") == "application/x-dtbncx+xml"), None)  # fmt: skip
        trees = {opf_name: opf}
        if ncx in package.parts:
            trees[ncx] = package.xml(ncx)
            units += [_element(e) for e in trees[ncx].iter(f"{{{NCX}}}text") if _has_letters(e.text)]
        units += [_element(e) for e in opf.iter(f"{{{DC}}}title") if _has_letters(e.text)]

        def write(translations: list[str], target: str | None) -> bytes:
            for (put, _), translated in zip(units, translations, strict=True):
                put(translated)
            if target:
                for language in opf.iter(f"{{{DC}}}language"):
                    language.text = target
                for name in documents:
                    changed[name] = _relabel(changed[name], target)
                if ncx in trees and trees[ncx].get(XML_LANG):
                    trees[ncx].set(XML_LANG, target)
            changed.update({name: to_bytes(tree) for name, tree in trees.items()})
            return package.write(changed, first="mimetype")

        return Parsed([fragment for _, fragment in units], write)


def _relabel(document: bytes, target: str) -> bytes:
    """A translated document's `lang` and `xml:lang` set to `target` wherever they name the document's own language
    (its `<html>`'s); an element marked as another language keeps its mark."""
    root = _ROOT_LANG.search(document)
    if root is None or not root.group(2):
        return document
    own = re.escape(root.group(2))
    mark = re.compile(rb"(\s(?:xml:)?lang=)([\"'])" + own + rb"\2")
    return mark.sub(lambda m: m.group(1) + m.group(2) + target.encode() + m.group(2), document)


def _encrypts_text(package: Package) -> bool:
    """Whether META-INF/encryption.xml encrypts more than fonts (obfuscated fonts are common and harmless)."""
    names = package.parts["META-INF/encryption.xml"]
    return b"CipherReference" in names and not all(
        uri.endswith((b".ttf", b".otf", b".woff", b".woff2"))
        for uri in (part.split(b'"')[0] for part in names.split(b'URI="')[1:])
    )


def _text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise FileError(f"{name} is not UTF-8: an EPUB's documents are") from None


def _document(name: str, package: Package, changed: dict[str, bytes]) -> Callable[[str], None]:
    def put(translated: str) -> None:
        changed[name] = translated.encode("utf-8")

    return put


def _has_letters(text: str | None) -> bool:
    return any(c.isalpha() for c in text or "")


def _element(element: etree._Element) -> tuple[Callable[[str], None], str]:
    def put(translated: str) -> None:
        element.text = "".join(t for _, t in segments(translated) if isinstance(t, str))

    return put, html.escape(element.text or "", quote=False)
