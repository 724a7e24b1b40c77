"""The finetune section (`vaswani finetune`): a pretrained language model trained on labelled text, or a
translation model adapted to new parallel text (domain adaptation)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from vaswani.config.fields import ConfigError


@dataclass(frozen=True)
class FinetuneConfig:
    """Fine-tuning a pretrained model (`vaswani finetune`)."""

    # λ of GPT's L = L_task + λ L_pretrain (Radford et al. 2018, eq. 3). classify: the model's own pretraining
    # loss (next-token for decoder_only, masked-token for encoder_only) on the task's text. translation: the
    # loss on pairs of the original training data (original_src/original_tgt), against forgetting its domain.
    # 0: the task loss alone.
    aux_weight: float = 0.5
    # translation: a sample of the data the model was trained on; each in-domain batch is joined by a batch
    # of these pairs, of the same token budget, and loss = in-domain + aux_weight * original (per token each).
    original_src: str = ""
    original_tgt: str = ""
    init: Literal["pretrained", "scratch"] = "pretrained"  # scratch: the same model, freshly initialised
    labels: list | None = None  # the label names in class order; None: those of data.labelled_train, sorted

    def unused(self, task: str) -> frozenset[str]:
        """The fields that do not take effect in a run of `task`."""
        names = {f.name for f in fields(self)}
        if task == "classify":
            return frozenset({"original_src", "original_tgt"})
        if task == "translation":
            return frozenset(
                {"init", "labels"} | (set() if self.original_src else {"aux_weight", "original_src", "original_tgt"})
            )
        return frozenset(names)

    def validate(self) -> None:
        if bool(self.original_src) != bool(self.original_tgt):
            raise ConfigError("finetune.original_src and finetune.original_tgt go together: give both or neither")
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
