"""Plain text for language models and labelled text for classifiers.

A language model's text is prepared once into the same prepared-data directory format as parallel text
(data/store.py), with token streams instead of pairs:

    DATA_DIR/
      manifest.json      "streams": {"train": {...}, "valid": {...}} (tokens, lines and characters of each)
      tokenizer.model    a text tokenizer (exact round trip, a <mask> piece)
      train.ids          every line's ids followed by EOS, back to back: one stream (uint16 below 65,536)
      valid.ids          the held-out stream

Training reads contiguous blocks of `data.block_size` tokens at any offset (nanoGPT's data, for the
causal LM; BERT's packed sequences, for the masked LM). EOS stands for the line break, so a char
model's loss per token is its loss per character of the text.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from vaswani.config import DataConfig, ModelConfig
from vaswani.data import store
from vaswani.data.corpus import DataError, decode_line
from vaswani.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SAMPLE_SENTENCES, Tokenizer

ENCODE_LINES = 50_000  # lines encoded at a time
FIRST_REGULAR = 5  # a text tokenizer's ids: PAD 0, BOS 1, EOS 2, UNK 3, <mask> 4, then the text's pieces


def _read_text(path: Path, invalid_utf8: str) -> str:
    """A whole text file (plain or .gz), lines kept exactly as they are (a char model learns indentation too);
    invalid UTF-8 is an error naming the line, or (invalid_utf8: replace) U+FFFD; CR is dropped, NUL and the
    Unicode line separators become spaces."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as error:
        raise DataError(f"{path}: cannot read ({error})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        if invalid_utf8 == "error":
            for number, line in enumerate(raw.split(b"\n"), 1):
                decode_line(line, path, number, invalid_utf8)  # raises, naming the first bad line
        text = raw.decode("utf-8", errors="replace")
    if not text.strip():
        raise DataError(f"{path} holds no text; a language model needs some to learn from")
    for char in ("\x00", "\r", "\u2028", "\u2029"):
        text = text.replace(char, " " if char != "\r" else "")
    return text


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def split_text(data: DataConfig) -> tuple[str, str]:
    """(training text, held-out text): data.valid_text, or the last data.valid_fraction of the text's
    characters (nanoGPT's split of tinyshakespeare: the first 90% train, the rest validate)."""
    if not data.text:
        raise DataError("data.text must name the training text (a file or a list of files)")
    text = "".join(_with_newline(_read_text(Path(p), data.invalid_utf8)) for p in data.text)
    if data.valid_text:
        return text, _read_text(Path(data.valid_text), data.invalid_utf8)
    cut = int(len(text) * (1 - data.valid_fraction))
    return text[:cut], text[cut:]


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def encode_stream(tokenizer: Tokenizer, lines: list[str], lowercase: bool = False) -> np.ndarray:
    """Each line's ids then EOS, concatenated. Shape: -> (tokens,)"""
    dtype = store.id_dtype(tokenizer.src_vocab_size)
    parts = []
    for start in range(0, len(lines), ENCODE_LINES):
        chunk = lines[start:start + ENCODE_LINES]
        for ids in tokenizer.encode_src([line.lower() if lowercase else line for line in chunk]):
            parts.append(np.asarray([*ids, EOS_ID], dtype=dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def text_recipe(data: DataConfig, seed: int) -> dict:
    """What decides a text preparation (compared with the manifest on reuse)."""
    return {"kind": "text", "tokenizer": data.tokenizer, "vocab_size": data.vocab_size, "lowercase": data.lowercase,
            "valid_fraction": None if data.valid_text else data.valid_fraction, "seed": seed,
            "invalid_utf8": data.invalid_utf8}


def text_inputs(data: DataConfig) -> list[Path]:
    return [Path(p) for p in (data.text or [])] + ([Path(data.valid_text)] if data.valid_text else [])


def prepare_text(data: DataConfig, directory: Path, seed: int, tokenizer: Tokenizer | None = None,
                 log: Callable[[str], None] = lambda _: None) -> store.PreparedData:
    """Make (or, when its manifest matches, reuse) the prepared text in `directory`."""
    recipe, inputs = text_recipe(data, seed), text_inputs(data)
    if (directory / store.MANIFEST).is_file():
        manifest = store.read_manifest(directory)
        _check(manifest, recipe, inputs, directory)
        prepared = store.PreparedData.open(directory)
        log(f"prepared text: {directory} (reused; {prepared.manifest['streams']['train']['tokens']:,} training tokens)")
        return prepared
    store.check_unprepared(directory)
    train_text, valid_text = split_text(data)
    train_lines, valid_lines = _lines(train_text), _lines(valid_text)
    with store.building(directory) as partial:
        if tokenizer is None:
            log(f"training a {data.tokenizer} text tokenizer ({data.vocab_size} pieces) on up to "
                f"{SAMPLE_SENTENCES:,} lines")
            lines = (line.lower() if data.lowercase else line for line in train_lines)
            tokenizer = Tokenizer.train(lines, [], data.vocab_size, data.tokenizer, True, partial, seed, text=True)
        else:
            tokenizer.save(partial)
        files, streams = {}, {}
        for name, lines, text in (("train", train_lines, train_text), ("valid", valid_lines, valid_text)):
            ids = encode_stream(tokenizer, lines, data.lowercase)
            if ids.size < data.block_size + 1:
                which = "training" if name == "train" else "held-out"
                raise DataError(f"the {which} text has {ids.size} tokens, fewer than data.block_size + 1 "
                                f"({data.block_size + 1}); give more text, a larger data.valid_fraction or a "
                                "smaller data.block_size")
            files.update(store.write_array(partial, f"{name}.ids", ids))
            streams[name] = {"tokens": int(ids.size), "lines": len(lines), "chars": len(text)}
        store.write_manifest(partial, {
            "recipe": recipe, "inputs": [store.describe_input(p) for p in inputs], "files": files, "splits": [],
            "streams": streams, "corpora": [], "report": {},
            "tokenizer": {n: store.file_sha256(partial / n) for n in Tokenizer.files(True)}})
    prepared = store.PreparedData.open(directory, verify=False)
    s = prepared.manifest["streams"]
    log(f"prepared text: {directory} ({s['train']['tokens']:,} training tokens from {s['train']['chars']:,} "
        f"characters; {s['valid']['tokens']:,} held out)")
    return prepared


def _check(manifest: dict, recipe: dict, inputs: list[Path], directory: Path) -> None:
    fix = f"delete {directory} or prepare into another directory (data.prepared)"
    made = manifest.get("recipe", {})
    for key, value in recipe.items():
        if made.get(key) != value:
            raise DataError(f"{directory} was prepared with {key}={made.get(key)!r}, this run asks for "
                            f"{value!r}; {fix}")
    if [str(p) for p in inputs] != [entry["path"] for entry in manifest["inputs"]]:
        raise DataError(f"{directory} was prepared from other files; {fix}")
    for path, entry in zip(inputs, manifest["inputs"], strict=True):
        if not path.is_file():
            raise DataError(f"{path}: file not found")
        stat = path.stat()
        if stat.st_size != entry["bytes"] or (stat.st_mtime_ns != entry["mtime_ns"]
                                              and store.file_sha256(path) != entry["sha256"]):
            raise DataError(f"{path} has changed since {directory} was prepared from it; {fix}")


def read_labelled(path: str | Path, invalid_utf8: str = "error") -> list[tuple[int, str, str]]:
    """(line number, label, text) of each line of a TSV file. A header line naming a `label` column says which column
    holds the labels; without one the label comes first. Every line must have exactly two fields and
    some text: anything else is an error naming the file and line, nothing is skipped."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    raw = path.read_bytes().split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    rows = [[decode_line(field, path, i, invalid_utf8) for field in line.split(b"\t")] for i, line in enumerate(raw, 1)]
    label_column, first = 0, 0
    if rows and "label" in [f.lower() for f in rows[0]]:
        label_column, first = [f.lower() for f in rows[0]].index("label"), 1
    out = []
    for number, fields in enumerate(rows[first:], first + 1):
        if len(fields) != 2:
            raise DataError(f"{path}, line {number}: {len(fields)} tab-separated fields, expected 2 (label and text)")
        label, text = fields[label_column], fields[1 - label_column]
        if not label or not text:
            raise DataError(f"{path}, line {number}: empty {'label' if not label else 'text'}")
        out.append((number, label, text))
    if not out:
        raise DataError(f"{path} has no labelled lines")
    return out



def mask_tokens(ids: np.ndarray, rng: np.random.Generator, mask_id: int, vocab_size: int, prob: float = 0.15,
                first_regular: int = FIRST_REGULAR) -> tuple[np.ndarray, np.ndarray, int]:
    """BERT's masking (Devlin et al. 2019, §3.1): each regular token is chosen with probability `prob`; a
    chosen token becomes <mask> 80% of the time, a random regular token 10%, and stays itself 10%.
    Special tokens (ids below `first_regular`: PAD, BOS, EOS, UNK, <mask>) are never chosen. At least
    one token per batch is chosen, so every batch has something to predict.

    Shape: ids (B, T) -> inputs (B, T), targets (B, T) (the original at chosen positions, PAD elsewhere), count
    """
    regular = ids >= first_regular
    chosen = (rng.random(ids.shape) < prob) & regular
    if not chosen.any() and regular.any():
        flat = np.flatnonzero(regular)
        chosen.flat[flat[rng.integers(len(flat))]] = True
    action = rng.random(ids.shape)
    inputs = ids.copy()
    inputs[chosen & (action < 0.8)] = mask_id
    random_ones = chosen & (action >= 0.8) & (action < 0.9)
    inputs[random_ones] = rng.integers(first_regular, vocab_size, size=int(random_ones.sum()))
    targets = np.where(chosen, ids, PAD_ID)
    return inputs, targets, int(chosen.sum())


def classifier_inputs(tokenizer: Tokenizer, texts: list[str], model: ModelConfig, max_length: int,
                 lowercase: bool = False) -> list[np.ndarray]:
    """Each text as the model reads it for classification: `ids EOS` (decoder_only) or `BOS ids EOS`
    (encoder_only), cut to `max_length` tokens (keeping the last special token)."""
    out = []
    for ids in tokenizer.encode_src([t.lower() if lowercase else t for t in texts]):
        head = [BOS_ID] if model.type == "encoder_only" else []
        ids = [*[*head, *ids][: max_length - 1], EOS_ID]
        out.append(np.asarray(ids, dtype=np.int64))
    return out


def pad(rows: list[np.ndarray]) -> torch.Tensor:
    """Right-padded (B, L) int64."""
    out = np.full((len(rows), max(len(r) for r in rows)), PAD_ID, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)
