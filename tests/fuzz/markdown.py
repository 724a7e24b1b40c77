"""Markdown documents as users bring them (translate/markup/markdown.py): emphasis paired or not, code spans and
fences closed or not, links, images, autolinks, references, lists, quotes, tables, headings, inline HTML, escapes,
entities, any Unicode. The promise is HTML's (tests/fuzz/markup_html.py): written back unchanged, every piece once,
no translated text lost, what is left as written reported."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.fuzz import Surface, text
from tests.fuzz.markup_html import WORDS, Translating, check_markup

TEXT = st.one_of(st.lists(WORDS, min_size=1, max_size=6).map(" ".join), text(1, 10))
INLINE = st.sampled_from(
    ["*", "**", "_", "__", "~~", "`", "``", "[", "](http://x.org)", "![Bild](a.png)", "<https://a.b>", "\\*", "&amp;",
     "&bogus;", "<b>", "</b>", "<code>x</code>", "[^1]", "[r]", "[ ]", "https://example.org/x.", "  \n", "\\\n", "|"]
)  # fmt: skip
BLOCK = st.sampled_from(
    ["# ", "## ", "> ", "- ", "* ", "1. ", "    ", "```\n", "```python\n", "~~~\n", "---\n", "| a | b |\n|---|---|\n",
     "Titel\n=====\n", "[r]: http://r.org \"T\"\n", "<div>\n", "</div>\n", "<!-- x -->\n", "---\ntitle: x\n---\n"]
)  # fmt: skip
LINE = st.lists(st.one_of(TEXT, INLINE), min_size=0, max_size=8).map("".join)


@st.composite
def _document(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        lines.append(draw(st.one_of(st.just(""), BLOCK)) + draw(LINE))
    return draw(st.sampled_from(["\n", "\r\n"])).join(lines)


SURFACE = Surface("markdown", _document, lambda page, t: check_markup(page, t, "markdown"), Translating)
