"""Where a glossary's terms go: in the place of the model's own word for the source term.

A model that was never trained for terminology (every imported OPUS-MT model, most trained here) writes its own word
for a source term; a search that only has to fit the term somewhere puts it where it costs the model least: glued
into another word, beside the model's own word, after the sentence's end. So a sentence with terms is translated
twice. First as it would be without the glossary; the translation is aligned with its source from the model's own
cross-attention (decode/align.py), and each source term's aligned target word is replaced by its target term. The
translation so edited, up to and including its last term, is the second search's forced prefix; the search goes on
from there (decode/terms.py: the term ends a word, the model's replaced words are not written again after it), so
that what follows the terms reads as the model would continue them. A term whose source words have no aligned
target word (or share it with another term) is left to the search to place (dynamic beam allocation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vaswani.decode.align import Alignment, alignments, piece_words
from vaswani.decode.terms import Constraints, SentenceTerms, word_continuations

if TYPE_CHECKING:
    from vaswani.decode.request import DecodeRequest
    from vaswani.decode.translator import Translator

Match = tuple[int, int, str]  # (start, end) of a source term in the sentence, its target term


@dataclass(frozen=True)
class Placement:
    """One term occurrence put in the place of target words first..last (inclusive) of the first translation."""

    first: int
    last: int
    term: tuple[int, ...]


def place_terms(
    translator: Translator,
    sentences: Sequence[str],
    encoded: Sequence[list[int]],
    matches: Sequence[Sequence[Match]],
    request: DecodeRequest,
) -> Constraints:
    """Per sentence, what its output must hold (decode/terms.py's SentenceTerms): the first translation (the request
    without a glossary) edited up to its last placed term as the prefix, the terms it could not place, the replaced
    words to avoid. `matches`: each sentence's glossary occurrences (Glossary.matches); `encoded`: the sources' ids.
    Sentences without terms get none."""
    tokenizer = translator.tokenizer
    ids_of = _term_ids(translator, sorted({target for found in matches for _, _, target in found}))
    todo = [i for i, found in enumerate(matches) if found and encoded[i]]
    first = translator.first_translations([sentences[i] for i in todo], [encoded[i] for i in todo], request)
    aligned = alignments(translator, first, encoded=[encoded[i] for i in todo])
    out = [SentenceTerms() for _ in sentences]
    for i, translation, alignment in zip(todo, first, aligned, strict=True):
        terms = [(start, end, ids_of[target]) for start, end, target in matches[i] if ids_of[target]]
        tokens = translation.candidates[0].tokens if translation.candidates else []
        pieces = [tokenizer.tgt.id_to_piece(t) for t in tokens]
        out[i] = _sentence_terms(terms, tokens, pieces, alignment)
    return Constraints(tuple(out), translator.continues_word)


def _term_ids(translator: Translator, targets: list[str]) -> dict[str, tuple[int, ...]]:
    """Each target term's token ids, as the tokenizer writes it as a word of its own (a term it gives no tokens for
    cannot be asked for: reported missing)."""
    ids = translator.tokenizer.encode_tgt(targets) if targets else []
    return {target: tuple(x) for target, x in zip(targets, ids, strict=True)}


def _sentence_terms(
    terms: list[tuple[int, int, tuple[int, ...]]], tokens: list[int], pieces: list[str], alignment: Alignment
) -> SentenceTerms:
    """One sentence's SentenceTerms from its terms (source span, target ids), its first translation's tokens and
    pieces, and their alignment."""
    placed, unplaced, taken = [], [], set()
    for start, end, ids in terms:
        words = _target_words(start, end, alignment)
        if words is None or taken & set(range(words[0], words[1] + 1)):
            unplaced.append(ids)
            continue
        taken |= set(range(words[0], words[1] + 1))
        placed.append(Placement(words[0], words[1], ids))
    if not placed:
        return SentenceTerms(tuple(unplaced))
    word_of = piece_words(pieces, len(alignment.target))
    placed.sort(key=lambda p: p.first)
    prefix: list[int] = []
    position = 0
    for p in placed:  # the first translation's pieces up to the term's words, the term instead of them
        while position < len(tokens) and (word_of[position] is None or word_of[position] < p.first):
            prefix.append(tokens[position])
            position += 1
        while position < len(tokens) and word_of[position] is not None and word_of[position] <= p.last:
            position += 1
        prefix += p.term
    rest, term_ids = set(tokens[position:]), {t for p in placed for t in p.term}
    # the model's replaced words: never right after the prefix, nor later unless it wrote them again further on
    replaced = {t for t in _first_pieces(placed, tokens, word_of) if t not in term_ids}
    avoid = tuple(sorted(t for t in replaced if t not in rest))
    return SentenceTerms(tuple(unplaced), tuple(prefix), avoid, tuple(sorted(replaced)))


def _first_pieces(placed: list[Placement], tokens: list[int], word_of: list[int | None]) -> list[int]:
    """The first piece of each word that a term replaced (the model's own word, which it would write again)."""
    out, seen = [], set()
    for position, word in enumerate(word_of):
        if word is not None and word not in seen and any(p.first <= word <= p.last for p in placed):
            seen.add(word)
            out.append(tokens[position])
    return out


def _target_words(start: int, end: int, alignment: Alignment) -> tuple[int, int] | None:
    """The target words (first, last) aligned to the source words of the span start..end; None where none is, or
    where they lie apart (more than one word between them)."""
    source = [w for w, (a, b) in enumerate(alignment.source) if a < end and b > start]
    targets = sorted({t for w in source for t in alignment.links[w]})
    if not targets or targets[-1] - targets[0] > len(source):
        return None
    return targets[0], targets[-1]


def continuations(translator: Translator) -> tuple[int, ...]:
    """The target vocabulary's pieces that continue the word before them (decode/terms.py)."""
    pieces = translator.tokenizer.tgt
    return word_continuations([pieces.id_to_piece(i) for i in range(translator.model.config.tgt_vocab_size)])
