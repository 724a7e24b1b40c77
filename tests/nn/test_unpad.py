"""The encoder without its padding at inference (nn/unpad.py): the same memory at every real token as the padded
encoder and as torch.nn.Transformer's, zeros at the padding, and the position-wise layers fed the real tokens only."""

import pytest
import torch

from tests.helpers.common import random_ids, tiny_config
from tests.helpers.torch_reference import torch_reference
from vaswani import Transformer
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import beam_search, greedy
from vaswani.nn import MaskedLM, unpad
from vaswani.nn.cpu_linear.onednn_fp32 import pack_fp32, packed_available
from vaswani.nn.masks import padding_mask
from vaswani.nn.unpad import TokenRows

LENGTHS = [9, 3, 6, 1, 9, 2]  # 30 real tokens in 54 positions


def _model(**overrides) -> Transformer:
    return Transformer(tiny_config(**overrides)).eval()


def test_rows_pack_the_real_tokens_in_order_and_pad_them_back_with_zeros():
    src = random_ids(LENGTHS)
    rows = TokenRows(padding_mask(src, 0))
    packed = rows.pack(src[:, :, None])  # (N, 1)
    assert packed[:, 0].tolist() == [t for row in src.tolist() for t in row if t != 0]
    assert torch.equal(rows.pad(packed)[:, :, 0], src)


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_unpadded_memory_is_the_padded_ones_and_torchs_at_every_real_token(norm_first):
    model = _model(norm_first=norm_first)
    src = random_ids(LENGTHS)
    mask = padding_mask(src, 0)
    real = mask[:, 0, 0]  # (B, S)
    with torch.no_grad():
        padded, _ = model.encoder(src, mask)
        memory, _ = model.encoder(src, mask, unpad=True)
        ref = torch_reference(model)
        torchs = ref.encoder(model.encoder.embed(src), src_key_padding_mask=~real)
    assert not torch.equal(memory, padded)  # the padding's positions differ: the other path ran
    torch.testing.assert_close(memory[real], padded[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(memory[real], torchs[real], rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(memory[~real]) == 0


def test_the_feed_forward_sees_only_the_real_tokens():
    model = _model()
    src = random_ids(LENGTHS)
    seen = []
    model.encoder.layers[0].feed_forward.register_forward_hook(lambda m, args, out: seen.append(args[0].shape))
    with torch.no_grad():
        model.encode(src)
    assert seen == [torch.Size([sum(LENGTHS), 32])]
    with torch.enable_grad():  # training (and anything asking for gradients) keeps the padded layout: one graph
        model.encode(src)
    assert seen[1] == torch.Size([len(LENGTHS), max(LENGTHS), 32])


def test_a_batch_with_little_or_no_padding_keeps_the_padded_layout():
    full = random_ids([6] * 4)
    assert TokenRows.worth_it(padding_mask(full, 0)) is None
    almost = random_ids([20] * 9 + [19])  # 0.5% padding
    assert TokenRows.worth_it(padding_mask(almost, 0)) is None
    assert TokenRows.worth_it(padding_mask(random_ids(LENGTHS), 0)) is not None
    nothing = torch.zeros(2, 4, dtype=torch.long)  # every position padding: nothing to pack
    assert TokenRows.worth_it(padding_mask(nothing, 0)) is None


@pytest.mark.parametrize("packed", [False, True], ids=["as-built", "packed"])
def test_searches_give_the_padded_encoders_outputs(packed, monkeypatch):
    if packed and not packed_available():
        pytest.skip("this torch has no oneDNN packed linear")
    model = _model(activation="silu")
    if packed:
        model = pack_fp32(model, every_layer=True)
    src = random_ids(LENGTHS)
    request = DecodeRequest.of(beam_size=3, max_len_a=0, max_len_b=8)

    def both():
        return greedy(model, src, request) + [hyps[0] for hyps in beam_search(model, src, request)]

    found = both()
    monkeypatch.setattr(unpad, "MIN_PADDING", 2.0)  # never unpadded
    assert TokenRows.worth_it(padding_mask(src, 0)) is None
    expected = both()
    assert [h.tokens for h in found] == [h.tokens for h in expected]
    assert [h.score for h in found] == pytest.approx([h.score for h in expected], abs=1e-4)


@pytest.mark.parametrize("pooling", ["first", "mean", "last"])
def test_a_masked_lm_classifies_and_fills_as_with_its_padding(pooling):
    model = MaskedLM(tiny_config(type="encoder_only", n_classes=3, pool=pooling)).eval()
    ids = random_ids(LENGTHS)
    real = ids != 0
    with torch.no_grad():
        hidden, logits, classes = model.hidden_states(ids), model(ids), model.classify(ids)
        padded, _ = model.encoder(ids, padding_mask(ids, 0))
    assert torch.count_nonzero(hidden[~real]) == 0  # the padding was dropped
    torch.testing.assert_close(hidden[real], padded[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits[real], model.logits(padded)[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(classes, model.classify(ids, padded), rtol=1e-5, atol=1e-5)
