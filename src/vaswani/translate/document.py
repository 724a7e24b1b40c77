"""Documents: a text cut into sentences, the sentences translated as lines are, the translation put back together
with the text's own paragraphs, line breaks and surrounding whitespace.

    document = split("Ein Mann fährt Fahrrad. Zwei Hunde spielen.\n\nEine Frau liest.", "de")
    document.sentences                        # ('Ein Mann fährt Fahrrad.', 'Zwei Hunde spielen.', 'Eine Frau liest.')
    document.join(["A man rides a bike.", "Two dogs play.", "A woman reads."])
    # 'A man rides a bike. Two dogs play.\n\nA woman reads.'

    translate_documents(translator, [text])[0].text   # the same, every sentence decoded in one call (formats.py)

A sentence never spans a line break: each line is split on its own (translate/sentences.py), so lists, headings
and verse keep their lines. Hard-wrapped prose (a sentence broken over lines) is translated line by line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vaswani.translate.sentences import sentence_spans

if TYPE_CHECKING:
    from vaswani.translate.translation import Translation

_LINE = re.compile(r"[^\n\r\u2028\u2029\x85\x0b\x0c]+")  # text between line breaks
_BREAK = re.compile(r"[\n\r\u2028\u2029\x85\x0b\x0c]")
# Languages written without spaces between sentences: their translations are joined without one too.
# ISO 639-1 and -3 codes (OPUS-MT's >>lang<< tokens are 639-3, some with a script: zho_Hans).
UNSPACED = frozenset({"zh", "ja", "th", "lo", "km", "my", "zho", "cmn", "yue", "jpn", "tha", "lao", "khm", "mya"})


def puts_spaces(language: str | None) -> bool:
    """Whether `language` ("ja", "zho_Hans", or a model's ">>jpn<<" token) puts a space between sentences
    (translations into it are joined with one)."""
    return (language or "").strip("<>").split("_")[0] not in UNSPACED


@dataclass(frozen=True)
class Document:
    """A text as its sentences and the exact text around them:
    text == gaps[0] + sentences[0] + gaps[1] + ... + sentences[-1] + gaps[-1], every gap whitespace only."""

    sentences: tuple[str, ...]
    gaps: tuple[str, ...]  # one more than the sentences

    @property
    def text(self) -> str:
        return self.join(self.sentences, spaced=False)

    def lines(self) -> list[list[int]]:
        """The sentences of each line (a paragraph, a list item, a heading), as their indices: no sentence spans a
        line break, so a line is the sentences between two gaps that hold one."""
        out: list[list[int]] = []
        for i in range(len(self.sentences)):
            if not out or _BREAK.search(self.gaps[i]):
                out.append([])
            out[-1].append(i)
        return out

    def join(self, translations: Sequence[str], spaced: bool = True) -> str:
        """The text with each sentence replaced by its translation. Where two sentences met without a
        space (Chinese, Japanese, "Hallo.Welt"), `spaced` puts one between their translations."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        parts = [self.gaps[0]]
        for i, translation in enumerate(translations):
            gap = self.gaps[i + 1]
            if spaced and not gap and i + 1 < len(translations):
                gap = " "
            parts += [translation, gap]
        return "".join(parts)


def split(text: str, language: str | None = None) -> Document:
    """`text` cut at paragraphs, lines and sentences, with the sentence rules of `language` (an ISO 639-1
    code such as "de"; None or one pysbd lacks: translate/sentences.py's own rules)."""
    spans = []
    for line in _LINE.finditer(text):
        offset = line.start()
        spans += [(offset + a, offset + b) for a, b in sentence_spans(line.group(), language)]
    bounds = [0, *(x for span in spans for x in span), len(text)]
    gaps = tuple(text[bounds[2 * i] : bounds[2 * i + 1]] for i in range(len(spans) + 1))
    return Document(tuple(text[a:b] for a, b in spans), gaps)


@dataclass(frozen=True)
class DocumentTranslation:
    """A text's translation: how it was cut (`document`), each sentence's own `Translation`, and the
    reassembled `text`; `spaced`: whether the target language puts spaces between sentences."""

    source: str
    document: Document
    sentences: list[Translation]
    spaced: bool = True

    @property
    def text(self) -> str:
        return self.document.join([s.text for s in self.sentences], self.spaced)

    @property
    def truncated(self) -> bool:
        return any(s.truncated for s in self.sentences)

    def to_dict(self, decimals: int = 4) -> dict[str, Any]:
        """For JSON: the text; `score` and `log_prob` summed over the sentences (the log-probability of the
        whole translation, sentences being translated independently); `confidence`: its least sure sentence's
        (None where unknown: no sentence, or CTranslate2); `n_best`: the k-th entry joins every
        sentence's k-th candidate (its best where it has fewer); `sentences`: each sentence's own record
        (source, text, scores, n-best and, when computed, attention), as line mode gives it; with a glossary,
        `missing_terms`: its target terms some sentence's translation lacks (the sentences say which)."""
        records = [{"source": s.source, **s.to_dict(decimals=decimals)} for s in self.sentences]
        best = [s.candidates[0] for s in self.sentences if s.candidates]
        ranks = max((len(s.candidates) for s in self.sentences), default=0)
        n_best = []
        for k in range(ranks):
            picked = [s.candidates[min(k, len(s.candidates) - 1)] if s.candidates else None for s in self.sentences]
            n_best.append(
                {
                    "text": self.document.join([c.text if c else "" for c in picked], self.spaced),
                    "score": _sum([c.score for c in picked if c], decimals),
                    "log_prob": _sum([c.log_prob for c in picked if c], decimals),
                }
            )
        known = [c.confidence for c in best if c.confidence is not None]
        out = {
            "text": self.text,
            "score": _sum([c.score for c in best], decimals),
            "log_prob": _sum([c.log_prob for c in best], decimals),
            "confidence": round(min(known), decimals) if known else None,  # its least sure sentence's
            "truncated": self.truncated,
            "n_best": n_best,
            "sentences": records,
        }
        if any(s.missing_terms is not None for s in self.sentences):  # a glossary was asked for
            out["missing_terms"] = [term for s in self.sentences for term in s.missing_terms or ()]
        return out


def assemble(
    texts: Sequence[str], documents: Sequence[Document], results: Sequence[Translation], spaced: bool = True
) -> list[DocumentTranslation]:
    """The texts' translations from their documents and the translations of all their sentences, in order."""
    out, position = [], 0
    for text, document in zip(texts, documents, strict=True):
        mine = list(results[position : position + len(document.sentences)])
        position += len(mine)
        out.append(DocumentTranslation(text, document, mine, spaced))
    if position != len(results):
        raise ValueError(f"{len(results)} translations for {position} sentences")
    return out


def _sum(values: list[float], decimals: int) -> float | None:
    total = float(sum(values))
    return round(total, decimals) if total == total and abs(total) != float("inf") else None
