"""Glossary files as users bring them (decode/glossary.py, translate/term_placement.py): any Unicode, case that
folds (İ, ß, the Kelvin sign), a byte-order mark, CRLF, tabs inside terms, duplicates, comments, empty lines,
bytes that are not UTF-8. The promise: the file is refused in one line naming it (and the line), or read; then
a sentence holding its source terms translates with each target term there as whole words, or reported missing,
and a term reported missing is one the output's text lacks (counted from the text, issue 78)."""

from __future__ import annotations

import tempfile
import unicodedata
from pathlib import Path

from hypothesis import strategies as st

from tests.fuzz import Surface, one_line, text
from tests.fuzz.markup_html import Translating
from vaswani.decode.glossary import Glossary, GlossaryError

WORDS = ("Hund", "Mann", "Straße", "Frau", "İstanbul", "STRASSE", "Kelvin", "K", "ſtadt", "café", "cafe\u0301")
TERM = st.one_of(
    st.sampled_from(WORDS), text(1, 12), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
)
PAIR = st.tuples(TERM, TERM).map("\t".join)
LINE = st.one_of(
    PAIR,
    st.sampled_from(["", "   ", "# a comment", "Hund\thound", "hund\tdog", "HUND\thound"]),  # skipped, duplicates
    st.tuples(TERM, TERM, TERM).map("\t".join),  # a tab inside the target
    TERM,  # no tab
    st.sampled_from(["\t", "x\t", "\tx"]),  # an empty side
)


@st.composite
def _file(draw) -> tuple[bytes, list[str]]:
    """A glossary file's bytes, and words for a sentence to translate with it."""
    lines = draw(st.lists(PAIR, min_size=0, max_size=6))
    if draw(st.booleans()):  # one line of any kind, somewhere
        lines.insert(draw(st.integers(0, len(lines))), draw(LINE))
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    data = newline.join(lines).encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    if draw(st.integers(0, 9)) == 0:  # bytes that are not UTF-8 somewhere
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80abc"])) + data[at:]
    words = draw(st.lists(st.one_of(st.sampled_from(WORDS), text(1, 8)), max_size=6))
    return data, words


def _fold(text: str) -> str:
    """Text compared without case or spacing: NFKC, case folded (İ's dot dropped), whitespace runs one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().replace("i\u0307", "i").split())


def _in_text(term: str, text: str) -> int:
    """How often `term` stands in `text` as whole words (no letter, digit or "_" right before or after it), counted
    here from the text alone, not by decode/glossary.py's own count."""
    term, text = _fold(term), _fold(text)
    count, start = 0, 0
    while (at := text.find(term, start)) >= 0:
        end = at + len(term)
        before, after = text[at - 1 : at], text[end : end + 1]
        if not any(c.isalnum() or c == "_" for c in before + after):
            count, start = count + 1, end
        else:
            start = at + 1
    return count


def _check(case: tuple[bytes, list[str]], translator) -> str:
    data, words = case
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "terms.tsv"
        path.write_bytes(data)
        try:
            glossary = Glossary.read(path)
        except GlossaryError as error:
            one_line(error, str(path))
            return "refused"
    sources = [source for source, _ in glossary.pairs]
    sentence = " ".join([*words[:3], *sources[:3], *words[3:]]) or "Ein Hund"
    [found] = translator.translate_with_details([sentence], glossary=glossary)
    wanted = glossary.targets(sentence)
    assert found.missing_terms is not None
    assert set(found.missing_terms) <= set(wanted), (found.missing_terms, wanted)
    counts = {term: wanted.count(term) for term in wanted}
    text_out = found.candidates[0].text if found.candidates else ""
    for term, count in counts.items():  # reported missing exactly where the text lacks it, counted from the text
        assert (term in found.missing_terms) == (_in_text(term, text_out) < count), (term, text_out)
    return "all terms" if not found.missing_terms else "terms reported missing"


SURFACE = Surface("glossary", _file, _check, Translating)
