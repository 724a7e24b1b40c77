"""Lexically constrained beam search: each sentence's translation holds given token sequences (a glossary's target
terms, decode/glossary.py), with dynamic beam allocation (Post & Vilar 2018; fairseq's --constraints, Hu et al. 2019).

Every step, each sentence's candidates are the 2k best continuations of its k hypotheses (as in beam search), each
hypothesis's best token, and each hypothesis's next constraint token (the one that continues a term it is midway
through, and the first token of every term it has not met). A candidate's bank is how many constraint tokens it has
met; the k kept are taken from the banks in turn, best first within each, highest bank first, so that hypotheses
that have placed more of the terms survive beside the ones the model prefers. A term midway that the next token
does not continue is started again later. EOS is allowed only once every term is met; a hypothesis ends as in beam
search (search.beam_search: scored log_prob / length penalty, the tensor2tensor stopping rule or early_stopping).
Where no hypothesis has met every term by the length limit, the sentence ends with the best of those that met the
most, and the caller reports the terms missing (decode/translator.py).

Sentences without constraints never come here: search.search_ids sends them to the plain search, so a glossary
changes nothing for a sentence none of its terms occurs in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import DecodeStep, Hypothesis, _cannot_improve, _finish, length_penalty, start_steps

Terms = Sequence[Sequence[int]]  # one sentence's constraints: token ids of each term, one entry per occurrence
MIN_BEAM = 4  # a constrained sentence gets at least this many hypotheses: with fewer, terms go where they fit first


@dataclass(frozen=True)
class _Hyp:
    tokens: tuple[int, ...]
    log_probs: tuple[float, ...]
    score: float  # summed log-probability
    met: tuple[bool, ...]  # per term
    midway: tuple[int, int] | None  # (term, tokens of it matched so far), while one is being written

    def bank(self, terms: Terms) -> int:
        """Constraint tokens met: the terms met in full, and the part of the one midway."""
        return sum(len(t) for t, m in zip(terms, self.met, strict=True) if m) + (self.midway[1] if self.midway else 0)


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


def _wanted(terms: Terms, hyp: _Hyp) -> set[int]:
    """The tokens that would bring `hyp` closer to its terms."""
    out = {term[0] for term, m in zip(terms, hyp.met, strict=True) if not m}
    if hyp.midway is not None:
        j, done = hyp.midway
        out.add(terms[j][done])
    return out


@torch.no_grad()
def constrained_beam_search(
    model,
    src: Tensor,
    constraints: Sequence[Terms],
    request: DecodeRequest,
    cache: bool = True,
    step: DecodeStep | None = None,
) -> list[list[Hypothesis]]:
    """Beam search whose outputs hold each sentence's `constraints` (token ids of each term, one per occurrence;
    every sentence here has at least one). k = max(decode.beam_size, MIN_BEAM); the rest of `request` as
    search.beam_search reads it. Shape: src (B, S) -> B lists of at most n_best hypotheses, best first: those with
    every term (fewer than n_best where fewer were found), else (the limit reached first) the ones with the most."""
    d, n_best, repetition = request.decode, request.n_best, request.repetition
    alpha, rule, eos = d.length_penalty, d.length_rule, model.config.eos_id
    k, B = max(d.beam_size, MIN_BEAM), src.size(0)
    steps = start_steps(model, src, k, cache, step=step, ban_after_softmax=d.ban_after_softmax)
    limits = steps.limits(d.max_len_a, d.max_len_b)  # (B,)
    largest_penalty = length_penalty(limits.float() + d.forced_eos, alpha, rule)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]  # every term met
    short: list[list[tuple[int, Hypothesis]]] = [[] for _ in range(B)]  # (bank, hypothesis) cut at the limit
    terms = [[list(t) for t in c] for c in constraints]
    live = [[_Hyp((), (), 0.0, (False,) * len(terms[i]), None)] for i in range(B)]
    active = list(range(B))  # the sentence of each group of k rows
    tokens = steps.first
    for t in range(int(limits.max())):
        rows = [h for i in range(len(active)) for h in _padded(live[active[i]], k)]
        histories = [list(h.tokens) if h is not None else [] for h in rows] if repetition is not None else ()
        log_probs = steps.step(tokens, t < d.min_len, repetition, histories)  # (n*k, V)
        unmet = [r for r, h in enumerate(rows) if h is not None and not all(h.met)]
        if unmet:  # EOS only once every term is in
            log_probs[torch.tensor(unmet, device=log_probs.device), eos] = float("-inf")
        candidates = _candidates(log_probs, rows, active, terms, k)
        kept_rows, kept_tokens, still, positions = [], [], [], []
        for i, s in enumerate(active):
            new_live, origins, words = [], [], []
            for position, (origin, hyp, token) in enumerate(_allocated(candidates[i], live[s], terms[s])):
                if token == eos:  # EOS counts in the length, not among the tokens
                    if position < k:
                        _finish(finished[s], list(hyp.tokens[:-1]), hyp.score, True, k, alpha, rule, hyp.log_probs)
                elif len(new_live) < k:
                    new_live.append(hyp)
                    origins.append(i * k + origin)
                    words.append(token)
            if bool(limits[s] <= t + 1):  # the limit: hypotheses with every term end here, the others are short
                for hyp in new_live:
                    if all(hyp.met):
                        _finish(finished[s], list(hyp.tokens), hyp.score, d.forced_eos, k, alpha, rule, hyp.log_probs)
                    else:
                        score = hyp.score / length_penalty(len(hyp.tokens), alpha, rule)
                        cut = Hypothesis(list(hyp.tokens), hyp.score, score, hyp.log_probs)
                        short[s].append((hyp.bank(terms[s]), cut))
                continue
            reachable = max((h.score for h in new_live), default=float("-inf")) / float(largest_penalty[s])
            done = (
                len(finished[s]) >= k if d.early_stopping is True else _cannot_improve(finished[s], n_best, reachable)
            )
            if done or not new_live:
                continue
            live[s] = new_live
            still.append(s)
            positions.append(i)
            # rows of no hypothesis: copies of the first, never expanded (their score is -inf)
            kept_rows += origins + origins[:1] * (k - len(origins))
            kept_tokens += words + words[:1] * (k - len(words))
        if not still:
            break
        kept = None if len(still) == len(active) else torch.tensor(positions, device=src.device)
        steps.reorder(torch.tensor(kept_rows, device=src.device), kept)
        tokens = torch.tensor(kept_tokens, device=src.device)
        active = still
    out = []
    for s in range(B):
        if finished[s]:
            out.append(sorted(finished[s], key=lambda h: -h.score)[:n_best])
        else:  # no hypothesis met every term within the limit: those that met the most
            out.append([h for _, h in sorted(short[s], key=lambda x: (-x[0], -x[1].score))[:n_best]])
    return out


def _padded(hyps: list[_Hyp], k: int) -> list[_Hyp | None]:
    return hyps + [None] * (k - len(hyps))


def _candidates(
    log_probs: Tensor, rows: list[_Hyp | None], active: list[int], terms: list[Terms], k: int
) -> list[dict[tuple[int, int], float]]:
    """Per active sentence, {(hypothesis slot, token): summed log-probability}: the 2k best continuations, each
    hypothesis's best token and its wanted tokens; all read from the device in one copy."""
    n, V = len(active), log_probs.size(-1)
    base = torch.tensor([h.score if h is not None else float("-inf") for h in rows], device=log_probs.device)
    total = base[:, None] + log_probs  # (n*k, V)
    m = min(2 * k, V)
    top_scores, top_index = total.view(n, k * V).topk(m, dim=1)  # (n, m)
    best_scores, best_words = total.max(dim=1)  # (n*k,)
    pairs = [(r, w) for r, h in enumerate(rows) if h is not None for w in sorted(_wanted(terms[active[r // k]], h))]
    wanted = total[[r for r, _ in pairs], [w for _, w in pairs]] if pairs else total.new_zeros(0)
    # one copy to the host; ids < 2^24 are exact in float32
    parts = [top_scores.flatten(), top_index.flatten().to(total.dtype), best_scores, best_words.to(total.dtype), wanted]
    host = torch.cat(parts).double().cpu().tolist()
    out: list[dict[tuple[int, int], float]] = [{} for _ in range(n)]
    nm = n * m
    for i in range(n):
        for j in range(m):
            score, index = host[i * m + j], int(host[nm + i * m + j])
            out[i][(index // V, index % V)] = score
    for r in range(n * k):
        if rows[r] is not None:
            out[r // k][(r % k, int(host[2 * nm + n * k + r]))] = host[2 * nm + r]
    for (r, w), score in zip(pairs, host[2 * nm + 2 * n * k :], strict=True):
        out[r // k][(r % k, w)] = score
    return out


def _allocated(candidates: dict[tuple[int, int], float], hyps: list[_Hyp], terms: Terms) -> list[tuple[int, _Hyp, int]]:
    """(slot of origin, new hypothesis, token) in the order the beam takes them: round robin over the banks,
    highest first, best first within each (dynamic beam allocation); -inf candidates left out."""
    banks: dict[int, list[tuple[float, int, _Hyp, int]]] = {}
    for (slot, token), score in candidates.items():
        if score == float("-inf") or slot >= len(hyps):
            continue
        hyp = hyps[slot]
        met, midway = advance(terms, hyp.met, hyp.midway, token)
        new = _Hyp((*hyp.tokens, token), (*hyp.log_probs, score - hyp.score), score, met, midway)
        banks.setdefault(new.bank(terms), []).append((score, slot, new, token))
    ranked = []
    for bank, members in banks.items():
        members.sort(key=lambda x: (-x[0], x[1], x[3]))  # best first; ties in a fixed order
        ranked += [(rank, -bank, member) for rank, member in enumerate(members)]
    ranked.sort(key=lambda x: (x[0], x[1]))
    return [(slot, new, token) for _, _, (_, slot, new, token) in ranked]
