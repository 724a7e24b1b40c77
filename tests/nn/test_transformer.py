import pytest
import torch

from tests.helpers.common import random_ids, tiny_config
from tests.helpers.torch_reference import torch_attention_weights, torch_reference
from vaswani import ModelConfig, Transformer
from vaswani.nn.cache import KVCache
from vaswani.nn.masks import target_mask


def reference_logits(model: Transformer, ref: torch.nn.Transformer, src, tgt_in) -> torch.Tensor:
    pad = model.config.pad_id
    causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1))
    memory = ref.encoder(model.encoder.embed(src), src_key_padding_mask=src == pad)
    hidden = ref.decoder(model.decoder.embed(tgt_in), memory, tgt_mask=causal, memory_key_padding_mask=src == pad)
    return model.logits(hidden)


@pytest.mark.parametrize("norm_first", [False, True])
def test_equals_torch_transformer_with_copied_weights(norm_first):
    model = Transformer(tiny_config(norm_first=norm_first, n_decoder_layers=3))
    ref = torch_reference(model)
    src = random_ids([7, 4, 1, 6])
    tgt_in = random_ids([5, 6, 2, 3])
    expected = reference_logits(model, ref, src, tgt_in)
    torch.testing.assert_close(model(src, tgt_in), expected, atol=1e-5, rtol=1e-5)
    # The reference code really differs from a model with other weights (the test can fail).
    with torch.no_grad():
        model.decoder.layers[0].feed_forward.linear1.bias.add_(0.1)
    assert not torch.allclose(model(src, tgt_in), expected, atol=1e-3)


def test_cached_decoding_reproduces_teacher_forced_logits():
    model = Transformer(tiny_config()).eval()
    src = random_ids([6, 3, 5])
    tgt_in = random_ids([7, 7, 7])
    full = model(src, tgt_in)  # (B, T, V)
    memory, memory_mask = model.encode(src)
    cache = None
    for t in range(tgt_in.size(1)):
        logits, cache = model.decode_step(tgt_in[:, t], memory, memory_mask, cache)
        torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=1e-5)
    assert cache.length == tgt_in.size(1)
    # Several tokens per step (a forced prefix, then the rest) give the same logits too.
    logits, cache = model.decode_step(tgt_in[:, :3], memory, memory_mask)
    rest, _ = model.decode_step(tgt_in[:, 3:], memory, memory_mask, cache)
    torch.testing.assert_close(torch.cat([logits, rest], dim=1), full, atol=1e-5, rtol=1e-5)


def test_expanded_and_reordered_cache_equals_decoding_the_repeated_batch():
    model = Transformer(tiny_config()).eval()
    src = random_ids([5, 3])
    tgt_in = random_ids([4, 4])
    memory, memory_mask = model.encode(src)
    _, cache = model.decode_step(tgt_in[:, :2], memory, memory_mask)
    beams = cache.expand(3)  # rows 0,1,2 are sentence 0; rows 3,4,5 sentence 1
    assert beams.group == 3 and beams.cross_kv is cache.cross_kv  # one copy of the encoder's keys per sentence
    order = torch.tensor([2, 0, 0, 4, 5, 3])
    beams = beams.reorder(order)
    step = tgt_in[:, 2].repeat_interleave(3)
    expected, _ = model.decode_step(tgt_in[:, 2], memory, memory_mask, cache)
    # the mask per sentence, or per row as the memory would be repeated: the same logits
    for mask in (memory_mask, memory_mask.repeat_interleave(3, dim=0)):
        logits, _ = model.decode_step(step, None, mask, beams)
        torch.testing.assert_close(logits, expected.repeat_interleave(3, dim=0), atol=1e-5, rtol=1e-5)
    # against the cache copied to every row, keys of the encoder too (no group)
    copied = KVCache(
        beams.self_kv, tuple((k.repeat_interleave(3, 0), v.repeat_interleave(3, 0)) for k, v in cache.cross_kv)
    )
    full, _ = model.decode_step(step, None, memory_mask.repeat_interleave(3, dim=0), copied)
    torch.testing.assert_close(logits, full, atol=1e-6, rtol=1e-6)
    # the second sentence alone, its rows widened to 2: one row of keys, two hypotheses
    alone = beams.reorder(torch.tensor([4, 4]), kept=torch.tensor([1]))
    assert alone.batch_size == 2 and alone.group == 2 and alone.cross_kv[0][0].size(0) == 1
    logits, _ = model.decode_step(tgt_in[1:, 2].repeat(2), None, memory_mask[1:], alone)
    torch.testing.assert_close(logits, expected[1:].repeat(2, 1), atol=1e-5, rtol=1e-5)


def test_appended_padding_and_batch_neighbours_do_not_change_real_outputs():
    model = Transformer(tiny_config()).eval()
    src = random_ids([6, 2, 4])
    tgt_in = random_ids([3, 5, 2])
    batched = model(src, tgt_in)
    for i, (s, t) in enumerate(zip([6, 2, 4], [3, 5, 2], strict=True)):
        alone = model(src[i : i + 1, :s], tgt_in[i : i + 1, :t])
        torch.testing.assert_close(batched[i : i + 1, :t], alone, atol=1e-5, rtol=1e-5)
    more_padding = model(torch.nn.functional.pad(src, (0, 5)), torch.nn.functional.pad(tgt_in, (0, 4)))
    torch.testing.assert_close(more_padding[:, : tgt_in.size(1)], batched, atol=1e-5, rtol=1e-5)


