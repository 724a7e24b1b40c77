"""Self-contained, versioned model directories; atomic checkpoints with training state; averaging.

A model directory holds everything needed to translate: config.yaml, the tokenizer model(s),
model.safetensors (the weights to translate with) and vaswani.json (format version). Training
adds checkpoints/step_XXXXXXXX/ directories, each with weights and the full training state, written
to a temporary name and renamed into place, so a kill during a save leaves the previous one intact.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from vaswani import __version__
from vaswani.config import Config, ConfigError
from vaswani.nn import Transformer

FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
STATE = "training_state.pt"


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


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def save_weights(weights: dict[str, torch.Tensor], path: Path) -> None:
    _atomic_write(path, lambda tmp: save_file(weights, str(tmp), metadata={"format_version": str(FORMAT_VERSION)}))


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except FileNotFoundError:
        raise CheckpointError(f"{path} not found") from None
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is corrupt or incomplete ({error}); delete it or restore a copy") from None


def load_into(model: Transformer, weights: dict[str, torch.Tensor], source: Path) -> None:
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # A tied matrix is stored once under its first name; the other names point at the same tensor.
    missing = [name for name in missing if not name.endswith("embed.tokens.weight")]
    if missing or unexpected:
        raise CheckpointError(f"{source} does not fit this model (missing {missing[:3]}, unexpected {unexpected[:3]})")


def write_model_directory(directory: Path, config: Config) -> None:
    """config.yaml and vaswani.json; the tokenizer is written by its trainer, weights by save_weights."""
    config.save(directory / "config.yaml")
    info = {"format_version": FORMAT_VERSION, "vaswani_version": __version__}
    (directory / "vaswani.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def load_model(directory: str | Path, device: str | torch.device = "cpu") -> tuple[Transformer, Config]:
    """The Transformer of a model directory, in eval mode, with its config."""
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
    model = Transformer(config.model)
    load_into(model, load_weights(directory / WEIGHTS), directory / WEIGHTS)
    return model.to(device).eval(), config


def checkpoint_dirs(directory: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = directory / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith("step_") and (p / STATE).is_file())


def save_checkpoint(directory: Path, step: int, weights: dict[str, torch.Tensor], state: dict[str, Any],
                    score: float | None = None) -> Path:
    """checkpoints/step_N with weights, training state and validation score (higher is better),
    written into a temporary directory and renamed into place when complete: a kill at any moment
    leaves the earlier checkpoints intact, and the incomplete one is invisible to checkpoint_dirs."""
    final = directory / "checkpoints" / f"step_{step:08d}"
    tmp = final.with_name(f".{final.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(weights, str(tmp / WEIGHTS), metadata={"format_version": str(FORMAT_VERSION)})
    torch.save(state, tmp / STATE)
    if score is not None:
        (tmp / "metrics.json").write_text(json.dumps({"score": score, "step": step}) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def load_state(checkpoint: Path) -> dict[str, Any]:
    try:
        return torch.load(checkpoint / STATE, map_location="cpu", weights_only=False)
    except Exception as error:  # a truncated or foreign file: say which and how to go on
        raise CheckpointError(
            f"{checkpoint / STATE} is corrupt ({type(error).__name__}); "
            f"delete {checkpoint} to resume from the one before"
        ) from None


def prune_checkpoints(directory: Path, keep_last: int, keep_best: int) -> None:
    """Delete checkpoints that are neither among the last `keep_last` nor the best `keep_best`
    (by the score in their metrics.json, higher is better)."""
    checkpoints = checkpoint_dirs(directory)
    keep = set(checkpoints[-keep_last:])
    scored = []
    for path in checkpoints:
        meta = path / "metrics.json"
        if meta.is_file():
            scored.append((json.loads(meta.read_text())["score"], path))
    scored.sort(key=lambda x: x[0], reverse=True)
    keep.update(path for _, path in scored[:keep_best])
    for path in checkpoints:
        if path not in keep:
            shutil.rmtree(path, ignore_errors=True)


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the weights in float32 (§6.1: the final model averages the last checkpoints)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        weights = load_weights(path / WEIGHTS if path.is_dir() else path)
        if total and weights.keys() != total.keys():
            raise CheckpointError(f"{path} holds a different model than {paths[0]}; average checkpoints of one run")
        for name, tensor in weights.items():
            total[name] = total[name] + tensor.float() if name in total else tensor.float().clone()
    return {name: tensor / len(paths) for name, tensor in total.items()}
