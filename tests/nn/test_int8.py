"""int8 linear layers (cpu_linear/int8.py): close to float32, the same model interface, refused where they cannot
run."""

import copy
import os

import pytest
import torch
from torch import nn

from tests.helpers.common import random_ids, tiny_config
from vaswani import Transformer
from vaswani.decode import search
from vaswani.decode.request import DecodeRequest
from vaswani.nn.cpu_linear import int8
from vaswani.nn.cpu_linear.int8 import (
    Int8Linear,
    OnednnWeight,
    int8_available,
    layer_kernel,
    output_kernel,
    quantize_int8,
)
from vaswani.nn.cpu_linear.onednn_fp32 import PackedLinear, packed_available

pytestmark = pytest.mark.skipif(int8_available() is not None, reason=str(int8_available()))


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return float((ours - reference).norm() / reference.norm())


def test_an_int8_linear_is_the_float_product_within_quantization_error():
    torch.manual_seed(0)
    linear = nn.Linear(256, 96)
    x = torch.randn(5, 7, 256)
    q = Int8Linear.of(linear, parts=((0, 32), (32, 96)))
    with torch.no_grad():
        assert relative_error(q(x), linear(x)) < 0.02
        assert q(x).shape == (5, 7, 96)
        # a part is the same rows' product
        assert relative_error(q.part(32, 96)(x), linear(x)[..., 32:]) < 0.02
        # and not the float product exactly: the weights are int8
        assert not torch.allclose(q(x), linear(x), atol=1e-6)
    assert q._packed is None  # its parts cover every row: no whole copy
    assert Int8Linear.of(linear, parts=((32, 96),))._packed is not None


ONEDNN = hasattr(torch.ops.onednn, "qlinear_pointwise")


def skip_unless_onednn_is_exact() -> None:
    """Skips where oneDNN's int8 product has no values worth checking: without AMX or VNNI its 8-bit activations
    saturate 16-bit sums (output_kernel never picks it there)."""
    if not int8._onednn_exact():
        has = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
        found = [name for name in ("avx512_vnni", "avx_vnni") if has.get(name)]
        pytest.skip(
            "oneDNN's int8 product needs AMX tiles or VNNI for 32-bit sums, else its 16-bit sums saturate (no float "
            f"product to compare with); this CPU has {', '.join(found) or 'no VNNI'} and no AMX in use; "
            f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', 'unset')}"
        )


@pytest.mark.skipif(not ONEDNN, reason="this torch has no oneDNN int8 product")
def test_the_onednn_int8_product_is_the_float_product_within_quantization_error():
    """The output projection's kernel where oneDNN runs int8 on AMX tiles or with VNNI. Without them (an AVX2 CPU)
    its 8-bit activations saturate 16-bit sums (a large error under ONEDNN_MAX_CPU_ISA=AVX2, where fbgemm keeps to 7
    bits): output_kernel never picks it there, and the test skips."""
    skip_unless_onednn_is_exact()
    torch.manual_seed(0)
    linear = nn.Linear(256, 300)
    q = Int8Linear(linear.weight, linear.bias, kernel="onednn")
    assert isinstance(q._packed, OnednnWeight)
    with torch.no_grad():
        for x in (torch.randn(5, 7, 256), torch.randn(1, 256) + 3, -torch.rand(4, 256)):  # zero inside, or not
            assert q(x).shape == (*x.shape[:-1], 300)
            assert relative_error(q(x), linear(x)) < 0.02
            assert not torch.allclose(q(x), linear(x), atol=1e-6)
        assert q(torch.randn(0, 256)).shape == (0, 300)


