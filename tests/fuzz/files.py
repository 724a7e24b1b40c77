"""Files as users bring them (translate/files), one surface per format, each input mutated from a valid file written
by the format's own library (tests/helpers/files.py): in a package (DOCX, PPTX, ODT, ODP, EPUB) a part's XML edited
(a text node replaced by any Unicode, markup of the format's own dialect inserted, a slice cut or doubled), entries
dropped, renamed, doubled or added, or the archive's bytes flipped and cut; in subtitles lines replaced, inserted,
dropped or doubled, timings and tags broken, the encoding and line ends changed.

The promise, on every input: the file is translated or refused with a one-line FileError, never a traceback; what is
translated keeps its package's entries (every one as it was, or well-formed XML where it was), and where the
format's own library opens the input it opens the output (subtitles: the same cues at the same times)."""

from __future__ import annotations

import io
import re
import zipfile
from functools import cache

import pysubs2
from hypothesis import strategies as st
from lxml import etree

from tests.fuzz import Surface, one_line, quiet, text
from tests.fuzz.markup_html import Translating
from tests.helpers.files import seed_file
from vaswani.translate.files import FileError, file_format, translate_bytes

PACKAGES = ("docx", "pptx", "odt", "odp", "epub")
SUBTITLES = ("srt", "vtt")
# markup of each package's own dialect, well-formed and not, inserted anywhere in a part
SNIPPETS = {
    "docx": ['<w:r><w:rPr><w:b/></w:rPr><w:t xml:space="preserve"> fett </w:t></w:r>', "<w:tab/>", "<w:br/>",
             '<w:hyperlink r:id="rId99"><w:r><w:t>Netz</w:t></w:r></w:hyperlink>',
             "<w:p><w:r><w:t>Ein Satz.</w:t></w:r></w:p>",
             '<w:fldSimple w:instr="PAGE"><w:r><w:t>1</w:t></w:r></w:fldSimple>', "<w:t>", "</w:r>", "<w:r>",
             '<w:ins w:id="9" w:author="A"><w:r><w:t>neu</w:t></w:r></w:ins>',
             '<w:del w:id="8" w:author="A"><w:r><w:delText>alt</w:delText></w:r></w:del>'],
    "pptx": ["<a:r><a:rPr b=\"1\"/><a:t>fett</a:t></a:r>", "<a:br/>", "<a:p><a:r><a:t>Ein Satz.</a:t></a:r></a:p>",
             '<a:fld id="{1}" type="slidenum"><a:t>1</a:t></a:fld>', "<a:t>", "</a:r>", "<a:endParaRPr/>"],
    "odt": ['<text:span text:style-name="Bold">fett</text:span>', '<text:s text:c="2"/>', "<text:tab/>",
            "<text:line-break/>", "<text:p>Ein Satz.</text:p>", '<text:a xlink:href="http://x.org">Netz</text:a>',
            "<text:span>", "</text:p>", '<text:bookmark text:name="b"/>'],
    "epub": ["<b>fett</b>", "<br/>", '<img src="a.png" alt="Bild"/>', "<p>Ein Satz.</p>", "<script>x()</script>",
             '<span lang="fr">oui</span>', "<i>", "</p>",
             "<navPoint><navLabel><text>Titel</text></navLabel></navPoint>"],
}  # fmt: skip
SNIPPETS["odp"] = SNIPPETS["odt"]
XML_ANY = ["&amp;", "&bogus;", "&#0;", "<![CDATA[a < b]]>", "<!-- x -->", "<?pi x?>", '<!ENTITY e "x">', "<", "]]>",
           "\x00", "\ufeff", "&#xD800;"]  # fmt: skip
SUBTITLE_LINES = ["<i>Zwei Hunde</i>", "<b>laufen", "</i>", "{\\an8}Oben.", "- Wer?", "- Ich.", "", "1", "-->",
                  "00:00:01,000 --> 00:00:00,500", "00:00:09,000 --> 00:00:12,000", "00:01.000 --> 00:02.000 align:end",
                  "99:99:99,999 --> 00:00:01,000", "NOTE ein Kommentar", "STYLE", "WEBVTT", "<v Bob>Hallo</v>",
                  "<c.gelb>Text</c>", "<00:00:02.000>Karaoke", "&amp; &lt;", "Ein Mann fährt.", " ", "\t"]  # fmt: skip


