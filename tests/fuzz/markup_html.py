"""HTML pages as users bring them (translate/markup/html.py): random nesting of inline, block and kept elements,
unclosed and stray tags, attributes (translate="no", class="notranslate", quotes, entities), entities good and
bad, comments (closed or not), scripts, any Unicode. The promise, on every page: the parse writes the page back
unchanged; the translation has every tag once (the same pieces), well nested where the page was; every run with
words is translated, none cut short; what stays untranslated because the markup is broken is reported."""

from __future__ import annotations

import html
from html.parser import HTMLParser

from hypothesis import strategies as st

from tests.fuzz import Surface, text, tiny_translator
from vaswani.translate.formats import translate_markup
from vaswani.translate.markup import parse, pieces
from vaswani.translate.markup.html import VOID

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
    return sum(len("".join(run.text.split())) for run in parse(markup_text, fmt).runs)


def check_markup(page: str, translator, fmt: str) -> str:
    """The format's promise on one page (this module's docstring), for HTML and Markdown alike."""
    markup = parse(page, fmt)
    assert read(markup.source(), fmt) == read(page, fmt), "the parse does not write the page back"
    [result] = translate_markup(translator, [page], fmt)
    assert pieces(parse(result.text, fmt)) == pieces(markup), result.text
    assert len(result.runs) == len(markup.runs)
    for translated in result.runs:
        assert len(translated.sentences) == len(translated.document.sentences)
    expected = sum(len("".join(r.text.split())) for r in result.runs)
    assert letters(result.text, fmt) == expected, (page, result.text)  # no translated text lost or added
    if fmt == "html" and well_nested(page):
        assert well_nested(result.text), result.text
    assert result.to_dict().get("kept", []) == list(markup.kept)
    return "kept, reported" if markup.kept else "translated" if markup.runs else "nothing to translate"


class Translating:
    """The surfaces' shared context: the tiny translator."""

    def __enter__(self):
        return tiny_translator()

    def __exit__(self, *exc) -> None:
        return None


SURFACE = Surface("markup_html", lambda: PAGES, lambda page, t: check_markup(page, t, "html"), Translating)
