"""Fine-tuning on labelled text (classify): a pretrained decoder-only or encoder-only model with a linear
classifier over one position, trained with L = L_task + λ L_pretrain (GPT, Radford et al. 2018, eq. 3):
λ = finetune.aux_weight times the model's own pretraining loss on the task's text (the next token for a
decoder-only model, BERT's masked tokens for an encoder-only one). λ = 0 trains on the task loss alone.

A decoder-only model reads `text EOS` and classifies at EOS (its last position); an encoder-only model
reads `BOS text EOS` and classifies at BOS (BERT's [CLS]).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vaswani.config import Config, ModelConfig
from vaswani.data.corpus import DataError
from vaswani.data.labelled import classifier_inputs, pad, read_labelled
from vaswani.data.masking import mask_tokens
from vaswani.data.tokenizer import Tokenizer
from vaswani.families import family
from vaswani.train.tasks.base import Task, TextBatch, token_loss


@dataclass
class LabelledData:
    tokenizer: Tokenizer
    labels: list[str]
    train: list[np.ndarray]  # model inputs, with their special tokens
    train_labels: np.ndarray
    valid: list[np.ndarray]
    valid_labels: np.ndarray
    fingerprint: dict
    pairs: bool = False  # the lines are sentence pairs (model.pairs)


class Classify(Task):
    name = "classify"

    def prepare(self, rank0: bool) -> LabelledData:
        c, model_dir = self.config, self.context.model_dir
        d = c.data
        if not d.labelled_train or not d.labelled_valid:
            raise DataError(
                "train.task classify needs data.labelled_train and data.labelled_valid (TSV files of label and text)"
            )
        tokenizer = Tokenizer.load(model_dir)  # the pretrained model's, copied by vaswani finetune
        train = read_labelled(d.labelled_train, d.invalid_utf8)
        valid = read_labelled(d.labelled_valid, d.invalid_utf8)
        labels = [str(x) for x in c.finetune.labels] if c.finetune.labels else sorted({lab for _, lab, _ in train})
        if len(labels) < 2:
            raise DataError(f"{d.labelled_train} has only the label {labels[0]!r}; a classifier needs two or more")
        index = {label: i for i, label in enumerate(labels)}
        for path, rows in ((d.labelled_train, train), (d.labelled_valid, valid)):
            for number, label, _ in rows:
                if label not in index:
                    raise DataError(
                        f"{path}, line {number}: label {label!r} is not one of {labels} (the labels of "
                        f"{d.labelled_train}, or finetune.labels)"
                    )
        if len(train) < self.context.world * self.rows:
            raise DataError(
                f"{d.labelled_train} has {len(train)} lines, fewer than one batch per process "
                f"({self.context.world} x data.batch_size {self.rows}); lower data.batch_size"
            )
        if c.finetune.aux_weight and family(c.model.type).task == "mlm" and tokenizer.mask_id is None:
            raise DataError(
                "the tokenizer has no <mask> piece for the masked-token auxiliary loss; set finetune.aux_weight: 0"
            )
        length = d.block_size
        pairs = isinstance(train[0][2], tuple)
        if pairs != isinstance(valid[0][2], tuple):
            raise DataError(
                f"{d.labelled_train} and {d.labelled_valid} differ: one holds sentence pairs (label, text a, text b), "
                "the other single texts; give both the same columns"
            )
        if pairs and (c.model.segments < 2 or family(c.model.type).task != "mlm"):
            raise DataError(
                f"{d.labelled_train} holds sentence pairs, which need a model with segments A and B (a BERT: "
                f"model.segments >= 2); this one is {c.model.type} with model.segments {c.model.segments}"
            )
        reader = dataclasses.replace(c.model, pairs=pairs)

        def inputs(rows):
            return classifier_inputs(tokenizer, [t for _, _, t in rows], reader, length, d.lowercase)

        fingerprint = {
            str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in (d.labelled_train, d.labelled_valid)
        }
        return LabelledData(
            tokenizer,
            labels,
            inputs(train),
            np.asarray([index[x] for _, x, _ in train]),
            inputs(valid),
            np.asarray([index[x] for _, x, _ in valid]),
            fingerprint,
            pairs,
        )

    def fingerprint(self, data: LabelledData) -> dict:
        return data.fingerprint

    def model_config(self, data: LabelledData) -> ModelConfig:
        size = data.tokenizer.src_vocab_size
        return dataclasses.replace(
            self.config.model, src_vocab_size=size, tgt_vocab_size=size, n_classes=len(data.labels), pairs=data.pairs
        )

    def run_config(self, data: LabelledData) -> Config:
        """The model's classes, and the labels they stand for (as strings, in the order of the classes)."""
        config = super().run_config(data)
        return dataclasses.replace(config, finetune=dataclasses.replace(config.finetune, labels=data.labels))

    @property
    def rows(self) -> int:
        d = self.config.data
        return d.batch_size or max(1, d.max_tokens // d.block_size)

    @property
    def aux_weight(self) -> float:
        return self.config.finetune.aux_weight

    def describe(self, data: LabelledData) -> None:
        counts = np.bincount(data.train_labels, minlength=len(data.labels))
        per_label = ", ".join(f"{label} {n:,}" for label, n in zip(data.labels, counts, strict=True))
        self.log(
            f"{len(data.train):,} labelled training lines ({per_label}), {len(data.valid):,} to validate; "
            f"batches of {self.rows}; aux_weight (λ) {self.aux_weight:g}"
        )

    def stream(self, data: LabelledData, epoch: int, position: int):
        rank, world, B = self.context.rank, self.context.world, self.rows
        per_epoch = max(world, len(data.train) // B)
        while True:
            order = np.random.default_rng([self.config.train.seed, epoch]).permutation(len(data.train))
            for p in range(position, per_epoch - world + 1, world):
                number = p + rank
                yield epoch, p + world, self.batch(data, "train", order[number * B : (number + 1) * B], epoch, number)
            epoch, position = epoch + 1, 0

    def batch(
        self,
        data: LabelledData,
        split: str,
        indices: np.ndarray,
        epoch: int = 0,
        number: int = 0,
        aux: bool | None = None,
    ) -> TextBatch:
        """The examples `indices` of `split`, their labels, and (when λ > 0) what the auxiliary loss predicts:
        the next tokens (decoder_only), or a masked copy of the inputs and the masked tokens (encoder_only).
        Masking is drawn for (seed, epoch, batch number): the same on resume."""
        inputs, labels = (data.train, data.train_labels) if split == "train" else (data.valid, data.valid_labels)
        pad_id = self.config.model.pad_id
        ids = pad([inputs[i] for i in indices.tolist()], pad_id)
        labels = torch.from_numpy(labels[indices])
        aux = self.aux_weight > 0 if aux is None else aux
        if not aux:
            return TextBatch(ids, ids.new_zeros(0), len(indices), labels)
        if family(self.config.model.type).task == "lm":  # the auxiliary loss is the pretraining objective
            targets = torch.cat([ids[:, 1:], ids.new_full((ids.size(0), 1), pad_id)], dim=1)
            return TextBatch(ids, targets, len(indices), labels, aux_count=int((targets != pad_id).sum()))
        rng = np.random.default_rng([self.config.train.seed, epoch, number, int(split == "valid")])
        m, mask_id = self.config.model, data.tokenizer.mask_id
        never = [i for i in (m.pad_id, m.bos_id, m.eos_id, mask_id, data.tokenizer.src.unk_id()) if i is not None]
        masked, targets, count = mask_tokens(
            ids.numpy(), rng, mask_id, data.tokenizer.src_vocab_size, self.config.data.mask_prob, never=never
        )
        return TextBatch(
            ids, torch.from_numpy(targets), len(indices), labels, masked=torch.from_numpy(masked), aux_count=count
        )

    def losses(self, wrapped, model, batch: TextBatch) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Summed task loss, the auxiliary (pretraining) loss per predicted token times the examples (None
        without one), and the class logits.

        The auxiliary term is each batch's mean per token, weighted by its examples: with λ > 0 the update
        depends (slightly) on how a global batch is split over processes and micro-batches; resume is exact."""
        B = batch.ids.size(0)
        both = batch.masked is not None
        hidden = wrapped(torch.cat([batch.ids, batch.masked]) if both else batch.ids)
        task_hidden = hidden[:B]
        logits = model.classify(batch.ids, task_hidden).float()
        task = F.cross_entropy(logits, batch.labels, reduction="sum")
        if not batch.targets.numel():
            return task, None, logits
        aux, _ = token_loss(model, hidden[B:] if both else hidden, batch.targets, 0.0)
        return task, aux * B / max(1, batch.aux_count), logits

    def loss(self, wrapped, model, batch: TextBatch) -> torch.Tensor:
        task, aux, _ = self.losses(wrapped, model, batch)
        return task if aux is None else task + self.aux_weight * aux

    @torch.no_grad()
    def validate(self, model, data: LabelledData) -> dict[str, float]:
        """Accuracy and loss of the classifier on the labelled dev lines, and the pretraining loss on their text."""
        device = self.context.device
        correct = task_total = aux_total = 0.0
        n = len(data.valid)
        for start in range(0, n, 64):
            indices = np.arange(start, min(n, start + 64))
            batch = self.batch(data, "valid", indices, 0, start, aux=True).to(device)
            task, aux, logits = self.losses(model.hidden_states, model, batch)
            correct += (logits.argmax(-1) == batch.labels).sum().item()
            task_total, aux_total = task_total + task.item(), aux_total + aux.item()
        return {"accuracy": correct / n, "loss": task_total / n, "pretrain_loss": aux_total / n}
