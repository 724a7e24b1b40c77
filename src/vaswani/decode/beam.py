"""Beam search: one loop for every beam, with what the beam takes at each step plugged in as a strategy.

The loop (`beam_search`) runs a whole batch in one tensor of B x k rows (§6.1: beam 4, α 0.6). Each step its
strategy hands it each sentence's continuations (hypothesis, next word, summed log-probability) in the order the
beam takes them: `TopContinuations`, the paper's, the 2k best by log-probability; decode/terms.py's
`TermContinuations`, a glossary's, whose order makes room for hypotheses that have placed more of their terms
(dynamic beam allocation). Then, alike for every strategy, an EOS among the first k finishes a hypothesis, scored
log_prob / length_penalty, and the k best finished ones are kept; the first k other continuations stay live. A
sentence is done, and leaves the batch, when
- no live hypothesis can still beat its n_best-th finished one: a live score can only fall, so the best it can
  reach is log_prob / length_penalty(maximum length) (tensor2tensor's rule, the paper's code; the default), or,
  with `early_stopping`, as soon as k hypotheses have finished (fairseq's rule, and Hugging Face's
  early_stopping=True: faster, favours short outputs), or, with early_stopping "heuristic" (Hugging Face's
  early_stopping=False), when k have finished and the best live one, scored at its current length, does not beat
  the worst of them;
- or it reaches its maximum length: the best k continuations of that step finish as they are (those the strategy
  calls complete; it keeps the others as the best it could do), or, with `forced_eos` (transformers'
  forced_eos_token_id), every live one finishes with an EOS that costs nothing and counts in its length.
With beam_size 1 and `early_stopping` this is exactly greedy search. EOS is not allowed before decode.min_len tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from vaswani.decode.continuations import best_continuations
from vaswani.decode.hypothesis import Finished, Hypothesis, length_penalty
from vaswani.decode.request import DecodeRequest
from vaswani.decode.steps import DecodeStep, Steps, histories_of, start_steps
from vaswani.decode.token_search import DEFAULT

# (n, m) each on the CPU: summed log-probabilities, hypothesis, word (a strategy's `take`), and the word's own
# log-probability (beam_search adds it)
Candidates = tuple[Tensor, ...]


@dataclass(frozen=True)
class _Sentences:
    """What beam search holds per sentence for its whole run: the length limit (B,), the length penalty of a
    hypothesis ending at it (B,), and the finished hypotheses."""

    limits: Tensor
    largest_penalty: Tensor
    finished: list[Finished]


class TopContinuations:
    """The paper's beam: each sentence's 2k best continuations by summed log-probability, best first. Every
    continuation is complete (may finish)."""

    def __init__(self, request: DecodeRequest, n_sentences: int) -> None:
        self.request = request
        self.k = request.decode.beam_size

    def take(self, steps: Steps, tokens: Tensor, scores: Tensor, t: int, histories: Sequence) -> Candidates:
        """This step's continuations of the n sentences' `width` hypotheses each (`scores`: (n, width) on the
        device), in the order the beam takes them."""
        d, (n, width) = self.request.decode, scores.shape
        if self.request.repetition is None:  # the step and its top-k in one (a static step's single graph)
            return steps.best_continuations(tokens, scores, n, width, 2 * self.k, t < d.min_len, t + 1 < d.min_len)
        log_probs = steps.step(tokens, t < d.min_len, self.request.repetition, histories)  # (n*width, V)
        return best_continuations(scores, log_probs, n, width, 2 * self.k)

    def complete(self, i: int, j: int) -> bool:
        """Whether continuation j of the i-th running sentence may finish."""
        return True

    def kept(self, sentences: Tensor, live: Tensor) -> None:
        """The running sentences that go on (their positions) and, for each, the continuations that stay live."""

    def cut(self, sentence: int, j: int, hypothesis: Hypothesis) -> None:
        """An incomplete continuation stopped by the length limit."""

    def short(self, sentence: int, n: int) -> list[Hypothesis]:
        """A sentence's best incomplete outputs, where none finished complete."""
        return []


