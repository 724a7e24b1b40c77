"""Token by token: greedy search and sampling, one row per input, each input leaving the batch when it ends."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from vaswani.decode.hypothesis import Hypothesis
from vaswani.decode.request import DecodeRequest
from vaswani.decode.steps import DecodeStep, histories_of, start_steps
from vaswani.decode.top_words import row_argmax

DEFAULT = DecodeRequest()  # the paper's search (§6.1): beam 4, α 0.6, input length + 50


@dataclass(frozen=True)
class Run:
    """How a token-by-token search runs, beside its request: on the KV cache (`cache=False` re-runs the prefix at
    every step: the reference), stopping at EOS (`stop_at_eos=False` keeps EOS as a token, a language model's line
    break, and runs to the limit), `on_step(tokens)` seeing each step's picks (rows still running, in input order),
    a language model's window (`context`), and what runs the model's step (`step`: see steps.start_steps)."""

    cache: bool = True
    stop_at_eos: bool = True
    on_step: Callable[[Tensor], None] | None = None
    context: int | None = None
    step: DecodeStep | None = None
    forced: Tensor | None = None  # (B,) the token each output starts with (steps.start_steps), None: none


def _token_by_token(
    model, src: Tensor, request: DecodeRequest, choose: Callable[[Tensor], Tensor], run: Run
) -> list[Hypothesis]:
    """One token per step picked by `choose(log_probs) -> (rows,)`, rows dropped as their input ends (`run`)."""
    c, d, repetition = model.config, request.decode, request.repetition
    scores = request.scores or choose is not row_argmax  # a sample's draw needs the probabilities
    steps = start_steps(model, src, 1, run.cache, run.context, run.step, d.ban_after_softmax, run.forced)
    stop_at_eos, on_step = run.stop_at_eos, run.on_step
    B = src.size(0)
    limits = steps.limits(d.max_len_a, d.max_len_b)  # (B,)
    out = torch.full((B, int(limits.max())), c.pad_id, dtype=torch.long)
    lengths = torch.zeros(B, dtype=torch.long)
    log_probs = torch.zeros(B, dtype=torch.float64)
    token_log_probs = torch.zeros(B, out.size(1), dtype=torch.float64)  # of each token chosen, EOS's too
    chose_eos = torch.zeros(B, dtype=torch.bool)
    active = torch.arange(B)  # input of each row
    tokens = steps.first
    for t in range(out.size(1)):
        histories = histories_of(steps, active, out[active, :t]) if repetition is not None else ()
        next_log_probs = steps.step(tokens, t < d.min_len, repetition, histories, scores)  # (rows, V)
        tokens = choose(next_log_probs)  # (rows,)
        if on_step is not None:
            on_step(tokens)
        if scores:
            picked = next_log_probs.gather(1, tokens[:, None]).squeeze(1)
            # one copy to the host per step (each is a synchronisation on a GPU); ids < 2^24 are exact in float32
            picked, cpu_tokens = torch.stack([picked, tokens.to(picked.dtype)]).cpu()
            log_probs[active] += picked.double()
            token_log_probs[active, t] = picked.double()
        else:
            cpu_tokens = tokens.cpu()
        cpu_tokens = cpu_tokens.long()
        ended = cpu_tokens == c.eos_id if stop_at_eos else torch.zeros(len(active), dtype=torch.bool)
        chose_eos[active[ended]] = True
        out[active[~ended], t] = cpu_tokens[~ended]
        lengths[active[~ended]] = t + 1
        ended |= limits[active] <= t + 1
        if ended.all():
            break
        if ended.any():
            keep = (~ended).nonzero().squeeze(1)
            active = active[keep]
            keep = keep.to(src.device)
            tokens = tokens.index_select(0, keep)
            steps.reorder(keep, kept=keep)
    if not scores:  # not asked for: unknown (NaN; confidence None)
        return [Hypothesis(out[i, : lengths[i]].tolist(), math.nan, math.nan) for i in range(B)]
    return [
        Hypothesis(
            out[i, : lengths[i]].tolist(),
            float(log_probs[i]),
            float(log_probs[i]),
            tuple(token_log_probs[i, : lengths[i] + chose_eos[i]].tolist()),
        )
        for i in range(B)
    ]


@torch.no_grad()
def greedy(model, src: Tensor, request: DecodeRequest = DEFAULT, **run: Any) -> list[Hypothesis]:
    """The most probable token at each step; EOS is not allowed before decode.min_len tokens. Of `request` it reads
    the length limits, min_len, ban_after_softmax and the repetition rules.
    `src`: a Transformer's sources, or a CausalLM's prompts (equal lengths). `run`: `Run`'s fields (cache,
    stop_at_eos, on_step, context, step). Shape: src (B, S) -> B hypotheses"""
    return _token_by_token(model, src, request, row_argmax, Run(**run))


@torch.no_grad()
def sample(
    model, src: Tensor, request: DecodeRequest = DEFAULT, generator: torch.Generator | None = None, **run: Any
) -> list[Hypothesis]:
    """Ancestral sampling from softmax(logits / temperature), restricted to the `top_k` most probable
    tokens (0: all) and to the smallest set whose probability reaches `top_p` (nucleus sampling,
    Holtzman et al. 2020): request.decode's, with its limits as greedy reads them. Pass a seeded `generator` for
    repeatable samples. The other arguments: see greedy. Shape: src (B, S) -> B hypotheses
    """
    d = request.decode
    choose = sampler(d.temperature, d.top_k, d.top_p, generator)
    return _token_by_token(model, src, request, choose, Run(**run))


def sampler(
    temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, generator: torch.Generator | None = None
) -> Callable[[Tensor], Tensor]:
    """`choose(logits) -> tokens` drawing from the filtered distribution (see `sample`)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (got {temperature}); use greedy search for temperature 0")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (got {top_p})")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (got {top_k})")

    def choose(logits: Tensor) -> Tensor:
        return torch.multinomial(filtered_probs(logits, temperature, top_k, top_p), 1, generator=generator).squeeze(1)

    return choose


def filtered_probs(logits: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """softmax(logits / temperature) over the top_k best tokens and the nucleus of mass top_p, renormalised.
    Shape: (rows, V) -> (rows, V)"""
    scores = logits / temperature
    if 0 < top_k < scores.size(-1):
        kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (rows, 1)
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        probs = sorted_scores.softmax(-1)
        outside = probs.cumsum(-1) - probs >= top_p  # the better tokens already reach top_p
        drop = torch.zeros_like(outside).scatter(1, order, outside)  # back to vocabulary order
        scores = scores.masked_fill(drop, float("-inf"))
    return scores.softmax(-1)
