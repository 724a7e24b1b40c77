"""Export a model directory to the engines people deploy with: CTranslate2 and Hugging Face Marian.

    vaswani export MODEL_DIR OUT_DIR --to ctranslate2 [--quantization int8]
    vaswani export MODEL_DIR OUT_DIR --to huggingface

Each exporter reads the model directory through `vaswani.model_dir` and writes a directory its engine
loads with nothing from vaswani installed, built beside it and renamed into place (`output_directory`). Both
are proven output-equal in tests/export/.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from vaswani import atomic
from vaswani.families import FAMILIES, family

TARGETS = ("ctranslate2", "huggingface")


class ExportError(ValueError):
    """A model that cannot be exported as asked; the message names the option that prevents it."""


def export(model_dir: str | Path, out_dir: str | Path, to: str, quantization: str | None = None) -> Path:
    """Write `model_dir` as a `to` model into `out_dir`; returns `out_dir`."""
    config = Path(model_dir) / "config.yaml"
    if config.is_file():
        from vaswani.config import Config

        kind = family(Config.load(config).model.type)
        if to in TARGETS and to not in kind.exports:
            takes = [f.type for f in FAMILIES.values() if to in f.exports]
            raise ExportError(
                f"{model_dir} holds a {kind.type} model ({kind.about}); --to {to} writes translation "
                f"models and takes {' or '.join(takes)} models only"
            )
    if to == "ctranslate2":
        from vaswani.export.ctranslate2 import export_ctranslate2

        return export_ctranslate2(model_dir, out_dir, quantization)
    if to == "huggingface":
        if quantization:
            raise ExportError("--quantization applies to --to ctranslate2 only; Hugging Face models are float32")
        from vaswani.export.huggingface import export_huggingface

        return export_huggingface(model_dir, out_dir)
    raise ExportError(f"unknown export target {to!r}; choose one of {', '.join(TARGETS)}")


def check_output(out_dir: str | Path, model_dir: str | Path) -> Path:
    """`out_dir`, where it may be exported into: new or empty, and not the model directory itself."""
    out_dir, model_dir = Path(out_dir), Path(model_dir)
    if out_dir.resolve() == model_dir.resolve():
        raise ExportError(f"{out_dir} is the model directory itself; export into a directory of its own")
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"{out_dir} exists and is not a directory; choose another output path")
    if out_dir.is_dir() and any(out_dir.iterdir()):  # stale files of another export would mislead its loader
        raise ExportError(f"{out_dir} is not empty; export into a new or empty directory")
    return out_dir


@contextlib.contextmanager
def output_directory(out_dir: str | Path, model_dir: str | Path) -> Iterator[Path]:
    """A temporary sibling of `out_dir` (checked by check_output) to write the export into, renamed to `out_dir`
    when complete (vaswani.atomic.building): a kill while exporting leaves `out_dir` as it was, never half
    written (its loader would fail, and the next export would refuse it as not empty)."""
    out = check_output(out_dir, model_dir)
    with atomic.building(out) as tmp:
        yield tmp


def pieces(processor) -> list[str]:
    """The vocabulary of a SentencePiece processor as strings, in id order."""
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