@dataclass
class _Beams:
    """The live hypotheses: `active[i]` is the sentence of the i-th group of `width` rows; per hypothesis its tokens
    and their log-probabilities so far and its summed log-probability, on the host (`scores` on the device too)."""

    active: Tensor  # (n,)
    width: int
    history: Tensor  # (n, width, t)
    token_log_probs: Tensor  # (n, width, t)
    host_scores: Tensor  # (n, width)
    scores: Tensor  # (n, width) on the device
    begun: Tensor | None = None  # (n,) where each sentence's tokens begin in `history`; None: at 0 (all began together)

    def past(self, i: int) -> tuple[list[list[int]], list[list[float]]]:
        """The i-th sentence's hypotheses: each one's tokens and their log-probabilities, as lists."""
        start = 0 if self.begun is None else int(self.begun[i])
        return self.history[i, :, start:].tolist(), self.token_log_probs[i, :, start:].tolist()

    @classmethod
    def start(cls, B: int, width: int, device: torch.device) -> _Beams:
        host_scores = torch.full((B, width), float("-inf"))
        host_scores[:, 0] = 0.0  # only one of identical rows may expand
        empty = torch.zeros(B, width, 0, dtype=torch.long)
        return cls(torch.arange(B), width, empty, torch.zeros(B, width, 0), host_scores, host_scores.to(device))


