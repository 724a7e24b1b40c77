"""Continuous batching: sentences join a running search at the next decoding step and leave it the step they are done
(Orca, Yu et al. 2022: iteration-level scheduling), so none waits for another's end and none is computed again.

A server's batch no longer runs to its longest sentence while new requests wait for the next one: every step feeds the
rows of every sentence running, each at its own position, on one cache (nn/rows_cache.py); a new sentence is encoded
and its encoder-decoder keys/values added when it joins, and dropped when it leaves. Greedy search is
token_search's, beam search is beam.py's loop with TopContinuations (its `_finish` and `_go_on`, each sentence at its
own step), so a sentence's hypotheses are the ones search_ids gives it alone (tests/decode/test_continuous.py: rows
joining mid-batch, tokens equal, scores to 1e-4). What this search does not take (sampling, repetition rules, a
glossary's terms, a shortlist, a compiled or static step, a decoder-only model) `supports` says; search_ids serves
those.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from vaswani.decode.beam import TopContinuations, _Beams, _finish, _go_on, _Sentences
from vaswani.decode.continuations import best_continuations
from vaswani.decode.hypothesis import Finished, Hypothesis, length_penalty
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import collated, decoding
from vaswani.decode.steps import additive_mask, length_limits, log_softmax_
from vaswani.decode.top_words import row_argmax
from vaswani.families import TRANSLATE, family
from vaswani.nn.rows_cache import RowsKVCache

# Sentences join together, encoded as one batch, when so many wait, or once the first has waited that many steps (or
# at once into an empty batch): one at a time, encoding a single sentence and copying the cache for it cost a sizeable
# share of a full batch's step (measured with benchmarks/serve_offline.py's in-process search)
JOIN_AT = 2
Done = tuple[Hashable, list[Hypothesis]]  # a sentence's key and its hypotheses (n_best, best first)


def supports(model, request: DecodeRequest) -> str | None:
    """Why `request` cannot run as a continuous batch on `model`, or None where it can."""
    if TRANSLATE not in family(model.config.type).can:
        return "a decoder-only model"
    if request.decode.sampling:
        return "sampling"
    if request.repetition is not None:
        return "repetition rules"
    if request.glossary is not None:
        return "a glossary"
    return None


@dataclass(frozen=True)
class _Joining:
    key: Hashable
    ids: list[int]
    forced: int | None


class ContinuousSearch:
    """One running batch of `request`'s search: `add` a sentence (its source ids without EOS, and the token its
    output must start with, a many-to-many model's target language) and it joins at the next `step`; each step returns
    the sentences done at it, with their hypotheses. `drop` takes sentences out (a client gone). `precision`: as
    search_ids takes it (bf16: autocast)."""

    def __init__(self, model, request: DecodeRequest, precision: str = "fp32") -> None:
        why = supports(model, request)
        if why is not None:
            raise ValueError(f"continuous batching does not take {why}")
        self.model, self.request, self.precision = model, request, precision
        self.greedy = request.greedy
        self.k = 1 if self.greedy else request.decode.beam_size
        self.device = next(model.parameters()).device
        self.joining: list[_Joining] = []
        self.waited = 0  # steps the sentences joining have waited
        self._reset()
        c = model.config
        self.banned = torch.tensor([i for i in (c.pad_id, c.bos_id) if i != c.eos_id], device=self.device)

    def _reset(self) -> None:
        """Nothing running."""
        self.keys: list[Hashable] = []  # per running sentence, in the order of its rows
        self.taken: list[int] = []  # steps each has taken
        self.forced: list[int | None] = []
        self.sizes: list[int] = []  # source tokens each holds in the cache (its EOS counted)
        self.cache: RowsKVCache | None = None
        self.tokens = torch.zeros(0, dtype=torch.long, device=self.device)  # what the next step feeds each row
        self.out: list[list[int]] = []  # greedy: each sentence's tokens and their log-probabilities
        self.log_probs: list[list[float]] = []
        self.beams: _Beams | None = None
        self.sentences: _Sentences | None = None

    @property
    def running(self) -> int:
        """Sentences in the batch or joining it at the next step."""
        return len(self.keys) + len(self.joining)

    @property
    def source_tokens(self) -> int:
        """Source tokens of the sentences running or joining (a batch's budget counts them)."""
        return sum(self.sizes) + sum(len(j.ids) for j in self.joining)

    def add(self, key: Hashable, ids: Sequence[int], forced: int | None = None) -> None:
        """`ids` (a source without its EOS: model.source_end) joins at one of the next JOIN_AT steps; `key` names it
        in what `step` returns."""
        self.joining.append(_Joining(key, list(ids), forced))

    def clear(self) -> None:
        """Every sentence leaves, running or joining, without a result."""
        self.joining = []
        self._reset()

    def drop(self, keys: set) -> None:
        """The sentences `keys` leave without a result."""
        self.joining = [j for j in self.joining if j.key not in keys]
        if not any(key in keys for key in self.keys):
            return
        going = [i for i, key in enumerate(self.keys) if key not in keys]
        if not going:
            self._reset()
            return
        kept = torch.tensor(going, dtype=torch.long)
        rows = (kept[:, None] * self.k + torch.arange(self.k)).view(-1)
        with decoding(self.device, self.precision):  # the cache's tensors are inference tensors, written in place
            self.tokens = self.tokens.index_select(0, rows.to(self.device))
            self.reorder(rows.to(self.device), kept.to(self.device))
        if self.greedy:
            self._keep_sentences(kept)
            return
        b = self.beams
        b.active, b.history, b.token_log_probs = torch.arange(len(going)), b.history[kept], b.token_log_probs[kept]
        b.host_scores, b.begun = b.host_scores[kept], b.begun[kept]
        b.scores = b.host_scores.to(self.device)
        self._keep_sentences(kept)

    def step(self) -> list[Done]:
        """One decoding step of every running sentence, the joining ones first added; returns those done."""
        with decoding(self.device, self.precision):
            if self.joining and (len(self.joining) >= JOIN_AT or self.waited >= JOIN_AT or not self.keys):
                self._join()
                self.waited = 0
            elif self.joining:
                self.waited += 1
            if not self.keys:
                return []
            return self._greedy_step() if self.greedy else self._beam_step()

    def reorder(self, index: Tensor, kept: Tensor | None) -> None:
        """Rows `index` go on, sources `kept` (None: all) (beam._go_on's step protocol)."""
        self.cache.reorder(index, kept)

    def _join(self) -> None:
        joining, self.joining = self.joining, []
        model, c = self.model, self.model.config
        src = collated(model, [j.ids for j in joining], self.device)
        memory, mask = model.encode(src)
        cross_kv = model.decoder.start_cache(memory).cross_kv
        if self.cache is None:
            like = cross_kv[0][0]
            self.cache = RowsKVCache(len(cross_kv), like.size(1), like.size(3), self.k, like.dtype, like.device)
        self.cache.join(cross_kv, additive_mask(mask, cross_kv[0][0]))
        n, d = len(joining), self.request.decode
        self.tokens = torch.cat([self.tokens, self.tokens.new_full((n * self.k,), c.bos_id)])
        self.keys += [j.key for j in joining]
        self.taken += [0] * n
        self.forced += [j.forced for j in joining]
        sizes = (src != c.pad_id).sum(1).cpu()
        self.sizes += sizes.tolist()
        limits = length_limits(sizes, c, d.max_len_a, d.max_len_b)
        if self.greedy:
            self.limits = limits if len(self.keys) == n else torch.cat([self.limits, limits])
            self.out += [[] for _ in joining]
            self.log_probs += [[] for _ in joining]
            return
        self._join_beams(limits)

    def _join_beams(self, limits: Tensor) -> None:
        """New sentences' beams: k rows each, only the first live (as beam_search's first step of width 1)."""
        d, n, k = self.request.decode, limits.numel(), self.k
        largest = length_penalty(limits.float() + d.forced_eos, d.length_penalty, d.length_rule)
        finished = [Finished(k, d.length_penalty, d.length_rule) for _ in range(n)]
        new = _Beams.start(n, k, self.device)
        if self.beams is None:
            new.begun = torch.zeros(n, dtype=torch.long)
            self.sentences, self.beams = _Sentences(limits, largest, finished), new
            return
        s, b = self.sentences, self.beams
        self.sentences = _Sentences(
            torch.cat([s.limits, limits]),
            torch.cat([s.largest_penalty, largest]),
            [
                *s.finished,
                *finished,
            ],
        )
        t = b.history.size(2)  # the new ones begin after the columns held
        pad = lambda x: torch.cat([x, x.new_zeros(n, k, t)], dim=0)  # noqa: E731
        b.history, b.token_log_probs = pad(b.history), pad(b.token_log_probs)
        b.host_scores = torch.cat([b.host_scores, new.host_scores])
        b.scores = b.host_scores.to(self.device)
        b.active = torch.arange(b.host_scores.size(0))
        b.begun = torch.cat([b.begun, torch.full((n,), t, dtype=torch.long)])

    def _scores(self, normalize: bool = True) -> Tensor:
        """The step's next-token log-probabilities (logits where not `normalize`) of every row: PAD and BOS banned,
        EOS too in the rows of sentences that have taken fewer than decode.min_len steps, a forced first token
        scored 0 and every other -inf (steps.Steps.step's rules, per row). Shape: (rows, V) float32"""
        d, eos = self.request.decode, self.model.config.eos_id
        logits = self.model.rows_step(self.tokens, self.cache).float()
        young = [i * self.k + j for i, t in enumerate(self.taken) if t < d.min_len for j in range(self.k)]
        young_rows = torch.tensor(young, dtype=torch.long, device=self.device) if young else None
        if d.ban_after_softmax:
            scores = log_softmax_(logits) if normalize else logits
            scores[:, self.banned] = float("-inf")
            if young_rows is not None:
                scores[young_rows, eos] = float("-inf")
        else:
            logits[:, self.banned] = float("-inf")
            if young_rows is not None:
                logits[young_rows, eos] = float("-inf")
            scores = log_softmax_(logits) if normalize else logits
        if any(token is not None for token in self.forced):
            for i, (t, token) in enumerate(zip(self.taken, self.forced, strict=True)):
                if t == 0 and token is not None:  # as transformers' ForcedBOSTokenLogitsProcessor leaves a row
                    scores[i * self.k : (i + 1) * self.k] = float("-inf")
                    scores[i * self.k : (i + 1) * self.k, token] = 0.0
        return scores

    def _greedy_step(self) -> list[Done]:
        """token_search's greedy step, each sentence at its own step."""
        asked, eos = self.request.scores, self.model.config.eos_id
        scores = self._scores(normalize=asked)
        tokens = row_argmax(scores)
        picked = scores.gather(1, tokens[:, None]).squeeze(1).double().tolist() if asked else None
        done, going = [], []
        for i, token in enumerate(tokens.tolist()):
            self.taken[i] += 1
            if asked:
                self.log_probs[i].append(picked[i])
            if token != eos:
                self.out[i].append(token)
            if token == eos or self.limits[i] <= self.taken[i]:
                log_probs = self.log_probs[i]
                if not asked:
                    hyp = Hypothesis(self.out[i], math.nan, math.nan)
                else:
                    total = sum(log_probs)  # added one step at a time in float64, as token_search's
                    hyp = Hypothesis(self.out[i], total, total, tuple(log_probs))
                done.append((self.keys[i], [hyp]))
            else:
                going.append(i)
        self._leave(going, tokens)
        return done

    def _leave(self, going: list[int], tokens: Tensor) -> None:
        """Greedy: the sentences `going` go on, feeding their `tokens` next."""
        if not going:
            self._reset()
            return
        if len(going) == len(self.keys):
            self.tokens = tokens
            return
        kept = torch.tensor(going, dtype=torch.long, device=self.device)
        self.tokens = tokens.index_select(0, kept)
        self.cache.reorder(kept, kept)
        self._keep_sentences(kept.cpu())

    def _keep_sentences(self, kept: Tensor) -> None:
        """Per-sentence state of the sentences `kept` (their positions), in that order."""
        keep = kept.tolist()
        self.keys = [self.keys[i] for i in keep]
        self.taken = [self.taken[i] for i in keep]
        self.forced = [self.forced[i] for i in keep]
        self.sizes = [self.sizes[i] for i in keep]
        if self.greedy:
            self.limits = self.limits[kept]
            self.out = [self.out[i] for i in keep]
            self.log_probs = [self.log_probs[i] for i in keep]
            return
        s = self.sentences
        self.sentences = _Sentences(s.limits[kept], s.largest_penalty[kept], [s.finished[i] for i in keep])
        b = self.beams
        first = int(b.begun.min())
        if first:  # the columns every sentence left behind
            b.history, b.token_log_probs, b.begun = (
                b.history[..., first:],
                b.token_log_probs[..., first:],
                b.begun - first,
            )

    def _beam_step(self) -> list[Done]:
        """beam_search's step (TopContinuations: the paper's beam), each sentence at its own step."""
        request, k, b = self.request, self.k, self.beams
        n, strategy = len(self.keys), TopContinuations(request, len(self.keys))
        top_scores, origin, word = best_continuations(b.scores, self._scores(), n, k, 2 * k)
        word_log_probs = top_scores - b.host_scores.gather(1, origin)  # (n, m): each continuation's last token
        candidates = top_scores, origin, word, word_log_probs
        t = torch.tensor(self.taken)
        live, done = _finish(self.model.config.eos_id, request, strategy, b, candidates, self.sentences, t)
        finished = [
            (self.keys[i], self.sentences.finished[i].best(request.n_best)) for i in done.nonzero().squeeze(1).tolist()
        ]
        self.taken = [x + 1 for x in self.taken]
        if done.all():
            self._reset()
            return finished
        self.tokens = _go_on(self, strategy, b, candidates, live, done)
        kept = b.active  # _go_on kept the sentences not done, in order
        b.active = torch.arange(kept.numel())
        self._keep_sentences(kept)
        return finished
