import math

import pytest
import torch
import torch.nn.functional as F

from vaswani.train.loss import label_smoothed_cross_entropy


def _inputs(B=4, T=9, D=16, V=29):
    hidden = torch.randn(B, T, D, requires_grad=True)
    weight = torch.randn(V, D, requires_grad=True)
    target = torch.randint(1, V, (B, T))
    target[1, 5:] = 0  # right padding, ignored
    target[3, 2:] = 0
    return hidden, weight, target


@pytest.mark.parametrize("chunk_rows", [1, 7, 25, 1000])  # 25 real tokens: one row, uneven chunks, exact, one chunk
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_equals_torch_cross_entropy_over_full_logits_in_value_and_gradient(smoothing, chunk_rows):
    hidden, weight, target = _inputs()
    logits = F.linear(hidden, weight)
    expected = F.cross_entropy(
        logits.flatten(0, 1), target.flatten(), label_smoothing=smoothing, ignore_index=0, reduction="sum"
    )
    expected.backward()
    expected_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    loss, tokens = label_smoothed_cross_entropy(hidden, weight, target, smoothing, pad_id=0, chunk_rows=chunk_rows)
    loss.backward()
    assert tokens == (target != 0).sum() == 36 - 4 - 7
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(hidden.grad, expected_grads[0])
    torch.testing.assert_close(weight.grad, expected_grads[1])
    assert hidden.grad[1, 5:].abs().sum() == 0  # padding positions get no gradient


@pytest.mark.parametrize("chunk_rows", [7, 1000])
def test_a_logits_bias_gets_the_cross_entropy_s_value_and_gradients(chunk_rows):
    """model.output_bias (Marian's final_logits_bias): softmax(h W^T + b), its gradient reaching b."""
    hidden, weight, target = _inputs()
    bias = torch.randn(weight.size(0), requires_grad=True)
    expected = F.cross_entropy(
        F.linear(hidden, weight, bias).flatten(0, 1),
        target.flatten(),
        label_smoothing=0.1,
        ignore_index=0,
        reduction="sum",
    )
    expected.backward()
    expected_grads = hidden.grad.clone(), weight.grad.clone(), bias.grad.clone()
    hidden.grad = weight.grad = bias.grad = None
    loss, _ = label_smoothed_cross_entropy(hidden, weight, target, 0.1, pad_id=0, chunk_rows=chunk_rows, bias=bias)
    loss.backward()
    torch.testing.assert_close(loss, expected)
    for got, want in zip((hidden.grad, weight.grad, bias.grad), expected_grads, strict=True):
        torch.testing.assert_close(got, want)
    assert bias.grad.abs().sum() > 0


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_smoothed_loss_equals_the_hand_computed_cross_entropy_with_the_smoothed_distribution(smoothing):
    # weight = I, so the logits are the hidden states: softmax(log [1, 2, 5]) = [1/8, 2/8, 5/8], then uniform.
    hidden = torch.log(torch.tensor([[[1.0, 2.0, 5.0], [1.0, 1.0, 1.0], [3.0, 1.0, 1.0]]]))
    target = torch.tensor([[2, 1, 0]])  # the last position is padding
    loss, tokens = label_smoothed_cross_entropy(hidden, torch.eye(3), target, smoothing, pad_id=0)
    # -sum_k q_k log p_k with q = (1 - eps) onehot(target) + eps / V (§5.4, Szegedy et al.)
    first = -(1 - smoothing) * math.log(5 / 8) - smoothing / 3 * (math.log(1 / 8) + math.log(2 / 8) + math.log(5 / 8))
    second = math.log(3)  # a uniform prediction costs log V whatever eps is
    assert tokens == 2
    assert loss.item() == pytest.approx(first + second, abs=1e-5)


def test_bf16_autocast_keeps_a_float32_loss_and_gradients_close_to_fp32():
    hidden, weight, target = _inputs(D=32, V=50)
    expected, _ = label_smoothed_cross_entropy(hidden, weight, target)
    expected.backward()
    expected_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        value, _ = label_smoothed_cross_entropy(hidden, weight, target, chunk_rows=4)
    value.backward()
    assert value.dtype == hidden.grad.dtype == weight.grad.dtype == torch.float32
    torch.testing.assert_close(value, expected, rtol=2e-2, atol=0)
    torch.testing.assert_close(hidden.grad, expected_grads[0], rtol=0, atol=0.05 * expected_grads[0].abs().max())
    torch.testing.assert_close(weight.grad, expected_grads[1], rtol=0, atol=0.05 * expected_grads[1].abs().max())


