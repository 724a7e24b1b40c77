"""Plain text (a language model's, lm or mlm) to a prepared-data directory: the same format as parallel text
(data/store.py), with token streams instead of pairs:

    DATA_DIR/
      manifest.json      "streams": {"train": {...}, "valid": {...}} (tokens, lines and characters of each)
      tokenizer.model    a text tokenizer (exact round trip, a <mask> piece), or the model's own (imported)
      train.ids          every line's ids followed by EOS, back to back: one stream (uint16 below 65,536);
                         with a tokenizer that encodes newlines (GPT-2's), the text's ids, then EOS
      valid.ids          the held-out stream

Training reads contiguous blocks of `data.block_size` tokens at any offset (nanoGPT's data, for the
causal LM; BERT's packed sequences, for the masked LM). EOS stands for the line break, so a char
model's loss per token is its loss per character of the text.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from rich.console import Console

from vaswani.config import DataConfig
from vaswani.data import store
from vaswani.data.corpus import READ_ERRORS, DataError, decode_line, unreadable, without_bom
from vaswani.data.tokenizer import SAMPLE_SENTENCES, Tokenizer
from vaswani.special import EOS_ID

ENCODE_LINES = 50_000  # lines encoded at a time


@dataclass(frozen=True)
class PlainRecipe:
    """A language model's text as the data section names it, and the seed of the tokenizer's sample."""

    noun: ClassVar[str] = "text"  # "prepared text: DIR (...)"
    inputs_by_path: ClassVar[bool] = True  # the files themselves, in order, are part of what was prepared
    absent: ClassVar[dict] = {"eos_id": EOS_ID}  # text prepared before the EOS was recorded used vaswani's

    data: DataConfig
    seed: int
    eos_id: int = EOS_ID  # the model's EOS (an imported GPT-2's <|endoftext|>, BERT's [SEP])

    def key(self) -> dict:
        """What decides a text preparation (compared with the manifest on reuse)."""
        d = self.data
        return {
            "kind": "text",
            "tokenizer": d.tokenizer,
            "vocab_size": d.vocab_size,
            "lowercase": d.lowercase,
            "valid_fraction": None if d.valid_text else d.valid_fraction,
            "seed": self.seed,
            "invalid_utf8": d.invalid_utf8,
            "eos_id": self.eos_id,
        }

    def input_files(self) -> list[Path]:
        d = self.data
        return [Path(p) for p in (d.text or [])] + ([Path(d.valid_text)] if d.valid_text else [])

    def make(
        self,
        directory: Path,
        tokenizer: Tokenizer | None,
        workers: int,
        log: Callable[[str], None],
        console: Console | None,
    ) -> None:
        _prepare(self, directory, tokenizer, log)

    def summary(self, prepared: store.PreparedData, reused: bool) -> str:
        train, valid = prepared.manifest["streams"]["train"], prepared.manifest["streams"]["valid"]
        tokens = f"{train['tokens']:,} training tokens"
        return tokens if reused else f"{tokens} from {train['chars']:,} characters; {valid['tokens']:,} held out"


def _prepare(recipe: PlainRecipe, directory: Path, tokenizer: Tokenizer | None, log: Callable[[str], None]) -> None:
    """Write the prepared text for `recipe` (see data/prepare.py for what is checked first); `tokenizer`: use
    this one instead of training one. The text is read whole and encoded in this process."""
    data = recipe.data
    train_text, valid_text = split_text(data)
    train_lines, valid_lines = _lines(train_text), _lines(valid_text)
    with store.building(directory) as partial:
        if tokenizer is None:
            log(
                f"training a {data.tokenizer} text tokenizer ({data.vocab_size} pieces) on up to "
                f"{SAMPLE_SENTENCES:,} lines"
            )
            lines = (line.lower() if data.lowercase else line for line in train_lines)
            tokenizer = Tokenizer.train(
                lines, [], data.vocab_size, data.tokenizer, True, partial, recipe.seed, text=True
            )
        else:
            tokenizer.save(partial)
        files, streams = {}, {}
        for name, lines, text in (("train", train_lines, train_text), ("valid", valid_lines, valid_text)):
            ids = encode_stream(tokenizer, lines, data.lowercase, recipe.eos_id)
            if ids.size < data.block_size + 1:
                which = "training" if name == "train" else "held-out"
                raise DataError(
                    f"the {which} text has {ids.size} tokens, fewer than data.block_size + 1 "
                    f"({data.block_size + 1}); give more text, a larger data.valid_fraction or a "
                    "smaller data.block_size"
                )
            files.update(store.write_array(partial, f"{name}.ids", ids))
            streams[name] = {"tokens": int(ids.size), "lines": len(lines), "chars": len(text)}
        store.write_manifest(
            partial,
            {
                "recipe": recipe.key(),
                "inputs": [store.describe_input(p) for p in recipe.input_files()],
                "files": files,
                "splits": [],
                "streams": streams,
                "corpora": [],
                "report": {},
                "tokenizer": {n: store.file_sha256(partial / n) for n in tokenizer.file_names},
            },
        )


def _read_text(path: Path, invalid_utf8: str) -> str:
    """A whole text file (plain or .gz), lines kept exactly as they are (a char model learns indentation too);
    invalid UTF-8 is an error naming the line, or (invalid_utf8: replace) U+FFFD; CR is dropped, NUL and the
    Unicode line separators become spaces."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        raw = without_bom(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    except READ_ERRORS as error:
        raise unreadable(path, error) from None
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


def encode_stream(tokenizer: Tokenizer, lines: list[str], lowercase: bool = False, eos_id: int = EOS_ID) -> np.ndarray:
    """Each line's ids then EOS, concatenated; where newlines are text to the tokenizer (an imported GPT-2's),
    the lines as one text, newlines encoded as such, then one EOS (the text is one document).
    Shape: -> (tokens,)"""
    dtype = store.id_dtype(tokenizer.src_vocab_size)
    parts = []
    for start in range(0, len(lines), ENCODE_LINES):
        chunk = [line.lower() if lowercase else line for line in lines[start : start + ENCODE_LINES]]
        if tokenizer.text_newlines:  # chunks end at a line's end (a run of whitespace across one may split otherwise)
            parts.append(np.asarray(tokenizer.encode_src(["".join(line + "\n" for line in chunk)])[0], dtype=dtype))
            continue
        for ids in tokenizer.encode_src(chunk):
            parts.append(np.asarray([*ids, eos_id], dtype=dtype))
    if tokenizer.text_newlines:
        parts.append(np.asarray([eos_id], dtype=dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
