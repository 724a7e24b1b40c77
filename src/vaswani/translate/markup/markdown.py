"""Markdown read for translation by markdown-it-py (CommonMark, with GitHub's tables and strikethrough): which text
is translated, which delimiters are marks around it, what stays as written (translate/markup/__init__.py).

- Paragraphs, headings, list items, quotes and table cells are runs; everything around their inline content (list
  markers, `#`, `>`, table pipes, blank lines) stays as written. Code blocks, fences, HTML blocks, link
  definitions and front matter are not runs: they stay as written.
- Emphasis, strong emphasis, strikethrough, links (`[…](…)`, `[…][ref]`) and pairs of inline HTML tags are marks:
  their delimiters come back exactly as written (the link's destination and title too) around the translated words.
- Code spans, images, autolinks, URLs, unpaired HTML and hard line breaks stay as written.
- A run's wrapped lines are translated as one line. Where the parser's tokens cannot be matched back to the text
  (a construct read differently), the run stays as written and `Markup.kept` says so.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Any

from vaswani.translate.markup.model import Markup, MarkupBuilder

_ESCAPED = "\\`*_[]<~|"  # what a translation's text may not hold bare without starting markup
_PAIRED = {"em_open": "em", "strong_open": "strong", "s_open": "s"}
_CLOSING = {"em_close": "em", "strong_close": "strong", "s_close": "s"}
_INLINE_HTML = frozenset("a abbr b cite del dfn em i ins mark q s small span strong sub sup u".split())  # noqa: SIM905
_KEPT_HTML = frozenset({"code", "kbd", "samp", "var"})  # as in HTML (html.py): kept as written


class _UnmatchedError(ValueError):
    """The parser's tokens do not match the text back (a construct this reader does not know)."""


def escape(text: str) -> str:
    # "|" as a reference: "\\|" above a "---" reads as a one-column table (found by fuzzing); "&#124;" is a pipe in
    # a heading and inside a table cell alike
    return "".join("&#124;" if c == "|" else "\\" + c if c in _ESCAPED else c for c in text)


def lead(text: str) -> str:
    """A run's first text escaped where it would start a block: a heading, a list item, a quote ("1986. ..." is
    not a list)."""
    if text[:1] in ("#", "-", "+", ">", "="):
        return "\\" + text
    digits = len(text) - len(text.lstrip("0123456789"))
    if 0 < digits <= 9 and text[digits : digits + 1] in (".", ")"):
        return text[:digits] + "\\" + text[digits:]
    return text


def fits(delimiter: str, before: str, after: str, opening: bool) -> bool:
    """Whether an emphasis or strikethrough delimiter (`*`, `**`, `_`, `~~`; anything else fits) between the
    characters `before` and `after` ("" at a line's edge) can open (or close) a pair, by CommonMark's flanking
    rules; "_" opens no pair inside a word."""
    if not delimiter or delimiter[0] not in "*_~" or delimiter.strip(delimiter[0]):
        return True
    lone_before = not before or _space(before) or _punct(before)
    lone_after = not after or _space(after) or _punct(after)
    left = bool(after) and not _space(after) and (not _punct(after) or lone_before)
    right = bool(before) and not _space(before) and (not _punct(before) or lone_after)
    if delimiter[0] != "_":
        return left if opening else right
    if opening:
        return left and (not right or _punct(before))
    return right and (not left or _punct(after))


def _space(char: str) -> bool:
    """CommonMark's Unicode whitespace: Zs, tab, line feed, form feed, carriage return (not "\x1f", which Python's
    isspace() takes)."""
    return char in "\t\n\f\r" or unicodedata.category(char) == "Zs"


def _punct(char: str) -> bool:
    """CommonMark's punctuation: Unicode P and S categories."""
    return unicodedata.category(char)[0] in "PS"


@functools.cache
def _parser() -> Any:
    from markdown_it import MarkdownIt

    # text_join off: entities and backslash escapes keep their own tokens, so their raw form is known
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).disable("text_join")


def parse_markdown(text: str) -> Markup:
    """`text` (a Markdown document) as raw pieces and runs (translate/markup). Line ends come back as written."""
    crlf = "\r\n" in text
    # CommonMark reads NUL as U+FFFD, and markdown-it's token maps count it so: the text is read the same way
    source = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")
    lines = [0]
    for i, char in enumerate(source):
        if char == "\n":
            lines.append(i + 1)
    lines.append(len(source))
    builder = MarkupBuilder(escape)
    position = front = _front_matter(source)  # what is written so far: YAML front matter is not Markdown
    builder.raw(source[:position])
    in_cell = False
    for token in _parser().parse(source):
        if token.type in ("th_open", "td_open"):
            in_cell = True
        elif token.type in ("th_close", "td_close"):
            in_cell = False
        if token.type != "inline" or not token.content or token.map is None or lines[token.map[0]] < front:
            continue
        try:
            start, end = _locate(source, lines, token.map[0], token.content, position, in_cell)
        except _UnmatchedError as error:  # left in the text around it, as written
            builder.markup.kept.append(f"line {token.map[0] + 1}: kept as written ({error})")
            continue
        builder.raw(source[position:start])
        try:
            _inline(builder, token.children or [], token.content)
        except _UnmatchedError as error:
            builder.keep(source[start:end], f"line {token.map[0] + 1}: kept as written ({error})")
        position = end
    builder.raw(source[position:])
    markup = builder.finish()
    markup.lead, markup.fits, markup.ampersand = lead, fits, "\\&"
    if crlf:
        markup.parts = [p.replace("\n", "\r\n") if isinstance(p, str) else p for p in markup.parts]
    return markup


