"""The growing cache (nn/cache.py GrowingKVCache) against the value cache (KVCache): the same logits, bit for bit,
through steps, beam reorders, a widened beam, sentences dropped and buffers grown past their room."""

import torch

from tests.conftest import random_ids, tiny_config
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


def test_a_search_with_the_growing_cache_finds_what_the_value_cache_finds(monkeypatch):
    from vaswani.decode import search
    from vaswani.decode.request import DecodeRequest

    torch.manual_seed(1)
    model = Transformer(tiny_config()).eval()
    src = random_ids([6, 2, 9, 4])
    request = DecodeRequest.of(beam_size=4, max_len_b=20)
    with torch.inference_mode():
        growing = search.beam_search(model, src, request)
        greedy = search.greedy(model, src, request)
        monkeypatch.setattr(search, "GrowingKVCache", lambda cache: cache)
        assert isinstance(search.start_steps(model, src, 4).cache, KVCache)
        value = search.beam_search(model, src, request)
        assert [[(h.tokens, h.score) for h in hyps] for hyps in growing] == [
            [(h.tokens, h.score) for h in hyps] for hyps in value
        ]
        assert [(h.tokens, h.score) for h in greedy] == [
            (h.tokens, h.score) for h in search.greedy(model, src, request)
        ]
