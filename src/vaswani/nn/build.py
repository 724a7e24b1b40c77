"""A model from its configuration: the class its family's row names (vaswani/families.py)."""

from __future__ import annotations

from torch import nn

from vaswani.config import ModelConfig
from vaswani.families import family
from vaswani.nn.language_model import CausalLM, MaskedLM
from vaswani.nn.transformer import Transformer

_CLASSES = {cls.__name__: cls for cls in (Transformer, CausalLM, MaskedLM)}


def build_model(config: ModelConfig) -> nn.Module:
    """The model of `config.type`, freshly initialised: Transformer, CausalLM or MaskedLM."""
    return _CLASSES[family(config.type).model](config)
