"""Atomic checkpoints with training state, pruning and averaging, inside a model directory (model_dir.py).

Training adds checkpoints/step_XXXXXXXX/ directories to a model directory, each with weights and the
full training state, built under a temporary name, fsynced and renamed into place (vaswani.atomic), so a kill
during a save leaves the previous one intact; pruning renames a checkpoint out of sight before deleting it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from vaswani import atomic

# Re-exported: the model directory's names, for code that works on checkpoints and the directory alike.
from vaswani.model_dir import (  # noqa: F401
    FORMAT_VERSION,
    WEIGHTS,
    CheckpointError,
    load_into,
    load_model,
    load_weights,
    read_weights_into,
    save_weights,
    weights_of,
    write_model_directory,
)

STATE = "training_state.pt"


def checkpoint_dirs(directory: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = directory / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith("step_") and (p / STATE).is_file())


def save_checkpoint(
    directory: Path, step: int, weights: dict[str, torch.Tensor], state: dict[str, Any], score: float | None = None
) -> Path:
    """checkpoints/step_N with weights, training state (optimizer, step, every RNG) and validation score (higher is
    better), built in checkpoints/.step_N.tmp, fsynced and renamed into place when complete (vaswani.atomic): a kill
    at any moment leaves the earlier checkpoints intact, and the incomplete one is invisible to checkpoint_dirs."""
    final = directory / "checkpoints" / f"step_{step:08d}"
    final.parent.mkdir(parents=True, exist_ok=True)
    for pattern in (".step_*.tmp", f".step_*.{atomic.DELETED}-*"):  # what a killed save or prune left (one trainer
        for stale in final.parent.glob(pattern):  # writes a model directory at a time)
            atomic.remove(stale)
    with atomic.building(final, tmp=final.with_name(f".{final.name}.tmp")) as tmp:
        save_file(weights, str(tmp / WEIGHTS), metadata={"format_version": str(FORMAT_VERSION)})
        torch.save(state, tmp / STATE)
        if score is not None:
            (tmp / "metrics.json").write_text(json.dumps({"score": score, "step": step}) + "\n")
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
            atomic.remove_directory(path)  # out of checkpoint_dirs' sight first: a kill leaves none half deleted


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the weights in float32 (§6.1: the final model averages the last checkpoints). A
    tensor that is not floating point (the bool mask of output_words) is no weight: it is the run's, equal in
    every checkpoint, and kept as it is."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        weights = load_weights(path / WEIGHTS if path.is_dir() else path)
        if total and weights.keys() != total.keys():
            raise CheckpointError(f"{path} holds a different model than {paths[0]}; average checkpoints of one run")
        for name, tensor in weights.items():
            if not tensor.is_floating_point():
                if name in total and not torch.equal(total[name], tensor):
                    raise CheckpointError(f"{path}: {name} differs from {paths[0]}'s; average checkpoints of one run")
                total.setdefault(name, tensor)
                continue
            total[name] = total[name] + tensor.float() if name in total else tensor.float().clone()
    return {name: tensor / len(paths) if tensor.is_floating_point() else tensor for name, tensor in total.items()}
