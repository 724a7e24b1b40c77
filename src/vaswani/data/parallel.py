"""Parallel text (translation) to a prepared-data directory: the tokenizer learns from SentencePiece's own
sample of the lines, then every corpus is streamed through it (data/streaming.py) into the pair arrays.

    raw text ──stream──► tokenizer (N workers) ──► DATA_DIR/{*.bin, *.idx, *.len, report.json, manifest.json}
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from rich.console import Console

from vaswani.config import DataConfig
from vaswani.console import progress_bar
from vaswani.data import store
from vaswani.data.corpus import DataError, FilterReport, decode_lines, filter_pairs
from vaswani.data.streaming import in_order, raw_chunks, text_chunks
from vaswani.data.tokenizer import SAMPLE_SENTENCES, Tokenizer
from vaswani.data.toy import toy_pairs

CHUNK_PAIRS = 4096  # pairs per job sent to a worker


@dataclass(frozen=True)
class Corpus:
    """One training corpus: parallel files, and how often its pairs are sampled (1.0: once per epoch)."""

    name: str
    src: str
    tgt: str
    weight: float = 1.0


@dataclass(frozen=True)
class ParallelRecipe:
    """Everything that decides the prepared arrays (a corpus's weight does not: it acts when batching)."""

    noun: ClassVar[str] = "data"  # "prepared data: DIR (...)"
    inputs_by_path: ClassVar[bool] = False  # corpora are known by name and content: moved files still match
    absent: ClassVar[dict] = {"languages": None}  # prepared before a many-to-many pair could be asked for

    corpora: tuple[Corpus, ...] = ()
    valid: tuple[str, str] | None = None
    toy: dict | None = None  # generated pairs instead of files: {"train": [...], "valid": [...], settings}
    tokenizer: str = "bpe"
    vocab_size: int = 8000
    joint: bool = True
    max_len: int = 256
    max_len_ratio: float = 4.0
    lowercase: bool = False
    invalid_utf8: str = "error"
    keep_text: bool = False  # store the training text too (subword sampling segments it per batch)
    languages: tuple[str, str] | None = None  # a many-to-many model's pair: its codes start each side's ids

    @classmethod
    def from_config(cls, data: DataConfig, joint: bool, seed: int) -> ParallelRecipe:
        """The data section as the preparation needs it (a toy task's pairs generated here)."""
        toy = None
        if data.toy_task:
            toy = {
                "task": data.toy_task,
                "max_len": data.toy_max_len,
                "seed": seed,
                "train": toy_pairs(data.toy_task, data.toy_train_size, data.toy_max_len, seed),
                "valid": toy_pairs(data.toy_task, data.toy_valid_size, data.toy_max_len, seed + 1),
            }
        corpora = () if toy else tuple(Corpus(**c) for c in data.training_corpora())
        valid = (data.valid_src, data.valid_tgt) if data.valid_src and not toy else None
        return cls(
            corpora=corpora,
            valid=valid,
            toy=toy,
            tokenizer=data.tokenizer,
            vocab_size=data.vocab_size,
            joint=joint,
            max_len=data.max_len,
            max_len_ratio=data.max_len_ratio,
            lowercase=data.lowercase,
            invalid_utf8=data.invalid_utf8,
            keep_text=bool(data.src_sampling_alpha or data.tgt_sampling_alpha),
            languages=(data.source_language, data.target_language) if data.source_language else None,
        )

    def key(self) -> dict:
        """The settings compared with a manifest: the corpora by name and content, not by path."""
        values = asdict(self)
        values["corpora"] = [c.name for c in self.corpora]
        values["valid"] = self.valid is not None
        values["toy"] = {k: v for k, v in (self.toy or {}).items() if k not in ("train", "valid")} or None
        values["languages"] = None if self.languages is None else list(self.languages)  # as JSON holds it
        return values

    def input_files(self) -> list[Path]:
        files = [Path(p) for c in self.corpora for p in (c.src, c.tgt)]
        return files + ([Path(p) for p in self.valid] if self.valid else [])

    def make(
        self,
        directory: Path,
        tokenizer: Tokenizer | None,
        workers: int,
        log: Callable[[str], None],
        console: Console | None,
    ) -> None:
        _prepare(self, directory, tokenizer, workers, log, console)

    def summary(self, prepared: store.PreparedData, reused: bool) -> str:
        return f"{len(prepared.train):,} training pairs"


# -- the work of one chunk (in a worker process) ------------------------------------------------
_WORKER: dict = {}


def _init_worker(directory: Path, recipe: ParallelRecipe) -> None:
    """A worker's tokenizer: the one saved in the directory being prepared (any layout Tokenizer.load reads)."""
    _WORKER.update(tokenizer=Tokenizer.load(directory), recipe=recipe)


def _flat(ids: list[list[int]], dtype) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
    return flat, lengths


def _with_codes(tokenizer: Tokenizer, recipe: ParallelRecipe, src: list, tgt: list) -> tuple[list, list]:
    """The ids of both sides with a many-to-many pair's language codes (recipe.languages), as the model reads a
    source (its code first, or after its end: data/languages.py) and writes a target (its code first); as they are
    otherwise."""
    if recipe.languages is None:
        return src, tgt
    if tokenizer.languages is None:
        raise DataError(
            "data.source_language and data.target_language are for fine-tuning a many-to-many model (NLLB-200, "
            "M2M-100, mBART-50), whose tokenizer has language codes: leave them out"
        )
    languages = tokenizer.languages
    source, target = languages.id(recipe.languages[0], "source"), languages.id(recipe.languages[1], "target")
    return [languages.coded(ids, source) for ids in src], [[target, *ids] if ids else [] for ids in tgt]


def _encode_chunk(job: tuple) -> dict:
    """Decode, normalise, encode and filter one chunk; returns arrays of the kept pairs, in order."""
    split, paths, first, raw_src, raw_tgt = job
    tokenizer, r = _WORKER["tokenizer"], _WORKER["recipe"]
    src_text, tgt_text = (
        decode_lines(raw, path, first, r.invalid_utf8, r.lowercase)
        for path, raw in zip(paths, (raw_src, raw_tgt), strict=True)
    )
    if split == "valid":  # the dev set: pairs with an empty side removed, the rest cut to max_len, as before
        kept = [i for i, (s, t) in enumerate(zip(src_text, tgt_text, strict=True)) if s and t]
        src = tokenizer.encode_src([src_text[i] for i in kept])
        src, tgt = _with_codes(tokenizer, r, src, tokenizer.encode_tgt([tgt_text[i] for i in kept]))
        src, tgt = [tokenizer.cut_source(ids, r.max_len) for ids in src], [ids[: r.max_len] for ids in tgt]
        report = FilterReport(total=len(src_text), kept=len(kept))
        if len(kept) < len(src_text):
            report.removed["empty source or target"] = len(src_text) - len(kept)
    else:
        src, tgt = _with_codes(tokenizer, r, tokenizer.encode_src(src_text), tokenizer.encode_tgt(tgt_text))
        kept, report = filter_pairs(list(zip(src, tgt, strict=True)), r.max_len, r.max_len_ratio)
        src, tgt = [src[i] for i in kept], [tgt[i] for i in kept]
    dtype = store.id_dtype(max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size))
    out = {"src": _flat(src, dtype), "tgt": _flat(tgt, dtype), "total": report.total, "removed": report.removed}
    if split == "valid" or r.keep_text:
        for name, lines in (("src.txt", src_text), ("tgt.txt", tgt_text)):
            encoded = [lines[i].encode() for i in kept]
            out[name] = (
                np.frombuffer(b"".join(encoded), dtype=np.uint8),
                np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)),
            )
    return out


