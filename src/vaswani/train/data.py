"""The training data of a run: its prepared arrays (made or reused), the batches of each epoch, and
the loader that collates them ahead of the training step."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vaswani.config import DataConfig
from vaswani.data import store
from vaswani.data.batching import Batch, Batches, collate, token_batches
from vaswani.data.corpus import DataError
from vaswani.data.streaming import Corpus, Recipe, prepare_data
from vaswani.data.tokenizer import Tokenizer
from vaswani.data.toy import toy_pairs
from vaswani.runtime import release_freed_memory

IdPair = tuple[list[int], list[int]]


def recipe_of(data: DataConfig, joint: bool, seed: int) -> Recipe:
    """The data section as the preparation needs it (a toy task's pairs generated here)."""
    toy = None
    if data.toy_task:
        toy = {"task": data.toy_task, "max_len": data.toy_max_len, "seed": seed,
               "train": toy_pairs(data.toy_task, data.toy_train_size, data.toy_max_len, seed),
               "valid": toy_pairs(data.toy_task, data.toy_valid_size, data.toy_max_len, seed + 1)}
    corpora = () if toy else tuple(Corpus(**c) for c in data.training_corpora())
    valid = (data.valid_src, data.valid_tgt) if data.valid_src and not toy else None
    return Recipe(corpora=corpora, valid=valid, toy=toy, tokenizer=data.tokenizer, vocab_size=data.vocab_size,
                  joint=joint, max_len=data.max_len, max_len_ratio=data.max_len_ratio, lowercase=data.lowercase,
                  invalid_utf8=data.invalid_utf8, keep_text=bool(data.src_sampling_alpha or data.tgt_sampling_alpha))


def check_manifest(recipe: Recipe, directory: Path, manifest: dict) -> None:
    """A DataError saying what differs when `directory` was prepared from other data or settings."""
    fix = f"delete {directory} or prepare into another directory (data.prepared)"
    wanted, made = recipe.key(), manifest["recipe"]
    for key in wanted:
        if wanted[key] != made.get(key):
            raise DataError(f"{directory} was prepared with {key}={made.get(key)!r}, this run asks for "
                            f"{wanted[key]!r}; {fix}")
    files = recipe.input_files()
    if len(files) != len(manifest["inputs"]):
        raise DataError(f"{directory} was prepared from {len(manifest['inputs'])} files, this run names "
                        f"{len(files)}; {fix}")
    for path, made_from in zip(files, manifest["inputs"], strict=True):
        if not path.is_file():
            raise DataError(f"{path}: file not found")
        stat = path.stat()
        same = stat.st_size == made_from["bytes"] and (
            stat.st_mtime_ns == made_from["mtime_ns"] or store.file_sha256(path) == made_from["sha256"])
        if not same:
            raise DataError(f"{path} has changed since {directory} was prepared from it; {fix}")


def open_or_prepare(recipe: Recipe, directory: Path, tokenizer: Tokenizer | None = None, workers: int | None = None,
                    log: Callable[[str], None] = lambda _: None, console=None) -> store.PreparedData:
    """Reuse `directory` when its manifest matches the recipe and the files; make it when missing."""
    if (directory / store.MANIFEST).is_file():
        check_manifest(recipe, directory, store.read_manifest(directory))
        data = store.PreparedData.open(directory)
        log(f"prepared data: {directory} (reused; {len(data.train):,} training pairs)")
        return data
    store.check_unprepared(directory)
    for path in recipe.input_files():
        if not path.is_file():
            raise DataError(f"{path}: file not found")
    log(f"preparing {directory}")
    with _Progress(console) as progress:
        data = prepare_data(recipe, directory, workers, tokenizer, log, progress)
    log(f"prepared data: {directory} ({len(data.train):,} training pairs)")
    return data


class _Progress:
    """A rich bar over the bytes read, on a terminal; nothing otherwise."""

    def __init__(self, console) -> None:
        self.console = console

    def __enter__(self):
        if self.console is None or not self.console.is_terminal:
            return None
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("encoding"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                            console=self.console, transient=True)
        self.bar.start()

        def start(total: int):
            task = self.bar.add_task("encoding", total=total)
            return lambda n: self.bar.advance(task, n)

        return start

    def __exit__(self, *exc) -> None:
        if hasattr(self, "bar"):
            self.bar.stop()


def install_tokenizer(data: store.PreparedData, model_dir: Path) -> Tokenizer:
    """The prepared data's tokenizer, copied into the model directory (which must not hold another)."""
    tokens = data.manifest["tokenizer"]
    for name, digest in tokens.items():
        target = model_dir / name
        if target.is_file() and store.file_sha256(target) != digest:
            raise DataError(f"{target} is not the tokenizer {data.directory} was prepared with; use a new model "
                            "directory, or prepare the data with this model's tokenizer")
        if not target.is_file():
            shutil.copyfile(data.directory / name, target)
    return Tokenizer.load(data.directory)


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

    def __init__(self, data: RunData, batches: Batches, numbers: list[int], epoch: int, seed: int,
                 config: DataConfig) -> None:
        self.split, self.tokenizer = data.prepared.train, data.tokenizer
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
        return collate(pairs)

    def _sampled(self, indices: np.ndarray, pairs: list, seed: int) -> list:
        """BPE-dropout / subword regularization of this batch's text; a sampled side longer than
        data.max_len keeps its deterministic ids."""
        texts = [self.split.text(i) for i in indices.tolist()]
        sides = [list(side) for side in zip(*pairs, strict=True)]
        encoders = (self.tokenizer.encode_src, self.tokenizer.encode_tgt)
        for side, (alpha, encode) in enumerate(zip(self.alphas, encoders, strict=True)):
            if alpha:
                sampled = encode([t[side] for t in texts], alpha, seed % 2**31 + side)
                sides[side] = [s if len(s) <= self.max_len else fixed for s, fixed in zip(sampled, sides[side],
                                                                                           strict=True)]
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


def batch_stream(data: RunData, plan: EpochPlan, config: DataConfig, seed: int, epoch: int, position: int,
                 rank: int, world: int, workers: int, device: torch.device):
    """(epoch, position after this batch, Batch) of this rank, from (epoch, position) on, for ever.

    The global order of an epoch's batches is fixed by (seed, epoch); rank r takes batch
    order[p + r] at positions p = position, position + world, ...; an epoch's last batches that
    cannot give every rank one are left out, and the next epoch starts at position 0."""
    from vaswani.data.batching import epoch_order

    while True:
        batches = plan.batches(epoch)
        if len(batches) < world:
            raise DataError(f"an epoch has {len(batches)} batches, fewer than the {world} processes; lower "
                            "data.max_tokens or use fewer processes")
        order = epoch_order(len(batches), seed, epoch)
        positions = list(range(position, len(batches) - world + 1, world))
        numbers = [order[p + rank] for p in positions]
        dataset = EpochBatches(data, batches, numbers, epoch, seed, config)
        if positions:
            loader = torch.utils.data.DataLoader(
                dataset, batch_size=None, shuffle=False, num_workers=workers, pin_memory=device.type == "cuda",
                prefetch_factor=4 if workers else None,
                generator=torch.Generator().manual_seed(seed))  # never draws from the global RNG (dropout's)
            for p, batch in zip(positions, loader, strict=True):
                yield epoch, p + world, batch
        epoch, position = epoch + 1, 0


def write_report(data: store.PreparedData, model_dir: Path) -> None:
    (model_dir / "data_report.json").write_text(json.dumps(data.manifest["report"], indent=2) + "\n",
                                                encoding="utf-8")


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
