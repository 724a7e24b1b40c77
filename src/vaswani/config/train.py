"""The train section: the optimisation recipe (§5.3-§5.4), its budget, and what the run learns."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

from vaswani.config.fields import ConfigError, parse_duration
from vaswani.families import TASKS

PRECISIONS = ("auto", "fp32", "bf16")  # auto: measured per model and device (vaswani/runtime/precision.py)


@dataclass(frozen=True)
class TrainConfig:
    """The optimisation recipe; defaults are the paper's §5.3-§5.4."""

    max_steps: int = 100000  # §5.2: base model, 100k steps
    max_epochs: int | None = None
    # noam: §5.3 warmup then step^-0.5; inverse_sqrt: the same, peaking at peak_lr; constant: warmup to peak_lr
    lr_schedule: Literal["noam", "inverse_sqrt", "constant"] = "noam"
    lr_factor: float = 1.0  # noam: lr = lr_factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    peak_lr: float = 5e-4  # inverse_sqrt: linear warmup to peak_lr, then peak_lr * sqrt(warmup / step); constant
    warmup_steps: int = 4000
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    # 0: Adam, as the paper. > 0: AdamW's decoupled weight decay (Loshchilov & Hutter 2019) on the weight
    # matrices, not on biases and norms (GPT-2 and nanoGPT: 0.1)
    weight_decay: float = 0.0
    label_smoothing: float = 0.1  # §5.4
    clip_norm: float = 0.0  # 0: no clipping (the paper clips nothing)
    accumulate: int = 1  # batches per optimizer step
    # processes that collate batches ahead of the step (torch DataLoader workers; 0: in the training
    # process). Results do not depend on it.
    loader_workers: int = 1
    # bf16: autocast, fp32 master weights. auto: bf16 only where it measures faster than fp32 for this
    # model on this device (vaswani/runtime/precision.py: CPU flags do not tell); the resolved value is saved.
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # A wall-clock budget for training, validations included ("90s", "10m", "1h30m"; a number is seconds):
    # training stops there as at max_steps, whichever comes first. None: no budget.
    max_time: str | None = field(default=None, metadata={"duration": True})
    # none: the schedule above as it is (the paper). linear: it is multiplied by (1 - progress), progress
    # being the larger of step / max_steps and time / max_time, so it reaches zero where the run ends:
    # a fixed budget is best spent annealing to its end (Li et al., 2020, "Budgeted Training").
    # cosine: multiplied by (1 + cos(pi * progress)) / 2 instead (GPT's schedule)
    lr_decay: Literal["none", "linear", "cosine"] = "none"
    # torch.compile the model for the training step (dynamic shapes: batches vary in length). Off by default:
    # on this project's CPUs the compiled step is no faster, and on a GPU the time spent compiling for new batch
    # shapes is repaid only over a long run (measured: docs/benchmarks.md, "Training speed").
    compile: bool = False
    device: str = "auto"
    seed: int = 1
    valid_every: int = 1000  # steps between validations (and checkpoints)
    # bleu (translation), loss, or accuracy (classify); auto: bleu for translation, accuracy for classify,
    # loss for the language models
    early_stopping_metric: Literal["auto", "bleu", "loss", "accuracy"] = "auto"
    patience: int = 0  # validations without improvement before stopping; 0: never stop early
    keep_last: int = 5  # §5.2 averages the last 5 checkpoints
    keep_best: int = 1

    # What is learned: translation (encoder_decoder), lm (next token, decoder_only), mlm (masked tokens,
    # encoder_only), classify (labelled text, the models with model.n_classes). auto: from model.type.
    task: Literal["auto", "translation", "lm", "mlm", "classify"] = "auto"

    @functools.cached_property  # parsed once: the schedule asks at every step
    def max_seconds(self) -> float | None:
        """max_time in seconds (None: no budget)."""
        return None if self.max_time is None else parse_duration(self.max_time, "train.max_time")

    def unused(self, task: str) -> frozenset[str]:
        """The fields that do not take effect in a run of `task` (read in train/schedule.py, train/tasks/)."""
        names = {"peak_lr"} if self.lr_schedule == "noam" else {"lr_factor"}
        if task != "translation":
            names.add("loader_workers")  # the language models and the classifier cut their batches in the step
        if task == "classify":
            names.add("label_smoothing")  # the classifier's loss is plain cross-entropy
        return frozenset(names)

    def validate(self) -> None:
        if self.lr_schedule not in ("noam", "inverse_sqrt", "constant"):
            raise ConfigError(f"train.lr_schedule must be noam, inverse_sqrt or constant, got {self.lr_schedule!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"train.precision must be auto, fp32 or bf16, got {self.precision!r}")
        if self.lr_decay not in ("none", "linear", "cosine"):
            raise ConfigError(f"train.lr_decay must be none, linear or cosine, got {self.lr_decay!r}")
        if self.early_stopping_metric not in ("auto", "bleu", "loss", "accuracy"):
            raise ConfigError(
                f"train.early_stopping_metric must be auto, bleu, loss or accuracy, got {self.early_stopping_metric!r}"
            )
        if self.task not in ("auto", *TASKS):
            raise ConfigError(f"train.task must be auto, translation, lm, mlm or classify, got {self.task!r}")
        for name in ("max_steps", "warmup_steps", "accumulate", "valid_every", "keep_last"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"train.{name} must be positive, got {getattr(self, name)!r}")
        if self.weight_decay < 0:
            raise ConfigError(f"train.weight_decay must be 0 or more, got {self.weight_decay!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"train.label_smoothing must be in [0, 1), got {self.label_smoothing!r}")
        self._validate_optimiser()
        for name in ("loader_workers", "patience", "keep_best"):
            if getattr(self, name) < 0:
                raise ConfigError(f"train.{name} must be 0 or more, got {getattr(self, name)!r}")
        if self.max_epochs is not None and self.max_epochs <= 0:
            raise ConfigError(f"train.max_epochs must be positive (or left out: no limit), got {self.max_epochs!r}")
        if not 0 <= self.seed < 2**63:  # what torch and numpy both take as a seed
            raise ConfigError(f"train.seed must be an integer from 0 to 2^63 - 1, got {self.seed!r}")

    def _validate_optimiser(self) -> None:
        """The rates and Adam's constants: what torch's optimiser would refuse only once training starts (in a
        message naming none of these keys), or take and train nothing with."""
        for name in ("lr_factor", "peak_lr"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"train.{name} must be positive, got {getattr(self, name)!r}")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"train.{name} must be in [0, 1), got {getattr(self, name)!r}")
        for name in ("adam_eps", "clip_norm"):
            if getattr(self, name) < 0:
                raise ConfigError(f"train.{name} must be 0 or more, got {getattr(self, name)!r}")