def _training_text(recipe: ParallelRecipe, side: int) -> Iterator[str]:
    """One side of the training pairs whose both sides are non-empty, streamed (for the tokenizer)."""
    if recipe.toy is not None:
        yield from (pair[side] for pair in recipe.toy["train"] if pair[0] and pair[1])
        return
    for corpus in recipe.corpora:
        for first, src, tgt in raw_chunks(Path(corpus.src), Path(corpus.tgt), CHUNK_PAIRS):
            src_text, tgt_text = (
                decode_lines(raw, path, first, recipe.invalid_utf8, recipe.lowercase)
                for path, raw in ((corpus.src, src), (corpus.tgt, tgt))
            )
            yield from ((s, t)[side] for s, t in zip(src_text, tgt_text, strict=True) if s and t)


class _SplitWriter:
    """The arrays of one split, appended chunk by chunk (several corpora append to the training split)."""

    def __init__(self, directory: Path, split: str, dtype, text: bool) -> None:
        self.directory, self.split = directory, split
        self.names = ["src", "tgt"] + (["src.txt", "tgt.txt"] if text else [])
        self.writers = {
            name: store.RaggedWriter(directory, f"{split}.{name}", np.uint8 if "txt" in name else dtype)
            for name in self.names
        }
        self.lengths: list[np.ndarray] = []
        self.count = 0

    def add(self, results: Iterator[dict]) -> FilterReport:
        report = FilterReport()
        for result in results:
            for name in self.names:
                self.writers[name].append(*result[name])
            self.lengths.append(np.stack([result["src"][1], result["tgt"][1]], axis=1).astype(np.uint32))
            report.total += result["total"]
            report.removed.update(result["removed"])
            report.kept += len(result["src"][1])
        self.count += report.kept
        return report

    def close(self) -> dict[str, dict]:
        files = {k: v for writer in self.writers.values() for k, v in writer.close().items()}
        lengths = np.concatenate(self.lengths, axis=0) if self.lengths else np.zeros((0, 2), dtype=np.uint32)
        small = np.uint16 if lengths.size == 0 or lengths.max() < 2**16 else np.uint32
        files.update(store.write_array(self.directory, f"{self.split}.len", lengths.astype(small)))
        return files


