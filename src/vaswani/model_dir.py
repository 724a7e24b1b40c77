"""A model directory: everything needed to translate with a trained model, read and written in one place.

    config.yaml        the fully resolved configuration: every field that takes effect (config/recipe.py)
    tokenizer.model    the SentencePiece model(s) (written by `vaswani.data.tokenizer`)
    model.safetensors  the weights to translate with (the best checkpoint, or an average)
    vaswani.json       the format version, the vaswani version that wrote it, and (fine-tuned models) their origin

Training (`train/`), decoding (`decode/`) and export read and write it through this module only, so no
stage imports another to find a model. Training adds checkpoints/ (train/checkpoint.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from vaswani import __version__
from vaswani.config import Config, ConfigError
from vaswani.nn import build_model
from vaswani.runtime.allocator import freed_memory_returned

FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"


class CheckpointError(ValueError):
    """A model directory or checkpoint that cannot be used; the message says which and what to do."""


def weights_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each shared tensor stored once (tied embeddings), contiguous, on the CPU."""
    seen, out = set(), {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        out[name] = tensor.detach().to("cpu").contiguous()
    return out


def atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def save_weights(weights: dict[str, torch.Tensor], path: Path) -> None:
    atomic_write(path, lambda tmp: save_file(weights, str(tmp), metadata={"format_version": str(FORMAT_VERSION)}))


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except FileNotFoundError:
        raise CheckpointError(f"{path} not found") from None
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is corrupt or incomplete ({error}); delete it or restore a copy") from None


def untied_missing(missing: list[str]) -> list[str]:
    """The names `load_state_dict` reports missing, but a tied matrix's other names: it is stored once under
    its first name (weights_of), and the others point at the same tensor."""
    return [name for name in missing if not name.endswith("embed.tokens.weight")]


def load_into(model: torch.nn.Module, weights: dict[str, torch.Tensor], source: Path) -> None:
    """`weights` copied into `model`; CheckpointError where they do not fit it."""
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as error:  # a shape that differs
        detail = str(error).split("\n\t")[1] if "\n\t" in str(error) else str(error)
        raise CheckpointError(f"{source} does not fit this model ({detail.strip()})") from None
    _check_fit(missing, unexpected, source)


def _check_fit(missing: list[str], unexpected: list[str], source: Path) -> None:
    missing = untied_missing(missing)
    if missing or unexpected:
        raise CheckpointError(f"{source} does not fit this model (missing {missing[:3]}, unexpected {unexpected[:3]})")


def read_weights_into(model: torch.nn.Module, path: Path) -> None:
    """The weights saved at `path` copied into `model`'s own tensors one at a time, the file opened afresh for
    each, so that no second copy of the model (a state dict, or the file's pages mapped and read) is held while it
    loads: a lower peak than loading through load_weights (docs/benchmarks.md, "CPU decoding", peak memory).
    CheckpointError where the file is corrupt or does not fit."""
    try:
        with safe_open(str(path), framework="pt") as f:
            names = list(f.keys())
        own = model.state_dict()
        _check_fit([n for n in own if n not in names], [n for n in names if n not in own], path)
        with torch.no_grad():
            for name in names:
                with safe_open(str(path), framework="pt") as f:
                    saved = f.get_tensor(name)
                    if saved.shape != own[name].shape:
                        raise CheckpointError(
                            f"{path} does not fit this model ({name} has shape {tuple(saved.shape)} there, "
                            f"{tuple(own[name].shape)} in the model)"
                        )
                    own[name].copy_(saved)
                    del saved  # its pages unmapped before the next tensor's are read
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"{path} not found") from None
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is corrupt or incomplete ({error}); delete it or restore a copy") from None


def write_model_directory(directory: Path, config: Config, origin: dict | None = None) -> None:
    """config.yaml and vaswani.json (with `origin`, what the model came from, when given); the tokenizer is
    written by its trainer, weights by save_weights."""
    config.save(directory / "config.yaml")
    info = {"format_version": FORMAT_VERSION, "vaswani_version": __version__}
    if origin:
        info["origin"] = origin
    (directory / "vaswani.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def load_model(directory: str | Path, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, Config]:
    """The model of a model directory (Transformer, CausalLM or MaskedLM: model.type), in eval mode, with its
    config."""
    directory = Path(directory)
    if not (directory / "config.yaml").is_file():
        raise CheckpointError(f"{directory} is not a model directory (no config.yaml)")
    info_path = directory / "vaswani.json"
    version = json.loads(info_path.read_text())["format_version"] if info_path.is_file() else None
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{directory} has model format {version}; this vaswani reads format {FORMAT_VERSION}")
    try:
        config = Config.load(directory / "config.yaml")
    except ConfigError as error:
        raise CheckpointError(f"{directory}/config.yaml: {error}") from None
    with (
        freed_memory_returned()
    ):  # the weights mapped apart: freed at once when packed or made int8 (nn/cpu_linear/onednn_fp32.py)
        model = build_model(config.model)
        read_weights_into(model, directory / WEIGHTS)
    return model.to(device).eval(), config
