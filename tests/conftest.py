import pytest
import torch

from vaswani import ModelConfig


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tiny_config(**overrides) -> ModelConfig:
    """Tiny dimensions for fast CPU tests (d_model 32, 2 heads, 2 layers)."""
    fields = dict(src_vocab_size=50, tgt_vocab_size=50, d_model=32, n_heads=2, d_ff=64, n_layers=2, dropout=0.0)
    fields.update(overrides)
    return ModelConfig(**fields)


def random_ids(lengths: list[int], vocab: int = 50, pad: int = 0, low: int = 3) -> torch.Tensor:
    """Right-padded batch of random non-special token ids. Shape: (B, max(lengths))"""
    ids = torch.full((len(lengths), max(lengths)), pad, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(low, vocab, (n,))
    return ids
