"""A student that starts from its teacher's weights (distill.init: teacher), as Shleifer & Rush (2020) shrink a
teacher and fine-tune it: the student keeps the teacher's embeddings and, for each of its layers, one of the
teacher's, spread evenly over the stack with the first and the last kept; it then learns the teacher's
translations as a student from random weights does. The weights are written once to STUDENT/distill/start/,
from where the trainer starts a fresh run (a resumed run reads its checkpoints instead)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from vaswani.config import Config, ConfigError, ModelConfig
from vaswani.model_dir import WEIGHTS, load_weights, save_weights

START = "start"  # STUDENT/distill/start: the student's first weights
# What a layer or an embedding of the teacher needs of the student to be its own
_SHAPE = ("d_model", "n_heads", "d_ff", "activation", "norm_first", "positions", "share_embeddings", "tie_output",
          "scale_embeddings", "output_bias", "embedding_norm", "layer_norm_eps", "src_vocab_size",
          "tgt_vocab_size")  # fmt: skip
_LAYER = re.compile(r"(encoder|decoder)\.layers\.(\d+)\.(.+)")


def spread(teacher: int, student: int) -> list[int]:
    """Which of the teacher's `teacher` layers each of the student's `student` layers starts from: evenly spread,
    the first and the last kept (6 -> 3: 0, 2, 5 (rounded); 4 -> 2: 0, 3; -> 1: 0)."""
    if student == 1:
        return [0]
    return [round(i * (teacher - 1) / (student - 1)) for i in range(student)]


def check_shape(teacher: ModelConfig, student: ModelConfig) -> None:
    """A one-line ConfigError where the student's layers cannot start as the teacher's."""
    keys = [*_SHAPE, "max_positions"] if teacher.positions == "learned" else _SHAPE
    for key in keys:
        if getattr(teacher, key) != getattr(student, key):
            raise ConfigError(
                f"distill.init: teacher starts the student from the teacher's layers, but the student's model.{key} "
                f"is {getattr(student, key)!r} and the teacher's {getattr(teacher, key)!r}: set model.{key} to the "
                "teacher's or distill.init: random"
            )
    for stack, ours, theirs in (("n_layers", student.n_layers, teacher.n_layers),
                                ("n_decoder_layers", student.decoder_layers, teacher.decoder_layers)):  # fmt: skip
        if ours > theirs:
            raise ConfigError(
                f"distill.init: teacher: the student's model.{stack} ({ours}) is deeper than the teacher's ({theirs}); "
                "a student starts from some of the teacher's layers: fewer, or distill.init: random"
            )


def start_weights(weights: dict[str, torch.Tensor], teacher: ModelConfig, student: ModelConfig) -> dict:
    """The student's first weights from the teacher's `weights`: everything but the layers as it is, each of the
    student's layers the teacher's that `spread` picks; the student's output_words mask (model.output_words
    target) empty where the teacher has none, to be filled with the distilled targets' words by the trainer."""
    check_shape(teacher, student)
    chosen = {"encoder": spread(teacher.n_layers, student.n_layers),
              "decoder": spread(teacher.decoder_layers, student.decoder_layers)}  # fmt: skip
    out = {}
    for name, tensor in weights.items():
        layer = _LAYER.fullmatch(name)
        if layer is None:
            out[name] = tensor
            continue
        stack, i, rest = layer.group(1), int(layer.group(2)), layer.group(3)
        for j, picked in enumerate(chosen[stack]):
            if picked == i:
                out[f"{stack}.layers.{j}.{rest}"] = tensor
    if student.output_words == "target" and "output_words" not in out:
        out["output_words"] = torch.zeros(student.tgt_vocab_size, dtype=torch.bool)
    if student.output_words == "all":
        out.pop("output_words", None)
    return out


def write_start(teacher_dir: Path, teacher: Config, student: Config, work: Path) -> Path:
    """STUDENT/distill/start/ with the student's first weights (written once, atomically); its path."""
    directory = work / START
    if not (directory / WEIGHTS).is_file():
        weights = start_weights(load_weights(teacher_dir / WEIGHTS), teacher.model, student.model)
        directory.mkdir(parents=True, exist_ok=True)
        save_weights(weights, directory / WEIGHTS)
    return directory
