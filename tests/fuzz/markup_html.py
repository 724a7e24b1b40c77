"""HTML pages as users bring them (translate/markup/html.py): random nesting of inline, block and kept elements,
unclosed and stray tags, attributes (translate="no", class="notranslate", quotes, entities), entities good and
bad, comments (closed or not), scripts, any Unicode. The promise, on every page: the parse writes the page back
unchanged, or (saying so) as a browser reads it; what it keeps as written and what it translates is what html5lib
(the WHATWG rules browsers follow) shows inside and outside kept elements; the translation has every tag once (the
same pieces), well nested where the page was, each in the parent a browser gives it in the page; every run with
words is translated, none cut short; what stays untranslated because the markup is broken is reported."""

from __future__ import annotations

import html
from html.parser import HTMLParser

from hypothesis import strategies as st

from tests.fuzz import Surface, text, tiny_translator
from tests.helpers.browser import browser_kept, kept_elements, ours_kept, shape
from vaswani.translate.formats import translate_markup
from vaswani.translate.markup import parse, pieces
from vaswani.translate.markup.html import VOID, parse_html
from vaswani.translate.markup.html5 import lone_inline_tag

WORDS = st.sampled_from(
    ["Ein", "Hund", "läuft", "im", "Park", ".", "Zwei", "Männer", "sitzen", "auf", "der", "Bank", ",", "Straße"]
)
TEXT = st.one_of(st.lists(WORDS, min_size=1, max_size=6).map(" ".join), text(1, 12))
ENTITY = st.sampled_from(["&amp;", "&nbsp;", "&#8212;", "&#x41;", "&copy;", "&lt;", "&bogus;", "&", "&#xZZ;", "&amp"])
ATTRS = st.sampled_from(
    [
        "",
        ' translate="no"',
        " class='notranslate x'",
        ' href="https://x.org/?a=1&amp;b=2"',
        " title='a \"q\"'",
        " data-x=1",
    ]
)
INLINE = st.sampled_from(["b", "i", "a", "span", "em", "strong", "code", "kbd", "sub"])
BLOCK = st.sampled_from(["p", "div", "li", "ul", "h1", "td", "tr", "table", "blockquote", "pre", "section"])
LONE = st.sampled_from(
    ["<br>", "<img src='a.png' alt='Bild'>", "<hr/>", "<!-- Kommentar -->", "<!-- offen", "</b>", "</p>", "</code>",
     "<script>if (a < b) x = '<b>';</script>", "<style>p{}</style>", "<!DOCTYPE html>", "<?xml x?>", "<wbr>", "<",
     "<b", "< p>", "<pre>", "<code>", "<span translate=no>", "<textarea>", "<![CDATA[x]]>"]
)  # fmt: skip


