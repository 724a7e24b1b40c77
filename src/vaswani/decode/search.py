"""Search: the one entry that decodes token ids in batches (`search_ids`), and the searches it chooses from.

    greedy and sampling: decode/token_search.py      beam search, one loop with strategies: decode/beam.py
    a glossary's terms in the beam: decode/terms.py  the step protocol and its steps: decode/steps.py

The names below are this module's public ones: callers import the searches from here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from vaswani.data.batching import collate
from vaswani.decode.beam import beam_search
from vaswani.decode.continuations import best_continuations, packed_continuations, unpacked_continuations
from vaswani.decode.hypothesis import Hypothesis, length_penalty
from vaswani.decode.request import DecodeRequest
from vaswani.decode.shortlist import Shortlist
from vaswani.decode.steps import (
    DecoderOnlySteps,
    DecodeStep,
    EncoderDecoderSteps,
    ShortlistStep,
    Steps,
    additive_mask,
    banned_log_probs,
    compiled_step,
    length_limits,
    log_softmax_,
    max_lengths,
    start_steps,
)
from vaswani.decode.terms import Constraints, TermContinuations
from vaswani.decode.token_search import DEFAULT, filtered_probs, greedy, sample, sampler
from vaswani.runtime.device import autocast

__all__ = [
    "DEFAULT",
    "Constraints",
    "DecodeStep",
    "DecoderOnlySteps",
    "EncoderDecoderSteps",
    "Hypothesis",
    "PerSource",
    "ShortlistStep",
    "Steps",
    "additive_mask",
    "banned_log_probs",
    "beam_search",
    "best_continuations",
    "compiled_step",
    "decoding",
    "filtered_probs",
    "greedy",
    "length_batches",
    "length_limits",
    "length_penalty",
    "log_softmax_",
    "max_lengths",
    "packed_continuations",
    "sample",
    "sampler",
    "search_ids",
    "start_steps",
    "unpacked_continuations",
]


@contextlib.contextmanager
def decoding(device: torch.device, precision: str) -> Iterator[None]:
    """Where decoding runs a model, the one place it enters: no autograd; bf16 autocast when `precision` is bf16."""
    with torch.inference_mode(), autocast(device, precision):
        yield


def length_batches(sources: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """Indices of `sources` in batches of `batch_size`, longest first, so each batch pads little."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]), reverse=True)
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def search_ids(
    model,
    sources: Sequence[Sequence[int]],
    request: DecodeRequest = DEFAULT,
    precision: str = "fp32",
    progress: Callable[[int], None] | None = None,
    step: DecodeStep | None = None,
    shortlist: Shortlist | None = None,
    asked: PerSource | None = None,
) -> list[list[Hypothesis]]:
    """Translate tokenized sources (without the EOS appended to each: model.source_end) in batches of similar length;
    results in input order.

    Greedy search where the request is greedy (DecodeRequest.greedy), else beam search; with decode.sampling,
    `n_best` samples per sentence. `asked`: what each source asks of its output besides the request (PerSource: a
    glossary's terms, the token it starts with). `progress(n)` is called after each batch with the number of
    sentences done in it. `step`: see steps.start_steps. `shortlist`: each batch's output layer covers the words its
    sources may produce (decode/shortlist.py; with the model's own step, `step` None), a glossary's terms included.
    """
    asked = asked or PerSource()
    constraints, forced = asked.constraints, asked.forced
    if forced is not None and len(forced) != len(sources):
        raise ValueError(f"{len(forced)} forced tokens for {len(sources)} sources")
    if shortlist is not None and step is not None:
        raise ValueError("a shortlist runs on the model's own step (step=None), not on a compiled or static one")
    if constraints is not None and not isinstance(constraints, Constraints):
        constraints = Constraints.of(constraints)  # per source, the token ids of each term
    search = _Batches(model, request, precision, step, constraints, shortlist)
    out: list[list[Hypothesis]] = [[] for _ in sources]
    for chunk in length_batches(sources, request.decode.batch_size):
        bound = [i for i in chunk if constraints and constraints[i]]  # sentences with terms
        free = [i for i in chunk if not (constraints and constraints[i])]
        with decoding(search.device, precision):
            for i, hyps in zip(free, search.free([sources[i] for i in free], _of(forced, free)), strict=True):
                out[i] = hyps
            for i, hyps in zip(
                bound, search.bound([sources[i] for i in bound], bound, _of(forced, bound)), strict=True
            ):
                out[i] = hyps
        if progress is not None:
            progress(len(chunk))
    return out


