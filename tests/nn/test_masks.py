import pytest
import torch

from vaswani.nn.masks import causal_mask, padding_mask, target_mask


def test_padding_mask_marks_real_tokens_as_attendable():
    ids = torch.tensor([[5, 6, 0], [7, 0, 0]])
    mask = padding_mask(ids, pad_id=0)
    assert mask.shape == (2, 1, 1, 3) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]


def test_causal_mask_square_equals_lower_triangle():
    assert torch.equal(causal_mask(4), torch.tril(torch.ones(4, 4, dtype=torch.bool)))


def test_causal_mask_with_cache_is_aligned_bottom_right():
    # 2 new queries after 3 cached positions: query 0 is position 3 and sees keys 0..3.
    mask = causal_mask(2, 5)
    assert mask.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    assert torch.equal(causal_mask(5, 5)[-2:], mask)


def test_causal_mask_rejects_fewer_keys_than_queries():
    with pytest.raises(ValueError, match="key_len >= query_len"):
        causal_mask(3, 2)


def test_target_mask_is_causal_and_hides_pad_keys():
    tgt = torch.tensor([[1, 4, 0]])
    mask = target_mask(tgt, pad_id=0)
    assert mask.shape == (1, 1, 3, 3)
    assert mask[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
