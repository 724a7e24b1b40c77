"""Markup in, markup out (translate/markup, html.py, markdown.py) and word alignment (translate/align.py)."""

import random
from html.parser import HTMLParser

import pytest
import torch

from tests.helpers.browser import REAL_PAGES
from vaswani.translate.align import Alignment, align, piece_words, word_spans
from vaswani.translate.document import DocumentTranslation
from vaswani.translate.markup import Atom, Placement, parse, pieces, render_run, split_run
from vaswani.translate.markup.html import parse_html
from vaswani.translate.markup.html5 import REWRITTEN
from vaswani.translate.translation import Candidate, Translation

HTML = """<!DOCTYPE html>
<html><head><title>Ein Test</title><style>p { color: red; }</style><script>if (a < b) x = "<b>";</script></head>
<body>
<h1>Ein <i>kleiner</i> Test</h1>
<p>Ein <b>Hund</b> läuft im <a href="https://x.org/?a=1&amp;b=2" title="Park">Park</a>. Zwei Männer &amp; eine Frau
sitzen auf der <span class="x" data-k='1'>Bank</span>&nbsp;&#8212; &copy; 2026.</p>
<p>Führe <code>pip install vaswani</code> aus, siehe https://example.org/docs.<br>Neue <b>Zeile</b>.</p>
<!-- ein Kommentar -->
<pre>  nicht   übersetzen </pre>
<p translate="no">Nicht übersetzen.</p><p>Das <span class="notranslate">vaswani</span>-Paket.</p>
<ul><li>Eins <img src="a.png" alt="Bild"> zwei</li><li>Drei <b><i>vier</i> fünf</b></li></ul>
<p>Geschlossen <b>fett und <i>kursiv</i></b> Ende.</p>
</body></html>
"""

MARKDOWN = """---
title: Nicht übersetzen
---

# Ein *Titel* ##

Ein **Hund** läuft &amp; [der Park](http://x.org "t") `code` \\*x ~~weg~~ __fett__ _kursiv_.\\
Dritte <b>fett</b> <https://a.b> ![Bild](a.png) und https://example.org/docs.

> Ein Zitat mit [Verweis][r].

- eins **zwei**
- drei

1. erste
2. zweite

Titel
=====

```python
print("*nicht*")
```

    eingerückter Code

| a | **b** |
|---|---|
| c `d` | e |

[r]: http://r.org "Titel"
"""


def test_a_document_parses_into_runs_and_writes_itself_back_unchanged():
    for text, fmt in ((HTML, "html"), (MARKDOWN, "markdown"), (MARKDOWN.replace("\n", "\r\n"), "markdown")):
        markup = parse(text, fmt)
        assert markup.source() == text and not markup.kept
    html = parse(HTML, "html")
    texts = [run.text for run in html.runs]
    assert "Ein Hund läuft im Park. Zwei Männer & eine Frau\nsitzen auf der Bank\xa0\u2014 \u00a9 2026." in texts
    assert "Führe aus, siehe." in texts and "Neue Zeile." in texts and "Das-Paket." in texts
    kept = pieces(html)
    for raw in (
        "<code>pip install vaswani</code>",
        "https://example.org/docs",
        "<pre>  nicht   übersetzen </pre>",
        '<p translate="no">Nicht übersetzen.</p>',
        '<script>if (a < b) x = "<b>";</script>',
        '<span class="notranslate">vaswani</span>',
        '<img src="a.png" alt="Bild">',
        "<!-- ein Kommentar -->",
    ):
        assert kept[raw] == 1, raw
    assert not any("nicht" in run.text.lower() or "print" in run.text for run in html.runs)
    markdown = parse(MARKDOWN, "markdown")
    texts = [run.text for run in markdown.runs]
    assert "Ein Hund läuft & der Park *x weg fett kursiv." in texts and "Titel" in texts
    kept = pieces(markdown)
    for raw in ("`code`", "<https://a.b>", "![Bild](a.png)", '](http://x.org "t")', "][r]", "https://example.org/docs"):
        assert kept[raw] == 1, raw
    assert not any("nicht" in run.text.lower() or "eingerückter" in run.text for run in markdown.runs)
    assert markdown.parts[0] == "---\ntitle: Nicht übersetzen\n---\n"  # front matter is not Markdown


