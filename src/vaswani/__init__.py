"""vaswani: the Transformer of "Attention Is All You Need", faithful and fast."""

__version__ = "0.1.0"  # first: modules imported below read it (model_dir.py writes it into vaswani.json)

from vaswani.config import ConfigError, ModelConfig
from vaswani.decode.translator import Translator
from vaswani.nn import KVCache, Transformer

__all__ = ["ConfigError", "KVCache", "ModelConfig", "Transformer", "Translator"]
