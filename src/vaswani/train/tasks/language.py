"""Language modelling on plain text: the next token (lm, a decoder-only model) or BERT's masked tokens
(mlm, an encoder-only model), over contiguous blocks of the prepared token stream.

Each step's blocks start at offsets drawn from a generator seeded by (seed, epoch, batch number), as
nanoGPT draws them, so a resumed run, every rank and any number of processes see the same batches.
An epoch is as many batches as the stream holds blocks of the batch's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vaswani.data import store
from vaswani.data.corpus import DataError
from vaswani.data.masking import mask_tokens
from vaswani.data.plain import PlainRecipe
from vaswani.data.prepare import install_tokenizer, open_or_prepare
from vaswani.data.tokenizer import Tokenizer
from vaswani.train.tasks.base import Task, TextBatch, token_loss


@dataclass
class TextData:
    prepared: store.PreparedData
    tokenizer: Tokenizer

    @property
    def train(self) -> np.ndarray:
        return self.prepared.streams["train"]

    @property
    def valid(self) -> np.ndarray:
        return self.prepared.streams["valid"]


def open_text(task: Task, rank0: bool) -> TextData:
    """The run's prepared text (made or reused by rank 0; a model directory's own tokenizer is kept)."""
    c, model_dir = task.config, task.context.model_dir
    directory = Path(c.data.prepared) if c.data.prepared else model_dir / "prepared"
    if rank0:
        existing = Tokenizer.load(model_dir) if Tokenizer.present(model_dir) else None
        recipe = PlainRecipe(c.data, c.train.seed, c.model.eos_id)
        prepared = open_or_prepare(recipe, directory, existing, log=task.log)
        install_tokenizer(prepared, model_dir)
    else:
        prepared = store.PreparedData.open(directory)
    if "train" not in prepared.streams:
        raise DataError(
            f"{directory} holds parallel text, not a language model's text; set data.prepared to another directory"
        )
    return TextData(prepared, Tokenizer.load(directory))


class _Blocks(Task):
    """What lm and mlm share: the stream, its blocks, the stream of batches."""

    def prepare(self, rank0: bool) -> TextData:
        if self.name == "mlm" and self.config.data.block_size < 3:
            raise DataError("data.block_size must be at least 3 for mlm (BOS and tokens to mask)")
        data = open_text(self, rank0)
        if len(data.train) <= self.config.data.block_size:
            raise DataError(
                f"the training text has {len(data.train)} tokens; data.block_size "
                f"({self.config.data.block_size}) must be smaller"
            )
        return data

    @property
    def rows(self) -> int:
        d = self.config.data
        return d.batch_size or max(1, d.max_tokens // d.block_size)

    def batches_per_epoch(self, data: TextData) -> int:
        return max(self.context.world, len(data.train) // (self.rows * self.config.data.block_size))

    def describe(self, data: TextData) -> None:
        d = self.config.data
        self.log(
            f"{len(data.train):,} training tokens, {len(data.valid):,} held out; batches of {self.rows} x "
            f"{d.block_size} tokens; {self.batches_per_epoch(data):,} batches an epoch"
        )

    def blocks(self, stream: np.ndarray, epoch: int, number: int, length: int) -> np.ndarray:
        """`rows` blocks of `length` tokens at offsets drawn for (seed, epoch, batch number). Shape: (rows, length)"""
        rng = np.random.default_rng([self.config.train.seed, epoch, number])
        starts = rng.integers(0, len(stream) - length + 1, size=self.rows)
        return np.stack([stream[s : s + length] for s in starts.tolist()]).astype(np.int64)

    def stream(self, data: TextData, epoch: int, position: int):
        rank, world = self.context.rank, self.context.world
        per_epoch = self.batches_per_epoch(data)
        while True:
            for p in range(position, per_epoch - world + 1, world):
                yield epoch, p + world, self.batch(data, epoch, p + rank)
            epoch, position = epoch + 1, 0

    def batch(self, data: TextData, epoch: int, number: int) -> TextBatch:
        raise NotImplementedError

    def loss(self, wrapped, model, batch: TextBatch) -> torch.Tensor:
        loss, _ = token_loss(model, wrapped(batch.ids), batch.targets, self.config.train.label_smoothing)
        return loss

    def held_out_blocks(self, data: TextData) -> list[TextBatch]:
        raise NotImplementedError

    @torch.no_grad()
    def validate(self, model, data: TextData) -> dict[str, float]:
        return held_out_loss(model, self.held_out_blocks(data), self.context.device)


def held_out_loss(model, batches: list[TextBatch], device: torch.device) -> dict[str, float]:
    """Loss (nats per predicted token, no smoothing), perplexity and accuracy of the predicted tokens."""
    total = tokens = correct = 0.0
    for batch in batches:
        batch = batch.to(device)
        hidden = model.hidden_states(batch.ids)
        loss, n = token_loss(model, hidden, batch.targets, 0.0)
        real = batch.targets != model.config.pad_id
        correct += (model.logits(hidden[real]).argmax(-1) == batch.targets[real]).sum().item()
        total, tokens = total + loss.item(), tokens + n.item()
    loss = total / tokens
    return {"loss": loss, "ppl": math.exp(min(loss, 50)), "accuracy": correct / tokens}


class LanguageModelling(_Blocks):
    """lm: a decoder-only model predicting each next token (nanoGPT's blocks: x = s[i:i+T], y = s[i+1:i+T+1])."""

    name = "lm"

    def batch(self, data: TextData, epoch: int, number: int) -> TextBatch:
        x = torch.from_numpy(self.blocks(data.train, epoch, number, self.config.data.block_size + 1))
        return TextBatch(x[:, :-1], x[:, 1:], x.size(0) * (x.size(1) - 1))

    def held_out_blocks(self, data: TextData) -> list[TextBatch]:
        """The whole held-out stream in consecutive blocks (each predicts block_size tokens)."""
        T, stream = self.config.data.block_size, torch.from_numpy(data.valid.astype(np.int64))
        n = (len(stream) - 1) // T
        x, y = stream[: n * T].view(n, T), stream[1 : n * T + 1].view(n, T)
        rows = max(self.rows, 32)
        return [TextBatch(x[i : i + rows], y[i : i + rows], y[i : i + rows].numel()) for i in range(0, n, rows)]

    @torch.no_grad()
    def validate(self, model, data: TextData) -> dict[str, float]:
        """Loss per token and per character of the held-out text (per character: the nats of the tokens
        scored, divided by the characters they cover, taken as the whole text's characters per token)."""
        result = super().validate(model, data)
        streams = data.prepared.manifest["streams"]["valid"]
        result["loss_per_char"] = result["loss"] * streams["tokens"] / max(1, streams["chars"])
        return result


class MaskedLanguageModelling(_Blocks):
    """mlm: an encoder-only model predicting BERT's masked tokens in blocks that start with BOS ([CLS]); EOS
    ([SEP] for an imported BERT) ends each line of the text."""

    name = "mlm"

    def _masked(self, data: TextData, x: np.ndarray, rng: np.random.Generator) -> TextBatch:
        m, mask_id = self.config.model, self.mask_id(data)
        x = np.concatenate([np.full((x.shape[0], 1), m.bos_id, dtype=np.int64), x], axis=1)
        # an imported tokenizer's special tokens ([CLS], [SEP], [UNK]) are never masked, as BERT's are not
        never = [i for i in (m.pad_id, m.bos_id, m.eos_id, mask_id, data.tokenizer.src.unk_id()) if i is not None]
        inputs, targets, count = mask_tokens(
            x, rng, mask_id, data.tokenizer.src_vocab_size, self.config.data.mask_prob, never=never
        )
        return TextBatch(torch.from_numpy(inputs), torch.from_numpy(targets), count)

    def mask_id(self, data: TextData) -> int:
        if data.tokenizer.mask_id is None:
            raise DataError("this tokenizer has no <mask> piece; prepare the text again for a masked LM")
        return data.tokenizer.mask_id

    def batch(self, data: TextData, epoch: int, number: int) -> TextBatch:
        x = self.blocks(data.train, epoch, number, self.config.data.block_size - 1)
        return self._masked(data, x, np.random.default_rng([self.config.train.seed, epoch, number, 1]))

    def held_out_blocks(self, data: TextData) -> list[TextBatch]:
        """The held-out stream in consecutive blocks, masked the same way at every validation."""
        T, stream = self.config.data.block_size - 1, data.valid.astype(np.int64)
        n = len(stream) // T
        x = stream[: n * T].reshape(n, T)
        rows, rng = max(self.rows, 32), np.random.default_rng(0)
        return [self._masked(data, x[i : i + rows], rng) for i in range(0, n, rows)]
