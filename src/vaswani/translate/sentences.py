"""Where sentences end inside one line of text: pysbd's rules for the 22 languages it knows, ours for the rest.

    sentence_spans("Dr. Smith kam um 5 Uhr. Er war spät.", "de")    # [(0, 24), (25, 36)]

pysbd (Sadvilkar & Neumann, 2020) is a port of the Golden Rules set of the Ruby `pragmatic_segmenter`:
per-language abbreviation lists, ordinal numbers ("am 3. Oktober"), quotes and parentheses, decimals, initials.
It was chosen over sentencex, blingfire, syntok, Moses' sentence-splitter and our own rules by
benchmarks/sentence_split.py (docs/benchmarks.md, "Serving"). `rule_spans` is the fallback where
pysbd lacks the language, where the language is unknown, or where pysbd changed the text so that its sentences
cannot be found in it.

A span never holds leading or trailing whitespace; text between spans is whitespace only (or nothing).
"""

from __future__ import annotations

import functools
import re

# The languages of pysbd 0.3 (pysbd.languages.LANGUAGE_CODES), listed here so that choosing needs no import.
PYSBD_LANGUAGES = frozenset("en hi mr zh es am ar hy bg ur ru pl fa nl da fr my el it ja de kk sk".split())  # noqa: SIM905
LONGEST_FOR_PYSBD = 20_000  # characters; longer lines go to the rules (pysbd's regexes grow slow on huge lines)

# Words that end with a full stop without ending the sentence, in the languages we see most, lowercased.
ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof sr jr st mt ft vs etc approx no nos vol fig figs ca cf al inc ltd co corp dept est gen
    gov jan feb mar apr jun jul aug sep sept oct nov dec hr hrn nr bzw evtl ggf inkl usw vgl sog str tel mme
    mlle mm mgr av sra sro sta dra dña pág núm
    """.split()  # noqa: SIM905
)
_TERMINAL = ".!?\u2026\u203d\u3002\uff01\uff1f\u061f\u0964"  # . ! ? … ‽ 。 ！ ？ ؟ ।
# Quotes and brackets that may follow the terminal mark: English and German closing quotes (”’ and “‘), «» either way.
_CLOSING = "\"')]}»«\u201d\u2019\u201c\u2018\u300d\u300f\uff09"
_WIDE = "\u3002\uff01\uff1f"  # ends a sentence without a following space (Chinese, Japanese)
_END = re.compile(rf"[{re.escape(_TERMINAL)}]+[{re.escape(_CLOSING)}]*")
_WORD_BEFORE = re.compile(r"(\S+)$")
_DOTTED = re.compile(r"(?:[^\W\d_]{1,3}\.)+[^\W\d_]{1,3}")  # letters with full stops inside, not 4.50


def sentence_spans(line: str, language: str | None = None) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `line` (which holds no line break), in order."""
    if not line.strip():
        return []
    if language in PYSBD_LANGUAGES and len(line) <= LONGEST_FOR_PYSBD:
        spans = _pysbd_spans(line, language)
        if spans is not None:
            return spans
    return rule_spans(line)


@functools.cache
def _segmenter(language: str):
    import pysbd

    return pysbd.Segmenter(language=language, clean=False)


def _pysbd_spans(line: str, language: str) -> list[tuple[int, int]] | None:
    """pysbd's sentences located in `line`; None where one cannot be found there verbatim, or where pysbd fails
    on the line (it raises on some control characters before a numbered item, "\x1f1. ": found by fuzzing)."""
    spans, position = [], 0
    try:
        sentences = _segmenter(language).segment(line)
    except (ValueError, IndexError, TypeError, AttributeError):
        return None  # the rules of rule_spans instead
    for sentence in sentences:
        sentence = sentence.strip()
        if not sentence:
            continue
        start = line.find(sentence, position)
        if start < 0 or line[position:start].strip():
            return None
        spans.append((start, start + len(sentence)))
        position = start + len(sentence)
    if line[position:].strip():
        return None
    return spans


def rule_spans(line: str) -> list[tuple[int, int]]:
    """Sentences end at . ! ? … (and their CJK forms), with any closing quotes and brackets after them, where
    a space and a capital, a digit, an opening quote or bracket, or an uncased letter follows; not after a
    known abbreviation, a single letter (an initial) or a word with a full stop inside (U.S., z.B., e.g.)."""
    cuts = [0]
    for match in _END.finditer(line):
        end = match.end()
        if end >= len(line):
            break
        wide = match.group()[0] in _WIDE
        rest = line[end:]
        gap = len(rest) - len(rest.lstrip())
        if not gap and not wide:
            continue
        following = line[end + gap : end + gap + 1]
        if not following or not _starts_sentence(following):
            continue
        if match.group() == "." and _abbreviation(line[: match.start()]):
            continue
        cuts.append(end)
    spans = []
    for start, stop in zip(cuts, [*cuts[1:], len(line)], strict=True):
        text = line[start:stop]
        left = len(text) - len(text.lstrip())
        right = len(text.rstrip())
        if right > left:
            spans.append((start + left, start + right))
    return spans


def _starts_sentence(character: str) -> bool:
    if character.isupper() or character.isdigit() or character in "\"'(\u201c\u201e\u00ab\u2018\u300c\u300e[¿¡":
        return True
    return character.isalpha() and not character.islower()  # a letter of a script without case


def _abbreviation(before: str) -> bool:
    match = _WORD_BEFORE.search(before)
    if match is None:
        return False
    word = match.group(1).lstrip("\"'(\u201c\u201e\u00ab[")
    if len(word) == 1 and word.isalpha():
        return True  # an initial: "J. R. R. Tolkien"
    if _DOTTED.fullmatch(word):
        return True  # "U.S", "e.g", "z.B", "i.e"
    return word.lower() in ABBREVIATIONS
