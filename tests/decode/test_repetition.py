"""No repetition loops (decode/repetition.py): the n-gram ban and the repetition penalty, as transformers defines
them, in every search."""

import pytest
import torch

from tests.helpers.common import random_ids
from tests.helpers.decode_models import random_model
from vaswani.decode import search
from vaswani.decode.repetition import Repetition, repeating
from vaswani.decode.request import DecodeRequest


def ngrams(tokens, n):
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def test_the_tokens_that_would_repeat_an_ngram():
    assert repeating([1, 2, 3, 1, 2], 3) == {3}
    assert repeating([1, 2, 1], 1) == {1, 2}
    assert repeating([5, 6, 5], 2) == {6}
    assert repeating([4], 2) == set() and repeating([], 3) == set()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_ban_and_the_penalty_are_transformers_logits_processors(n):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    histories = torch.randint(0, 6, (4, 9))  # small vocabulary: many repeats
    logits = torch.randn(4, 10)
    ours = logits.clone()
    Repetition(n, 1.3).penalize(ours, histories.tolist())
    theirs = transformers.RepetitionPenaltyLogitsProcessor(1.3)(histories, logits.clone())
    torch.testing.assert_close(ours, theirs)
    ours = logits.log_softmax(-1)
    Repetition(n).ban(ours, histories.tolist())
    theirs = transformers.NoRepeatNGramLogitsProcessor(n)(histories, logits.log_softmax(-1))
    assert torch.equal(ours.isinf(), theirs.isinf()) and ours.isinf().any()


@pytest.mark.parametrize("n", [2, 3])
def test_no_output_repeats_an_ngram_in_any_search(n):
    model = random_model(30, seed=5)  # untrained: it loops ("near near near ...")
    src = random_ids([5, 9, 3, 12], vocab=30)
    limits = DecodeRequest.of(max_len_a=0, max_len_b=14)
    rule = limits.replace(no_repeat_ngram=n)
    plain = search.greedy(model, src, limits)
    assert any(len(set(ngrams(h.tokens, n))) < len(ngrams(h.tokens, n)) for h in plain)  # it did loop
    outputs = {
        "greedy": search.greedy(model, src, rule),
        "beam": [h for hyps in search.beam_search(model, src, rule.replace(beam_size=4, n_best=3)) for h in hyps],
        "sampling": search.sample(model, src, rule, generator=torch.Generator().manual_seed(1)),
    }
    for name, hyps in outputs.items():
        assert len(hyps) == (12 if name == "beam" else 4), name  # 4 sentences (3 hypotheses each in the beam)
        for h in hyps:
            assert len(set(ngrams(h.tokens, n))) == len(ngrams(h.tokens, n)), (name, h.tokens)


def test_a_penalty_of_one_and_no_ban_change_nothing(model, monkeypatch):
    src = random_ids([5, 9, 3, 12])
    off = Repetition(0, 1.0)
    assert not off.active
    beam = DecodeRequest.of(beam_size=4, no_repeat_ngram=0, repetition_penalty=1.0)
    assert beam.repetition is None  # a request leaves inactive rules out of the search
    with torch.inference_mode():
        plain = search.beam_search(model, src, beam)
        with monkeypatch.context() as m:  # the rules applied at every step, though they are off
            m.setattr(DecodeRequest, "repetition", property(lambda self: off))
            assert search.beam_search(model, src, beam) == plain
        strong = search.greedy(model, src, DecodeRequest.of(repetition_penalty=5.0))
        assert strong != search.greedy(model, src)  # and a strong penalty does change outputs


def test_a_language_models_prompt_counts_as_output():
    from tests.helpers.common import tiny_config
    from vaswani.nn.language_model import CausalLM

    torch.manual_seed(2)
    model = CausalLM(tiny_config(type="decoder_only", tgt_vocab_size=40, src_vocab_size=40)).eval()
    prompt = torch.tensor([[7, 8, 9, 7, 8]])
    out = search.greedy(model, prompt, DecodeRequest.of(max_len_a=0, max_len_b=6, no_repeat_ngram=3))
    whole = [7, 8, 9, 7, 8, *out[0].tokens]
    assert out[0].tokens[0] != 9  # 7 8 9 is in the prompt
    assert len(set(ngrams(whole, 3))) == len(ngrams(whole, 3))
