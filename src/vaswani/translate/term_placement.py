"""Where a glossary's terms go: in the place of the model's own word for the source term.

A model that was never trained for terminology (every imported OPUS-MT model, most trained here) writes its own word
for a source term, and a search that only has to fit the term somewhere puts it where it costs the model least:
glued into another word, beside the model's own word, after the sentence's end. So a sentence is first translated
as it would be without the glossary (lines without terms are then exactly the plain translation), each candidate is
aligned with its source from the model's own cross-attention (translate/align.py), and each source term's aligned target
word is replaced by the term, token for token: the word's pieces give way to the term's, a suffix that starts with
punctuation ("." or "'s") stays. Where the alignment gives a term no word, or more words than the term has, the
word the source term makes likeliest gives way (`_Salience`: erasure, the source without the term's words). The
candidate so edited is scored by the model (one teacher-forced pass) where scores are asked for. Where a term has no
such word (or shares it with another term), the sentence is searched again with its terms as constraints
(decode/terms.py: dynamic beam allocation, the term a whole word).

Measured against the alternatives (forcing the edited translation up to its last term and searching on from there;
the terms placed by the constrained search alone): docs/benchmarks.md, "Terms as the user wrote them".
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from vaswani.decode.engine import TorchEngine
from vaswani.decode.hypothesis import Hypothesis, length_penalty
from vaswani.decode.steps import banned_log_probs, length_limits
from vaswani.decode.terms import Constraints, word_continuations
from vaswani.translate.align import alignments, piece_words

if TYPE_CHECKING:
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.decode.engine import Engine
    from vaswani.decode.glossary import Glossary
    from vaswani.decode.request import DecodeRequest
    from vaswani.translate.align import Alignment


Match = tuple[int, int, str]  # (start, end) of a source term in the sentence, its target term


@dataclass(frozen=True)
class _Candidate:
    tokens: list[int]


@dataclass(frozen=True)
class _Aligned:
    """What translate/align.py reads of a translation: its source, its text and its (first) candidate's tokens."""

    source: str
    text: str
    candidates: tuple[_Candidate, ...]


