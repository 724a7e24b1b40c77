"""Search on the decoder's KV cache: greedy, batched beam search, and sampling.

Every search encodes each source sentence once, feeds the decoder one token per step through
`Transformer.decode_step`, and drops sentences that have finished from the batch, so they stop
costing compute. `cache=False` re-runs the decoder over the whole prefix at every step instead:
the reference the cached search is tested and benchmarked against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.config import DecodeConfig, ModelConfig
from vaswani.data.batching import collate
from vaswani.nn import KVCache, Transformer
from vaswani.runtime import autocast


@dataclass(frozen=True)
class Hypothesis:
    """One output: token ids without BOS/EOS, their total log-probability, and the search's score
    (the log-probability divided by the length penalty for beam search, the same value otherwise)."""

    tokens: list[int]
    log_prob: float
    score: float


def max_lengths(src: Tensor, config: ModelConfig, a: float, b: int) -> Tensor:
    """Maximum output length a * source_length + b per sentence (§6.1: input length + 50), at most
    the model's max_positions. Shape: src (B, S) -> (B,) on the CPU"""
    return length_limits((src != config.pad_id).sum(1).cpu(), config, a, b)


def length_limits(source_lengths: Tensor, config: ModelConfig, a: float, b: int) -> Tensor:
    """`max_lengths` from source lengths counting EOS. Shape: (B,) -> (B,)"""
    return (source_lengths.float() * a + b).long().clamp(min=1, max=config.max_positions)


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT's ((5 + |Y|) / 6)^alpha (Wu et al. 2016), as in the paper's tensor2tensor code (§6.1: alpha 0.6).
    |Y| counts the generated tokens including EOS."""
    return ((5.0 + length) / 6.0) ** alpha


class _Decoder:
    """Feeds one token per row and returns next-token logits, with the KV cache or (cache=False) by
    re-running the whole prefix. Rows are `beam` consecutive copies of each source sentence; the
    encoder-decoder keys/values are computed once per sentence and then copied to its rows."""

    def __init__(self, model: Transformer, src: Tensor, beam: int, cache: bool) -> None:
        self.model, self.use_cache = model, cache
        memory, mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
        self.cache: KVCache | None = model.decoder.start_cache(memory).expand(beam) if cache else None
        if self.cache is not None:
            # The encoder-decoder mask as an additive one (0 or -inf) in the keys' dtype (bf16 under autocast):
            # the attention kernel takes it ~20% faster than a bool mask. Exact: every source has a visible EOS.
            keys = self.cache.cross_kv[0][0]
            mask = torch.zeros(mask.shape, dtype=keys.dtype, device=keys.device).masked_fill_(~mask, float("-inf"))
        self.mask = mask.repeat_interleave(beam, dim=0)
        self.memory = None if cache else memory.repeat_interleave(beam, dim=0)
        self.prefix: Tensor | None = None  # (rows, t), only without the cache
        c = model.config
        self.banned = [c.pad_id, c.bos_id]  # never generated

    def __call__(self, tokens: Tensor, ban_eos: bool = False) -> Tensor:
        """Shape: tokens (rows,) -> logits (rows, V) in float32, PAD and BOS (and EOS if asked) at -inf"""
        if self.use_cache:
            logits, self.cache = self.model.decode_step(tokens, None, self.mask, self.cache)
        else:
            step = tokens[:, None]
            self.prefix = step if self.prefix is None else torch.cat([self.prefix, step], dim=1)  # (rows, t)
            logits = self.model.decode_step(self.prefix, self.memory, self.mask)[0][:, -1]
        logits = logits.float()
        logits[:, self.banned] = float("-inf")
        if ban_eos:
            logits[:, self.model.config.eos_id] = float("-inf")
        return logits

    def select(self, index: Tensor, same_sentences: bool) -> None:
        """Keep rows `index`, in that order. `same_sentences`: only rows of the same sentence were
        swapped (a beam step), so the per-sentence encoder state needs no copy."""
        if same_sentences and self.cache is not None:
            self.cache = self.cache.reorder(index, cross=False)
            return
        self.mask = self.mask.index_select(0, index)
        if self.cache is not None:
            self.cache = self.cache.reorder(index)
        else:
            self.memory = self.memory.index_select(0, index)
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)


def _one_best(
    model: Transformer, src: Tensor, choose: Callable[[Tensor], Tensor], max_len_a: float, max_len_b: int,
    cache: bool, min_len: int = 0,
) -> list[Hypothesis]:
    """One token per step picked by `choose(logits) -> (rows,)`, rows dropped as their sentence ends."""
    c = model.config
    decoder = _Decoder(model, src, beam=1, cache=cache)
    B = src.size(0)
    limits = max_lengths(src, c, max_len_a, max_len_b)  # (B,)
    out = torch.full((B, int(limits.max())), c.pad_id, dtype=torch.long)
    lengths = torch.zeros(B, dtype=torch.long)
    log_probs = torch.zeros(B, dtype=torch.float64)
    active = torch.arange(B)  # sentence of each row
    tokens = torch.full((B,), c.bos_id, dtype=torch.long, device=src.device)
    for step in range(out.size(1)):
        logits = decoder(tokens, ban_eos=step < min_len)  # (rows, V)
        tokens = choose(logits)  # (rows,)
        picked = F.log_softmax(logits, dim=-1).gather(1, tokens[:, None]).squeeze(1).cpu()
        log_probs[active] += picked.double()
        cpu_tokens = tokens.cpu()
        ended = cpu_tokens == c.eos_id
        out[active[~ended], step] = cpu_tokens[~ended]
        lengths[active[~ended]] = step + 1
        ended |= limits[active] <= step + 1
        if ended.all():
            break
        if ended.any():
            keep = (~ended).nonzero().squeeze(1)
            active = active[keep]
            keep = keep.to(src.device)
            tokens = tokens.index_select(0, keep)
            decoder.select(keep, same_sentences=False)
    return [Hypothesis(out[i, : lengths[i]].tolist(), float(log_probs[i]), float(log_probs[i])) for i in range(B)]


@torch.no_grad()
def greedy(model: Transformer, src: Tensor, max_len_a: float = 1.0, max_len_b: int = 50, cache: bool = True,
           min_len: int = 0) -> list[Hypothesis]:
    """The most probable token at each step; EOS is not allowed before `min_len` tokens.
    Shape: src (B, S) -> B hypotheses"""
    return _one_best(model, src, lambda logits: logits.argmax(-1), max_len_a, max_len_b, cache, min_len)


@torch.no_grad()
def sample(
    model: Transformer, src: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
    generator: torch.Generator | None = None, max_len_a: float = 1.0, max_len_b: int = 50, cache: bool = True,
) -> list[Hypothesis]:
    """Ancestral sampling from softmax(logits / temperature), restricted to the `top_k` most probable
    tokens (0: all) and to the smallest set whose probability reaches `top_p` (nucleus sampling,
    Holtzman et al. 2020). Pass a seeded `generator` for repeatable samples. Shape: src (B, S) -> B hypotheses
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (got {temperature}); use greedy search for temperature 0")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (got {top_p})")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (got {top_k})")

    def choose(logits: Tensor) -> Tensor:
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
        return torch.multinomial(scores.softmax(-1), 1, generator=generator).squeeze(1)

    return _one_best(model, src, choose, max_len_a, max_len_b, cache)


