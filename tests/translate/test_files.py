"""The files people translate (translate/files): fixtures built by each format's own library, with what real files
hold, translated by a real model (tests/conftest.py's model_dir), reopened by the library that reads the format and
by lxml, and the bad files refused in one line with nothing written."""

import io
import re
import zipfile

import pysubs2
import pytest
from lxml import etree

from tests.helpers.files import (
    SRT,
    VTT,
    docx_file,
    epub_file,
    odf_texts,
    odp_file,
    odt_file,
    parts,
    pptx_file,
    zip_with,
)
from vaswani.cli import main
from vaswani.translate.files import FILE_FORMATS, FileError, file_format, read_file, translate_bytes
from vaswani.translate.files import base as base_module
from vaswani.translate.files import package as package_module
from vaswani.translate.files.subtitles import _spread
from vaswani.translate.translator import Translator

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


@pytest.fixture(scope="module")
def translator(model_dir):
    return Translator.load(model_dir)


def _identity(data: bytes, name: str) -> bytes:
    """The file written back from its own fragments, untranslated: what every format must give back as it read."""
    parsed = read_file(data, file_format(name))
    return parsed.write(list(parsed.fragments), None)


def test_a_docx_translated_keeps_its_structure_formatting_and_every_part_without_text(translator, tmp_path):
    import docx

    source = docx_file()
    assert parts(_identity(source, "docx"))["word/document.xml"].count(b"<w:t") >= 10
    before = docx.Document(io.BytesIO(_identity(source, "docx")))
    original = docx.Document(io.BytesIO(source))
    assert [p.text for p in before.paragraphs] == [p.text for p in original.paragraphs]  # nothing lost on the way
    assert [(r.text, r.bold, r.italic) for r in before.paragraphs[1].runs] == [
        (r.text, r.bold, r.italic) for r in original.paragraphs[1].runs if r.text
    ]

    out = translate_bytes(translator, source, "docx")
    result = docx.Document(io.BytesIO(out))
    assert len(result.paragraphs) == len(original.paragraphs) and len(result.tables) == 1
    assert [p.style.name for p in result.paragraphs] == [p.style.name for p in original.paragraphs]
    texts = [p.text for p in original.paragraphs if re.search(r"[A-Za-zä]", p.text)]
    translated = [p.text for p in result.paragraphs if p.text]
    assert all(t not in translated for t in texts), translated  # every text paragraph translated
    body = result.paragraphs[1]
    assert any(r.bold for r in body.runs) and any(r.italic for r in body.runs)  # the runs' looks on words
    assert body._p.find(f"{W}hyperlink") is not None  # the link kept, around translated words
    assert {e.get(f"{W}val") for e in body._p.iter(f"{W}lang")} == {"en"}  # spelled as the target language
    assert body._p.find(f"{W}hyperlink").xpath("string(.)").strip()
    assert result.tables[0].cell(1, 1).tables[0].cell(0, 0).text != "Ein kleiner Junge."
    assert result.sections[0].header.paragraphs[0].text != "Ein Kopf"
    assert result.sections[0].footer.paragraphs[0].text != "Eine Frau am Fuß"
    assert result.core_properties.title != "Ein Bericht über Hunde"
    assert len(result.inline_shapes) == 1  # the picture
    written, originals = parts(out), parts(source)
    assert list(written) == list(originals)
    texted = {"word/document.xml", "word/header1.xml", "word/footer1.xml", "docProps/core.xml"}
    for name in set(originals) - texted:
        assert written[name] == originals[name], name  # byte-identical where nothing is text
    for name in texted & set(written):
        etree.fromstring(written[name])  # a second reader: every part well-formed XML


