"""Files as their own libraries write them, with what real files hold (runs, links, lists, a picture, nested
tables, headers and footers, notes, slides, a table of contents, a sentence over two cues, italics over a line
break): the fixtures of tests/translate/test_files.py and the seeds the fuzzed file surfaces mutate
(tests/fuzz/files.py)."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib


def png() -> bytes:
    """A 1x1 PNG, as an image editor writes one."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0\0\0\0\0"))
        + chunk(b"IEND", b"")
    )


def docx_file() -> bytes:
    import docx
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn
    from docx.shared import Inches, RGBColor

    document = docx.Document()
    document.core_properties.title = "Ein Bericht über Hunde"
    document.add_heading("Ein Hund im Park", 1)
    p = document.add_paragraph("Ein ")
    black = p.add_run("schwarzer Hund")
    black.bold = True
    language = OxmlElement("w:lang")  # as Word marks the language a run is spelled in
    language.set(qn("w:val"), "de-DE")
    black._r.get_or_add_rPr().append(language)
    p.add_run(" läuft im Park. Zwei Männer sitzen auf einer ")
    run = p.add_run("Bank")
    run.italic, run.font.color.rgb = True, RGBColor(255, 0, 0)
    p.add_run(". Mehr im ")
    link = OxmlElement("w:hyperlink")  # as Word writes a link: runs inside w:hyperlink with a relationship id
    link.set(
        qn("r:id"),
        document.part.relate_to(
            "https://example.org", docx.opc.constants.RELATIONSHIP_TYPE.HYPERLINK, is_external=True
        ),
    )
    link_run = OxmlElement("w:r")
    link_text = OxmlElement("w:t")
    link_text.text = "Netz"
    link_run.append(link_text)
    link.append(link_run)
    p._p.append(link)
    p.add_run(".")
    document.add_paragraph("Eine Frau liest ein Buch.", style="List Bullet")
    document.add_paragraph("Ein Mann fährt Fahrrad.", style="List Number")
    document.add_paragraph("Ein Bild: ").add_run().add_picture(io.BytesIO(png()), width=Inches(0.5))
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Ein Mann", "Eine Frau"
    table.cell(1, 0).text = "Zwei Kinder spielen."
    table.cell(1, 1).add_table(rows=1, cols=1).cell(0, 0).text = "Ein kleiner Junge."
    document.sections[0].header.paragraphs[0].text = "Ein Kopf"
    document.sections[0].footer.paragraphs[0].text = "Eine Frau am Fuß"
    return _written(document.save)


def parts(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def odt_file() -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.style import Style, TextProperties
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, Note, NoteBody, NoteCitation, P, S, Span

    document = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(bold)
    document.text.addElement(H(outlinelevel=1, text="Ein Hund im Park"))
    p = P(text="Ein ")
    p.addElement(Span(stylename=bold, text="schwarzer Hund"))
    p.addText(" läuft im Park.")
    p.addElement(S(c=3))
    note = Note(noteclass="footnote", id="n1")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="Eine Fußnote über den Hund."))
    note.addElement(body)
    p.addElement(note)
    p.addText(" Zwei Männer sitzen.")
    document.text.addElement(p)
    table = Table(name="T")
    table.addElement(TableColumn())
    row = TableRow()
    cell = TableCell()
    cell.addElement(P(text="Eine Frau liest."))
    row.addElement(cell)
    table.addElement(row)
    document.text.addElement(table)
    return _written(document.write)


def odf_texts(data: bytes) -> list[str]:
    from odf import teletype
    from odf.opendocument import load
    from odf.text import H, P

    document = load(io.BytesIO(data))
    return [teletype.extractText(p) for kind in (H, P) for p in document.getElementsByType(kind)]


