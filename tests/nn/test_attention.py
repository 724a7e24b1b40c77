import pytest
import torch

from vaswani.nn.attention import MultiHeadAttention, fused_attention, reference_attention
from vaswani.nn.masks import padding_mask


def qkv(B=3, H=2, T=5, S=7, Dh=8, requires_grad=False):
    return tuple(torch.randn(B, H, n, Dh, requires_grad=requires_grad) for n in (T, S, S))


@pytest.mark.parametrize("case", ["none", "padding", "causal", "causal_padding", "causal_cached"])
def test_fused_equals_reference(case):
    T, S = (3, 7) if case == "causal_cached" else (7, 7) if "causal" in case else (5, 7)
    q, k, v = qkv(T=T, S=S)
    mask = padding_mask(torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 6 + [0]]), 0) if "padding" in case else None
    causal = "causal" in case
    expected, weights = reference_attention(q, k, v, mask, causal)
    torch.testing.assert_close(fused_attention(q, k, v, mask, causal), expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


@pytest.mark.parametrize("kind", ["no-cudnn", "composed"])
@pytest.mark.parametrize("case", ["padding", "causal", "causal_cached"])
def test_the_gpu_s_other_attention_kernels_equal_the_reference(monkeypatch, kind, case):
    """CUDA_ATTENTION's choices (benchmarks/compile.py --attention), run here on the CPU: the same function."""
    import vaswani.nn.attention as attention

    monkeypatch.setattr(attention, "CUDA_ATTENTION", kind)
    monkeypatch.setattr(attention, "_on_gpu", lambda q: True)  # the GPU's choices, run here on the CPU
    T, S = (3, 7) if case == "causal_cached" else (7, 7)
    q, k, v = qkv(T=T, S=S)
    mask = padding_mask(torch.tensor([[1] * 7, [0] * 7, [1] * 6 + [0]]), 0) if case == "padding" else None
    expected, _ = reference_attention(q, k, v, mask, case != "padding")
    found = fused_attention(q, k, v, mask, case != "padding")
    torch.testing.assert_close(found, expected, atol=1e-6, rtol=1e-5)
    assert torch.count_nonzero(found[1]) == (0 if case == "padding" else found[1].numel())


def test_reference_attention_is_softmax_of_scaled_scores():
    q, k, v = qkv(B=1, H=1, T=2, S=3, Dh=4)
    scores = torch.einsum("bhtd,bhsd->bhts", q, k) / 2.0  # sqrt(d_k) = 2
    out, weights = reference_attention(q, k, v)
    torch.testing.assert_close(weights, torch.softmax(scores, -1))
    torch.testing.assert_close(out, torch.softmax(scores, -1) @ v)


@pytest.mark.parametrize("kernel", ["reference", "fused"])
def test_fully_masked_rows_give_zeros_and_finite_gradients(kernel):
    q, k, v = qkv(requires_grad=True)
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    mask[1] = False  # every key of sentence 1 is masked
    if kernel == "reference":
        out, _ = reference_attention(q, k, v, mask)
    else:
        out = fused_attention(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert torch.count_nonzero(out[1]) == 0
    (out**2).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


def _copied_reference(ours: MultiHeadAttention) -> torch.nn.MultiheadAttention:
    ref = torch.nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref


@pytest.mark.parametrize("kind", ["self", "cross"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_multi_head_attention_equals_torch_with_copied_weights(kind, need_weights):
    ours = MultiHeadAttention(d_model=32, n_heads=4)
    torch.nn.init.normal_(ours.in_proj.bias)  # non-zero biases so that copying them is tested too
    ref = _copied_reference(ours)
    x = torch.randn(3, 6, 32)
    memory = x if kind == "self" else torch.randn(3, 9, 32)
    ids = torch.ones(3, memory.size(1), dtype=torch.long)
    ids[1, 4:] = 0
    ids[2, 2:] = 0
    mask = padding_mask(ids, pad_id=0)
    out, weights = ours(x, None if kind == "self" else memory, mask=mask, need_weights=need_weights)
    expected, expected_weights = ref(x, memory, memory, key_padding_mask=ids == 0, average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-5)
    else:
        assert weights is None


def test_wrong_input_shape_names_the_expected_shape():
    mha = MultiHeadAttention(d_model=16, n_heads=2)
    with pytest.raises(ValueError, match=r"shape \(batch, length, 16\)"):
        mha(torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="float tensor"):
        mha(torch.ones(2, 5, 16, dtype=torch.long))


def test_the_fused_kernel_chosen_for_padded_and_causal_batches_is_reported():
    from vaswani.nn.attention import attention_kernels

    cpu = torch.device("cpu")
    assert attention_kernels(64, 4, cpu, torch.float32) == {
        "padded self/cross": "flash_attention",  # torch's CPU flash kernel takes boolean masks
        "causal self": "flash_attention",
    }
    assert set(attention_kernels(64, 4, cpu, torch.bfloat16).values()) == {"math"}  # our CPU bf16 rule


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: which fused kernel runs there")
def test_on_a_gpu_padded_batches_run_a_fused_kernel_in_bf16():
    from vaswani.nn.attention import attention_kernels

    kernels = attention_kernels(512, 8, torch.device("cuda"), torch.bfloat16)
    assert "math" not in kernels.values() and "unknown" not in kernels.values(), kernels