def _corpus_jobs(recipe: ParallelRecipe, advance: Callable[[int], None]) -> Iterator[tuple[str, Iterator[tuple]]]:
    """(corpus name, its jobs for the workers) for each training corpus."""
    if recipe.toy is not None:
        yield "toy", (("train", ("toy", "toy"), *c) for c in text_chunks(recipe.toy["train"], CHUNK_PAIRS))
        return
    for corpus in recipe.corpora:
        paths = (corpus.src, corpus.tgt)
        chunks = raw_chunks(Path(corpus.src), Path(corpus.tgt), CHUNK_PAIRS, advance)
        yield corpus.name, (("train", paths, *c) for c in chunks)


def _valid_jobs(recipe: ParallelRecipe) -> Iterator[tuple]:
    if recipe.toy is not None:
        return (("valid", ("toy", "toy"), *c) for c in text_chunks(recipe.toy["valid"], CHUNK_PAIRS))
    src, tgt = recipe.valid
    return (("valid", (src, tgt), *c) for c in raw_chunks(Path(src), Path(tgt), CHUNK_PAIRS))


def _prepare(
    recipe: ParallelRecipe,
    directory: Path,
    tokenizer: Tokenizer | None,
    workers: int,
    log: Callable[[str], None],
    console: Console | None,
) -> None:
    """Write the prepared-data directory for `recipe` (see data/prepare.py for what is checked first).
    `tokenizer`: use this one instead of training one. Encoding shows its progress over the bytes read."""
    inputs = [store.describe_input(p) for p in recipe.input_files()]
    with store.building(directory) as partial:
        tokenizer = _tokenizer(recipe, tokenizer, partial, log)
        dtype = store.id_dtype(max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size))
        log(f"encoding with {workers} worker process{'es' if workers > 1 else ''}")
        total_bytes = sum(path.stat().st_size for c in recipe.corpora for path in (Path(c.src), Path(c.tgt)))
        train = _SplitWriter(partial, "train", dtype, recipe.keep_text)
        corpora, reports = [], {}
        with progress_bar(
            console, "encoding", total_bytes, enabled=console is not None and total_bytes > 0, in_bytes=True
        ) as advance:
            for name, jobs in _corpus_jobs(recipe, advance):
                first = train.count
                reports[name] = train.add(in_order(jobs, workers, _encode_chunk, _init_worker, (partial, recipe)))
                corpora.append({"name": name, "first": first, "end": train.count})
                log(f"{name}: {reports[name].lines()[0]}")
        files = train.close()
        if train.count == 0:
            raise DataError(_nothing_kept(recipe, _report(reports)))
        splits = ["train"]
        report = _report(reports)
        if recipe.valid is not None or (recipe.toy is not None and recipe.toy.get("valid")):
            report["valid"] = _valid_split(recipe, partial, dtype, files, log)
            splits.append("valid")
        (partial / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        store.write_manifest(
            partial,
            {
                "vaswani": _version(),
                "recipe": recipe.key(),
                "inputs": inputs,
                "tokenizer": {name: store.file_sha256(partial / name) for name in tokenizer.file_names},
                "files": files,
                "splits": splits,
                "corpora": corpora,
                "report": report,
            },
        )


def _valid_split(recipe: ParallelRecipe, partial: Path, dtype, files: dict, log: Callable[[str], None]) -> dict:
    """The dev set's arrays written into `partial` (their entries added to `files`); its report, the pairs removed
    for an empty side counted too: nothing leaves the dev set unsaid."""
    valid = _SplitWriter(partial, "valid", dtype, text=True)
    report = valid.add(in_order(_valid_jobs(recipe), 1, _encode_chunk, _init_worker, (partial, recipe)))
    files.update(valid.close())
    log(f"valid: {report.lines()[0]}")
    return report.to_dict()


def _tokenizer(recipe: ParallelRecipe, tokenizer: Tokenizer | None, partial: Path, log) -> Tokenizer:
    """The tokenizer given, saved into `partial`, or one trained there on a sample of the recipe's text."""
    if tokenizer is not None:
        tokenizer.save(partial)
        return tokenizer
    log(
        f"training a {recipe.tokenizer} tokenizer ({recipe.vocab_size} pieces, "
        f"{'joint' if recipe.joint else 'separate'}) on a sample of up to {SAMPLE_SENTENCES:,} lines"
    )
    return Tokenizer.train(
        _training_text(recipe, 0), _training_text(recipe, 1), recipe.vocab_size, recipe.tokenizer, recipe.joint, partial
    )


def _nothing_kept(recipe: ParallelRecipe, report: dict) -> str:
    """Why no pair is left to train on: the files read, how many pairs they held, why each was removed."""
    files = ", ".join(f"{c.src} and {c.tgt}" for c in recipe.corpora) or "the toy task's pairs"
    removed = ", ".join(f"{n:,} {reason}" for reason, n in sorted(report["removed"].items())) or "none"
    return (
        f"no training pairs left after filtering {files} ({report['total']:,} read; removed: {removed}); check the "
        "files, data.max_len and data.max_len_ratio"
    )


def _report(reports: dict[str, FilterReport]) -> dict:
    """report.json: the corpora's filter reports summed, and each corpus's."""
    total = FilterReport()
    for r in reports.values():
        total.total, total.kept = total.total + r.total, total.kept + r.kept
        total.removed.update(r.removed)
    return {**total.to_dict(), "corpora": {name: r.to_dict() for name, r in reports.items()}}


def _version() -> str:
    from vaswani import __version__

    return __version__
