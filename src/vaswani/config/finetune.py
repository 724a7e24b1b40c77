"""The finetune section: a pretrained language model trained on labelled text (`vaswani finetune`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vaswani.config.fields import ConfigError


@dataclass(frozen=True)
class FinetuneConfig:
    """Fine-tuning a pretrained language model on labelled text (`vaswani finetune`)."""

    # λ of GPT's L = L_task + λ L_pretrain (Radford et al. 2018, eq. 3): the model's own pretraining loss
    # (next-token for decoder_only, masked-token for encoder_only) on the task's text; 0: the task loss alone
    aux_weight: float = 0.5
    init: Literal["pretrained", "scratch"] = "pretrained"  # scratch: the same model, freshly initialised
    labels: list | None = None  # the label names in class order; None: those of data.labelled_train, sorted

    def validate(self) -> None:
        if self.aux_weight < 0:
            raise ConfigError(f"finetune.aux_weight must be 0 or more, got {self.aux_weight!r}")
        if self.init not in ("pretrained", "scratch"):
            raise ConfigError(f"finetune.init must be pretrained or scratch, got {self.init!r}")
        if self.labels is not None and (
            not isinstance(self.labels, list)
            or len(self.labels) < 2
            or len(set(map(str, self.labels))) != len(self.labels)
        ):
            raise ConfigError(f"finetune.labels must list at least two different labels, got {self.labels!r}")
