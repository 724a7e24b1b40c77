"""Markup in, markup out: an HTML or Markdown document's text translated as document mode translates text, and each
of its tags put back exactly once, well nested, around the target words aligned to the source words it wrapped.

    [result] = translate_markup(translator, ["<p>Ein <b>Hund</b> läuft.</p>"], "html")   # translate/formats.py
    result.text                                      # '<p>A <b>dog</b> runs.</p>'

A format's parser (html.py, markdown.py) cuts a document into raw pieces, kept as written (block
tags, code blocks, scripts), and runs: the inline content of one block, as the text to translate with its marks (a
pair of tags or delimiters around part of the text) and atoms (what stays as written inside the text: a code span,
a URL, an image, a tag without its pair). A run's text is split into sentences (translate/document.py) and translated
as line mode translates them; its marks and atoms go where the model's cross-attention aligns their words
(translate/align.py), the tree of marks clipped so that it stays well nested.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vaswani.translate.align import Alignment, word_spans
from vaswani.translate.document import Document, DocumentTranslation, split

if TYPE_CHECKING:
    from vaswani.translate.translation import Translation
from vaswani.translate.markup.model import FORMATS, Markup, MarkupBuilder, pieces  # noqa: F401  callers import here
from vaswani.translate.markup.nodes import Atom, Mark, Node, Run, url_spans  # noqa: F401
from vaswani.translate.markup.render import _core_end, _core_start, _punctuation, render_run  # noqa: F401


def split_run(text: str, language: str | None) -> Document:
    """A run's text cut into sentences as a document's is, line breaks inside the run read as spaces (HTML and
    Markdown wrap their paragraphs' lines; the wrap is not a sentence's end)."""
    if not any(c.isalpha() for c in text):  # a number, a symbol, a cell of a table: nothing to translate
        return Document((), (text,))
    flat = "".join(" " if c in "\r\n\u2028\u2029\x85\x0b\x0c" else c for c in text)
    document = split(flat, language)
    bounds, position = [], 0
    for sentence, gap in zip(document.sentences, document.gaps, strict=False):
        start = position + len(gap)
        bounds.append((start, start + len(sentence)))
        position = start + len(sentence)
    cuts = [0, *(x for span in bounds for x in span), len(text)]
    gaps = tuple(text[cuts[2 * i] : cuts[2 * i + 1]] for i in range(len(bounds) + 1))
    return Document(document.sentences, gaps)


class Placement:
    """Where a run's nodes go in its translation: by the alignment inside a sentence, by position in the gaps
    between sentences (which are copied)."""

    def __init__(self, run: Run, result: DocumentTranslation, aligned: Sequence[Alignment]) -> None:
        document = result.document
        self.run, self.text = run, result.text
        self.aligned = aligned
        self.source: list[tuple[int, int]] = []  # each sentence's span in the run's text
        self.target: list[tuple[int, int]] = []  # and in the translation
        self.gaps: list[tuple[int, int, int]] = []  # each gap: source start, source end, target start
        src = tgt = 0
        for i, gap in enumerate(document.gaps):
            out_gap = gap if i == 0 or i == len(document.sentences) or gap or not result.spaced else " "
            self.gaps.append((src, src + len(gap), tgt))
            src, tgt = src + len(gap), tgt + len(out_gap)
            if i < len(document.sentences):
                n, m = len(document.sentences[i]), len(result.sentences[i].text)
                self.source.append((src, src + n))
                self.target.append((tgt, tgt + m))
                src, tgt = src + n, tgt + m

    def __call__(self, node: Node) -> tuple[int, int]:
        if isinstance(node, Atom):
            at = self.point(node.at)
            return at, at
        words = self.words(node.start, node.end)
        if words is None:
            at = self.point(node.start)
            return at, at
        wrapped = self.run.text[node.start : node.end]
        if wrapped.strip() and not any(c.isalnum() for c in wrapped):  # <b>.</b>: the same marks in the target
            lo, hi = words
            core = lo + _core_end(self.text[lo:hi])
            return (core, hi) if core < hi else (hi, hi)
        return words

    def point(self, position: int) -> int:
        """Where a point of the source goes: the same place in a gap; inside a sentence, after the target word
        aligned to the source word before it (before that word's trailing punctuation where the point was)."""
        for a, b, t in self.gaps:
            if a <= position <= b:
                return t + min(position - a, b - a)
        for k, (a, b) in enumerate(self.source):
            if a < position < b:
                return self._after(k, position - a)
        return len(self.text)

    def _after(self, k: int, offset: int) -> int:
        alignment, base = self.aligned[k], self.target[k][0]
        before = [w for w, (s, _) in enumerate(alignment.source) if s < offset]
        for w in reversed(before):
            if alignment.links[w]:
                start, end = alignment.target[alignment.links[w][-1]]
                if offset < alignment.source[w][1]:  # inside the word: before its punctuation
                    end = start + _core_end(self.text[base + start : base + end])
                return base + end
        return base

    def words(self, start: int, end: int) -> tuple[int, int] | None:
        """The target span of the words aligned to the source words that [start, end) covers, punctuation at its
        ends only where the source span has it there; None where no word is covered."""
        found: list[tuple[int, int]] = []
        for k, (a, _) in enumerate(self.source):
            alignment, base = self.aligned[k], self.target[k][0]
            for w, (s, e) in enumerate(alignment.source):
                if a + s < end and a + e > start:
                    found += [(base + x, base + y) for x, y in (alignment.target[t] for t in alignment.links[w])]
        if not found:
            return None
        lo, hi = min(s for s, _ in found), max(e for _, e in found)
        wrapped = self.run.text[start:end].strip()
        if wrapped and not _punctuation(wrapped[-1]):
            last = max(s for s, e in found if e == hi)
            hi = last + _core_end(self.text[last:hi])
        if wrapped and not _punctuation(wrapped[0]):
            lo += _core_start(self.text[lo:hi])
        return lo, max(hi, lo)


@dataclass(frozen=True)
class MarkupTranslation:
    """A document's translation: `text` (the markup with its text translated), its runs as documents
    (`runs`: each run's sentences and their translations), and `kept`: runs left as written, with why."""

    source: str
    format: str
    text: str
    runs: list[DocumentTranslation]
    kept: tuple[str, ...] = ()

    @property
    def truncated(self) -> bool:
        return any(r.truncated for r in self.runs)

    @property
    def sentences(self) -> list[Translation]:
        """Every sentence of every run, in order."""
        return [s for r in self.runs for s in r.sentences]

    def to_dict(self, decimals: int = 4) -> dict[str, Any]:
        """For JSON: the text, its format, and what document mode records for the sentences (their scores summed,
        its least sure sentence's confidence, each sentence's record); `kept`: runs not translated, with why."""
        sentences = self.sentences
        records = [{"source": s.source, **s.to_dict(decimals=decimals)} for s in sentences]
        known = [s.candidates[0].confidence for s in sentences if s.candidates and s.candidates[0].confidence]
        out: dict[str, Any] = {
            "text": self.text,
            "format": self.format,
            "confidence": round(min(known), decimals) if known else None,
            "truncated": self.truncated,
            "sentences": records,
        }
        if any(s.missing_terms is not None for s in sentences):
            out["missing_terms"] = [term for s in sentences for term in s.missing_terms or ()]
        if self.kept:
            out["kept"] = list(self.kept)
        return out


def parse(text: str, format: str) -> Markup:
    """`text` parsed as `format` ("html" or "markdown")."""
    if format == "html":
        from vaswani.translate.markup.html5 import parse_as_browser

        return parse_as_browser(text)
    if format == "markdown":
        from vaswani.translate.markup.markdown import parse_markdown

        return parse_markdown(text)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")


def assemble_markup(
    texts: Sequence[str], format: str, markups: Sequence[Markup], runs: Sequence[DocumentTranslation]
) -> list[MarkupTranslation]:
    """The texts' translations from their parses and the translations of all their runs, in order (each
    sentence's Translation with its alignment)."""
    out, r = [], 0
    for text, markup in zip(texts, markups, strict=True):
        mine = list(runs[r : r + len(markup.runs)])
        r += len(mine)
        places = [
            Placement(run, result, [s.alignment or _unaligned(s.source) for s in result.sentences])
            for run, result in zip(markup.runs, mine, strict=True)
        ]
        rendered = markup.render([p.text for p in places], places)
        out.append(MarkupTranslation(text, format, rendered, mine, tuple(markup.kept)))
    if r != len(runs):
        raise ValueError(f"{len(runs)} translated runs for {r} runs")
    return out


def _unaligned(source: str) -> Alignment:
    words = word_spans(source)
    return Alignment(words, (), tuple(() for _ in words))
