"""Each row's best words through its chunks' maxima (decode/top_words.py) against torch's topk and argmax."""

import pytest
import torch

from vaswani.decode.top_words import CHUNK, SMALL_CHUNK, row_argmax, row_topk


@pytest.mark.parametrize("V", [58101, 40 * CHUNK, 4 * CHUNK + 3, 6000, 32 * SMALL_CHUNK, 100])
@pytest.mark.parametrize("ties", [False, True])
def test_the_best_words_are_topk_and_argmax(V, ties):
    torch.manual_seed(V)
    x = torch.randint(-20, 20, (64, V)).float() if ties else torch.randn(64, V) * 3
    x[:, [0, 1]] = float("-inf")  # banned words
    x[3, :] = float("-inf")
    x[3, V - 1] = 0.0  # one finite word, in the tail
    x[5, 7] = x[5, 9] = 1e4  # a tie at the top: the first one is argmax's
    for m in (1, 8):
        values, words = row_topk(x, m)
        expected = x.topk(m, dim=1).values
        assert torch.equal(values, expected)
        assert torch.equal(x.gather(1, words), values)  # the words hold those values
        assert all(len(set(row)) == m for row in words.tolist())  # each word once
    assert torch.equal(row_argmax(x), x.argmax(dim=1))
    assert row_argmax(x)[5] == 7 and row_argmax(x)[3] == V - 1
    if not ties:  # distinct values (rows 3 and 5 have ties): the same words in the same order
        distinct = [i for i in range(64) if i not in (3, 5)]
        assert torch.equal(row_topk(x, 8)[1][distinct], x.topk(8, dim=1).indices[distinct])


def test_a_strided_input_is_searched_as_it_is():
    x = torch.randn(300 * CHUNK, 6).t()  # rows not contiguous: topk itself
    assert torch.equal(row_topk(x, 4)[0], x.topk(4, dim=1).values)
    assert torch.equal(row_argmax(x), x.argmax(dim=1))
