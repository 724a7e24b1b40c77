"""Configuration: frozen dataclasses with the paper's defaults, one module per section, and the presets of
its Table 3. YAML recipes only override these defaults; the defaults live here.

    fields.py    ConfigError, building a section from a mapping, durations, what a section writes
    model.py     ModelConfig (§3 and the two descendants), PRESETS
    data.py      DataConfig: parallel text, plain text, labelled text, batching
    train.py     TrainConfig: the optimisation recipe (§5), PRECISIONS
    decode.py    DecodeConfig: the search (§6.1)
    finetune.py  FinetuneConfig: a classifier trained on a pretrained language model
    recipe.py    Config: the sections together, load/save, overrides, checks across sections
"""

from vaswani.config.data import DataConfig
from vaswani.config.decode import DECODING_PRECISIONS, DecodeConfig
from vaswani.config.fields import ConfigError, parse_duration
from vaswani.config.finetune import FinetuneConfig
from vaswani.config.model import PRESETS, ModelConfig
from vaswani.config.recipe import Config, apply_overrides
from vaswani.config.train import PRECISIONS, TrainConfig

__all__ = [
    "DECODING_PRECISIONS",
    "PRECISIONS",
    "PRESETS",
    "Config",
    "ConfigError",
    "DataConfig",
    "DecodeConfig",
    "FinetuneConfig",
    "ModelConfig",
    "TrainConfig",
    "apply_overrides",
    "parse_duration",
]
