"""A glossary's terms in beam search: the strategy (`TermContinuations`) that beam.py's loop takes for sentences with
terms, so that each output holds its terms, as whole words, where the model's own word would have been.

What one sentence must hold is a `SentenceTerms`: the token ids of each term, one entry per occurrence. The
translation layer puts most terms in the place of the model's own word without a search (translate/term_placement.py);
it comes here for those it cannot place.

At each step the strategy
- bans EOS until every term is met, and after a term's last token every piece that would continue its word
  (`Constraints.continues_word`: a piece with no word-start mark that begins with a letter or digit), so that a
  term is a word of the output ("hound", never "hounding");
- takes each sentence's candidates as dynamic beam allocation does (Post & Vilar 2018; fairseq's --constraints,
  Hu et al. 2019): the 2k best continuations, each hypothesis's best token and its next constraint tokens (the one
  that continues a term it is midway through, the first token of every term it has not met); a candidate's bank is
  how many constraint tokens it has met, and the beam takes them from the banks in turn, best first within each,
  highest bank first, so that hypotheses that have placed more of the terms survive beside the ones the model
  prefers. A term midway that the next token does not continue is started again later.
Where no hypothesis has met every term by the length limit, the sentence ends with the best of those that met the
most (`short`), and the caller reports the terms missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from vaswani.decode.hypothesis import Hypothesis, length_penalty
from vaswani.decode.request import DecodeRequest
from vaswani.decode.steps import Steps

Terms = Sequence[Sequence[int]]  # one sentence's terms: token ids of each, one entry per occurrence
MIN_BEAM = 4  # a sentence with terms gets at least this many hypotheses: with fewer, terms go where they fit first
WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word


@dataclass(frozen=True)
class SentenceTerms:
    """What one sentence's output must hold (the module's docstring)."""

    terms: tuple[tuple[int, ...], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.terms)


@dataclass(frozen=True)
class Constraints:
    """Per source, what its output must hold; and the target pieces that continue the word before them (never
    right after a term)."""

    sentences: tuple[SentenceTerms, ...]
    continues_word: tuple[int, ...] = ()

    @classmethod
    def of(cls, terms: Sequence[Terms], continues_word: Sequence[int] = ()) -> Constraints:
        """Constraints of terms alone: per source, the token ids of each term, placed wherever the search finds."""
        sentences = tuple(SentenceTerms(tuple(tuple(t) for t in ts)) for ts in terms)
        return cls(sentences, tuple(continues_word))

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, i: int) -> SentenceTerms:
        return self.sentences[i]

    def __bool__(self) -> bool:
        return any(self.sentences)


def word_continuations(pieces: Sequence[str]) -> tuple[int, ...]:
    """The ids of the pieces that continue the word before them: no word-start mark, and a letter or digit first
    (punctuation, "'s" and special pieces may follow a whole word)."""
    return tuple(i for i, p in enumerate(pieces) if p and not p.startswith(WORD_START) and p[0].isalnum())


@dataclass(frozen=True)
class _State:
    """A hypothesis's progress through its sentence's terms."""

    met: tuple[bool, ...]
    midway: tuple[int, int] | None = None  # (term, tokens of it matched so far), while one is being written
    closing: bool = False  # its last token ended a term: the next one may not continue that word

    def bank(self, terms: Terms) -> int:
        """Constraint tokens met: the terms met in full, and the part of the one midway."""
        return sum(len(t) for t, m in zip(terms, self.met, strict=True) if m) + (self.midway[1] if self.midway else 0)

    def wanted(self, terms: Terms) -> set[int]:
        """The tokens that would bring this hypothesis closer to its terms."""
        out = {term[0] for term, m in zip(terms, self.met, strict=True) if not m}
        if self.midway is not None:
            j, done = self.midway
            out.add(terms[j][done])
        return out


def advance(terms: Terms, met: tuple[bool, ...], midway: tuple[int, int] | None, token: int):
    """The constraint state after `token`: (met, midway). The token continues the term midway, or else may start
    (or, for a one-token term, meet) the first term not met that begins with it."""
    if midway is not None:
        j, done = midway
        if terms[j][done] == token:
            if done + 1 == len(terms[j]):
                return (*met[:j], True, *met[j + 1 :]), None
            return met, (j, done + 1)
    for j, term in enumerate(terms):
        if not met[j] and term[0] == token:
            if len(term) == 1:
                return (*met[:j], True, *met[j + 1 :]), None
            return met, (j, 1)
    return met, None


def _after(terms: Terms, state: _State, token: int) -> _State:
    met, midway = advance(terms, state.met, state.midway, token)
    return _State(met, midway, closing=sum(met) > sum(state.met))


@dataclass
class TermContinuations:
    """beam.py's strategy for sentences with terms (the module's docstring). `constraints`: one SentenceTerms per
    sentence of the batch; `continues_word` (V,) bool on the device."""

    request: DecodeRequest
    constraints: Sequence[SentenceTerms]
    continues_word: Tensor | None = None
    eos: int = 2
    k: int = 0
    active: list[int] = field(default_factory=list)  # the sentence of each running position
    states: list[list[_State | None]] = field(default_factory=list)  # per running sentence, per live hypothesis
    pending: list[list[_State | None]] = field(default_factory=list)  # per running sentence, per continuation
    cuts: dict[int, list[tuple[int, Hypothesis]]] = field(default_factory=dict)  # (bank, hypothesis) at the limit

    def __post_init__(self) -> None:
        self.k = max(self.request.decode.beam_size, MIN_BEAM)
        self.terms = [[list(t) for t in c.terms] for c in self.constraints]
        self.active = list(range(len(self.constraints)))
        self.states = [[_State((False,) * len(terms))] for terms in self.terms]

    def take(self, steps: Steps, tokens: Tensor, scores: Tensor, t: int, histories: Sequence) -> tuple[Tensor, ...]:
        """This step's continuations in the order the beam takes them (beam.TopContinuations.take)."""
        d, (n, width) = self.request.decode, scores.shape
        log_probs = steps.step(tokens, t < d.min_len, self.request.repetition, histories)  # (n*width, V)
        self._restrict(log_probs, t, width)
        candidates = self._candidates(scores, log_probs, width)
        ordered = [self._allocated(candidates[i], i) for i in range(n)]
        m = max(self.k, *(len(x) for x in ordered))
        top_scores = torch.full((n, m), float("-inf"), dtype=torch.float64)
        origin, word = torch.zeros(n, m, dtype=torch.long), torch.zeros(n, m, dtype=torch.long)
        self.pending = [[None] * m for _ in range(n)]
        for i, row in enumerate(ordered):
            for j, (score, slot, token, state) in enumerate(row):
                top_scores[i, j], origin[i, j], word[i, j], self.pending[i][j] = score, slot, token, state
        return top_scores.float(), origin, word

    def _restrict(self, log_probs: Tensor, t: int, width: int) -> None:
        """EOS banned before every term is met, no piece continuing a term's word. Shape: log_probs (n*width, V),
        written over"""
        unmet, closing = [], []
        for i in range(len(self.active)):
            for slot, state in enumerate(self.states[i][:width]):
                if state is not None and not all(state.met):
                    unmet.append(i * width + slot)
                if state is not None and state.closing:
                    closing.append(i * width + slot)
        device, inf = log_probs.device, float("-inf")
        if unmet:
            log_probs[torch.tensor(unmet, device=device), self.eos] = inf
        if closing and self.continues_word is not None:
            rows = torch.tensor(closing, device=device)
            log_probs[rows] = log_probs[rows].masked_fill(self.continues_word, inf)

    def _candidates(self, scores: Tensor, log_probs: Tensor, width: int) -> list[dict[tuple[int, int], float]]:
        """Per running sentence, {(hypothesis slot, token): summed log-probability}: the 2k best continuations, each
        hypothesis's best token and its wanted tokens; all read from the device in one copy."""
        n, V = len(self.active), log_probs.size(-1)
        total = scores.reshape(n * width, 1).float() + log_probs  # (n*width, V)
        m = min(2 * self.k, width * V)
        top_scores, top_index = total.view(n, width * V).topk(m, dim=1)  # (n, m)
        best_scores, best_words = total.max(dim=1)  # (n*width,)
        pairs = [
            (i * width + slot, w)
            for i, s in enumerate(self.active)
            for slot, state in enumerate(self.states[i][:width])
            if state is not None
            for w in sorted(state.wanted(self.terms[s]))
        ]
        wanted = total[[r for r, _ in pairs], [w for _, w in pairs]] if pairs else total.new_zeros(0)
        # one copy to the host; ids < 2^24 are exact in float32
        parts = [top_scores.flatten(), top_index.flatten().to(total.dtype), best_scores, best_words.to(total.dtype)]
        host = torch.cat([*parts, wanted]).double().cpu().tolist()
        out: list[dict[tuple[int, int], float]] = [{} for _ in range(n)]
        nm = n * m
        for i in range(n):
            for j in range(m):
                index = int(host[nm + i * m + j])
                out[i][(index // V, index % V)] = host[i * m + j]
        for r in range(n * width):
            out[r // width][(r % width, int(host[2 * nm + n * width + r]))] = host[2 * nm + r]
        for (r, w), score in zip(pairs, host[2 * nm + 2 * n * width :], strict=True):
            out[r // width][(r % width, w)] = score
        return out

    def _allocated(self, candidates: dict[tuple[int, int], float], i: int) -> list[tuple[float, int, int, _State]]:
        """(summed log-probability, slot of origin, token, new state) in the order the beam takes them: round robin
        over the banks, highest first, best first within each (dynamic beam allocation); -inf left out."""
        terms, states = self.terms[self.active[i]], self.states[i]
        banks: dict[int, list[tuple[float, int, int, _State]]] = {}
        for (slot, token), score in candidates.items():
            if score == float("-inf") or slot >= len(states) or states[slot] is None:
                continue
            new = _after(terms, states[slot], token)
            banks.setdefault(new.bank(terms), []).append((score, slot, token, new))
        ranked = []
        for bank, members in banks.items():
            members.sort(key=lambda x: (-x[0], x[1], x[2]))  # best first; ties in a fixed order
            ranked += [(rank, -bank, member) for rank, member in enumerate(members)]
        ranked.sort(key=lambda x: (x[0], x[1]))
        return [member for _, _, member in ranked]

    def complete(self, i: int, j: int) -> bool:
        state = self.pending[i][j]
        return state is not None and all(state.met)

    def kept(self, sentences: Tensor, live: Tensor) -> None:
        self.states = [
            [self.pending[i][j] for j in row] for i, row in zip(sentences.tolist(), live.tolist(), strict=True)
        ]
        self.active = [self.active[i] for i in sentences.tolist()]

    def cut(self, sentence: int, j: int, hypothesis: Hypothesis) -> None:
        i = self.active.index(sentence)
        state, d = self.pending[i][j], self.request.decode
        score = hypothesis.log_prob / length_penalty(len(hypothesis.tokens), d.length_penalty, d.length_rule)
        bank = state.bank(self.terms[sentence]) if state is not None else 0
        cut = Hypothesis(hypothesis.tokens, hypothesis.log_prob, score, hypothesis.token_log_probs)
        self.cuts.setdefault(sentence, []).append((bank, cut))

    def short(self, sentence: int, n: int) -> list[Hypothesis]:
        return [h for _, h in sorted(self.cuts.get(sentence, []), key=lambda x: (-x[0], -x[1].score))[:n]]
