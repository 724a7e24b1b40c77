"""Search on the decoder's KV cache: greedy, batched beam search, and sampling.

Every search drives the step protocol (`Steps`: start, step, reorder), so it works alike for the
encoder-decoder Transformer (each source encoded once) and a decoder-only CausalLM (prompts put in
the cache once). Each step feeds one token per row on the KV cache; inputs that have finished drop
out of the batch, so they stop costing compute. `cache=False` re-runs the whole prefix at every step
instead: the reference the cached search is tested and benchmarked against.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.config import ModelConfig
from vaswani.data.batching import collate
from vaswani.decode.repetition import Repetition
from vaswani.decode.request import DecodeRequest
from vaswani.decode.shortlist import Shortlist
from vaswani.decode.top_words import row_argmax, row_topk
from vaswani.families import GENERATE, TRANSLATE, family
from vaswani.nn import KVCache, Transformer
from vaswani.nn.cache import GrowingKVCache, dense
from vaswani.nn.transformer import OutputRows
from vaswani.runtime import autocast, compiling

DEFAULT = DecodeRequest()  # the paper's search (§6.1): beam 4, α 0.6, input length + 50

DecodeStep = Callable[..., tuple[Tensor, KVCache]]  # model.decode_step, or it compiled
STEP_VARIANTS = 64  # compiled variants of the decoder's step kept (compiled_step), Dynamo's default is 8


@dataclass(frozen=True)
class Hypothesis:
    """One output: token ids without BOS/EOS, their total log-probability, and the search's score
    (the log-probability divided by the length penalty for beam search, the same value otherwise);
    `token_log_probs`: the log-probability of each token chosen, EOS's included where the model chose it
    (empty where the engine does not say: CTranslate2)."""

    tokens: list[int]
    log_prob: float
    score: float
    token_log_probs: tuple[float, ...] = ()

    @property
    def confidence(self) -> float | None:
        """The mean probability of the tokens chosen (EOS's included where chosen): near 1 where the model was
        sure at every step; low values flag doubtful outputs. None where the token probabilities are unknown."""
        if not self.token_log_probs:
            return None
        return sum(math.exp(x) for x in self.token_log_probs) / len(self.token_log_probs)


def max_lengths(src: Tensor, config: ModelConfig, a: float, b: int) -> Tensor:
    """Maximum output length a * source_length + b per sentence (§6.1: input length + 50), at most
    the model's max_positions. Shape: src (B, S) -> (B,) on the CPU"""
    return length_limits((src != config.pad_id).sum(1).cpu(), config, a, b)


def length_limits(source_lengths: Tensor, config: ModelConfig, a: float, b: int) -> Tensor:
    """`max_lengths` from source lengths counting EOS. Shape: (B,) -> (B,)"""
    return (source_lengths.float() * a + b).long().clamp(min=1, max=config.max_positions)


def length_penalty(length: int | Tensor, alpha: float, rule: str = "gnmt") -> float | Tensor:
    """GNMT's ((5 + |Y|) / 6)^alpha (Wu et al. 2016), as in the paper's tensor2tensor code (§6.1: alpha 0.6);
    with rule "power", |Y|^alpha (Hugging Face's generate, fairseq). |Y| counts the generated tokens including
    EOS."""
    if rule == "power":
        return length**alpha
    return ((5.0 + length) / 6.0) ** alpha


def banned_log_probs(logits: Tensor, banned: Sequence[int] | Tensor, after_softmax: bool = False) -> Tensor:
    """log-softmax of `logits` with the `banned` tokens at -inf: banned before the softmax (their probability
    spread over the others), or after it (lost: decode.ban_after_softmax). `logits` is written over, and on a CPU
    it is the result (log_softmax_). Shape: (..., V) -> (..., V)"""
    if after_softmax:
        scores = log_softmax_(logits)
        scores[..., banned] = float("-inf")
        return scores
    logits[..., banned] = float("-inf")
    return log_softmax_(logits)


def log_softmax_(x: Tensor) -> Tensor:
    """log_softmax over the last dimension, written into `x` on a CPU (its kernel reads each row whole before it
    writes it: the same values, tests/decode/test_search.py), a new tensor elsewhere: a beam step's (rows, V)
    float32 scores are 30 MB at 128 rows of 58k words, allocated afresh at every step otherwise."""
    if x.device.type == "cpu" and x.is_contiguous():
        return torch.log_softmax(x, -1, out=x)
    return F.log_softmax(x, dim=-1)


class Steps:
    """The step protocol every search drives: `start_steps` builds it for a batch of `beam` consecutive
    rows per input; `step` feeds one token per row and returns next-token logits; `reorder` keeps rows.

    With the KV cache each step feeds one token; with cache=False the whole prefix is run again at every
    step (the reference the cached search is tested and benchmarked against). `first` holds the tokens
    the first step feeds; `limits` each input's maximum number of generated tokens. `step`: what runs
    model.decode_step (compiled_step's compiled form), by default the method itself.
    """

    first: Tensor  # (B * beam,)
    prompts: list[list[int]] | None = None  # per input, the tokens before the generated ones (a prompt), if any

    ban_after_softmax = False  # start_steps sets it

    def __init__(self, model, use_cache: bool, step: DecodeStep | None = None) -> None:
        self.model, self.use_cache = model, use_cache
        self.decode_step = step or model.decode_step  # the model's incremental step, or it compiled (compiled_step)
        c = model.config
        # never generated; EOS always may be, when it is also PAD and BOS (GPT-2's <|endoftext|>)
        self.banned = [i for i in (c.pad_id, c.bos_id) if i != c.eos_id]
        self._banned: dict[bool, Tensor] = {}  # ban_eos -> the banned ids on the device

    def _logits(self, tokens: Tensor) -> Tensor:
        raise NotImplementedError

    def step(
        self,
        tokens: Tensor,
        ban_eos: bool = False,
        repetition: Repetition | None = None,
        histories: Sequence[Sequence[int]] = (),
        normalize: bool = True,
    ) -> Tensor:
        """Next-token log-probabilities, PAD and BOS (and EOS if asked) at -inf: banned before the softmax, their
        probability spread over the other tokens (CTranslate2's way; the default), or with `ban_after_softmax`
        after it, their probability lost (transformers' generate and fairseq: an imported model's way).
        `repetition` (decode/repetition.py): its penalty on the logits of each row's `histories` (the tokens so far,
        a prompt's included), and its n-grams that would repeat banned after the softmax.
        `normalize=False`: the logits so banned, without the log-softmax (the same best word in each row, a
        greedy step's pick where no score is asked for). Shape: tokens (rows,) -> log-probabilities (rows, V) in
        float32"""
        logits = self._logits(tokens).float()
        if repetition is not None:
            repetition.penalize(logits, histories)
        banned = self.banned_ids(ban_eos, logits.device)
        if normalize:
            scores = banned_log_probs(logits, banned, self.ban_after_softmax)
        else:  # banned before or after a softmax: the same best word
            logits[..., banned] = float("-inf")
            scores = logits
        if repetition is not None:
            repetition.ban(scores, histories)
        return scores

    def banned_ids(self, ban_eos: bool, device: torch.device) -> Tensor:
        """The words a step bans (PAD and BOS; EOS too where asked), on `device` once, not copied there at every
        step. Shape: (banned,)"""
        if ban_eos not in self._banned:
            ids = [*self.banned, self.model.config.eos_id] if ban_eos else self.banned
            self._banned[ban_eos] = torch.tensor(ids, dtype=torch.long, device=device)
        return self._banned[ban_eos]

    def best_continuations(
        self,
        tokens: Tensor,
        scores: Tensor,
        n: int,
        width: int,
        m: int,
        ban_eos: bool = False,
        ban_eos_next: bool | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One beam step: `step`, then the m best continuations of each of the n sentences' `width` hypotheses
        (summed log-probabilities `scores`), best first, on the host (`_best_continuations`). A static step on a GPU
        (decode/static.py) runs all of it as one graph, and launches the next step (which bans EOS where
        `ban_eos_next`) before this one's results are read. Shape: tokens (n*width,), scores (n, width) ->
        3 x (n, m')"""
        return _best_continuations(scores, self.step(tokens, ban_eos), n, width, m)

    def reorder(self, index: Tensor, kept: Tensor | None) -> None:
        """Keep rows `index`, in that order; `kept`: the inputs that go on (their positions among those still
        running), None when all do, so per-input state (the encoder's) needs no copy. Each input's rows stay
        consecutive and as many per input (a beam step, the first step's widening, finished inputs dropped)."""
        raise NotImplementedError


def additive_mask(mask: Tensor, keys: Tensor) -> Tensor:
    """The encoder-decoder mask as an additive one (0 or -inf) in the keys' dtype (bf16 under autocast): the
    attention kernel takes it faster than a bool mask. Exact: every source has a visible EOS.
    Shape: mask (B, 1, 1, S) bool -> (B, 1, 1, S)"""
    return torch.zeros(mask.shape, dtype=keys.dtype, device=keys.device).masked_fill_(~mask, float("-inf"))


class EncoderDecoderSteps(Steps):
    """The paper's model: each source is encoded once, its encoder-decoder keys/values shared by its rows (one
    copy per sentence, nn/cache.py); the first step feeds BOS."""

    def __init__(self, model: Transformer, src: Tensor, beam: int, cache: bool, step: DecodeStep | None = None) -> None:
        super().__init__(model, cache, step)
        memory, mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
        self.cache: KVCache | GrowingKVCache | None = model.decoder.start_cache(memory).expand(beam) if cache else None
        if cache and own_step(step):  # the model's own step: its keys written in place (a compiled one takes values)
            self.cache = GrowingKVCache(self.cache)
        # with the cache, per source (B, 1, 1, S); without it, per row as the memory (the uncached reference)
        self.mask = additive_mask(mask, self.cache.cross_kv[0][0]) if cache else mask.repeat_interleave(beam, dim=0)
        self.memory = None if cache else memory.repeat_interleave(beam, dim=0)
        self.first = torch.full((src.size(0) * beam,), model.config.bos_id, dtype=torch.long, device=src.device)
        self.prefix: Tensor | None = None  # (rows, t): without the cache, every token fed so far
        self.source_lengths = (src != model.config.pad_id).sum(1).cpu()

    def limits(self, a: float, b: int) -> Tensor:
        """a * source length + b (§6.1: input length + 50), at most max_positions. Shape: (B,) on the CPU"""
        return length_limits(self.source_lengths, self.model.config, a, b)

    def _logits(self, tokens: Tensor) -> Tensor:
        if self.use_cache:
            logits, self.cache = self.decode_step(tokens, None, self.mask, self.cache)
            return logits
        step = tokens[:, None]
        self.prefix = step if self.prefix is None else torch.cat([self.prefix, step], dim=1)
        return self.decode_step(self.prefix, self.memory, self.mask)[0][:, -1]

    def reorder(self, index: Tensor, kept: Tensor | None) -> None:
        if kept is not None and isinstance(self.decode_step, ShortlistStep):
            self.decode_step.keep(kept)
        if self.cache is not None:
            self.cache = self.cache.reorder(index, kept)
            if kept is not None:
                self.mask = self.mask.index_select(0, kept)
            return
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)
        self.memory = self.memory.index_select(0, index)
        self.mask = self.mask.index_select(0, index)


class DecoderOnlySteps(Steps):
    """A causal language model continuing prompts of equal length (B, P): all but the last prompt token
    go into the cache at once; the first step feeds the last one. Generated tokens exclude the prompt.

    The model sees at most `context` tokens (the length it was trained on, `data.block_size`; and
    max_positions for learned positions): when the text outgrows it, the window moves on to keep the
    last context / 2 tokens, which are put in the cache again (re-run once every context / 2 steps).
    Without the cache the same window is re-run at every step, so both ways see the same tokens."""

    def __init__(
        self, model, prompts: Tensor, beam: int, cache: bool, context: int | None = None, step: DecodeStep | None = None
    ) -> None:
        super().__init__(model, cache, step)
        c = model.config
        if c.pad_id != c.eos_id and (prompts == c.pad_id).any():  # a PAD that is EOS is text (a document's end)
            raise ValueError("prompts in one batch must have equal lengths, without padding")
        bounds = [x for x in (context, c.max_positions if c.positions == "learned" else None) if x]
        self.context = min(bounds) if bounds else None
        self.inputs = prompts.size(0)
        self.prompts = prompts.tolist()
        prompts = prompts.repeat_interleave(beam, dim=0)
        self.prompt_length = prompts.size(1)
        self.first = prompts[:, -1]
        self.history = prompts[:, :-1]  # every token fed so far, and the prompt's
        self.start = 0 if self.context is None else max(0, self.prompt_length - self.context)  # first one seen
        self.cache: KVCache | GrowingKVCache | None = None
        self.grow = own_step(step)
        if cache and self.history.size(1) > self.start:
            _, self.cache = self.decode_step(self.history[:, self.start :])

    def limits(self, a: float, b: int) -> Tensor:
        """a * prompt length + b new tokens. Shape: (B,)"""
        return torch.full((self.inputs,), int(a * self.prompt_length + b)).clamp(min=1)

    def _logits(self, tokens: Tensor) -> Tensor:
        self.history = torch.cat([self.history, tokens[:, None]], dim=1)
        t = self.history.size(1)
        moved = self.context is not None and t - self.start > self.context
        if moved:
            self.start = t - max(1, self.context // 2)
        if not self.use_cache:
            return self.decode_step(self.history[:, self.start :])[0][:, -1]
        if moved:
            self.cache = None if t - 1 == self.start else self.decode_step(self.history[:, self.start : -1])[1]
        logits, self.cache = self.decode_step(tokens, self.cache)
        if self.grow and not isinstance(self.cache, GrowingKVCache):  # the model's own step: keys written in place
            self.cache = GrowingKVCache(self.cache)
        return logits

    def reorder(self, index: Tensor, kept: Tensor | None) -> None:
        self.history = self.history.index_select(0, index)
        if self.cache is not None:
            self.cache = self.cache.reorder(index)


def start_steps(
    model,
    src: Tensor,
    beam: int = 1,
    cache: bool = True,
    context: int | None = None,
    step: DecodeStep | None = None,
    ban_after_softmax: bool = False,
) -> Steps:
    """The steps of `model` over `src` (sources of a Transformer, prompts of a CausalLM, which sees at most
    `context` tokens), `beam` rows each; `step` runs model.decode_step (compiled_step), by default the method;
    `ban_after_softmax`: see Steps.step (decode.ban_after_softmax)."""
    kind = family(model.config.type)
    if cache and TRANSLATE in kind.can and hasattr(step, "start_steps"):  # decode.static_cache (decode/static.py)
        return step.start_steps(model, src, beam, ban_after_softmax)
    if TRANSLATE in kind.can:
        steps: Steps = EncoderDecoderSteps(model, src, beam, cache, step)
    else:
        kind.check(GENERATE, "this search's model")
        steps = DecoderOnlySteps(model, src, beam, cache, context, step)
    steps.ban_after_softmax = ban_after_softmax
    return steps


def own_step(step: DecodeStep | None) -> bool:
    """Whether `step` is the model's own eager step (None, or it over a shortlist), whose cache a search may write in
    place; a compiled step's guards want values."""
    return step is None or isinstance(step, ShortlistStep)


class ShortlistStep:
    """`model.decode_step` with its output layer over one batch's shortlisted words (decode/shortlist.py,
    nn/transformer.py OutputRows): the same step, a smaller product, NEVER for the other words and for the words
    of the batch an input's own sources do not give it. `keep(kept)`: the inputs that go on (Steps.reorder)."""

    def __init__(self, model: Transformer, words: Tensor, allowed: Tensor) -> None:
        self.model, self.rows = model, OutputRows(model, words, allowed)

    def __call__(self, *args, **kwargs) -> tuple[Tensor, KVCache | GrowingKVCache]:
        return self.model.decode_step(*args, rows=self.rows, **kwargs)

    def keep(self, kept: Tensor) -> None:
        self.rows.keep(kept)


def compiled_step(model, backend: str = "inductor") -> DecodeStep:
    """`model.decode_step` through torch.compile, dynamic shapes, so each search step runs as one compiled program
    instead of some hundred eager operations. It compiles into about a dozen variants, each once: a cache of 0, 1
    or more positions, one row or several, sources of one token (an empty line's EOS) or more; later batches reuse
    them whatever their rows and lengths (tests/decode/test_compile.py; TorchEngine.warm_up compiles them all).
    Compiling them takes ~2 minutes on a 2-core CPU for the quick recipe's model; after that, greedy search at
    batch 1 ran 1.3x faster there, large batches no faster (docs/benchmarks.md). A failure to compile is a
    one-line ValueError.
    """
    compiled = torch.compile(model.decode_step, dynamic=True, backend=backend)

    def step(*args, **kwargs) -> tuple[Tensor, KVCache]:
        # Dynamo keeps 8 variants of a function by default, then runs it eager without a word: the step has more
        # (above). Inputs in one layout (_dense: the first step's keys and values come out as views, which the next
        # call's stride guards would tell apart) and lengths never unified with a model size keep them few.
        with (
            torch._dynamo.config.patch(recompile_limit=STEP_VARIANTS),
            torch.fx.experimental._config.patch(use_duck_shape=False),  # a length equal to a model size stays a length
            compiling("decode.compile", "decode without --compile (decode.compile false)"),
        ):
            return compiled(*map(_dense, args), **{k: _dense(v) for k, v in kwargs.items()})

    return step


def _dense(value):
    """Tensors and caches in the one layout a compiled step's guards expect (views of a longer history, the first
    step's keys and values are not); anything else as it is."""
    if isinstance(value, KVCache):
        return value.dense()
    return dense(value) if isinstance(value, Tensor) else value


def _token_by_token(
    model,
    src: Tensor,
    request: DecodeRequest,
    choose: Callable[[Tensor], Tensor],
    cache: bool = True,
    stop_at_eos: bool = True,
    on_step: Callable[[Tensor], None] | None = None,
    context: int | None = None,
    step: DecodeStep | None = None,
) -> list[Hypothesis]:
    """One token per step picked by `choose(log_probs) -> (rows,)`, rows dropped as their input ends.
    `stop_at_eos=False` keeps EOS as a token (a language model's line break) and runs to the limit;
    `on_step(tokens)` sees each step's picks (rows still running, in input order)."""
    c, d, repetition = model.config, request.decode, request.repetition
    scores = request.scores or choose is not row_argmax  # a sample's draw needs the probabilities
    steps = start_steps(model, src, 1, cache, context, step, d.ban_after_softmax)
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
        histories = _histories(steps, active, out[active, :t]) if repetition is not None else ()
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
def greedy(
    model,
    src: Tensor,
    request: DecodeRequest = DEFAULT,
    cache: bool = True,
    stop_at_eos: bool = True,
    on_step: Callable[[Tensor], None] | None = None,
    context: int | None = None,
    step: DecodeStep | None = None,
) -> list[Hypothesis]:
    """The most probable token at each step; EOS is not allowed before decode.min_len tokens. Of `request` it reads
    the length limits, min_len, ban_after_softmax and the repetition rules.
    `src`: a Transformer's sources, or a CausalLM's prompts (equal lengths). `stop_at_eos=False` keeps EOS as a
    token (a language model's line break) and runs to the limit; `on_step(tokens)` sees each step's picks (rows
    still running, in input order); `context`: a language model's window; `step`: see start_steps.
    Shape: src (B, S) -> B hypotheses"""
    return _token_by_token(model, src, request, row_argmax, cache, stop_at_eos, on_step, context, step)


@torch.no_grad()
def sample(
    model,
    src: Tensor,
    request: DecodeRequest = DEFAULT,
    generator: torch.Generator | None = None,
    cache: bool = True,
    stop_at_eos: bool = True,
    on_step: Callable[[Tensor], None] | None = None,
    context: int | None = None,
    step: DecodeStep | None = None,
) -> list[Hypothesis]:
    """Ancestral sampling from softmax(logits / temperature), restricted to the `top_k` most probable
    tokens (0: all) and to the smallest set whose probability reaches `top_p` (nucleus sampling,
    Holtzman et al. 2020): request.decode's, with its limits as greedy reads them. Pass a seeded `generator` for
    repeatable samples. The other arguments: see greedy. Shape: src (B, S) -> B hypotheses
    """
    d = request.decode
    choose = sampler(d.temperature, d.top_k, d.top_p, generator)
    return _token_by_token(model, src, request, choose, cache, stop_at_eos, on_step, context, step)


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


@torch.no_grad()
def beam_search(
    model, src: Tensor, request: DecodeRequest = DEFAULT, cache: bool = True, step: DecodeStep | None = None
) -> list[list[Hypothesis]]:
    """Beam search for a whole batch in one tensor of B x beam_size rows (§6.1: beam 4, alpha 0.6).

    Each step extends every live hypothesis by every token and keeps the 2k best continuations by
    log-probability; an EOS among the first k finishes a hypothesis, scored log_prob / length_penalty,
    and the k best finished ones are kept; the first k other continuations stay live. A sentence is
    done, and leaves the batch, when
    - no live hypothesis can still beat its n_best-th finished one: a live score can only fall, so the
      best it can reach is log_prob / length_penalty(maximum length) (tensor2tensor's rule, the
      paper's code; the default), or, with `early_stopping`, as soon as k hypotheses have finished
      (fairseq's rule, and Hugging Face's early_stopping=True: faster, favours short outputs), or, with
      early_stopping "heuristic" (Hugging Face's early_stopping=False), when k have finished and the best
      live one, scored at its current length, does not beat the worst of them;
    - or it reaches its maximum length: the best k continuations of that step finish as they are, or, with
      `forced_eos` (transformers' forced_eos_token_id), every live one finishes with an EOS that costs nothing
      and counts in its length.
    With beam_size 1 and `early_stopping` this is exactly greedy search. EOS is not allowed before
    decode.min_len tokens. `src`: sources of a Transformer or prompts of a CausalLM. `request`: k = decode.beam_size,
    α = decode.length_penalty in the form of decode.length_rule (`length_penalty`), n_best, the stopping rule, the
    limits and the repetition rules (decode/repetition.py). `step`: see start_steps.
    Shape: src (B, S) -> B lists of n_best hypotheses, best first
    """
    d, n_best, repetition = request.decode, request.n_best, request.repetition
    alpha, length_rule, early_stopping, forced_eos = d.length_penalty, d.length_rule, d.early_stopping, d.forced_eos
    c, k, B = model.config, d.beam_size, src.size(0)
    # All k hypotheses of a sentence start identical, so the first step runs one row per sentence (width 1)
    # and its 2k best continuations fill the beam; with fewer than 2k words, k rows of which only one counts.
    width = 1 if c.tgt_vocab_size >= 2 * k else k
    steps = start_steps(model, src, width, cache, step=step, ban_after_softmax=d.ban_after_softmax)
    limits = steps.limits(d.max_len_a, d.max_len_b)  # (B,)
    # (B,) the penalty of a hypothesis ending at its limit
    largest_penalty = length_penalty(limits.float() + forced_eos, alpha, length_rule)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    active = torch.arange(B)  # sentence of each group of `width` rows
    history = torch.zeros(B, width, 0, dtype=torch.long)  # tokens so far per live hypothesis, on the CPU
    history_log_probs = torch.zeros(B, width, 0)  # and the log-probability of each
    scores_c = torch.full((B, width), float("-inf"))  # summed log-probabilities, on the CPU
    scores_c[:, 0] = 0.0  # only one of identical rows may expand
    scores = scores_c.to(src.device)
    tokens = steps.first
    for t in range(int(limits.max())):
        n = active.numel()
        histories = ()
        if repetition is not None:  # each row's tokens so far; rows of one input are consecutive
            histories = _histories(steps, active.repeat_interleave(width), history.reshape(n * width, -1, 1)[..., 0])
        if repetition is None:  # (n, 2k) each on the CPU
            bans = t < d.min_len, t + 1 < d.min_len  # this step's and the next one's
            top_scores_c, origin_c, word_c = steps.best_continuations(tokens, scores, n, width, 2 * k, *bans)
        else:
            log_probs = steps.step(tokens, t < d.min_len, repetition, histories)  # (n*width, V), log-probabilities
            top_scores_c, origin_c, word_c = _best_continuations(scores, log_probs, n, width, 2 * k)
        word_log_probs = top_scores_c - scores_c.gather(1, origin_c)  # (n, 2k): each continuation's last token
        is_eos = word_c == c.eos_id
        # The first k non-EOS continuations stay live (stable order: best first).
        rank = torch.arange(word_c.size(1)) + is_eos * word_c.size(1)
        live_c = rank.argsort(dim=1)[:, :k]  # (n, k)
        at_limit = limits[active] <= t + 1  # (n,) the last step these sentences may take
        # Hypotheses that finish now: EOS among the first k, or everything kept at the length limit.
        sentence = active.tolist()
        is_eos_c = is_eos[:, :k]  # (n, k): the first k continuations that end in EOS
        ends, at_limit_rows = is_eos_c.nonzero().tolist(), at_limit.nonzero().squeeze(1).tolist()
        if ends or at_limit_rows:  # Python lists: some 30 us of indexing per hypothesis otherwise (a GPU waits)
            top_l, origin_l, word_l, word_lp_l = (x.tolist() for x in (top_scores_c, origin_c, word_c, word_log_probs))
            rows = {i for i, _ in ends} | set(at_limit_rows)
            past = {i: (history[i].tolist(), history_log_probs[i].tolist()) for i in rows}  # per hypothesis
            for i, j in ends:
                tokens_, lps = past[i][0][origin_l[i][j]], [*past[i][1][origin_l[i][j]], word_lp_l[i][j]]
                _finish(finished[sentence[i]], [*tokens_], top_l[i][j], True, k, alpha, length_rule, lps)
            for i in at_limit_rows:
                # the live ones with a forced EOS, or the k best continuations (their EOS ones finished above)
                ending = live_c[i].tolist() if forced_eos else [j for j in range(k) if not is_eos_c[i, j]]
                for j in ending:
                    tokens_, lps = past[i][0][origin_l[i][j]], past[i][1][origin_l[i][j]]
                    # a forced EOS is no choice of the model's: not among the token log-probabilities
                    _finish(
                        finished[sentence[i]], [*tokens_, word_l[i][j]], top_l[i][j], forced_eos, k, alpha,
                        length_rule, [*lps, word_lp_l[i][j]],
                    )  # fmt: skip
        best_live = top_scores_c.gather(1, live_c[:, :1]).squeeze(1)  # (n,)
        if early_stopping is True:
            done = at_limit | torch.tensor([len(finished[s]) >= k for s in sentence])
        elif early_stopping == "heuristic":  # the best live score at its current length (transformers')
            current = (best_live / length_penalty(t + 1, alpha, length_rule)).tolist()
            done = at_limit | torch.tensor(
                [_cannot_improve(finished[s], k, r) for s, r in zip(sentence, current, strict=True)]
            )
        else:  # the best live score, were it to end at the length limit with nothing more lost
            reachable = (best_live / largest_penalty[active]).tolist()
            done = at_limit | torch.tensor(
                [_cannot_improve(finished[s], n_best, r) for s, r in zip(sentence, reachable, strict=True)]
            )
        if done.all():
            break
        keep = (~done).nonzero().squeeze(1)  # (n',)
        new_origin = origin_c.gather(1, live_c)[keep]  # (n', k)
        history = torch.cat([history[keep[:, None], new_origin], word_c.gather(1, live_c)[keep, :, None]], dim=2)
        history_log_probs = torch.cat(
            [history_log_probs[keep[:, None], new_origin], word_log_probs.gather(1, live_c)[keep, :, None]], dim=2
        )
        scores_c = top_scores_c.gather(1, live_c)[keep]  # (n', k)
        # to the device without waiting for it (a copy that waits would stall a chained static step, decode/static.py);
        # the host's memory is staged at once, so these temporaries may go
        to_device = lambda x: x.to(src.device, non_blocking=True)  # noqa: E731
        scores = to_device(scores_c)
        tokens = to_device(word_c.gather(1, live_c)[keep].view(-1))
        rows = to_device((keep[:, None] * width + new_origin).view(-1))  # (n'*k,)
        steps.reorder(rows, kept=None if keep.numel() == n else to_device(keep))
        active, width = active[keep], k
    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in finished]


def _histories(steps: Steps, inputs: Tensor, generated: Tensor) -> list[list[int]]:
    """Each row's tokens so far: its input's prompt (a language model's) and what it generated. Shape: inputs (rows,),
    generated (rows, t) on the CPU"""
    rows = generated.tolist()
    if steps.prompts is None:
        return rows
    return [steps.prompts[i] + row for i, row in zip(inputs.tolist(), rows, strict=True)]


def _best_continuations(scores: Tensor, log_probs: Tensor, n: int, width: int, m: int) -> tuple[Tensor, Tensor, Tensor]:
    """The m best continuations of each sentence's `width` hypotheses: their summed log-probabilities, the
    hypothesis each extends and its next token, best first, copied to the host at once (`packed_continuations`).
    Shape: scores (n, width), log_probs (n*width, V) -> 3 x (n, m') on the CPU, m' = min(m, width * min(m, V))"""
    # one copy to the host (a synchronisation on a GPU)
    return unpacked_continuations(packed_continuations(scores, log_probs, n, width, m).cpu())


def packed_continuations(scores: Tensor, log_probs: Tensor, n: int, width: int, m: int) -> Tensor:
    """`_best_continuations` on the device, packed in one tensor: each row's m best first, then the best of those
    (the same m as over all width x V at once, at less cost: a GPU's top-k over 232k candidates per sentence took
    15% of a beam step). Fixed shapes, no synchronisation: a CUDA graph captures it (decode/static.py).
    Shape: scores (n, width), log_probs (n*width, V) -> (n, 3m'): scores, hypotheses, words (ids < 2^24 are exact
    in float32)"""
    per_row = min(m, log_probs.size(-1))
    row_log_probs, row_words = row_topk(log_probs, per_row)  # (n*width, per_row): a row's order is its sums' order
    row_scores = row_log_probs + scores.view(n * width, 1)
    top_scores, pick = row_scores.view(n, width * per_row).topk(min(m, width * per_row), dim=1)
    origin, word = pick // per_row, row_words.view(n, width * per_row).gather(1, pick)
    return torch.cat([top_scores, origin.to(top_scores.dtype), word.to(top_scores.dtype)], dim=1)


def unpacked_continuations(packed: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`packed_continuations`'s tensor as scores, hypotheses and words. Shape: (n, 3m') -> 3 x (n, m')"""
    top_scores, origin, word = packed.split(packed.size(1) // 3, dim=1)
    return top_scores, origin.long(), word.long()


def _finish(
    hyps: list[Hypothesis],
    tokens: list[int],
    log_prob: float,
    eos: bool,
    k: int,
    alpha: float,
    rule: str,
    token_log_probs: Sequence[float] = (),
) -> None:
    """Add a finished hypothesis to a sentence's k best, replacing the worst one when they are full."""
    if log_prob == float("-inf"):
        return
    score = log_prob / length_penalty(len(tokens) + eos, alpha, rule)
    hyp = Hypothesis(tokens, log_prob, score, tuple(token_log_probs))
    if len(hyps) < k:
        hyps.append(hyp)
        return
    worst = min(range(k), key=lambda i: hyps[i].score)
    if hyp.score > hyps[worst].score:
        hyps[worst] = hyp


def _cannot_improve(hyps: list[Hypothesis], n_best: int, reachable: float) -> bool:
    """Whether the n_best best finished hypotheses all score at least `reachable`."""
    return len(hyps) >= n_best and sorted(h.score for h in hyps)[-n_best] >= reachable


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
    model: Transformer,
    sources: Sequence[Sequence[int]],
    request: DecodeRequest = DEFAULT,
    precision: str = "fp32",
    progress: Callable[[int], None] | None = None,
    step: DecodeStep | None = None,
    constraints: Sequence[Sequence[Sequence[int]]] | None = None,
    shortlist: Shortlist | None = None,
) -> list[list[Hypothesis]]:
    """Translate tokenized sources (without EOS) in batches of similar length; results in input order.

    Greedy search where the request is greedy (DecodeRequest.greedy), else beam search; with decode.sampling,
    `n_best` samples per sentence. `constraints`: per source, the token ids of each term its output must hold (a
    glossary's, decode/glossary.py); a source with any is searched by decode/constrained.py in the same batch, one
    without exactly as with none. `progress(n)` is called after each batch with the number of sentences done in it.
    `step`: see start_steps. `shortlist`: each batch's output layer covers the words its sources may produce
    (decode/shortlist.py; with the model's own step, `step` None), a glossary's terms included.
    """
    c, d, device = model.config, request.decode, next(model.parameters()).device

    if shortlist is not None and step is not None:
        raise ValueError("a shortlist runs on the model's own step (step=None), not on a compiled or static one")

    def step_for(src: Tensor, terms: Sequence[Sequence[Sequence[int]]] = ()) -> DecodeStep | None:
        if shortlist is None:
            return step
        extra = [[i for ids in term_ids for i in ids] for term_ids in terms]  # per source, its terms' ids
        return ShortlistStep(model, *shortlist.words(src, extra, c.pad_id))

    out: list[list[Hypothesis]] = [[] for _ in sources]
    generator = torch.Generator(device).manual_seed(d.seed) if d.sampling else None
    for chunk in length_batches(sources, d.batch_size):
        bound = [i for i in chunk if constraints and constraints[i]]  # sentences with terms
        free = [i for i in chunk if not (constraints and constraints[i])]
        with decoding(device, precision):
            if free:
                src = collate([(sources[i], []) for i in free], c.pad_id, c.bos_id, c.eos_id).src.to(device)
                batch_step = step_for(src)
                if d.sampling:
                    draws = [sample(model, src, request, generator, step=batch_step) for _ in range(request.n_best)]
                    results = [sorted(hyps, key=lambda h: -h.score) for hyps in zip(*draws, strict=True)]
                elif request.greedy:
                    results = [[h] for h in greedy(model, src, request, step=batch_step)]
                else:
                    results = beam_search(model, src, request, step=batch_step)
                for i, hyps in zip(free, results, strict=True):
                    out[i] = hyps
            if bound:
                from vaswani.decode.constrained import constrained_beam_search

                src = collate([(sources[i], []) for i in bound], c.pad_id, c.bos_id, c.eos_id).src.to(device)
                terms = [constraints[i] for i in bound]
                found = constrained_beam_search(model, src, terms, request, step=step_for(src, terms))
                for i, hyps in zip(bound, found, strict=True):
                    out[i] = hyps
        if progress is not None:
            progress(len(chunk))
    return out
