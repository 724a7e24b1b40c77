"""The growing cache (nn/cache.py GrowingKVCache) against the value cache (KVCache): the same logits, bit for bit,
through steps, beam reorders, a widened beam, sentences dropped and buffers grown past their room."""

import torch

from tests.helpers.common import random_ids, tiny_config
from vaswani import Transformer
from vaswani.nn.cache import GrowingKVCache, KVCache


def test_the_growing_cache_gives_the_value_caches_logits_exactly():
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    src = random_ids([5, 3, 7])
    memory, mask = model.encode(src)
    steps = GrowingKVCache.CHUNK * 2 + 3  # grown twice
    tokens = random_ids([steps + 1] * 12)  # a beam of 4 per sentence: rows 4b .. 4b+3
    with torch.inference_mode():
        value = model.decoder.start_cache(memory)
        growing = GrowingKVCache(value)
        assert growing.group == 1 and growing.length == 0
        rows = torch.arange(3)
        for t in range(steps):
            step = tokens[rows, t]
            expected, value = model.decode_step(step, None, mask, value)
            logits, same = model.decode_step(step, None, mask, growing)
            assert same is growing and growing.length == value.length == t + 1
            assert torch.equal(logits, expected)
            for (k, v), (k_ref, v_ref) in zip(growing.self_kv, value.self_kv, strict=True):
                assert torch.equal(k, k_ref) and torch.equal(v, v_ref)
            if t == 0:  # the beam widens: 4 rows per sentence from the one
                index, kept = torch.arange(3).repeat_interleave(4), None
            elif t == 5:  # sentence 1 finishes: its rows leave, the others are reshuffled within their sentence
                index, kept = torch.tensor([3, 0, 0, 1, 9, 9, 8, 10]), torch.tensor([0, 2])
            else:
                n = growing.batch_size
                index = (torch.arange(n) // 4 * 4 + torch.randint(0, 4, (n,))) if n > 3 else torch.arange(n)
                kept = None
            value, growing = value.reorder(index, kept), growing.reorder(index, kept)
            mask = mask if kept is None else mask[kept]
            rows = rows[index] if t else rows.repeat_interleave(4) * 4 + torch.arange(4).repeat(3)
            assert growing.batch_size == value.batch_size and growing.group == value.group
    assert growing.keys[0].size(2) == -(-steps // GrowingKVCache.CHUNK) * GrowingKVCache.CHUNK  # room, not more


def test_a_search_with_the_growing_cache_finds_what_the_value_cache_finds():
    from vaswani.decode import search
    from vaswani.decode.request import DecodeRequest

    torch.manual_seed(1)
    model = Transformer(tiny_config()).eval()
    src = random_ids([6, 2, 9, 4])
    request = DecodeRequest.of(beam_size=4, max_len_b=20)
    step = model.decode_step  # a step given (a compiled one) takes the value cache
    with torch.inference_mode():
        assert isinstance(search.start_steps(model, src, 4).cache, GrowingKVCache)
        assert isinstance(search.start_steps(model, src, 4, step=step).cache, KVCache)
        for search_ in (search.beam_search, search.greedy):
            growing, value = search_(model, src, request), search_(model, src, request, step=step)
            if search_ is search.greedy:
                growing, value = [[h] for h in growing], [[h] for h in value]
            assert [[(h.tokens, h.score) for h in hyps] for hyps in growing] == [
                [(h.tokens, h.score) for h in hyps] for hyps in value
            ]


def test_a_language_model_generates_the_same_with_the_growing_cache():
    from vaswani.decode import search
    from vaswani.decode.request import DecodeRequest
    from vaswani.nn import CausalLM

    torch.manual_seed(2)
    lm = CausalLM(tiny_config(type="decoder_only")).eval()
    prompts = random_ids([5, 5, 5])
    request = DecodeRequest.of(max_len_a=0.0, max_len_b=30, beam_size=3)
    runs = []
    for step in (None, lm.decode_step):  # a step given (a compiled one) takes the value cache
        with torch.inference_mode():  # 30 tokens past a context of 6: the window moves, the cache is made again
            greedy = search.greedy(lm, prompts, request, stop_at_eos=False, context=6, step=step)
            beams = search.beam_search(lm, prompts, request, step=step)
            steps = search.start_steps(lm, prompts, 1, step=step)
            steps.step(steps.first)
        runs.append(([(h.tokens, h.score) for h in greedy], [[(h.tokens, h.score) for h in b] for b in beams]))
        assert isinstance(steps.cache, GrowingKVCache) == (step is None)
    assert runs[0] == runs[1]