def _front_matter(source: str) -> int:
    """The length of a leading YAML front matter block (`---` lines around it, as static site generators read it)."""
    if not source.startswith("---\n"):
        return 0
    end = source.find("\n---\n", 3)
    if end < 0:
        end = source.find("\n---", 3)
        return len(source) if end >= 0 and source.endswith("\n---") else 0
    return end + 5


def _locate(source: str, lines: list[int], first: int, content: str, position: int, in_cell: bool) -> tuple[int, int]:
    """Where an inline token's content is in the source: from its first line's text to its last line's (the lines
    between, with their quote or list prefixes, are replaced with it). A table cell is found after the previous
    one; other content ends its first line, so it is found from the line's end (a list marker may look like it)."""
    parts = content.split("\n")
    line_start = max(lines[first], position)
    line_end = source.find("\n", line_start)
    line_end = len(source) if line_end < 0 else line_end
    at = source.find(parts[0], line_start, line_end) if in_cell else source.rfind(parts[0], line_start, line_end)
    if at < 0:
        raise _UnmatchedError(f"line {first + 1}: its text was not found")
    if len(parts) == 1:
        return at, at + len(parts[0])
    last_line = first + len(parts) - 1
    a, b = lines[last_line], lines[last_line + 1]
    tail = parts[-1].lstrip(" \t")  # its indentation as the parser counts it: a tab may be read as spaces
    last = source.rfind(tail, a, b) if tail else -1
    if last >= 0:
        return at, last + len(tail)
    return at, b - 1 if source[b - 1 : b] == "\n" else b  # the line's end, its newline left between the blocks


def _link_open(
    builder: MarkupBuilder, children: list[Any], i: int, content: str, cursor: int
) -> tuple[int, int | None]:
    """A link's opening at children[i]: an autolink or a reference link kept whole (an atom; the tokens up to its
    close skipped), else the mark opened. Returns the cursor after it and the last token to skip (None: none)."""
    if children[i].markup == "autolink":
        end = content.find(">", cursor) + 1
        if not content.startswith("<", cursor) or end <= 0:
            raise _UnmatchedError("an autolink")
        builder.atom(content[cursor:end])
        return end, _closing(children, i, "link_close")
    label = _label_end(content, cursor)
    end = _link_tail(content, label)
    if content[label:end] in ("]", "][]"):  # [label] or [label][]: the text is the reference, kept
        builder.atom(content[cursor:end])
        return end, _closing(children, i, "link_close")
    cursor = _expect(content, cursor, "[")
    builder.open("[", "link")
    return cursor, None


def _inline_html(
    builder: MarkupBuilder, children: list[Any], i: int, content: str, cursor: int
) -> tuple[int, int | None]:
    """An inline HTML tag at children[i]: <code>…</code> kept whole (the tokens up to its close skipped), <br> a
    line's end, another tag a mark or an atom. Returns the cursor after it and the last token to skip."""
    token = children[i]
    name = _tag_name(token.content)
    closing = next((j for j in range(i + 1, len(children)) if children[j].content.lower() == f"</{name}>"), None)
    if name in _KEPT_HTML and closing is not None:  # <code>…</code>: kept whole
        end = content.lower().find(f"</{name}>", cursor) + len(name) + 3
        builder.atom(content[cursor:end])
        return end, closing
    cursor = _expect(content, cursor, token.content)
    if name == "br":
        builder.raw(token.content)  # a line ends: the sentence before it too
    else:
        _html_tag(builder, token.content)
    return cursor, None