def test_explicit_target_mask_equals_the_causal_fast_path_on_real_positions():
    model = Transformer(tiny_config()).eval()
    src, tgt_in = random_ids([4, 6]), random_ids([5, 2])
    memory, memory_mask = model.encode(src)
    cache = model.decoder.start_cache(memory)
    explicit, _, _ = model.decoder(tgt_in, memory_mask, cache, self_mask=target_mask(tgt_in, 0))
    fast, _, _ = model.decoder(tgt_in, memory_mask, cache)
    real = tgt_in != 0
    torch.testing.assert_close(explicit[real], fast[real], atol=1e-6, rtol=1e-5)


def test_future_target_tokens_never_change_earlier_outputs():
    model = Transformer(tiny_config()).eval()
    src, tgt_in = random_ids([5, 5]), random_ids([6, 6])
    changed = tgt_in.clone()
    changed[:, 4] = (changed[:, 4] + 7) % 47 + 3
    a, b = model(src, tgt_in), model(src, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_fully_padded_source_gives_finite_logits_and_gradients():
    model = Transformer(tiny_config())
    src = random_ids([4, 3])
    src[1] = 0  # an all-padding source: every cross-attention row is fully masked
    logits = model(src, random_ids([3, 3]))
    assert torch.isfinite(logits).all()
    logits.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_first": True, "activation": "gelu", "positions": "learned"},
        {"share_embeddings": False, "tgt_vocab_size": 40},
        {"share_embeddings": False, "tie_output": False, "tgt_vocab_size": 40},
    ],
)
def test_gradients_reach_every_parameter(overrides):
    model = Transformer(tiny_config(dropout=0.1, **overrides)).train()
    logits = model(random_ids([5, 3]), random_ids([4, 4], vocab=model.config.tgt_vocab_size))
    assert logits.shape == (2, 4, model.config.tgt_vocab_size)
    torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), random_ids([8], vocab=model.config.tgt_vocab_size)[0]
    ).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_embedding_sharing_follows_the_config():
    shared = Transformer(tiny_config())
    assert shared.encoder.embed.tokens is shared.decoder.embed.tokens
    assert shared.output_weight is shared.encoder.embed.tokens.weight
    tied = Transformer(tiny_config(share_embeddings=False, tgt_vocab_size=40))
    assert tied.encoder.embed.tokens is not tied.decoder.embed.tokens
    assert tied.output_weight is tied.decoder.embed.tokens.weight
    untied = Transformer(tiny_config(share_embeddings=False, tie_output=False, tgt_vocab_size=40))
    assert untied.output_weight is not untied.decoder.embed.tokens.weight


def test_sinusoidal_model_beyond_its_table_equals_one_whose_table_covers_the_input():
    model = Transformer(tiny_config(max_positions=8)).eval()  # 8 positions tabulated, the rest computed
    covered = Transformer(tiny_config(max_positions=64)).eval()
    covered.load_state_dict(model.state_dict())  # the tables are not in the state dict: the same weights
    src, tgt_in = random_ids([13, 9]), random_ids([11, 5])
    torch.testing.assert_close(model(src, tgt_in), covered(src, tgt_in), rtol=1e-5, atol=1e-6)


def _expected_parameters(c: ModelConfig) -> int:
    """Count from the paper's description: shared embedding, 4 attention matrices, the FFN, LayerNorms."""
    D, F, V = c.d_model, c.d_ff, c.src_vocab_size
    attention = 4 * (D * D + D)
    ffn = D * F + F + F * D + D
    norm = 2 * D
    return V * D + c.n_layers * (attention + ffn + 2 * norm) + c.decoder_layers * (2 * attention + ffn + 3 * norm)


@pytest.mark.parametrize("preset,paper_millions", [("base", 65), ("big", 213)])
def test_parameter_counts_match_the_paper(preset, paper_millions):
    config = ModelConfig.preset(preset, vocab_size=37000)
    with torch.device("meta"):
        model = Transformer(config)
    assert model.num_parameters() == _expected_parameters(config)
    assert abs(model.num_parameters() / 1e6 - paper_millions) / paper_millions < 0.035


def test_attention_weights_are_torch_transformers_per_layer_and_head():
    model = Transformer(tiny_config(n_decoder_layers=3)).eval()
    src, tgt_in = random_ids([5, 3]), random_ids([4, 2])
    weights = model.attention_weights(src, tgt_in)
    ref = torch_reference(model)
    expected = torch_attention_weights(ref, lambda: reference_logits(model, ref, src, tgt_in))
    for ours, names in (
        (weights.encoder, [f"encoder.layers.{i}.self_attn" for i in range(2)]),
        (weights.decoder_self, [f"decoder.layers.{i}.self_attn" for i in range(3)]),
        (weights.cross, [f"decoder.layers.{i}.multihead_attn" for i in range(3)]),
    ):
        assert len(ours) == len(names)
        for w, name in zip(ours, names, strict=True):
            torch.testing.assert_close(w, expected[name], rtol=1e-5, atol=1e-6, msg=name)
    assert not torch.allclose(weights.cross[0], weights.cross[1], atol=1e-3)  # layers differ: the order is tested
    torch.testing.assert_close(weights.cross[0].sum(-1), torch.ones(2, 2, 4))
    assert weights.cross[0][1, :, :, 3:].abs().sum() == 0  # padding of sentence 1 gets no attention
    assert weights.decoder_self[0][0].triu(1).abs().sum() == 0  # causal


@pytest.mark.parametrize(
    "bad,match",
    [
        (torch.zeros(2, 3), "dtype torch.long"),
        (torch.zeros(3, dtype=torch.long), r"shape \(batch, length\)"),
        (torch.zeros(2, 0, dtype=torch.long), "length 0"),
    ],
)
def test_bad_token_ids_raise_a_clear_error(bad, match):
    model = Transformer(tiny_config())
    with pytest.raises(ValueError, match=match):
        model(bad, random_ids([2, 2]))
