import torch

from tests.conftest import random_ids, tiny_config
from vaswani import Transformer
from vaswani.decode.search import greedy


def _greedy_without_cache(model, src, max_len):
    """Re-runs the whole prefix each step: the reference for cached greedy decoding."""
    c = model.config
    out = []
    for row in src:
        prefix = [c.bos_id]
        for _ in range(max_len):
            logits = model(row[None], torch.tensor([prefix]))
            token = int(logits[0, -1].argmax())
            if token == c.eos_id:
                break
            prefix.append(token)
        out.append(prefix[1:])
    return out


def test_cached_greedy_equals_uncached_and_batch_equals_single():
    torch.manual_seed(3)
    model = Transformer(tiny_config()).eval()
    src = random_ids([5, 2, 7, 4])
    lengths = [5, 2, 7, 4]
    batched = greedy(model, src, max_len_a=0.0, max_len_b=9)
    assert batched == _greedy_without_cache(model, src, 9)
    for i, n in enumerate(lengths):
        assert greedy(model, src[i : i + 1, :n], 0.0, 9) == [batched[i]]


def test_greedy_respects_the_length_limit():
    model = Transformer(tiny_config()).eval()
    out = greedy(model, random_ids([3, 6]), max_len_a=1.0, max_len_b=2)
    assert len(out[0]) <= 5 and len(out[1]) <= 8