class TermPlacement:
    """A glossary's terms put into a model's translations (the module's docstring): built once per Translator from
    its model, its tokenizer and its engine, and asked by it for every request with a glossary."""

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer, engine: Engine) -> None:
        self.model, self.tokenizer, self._engine = model, tokenizer, engine

    @functools.cached_property
    def engine(self) -> Engine:
        """What searches with the terms as constraints (decode/terms.py): the translator's engine where it is our
        own, else (CTranslate2 has no constrained search) our search on the torch model beside it."""
        return self._engine if self._engine.describe() is None else TorchEngine(self.model)

    @functools.cached_property
    def continues_word(self) -> tuple[int, ...]:
        """The target vocabulary's pieces that continue the word before them: never right after a term."""
        pieces = self.tokenizer.tgt
        return word_continuations([pieces.id_to_piece(i) for i in range(self.model.config.tgt_vocab_size)])

    def targets(self, sentences: Sequence[str], glossary: Glossary | None) -> list[list[str]] | None:
        """Per sentence, the glossary's target term for each occurrence of a source term; None without one."""
        if glossary is None:
            return None
        return [glossary.targets(sentence) for sentence in sentences]

    def term_ids(self, terms: list[str]) -> list[list[int]]:
        """The target token ids of each term (as the tokenizer writes the term on its own); a term the tokenizer
        gives no tokens for cannot be asked for, and is reported missing."""
        if not terms:
            return []
        return [ids for ids in self.tokenizer.encode_tgt(terms) if ids]

    def place(
        self,
        sentences: Sequence[str],
        encoded: Sequence[list[int]],
        found: list[list[Hypothesis]],
        request: DecodeRequest,
        forced: Sequence[int] | None = None,
    ) -> list[list[Hypothesis]]:
        """`found` (each sentence's plain hypotheses) with the glossary's terms of `request` put in (the module's
        docstring). `encoded`: the sentences' source ids; `forced`: their first output tokens (a many-to-many model's
        target language: kept in place, the constrained search forces it too)."""
        matches = [request.glossary.matches(s) if ids else [] for s, ids in zip(sentences, encoded, strict=True)]
        ids_of = self._ids_of(sorted({target for found_ in matches for _, _, target in found_}))
        flat = [(i, j) for i, hyps in enumerate(found) if matches[i] for j in range(len(hyps))]
        texts = self.tokenizer.decode_tgt([found[i][j].tokens for i, j in flat])
        pairs = zip(flat, texts, strict=True)
        candidates = [_Aligned(sentences[i], text, (_Candidate(found[i][j].tokens),)) for (i, j), text in pairs]
        aligned = alignments(self.model, self.tokenizer, candidates, [encoded[i] for i, _ in flat])
        edited: dict[int, list[list[int]]] = {}
        unplaced: set[int] = set()
        for (i, j), alignment in zip(flat, aligned, strict=True):
            terms = [(start, end, ids_of[target]) for start, end, target in matches[i] if ids_of[target]]
            salient = _Salience(self, encoded[i], found[i][j].tokens, alignment, request.decode.ban_after_softmax)
            tokens = self._edited(terms, found[i][j].tokens, alignment, salient)
            if tokens is None or len(tokens) > self._limit(len(encoded[i]), request):  # the search fits it
                unplaced.add(i)
            elif tokens not in edited.setdefault(i, []):
                edited[i].append(tokens)
        out = list(found)
        for i, candidates_ in edited.items():
            if i not in unplaced:
                out[i] = self._scored(encoded[i], candidates_, request)
        if unplaced:  # the terms the alignment could not place: the constrained search places them
            order = sorted(unplaced)
            terms = [[ids_of[target] for _, _, target in matches[i] if ids_of[target]] for i in order]
            searched = self.engine(
                [encoded[i] for i in order],
                request,
                None,
                Constraints.of(terms, self.continues_word),
                forced=None if forced is None else [forced[i] for i in order],
            )
            for i, hyps in zip(order, searched, strict=True):
                out[i] = hyps
        return out

    def _limit(self, source_length: int, request: DecodeRequest) -> int:
        """The search's length limit for a source of `source_length` tokens (EOS not counted)."""
        d = request.decode
        lengths = torch.tensor([source_length + 1])
        return int(length_limits(lengths, self.model.config, d.max_len_a, d.max_len_b)[0])

    def _ids_of(self, targets: list[str]) -> dict[str, list[int]]:
        """Each target term's token ids, as the tokenizer writes it as a word of its own (a term it gives no tokens
        for cannot be asked for: reported missing)."""
        ids = self.tokenizer.encode_tgt(targets) if targets else []
        return {target: list(x) for target, x in zip(targets, ids, strict=True)}

    def _edited(
        self, terms: list[tuple[int, int, list[int]]], tokens: list[int], alignment: Alignment, salient: _Salience
    ) -> list[int] | None:
        """`tokens` with each term in the place of its target words: the aligned ones, or where the alignment gives
        none or more words than the term has source words, the ones the source term makes likeliest (`salient`);
        None where a term has none (or shares them with another term)."""
        spans: list[tuple[int, int, list[int]]] = []
        for start, end, ids in terms:
            words = _target_words(start, end, alignment)
            size = len(_source_words(start, end, alignment))
            if words is None or words[1] - words[0] >= size:
                words = salient(start, end, words, size)
            if words is None or any(a <= words[1] and words[0] <= b for a, b, _ in spans):
                return None
            spans.append((*words, ids))
        pieces = [self.tokenizer.tgt.id_to_piece(t) for t in tokens]
        word_of = piece_words(pieces, len(alignment.target), self.tokenizer.code_pieces)
        out, position = [], 0
        for first, last, ids in sorted(spans):
            while position < len(tokens) and (word_of[position] is None or word_of[position] < first):
                out.append(tokens[position])
                position += 1
            replaced = []
            while position < len(tokens) and word_of[position] is not None and word_of[position] <= last:
                replaced.append(position)
                position += 1
            # the last word's suffix from its first later piece that starts with punctuation ("." or "'s") stays
            in_last = [p for p in replaced if word_of[p] == last][1:]
            cut = next((p for p in in_last if not pieces[p][:1].isalnum() and pieces[p][:1] != "\u2581"), position)
            out += ids + tokens[cut:position]
        return out + tokens[position:]

    def _scored(self, src_ids: list[int], candidates: list[list[int]], request: DecodeRequest) -> list[Hypothesis]:
        """The edited candidates as hypotheses, scored by the model (log-probabilities as the search computes them,
        one teacher-forced pass) where the request asks for scores, best first; NaN scores otherwise."""
        if not request.scores:
            return [Hypothesis(tokens, float("nan"), float("nan")) for tokens in candidates]
        d = request.decode
        picked = forced_log_probs(self.model, src_ids, candidates, d.ban_after_softmax, pick=True)
        out = []
        for row, tokens in enumerate(candidates):
            lps = picked[row, : len(tokens) + 1].tolist()
            total = sum(lps)
            penalty = length_penalty(len(tokens) + 1, d.length_penalty, d.length_rule)
            out.append(Hypothesis(tokens, total, total if request.greedy else total / penalty, tuple(lps)))
        return sorted(out, key=lambda h: -h.score)


