"""Learning-rate schedules: the paper's warmup (§5.3), inverse square root with a peak rate, and a
constant peak after warmup (GPT and BERT's recipes, with lr_decay to zero)."""

from __future__ import annotations

import math

from vaswani.config import TrainConfig


def progress(step: int, elapsed_s: float, train: TrainConfig, epochs: float | None = None) -> float:
    """How much of the run's budget is spent, in [0, 1]: the largest of the shares of max_steps, of max_time (where
    set) and of max_epochs (where set and `epochs`, the epochs done so far with their fraction, is known), so that
    a decaying schedule reaches zero at whichever limit ends the run."""
    budget = train.max_seconds
    shares = [step / train.max_steps, elapsed_s / budget if budget else 0.0]
    if train.max_epochs and epochs is not None:
        shares.append(epochs / train.max_epochs)
    return min(1.0, max(shares))


def learning_rate(step: int, train: TrainConfig, d_model: int, spent: float = 0.0) -> float:
    """The learning rate for optimizer step `step` (counting from 1), `spent` of the budget gone
    (see `progress`; it matters only with lr_decay: linear, which multiplies by 1 - spent).

    noam (§5.3): lr_factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5): linear warmup, then
    decay with the inverse square root of the step. inverse_sqrt: the same shape scaled so that it
    peaks at exactly peak_lr after warmup_steps. constant: linear warmup to peak_lr, then peak_lr.
    lr_decay linear multiplies by (1 - spent), cosine by (1 + cos(pi * spent)) / 2 (GPT's decay).
    """
    step = max(step, 1)
    if train.lr_schedule == "constant":
        shape = min(1.0, step / train.warmup_steps) * train.warmup_steps**-0.5
    else:
        shape = min(step**-0.5, step * train.warmup_steps**-1.5)
    if train.lr_decay == "linear":
        shape *= max(0.0, 1.0 - spent)
    elif train.lr_decay == "cosine":
        shape *= 0.5 * (1.0 + math.cos(math.pi * min(1.0, spent)))
    if train.lr_schedule == "noam":
        return train.lr_factor * d_model**-0.5 * shape
    return train.peak_lr * shape * train.warmup_steps**0.5
