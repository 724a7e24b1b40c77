"""Fixtures the decoding tests share."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.common import random_ids
from tests.helpers.decode_models import random_model
from vaswani import Transformer


@pytest.fixture(scope="module")
def model() -> Transformer:
    """A tiny model briefly half-trained to copy: its outputs end at different, plausible lengths,
    so EOS handling, finished rows and beams that disagree are all exercised."""
    model = random_model(50, seed=3).train()
    c = model.config
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(100):
        lengths = torch.randint(1, 9, (32,)).tolist()
        src = random_ids(lengths)
        tgt_in = torch.cat([torch.full((32, 1), c.bos_id), src], 1)
        tgt_out = torch.cat([src, torch.zeros(32, 1, dtype=torch.long)], 1)
        tgt_out[torch.arange(32), torch.tensor(lengths)] = c.eos_id
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=c.pad_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()
