import pytest
import torch
from torch.utils import flop_counter

from tests.helpers.common import random_ids, tiny_config
from vaswani.nn import build_model
from vaswani.runtime import flops
from vaswani.runtime.flops import GPU_PEAKS, forward_flops, mfu, peak_flops, training_flops
from vaswani.train.loss import label_smoothed_cross_entropy
from vaswani.train.tasks.base import HiddenStates


def test_the_count_by_hand():
    """d 8, f 16, one layer each, V 10; a source of 3 tokens, a target of 2, both predicted."""
    c = tiny_config(d_model=8, n_heads=2, d_ff=16, n_layers=1, src_vocab_size=10, tgt_vocab_size=10)
    encoder = 3 * (8 * 64 + 4 * 3 * 8 + 4 * 8 * 16)  # 3 tokens x (QKVO + scores/sum over 3 + FFN) = 3,360
    decoder = 2 * (8 * 64 + 4 * 2 * 8 + 4 * 64 + 4 * 3 * 8 + 4 * 8 * 16)  # 2 tokens: self, cross Q/O/attn, FFN = 2,880
    cross_kv = 3 * 4 * 64  # the source's cross keys and values = 768
    projection = 2 * 8 * 10 * 2  # = 320
    assert forward_flops(c, [3], [2], 2) == encoder + decoder + cross_kv + projection == 7328
    assert training_flops(c, [3], [2], 2) == 3 * 7328
    lm = tiny_config(
        type="decoder_only", d_model=8, n_heads=2, d_ff=16, n_layers=1, src_vocab_size=10, tgt_vocab_size=10
    )
    assert forward_flops(lm, None, [4], 4) == 4 * (8 * 64 + 4 * 4 * 8 + 4 * 8 * 16) + 2 * 8 * 10 * 4
    with pytest.raises(ValueError, match="source and a target length"):
        forward_flops(c, [3], None, 2)


def _sdpa(query, key, value, *args, out_shape=None, **kwargs):
    return flop_counter.sdpa_flop_count(query, key, value)


def _sdpa_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs):
    # Model FLOPs count a backward pass as twice the forward; torch's own backward formula also counts the
    # kernel recomputing the scores (5 products, 2.5x): that is hardware FLOPs, not model FLOPs.
    return 2 * flop_counter.sdpa_flop_count(query, key, value)


@pytest.mark.parametrize("model_type", ["encoder_decoder", "decoder_only", "encoder_only"])
def test_the_count_equals_torchs_flop_counter_on_a_training_pass(model_type):
    """torch.utils.flop_counter counts every matrix product of a real forward and backward pass (the CPU
    attention kernel's with torch's own SDPA formula, registered here): our formula gives the same number."""
    c = tiny_config(type=model_type, d_model=32, n_heads=2, d_ff=64, n_layers=2, src_vocab_size=50, tgt_vocab_size=50)
    model = build_model(c)
    B, S, T = 3, 7, 5
    src, tgt_in, tgt_out = random_ids([S] * B), random_ids([T] * B), random_ids([T] * B)
    aten = torch.ops.aten
    mapping = {
        aten._scaled_dot_product_flash_attention_for_cpu: _sdpa,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_backward,
    }
    with flop_counter.FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        if model_type == "encoder_decoder":
            hidden, target, ours = HiddenStates(model)(src, tgt_in), tgt_out, training_flops(c, [S] * B, [T] * B, B * T)
        elif model_type == "decoder_only":
            hidden, target, ours = HiddenStates(model)(tgt_in), tgt_out, training_flops(c, None, [T] * B, B * T)
        else:
            hidden, target, ours = (
                HiddenStates(model)(src),
                random_ids([S] * B),
                training_flops(c, [S] * B, None, B * S),
            )
        loss, _ = label_smoothed_cross_entropy(hidden, model.output_weight, target)
        loss.backward()
    assert counter.get_total_flops() == ours  # exactly: every product of the pass, none more


def test_mfu_against_a_known_gpu_and_the_measured_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    peak, where = peak_flops(torch.device("cuda", 0), "bf16")
    assert peak == 989e12 and "H100" in where
    assert mfu(395.6e12, torch.device("cuda", 0), "bf16") == pytest.approx(0.4)
    # torch.backends.cuda.matmul answers allow_tf32 through __getattr__: newer pytest cannot restore it, so the
    # one function that reads it is patched instead.
    monkeypatch.setattr(flops, "tf32_matmuls", lambda: True)
    assert peak_flops(torch.device("cuda", 0), "fp32")[0] == 494.7e12
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    assert peak_flops(torch.device("cuda", 0), "bf16")[0] == 756e12  # the PCIe card is matched before the SXM
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    assert peak_flops(torch.device("cuda", 0), "bf16") is None and mfu(1e12, torch.device("cuda", 0), "bf16") is None
    cpu, where = peak_flops(torch.device("cpu"), "fp32")
    assert 1e9 < cpu < 1e14 and "measured" in where
    assert all(bf16 >= tf32 >= fp32 for _, bf16, tf32, fp32 in GPU_PEAKS)


def test_bert_s_head_and_pooler_are_counted_exactly():
    """model.output_transform (only at the predicted positions, as the loss applies it), model.pooler and the
    classifier: the count equals torch's on a classify pass with the masked-token auxiliary loss."""
    from torch.nn import functional as F

    from vaswani.train.tasks.base import token_loss

    c = tiny_config(
        type="encoder_only",
        d_model=32,
        n_heads=2,
        d_ff=64,
        src_vocab_size=50,
        tgt_vocab_size=50,
        embedding_norm=True,
        output_transform=True,
        output_bias=True,
        pooler=True,
        n_classes=3,
    )
    model = build_model(c)
    B, S = 3, 7
    ids, targets = random_ids([S] * B), random_ids([S] * B)
    targets[:, ::2] = 0  # PAD: not predicted
    predicted = int((targets != 0).sum())
    aten = torch.ops.aten
    mapping = {
        aten._scaled_dot_product_flash_attention_for_cpu: _sdpa,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_backward,
    }
    with flop_counter.FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        hidden = HiddenStates(model)(ids)
        task = F.cross_entropy(model.classify(ids, hidden), torch.tensor([0, 1, 2]), reduction="sum")
        aux, _ = token_loss(model, hidden, targets, 0.0)
        (task + aux).backward()
    assert counter.get_total_flops() == training_flops(c, [S] * B, None, predicted, classified=B)
    assert training_flops(c, [S] * B, None, predicted, B) - training_flops(c, [S] * B, None, predicted) == 3 * B * (
        2 * 32 * 3 + 2 * 32 * 32
    )
