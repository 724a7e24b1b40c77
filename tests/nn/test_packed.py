"""float32 linear layers packed for oneDNN (nn/cpu_linear/onednn_fp32.py): the float product, the same translations."""

import copy

import pytest
import torch
from torch import nn

from tests.helpers.common import random_ids, tiny_config
from vaswani import Transformer
from vaswani.decode import search
from vaswani.decode.request import DecodeRequest
from vaswani.nn.cpu_linear.onednn_fp32 import PackedLinear, covers, pack_fp32, packed_available, row_bucket

pytestmark = pytest.mark.skipif(not packed_available(), reason="this torch has no oneDNN prepacked linear")


def test_a_packed_linear_is_the_float_product():
    torch.manual_seed(0)
    linear = nn.Linear(96, 48)
    x = torch.randn(3, 5, 96)
    for parts in ((), ((0, 16), (16, 48)), ((16, 48),)):
        packed = PackedLinear(linear.weight, linear.bias, parts=parts)
        # parts that cover every row are all a layer keeps; else the whole is packed too
        assert (packed._weight is None) == covers(parts, 48)
        with torch.no_grad():
            torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)
            if parts:
                torch.testing.assert_close(packed.part(16, 48)(x), linear(x)[..., 16:], rtol=1e-5, atol=1e-5)


def test_a_product_s_rows_are_padded_to_few_counts_and_its_rows_come_back_alone():
    buckets = [row_bucket(rows) for rows in range(1, 257)]
    assert buckets[:16] == list(range(1, 17)) and row_bucket(17) == 18 and row_bucket(33) == 36
    assert all(rows <= b <= rows * 9 / 8 for rows, b in enumerate(buckets, 1))  # at most 1/8 more
    assert buckets == sorted(buckets) and len(set(buckets)) == 16 + 8 * 4  # 48 kernels where there were 256
    torch.manual_seed(0)
    linear = nn.Linear(64, 24)
    packed = PackedLinear(linear.weight, linear.bias)
    for rows in (17, 37, 130, 0):  # padded to 18, 40, 144; none
        x = torch.randn(rows, 64)
        with torch.no_grad():
            y = packed(x)
            assert y.shape == (rows, 24)
            torch.testing.assert_close(y, linear(x), rtol=1e-5, atol=1e-5)


def test_parts_cover_the_rows_only_side_by_side_in_order():
    assert covers(((0, 4), (4, 12)), 12) and covers(((0, 12),), 12)
    assert not covers((), 12) and not covers(((0, 4), (4, 11)), 12) and not covers(((4, 12), (0, 4)), 12)
    assert not covers(((0, 4), (3, 12)), 12) and not covers(((0, 0), (0, 12)), 12)


@pytest.mark.parametrize("capability", ["AVX512", "AVX2", "AVX2, packed faster"])
def test_a_packed_model_translates_as_the_model_does(monkeypatch, capability):
    """With AVX2 alone the output projection stays torch's product on the model's own matrix (no second copy), unless
    a large one's packed product was timed faster on this CPU (onednn_fp32.timed)."""
    from vaswani.nn.cpu_linear import onednn_fp32

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability.split(",")[0])
    timed = []
    monkeypatch.setattr(onednn_fp32, "timed", lambda *shape: timed.append(shape) or (1.0, 2.0))  # packed faster
    monkeypatch.setattr(onednn_fp32, "TIMED_FROM", 0 if "faster" in capability else onednn_fp32.TIMED_FROM)
    torch.manual_seed(3)
    model = Transformer(tiny_config(src_vocab_size=120, tgt_vocab_size=120)).eval()
    packed = pack_fp32(copy.deepcopy(model), every_layer=True)
    assert not [m for m in packed.modules() if isinstance(m, nn.Linear)]
    assert timed == ([tuple(model.output_weight.shape)] if "faster" in capability else [])  # a test's model: untimed
    made = capability != "AVX2"
    assert (packed.output_projection is not None) == made and (packed.output_kind is PackedLinear) == made
    src = random_ids([9, 4, 12, 7, 1], vocab=120)
    with torch.inference_mode():
        torch.testing.assert_close(packed(src, src), model(src, src), rtol=1e-4, atol=1e-4)
        for beam in (1, 4):
            request = DecodeRequest.of(beam_size=beam, early_stopping=beam == 1, max_len_b=12)
            ours = search.beam_search(packed, src, request)
            reference = search.beam_search(model, src, request)
            assert [h[0].tokens for h in ours] == [h[0].tokens for h in reference]


def test_only_a_model_the_engine_owns_is_packed(monkeypatch):
    from vaswani.decode.engine import TorchEngine
    from vaswani.nn.cpu_linear import onednn_fp32

    monkeypatch.setattr(onednn_fp32, "timed", lambda *shape: (1.0, 2.0))  # packed timed faster
    model = Transformer(tiny_config()).eval()
    TorchEngine(model, "fp32")
    assert any(isinstance(m, nn.Linear) for m in model.modules())  # a user's model is left as it is
    TorchEngine(model, "fp32", owned=True)
    assert not any(isinstance(m, nn.Linear) for m in model.modules())


@pytest.mark.parametrize("faster", ["torch", "alike", "packed"])
def test_an_engine_packs_a_layer_only_where_that_is_not_slower_here(monkeypatch, faster):
    """oneDNN's call has a fixed cost that a small layer's product does not repay: where torch's product was timed
    faster by the margin, the engine keeps the layer torch's; where both are alike, packed (the choice before)."""
    from vaswani.decode.engine import TorchEngine
    from vaswani.nn.cpu_linear import onednn_fp32

    seconds = {"torch": (1.0, 0.8), "alike": (1.0, 0.9), "packed": (1.0, 2.0)}[faster]  # (packed, torch's)
    shapes = []
    monkeypatch.setattr(onednn_fp32, "timed", lambda *shape: shapes.append(shape) or seconds)
    torch.manual_seed(3)
    model = Transformer(tiny_config(src_vocab_size=120, tgt_vocab_size=120)).eval()
    engine = TorchEngine(copy.deepcopy(model), "fp32", owned=True)
    layers = [m for m in engine.model.modules() if isinstance(m, (nn.Linear, PackedLinear)) and m is not engine.model]
    hidden = [m for m in layers if m is not engine.model.output_projection]
    assert hidden and shapes and all(isinstance(m, PackedLinear if faster != "torch" else nn.Linear) for m in hidden)
    sources = [row[row > 0].tolist() for row in random_ids([9, 4, 12, 7, 1], vocab=120)]
    for beam in (1, 4):
        request = DecodeRequest.of(beam_size=beam, max_len_b=12)
        ours, reference = engine(sources, request), TorchEngine(model, "fp32")(sources, request)  # the latter unpacked
        assert [h[0].tokens for h in ours] == [h[0].tokens for h in reference]
        torch.testing.assert_close([h[0].score for h in ours], [h[0].score for h in reference], rtol=0, atol=1e-4)
