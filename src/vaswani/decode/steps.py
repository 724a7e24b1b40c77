"""The step protocol every search drives (`Steps`: start, step, reorder) and the steps it runs on.

Each step feeds one token per row on the decoder's KV cache, so the searches work alike for the encoder-decoder
Transformer (each source encoded once) and a decoder-only CausalLM (prompts put in the cache once); inputs that
have finished drop out of the batch, so they stop costing compute. `cache=False` re-runs the whole prefix at every
step instead: the reference the cached search is tested and benchmarked against. What runs the model's step is a
value: the model's own method, it compiled (`compiled_step`), it over a shortlist (`ShortlistStep`), or the static
CUDA-graph step (decode/static.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.config import ModelConfig
from vaswani.decode.continuations import best_continuations
from vaswani.decode.repetition import Repetition
from vaswani.families import GENERATE, TRANSLATE, family
from vaswani.nn import KVCache, Transformer
from vaswani.nn.cache import GrowingKVCache, dense
from vaswani.nn.transformer import OutputRows
from vaswani.runtime.device import compiling

DecodeStep = Callable[..., tuple[Tensor, KVCache]]  # model.decode_step, or it compiled
STEP_VARIANTS = 64  # compiled variants of the decoder's step kept (compiled_step), Dynamo's default is 8


def max_lengths(src: Tensor, config: ModelConfig, a: float, b: int) -> Tensor:
    """Maximum output length a * source_length + b per sentence (§6.1: input length + 50), at most
    the model's max_positions. Shape: src (B, S) -> (B,) on the CPU"""
    return length_limits((src != config.pad_id).sum(1).cpu(), config, a, b)


def length_limits(source_lengths: Tensor, config: ModelConfig, a: float, b: int) -> Tensor:
    """`max_lengths` from source lengths counting EOS. Shape: (B,) -> (B,)"""
    return (source_lengths.float() * a + b).long().clamp(min=1, max=config.max_positions)


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
    # per row, the token the first step must give (a many-to-many model's target language: transformers'
    # forced_bos_token_id), scored 0 and counted in the length; None once taken, or where nothing is forced
    forced: Tensor | None = None

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
        if self.forced is not None:
            return self._forced_step(logits)
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

    def _forced_step(self, logits: Tensor) -> Tensor:
        """The first step's scores where its tokens are forced: 0 for each row's forced token, -inf for every other
        (as generate's ForcedBOSTokenLogitsProcessor leaves them). Shape: (rows, V) -> (rows, V)"""
        forced, self.forced = self.forced, None
        logits.fill_(float("-inf"))
        return logits.scatter_(1, forced.to(logits.device)[:, None], 0.0)

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
        (summed log-probabilities `scores`), best first, on the host (continuations.best_continuations). A static
        step on a GPU (decode/static.py) runs all of it as one graph, and launches the next step (which bans EOS where
        `ban_eos_next`) before this one's results are read. Shape: tokens (n*width,), scores (n, width) ->
        3 x (n, m')"""
        return best_continuations(scores, self.step(tokens, ban_eos), n, width, m)

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
    forced: Tensor | None = None,
) -> Steps:
    """The steps of `model` over `src` (sources of a Transformer, prompts of a CausalLM, which sees at most
    `context` tokens), `beam` rows each; `step` runs model.decode_step (compiled_step), by default the method;
    `ban_after_softmax`: see Steps.step (decode.ban_after_softmax); `forced` (B,): the token each input's output
    starts with (Steps.forced), None: none."""
    kind = family(model.config.type)
    if cache and TRANSLATE in kind.can and hasattr(step, "start_steps"):  # decode.static_cache (decode/static.py)
        steps: Steps = step.start_steps(model, src, beam, ban_after_softmax)
    elif TRANSLATE in kind.can:
        steps = EncoderDecoderSteps(model, src, beam, cache, step)
    else:
        kind.check(GENERATE, "this search's model")
        steps = DecoderOnlySteps(model, src, beam, cache, context, step)
    steps.ban_after_softmax = ban_after_softmax
    steps.forced = None if forced is None else forced.repeat_interleave(beam)
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
    Compiling them takes minutes on a 2-core CPU; after that, small batches run faster, large ones no faster
    (docs/benchmarks.md, "CPU decoding"). A failure to compile is a one-line ValueError.
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


def histories_of(steps: Steps, inputs: Tensor, generated: Tensor) -> list[list[int]]:
    """Each row's tokens so far: its input's prompt (a language model's) and what it generated. Shape: inputs (rows,),
    generated (rows, t) on the CPU"""
    rows = generated.tolist()
    if steps.prompts is None:
        return rows
    return [steps.prompts[i] + row for i, row in zip(inputs.tolist(), rows, strict=True)]