@cache
def _entries(fmt: str) -> tuple[tuple[zipfile.ZipInfo, bytes], ...]:
    with zipfile.ZipFile(io.BytesIO(seed_file(fmt))) as archive:
        return tuple((info, archive.read(info)) for info in archive.infolist())


def _edit_xml(draw, data: bytes, fmt: str) -> bytes:
    """One to three edits of a part's XML: a text node replaced, a snippet inserted, a slice cut or doubled."""
    xml = data.decode("utf-8", "replace")
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["text", "text", "snippet", "snippet", "cut", "double"]))
        nodes = [m.span(1) for m in re.finditer(r">([^<]+)<", xml)]
        if kind == "text" and nodes:
            start, end = draw(st.sampled_from(nodes))
            new = draw(st.one_of(text(0, 30), st.sampled_from(XML_ANY)))
            xml = xml[:start] + (new if draw(st.booleans()) else _escape(new)) + xml[end:]
        elif kind == "snippet":
            at = draw(st.integers(0, len(xml)))
            xml = xml[:at] + draw(st.sampled_from(SNIPPETS[fmt] + XML_ANY)) + xml[at:]
        else:
            start = draw(st.integers(0, len(xml)))
            end = min(len(xml), start + draw(st.integers(0, 80)))
            xml = xml[:start] + (xml[start:end] * 2 if kind == "double" else "") + xml[end:]
    return xml.encode("utf-8", "surrogatepass") if draw(st.integers(0, 9)) else xml.encode("latin-1", "replace")


def _escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@st.composite
def _package(draw, fmt: str) -> bytes:
    entries = [(info.filename, info.compress_type, data) for info, data in _entries(fmt)]
    kind = draw(st.sampled_from(["xml", "xml", "xml", "xml", "entries", "bytes"]))
    if kind == "xml":
        xmls = [i for i, (name, _, _) in enumerate(entries) if re.search(r"\.(xml|xhtml|ncx|opf|rels)$", name)]
        i = draw(st.sampled_from(xmls))
        name, method, data = entries[i]
        entries[i] = (name, method, _edit_xml(draw, data, fmt))
    elif kind == "entries":
        i = draw(st.integers(0, len(entries) - 1))
        how = draw(st.sampled_from(["drop", "rename", "double", "add", "swap", "store"]))
        name, method, data = entries[i]
        if how == "drop":
            del entries[i]
        elif how == "rename":
            entries[i] = (draw(st.sampled_from(["x.xml", "../evil.xml", "/abs.xml", name.upper(), ""])), method, data)
        elif how == "double":
            entries.insert(i, (name, method, draw(st.sampled_from([data, b"", b"<a/>"]))))
        elif how == "add":
            entries.insert(i, (draw(st.sampled_from(["extra.xml", "mimetype", "word/x.xml"])), method, b"<a>x</a>"))
        elif how == "swap":
            j = draw(st.integers(0, len(entries) - 1))
            entries[i], entries[j] = entries[j], entries[i]
        else:
            entries[i] = (name, zipfile.ZIP_STORED if method != zipfile.ZIP_STORED else zipfile.ZIP_DEFLATED, data)
    out = io.BytesIO()
    with quiet(), zipfile.ZipFile(out, "w") as archive:  # a duplicate name warns
        for name, method, data in entries:
            archive.writestr(zipfile.ZipInfo(name or "-", (2024, 1, 1, 0, 0, 0)), data, compress_type=method)
    packed = out.getvalue()
    if kind == "bytes":
        return _flip(draw, packed)
    return packed


