import pytest
import torch

from vaswani.nn.dropout import Dropout


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_zeroes_p_and_scales_the_rest_like_nn_dropout(dtype):
    torch.manual_seed(0)
    x = torch.randn(400, 500).to(dtype).requires_grad_()
    ours = Dropout(0.3).train()
    y = ours(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.005  # 200,000 draws: the sd of the mean is 0.001
    torch.testing.assert_close(y[kept], (x[kept] / 0.7).to(dtype))
    y.sum().backward()
    torch.testing.assert_close(x.grad, (kept / 0.7).to(dtype))  # the same mask scales the gradient
    # Same statistics as torch's own dropout.
    theirs = torch.nn.Dropout(0.3).train()(x.detach().float())
    assert abs((theirs != 0).float().mean().item() - kept.float().mean().item()) < 0.01


def test_dropout_is_the_identity_in_eval_and_repeats_with_the_seed():
    x = torch.randn(50, 60)
    module = Dropout(0.5)
    assert module.eval()(x) is x
    module.train()
    torch.manual_seed(1)
    first = module(x)
    torch.manual_seed(1)
    assert torch.equal(first, module(x))
    assert not torch.equal(first, module(x))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        Dropout(1.0)