def test_without_gradients_the_value_is_the_same_and_nothing_is_kept():
    hidden, weight, target = _inputs()
    expected, _ = label_smoothed_cross_entropy(hidden, weight, target)
    with torch.no_grad():
        value, tokens = label_smoothed_cross_entropy(hidden, weight, target, chunk_rows=3)
    assert value.grad_fn is None and tokens == 25
    torch.testing.assert_close(value, expected)


def test_a_frozen_weight_gets_no_gradient_and_the_hidden_states_theirs():
    hidden, weight, target = _inputs()
    weight.requires_grad_(False)
    F.cross_entropy(
        F.linear(hidden, weight).flatten(0, 1), target.flatten(), label_smoothing=0.1, ignore_index=0, reduction="sum"
    ).backward()
    expected = hidden.grad.clone()
    hidden.grad = None
    label_smoothed_cross_entropy(hidden, weight, target, chunk_rows=4)[0].backward()
    assert weight.grad is None
    torch.testing.assert_close(hidden.grad, expected)


def test_a_batch_of_only_padding_has_zero_loss_and_zero_gradient():
    hidden, weight, target = _inputs()
    loss, tokens = label_smoothed_cross_entropy(hidden, weight, torch.zeros_like(target))
    loss.backward()
    assert loss.item() == 0 and tokens == 0
    assert hidden.grad.abs().sum() == 0 and weight.grad.abs().sum() == 0


def test_shape_errors_name_the_expected_shapes():
    hidden, weight, target = _inputs()
    with pytest.raises(ValueError, match=r"expected hidden \(B, T, D\), weight \(V, D\) and target \(B, T\)"):
        label_smoothed_cross_entropy(hidden, weight, target[:, :3])
    with pytest.raises(ValueError, match="chunk_rows must be positive"):
        label_smoothed_cross_entropy(hidden, weight, target, chunk_rows=0)


def test_gradient_of_a_scaled_loss_is_scaled():
    """The trainer backpropagates loss / tokens: the written-out backward must apply that factor."""
    hidden, weight, target = _inputs()
    expected = F.cross_entropy(
        F.linear(hidden, weight).flatten(0, 1), target.flatten(), label_smoothing=0.1, ignore_index=0
    )  # mean over the real tokens
    expected.backward()
    expected_grad = hidden.grad.clone()
    hidden.grad = weight.grad = None
    loss, tokens = label_smoothed_cross_entropy(hidden, weight, target, 0.1, pad_id=0)
    (loss / tokens).backward()
    torch.testing.assert_close(hidden.grad, expected_grad)


def test_the_default_chunk_is_the_device_s_and_changes_nothing_but_speed(monkeypatch):
    """A CPU projects 256 rows at a time (cache-sized); a GPU up to 2^26 logits a chunk (large products and few
    launches: on an H100 the base model's bf16 step ran faster than with 256-row chunks). The default is the
    device's rule, and the value equals the one-chunk value."""
    from vaswani.runtime import loss_chunks

    assert loss_chunks.loss_chunk_rows("cpu", 8000) == 256
    assert loss_chunks.loss_chunk_rows("cuda", 8000) == (1 << 26) // 8000 == 8388
    assert loss_chunks.loss_chunk_rows("cuda", 1 << 20) == 256  # never fewer rows than a CPU's
    hidden, weight, target = _inputs()
    asked = []
    monkeypatch.setattr("vaswani.train.loss.loss_chunk_rows", lambda device, V: asked.append((device, V)) or 3)
    loss, _ = label_smoothed_cross_entropy(hidden, weight, target)
    assert asked == [("cpu", 29)]
    whole, _ = label_smoothed_cross_entropy(hidden, weight, target, chunk_rows=1000)
    assert torch.allclose(loss, whole, rtol=1e-5)