@torch.no_grad()
def beam_search(
    model: Transformer, src: Tensor, beam_size: int = 4, alpha: float = 0.6, max_len_a: float = 1.0,
    max_len_b: int = 50, n_best: int = 1, cache: bool = True, min_len: int = 0, early_stopping: bool = False,
) -> list[list[Hypothesis]]:
    """Beam search for a whole batch in one tensor of B x beam_size rows (§6.1: beam 4, alpha 0.6).

    Each step extends every live hypothesis by every token and keeps the 2k best continuations by
    log-probability; an EOS among the first k finishes a hypothesis, scored log_prob / length_penalty,
    and the k best finished ones are kept; the first k other continuations stay live. A sentence is
    done, and leaves the batch, when
    - no live hypothesis can still beat its n_best-th finished one: a live score can only fall, so the
      best it can reach is log_prob / length_penalty(maximum length) (tensor2tensor's rule, the
      paper's code; the default), or, with `early_stopping`, as soon as k hypotheses have finished
      (fairseq's rule, and Hugging Face's early_stopping=True: faster, favours short outputs);
    - or it reaches its maximum length (its live hypotheses then finish as they are).
    With beam_size 1 and `early_stopping` this is exactly greedy search. EOS is not allowed before
    `min_len` tokens. Shape: src (B, S) -> B lists of n_best hypotheses, best first
    """
    if beam_size < 1 or not 1 <= n_best <= beam_size:
        raise ValueError(f"need beam_size >= 1 and 1 <= n_best <= beam_size (got {beam_size} and {n_best})")
    c, k, B = model.config, beam_size, src.size(0)
    # All k hypotheses of a sentence start identical, so the first step runs one row per sentence (width 1)
    # and its 2k best continuations fill the beam; with fewer than 2k words, k rows of which only one counts.
    width = 1 if c.tgt_vocab_size >= 2 * k else k
    decoder = _Decoder(model, src, beam=width, cache=cache)
    limits = max_lengths(src, c, max_len_a, max_len_b)  # (B,)
    largest_penalty = length_penalty(limits, alpha)  # (B,) that of a hypothesis ending at its limit
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    active = torch.arange(B)  # sentence of each group of `width` rows
    history = torch.zeros(B, width, 0, dtype=torch.long)  # tokens so far per live hypothesis, on the CPU
    scores = torch.full((B, width), float("-inf"), device=src.device)  # summed log-probabilities
    scores[:, 0] = 0.0  # only one of identical rows may expand
    tokens = torch.full((B * width,), c.bos_id, dtype=torch.long, device=src.device)
    for step in range(int(limits.max())):
        n = active.numel()
        log_probs = F.log_softmax(decoder(tokens, ban_eos=step < min_len), dim=-1)  # (n*width, V)
        V = log_probs.size(-1)
        candidates = (scores.view(n * width, 1) + log_probs).view(n, width * V)
        top_scores, top = candidates.topk(min(2 * k, width * V), dim=1)  # (n, 2k), best first
        origin, word = top // V, top % V
        is_eos = word == c.eos_id
        # The first k non-EOS continuations stay live (stable order: best first).
        rank = torch.arange(top.size(1), device=top.device) + is_eos * top.size(1)
        live = rank.argsort(dim=1)[:, :k]  # (n, k)
        at_limit = limits[active] <= step + 1  # (n,) the last step these sentences may take
        # Hypotheses that finish now: EOS among the first k, or everything kept at the length limit.
        top_scores_c, origin_c, word_c = top_scores.cpu(), origin.cpu(), word.cpu()
        sentence = active.tolist()
        for i, j in is_eos[:, :k].cpu().nonzero().tolist():
            tokens_ = history[i, origin_c[i, j]].tolist()
            _finish(finished[sentence[i]], tokens_, float(top_scores_c[i, j]), True, k, alpha)
        live_c = live.cpu()
        for i in at_limit.nonzero().squeeze(1).tolist():
            for j in live_c[i].tolist():
                tokens_ = [*history[i, origin_c[i, j]].tolist(), int(word_c[i, j])]
                _finish(finished[sentence[i]], tokens_, float(top_scores_c[i, j]), False, k, alpha)
        if early_stopping:
            done = at_limit | torch.tensor([len(finished[s]) >= k for s in sentence])
        else:  # the best live score, were it to end at the length limit with nothing more lost
            best_live = top_scores_c.gather(1, live_c[:, :1]).squeeze(1)  # (n,)
            reachable = (best_live / largest_penalty[active]).tolist()
            done = at_limit | torch.tensor(
                [_cannot_improve(finished[s], n_best, r) for s, r in zip(sentence, reachable, strict=True)])
        if done.all():
            break
        keep = (~done).nonzero().squeeze(1)  # (n',)
        new_origin = origin_c.gather(1, live_c)[keep]  # (n', k)
        history = torch.cat([history[keep[:, None], new_origin], word_c.gather(1, live_c)[keep, :, None]], dim=2)
        keep_d = keep.to(src.device)
        scores = top_scores.gather(1, live)[keep_d]  # (n', k)
        tokens = word.gather(1, live)[keep_d].view(-1)
        rows = (keep[:, None] * width + new_origin).view(-1).to(src.device)  # (n'*k,)
        decoder.select(rows, same_sentences=keep.numel() == n and width == k)
        active, width = active[keep], k
    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in finished]


