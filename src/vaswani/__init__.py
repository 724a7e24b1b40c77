"""vaswani: the Transformer of "Attention Is All You Need", faithful and fast."""

__version__ = "0.1.0"  # first: modules imported below read it (model_dir.py writes it into vaswani.json)

__all__ = ["ConfigError", "KVCache", "ModelConfig", "Transformer", "Translator"]

_HOMES = {
    "ConfigError": "vaswani.config",
    "ModelConfig": "vaswani.config",
    "Translator": "vaswani.translate.translator",
    "KVCache": "vaswani.nn",
    "Transformer": "vaswani.nn",
}


def __getattr__(name: str):
    """The public names, imported when first used: a process that only prepares data (an encoding
    worker) never loads torch."""
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'vaswani' has no attribute {name!r}")
