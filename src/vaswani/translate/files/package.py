"""The ZIP packages office documents and e-books are (DOCX, PPTX, ODT, ODP, EPUB), read with bounds and written
back with every part that holds no text as it was.

A damaged archive, an encrypted or password-protected document, an entry that inflates past `MAX_INFLATED` (a zip
bomb) or an XML part that declares entities is refused in one line (FileError). Parts are parsed by lxml without
network access, DTDs or entity expansion.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from dataclasses import dataclass

from lxml import etree

from vaswani.translate.files.base import FileError, sniff

MAX_INFLATED = 512 * 1024 * 1024  # what all of a package's entries may inflate to, in bytes
MAX_RATIO = 200  # an entry larger than 1 MiB may be at most this many times its compressed size
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


@dataclass
class Package:
    """A ZIP package's entries, in order, with their bytes (read whole, within the bounds)."""

    infos: list[zipfile.ZipInfo]
    parts: dict[str, bytes]
    kind: str  # what the caller expects it to be, for messages ("a DOCX document")

    @classmethod
    def read(cls, data: bytes, kind: str) -> Package:
        what = sniff(data)
        if what == "ole":
            raise FileError(
                f"is encrypted (password-protected) or an Office 97-2003 file, not {kind}: save it without a "
                "password in the current format and translate that"
            )
        if what != "zip":
            raise FileError(f"is not {kind}: not a ZIP package (damaged, truncated, or another format)")
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
            infos = archive.infolist()
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as error:  # 6.4: a version
            raise FileError(f"cannot be read as {kind}: a damaged or truncated ZIP package ({error})") from None
        total, parts = 0, {}
        for info in infos:
            if info.flag_bits & 0x1:
                raise FileError(f"is encrypted (entry {info.filename}): save it without a password and translate that")
            total += info.file_size
            big = info.file_size > 1 << 20 and info.file_size > MAX_RATIO * max(info.compress_size, 1)
            if total > MAX_INFLATED or big:
                raise FileError(f"inflates past the bound of {MAX_INFLATED >> 20} MiB (entry {info.filename}): refused")
            parts[info.filename] = _inflate(archive, info, kind)
        return cls(infos, parts, kind)

    def xml(self, name: str) -> etree._Element:
        """The part `name` parsed (a one-line FileError where it is missing or not XML)."""
        if name not in self.parts:
            raise FileError(f"is not a complete {self.kind}: it lacks {name}")
        return parse_xml(self.parts[name], name, self.kind)

    def write(self, changed: dict[str, bytes], first: str | None = None) -> bytes:
        """The package with the parts in `changed` replaced, every other part as it was, in the same order and with
        the same compression; `first` (EPUB's mimetype) written first and stored uncompressed."""
        out = io.BytesIO()
        infos = sorted(self.infos, key=lambda info: info.filename != first) if first else self.infos
        with zipfile.ZipFile(out, "w") as archive:
            for info in infos:
                data = changed.get(info.filename, self.parts[info.filename])
                copy = zipfile.ZipInfo(info.filename, info.date_time)
                copy.compress_type = zipfile.ZIP_STORED if info.filename == first else info.compress_type
                copy.external_attr, copy.comment = info.external_attr, info.comment
                archive.writestr(copy, data)
        return out.getvalue()


def _inflate(archive: zipfile.ZipFile, info: zipfile.ZipInfo, kind: str) -> bytes:
    """An entry's bytes, read no further than its declared size allows (a header that lies is caught here)."""
    try:
        with archive.open(info) as entry:
            data = entry.read(info.file_size + 1)
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, NotImplementedError, RuntimeError) as error:
        raise FileError(f"cannot be read as {kind}: entry {info.filename} is damaged ({error})") from None
    if len(data) > info.file_size:
        raise FileError(f"cannot be read as {kind}: entry {info.filename} inflates past its declared size")
    return data


def parse_xml(data: bytes, name: str, kind: str) -> etree._Element:
    """An XML part, parsed safely; one that declares entities (an XML bomb's way) is refused."""
    if b"<!ENTITY" in data[:65536]:
        raise FileError(f"{name} declares XML entities, which {kind} never holds: refused")
    try:
        return etree.fromstring(data, _PARSER)
    except etree.XMLSyntaxError as error:
        raise FileError(f"cannot be read as {kind}: {name} is not well-formed XML ({error})") from None


def to_bytes(root: etree._Element, standalone: bool | None = None) -> bytes:
    """A part written back as the packages write theirs: UTF-8, with its XML declaration (OOXML's standalone)."""
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=standalone)
