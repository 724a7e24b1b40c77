"""Each output's confidence: the mean probability of its tokens, from the log-probabilities the search chose."""

import math

import pytest
import torch

from tests.helpers.common import random_ids
from vaswani.decode import search
from vaswani.decode.request import DecodeRequest


@pytest.mark.parametrize("beam", [1, 4])
def test_the_token_log_probs_sum_to_the_hypothesis_log_prob(model, beam):
    src = random_ids([5, 9, 3, 12, 1])
    with torch.inference_mode():
        if beam == 1:
            found = [[h] for h in search.greedy(model, src)]
        else:
            found = search.beam_search(model, src, DecodeRequest.of(beam_size=beam, n_best=beam))
    ended = 0
    for hyps in found:
        for h in hyps:
            assert len(h.token_log_probs) in (len(h.tokens), len(h.tokens) + 1)  # EOS's where the model chose it
            ended += len(h.token_log_probs) == len(h.tokens) + 1
            assert sum(h.token_log_probs) == pytest.approx(h.log_prob, abs=1e-4)
            expected = sum(math.exp(x) for x in h.token_log_probs) / len(h.token_log_probs)
            assert h.confidence == pytest.approx(expected) and 0 < h.confidence <= 1
    assert ended  # outputs that end with EOS count its probability


def test_a_forced_eos_is_not_a_token_the_model_chose(model):
    src = random_ids([9, 12])
    with torch.inference_mode():
        request = DecodeRequest.of(beam_size=2, max_len_a=0, max_len_b=2, min_len=2, forced_eos=True)
        hyps = search.beam_search(model, src, request)
    for h in (h for sentence in hyps for h in sentence):
        assert len(h.tokens) == 2 and len(h.token_log_probs) == 2
        assert sum(h.token_log_probs) == pytest.approx(h.log_prob, abs=1e-4)