@dataclass(frozen=True)
class PerSource:
    """What each source asks of its output besides the request. `constraints` (decode/terms.py): what it must hold
    (a glossary's terms): a source with any is searched by beam search with the terms' strategy in the same batch,
    one without exactly as with none. `forced`: the token it starts with (a many-to-many model's target language,
    transformers' forced_bos_token_id: scored 0, counted in the length), so that sources asking for different
    languages share a batch. None: nothing asked."""

    constraints: Constraints | Sequence[Sequence[Sequence[int]]] | None = None
    forced: Sequence[int] | None = None


def collated(model, sources: Sequence[Sequence[int]], device: torch.device) -> Tensor:
    """Sources as one padded batch, each with the model's EOS where it takes one. Shape: -> (B, S) on `device`"""
    c = model.config
    return collate([(s, []) for s in sources], c.pad_id, c.bos_id, c.eos_id, c.source_eos).src.to(device)


def _of(forced: Sequence[int] | None, indices: Sequence[int]) -> Tensor | None:
    """The forced tokens of these sources. Shape: -> (B,)"""
    return None if forced is None else torch.tensor([forced[i] for i in indices], dtype=torch.long)


class _Batches:
    """search_ids' batches: the sources collated, the step chosen (a shortlist's per batch), the search run."""

    def __init__(self, model, request: DecodeRequest, precision: str, step, constraints, shortlist) -> None:
        self.model, self.request, self.step, self.constraints, self.shortlist = (
            model,
            request,
            step,
            constraints,
            shortlist,
        )
        self.device = next(model.parameters()).device
        d = request.decode
        self.generator = torch.Generator(self.device).manual_seed(d.seed) if d.sampling else None
        self.continues_word = None
        if constraints and constraints.continues_word:
            mask = torch.zeros(model.config.tgt_vocab_size, dtype=torch.bool)
            mask[list(constraints.continues_word)] = True
            self.continues_word = mask.to(self.device)

    def _src(self, sources: Sequence[Sequence[int]]) -> Tensor:
        return collated(self.model, sources, self.device)

    def _step(self, src: Tensor, terms: Sequence[Sequence[int]] = ()) -> DecodeStep | None:
        if self.shortlist is None:
            return self.step
        words, allowed = self.shortlist.words(src, [list(ids) for ids in terms], self.model.config.pad_id)
        return ShortlistStep(self.model, words, allowed)

    def free(self, sources: Sequence[Sequence[int]], forced: Tensor | None = None) -> list[list[Hypothesis]]:
        """The request's search over sources without terms (`forced`: see search_ids)."""
        if not sources:
            return []
        model, request, src = self.model, self.request, self._src(sources)
        step = self._step(src)
        forced = None if forced is None else forced.to(self.device)
        if request.decode.sampling:
            draws = [
                sample(model, src, request, self.generator, step=step, forced=forced) for _ in range(request.n_best)
            ]
            return [sorted(hyps, key=lambda h: -h.score) for hyps in zip(*draws, strict=True)]
        if request.greedy:
            return [[h] for h in greedy(model, src, request, step=step, forced=forced)]
        return beam_search(model, src, request, step=step, forced=forced)

    def bound(
        self, sources: Sequence[Sequence[int]], indices: Sequence[int], forced: Tensor | None = None
    ) -> list[list[Hypothesis]]:
        """Beam search with the terms' strategy over sources with terms (`indices`: their places in the input)."""
        if not sources:
            return []
        src, sentences = self._src(sources), [self.constraints[i] for i in indices]
        words = [[i for ids in c.terms for i in ids] for c in sentences]  # a shortlist's extra words
        strategy = TermContinuations(self.request, sentences, self.continues_word, self.model.config.eos_id)
        step = self._step(src, words)
        forced = None if forced is None else forced.to(self.device)
        return beam_search(self.model, src, self.request, step=step, strategy=strategy, forced=forced)
