"""What a translation run trains on: the prepared pairs with their tokenizer and dev set (RunData), the
batches of each epoch (EpochPlan), and the loader that collates them ahead of the training step
(EpochBatches, batch_stream). Making the prepared data is data/prepare.py's."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from vaswani.config import DataConfig
from vaswani.data import store
from vaswani.data.batching import Batch, Batches, collate, epoch_order, token_batches
from vaswani.data.corpus import DataError
from vaswani.data.tokenizer import Tokenizer
from vaswani.runtime.allocator import release_freed_memory
from vaswani.special import BOS_ID, EOS_ID, PAD_ID

IdPair = tuple[list[int], list[int]]


@dataclass
class RunData:
    """What training reads: the prepared arrays, the tokenizer, the dev set in memory (it is small)."""

    prepared: store.PreparedData
    tokenizer: Tokenizer
    valid: list[IdPair]
    valid_text: list[tuple[str, str]]
    weights: list[float]

    @property
    def report(self) -> dict:
        return self.prepared.manifest["report"]


def load_run_data(prepared: store.PreparedData, tokenizer: Tokenizer, data: DataConfig) -> RunData:
    valid, valid_text = [], []
    if "valid" in prepared.splits:
        split = prepared.valid
        valid = [(split.src[i].tolist(), split.tgt[i].tolist()) for i in range(len(split))]
        valid_text = [split.text(i) for i in range(len(split))]
    weights = {c["name"]: c["weight"] for c in data.training_corpora()} if not data.toy_task else {}
    return RunData(prepared, tokenizer, valid, valid_text, [weights.get(c["name"], 1.0) for c in prepared.corpora])


class EpochPlan:
    """The batches of each epoch, as arrays of pair indices, a function of (seed, epoch) only.

    With every corpus weight 1 the batches are made once, as the paper's §5.1 batching by length;
    otherwise each epoch draws its sample of pairs (weight 2.5: every pair twice, plus a random half)
    and batches it afresh."""

    def __init__(self, data: RunData, max_tokens: int, seed: int) -> None:
        self.data, self.max_tokens, self.seed = data, max_tokens, seed
        self.weighted = any(w != 1.0 for w in data.weights)
        self._cache: tuple[int | None, Batches] | None = None

    def batches(self, epoch: int) -> Batches:
        key = epoch if self.weighted else None
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self._make(epoch))
            release_freed_memory()  # the sort's transient arrays
        return self._cache[1]

    def _make(self, epoch: int) -> list[np.ndarray]:
        lengths = self.data.prepared.train.lengths
        if not self.weighted:
            return token_batches(lengths, self.max_tokens, self.seed)
        members = self.members(epoch)
        return token_batches(lengths[members], self.max_tokens, self.seed * 1_000_003 + epoch).take(members)

    def members(self, epoch: int) -> np.ndarray:
        """Pair indices of one epoch's sample, each corpus contributing weight x its size."""
        rng = np.random.default_rng([self.seed, epoch])
        parts = []
        for corpus, weight in zip(self.data.prepared.corpora, self.data.weights, strict=True):
            first, end = corpus["first"], corpus["end"]
            whole, fraction = divmod(weight, 1.0)
            parts.extend([np.arange(first, end, dtype=np.int64)] * int(whole))
            extra = round(fraction * (end - first))
            if extra:
                parts.append(first + np.sort(rng.choice(end - first, size=extra, replace=False)))
        return np.concatenate(parts)


