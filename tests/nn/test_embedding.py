import math

import pytest
import torch

from vaswani.nn.embedding import LearnedPositions, SinusoidalPositions, TokenEmbedding, sinusoid_table


def test_sinusoids_follow_the_paper_formula():
    d_model = 16
    table = sinusoid_table(50, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoids_work_beyond_any_fixed_length():
    positions = SinusoidalPositions(d_model=8, length=4)
    far = positions(start=5000, length=3)  # computed for the call, beyond the table
    torch.testing.assert_close(far, sinusoid_table(3, 8, start=5000))
    assert positions.table.size(0) == 4  # forward changes nothing: threads may share the module
    torch.testing.assert_close(positions(0, 4), sinusoid_table(4, 8))
    assert "table" not in positions.state_dict()


def test_sinusoids_with_odd_d_model_follow_the_formula_in_every_column():
    d_model = 7  # columns 0, 2, 4, 6 are sines (i = 0..3), columns 1, 3, 5 cosines (i = 0..2)
    table = sinusoid_table(3, d_model, start=2)
    expected = [
        [(math.sin if c % 2 == 0 else math.cos)(pos / 10000 ** (2 * (c // 2) / d_model)) for c in range(7)]
        for pos in (2, 3, 4)
    ]
    torch.testing.assert_close(table, torch.tensor(expected), rtol=0, atol=1e-6)


def test_learned_positions_are_bounded_with_a_clear_error():
    positions = LearnedPositions(d_model=8, max_positions=10)
    torch.testing.assert_close(positions(8, 2), positions.weight[8:10], rtol=0, atol=0)  # the last two rows
    with pytest.raises(ValueError, match="max_positions=10"):
        positions(8, 3)


def test_token_embeddings_are_scaled_by_sqrt_d_model():
    emb = TokenEmbedding(vocab_size=10, d_model=16)
    ids = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(emb(ids), emb.weight[ids] * 4.0)


def test_learned_positions_start_at_the_scale_of_the_scaled_token_embeddings():
    torch.manual_seed(0)
    d_model = 256
    tokens = TokenEmbedding(vocab_size=1000, d_model=d_model)(torch.arange(1000)[None])
    positions = LearnedPositions(d_model=d_model, max_positions=1000)(0, 1000)
    assert tokens.std().item() == pytest.approx(1.0, rel=0.05)
    assert positions.std().item() == pytest.approx(tokens.std().item(), rel=0.05)
