"""The descendants: a causal LM whose later tokens never reach earlier positions, a bidirectional masked
LM, searches that work on the decoder-only model as on the encoder-decoder one (cached == uncached,
batch-invariant), and the sampling filters."""

import pytest
import torch

from tests.helpers.common import random_ids, tiny_config
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import beam_search, filtered_probs, greedy, sample, sampler
from vaswani.nn import CausalLM, MaskedLM, build_model


def _lm(**overrides) -> CausalLM:
    return CausalLM(tiny_config(type="decoder_only", **overrides)).eval()


def _limit(n: int, **options) -> DecodeRequest:
    """At most n new tokens, whatever the prompt's length."""
    return DecodeRequest.of(max_len_a=0.0, max_len_b=n, **options)


@pytest.mark.parametrize("norm_first", [False, True])
def test_a_later_token_never_changes_an_earlier_positions_logits(norm_first):
    lm = _lm(norm_first=norm_first)
    ids = random_ids([9, 9])
    changed = ids.clone()
    changed[:, 5:] = random_ids([4, 4])
    assert not torch.equal(changed, ids)
    a, b = lm(ids), lm(changed)
    torch.testing.assert_close(a[:, :5], b[:, :5], rtol=0, atol=1e-6)
    assert (a[:, 5:] - b[:, 5:]).abs().max() > 1e-3  # the test can fail: later positions do change


def test_masked_lm_sees_both_sides_and_ignores_padding():
    mlm = MaskedLM(tiny_config(type="encoder_only")).eval()
    ids = random_ids([8, 5])
    changed = ids.clone()
    changed[0, 7] = 3 if ids[0, 7] != 3 else 4
    assert (mlm(ids)[0, 0] - mlm(changed)[0, 0]).abs().max() > 1e-4  # the first position sees the last
    alone = mlm(ids[1:, :5])
    torch.testing.assert_close(mlm(ids)[1:, :5], alone, rtol=1e-5, atol=1e-5)


def test_cached_generation_equals_uncached():
    lm = _lm()
    prompts = random_ids([4, 4, 4])
    twelve, sampled = _limit(12), _limit(12, temperature=0.9, top_k=10, top_p=0.95)
    beam = _limit(8, beam_size=3, n_best=2)
    for cached, uncached in [
        (greedy(lm, prompts, twelve), greedy(lm, prompts, twelve, cache=False)),
        (greedy(lm, prompts, twelve, stop_at_eos=False), greedy(lm, prompts, twelve, cache=False, stop_at_eos=False)),
        (
            sample(lm, prompts, sampled, torch.Generator().manual_seed(3)),
            sample(lm, prompts, sampled, torch.Generator().manual_seed(3), cache=False),
        ),
        (
            [h for hs in beam_search(lm, prompts, beam) for h in hs],
            [h for hs in beam_search(lm, prompts, beam, cache=False) for h in hs],
        ),
    ]:
        assert [h.tokens for h in cached] == [h.tokens for h in uncached]
        assert [h.log_prob for h in cached] == pytest.approx([h.log_prob for h in uncached], abs=1e-4)
    assert len(greedy(lm, prompts, twelve, stop_at_eos=False)[0].tokens) == 12


def test_generation_is_batch_invariant():
    lm = _lm()
    prompts = random_ids([5, 5, 5, 5])
    together = greedy(lm, prompts, _limit(10))
    alone = [greedy(lm, prompts[i : i + 1], _limit(10))[0] for i in range(4)]
    assert [h.tokens for h in together] == [h.tokens for h in alone]
    beam = _limit(8, beam_size=3)
    beams = beam_search(lm, prompts, beam)
    alone = [beam_search(lm, prompts[i : i + 1], beam)[0][0] for i in range(4)]
    assert [b[0].tokens for b in beams] == [h.tokens for h in alone]


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_generation_beyond_the_context_moves_the_window_the_same_way_with_and_without_cache(positions):
    lm = _lm(positions=positions, max_positions=8)
    prompts = random_ids([3, 3])
    context = 6 if positions == "sinusoidal" else None  # learned: bounded by max_positions (8)
    kwargs = dict(request=_limit(30), stop_at_eos=False, context=context)
    cached, uncached = greedy(lm, prompts, **kwargs), greedy(lm, prompts, cache=False, **kwargs)
    assert [h.tokens for h in cached] == [h.tokens for h in uncached]
    assert [len(h.tokens) for h in cached] == [30, 30]
    long_prompt = random_ids([11])  # longer than the context itself: its last tokens are kept
    assert greedy(lm, long_prompt, **kwargs)[0].tokens == greedy(lm, long_prompt, cache=False, **kwargs)[0].tokens