def epub_file() -> bytes:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("id1")
    book.set_title("Ein Buch über Hunde")
    book.set_language("de")
    chapter = epub.EpubHtml(title="Erstes Kapitel", file_name="c1.xhtml", lang="de")
    chapter.content = (
        '<h1>Erstes Kapitel</h1><p>Ein <i>Hund</i> läuft im Park. Zwei Männer sitzen.</p><p lang="de">Ein Mann sagt '
        '<span lang="fr">oui</span>.</p>'
    )
    book.add_item(chapter)
    book.add_item(epub.EpubItem(uid="css", file_name="style.css", media_type="text/css", content=b"p { color: red }"))
    book.toc = [epub.Link("c1.xhtml", "Erstes Kapitel", "c1")]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", chapter]
    return _written(lambda out: epub.write_epub(out, book))


SRT = """1
00:00:01,000 --> 00:00:03,000
Ein Mann fährt mit dem

2
00:00:03,000 --> 00:00:05,500
Fahrrad die Straße entlang.

3
00:00:06,000 --> 00:00:08,000
<i>Zwei Hunde spielen
im Schnee.</i>

4
00:00:08,000 --> 00:00:10,000
{\\an8}- Wer ist das?
- Ein Mann.

"""


VTT = """WEBVTT - ein Test

STYLE
::cue { color: yellow }

NOTE eine Notiz, nicht übersetzt

intro
00:01.000 --> 00:03.000 align:start position:10%
<v Anna>Ein Mann fährt mit dem</v>

00:03.000 --> 00:05.000
Fahrrad die Straße entlang.
"""


def zip_with(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


def pptx_file() -> bytes:
    import pptx
    from pptx.enum.lang import MSO_LANGUAGE_ID

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "Ein Hund im Park"
    frame = slide.placeholders[1].text_frame
    frame.text = "Ein Mann fährt Fahrrad."
    paragraph = frame.add_paragraph()
    for text, bold in (("Zwei ", False), ("Hunde", True), (" spielen im Schnee.", False)):
        run = paragraph.add_run()
        run.text, run.font.bold = text, bold
        run.font.language_id = MSO_LANGUAGE_ID.GERMAN  # as PowerPoint marks each run's language (lang="de-DE")
    table = slide.shapes.add_table(1, 2, 0, 0, 100, 100).table
    table.cell(0, 0).text, table.cell(0, 1).text = "Eine Frau", "42"
    slide.notes_slide.notes_text_frame.text = "Eine Notiz für den Sprecher."
    return _written(presentation.save)


def odp_file() -> bytes:
    from odf.draw import Frame, Page, TextBox
    from odf.opendocument import OpenDocumentPresentation
    from odf.style import MasterPage, PageLayout
    from odf.text import P, Span

    document = OpenDocumentPresentation()
    layout = PageLayout(name="L")
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="M", pagelayoutname=layout)
    document.masterstyles.addElement(master)
    page = Page(masterpagename=master)
    frame = Frame(width="10cm", height="2cm", x="1cm", y="1cm")
    box = TextBox()
    box.addElement(P(text="Ein Hund läuft."))
    p = P(text="Zwei ")
    p.addElement(Span(text="Männer"))
    p.addText(" sitzen auf der Bank.")
    box.addElement(p)
    frame.addElement(box)
    page.addElement(frame)
    document.presentation.addElement(page)
    return _written(document.write)


def _written(save) -> bytes:
    """What a library's save(file) writes, as bytes."""
    out = io.BytesIO()
    save(out)
    return out.getvalue()


def seed_file(name: str) -> bytes:
    """The fixture of format `name` (translate/files FILE_FORMATS), built once per process."""
    if name not in _SEEDS:
        builders = {"docx": docx_file, "pptx": pptx_file, "odt": odt_file, "odp": odp_file, "epub": epub_file,
                    "srt": SRT.encode, "vtt": VTT.encode}  # fmt: skip
        _SEEDS[name] = builders[name]()
    return _SEEDS[name]


_SEEDS: dict[str, bytes] = {}