def _element(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """An element around `children`, closed, or (one in four) left open."""

    @st.composite
    def build(draw) -> str:
        tag = draw(st.one_of(INLINE, BLOCK))
        inner = "".join(draw(st.lists(children, max_size=4)))
        close = "" if draw(st.integers(0, 3)) == 0 else f"</{tag}>"
        return f"<{tag}{draw(ATTRS)}>{inner}{close}"

    return build()


PAGE = st.recursive(st.one_of(TEXT, ENTITY, LONE), _element, max_leaves=24)
PAGES = st.lists(PAGE, min_size=1, max_size=6).map("".join)


class _Nesting(HTMLParser):
    """Whether every end tag closes the innermost open element (void elements apart)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.ok = True

    def handle_starttag(self, tag, attrs) -> None:
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag) -> None:
        self.ok = self.ok and bool(self.stack) and self.stack.pop() == tag


def well_nested(page: str) -> bool:
    checker = _Nesting()
    checker.feed(page)
    checker.close()
    return checker.ok and not checker.stack


def read(page: str, fmt: str) -> str:
    """`page` as a reader sees it, where a parse may write it back differently: HTML as a browser decodes it (a
    letter written "&#65;" comes back "A", "&bogus;" as "&amp;bogus;"), whitespace apart; Markdown rendered,
    whitespace apart (a literal "*" may come back escaped, a paragraph's wrapped lines as one)."""
    if fmt == "html":  # whitespace apart: a tag's inner edge may give its space to the outside ("<b> x</b>")
        return "".join(html.unescape(page).split())
    from markdown_it import MarkdownIt

    return "".join(MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(page).split())


def letters(markup_text: str, fmt: str) -> int:
    """How many non-space characters the runs of a document hold (its translatable text, tags and kept parts
    apart)."""
    read = parse_html(markup_text) if fmt == "html" else parse(markup_text, fmt)  # as written, not as rewritten
    return sum(len("".join(run.text.split())) for run in read.runs)


def _references(page: str) -> tuple[str, ...]:
    """The page, and the markup written of the tree a browser builds of it: where no markup gives that tree (an <a>
    a table put inside an <a>, a <p> inside a <p>, a <textarea> holding an element), a browser reads the rewritten
    page otherwise, and the rewrite is held to what it reads there."""
    from vaswani.translate.markup.html5 import tree, written

    return (page, written(tree(page)[0]))


def _as_a_browser_reads(page: str, markup) -> None:
    """The parse writes the page back as written, or, where it is rewritten (and says so), as a browser reads it;
    either way it keeps as written the text html5lib (the WHATWG rules browsers follow) puts inside kept elements,
    and translates the text a browser shows outside them, block by block."""
    from vaswani.translate.markup.html5 import REWRITTEN, browser_reading, our_reading, tree

    references = _references(page)
    if any(note.endswith(REWRITTEN) for note in markup.kept):
        wanted = {shape(reference, with_text=True) for reference in references}
        assert shape(markup.source(), with_text=True) in wanted, markup.source()
    else:
        assert read(markup.source(), "html") == read(page, "html"), "the parse does not write the page back"
    assert ours_kept(page) in {browser_kept(r) for r in references}, "kept text differs from html5lib's"
    runs = {browser_reading(tree(reference)[0]).runs for reference in references}
    assert our_reading(markup.parts).runs in runs, "translated text differs"


def check_markup(page: str, translator, fmt: str) -> str:
    """The format's promise on one page (this module's docstring), for HTML and Markdown alike."""
    markup = parse(page, fmt)
    if fmt == "html":
        _as_a_browser_reads(page, markup)
    else:
        assert read(markup.source(), fmt) == read(page, fmt), "the parse does not write the page back"
    [result] = translate_markup(translator, [page], fmt)
    assert pieces(parse_html(result.text) if fmt == "html" else parse(result.text, fmt)) == pieces(markup), result.text
    assert len(result.runs) == len(markup.runs)
    for translated in result.runs:
        assert len(translated.sentences) == len(translated.document.sentences)
    expected = sum(len("".join(r.text.split())) for r in result.runs)
    assert letters(result.text, fmt) == expected, (page, result.text)  # no translated text lost or added
    if fmt == "html" and well_nested(page):
        assert well_nested(result.text), result.text
    # the translation's tags as a browser reads them: the page's, none moved to another block (but an inline element
    # around blocks, an <a> around a <p>: its tags stay, as atoms, and the words between them follow the alignment)
    if fmt == "html" and not lone_inline_tag(markup.parts):
        assert shape(result.text) in {shape(reference) for reference in _references(page)}, result.text
    if fmt == "html":  # the kept elements' texts, in any order (the words around them moved)
        kept = [sorted("".join(text.split()) for text in kept_elements(r)) for r in _references(page)]
        assert sorted("".join(text.split()) for text in kept_elements(result.text)) in kept, result.text
    assert result.to_dict().get("kept", []) == list(markup.kept)
    return "kept, reported" if markup.kept else "translated" if markup.runs else "nothing to translate"


class Translating:
    """The surfaces' shared context: the tiny translator."""

    def __enter__(self):
        return tiny_translator()

    def __exit__(self, *exc) -> None:
        return None


SURFACE = Surface("markup_html", lambda: PAGES, lambda page, t: check_markup(page, t, "html"), Translating)