class EpochBatches(torch.utils.data.Dataset):
    """The k-th item is one collated batch of this rank in this epoch: a DataLoader's workers build
    them ahead of the step. With subword sampling the batch's text is segmented here, seeded by
    (seed, epoch, batch), so that any number of workers, a resumed run and every rank agree."""

    def __init__(
        self,
        data: RunData,
        batches: Batches,
        numbers: list[int],
        epoch: int,
        seed: int,
        config: DataConfig,
        special: tuple[int, int, int, bool] = (PAD_ID, BOS_ID, EOS_ID, True),
    ) -> None:
        self.split, self.tokenizer, self.special = data.prepared.train, data.tokenizer, special
        self.directory = data.prepared.directory
        self.batches, self.numbers, self.epoch, self.seed = batches, numbers, epoch, seed
        self.alphas, self.max_len = (config.src_sampling_alpha, config.tgt_sampling_alpha), config.max_len

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, k: int) -> Batch:
        indices = self.batches[self.numbers[k]]
        pairs = [self.split.pair(i) for i in indices.tolist()]
        if any(self.alphas):
            pairs = self._sampled(indices, pairs, (self.seed * 1_000_003 + self.epoch) * 7_919 + self.numbers[k])
        return collate(pairs, *self.special)

    def _sampled(self, indices: np.ndarray, pairs: list, seed: int) -> list:
        """BPE-dropout / subword regularization of this batch's text; a sampled side longer than
        data.max_len keeps its deterministic ids."""
        texts = [self.split.text(i) for i in indices.tolist()]
        sides = [list(side) for side in zip(*pairs, strict=True)]
        encoders = (self.tokenizer.encode_src, self.tokenizer.encode_tgt)
        for side, (alpha, encode) in enumerate(zip(self.alphas, encoders, strict=True)):
            if alpha:
                sampled = encode([t[side] for t in texts], alpha, seed % 2**31 + side)
                sides[side] = [
                    s if len(s) <= self.max_len else fixed for s, fixed in zip(sampled, sides[side], strict=True)
                ]
        return list(zip(*sides, strict=True))

    def __getstate__(self) -> dict:  # a spawned worker maps the files itself
        state = dict(self.__dict__)
        state["split"] = None
        state["tokenizer"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.split = store.PreparedData.open(self.directory, verify=False).train
        self.tokenizer = Tokenizer.load(self.directory)


@dataclass(frozen=True)
class Reader:
    """Who reads a batch stream: this process's `rank` among `world` processes, its DataLoader `workers` and the
    `device` its batches go to (pinned memory for a GPU)."""

    rank: int = 0
    world: int = 1
    workers: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))


def batch_stream(
    data: RunData,
    plan: EpochPlan,
    config: DataConfig,
    seed: int,
    epoch: int,
    position: int,
    reader: Reader,
    special: tuple[int, int, int, bool] = (PAD_ID, BOS_ID, EOS_ID, True),
):
    """(epoch, position after this batch, Batch) of this rank, from (epoch, position) on, for ever.
    `special`: the model's (pad_id, bos_id, eos_id, source_eos), which collating writes (an imported model's differ).

    The global order of an epoch's batches is fixed by (seed, epoch); rank r takes batch
    order[p + r] at positions p = position, position + world, ...; an epoch's last batches that
    cannot give every rank one are left out, and the next epoch starts at position 0."""
    rank, world, workers, device = reader.rank, reader.world, reader.workers, reader.device
    while True:
        batches = plan.batches(epoch)
        if len(batches) < world:
            raise DataError(
                f"an epoch has {len(batches)} batches, fewer than the {world} processes; lower "
                "data.max_tokens or use fewer processes"
            )
        order = epoch_order(len(batches), seed, epoch)
        positions = list(range(position, len(batches) - world + 1, world))
        numbers = [order[p + rank] for p in positions]
        dataset = EpochBatches(data, batches, numbers, epoch, seed, config, special)
        if positions:
            loader = torch.utils.data.DataLoader(
                dataset,
                batch_size=None,
                shuffle=False,
                num_workers=workers,
                pin_memory=device.type == "cuda",
                prefetch_factor=4 if workers else None,
                generator=torch.Generator().manual_seed(seed),
            )  # never draws from the global RNG (dropout's)
            for p, batch in zip(positions, loader, strict=True):
                yield epoch, p + world, batch
        epoch, position = epoch + 1, 0
