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


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_equals_torch_cross_entropy_over_full_logits_in_value_and_gradient(smoothing):
    hidden, weight, target = _inputs()
    logits = F.linear(hidden, weight)
    expected = F.cross_entropy(logits.flatten(0, 1), target.flatten(), label_smoothing=smoothing, ignore_index=0,
                               reduction="sum")
    expected.backward()
    expected_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    loss, tokens = label_smoothed_cross_entropy(hidden, weight, target, smoothing, pad_id=0)
    loss.backward()
    assert tokens == (target != 0).sum() == 36 - 4 - 7
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(hidden.grad, expected_grads[0])
    torch.testing.assert_close(weight.grad, expected_grads[1])
    assert hidden.grad[1, 5:].abs().sum() == 0  # padding positions get no gradient


def test_smoothing_changes_the_loss():
    hidden, weight, target = _inputs()
    plain, _ = label_smoothed_cross_entropy(hidden, weight, target, 0.0)
    smoothed, _ = label_smoothed_cross_entropy(hidden, weight, target, 0.1)
    assert not torch.allclose(plain, smoothed)


def test_bf16_autocast_keeps_a_float32_loss_close_to_fp32():
    hidden, weight, target = _inputs(D=32, V=50)
    expected, _ = label_smoothed_cross_entropy(hidden, weight, target)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        value, _ = label_smoothed_cross_entropy(hidden, weight, target)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value, expected, rtol=2e-2, atol=0)


def test_shape_errors_name_the_expected_shapes():
    hidden, weight, target = _inputs()
    with pytest.raises(ValueError, match=r"expected hidden \(B, T, D\), weight \(V, D\) and target \(B, T\)"):
        label_smoothed_cross_entropy(hidden, weight, target[:, :3])


def test_gradient_of_a_scaled_loss_is_scaled():
    """The trainer backpropagates loss / tokens: the written-out backward must apply that factor."""
    hidden, weight, target = _inputs()
    expected = F.cross_entropy(F.linear(hidden, weight).flatten(0, 1), target.flatten(), label_smoothing=0.1,
                               ignore_index=0)  # mean over the real tokens
    expected.backward()
    expected_grad = hidden.grad.clone()
    hidden.grad = weight.grad = None
    loss, tokens = label_smoothed_cross_entropy(hidden, weight, target, 0.1, pad_id=0)
    (loss / tokens).backward()
    torch.testing.assert_close(hidden.grad, expected_grad)
