"""Every fuzzed surface, by name: the suite (test_surfaces.py) and benchmarks/fuzz.py run the same list."""

from __future__ import annotations

import importlib

from tests.fuzz import Surface

MODULES = ("glossary", "markup_html", "markdown", "http_api", "multilingual_api", "config_yaml", "model_directory")
MODULES += ("corpus", "hub_checkpoint")


def surfaces() -> list[Surface]:
    """The surfaces, in the order above; each module `tests/fuzz/<name>.py` holds its `SURFACE`."""
    return [importlib.import_module(f"tests.fuzz.{name}").SURFACE for name in MODULES]
