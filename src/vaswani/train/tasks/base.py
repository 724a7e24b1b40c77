"""The task seam: what a task supplies to the shared training loop.

The trainer owns everything tasks share (the model directory, DDP, the optimizer and schedule,
checkpoints and exact resume, max_time, precision and autocast, progress, metrics.jsonl, early
stopping) and the run's config. A task owns its data (made or reused by rank 0, opened by the others),
the model it trains, the batches of each step (a function of seed, epoch and position, so resume is
exact), its loss and its validation.

A task sees the run through a `RunContext`, never the trainer: it reads the config and never writes
it. What it learns from the data that belongs in the config (vocabulary sizes, a classifier's labels)
it returns from `run_config`; the trainer applies that, saves it, and hands the task a new context.
Its loss and validation run under the trainer's autocast: a task never enters autocast itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from torch import Tensor

from vaswani.config import Config, ModelConfig
from vaswani.families import family
from vaswani.nn import build_model
from vaswani.runtime.flops import lengths, training_flops
from vaswani.train.loss import label_smoothed_cross_entropy


class HiddenStates(torch.nn.Module):
    """The model's final states, as the loss needs them: the module DDP wraps (the loss projects them)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: Tensor) -> Tensor:
        return self.model.hidden_states(*inputs)


def token_loss(model: torch.nn.Module, hidden: Tensor, targets: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
    """A language model's summed loss on the tokens it predicts (targets not PAD), and how many: the final
    states at those positions through model.output_transform where it has one (BERT's MLM head; only those
    positions, as the FLOP count has it), projected with output_weight and output_bias.
    Shape: hidden (B, T, D), targets (B, T) -> loss (), tokens ()"""
    pad_id = model.config.pad_id
    if model.output_transform is not None:
        real = targets != pad_id  # (B, T)
        hidden, targets = model.output_transform(hidden[real])[None], targets[real][None]  # (1, N, D), (1, N)
    return label_smoothed_cross_entropy(hidden, model.output_weight, targets, smoothing, pad_id, bias=model.output_bias)


@dataclass(frozen=True)
class RunContext:
    """What a task knows of the run it serves. Made by the trainer, and made again when it changes the config."""

    config: Config
    model_dir: Path
    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    console: Console | None = None  # where rank 0 reports; None: nowhere

    def log(self, message: str) -> None:
        if self.rank == 0 and self.console is not None:
            self.console.print(message, highlight=False)


@dataclass(frozen=True)
class TextBatch:
    """One batch of a language-model or classification task, right-padded.

    Shape: ids (B, T), targets (B, T) (PAD where nothing is predicted; (0,) when nothing is), labels (B,) or None.
    `count` is what the loss is normalised by (predicted tokens, or examples), counted on the host."""

    ids: Tensor
    targets: Tensor
    count: int
    labels: Tensor | None = None
    masked: Tensor | None = None  # classify with an encoder-only model: the masked copy of ids (auxiliary loss)
    aux_count: int = 0  # tokens the auxiliary loss predicts

    def to(self, device: torch.device, non_blocking: bool = False) -> TextBatch:
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return TextBatch(
            move(self.ids), move(self.targets), self.count, move(self.labels), move(self.masked), self.aux_count
        )


class Task:
    """Base class: see the module's docstring."""

    name = ""

    def __init__(self, context: RunContext) -> None:
        self.context = context

    @property
    def config(self) -> Config:
        return self.context.config

    def log(self, message: str) -> None:
        self.context.log(message)

    # -- data ----------------------------------------------------------------------------------
    def prepare(self, rank0: bool) -> Any:
        """The run's data: rank 0 makes or reuses it (and installs the tokenizer in the model directory);
        the other ranks, after a barrier, open what rank 0 made."""
        raise NotImplementedError

    def fingerprint(self, data: Any) -> dict:
        """What every rank must agree on (the prepared files' hashes)."""
        return {name: entry["sha256"] for name, entry in data.prepared.manifest["files"].items()}

    def describe(self, data: Any) -> None:
        """Log what the batches look like, once, before training."""

    def stream(self, data: Any, epoch: int, position: int) -> Iterator[tuple[int, int, Any]]:
        """(epoch, position after this batch, batch) of this rank from (epoch, position) on, for ever."""
        raise NotImplementedError

    def epoch_batches(self, data: Any) -> int | None:
        """Batches in an epoch (all ranks together: the positions `stream` counts), where the task knows it ahead;
        None: unknown (the schedule then leaves train.max_epochs out of its budget, schedule.progress)."""
        return None

    def run_config(self, data: Any) -> Config:
        """The run's config completed from what `prepare` found: the model section (`model_config`), and
        whatever else the data decides (classify: the labels). The trainer applies and saves it."""
        return replace(self.config, model=self.model_config(data))

    # -- model ---------------------------------------------------------------------------------
    def model_config(self, data: Any) -> ModelConfig:
        """The model section completed from the data (vocabulary sizes)."""
        size = data.tokenizer.src_vocab_size
        return replace(self.config.model, src_vocab_size=size, tgt_vocab_size=size)

    def build_model(self, config: ModelConfig) -> torch.nn.Module:
        return build_model(config)

    def target_words(self, data: Any) -> np.ndarray:
        """Which target ids the training data predicts, as a mask over the target vocabulary (model.output_words
        target; a translation task's)."""
        raise NotImplementedError

    def count(self, batch: Any) -> int:
        return batch.count

    def flops(self, batch: Any, config: ModelConfig) -> float:
        """Model FLOPs of one training pass over `batch` (vaswani/runtime/flops.py), counted on the host from its
        lengths: a TextBatch's sequences, read by the family's one stack, its predicted tokens and its
        classified sequences; an encoder's auxiliary masked-LM copy (classify) as a second pass."""
        n = lengths(batch.ids, config.pad_id)
        src, tgt = (n, None) if family(config.type).stack == "encoder" else (None, n)
        classified = 0 if batch.labels is None else len(batch.labels)
        if batch.masked is not None:
            return training_flops(config, src, tgt, 0, classified) + training_flops(config, src, tgt, batch.aux_count)
        predicted = batch.aux_count if batch.labels is not None else batch.count
        return training_flops(config, src, tgt, predicted, classified)

    def loss(self, wrapped: torch.nn.Module, model: torch.nn.Module, batch: Any) -> Tensor:
        """The batch's summed loss (the trainer divides by the global `count`)."""
        raise NotImplementedError

    @torch.no_grad()
    def validate(self, model: torch.nn.Module, data: Any) -> dict[str, float]:
        """Metrics of `model` (in eval mode, under the trainer's autocast) on the held-out data."""
        raise NotImplementedError