class _Salience:
    """Which target words a source term makes likely: each word's log-probability (its pieces', summed) given the
    source, less given the source without the term's words (erasure: Li et al. 2016), from two teacher-forced passes
    made when first asked. Asked where the cross-attention aligns a term with no target word, or with more words
    than the term has (the word before or after it too): "hat" in "an orange hat looking at", which the alignment
    gave "hat looking", or the model's word the alignment missed (docs/benchmarks.md, "Terms as the user wrote
    them")."""

    MIN_GAIN = 1.0  # nats: without the alignment's word, the term must make its word e times likelier at least

    def __init__(self, owner: TermPlacement, src_ids: list[int], tokens: list[int], alignment, after_softmax: bool):
        self.owner, self.src_ids, self.tokens, self.alignment = owner, src_ids, tokens, alignment
        self.after_softmax = after_softmax

    def gains(self, start: int, end: int) -> list[float]:
        """Per target word, how much likelier (log) the source term makes it."""
        tokenizer, model, alignment = self.owner.tokenizer, self.owner.model, self.alignment
        pieces = [tokenizer.src.id_to_piece(i) for i in self.src_ids]
        word_of = piece_words(pieces, len(alignment.source), tokenizer.code_pieces)
        term = set(_source_words(start, end, alignment))
        erased = [i for i, w in zip(self.src_ids, word_of, strict=True) if w is None or w not in term]
        both = [
            forced_log_probs(model, src, [self.tokens], self.after_softmax, pick=True)[0]
            for src in (self.src_ids, erased)
        ]
        target = [tokenizer.tgt.id_to_piece(t) for t in self.tokens]
        out = [0.0] * len(alignment.target)
        for piece, word in enumerate(piece_words(target, len(alignment.target), tokenizer.code_pieces)):
            if word is not None and word < len(out):  # pieces of no word (a translation that reads as empty)
                out[word] += float(both[0][piece] - both[1][piece])
        return out

    def __call__(self, start: int, end: int, within: tuple[int, int] | None, size: int) -> tuple[int, int] | None:
        """The `size` neighbouring target words (within the aligned ones, where there are) the source term start..end
        makes likeliest; None where no word gains MIN_GAIN and the alignment gave none."""
        gains = self.gains(start, end) if self.alignment.target else []
        lo, hi = within if within is not None else (0, len(gains) - 1)
        size = max(1, min(size, hi - lo + 1))
        if hi < lo:
            return None
        first = max(range(lo, hi - size + 2), key=lambda w: sum(gains[w : w + size]))
        if within is None and sum(gains[first : first + size]) < self.MIN_GAIN:
            return None
        return first, first + size - 1


def _source_words(start: int, end: int, alignment: Alignment) -> list[int]:
    """The source words of the span start..end."""
    return [w for w, (a, b) in enumerate(alignment.source) if a < end and b > start]


def _target_words(start: int, end: int, alignment: Alignment) -> tuple[int, int] | None:
    """The target words (first, last) aligned to the source words of the span start..end; None where none is, or
    where they lie apart (more than one word between them)."""
    source = _source_words(start, end, alignment)
    targets = sorted({t for w in source for t in alignment.links[w]})
    if not targets or targets[-1] - targets[0] > len(source):
        return None
    return targets[0], targets[-1]


@torch.inference_mode()
def forced_log_probs(model, src_ids: list[int], candidates: list[list[int]], after_softmax: bool, pick: bool):
    """One teacher-forced pass of `model` over the candidates (token ids without BOS and EOS) of one source: their
    log-probabilities as the search computes them (PAD and BOS never generated, banned before the softmax or after
    it), the whole vocabulary's (n, T + 1, V) or, with `pick`, each token's, EOS last (n, T + 1), on the host."""
    c, device = model.config, next(model.parameters()).device
    longest = max(len(t) for t in candidates) + 1
    src = torch.tensor([[*src_ids, *c.source_end]] * len(candidates), device=device)  # (n, S + 1)
    tgt_in = torch.full((len(candidates), longest), c.pad_id, dtype=torch.long, device=device)
    tgt_out = torch.full_like(tgt_in, c.pad_id)
    for row, tokens in enumerate(candidates):
        tgt_in[row, : len(tokens) + 1] = torch.tensor([c.bos_id, *tokens])
        tgt_out[row, : len(tokens) + 1] = torch.tensor([*tokens, c.eos_id])
    banned = [i for i in (c.pad_id, c.bos_id) if i != c.eos_id]
    log_probs = banned_log_probs(model(src, tgt_in).float(), banned, after_softmax)  # (n, T + 1, V)
    if not pick:
        return log_probs.cpu()
    return log_probs.gather(-1, tgt_out[..., None])[..., 0].double().cpu()  # (n, T + 1)