def _flip(draw, data: bytes) -> bytes:
    """Bytes flipped, a tail cut, or bytes inserted, as a copy gone wrong does."""
    data = bytearray(data)
    how = draw(st.sampled_from(["flip", "flip", "cut", "insert"]))
    if how == "cut":
        return bytes(data[: draw(st.integers(0, len(data)))])
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, len(data) - 1))
        if how == "flip":
            data[at] = draw(st.integers(0, 255))
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@st.composite
def _subtitles(draw, fmt: str) -> bytes:
    lines = seed_file(fmt).decode().split("\n")
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["replace", "insert", "drop", "double", "timing", "digits"]))
        i = draw(st.integers(0, len(lines) - 1))
        new = draw(st.one_of(st.sampled_from(SUBTITLE_LINES), text(0, 60)))
        if kind == "replace":
            lines[i] = new
        elif kind == "insert":
            lines.insert(i, new)
        elif kind == "drop" and len(lines) > 1:
            del lines[i]
        elif kind == "double":
            lines.insert(i, lines[i])
        else:  # a timing's digits changed, or any line's characters
            timings = [k for k, line in enumerate(lines) if "-->" in line] if kind == "timing" else []
            k = draw(st.sampled_from(timings or [i]))
            if lines[k]:
                at = draw(st.integers(0, len(lines[k]) - 1))
                lines[k] = lines[k][:at] + draw(st.sampled_from("0123456789:,.-> x")) + lines[k][at + 1 :]
    body = draw(st.sampled_from(["\n", "\r\n", "\r"])).join(lines)
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "utf-16", "latin-1"]))
    data = body.encode(encoding, "replace") if encoding != "utf-8" else body.encode("utf-8", "surrogatepass")
    return _flip(draw, data) if draw(st.integers(0, 9)) == 0 else data


def _well_formed(data: bytes) -> bool:
    try:
        etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError:
        return False
    return True


def _opens(data: bytes, fmt: str) -> object | None:
    """The file as its own library reads it, or None where that library refuses it."""
    try:
        with quiet():
            if fmt == "docx":
                import docx

                return docx.Document(io.BytesIO(data))
            if fmt == "pptx":
                import pptx

                return pptx.Presentation(io.BytesIO(data))
            if fmt in ("odt", "odp"):
                from odf.opendocument import load

                return load(io.BytesIO(data))
            if fmt == "epub":
                from ebooklib import epub

                return epub.read_epub(io.BytesIO(data), {"ignore_ncx": False})
            # pysubs2 ends a line at "\n" alone: a file whose lines end in a lone CR (as old Mac editors wrote them,
            # and as players and translate/files/subtitles.py read them) is given to it with its line ends as "\n"
            text = re.sub(r"\r\n|\r", "\n", data.decode("utf-8-sig"))
            cues = pysubs2.SSAFile.from_string(text, format_=fmt)
            return [(event.start, event.end) for event in cues]
    except Exception:  # any refusal of the library's counts as "does not open"
        return None


def check_file(data: bytes, translator, fmt: str) -> str:
    """The promise on one file (this module's docstring)."""
    try:
        with quiet():
            out = translate_bytes(translator, data, file_format(fmt))
    except FileError as error:
        one_line(error)
        return "refused"
    if fmt in PACKAGES:
        with zipfile.ZipFile(io.BytesIO(data)) as before, zipfile.ZipFile(io.BytesIO(out)) as after:
            names = [info.filename for info in after.infolist()]
            assert sorted(names) == sorted(info.filename for info in before.infolist()), names
            if fmt in ("odt", "odp", "epub") and "mimetype" in names:
                assert names[0] == "mimetype" and after.infolist()[0].compress_type == zipfile.ZIP_STORED
            for info in after.infolist():
                written, read = after.read(info), before.read(info.filename)
                if written != read and _well_formed(read):  # a part translated stays well-formed XML
                    assert _well_formed(written), f"{info.filename} is no longer well-formed XML"
    opened = _opens(data, fmt)
    if opened is not None:
        again = _opens(out, fmt)
        assert again is not None, f"{fmt}: the library opens the input but not the output"
        if fmt in SUBTITLES:
            assert again == opened, "the cues' timings changed"
    return "translated, opens" if opened is not None else "translated"


def _surface(fmt: str) -> Surface:
    strategy = _package if fmt in PACKAGES else _subtitles
    return Surface(fmt, lambda: strategy(fmt), lambda data, t: check_file(data, t, fmt), Translating)


SURFACES = [_surface(fmt) for fmt in SUBTITLES + PACKAGES]
