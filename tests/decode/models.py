"""Small models the decoding tests search with."""

import torch

from tests.conftest import tiny_config
from vaswani import Transformer


def random_model(vocab: int, seed: int) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_config(src_vocab_size=vocab, tgt_vocab_size=vocab)).eval()
