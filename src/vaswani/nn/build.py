"""A model from its configuration: the class its family's row names (vaswani/families.py)."""

from __future__ import annotations

import torch
from torch import nn

from vaswani.config import ModelConfig
from vaswani.families import family
from vaswani.nn.embedding import SinusoidalPositions, sinusoid_table
from vaswani.nn.language_model import CausalLM, MaskedLM
from vaswani.nn.transformer import Transformer

_CLASSES = {cls.__name__: cls for cls in (Transformer, CausalLM, MaskedLM)}


def build_model(config: ModelConfig) -> nn.Module:
    """The model of `config.type`, freshly initialised: Transformer, CausalLM or MaskedLM."""
    return _CLASSES[family(config.type).model](config)


def build_empty(config: ModelConfig) -> nn.Module:
    """The model of `config.type` with no storage for its weights (built on the meta device, uninitialised), for
    saved weights to be assigned to (`load_state_dict(..., assign=True)`): one copy of them in memory while a
    model loads, not two. What is computed rather than saved (the sinusoid tables) is made at once."""
    with torch.device("meta"):
        model = build_model(config)
    for module in model.modules():
        if isinstance(module, SinusoidalPositions):
            module.table = sinusoid_table(module.table.size(0), module.d_model)
    return model