def test_a_pptx_translated_keeps_slides_shapes_runs_and_notes(translator):
    import pptx

    source = pptx_file()
    assert _identity(source, "pptx") and pptx.Presentation(io.BytesIO(_identity(source, "pptx")))

    result = pptx.Presentation(io.BytesIO(translate_bytes(translator, source, "pptx")))
    [slide] = result.slides
    assert len(slide.shapes) == 3
    assert slide.shapes.title.text_frame.text != "Ein Hund im Park"
    body = slide.placeholders[1].text_frame.paragraphs
    assert len(body) == 2 and body[0].text != "Ein Mann fährt Fahrrad."
    assert any(r.font.bold for r in body[1].runs)
    assert {r._r.rPr.get("lang") for r in body[1].runs if r._r.rPr is not None} == {"en"}  # the target's language
    cells = slide.shapes[2].table
    assert cells.cell(0, 0).text != "Eine Frau" and cells.cell(0, 1).text == "42"  # a number stays
    assert slide.notes_slide.notes_text_frame.text not in ("", "Eine Notiz für den Sprecher.")


def test_an_odt_translated_keeps_headings_spans_notes_and_tables(translator):
    source = odt_file()
    assert odf_texts(_identity(source, "odt")) == odf_texts(source)
    out = translate_bytes(translator, source, "odt")
    texts = odf_texts(out)
    assert len(texts) == len(odf_texts(source))
    assert not set(texts) & {"Ein Hund im Park", "Eine Frau liest.", "Eine Fußnote über den Hund."}
    content = etree.fromstring(parts(out)["content.xml"])
    ns = {"text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0"}
    assert content.xpath("//text:p/text:span[@text:style-name='Bold']", namespaces=ns)  # the bold span kept
    assert len(content.xpath("//text:note", namespaces=ns)) == 1
    assert parts(out)["styles.xml"] == parts(source)["styles.xml"]  # no text in it: as it was
    assert next(iter(parts(out))) == "mimetype"


def test_an_odp_translated_keeps_its_frames(translator):
    source = odp_file()
    assert (
        odf_texts(_identity(source, "odp"))
        == odf_texts(source)
        == ["Ein Hund läuft.", "Zwei Männer sitzen auf der Bank."]
    )
    texts = odf_texts(translate_bytes(translator, source, "odp"))
    assert len(texts) == 2 and all(texts) and not set(texts) & set(odf_texts(source))


def test_an_epub_translated_is_a_valid_epub_in_the_target_language(translator, tmp_path):
    from ebooklib import epub

    source = epub_file()
    out = translate_bytes(translator, source, "epub")
    with zipfile.ZipFile(io.BytesIO(out)) as archive:
        first = archive.infolist()[0]
        assert first.filename == "mimetype" and first.compress_type == zipfile.ZIP_STORED
    path = tmp_path / "out.epub"
    path.write_bytes(out)
    book = epub.read_epub(str(path))
    assert book.get_metadata("DC", "title")[0][0] != "Ein Buch über Hunde"
    assert book.get_metadata("DC", "language")[0][0] == "en"  # the model's target language
    chapter = book.get_item_with_href("c1.xhtml").get_content().decode()
    assert "läuft" not in chapter and "<i>" in chapter and "<h1>" in chapter
    assert 'lang="en" xml:lang="en"' in chapter and '<p lang="en">' in chapter and '<span lang="fr">' in chapter
    assert book.get_item_with_href("style.css").get_content() == b"p { color: red }"
    ncx = parts(out)["EPUB/toc.ncx"]
    assert b"Erstes Kapitel" not in ncx


def test_an_epub_s_documents_are_read_as_xml_and_stay_well_formed_xml(translator):
    # An e-reader parses XHTML as XML: a line break opening a link (found by the fuzz, tests/fuzz/files.py) once sent
    # the navigation document through the browser's repair, which wrote it back as an HTML fragment without its
    # <?xml?>, <html> and <head>.
    entries = parts(epub_file())
    entries["EPUB/nav.xhtml"] = entries["EPUB/nav.xhtml"].replace(b'<a href="c1.xhtml">', b'<a href="c1.xhtml"><br/>')
    entries["EPUB/c1.xhtml"] = entries["EPUB/c1.xhtml"].replace(b"<h1>", b'<h1><a id="page_5"/>')  # a page anchor
    out = parts(translate_bytes(translator, zip_with(entries), "epub"))
    for name in ("EPUB/nav.xhtml", "EPUB/c1.xhtml"):
        root = etree.fromstring(out[name])
        assert out[name].startswith(b"<?xml") and root.tag == "{http://www.w3.org/1999/xhtml}html", name
        assert [child.tag.split("}")[1] for child in root] == ["head", "body"], name
    assert b'<a href="c1.xhtml"><br/>' in out["EPUB/nav.xhtml"] and b'<h1><a id="page_5"/>' in out["EPUB/c1.xhtml"]


