"""Training: the loss, the learning-rate schedule, checkpoints and the loop."""

from vaswani.train.loss import label_smoothed_cross_entropy

__all__ = ["label_smoothed_cross_entropy"]
