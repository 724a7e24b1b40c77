"""The training data of a run: raw text to tokenized, filtered pairs and their batches, reported."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from vaswani.config import DataConfig
from vaswani.data.batching import token_batches
from vaswani.data.corpus import DataError, FilterReport, filter_pairs, read_parallel
from vaswani.data.tokenizer import Tokenizer
from vaswani.data.toy import toy_pairs

IdPair = tuple[list[int], list[int]]


@dataclass
class RunData:
    tokenizer: Tokenizer
    train: list[IdPair]
    train_batches: list[list[int]]
    valid: list[IdPair]
    valid_text: list[tuple[str, str]]
    report: FilterReport
    train_text: list[tuple[str, str]] = field(default_factory=list)  # the text of `train`, pair for pair


def epoch_data(data: RunData, config: DataConfig, seed: int, epoch: int) -> tuple[list[IdPair], list[list[int]]]:
    """The training pairs and batches of one epoch: `data.train` and its batches, or, with subword
    sampling on (data.src_sampling_alpha / tgt_sampling_alpha), the same pairs freshly segmented and
    batched, a function of (seed, epoch) only, so that a resumed run and every rank see the same.
    A sampled side longer than data.max_len keeps its deterministic ids."""
    src_alpha, tgt_alpha = config.src_sampling_alpha, config.tgt_sampling_alpha
    if not (src_alpha or tgt_alpha):
        return data.train, data.train_batches
    epoch_seed = (seed * 1_000_003 + epoch) % 2**31
    src_text, tgt_text = zip(*data.train_text, strict=True)
    src = data.tokenizer.encode_src(src_text, src_alpha, epoch_seed) if src_alpha else [s for s, _ in data.train]
    tgt = data.tokenizer.encode_tgt(tgt_text, tgt_alpha, epoch_seed + 1) if tgt_alpha else [t for _, t in data.train]
    pairs = [(s if len(s) <= config.max_len else fixed[0], t if len(t) <= config.max_len else fixed[1])
             for s, t, fixed in zip(src, tgt, data.train, strict=True)]
    return pairs, token_batches([(len(s), len(t)) for s, t in pairs], config.max_tokens, epoch_seed)


def read_text(data: DataConfig, seed: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, valid) raw text pairs, from files or a generated toy task."""
    if data.toy_task:
        train = toy_pairs(data.toy_task, data.toy_train_size, data.toy_max_len, seed)
        valid = toy_pairs(data.toy_task, data.toy_valid_size, data.toy_max_len, seed + 1)
        return train, valid
    train = read_parallel(data.train_src, data.train_tgt, data.invalid_utf8)
    valid = read_parallel(data.valid_src, data.valid_tgt, data.invalid_utf8) if data.valid_src else []
    if data.lowercase:
        train, valid = ([(s.lower(), t.lower()) for s, t in pairs] for pairs in (train, valid))
    return train, valid


def prepare(data: DataConfig, joint: bool, model_dir: Path, seed: int, log, write: bool = True) -> RunData:
    """Read, train or load the tokenizer, tokenize, filter (reported and saved), batch.

    `write=False` (DDP ranks other than 0) only reads: the tokenizer must already be in model_dir.
    """
    train_text, valid_text = read_text(data, seed)
    usable = [(s, t) for s, t in train_text if s and t]  # pairs with an empty side are filtered out below
    if not usable:
        raise DataError(f"no training pairs left after filtering: all {len(train_text)} have an empty source or "
                        "target; check the files")
    if (model_dir / Tokenizer.files(joint)[0]).is_file():
        tokenizer = Tokenizer.load(model_dir)
    else:
        log(f"training a {data.tokenizer} tokenizer ({data.vocab_size} pieces, {'joint' if joint else 'separate'})")
        tokenizer = Tokenizer.train([s for s, _ in usable], [t for _, t in usable], data.vocab_size,
                                    data.tokenizer, joint, model_dir)
    train = list(zip(tokenizer.encode_src([s for s, _ in train_text]),
                     tokenizer.encode_tgt([t for _, t in train_text]), strict=True))
    keep, report = filter_pairs(train, data.max_len, data.max_len_ratio)
    train, train_text = [train[i] for i in keep], [train_text[i] for i in keep]
    if write:
        (model_dir / "data_report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    for line in report.lines():
        log(f"training data: {line}")
    if not train:
        raise DataError("no training pairs left after filtering; check the files, data.max_len and data.max_len_ratio")
    valid_text = [(s, t) for s, t in valid_text if s and t]
    valid = list(zip(tokenizer.encode_src([s for s, _ in valid_text]),
                     tokenizer.encode_tgt([t for _, t in valid_text]), strict=True))
    valid = [(s[: data.max_len], t[: data.max_len]) for s, t in valid]
    batches = token_batches([(len(s), len(t)) for s, t in train], data.max_tokens, seed)
    return RunData(tokenizer, train, batches, valid, valid_text, report, train_text)