def test_unpaired_and_misnested_tags_are_each_kept_once_as_written():
    markup = parse_html("<p>Ungeschlossen <b>fett und <i>kursiv</b> Ende.</p><p>Ein </i> Rest</p>")  # html.py alone
    assert pieces(markup) == pieces(parse_html(markup.source()))
    nodes = [node for run in markup.runs for node in run.children]
    assert nodes and all(isinstance(node, Atom) for node in nodes)


class _Nesting(HTMLParser):
    """Checks that every end tag closes the innermost open element."""

    def __init__(self):
        super().__init__()
        self.stack, self.ok = [], True

    def handle_starttag(self, tag, attrs):
        if tag not in ("img", "br", "meta", "link"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        self.ok = self.ok and bool(self.stack) and self.stack.pop() == tag


@pytest.mark.parametrize("seed", range(20))
def test_whatever_the_alignment_says_every_tag_comes_back_once_and_well_nested(seed):
    rng = random.Random(seed)
    text = "<p>Ein <b>großer <i>roter</i> Hund</b> und <a href='x'>zwei <span>kleine</span> Katzen</a> "
    text += "<code>x</code>.</p>"
    markup = parse(text, "html")
    [run] = markup.runs
    target = "A big red dog and two small cats, translated."

    def hostile(node):
        a, b = sorted(rng.randrange(len(target) + 1) for _ in range(2))
        return (a, a) if isinstance(node, Atom) else (a, b)

    out = render_run(run, target, hostile, markup.write)
    written = "<p>" + out + "</p>"
    assert pieces(parse(written, "html")) == pieces(markup)
    checker = _Nesting()
    checker.feed(written)
    assert checker.ok and not checker.stack, written
    bare = parse(written, "html").runs[0].text
    assert bare.replace(" ", "") == target.replace(" ", "")  # the text, its words unbroken by the tags


def _placement(run, source, target, links):
    translation = Translation(source, [Candidate(target, [], 0.0, 0.0)])
    document = split_run(run.text, "de")
    result = DocumentTranslation(run.text, document, [translation])
    alignment = Alignment(word_spans(source), word_spans(target), tuple(tuple(x) for x in links))
    return Placement(run, result, [alignment])


def test_tags_go_around_the_aligned_words_punctuation_and_code_where_the_source_had_them():
    markup = parse("<p>Ein <b>roter</b> <i>Ball</i>, <code>x</code> <a href='y'>liegt</a>.</p>", "html")
    [run] = markup.runs
    assert run.text == "Ein roter Ball, liegt."
    # Ein->A, roter->red, Ball,->ball, liegt.->lies  (target "A red ball lies.": the source word "Ball," has a comma)
    place = _placement(run, run.text, "A red ball lies.", [[0], [1], [2], [3]])
    out = markup.render([place.text], [place])
    assert out == "<p>A <b>red</b> <i>ball</i> <code>x</code> <a href='y'>lies</a>.</p>"
    # reordered: the tags follow the words; a word aligned twice is held by the first mark only
    markup = parse("<p><b>Hund</b> <i>Katze</i> Maus.</p>", "html")
    [run] = markup.runs
    place = _placement(run, run.text, "mouse cat dog.", [[2], [1], [0]])
    assert markup.render([place.text], [place]) == "<p>mouse <i>cat</i> <b>dog</b>.</p>"
    place = _placement(run, run.text, "mouse cat dog.", [[1], [1], [0]])
    assert markup.render([place.text], [place]) == "<p>mouse <b>cat</b> <i>dog</i>.</p>"  # squeezed: the next free word


def test_markdown_delimiters_are_never_left_empty():
    markup = parse("Ein **großer** *Hund*.\n", "markdown")
    [run] = markup.runs
    place = _placement(run, run.text, "A big dog.", [[0], [2], [2]])  # both words aligned to "dog"
    out = markup.render([place.text], [place])
    assert pieces(parse(out, "markdown")) == pieces(markup) and "****" not in out and "**" in out


def test_pieces_group_into_words_and_both_directions_must_agree():
    pieces_ = [">>fra<<", "\u2581Ein", "\u2581Hund", "e", "\u2581", "1990", "."]
    assert piece_words(pieces_, 3) == [None, 0, 1, 1, 2, 2, 2]
    assert piece_words(["\u2581a", "\u2581b", "\u2581c"], 2) == [0, 0, 1]  # a count that disagrees is spread
    # rows: "A", "dog", "runs", EOS; columns: "Ein", "Hund", "läuft", EOS. "A" anticipates "Hund".
    cross = torch.tensor([[0.1, 0.8, 0.05, 0.05], [0.05, 0.9, 0.0, 0.05], [0.0, 0.1, 0.85, 0.05], [0.3, 0.3, 0.3, 0.1]])
    links = align(cross, [0, 1, 2, None], [0, 1, 2, None], 3)
    assert links == [{0}, {1}, {2}]  # "Ein": no agreement, its most attending piece ("A"); "Hund" -> "dog", not "A"
    cross = torch.tensor([[0.1, 0.9, 0.0, 0.0], [0.2, 0.7, 0.1, 0.0], [0.1, 0.1, 0.8, 0.0], [0.3, 0.3, 0.3, 0.1]])
    assert align(cross, [0, 1, 2, None], [0, 1, 2, None], 3)[1] == {1}  # "is" agreed, "cutting" follows: the run's last


@pytest.mark.shared_data
def test_markup_translates_as_line_mode_and_keeps_every_tag(tmp_path, capsys):
    from fastapi.testclient import TestClient

    from tests.helpers.common import write_tiny_model_directory
    from vaswani import cli
    from vaswani.serve.app import Settings, create_app
    from vaswani.translate.align import alignments
    from vaswani.translate.formats import translate_markup
    from vaswani.translate.translator import Translator

    (tmp_path / "model").mkdir()
    model_dir = write_tiny_model_directory(tmp_path / "model", max_len_b=8)
    translator = Translator.load(model_dir, "cpu")
    for text, fmt in ((HTML, "html"), (MARKDOWN, "markdown")):
        [result] = translate_markup(translator, [text], fmt, beam_size=2)
        sentences = [s.source for r in result.runs for s in r.sentences]
        assert [s.text for r in result.runs for s in r.sentences] == translator.translate(sentences, beam_size=2)
        assert pieces(parse(result.text, fmt)) == pieces(parse(text, fmt))
        record = result.to_dict()
        assert record["text"] == result.text and record["format"] == fmt and "alignment" in record["sentences"][0]
    found = translator.translate_with_details(["Ein Hund läuft im Park.", "Zwei Männer.", "Eine Frau."])
    ids = translator.encode_sources([t.source for t in found])
    one, three = (alignments(translator.model, translator.tokenizer, found, ids, batch=b) for b in (1, 3))
    assert one == three  # padding changes nothing

    source, out = tmp_path / "in.html", tmp_path / "out.html"
    source.write_text(HTML, encoding="utf-8")
    assert cli.main(["translate", str(model_dir), "-i", str(source), "-o", str(out), "--format", "html"]) == 0
    assert out.read_text(encoding="utf-8") == translate_markup(translator, [HTML], "html")[0].text
    assert cli.main(["translate", str(model_dir), "-i", str(source), "--format", "html", "--n-best", "2"]) == 2
    assert "--n-best applies to plain text" in capsys.readouterr().err

    with TestClient(create_app(translator, model_dir, Settings())) as client:
        body = {"text": [HTML, "<p>Zwei <b>Hunde</b>.</p>"], "format": "html"}
        reply = client.post("/v1/translate", json=body).json()["translations"]
        assert [r["text"] for r in reply] == [r.text for r in translate_markup(translator, body["text"], "html")]
        response = client.post("/v1/translate", json={**body, "split_sentences": False})
        assert response.status_code == 422 and "leave split_sentences true" in response.json()["error"]
        response = client.post("/v1/translate", json={**body, "format": "xml"})
        assert response.status_code == 422


def test_what_real_documents_hold_is_read_as_a_reader_would():
    table = parse("| Name | Beschreibung |\n|---|---|\n| eins | zwei **drei** |\n| 42 | ✓ |\n", "markdown")
    assert [run.text for run in table.runs] == ["Name", "Beschreibung", "eins", "zwei drei", "42", "✓"]
    assert split_run("42", "de").sentences == () and split_run("✓", "de").sentences == ()  # nothing to translate
    glued = parse("<p>Eins <img src=x>zwei, <code>x</code>. Drei <!-- c --> vier</p>", "html")
    assert glued.runs[0].text == "Eins zwei,. Drei vier"  # an atom never glues two words, nor parts a full stop
    kept = parse(
        "- [ ] offen\n- [x] Fußnote[^1], [Rust] und [dort][].\n\n[Rust]: http://r\n[dort]: http://d\n", "markdown"
    )
    assert [run.text for run in kept.runs] == [" offen", " Fußnote, und."]
    assert {"[ ]", "[x]", "[^1]", "[Rust]", "[dort][]"} <= set(pieces(kept))  # boxes, footnotes, references kept
    code = parse("Führe <code>pip *x*</code> aus, drücke <kbd>Strg</kbd>.<br>Neu.\n", "markdown")
    assert [run.text for run in code.runs] == ["Führe aus, drücke.", "Neu."]
    for text, fmt in (("<p>&nbsp;</p><p>a &#169; b &lt;c&gt;</p>", "html"), ("1986\\. Ein Jahr.\n", "markdown")):
        markup = parse(text, fmt)
        assert markup.source() == text
    [run] = parse("1986\\. Ein Jahr.\n", "markdown").runs
    out = parse("1986\\. Ein Jahr.\n", "markdown").render(["1986. A year."], [lambda node: (0, 0)])
    assert out == "1986\\. A year.\n" and run.text == "1986. Ein Jahr."  # not read back as a list
    spaced = parse("<p><a><code>a</code> <code>b</code></a> Text</p>", "html")
    assert spaced.source() == "<p><a><code>a</code> <code>b</code></a> Text</p>"


def test_two_atoms_put_side_by_side_stay_two():
    markup = parse("Nimm `a` oder `b`.\n", "markdown")
    [run] = markup.runs
    out = markup.render([run.text], [lambda node: (4, 4)])  # both code spans placed after "Nimm"
    assert pieces(parse(out, "markdown")) == pieces(markup) and "`a` `b`" in out


@pytest.mark.parametrize(
    "page, runs, reason",
    [
        ("<div><pre>x = 1</div><p>Übersetze mich.</p>", ["Übersetze mich."], "up to </div>"),
        ("<ul><li><span translate=no>Marke<li>Zweiter Punkt.</ul>", ["", "Zweiter Punkt."], "up to <li>"),
        ("<pre>nie geschlossen\n<p>Der Rest.</p>", [], "everything after it kept as written"),
    ],
)
def test_an_unclosed_kept_element_ends_where_a_browser_ends_it_and_is_reported(page, runs, reason):
    markup = parse_html(page)  # html.py's reading; what it had to recover, the page is read again as a browser does
    assert [run.text for run in markup.runs] == runs
    [said] = markup.kept
    assert said.startswith("line 1: <") and "not closed" in said and reason in said
    assert markup.source() == page
    [said] = parse(page, "html").kept
    assert said.startswith("line 1: <") and "not closed" in said and said.endswith(REWRITTEN)
    assert [run.text for run in parse(page, "html").runs] == runs


@pytest.mark.parametrize(
    "page, runs, written",
    [  # <code> is a formatting element: a browser carries it on into every later paragraph, and so it is kept there
        (
            "<p>Führe <code>pip install</p><p>Dann der Rest.</p>",
            ["Führe", ""],
            "<p>Führe <code>pip install</code></p><p><code>Dann der Rest.</code></p>",
        ),
        ("<p><code>a<b>x<p>Danach.", ["", ""], "<p><code>a<b>x</b></code></p><p><code><b>Danach.</b></code></p>"),
        (  # misnested: a browser closes the <i> with the <b> and opens it again after it
            "<p>Ungeschlossen <b>fett und <i>kursiv</b> Ende.</p>",
            ["Ungeschlossen fett und kursiv Ende."],
            "<p>Ungeschlossen <b>fett und <i>kursiv</i></b> <i>Ende.</i></p>",  # the space outside, as html.py writes
        ),
        ("<table><tr><td translate=no>x</td></tr>Ein Hund.</table>", ["Ein Hund."], None),  # text moved out of a table
        ("<td translate=no>Ein Hund.</td>", ["Ein Hund."], "Ein Hund."),  # a cell outside a table is no cell
        ("Ein\x00 Hund", ["Ein Hund"], "Ein Hund"),  # a NUL in text is dropped (found by fuzzing at 10k)
    ],
)
def test_markup_a_browser_reads_otherwise_is_rewritten_as_the_browser_reads_it_and_reported(page, runs, written):
    """html.py's reading of these differs from html5lib's (the WHATWG rules browsers follow): the page is read from
    the browser's tree, written back well formed, and `kept` names the broken markup and its line."""
    markup = parse(page, "html")
    assert [run.text for run in markup.runs] == runs
    if written is not None:
        assert markup.source() == written
    [said] = markup.kept
    assert said.endswith(REWRITTEN)


def test_elements_closed_in_order_are_not_reported_and_a_kept_one_holds_its_own_nesting():
    markup = parse("<b>Ein <code><b>x</b> y</code></b> Hund. <div translate=no><p>a</p><p>b</p></div>", "html")
    assert [run.text.strip() for run in markup.runs] == ["Ein Hund."] and not markup.kept
    assert parse_html("<b><b>").source() == "<b><b>"  # two tags never closed stay side by side (html.py)
    assert parse("<b><b>", "html").source() == "<b><b></b></b>"  # and a browser nests them
    assert parse("<code></code><b><img></b>", "html").source() == "<code></code><b><img></b>"
    assert parse("Ein<b>&nbsp;</b> Hund", "html").source() == "Ein<b>&nbsp;</b> Hund"  # a blank pair takes no word


@pytest.mark.parametrize("page", REAL_PAGES)
def test_broken_pages_keep_the_text_an_html5_parser_keeps(page):
    """The reference is html5lib (the WHATWG parsing rules browsers follow): the text kept untranslated is the text
    it puts inside the elements kept as written (an unclosed <code> carried on into later paragraphs as well)."""
    from tests.helpers.browser import browser_kept, ours_kept

    assert ours_kept(page) == browser_kept(page)
    markup = parse(page, "html")
    unclosed = any(
        f"<{tag}" in page and f"</{tag}" not in page for tag in ("code", "kbd", "pre", "span", "var", "samp")
    )
    assert bool(markup.kept) >= unclosed and bool(markup.kept) == (markup.source() != page)  # a rewrite is said


def test_found_by_fuzzing_a_broken_reference_hides_no_tag_and_no_word_is_glued_to_a_url():
    markup = parse('Ein &#xZZ; <b translate="no">Marke</b> Hund', "html")  # html.parser took "</b>" for text
    assert [n.raw for n in markup.runs[0].children] == ['<b translate="no">Marke</b>']
    assert markup.source() == 'Ein &amp;#xZZ; <b translate="no">Marke</b> Hund'  # a browser shows "&#xZZ;" alike
    [run] = parse("https://example.org/x., Ein", "markdown").runs
    [url] = run.children
    out = render_run(run, "bei dog", lambda node: (0, 0), parse("x", "markdown").write)
    assert out.startswith(url.raw + " bei")  # the model dropped the ".,": the word stays a word, the URL a URL


def test_found_by_fuzzing_at_scale_no_translated_word_falls_inside_an_unclosed_element_and_nul_is_read_as_u_fffd():
    markup = parse_html("<p>Ein <b>Hund <code>x</b> läuft</p>")  # html.py's own reading (a browser reads it otherwise)
    [run] = markup.runs
    out = render_run(run, "A dog runs", lambda node: (2, 5), markup.write)  # a hostile place: inside the words
    assert "<code>x</b>" in out  # the <code> that </b> ended stays right before it, nothing pulled inside
    assert pieces(parse_html("<p>" + out + "</p>")) == pieces(markup)
    assert parse("\\\n\x00\n\nEin", "markdown").source() == "\\\n\ufffd\n\nEin"  # two paragraphs stay two
    page = '<b>Ein<i><i translate="no"></b>0'  # its pairs never closed: the atom stays beside the </b> that ended it
    assert parse_html(page).source() == page
    for page in ('<b><p><i translate="no"></b>Ein', "<b>&nbsp;<img src='a.png'></b>Ein"):  # a stray </b>; a blank pair
        assert parse_html(page).source() == page


def test_found_by_fuzzing_markdown_pairs_stay_the_pairs_the_parser_read():
    # "*0<b>*" is emphasis around an <b> never closed: the pair stays a pair, the tag an atom inside it
    [run] = parse("Ein *Hund<b>* läuft", "markdown").runs
    [em] = run.children
    assert (em.open, em.close, [n.raw for n in em.children]) == ("*", "*", ["<b>"])
    # emphasis nested in emphasis, both aligned to one word: "**x**" would read back as strong emphasis
    markup = parse("*Ein\n*Hund**", "markdown")
    [run] = markup.runs
    for place in ((0, 5), (2, 5)):  # the inner pair on both words; both pairs on the second word
        out = render_run(run, "a dog", lambda node, p=place: p, markup.write)
        assert pieces(parse(out, "markdown")) == pieces(markup), out
    out = render_run(run, "dog", lambda node: (0, 3), markup.write)  # one word for both: the other character
    assert out == "*_dog_*" and pieces(parse(out, "markdown")) == pieces(markup)
    # a pair that no longer opens where the translation glued it to a word ("near_x_") takes a space that makes it
    markup = parse("A*_https://example.org/x_", "markdown")
    [run] = markup.runs
    out = render_run(run, "near", lambda node: (4, 4), markup.write, markup.lead, markup.fits)
    assert out == "near _https://example.org/x_" and pieces(parse(out, "markdown")) == pieces(markup)
    assert parse("**Ein Ein*\n0**", "markdown").source() == "**Ein Ein* 0*\\*"  # the inner pair keeps its words
    [run] = parse("A\nMAILTO: und www. sind keine Adressen", "markdown").runs  # a scheme alone is no URL
    assert not run.children
    assert parse("- Ein\n\tEin\n\nEin", "markdown").source() == "- Ein Ein\n\nEin"  # a tab the parser read as spaces
    from vaswani.translate.markup.markdown import fits

    assert not fits("_", "h", "\x1f", False) and fits("_", "h", " ", False)  # U+001F is no space to Markdown
    markup = parse("Ein\n_Ein Hund_\x1f ![Bild](a.png)", "markdown")
    [run] = markup.runs
    out = render_run(run, "a dog", lambda node: (0, 5), markup.write, markup.lead, markup.fits)
    assert pieces(parse(out, "markdown")) == pieces(markup), out
    [run] = parse("https://example.org/x.*, Ein", "markdown").runs  # a URL ending in punctuation, a word after it
    out = render_run(run, "Yes dog", lambda node: (0, 0), parse("x", "markdown").write)
    assert out.startswith("https://example.org/x.* Yes")
    # emphasis across a hard break: its delimiters in two runs; the end is not kept apart from an atom by a space
    from tests.fuzz import tiny_translator
    from vaswani.translate.formats import translate_markup

    page = "_\\\n0\n<b>O_"
    [result] = translate_markup(tiny_translator(), [page], "markdown")
    assert pieces(parse(result.text, "markdown")) == pieces(parse(page, "markdown")), result.text
    page = "* 0\n``\n    ``"  # a code span on two lines of a list item: its second line indented as the item is
    [result] = translate_markup(tiny_translator(), [page], "markdown")
    assert pieces(parse(result.text, "markdown")) == pieces(parse(page, "markdown")), result.text
    assert parse("***Ein Ein***", "markdown").source() == "***Ein Ein***"  # strong in emphasis: no pair to part
    for page in ("Ein~~~~Ein Ein~~~~", "0~~~~0~~~~", "Ein ~~Ein ~~Ein~~ Ein~~"):
        # strikethrough in strikethrough: a translation putting both at a line's start ("~~~~x") opens a code fence
        assert parse(page, "markdown").source() == page
        [result] = translate_markup(tiny_translator(), [page], "markdown")
        assert result.text == page and result.to_dict()["kept"] == [
            "line 1: kept as written (strikethrough inside strikethrough)"
        ]
    assert parse("~~Ein~~ ~~Ein~~", "markdown").kept == []  # side by side: translated
    for page in ("0*0\nEin  \n0*", "Ein<b>", "0<b>"):  # emphasis over a hard break, its start placed last: it
        # goes before the last word (an HTML start tag never closed stays where it is)
        assert parse(page, "markdown").source() == page.replace("\n", " ", 1)
        [result] = translate_markup(tiny_translator(), [page], "markdown")
        assert pieces(parse(result.text, "markdown")) == pieces(parse(page, "markdown")), result.text
    page = "*Hund der*\n*Hund*"  # a pair whose words a sibling took all of takes the sibling's last word
    [result] = translate_markup(tiny_translator(), [page], "markdown")
    assert pieces(parse(result.text, "markdown")) == pieces(parse(page, "markdown")), result.text
    # CommonMark's rule of three: "__0 0_ :_\\_" (the text's "_" escaped out of the closing run) is no emphasis
    page = "__0\n0_\n:__"
    markup = parse(page, "markdown")
    assert markup.source() == "__0 0_ :_ \\_" and pieces(parse(markup.source(), "markdown")) == pieces(markup)
    # a table's first cell starting with "#" after a quote: written back bare (escaped, "\\#" would join the quote)
    page = "> 0\n# |\n---\ntitle: x\n---\n"
    assert parse(page, "markdown").source() == page
    assert parse("| \\# Ein |\n|---|\n", "markdown").source() == "| \\# Ein |\n|---|\n"  # escaped: stays so
    assert parse("Ein\n\n\\# Ein", "markdown").source() == "Ein\n\n\\# Ein"
    page = "\\&amp; Tom & Jerry"  # "&amp;" as text: its "&" stays escaped, a lone "&" stays bare
    assert parse(page, "markdown").source() == page
    assert parse("0\n*:*Ein**", "markdown").source() == "0 *:*Ein**"  # the outer pair takes no word it did not hold
    assert parse("\\\n\x85\n# ", "markdown").source() == "\\\n\x85\n# "  # U+0085 is no indentation to strip
    page = "A:*\\\nEin*"  # emphasis over a hard break: its start, last in its run, sits before the break's "\"
    [result] = translate_markup(tiny_translator(), [page], "markdown")
    assert pieces(parse(result.text, "markdown")) == pieces(parse(page, "markdown")), result.text
    page = '[r]: http://r.org "T"\n0[r]['  # a shortcut reference, then a bracket of the text
    assert parse(page, "markdown").source() == '[r]: http://r.org "T"\n0[r]\\['
    assert parse("\\![Bild](a.png)", "markdown").source() == "\\![Bild](a.png)"  # a "!" before a link: no image