@torch.no_grad()
def beam_search(
    model,
    src: Tensor,
    request: DecodeRequest = DEFAULT,
    cache: bool = True,
    step: DecodeStep | None = None,
    strategy: TopContinuations | None = None,
    forced: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Beam search (the module's rules) over `src`: sources of a Transformer or prompts of a CausalLM. `request`:
    k = decode.beam_size (the strategy's k), α = decode.length_penalty in the form of decode.length_rule, n_best,
    the stopping rule, the limits and the repetition rules (decode/repetition.py). `step`: see steps.start_steps.
    `strategy`: what the beam takes at each step (TopContinuations by default). `forced` (B,): the token each
    output starts with (steps.start_steps).
    Shape: src (B, S) -> B lists of n_best hypotheses, best first"""
    d, B = request.decode, src.size(0)
    strategy = strategy or TopContinuations(request, B)
    k = strategy.k
    # All k hypotheses of a sentence start identical, so the first step runs one row per sentence (width 1)
    # and its 2k best continuations fill the beam; with fewer than 2k words, k rows of which only one counts.
    width = 1 if model.config.tgt_vocab_size >= 2 * k else k
    steps = start_steps(model, src, width, cache, step=step, ban_after_softmax=d.ban_after_softmax, forced=forced)
    limits = steps.limits(d.max_len_a, d.max_len_b)  # (B,)
    largest_penalty = length_penalty(limits.float() + d.forced_eos, d.length_penalty, d.length_rule)
    sentences = _Sentences(limits, largest_penalty, [Finished(k, d.length_penalty, d.length_rule) for _ in range(B)])
    beams, tokens = _Beams.start(B, width, src.device), steps.first
    for t in range(int(limits.max())):
        histories = _histories(steps, beams) if request.repetition is not None else ()
        top_scores, origin, word = strategy.take(steps, tokens, beams.scores, t, histories)
        word_log_probs = top_scores - beams.host_scores.gather(1, origin)  # (n, m): each continuation's last token
        candidates = top_scores, origin, word, word_log_probs
        live, done = _finish(model.config.eos_id, request, strategy, beams, candidates, sentences, t)
        if done.all():
            break
        tokens = _go_on(steps, strategy, beams, candidates, live, done)
    finished = sentences.finished
    return [f.best(request.n_best) or strategy.short(s, request.n_best) for s, f in enumerate(finished)]


def _histories(steps: Steps, beams: _Beams) -> list[list[int]]:
    """Each row's tokens so far, a prompt's included; rows of one input are consecutive."""
    n, width = beams.history.shape[:2]
    generated = beams.history.reshape(n * width, -1, 1)[..., 0]
    return histories_of(steps, beams.active.repeat_interleave(width), generated)


def _finish(
    eos: int,
    request: DecodeRequest,
    strategy: TopContinuations,
    beams: _Beams,
    candidates: Candidates,
    sentences: _Sentences,
    t: int | Tensor,
) -> tuple[Tensor, Tensor]:
    """The hypotheses that finish at this step (`t`: the step, or each sentence's (n,) where they began at different
    steps: decode/continuous.py), added to their sentences' finished ones; returns the continuations that stay live
    (n, k) and which sentences are done (n,)."""
    top_scores, origin, word, word_log_probs = candidates
    k, forced_eos, finished = strategy.k, request.decode.forced_eos, sentences.finished
    is_eos = word == eos
    # The first k non-EOS continuations stay live (stable order: the order the strategy gave).
    rank = torch.arange(word.size(1)) + is_eos * word.size(1)
    live = rank.argsort(dim=1)[:, :k]  # (n, k)
    at_limit = sentences.limits[beams.active] <= t + 1  # (n,) the last step these sentences may take
    sentence = beams.active.tolist()
    ends = (is_eos[:, :k] & (top_scores[:, :k] > float("-inf"))).nonzero().tolist()  # EOS among the first k
    at_limit_rows = at_limit.nonzero().squeeze(1).tolist()
    if ends or at_limit_rows:  # Python lists: indexing tensors one element at a time costs far more (a GPU waits)
        scores_l, origin_l, word_l, word_lp_l = (x.tolist() for x in (top_scores, origin, word, word_log_probs))
        eos_l = is_eos[:, :k].tolist()
        past = {i: beams.past(i) for i in {i for i, _ in ends} | set(at_limit_rows)}
        for i, j in ends:
            tokens, lps = past[i][0][origin_l[i][j]], past[i][1][origin_l[i][j]]
            finished[sentence[i]].add(tokens, scores_l[i][j], True, [*lps, word_lp_l[i][j]])
        for i in at_limit_rows:
            # the live ones with a forced EOS, or the k best continuations (their EOS ones finished above)
            ending = live[i].tolist() if forced_eos else [j for j in range(k) if not eos_l[i][j]]
            for j in ending:
                tokens, lps = past[i][0][origin_l[i][j]], past[i][1][origin_l[i][j]]
                # a forced EOS is no choice of the model's: not among the token log-probabilities
                tokens, lps = [*tokens, word_l[i][j]], [*lps, word_lp_l[i][j]]
                if strategy.complete(i, j):
                    finished[sentence[i]].add(tokens, scores_l[i][j], forced_eos, lps)
                elif scores_l[i][j] != float("-inf"):
                    hyp = Hypothesis(tokens, scores_l[i][j], 0.0, tuple(lps))
                    strategy.cut(sentence[i], j, hyp)
    return live, at_limit | _stopped(request, k, beams, top_scores, live, sentences, t)


def _stopped(
    request: DecodeRequest,
    k: int,
    beams: _Beams,
    top_scores: Tensor,
    live: Tensor,
    sentences: _Sentences,
    t: int | Tensor,
) -> Tensor:
    """Which running sentences can stop: the request's stopping rule (the module's docstring). Shape: (n,)"""
    d, sentence, finished = request.decode, beams.active.tolist(), sentences.finished
    if d.early_stopping is True:
        return torch.tensor([len(finished[s]) >= k for s in sentence])
    best_live = top_scores.gather(1, live).max(dim=1).values  # (n,)
    if d.early_stopping == "heuristic":  # the best live score at its current length (transformers')
        penalty = length_penalty(t + 1 if isinstance(t, int) else (t + 1).double(), d.length_penalty, d.length_rule)
        current = (best_live / (penalty if isinstance(t, int) else penalty.to(best_live.dtype))).tolist()
        return torch.tensor([finished[s].cannot_improve(k, r) for s, r in zip(sentence, current, strict=True)])
    # the best live score, were it to end at the length limit with nothing more lost
    reachable = (best_live / sentences.largest_penalty[beams.active]).tolist()
    return torch.tensor(
        [finished[s].cannot_improve(request.n_best, r) for s, r in zip(sentence, reachable, strict=True)]
    )


def _go_on(
    steps: Steps,
    strategy: TopContinuations,
    beams: _Beams,
    candidates: Candidates,
    live: Tensor,
    done: Tensor,
) -> Tensor:
    """The live hypotheses of the sentences not done become the next step's rows (`beams` updated, the steps'
    rows reordered); returns the tokens the next step feeds. Shape: -> (n' * k,) on the device"""
    n, device = beams.active.numel(), beams.scores.device
    keep = (~done).nonzero().squeeze(1)  # (n',)
    live = live[keep]  # (n', k)
    strategy.kept(keep, live)
    top_scores, new_origin, words, word_log_probs = (x[keep].gather(1, live) for x in candidates)  # (n', k) each
    beams.history = torch.cat([beams.history[keep[:, None], new_origin], words[..., None]], dim=2)
    beams.token_log_probs = torch.cat([beams.token_log_probs[keep[:, None], new_origin], word_log_probs[..., None]], 2)
    beams.host_scores = top_scores
    # to the device without waiting for it (a copy that waits would stall a chained static step, decode/static.py);
    # the host's memory is staged at once, so these temporaries may go
    to_device = lambda x: x.to(device, non_blocking=True)  # noqa: E731
    beams.scores = to_device(beams.host_scores)
    tokens = to_device(words.view(-1))
    rows = to_device((keep[:, None] * beams.width + new_origin).view(-1))  # (n'*k,)
    steps.reorder(rows, kept=None if keep.numel() == n else to_device(keep))
    beams.active, beams.width = beams.active[keep], live.size(1)
    if beams.begun is not None:
        beams.begun = beams.begun[keep]
    return tokens