KERNELS = ["fbgemm", "onednn"] if ONEDNN else ["fbgemm"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_row_is_quantized_on_its_own_whatever_it_is_batched_with(kernel):
    """Activations quantized per row (as CTranslate2's): a row's product is the same alone, in any batch and beside
    a row 1,000 times larger (the same bits, but for oneDNN's kernel for a single row, whose float scaling rounds
    the last bit otherwise), and a small row keeps its precision beside it (one scale for the whole batch would
    give the small row a handful of levels)."""
    torch.manual_seed(0)
    linear = nn.Linear(256, 300)
    q = Int8Linear(linear.weight, linear.bias, kernel=kernel)
    x = torch.randn(6, 256)
    x[1] *= 1e-3
    x[2] = 0.0
    x[3] = torch.rand(256) + 0.5  # all positive: the pinned range still spans zero
    with torch.no_grad():
        together = q(x)
        for i in range(len(x)):
            alone = q(x[i : i + 1])
            assert torch.equal(alone[0], together[i]) or (kernel == "onednn" and close(alone[0], together[i])), i
            beside_a_large_row = q(torch.stack([x[i], 1000 * x[0]]))
            assert torch.equal(beside_a_large_row[0], together[i]), i
        assert torch.equal(together[2], linear.bias)  # a row of zeros: the bias alone
        if kernel == "fbgemm" or int8._onednn_exact():  # oneDNN's 8 bits saturate without AMX or VNNI (above)
            small = linear.weight @ x[1]
            assert relative_error(together[1] - linear.bias, small) < 0.03


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to float32 rounding of the values' size."""
    return torch.allclose(a, b, rtol=1e-6, atol=1e-6 * float(b.abs().max()))


@pytest.mark.parametrize(
    ("flags", "limit", "kernel"),
    [
        ({"avx512_vnni": True, "avx_vnni": True}, None, "onednn"),  # a Xeon since Cascade Lake, AMD Zen 4
        ({"avx512_vnni": True}, "AVX512_CORE_VNNI", "onednn"),
        ({"avx512_vnni": True}, "AVX512_CORE_BF16", "onednn"),
        ({"avx512_vnni": True}, "AVX512_CORE", "fbgemm"),  # oneDNN kept below VNNI: its sums would saturate
        ({"avx512_vnni": True}, "AVX2", "fbgemm"),  # CI's AVX2 run
        ({"avx512_vnni": True}, "AVX2_VNNI", "fbgemm"),  # no AVX-VNNI on this CPU
        ({"avx_vnni": True}, None, "onednn"),  # an Intel client CPU since Alder Lake
        ({"avx_vnni": True}, "AVX2_VNNI", "onednn"),
        ({}, None, "fbgemm"),  # AVX2 alone (AMD Zen 2 and 3, Intel before Cascade Lake)
    ],
)
def test_the_kernels_follow_the_cpu_and_its_limits(monkeypatch, flags, limit, kernel):
    monkeypatch.setattr(int8, "_amx", lambda: False)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: flags)
    if limit is None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", limit)
    expected = kernel if ONEDNN else "fbgemm"
    assert output_kernel() == layer_kernel() == expected
    assert ("oneDNN" in int8.kernels()) == (expected == "onednn")
    monkeypatch.setattr(int8, "_amx", lambda: True)  # AMX tiles: oneDNN wherever it can
    assert output_kernel() == layer_kernel() == ("onednn" if ONEDNN else "fbgemm")
    monkeypatch.setattr(int8, "OUTPUT_KERNEL", "fbgemm")
    monkeypatch.setattr(int8, "LAYER_KERNEL", "fbgemm")
    assert output_kernel() == layer_kernel() == "fbgemm" and int8.kernels() == int8.KERNEL
    monkeypatch.setattr(int8, "FLOAT32_BELOW", 512 * 512)
    if packed_available():
        assert int8.kernels() == f"{int8.KERNEL}; layers under 262,144 weights float32"


@pytest.mark.skipif(not ONEDNN, reason="this torch has no oneDNN int8 product")
def test_where_onednn_is_chosen_every_layer_and_part_is_onednn_s(monkeypatch):
    monkeypatch.setattr(int8, "_onednn_exact", lambda: True)
    assert "fbgemm" not in int8.kernels()
    model = quantize_int8(Transformer(tiny_config()).eval())
    layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    assert layers and all(isinstance(m._packed, OnednnWeight) or m._packed is None for m in layers)
    parts = [p for m in layers for p in m._parts.values()]
    assert parts and all(isinstance(p._packed, OnednnWeight) for p in parts)  # encoder-decoder W^Q, W^K W^V