def _inline(builder: MarkupBuilder, children: list[Any], content: str) -> None:
    """One inline token's children matched back to its content, told to the builder in order."""
    cursor, skip_to = 0, None
    for i, token in enumerate(children):
        if skip_to is not None:
            if i <= skip_to:
                continue
            skip_to = None
        kind = token.type
        if kind == "text":
            cursor = _expect(content, cursor, token.content)
            _text(builder, token.content, at_start=cursor == len(token.content))
        elif kind == "text_special":  # an entity or a backslash escape
            cursor = _expect(content, cursor, token.markup)
            builder.text(token.content, token.markup)
        elif kind == "softbreak":
            cursor = _break(content, cursor)
            builder.text(" ")
        elif kind == "hardbreak":
            end = _break(content, cursor)
            builder.raw(content[cursor:end])  # a line ends: the sentence before it too
            cursor = end
        elif kind in _PAIRED:
            cursor = _expect(content, cursor, token.markup)
            if kind == "s_open" and "s" in builder.open_keys():
                # struck through twice ("~~~~x~~~~"): a translation that puts both at a line's start opens a fence
                raise _UnmatchedError("strikethrough inside strikethrough")
            builder.open(token.markup, _PAIRED[kind])
        elif kind in _CLOSING:
            cursor = _expect(content, cursor, token.markup)
            builder.close(token.markup, _CLOSING[kind])
        elif kind == "link_open":
            cursor, skip_to = _link_open(builder, children, i, content, cursor)
        elif kind == "link_close":
            end = _link_tail(content, cursor)
            builder.close(content[cursor:end], "link")
            cursor = end
        elif kind == "image":
            if not content.startswith("![", cursor):
                raise _UnmatchedError("an image")
            end = _link_tail(content, _label_end(content, cursor + 1))
            builder.atom(content[cursor:end])
            cursor = end
        elif kind == "code_inline":
            end = _code_end(content, cursor, token.markup)
            builder.atom(content[cursor:end])
            cursor = end
        elif kind == "html_inline":
            cursor, skip_to = _inline_html(builder, children, i, content, cursor)
        else:
            raise _UnmatchedError(f"a {kind} token")
    if content[cursor:].strip():
        raise _UnmatchedError("text after the last token")


def _expect(content: str, cursor: int, piece: str) -> int:
    if content.startswith(piece, cursor):
        return cursor + len(piece)
    raise _UnmatchedError(f"{piece[:20]!r} not where the parser put it")


def _break(content: str, cursor: int) -> int:
    """The end of a line break: spaces or a backslash, the newline, the next line's indentation."""
    end = cursor
    while end < len(content) and content[end] in " \t\\":
        end += 1
    if not content.startswith("\n", end):
        raise _UnmatchedError("a line break")
    end += 1
    while end < len(content) and content[end] in " \t":
        end += 1
    return end


def _closing(children: list[Any], i: int, kind: str) -> int:
    for j in range(i + 1, len(children)):
        if children[j].type == kind:
            return j
    raise _UnmatchedError(f"no {kind}")


def _label_end(content: str, cursor: int) -> int:
    """The index of the `]` closing the label that opens at `cursor` (`[`), nested brackets and escapes skipped."""
    depth, i = 0, cursor
    while i < len(content):
        char = content[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise _UnmatchedError("a label without its ]")


def _link_tail(content: str, cursor: int) -> int:
    """The end of what follows a link's text from its `]`: `(destination "title")`, `[ref]`, `[]` or nothing."""
    from markdown_it.helpers import parseLinkDestination, parseLinkTitle

    if not content.startswith("]", cursor):
        raise _UnmatchedError("a link's ]")
    i = cursor + 1
    if content.startswith("(", i):
        j = _spaces(content, i + 1)
        if content.startswith(")", j):
            return j + 1
        destination = parseLinkDestination(content, j, len(content))
        if destination.ok:
            j = _spaces(content, destination.pos)
            if j < len(content) and content[j] in "\"'(":
                title = parseLinkTitle(content, j, len(content))
                if title.ok:
                    j = _spaces(content, title.pos)
            if content.startswith(")", j):
                return j + 1
    if content.startswith("[", i):
        try:
            return _label_end(content, i) + 1
        except _UnmatchedError:  # "[r][" : a shortcut reference, then a bracket of the text
            return i
    return i


def _spaces(content: str, i: int) -> int:
    while i < len(content) and content[i] in " \t\n":
        i += 1
    return i


def _code_end(content: str, cursor: int, ticks: str) -> int:
    """The end of a code span opened by `ticks` at `cursor`: the next run of exactly as many backticks."""
    i = cursor + len(ticks)
    while True:
        i = content.find(ticks, i)
        if i < 0:
            raise _UnmatchedError("a code span")
        end = i + len(ticks)
        if not content.startswith("`", end) and content[i - 1] != "`":
            return end
        while end < len(content) and content[end] == "`":
            end += 1
        i = end


def _tag_name(raw: str) -> str:
    name = ""
    for char in raw[2 if raw.startswith("</") else 1 :]:
        if not char.isalnum():
            break
        name += char.lower()
    return name


def _text(builder: MarkupBuilder, text: str, at_start: bool) -> None:
    """Text, with what GitHub reads in it kept as written: a task list's box at the start ([ ], [x]) and footnote
    references ([^1])."""
    if at_start and text[:4] in ("[ ] ", "[x] ", "[X] "):
        builder.atom(text[:3])
        text = text[3:]
    while (start := text.find("[^")) >= 0 and (end := text.find("]", start)) > start + 2:
        builder.text(text[:start])
        builder.atom(text[start : end + 1])
        text = text[end + 1 :]
    builder.text(text)


def _html_tag(builder: MarkupBuilder, raw: str) -> None:
    """An inline HTML tag: an inline element's start or end is a mark's, anything else stays where it is."""
    closing = raw.startswith("</")
    name = _tag_name(raw)
    if name in _INLINE_HTML and not raw.endswith("/>"):
        if closing:
            builder.close(raw, "<" + name)
        else:
            builder.open(raw, "<" + name)
    else:
        builder.atom(raw)