def test_a_one_token_prompt_and_unequal_prompts():
    lm = _lm()
    one = torch.tensor([[5]])
    tokens = greedy(lm, one, _limit(6), stop_at_eos=False)[0].tokens
    expected = []  # the reference: the whole model over the prefix, step by step; PAD and BOS never generated
    for _ in range(6):
        logits = lm(torch.tensor([[5, *expected]]))[0, -1]
        logits[[lm.config.pad_id, lm.config.bos_id]] = float("-inf")
        expected.append(int(logits.argmax()))
    assert tokens == expected
    with pytest.raises(ValueError, match="equal lengths"):
        greedy(lm, random_ids([4, 2]), _limit(6))


def test_top_k_never_samples_outside_the_k_best():
    torch.manual_seed(0)
    logits = torch.randn(4, 50)
    draws = torch.stack([sampler(1.0, 5, 1.0, torch.Generator().manual_seed(s))(logits) for s in range(300)])
    best = logits.topk(5, dim=-1).indices
    for row in range(4):
        assert set(draws[:, row].tolist()) <= set(best[row].tolist())
    assert len(set(draws[:, 0].tolist())) > 1  # it does sample, not argmax


def test_top_p_keeps_the_smallest_set_reaching_p():
    torch.manual_seed(1)
    logits = torch.randn(6, 40) * 2
    for p in (0.3, 0.75, 0.95):
        kept = filtered_probs(logits, 1.0, 0, p) > 0
        probs = logits.softmax(-1)
        for row in range(6):
            mass = probs[row][kept[row]].sum()
            assert mass >= p - 1e-6
            smallest = probs[row][kept[row]].min()
            assert mass - smallest < p + 1e-6  # without its least likely token the set falls short of p
        torch.testing.assert_close(filtered_probs(logits, 1.0, 0, p).sum(-1), torch.ones(6))


def test_seeds_repeat_and_differ():
    lm = _lm()
    prompts = random_ids([3])
    runs = [
        sample(
            lm,
            prompts,
            _limit(20, temperature=1.0, top_k=0, top_p=1.0),
            torch.Generator().manual_seed(s),
            stop_at_eos=False,
        )[0].tokens
        for s in (7, 7, 8)
    ]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_a_classifier_reads_the_last_real_token_or_the_first():
    lm = CausalLM(tiny_config(type="decoder_only", n_classes=3)).eval()
    ids = random_ids([6, 4])
    torch.testing.assert_close(lm.classify(ids)[1:], lm.classify(ids[1:, :4]), rtol=1e-5, atol=1e-5)
    mlm = MaskedLM(tiny_config(type="encoder_only", n_classes=2)).eval()
    assert mlm.classify(ids).shape == (2, 2)
    torch.testing.assert_close(mlm.classify(ids)[1:], mlm.classify(ids[1:, :4]), rtol=1e-5, atol=1e-5)
    changed = ids.clone()
    changed[1, 0] = 3 if ids[1, 0] != 3 else 4
    assert (mlm.classify(changed)[1] - mlm.classify(ids)[1]).abs().max() > 1e-5  # it reads the first position
    with pytest.raises(ValueError, match="no classifier"):
        _lm().classify(ids)


@pytest.mark.parametrize("model_type", ["decoder_only", "encoder_only"])
def test_mean_pooling_averages_the_real_tokens_states_and_ignores_padding(model_type):
    model = build_model(tiny_config(type=model_type, n_classes=2, pool="mean")).eval()
    ids = random_ids([6, 4])  # right-padded: the second row has 4 real tokens
    hidden = model.hidden_states(ids)
    torch.testing.assert_close(model.pooled(hidden, ids)[1], hidden[1, :4].mean(0))
    torch.testing.assert_close(model.classify(ids)[1:], model.classify(ids[1:, :4]), rtol=1e-5, atol=1e-5)


def test_bert_s_options_add_their_modules_and_leave_the_default_model_as_it_was():
    """model.embedding_norm, output_transform and pooler (off by default: the state dict of before) add BERT's
    embedding LayerNorm, MLM head transform and pooler; the transform is what the logits read."""
    from vaswani.config import ConfigError
    from vaswani.nn import build_model

    plain = build_model(tiny_config(type="encoder_only", n_classes=2))
    bert = build_model(
        tiny_config(type="encoder_only", n_classes=2, embedding_norm=True, output_transform=True, pooler=True)
    )
    added = set(bert.state_dict()) - set(plain.state_dict())
    assert set(plain.state_dict()) <= set(bert.state_dict())
    assert added == {
        "encoder.embed.norm.weight",
        "encoder.embed.norm.bias",
        "output_transform.dense.weight",
        "output_transform.dense.bias",
        "output_transform.norm.weight",
        "output_transform.norm.bias",
        "pooler.weight",
        "pooler.bias",
    }
    ids = random_ids([5, 3])
    hidden = bert.hidden_states(ids)
    expected = torch.nn.functional.linear(bert.output_transform(hidden), bert.output_weight)
    torch.testing.assert_close(bert(ids), expected)
    assert "pooler" in tiny_config(type="encoder_only", pooler=True).unused()  # no classifier: no pooler
    with pytest.raises(ConfigError, match="output_transform"):
        tiny_config(output_transform=True)  # encoder_decoder