def test_srt_and_vtt_keep_every_cue_timing_block_and_tag(translator):
    out = translate_bytes(translator, SRT.encode(), "srt").decode()
    subs, original = pysubs2.SSAFile.from_string(out), pysubs2.SSAFile.from_string(SRT)
    assert [(e.start, e.end) for e in subs] == [(e.start, e.end) for e in original]
    assert re.findall(r"^\d+$", out, re.M) == ["1", "2", "3", "4"]
    for event in subs:
        assert event.plaintext.strip()  # no cue empty
        assert all(
            len(re.sub(r"<[^>]+>|\{[^}]+\}", "", line)) <= 42 or " " not in line for line in event.text.split("\\N")
        )
    cue3 = out.split("\n\n")[2].splitlines()[2:]
    assert cue3[0].startswith("<i>") and cue3[-1].endswith("</i>")  # italics over a line break kept
    cue4 = out.split("\n\n")[3].splitlines()[2:]
    assert cue4[0].startswith("{\\an8}- ") and sum(line.startswith("- ") for line in cue4) == 1  # each speaker's dash

    vtt = translate_bytes(translator, VTT.encode(), "vtt").decode()
    kept = ["WEBVTT - ein Test", "STYLE", "::cue { color: yellow }", "NOTE eine Notiz, nicht übersetzt", "intro",
            "00:01.000 --> 00:03.000 align:start position:10%", "00:03.000 --> 00:05.000"]  # fmt: skip
    assert all(line in vtt.splitlines() for line in kept)
    assert "<v Anna>" in vtt and "Fahrrad" not in vtt
    assert len(pysubs2.SSAFile.from_string(vtt, format_="vtt")) == 2
    # Written back untranslated, a file gives back its own cues (wrapping aside)
    same = pysubs2.SSAFile.from_string(_identity(SRT.encode(), "srt").decode())
    assert [e.plaintext.replace("\n", " ") for e in same] == [e.plaintext.replace("\n", " ") for e in original]


def test_a_cue_whose_blank_line_was_lost_is_still_a_cue_and_a_broken_timing_is_refused():
    joined = SRT.replace("mit dem\n\n2\n", "mit dem\n2\n")  # as players read it: cue 2 starts at its timing
    assert [e.start for e in pysubs2.SSAFile.from_string(joined)] == [e.start for e in pysubs2.SSAFile.from_string(SRT)]
    assert (
        read_file(joined.encode(), file_format("srt")).fragments
        == read_file(SRT.encode(), file_format("srt")).fragments
    )
    karaoke = SRT.replace("Ein Mann fährt mit dem", "<00:00:01.500>Ein Mann\n<00:00:02.000>fährt mit dem")
    parsed = read_file(karaoke.encode(), file_format("srt"))
    words = "<img data-k='0'>a <img data-k='1'>b c d e f g h"  # both stamps on cue 1's one line
    out = parsed.write([words, *parsed.fragments[1:]], None).decode()
    assert "<00:00:01.500>a\n<00:00:02.000>b" in out
    assert [e.start for e in pysubs2.SSAFile.from_string(out)] == [e.start for e in pysubs2.SSAFile.from_string(SRT)]
    broken = SRT.replace("00:00:03,000 --> 00:00:05,500", "00:00:03,000 0-> 00:00:05,500")
    with pytest.raises(FileError, match=r"line 6: '00:00:03,000 0-> 00:00:05,500' is not a timing as SRT writes one"):
        read_file(broken.encode(), file_format("srt"))


def test_a_sentence_over_cues_is_spread_by_their_shares_between_words():
    words = [[((), w)] for w in ["one", "two", "three", "four", "five", "six", "seven", "eight"]]
    parts = _spread(words, [10, 30])
    assert [len(p) for p in parts] == [2, 6]
    assert [len(p) for p in _spread(words[:3], [1, 1, 100])] == [1, 1, 1]  # none empty while words last
    assert sum(len(p) for p in _spread(words, [5, 5, 5])) == 8