@pytest.mark.parametrize("kernel", ["fbgemm", "onednn"])
def test_an_int8_model_keeps_its_interface_and_its_translations_close(monkeypatch, kernel):
    if kernel == "onednn" and not ONEDNN:
        pytest.skip("this torch has no oneDNN int8 product")
    monkeypatch.setattr(int8, "OUTPUT_KERNEL", kernel)
    monkeypatch.setattr(int8, "LAYER_KERNEL", kernel)
    torch.manual_seed(3)
    model = Transformer(tiny_config(src_vocab_size=200, tgt_vocab_size=200, d_model=64, d_ff=128)).eval()
    q = quantize_int8(copy.deepcopy(model))
    linears = [m for m in q.modules() if isinstance(m, nn.Linear)]
    assert not linears and q.output_projection is not None  # every product int8, the output projection too
    assert isinstance(q.output_projection._packed, OnednnWeight) == (kernel == "onednn")
    assert isinstance(q.encoder.layers[0].feed_forward.linear1._packed, OnednnWeight) == (kernel == "onednn")
    src = random_ids([9, 4, 12, 7], vocab=200)
    if kernel == "onednn":
        skip_unless_onednn_is_exact()  # every layer's 16-bit sums would saturate (never chosen there)
    with torch.inference_mode():
        assert relative_error(q(src, src), model(src, src)) < 0.05
        request = DecodeRequest.of(beam_size=4, max_len_a=0, max_len_b=8, min_len=8)
        ours = search.beam_search(q, src, request)
        reference = search.beam_search(model, src, request)
    same = sum(a[0].tokens == b[0].tokens for a, b in zip(ours, reference, strict=True))
    assert same >= 2, same
    with torch.inference_mode():  # a sentence's int8 output does not depend on the sentences batched with it
        for one in (DecodeRequest.of(beam_size=1, max_len_a=0, max_len_b=8), request):
            together = search.greedy(q, src, one) if one.greedy else search.beam_search(q, src, one)
            for i in range(len(src)):
                row = src[i : i + 1, : int((src[i] != 0).sum())]
                alone = search.greedy(q, row, one) if one.greedy else search.beam_search(q, row, one)
                first = (lambda h: h) if one.greedy else (lambda h: h[0])
                assert first(alone[0]).tokens == first(together[i]).tokens
                assert first(alone[0]).score == pytest.approx(first(together[i]).score, abs=1e-4)
    assert model.state_dict().keys() == Transformer(model.config).state_dict().keys()  # the original is untouched


def test_int8_is_refused_where_it_cannot_run(monkeypatch):
    from vaswani.runtime.precision import check

    with pytest.raises(ValueError, match="int8 is for decoding"):
        check("int8")
    monkeypatch.setattr("vaswani.nn.cpu_linear.int8._engines", lambda: ["qnnpack", "none"])
    with pytest.raises(ValueError, match=r"cannot run here: .*quantized engines: qnnpack"):
        quantize_int8(Transformer(tiny_config()))


@pytest.mark.skipif(not packed_available(), reason="this torch has no oneDNN packed float32 product")
def test_a_layer_too_small_for_int8_to_pay_stays_float32(monkeypatch):
    from vaswani.nn.cpu_linear import onednn_fp32

    monkeypatch.setattr(int8, "FLOAT32_BELOW", 512 * 512)  # the default (the suite's fixture sets 0)
    monkeypatch.setattr(onednn_fp32, "timed", lambda *shape: (1.0, 0.8))  # torch's product timed faster: kept
    assert int8.layer(torch.randn(511, 512), None) is None and isinstance(
        int8.layer(torch.randn(512, 512), None), Int8Linear
    )
    monkeypatch.setattr(onednn_fp32, "timed", lambda *shape: (1.0, 2.0))  # packed timed faster
    assert isinstance(int8.layer(torch.randn(512, 512), None), Int8Linear)
    assert isinstance(int8.layer(torch.randn(511, 512), None), PackedLinear)
    torch.manual_seed(3)
    model = Transformer(tiny_config(src_vocab_size=4096, tgt_vocab_size=4096, d_model=64, d_ff=128)).eval()
    q = quantize_int8(copy.deepcopy(model))
    products = [m for m in q.modules() if isinstance(m, (Int8Linear, PackedLinear))]
    assert [m for m in products if isinstance(m, Int8Linear)] == [q.output_projection]  # 4096 x 64: int8
    assert all(isinstance(p, PackedLinear) for m in products for p in m._parts.values())
    src = random_ids([9, 4, 12, 7], vocab=200)
    with torch.inference_mode():
        assert relative_error(q(src, src), model(src, src)) < 0.05
        request = DecodeRequest.of(beam_size=4, max_len_a=0, max_len_b=8)
        assert search.beam_search(q, src, request)[0][0].tokens  # it translates
    # a shortlist's rows of the output projection are of the whole one's kind, however many a batch takes
    assert q.output_kind(torch.randn(8, 64), None, ()).__class__ is Int8Linear
    small = quantize_int8(Transformer(tiny_config(src_vocab_size=4000, tgt_vocab_size=4000, d_model=32)).eval())
    assert isinstance(small.output_projection, PackedLinear)  # 4000 x 32
    assert small.output_kind(torch.randn(8, 32), None, ()).__class__ is PackedLinear