def _finish(hyps: list[Hypothesis], tokens: list[int], log_prob: float, eos: bool, k: int, alpha: float) -> None:
    """Add a finished hypothesis to a sentence's k best, replacing the worst one when they are full."""
    if log_prob == float("-inf"):
        return
    hyp = Hypothesis(tokens, log_prob, log_prob / length_penalty(len(tokens) + eos, alpha))
    if len(hyps) < k:
        hyps.append(hyp)
        return
    worst = min(range(k), key=lambda i: hyps[i].score)
    if hyp.score > hyps[worst].score:
        hyps[worst] = hyp


def _cannot_improve(hyps: list[Hypothesis], n_best: int, reachable: float) -> bool:
    """Whether the n_best best finished hypotheses all score at least `reachable`."""
    return len(hyps) >= n_best and sorted(h.score for h in hyps)[-n_best] >= reachable


def length_batches(sources: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """Indices of `sources` in batches of `batch_size`, longest first, so each batch pads little."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]), reverse=True)
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def search_ids(
    model: Transformer, sources: Sequence[Sequence[int]], decode: DecodeConfig, n_best: int = 1,
    precision: str = "fp32", progress: Callable[[int], None] | None = None,
) -> list[list[Hypothesis]]:
    """Translate tokenized sources (without EOS) in batches of similar length; results in input order.

    Beam size 1 runs greedy search; `decode.sampling` samples `n_best` times per sentence.
    `progress(n)` is called after each batch with the number of sentences done in it.
    """
    c, device = model.config, next(model.parameters()).device
    out: list[list[Hypothesis]] = [[] for _ in sources]
    generator = torch.Generator(device).manual_seed(decode.seed) if decode.sampling else None
    limits = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b)
    for chunk in length_batches(sources, decode.batch_size):
        src = collate([(sources[i], []) for i in chunk], c.pad_id, c.bos_id, c.eos_id).src.to(device)
        with torch.inference_mode(), autocast(device, precision):
            if decode.sampling:
                draws = [sample(model, src, decode.temperature, decode.top_k, decode.top_p, generator, **limits)
                         for _ in range(n_best)]
                results = [sorted(hyps, key=lambda h: -h.score) for hyps in zip(*draws, strict=True)]
            elif decode.beam_size == 1 and n_best == 1:
                results = [[h] for h in greedy(model, src, **limits)]
            else:
                results = beam_search(model, src, decode.beam_size, decode.length_penalty, n_best=n_best,
                                      early_stopping=decode.early_stopping, **limits)
        for i, hyps in zip(chunk, results, strict=True):
            out[i] = hyps
        if progress is not None:
            progress(len(chunk))
    return out