def _needs_version(data: bytes, version: int) -> bytes:
    """The package with its first entry saying it needs a ZIP version this reader has not (found by the fuzz)."""
    data = bytearray(data)
    data[data.find(b"PK\x01\x02") + 6] = version
    return bytes(data)


def test_bad_files_are_refused_in_one_line_and_nothing_is_written(model_dir, tmp_path, capsys, monkeypatch):
    docx = docx_file()
    monkeypatch.setattr(package_module, "MAX_INFLATED", 1 << 20)
    ole = base_module.OLE
    bad = {
        "cut.docx": (docx[: len(docx) // 2], "damaged or truncated"),
        "locked.docx": (ole + b"\0" * 600, "encrypted"),
        "bomb.docx": (zip_with({"word/document.xml": b"<a>" + b" " * (3 << 20) + b"</a>"}), "inflates past"),
        "slides.docx": (zip_with({"ppt/presentation.xml": b"<a/>"}), "holds PPTX content"),
        "paper.pdf": (b"%PDF-1.7\n...", "convert it to DOCX"),
        "empty.srt": (b"", "is empty"),
        "latin.srt": ("1\n00:00:01,000 --> 00:00:02,000\nSchön\n".encode("latin-1"), "not UTF-8"),
        "broken.srt": (b"1\n00:00:01 -> 00:00:02\nEin Mann\n", "a cue without its timing"),
        "book.epub": (docx, "mimetype"),
        "future.docx": (_needs_version(docx, 64), "damaged or truncated ZIP package (zip file version 6.4)"),
    }
    for name, (data, said) in bad.items():
        (tmp_path / name).write_bytes(data)
        out = tmp_path / ("out." + name)
        assert main(["translate", str(model_dir), "-i", str(tmp_path / name), "-o", str(out)]) == 2, name
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert error.startswith(f"vaswani: error: {tmp_path / name}: ") and said in error, error
        assert not out.exists() and not list(tmp_path.glob("out.*")), name


def test_every_file_format_writes_back_unchanged_what_it_read():
    with pytest.raises(FileError, match="is empty"):
        read_file(b" \n", file_format("srt"))
    assert set(FILE_FORMATS) == {"srt", "vtt", "docx", "pptx", "odt", "odp", "epub"}


def test_the_server_translates_a_file_as_the_library_does_and_refuses_bad_ones(translator, model_dir):
    from fastapi.testclient import TestClient

    from vaswani.serve.app import Settings, create_app

    with TestClient(create_app(translator, model_dir, Settings(max_file=4000))) as client:
        answer = client.post("/v1/translate_file", files={"file": ("talk.de.srt", SRT.encode(), "text/plain")})
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("application/x-subrip")
        assert 'filename="talk.de.en.srt"' in answer.headers["content-disposition"]
        assert answer.content == translate_bytes(translator, SRT.encode(), "srt")  # as the library translates it
        damaged = client.post("/v1/translate_file", files={"file": ("a.docx", b"PK\x03\x04cut", "x/y")})
        assert damaged.status_code == 422 and "a.docx: cannot be read" in damaged.json()["error"]
        big = client.post("/v1/translate_file", files={"file": ("a.srt", b"x" * 5000, "text/plain")})
        assert big.status_code == 422 and "more than the 4000 allowed" in big.json()["error"]
        assert client.post("/v1/translate_file", data={"x": "1"}).status_code == 422
        srt = {"file": ("talk.srt", SRT.encode(), "text/plain")}
        termed = client.post("/v1/translate_file", files=srt, data={"glossary": '[["Mann", "gentleman"]]'})
        assert termed.status_code == 200 and termed.content.decode().count("gentleman") >= 2, termed.text
        bad = client.post("/v1/translate_file", files=srt, data={"glossary": "Mann = gentleman"})
        assert bad.status_code == 422 and "glossary: send a JSON list" in bad.json()["error"]
