"""Every fuzzed surface, by name: the suite (test_surfaces.py) and benchmarks/fuzz.py run the same list."""

from __future__ import annotations

import importlib

from tests.fuzz import Surface

MODULES = ("glossary", "markup_html", "markdown", "http_api", "multilingual_api", "config_yaml", "model_directory")
MODULES += ("corpus", "hub_checkpoint", "files")


def surfaces() -> list[Surface]:
    """The surfaces, in the order above; each module `tests/fuzz/<name>.py` holds its `SURFACE` (or, one per
    format, its `SURFACES`)."""
    found = []
    for name in MODULES:
        module = importlib.import_module(f"tests.fuzz.{name}")
        found += getattr(module, "SURFACES", None) or [module.SURFACE]
    return found


NAMES = tuple(surface.name for surface in surfaces())
