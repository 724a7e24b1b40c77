"""Labelled text (classify): TSV files of label and text, and each text framed as a classifier reads it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vaswani.config import ModelConfig
from vaswani.data.corpus import DataError, decode_line
from vaswani.data.tokenizer import Tokenizer
from vaswani.families import family
from vaswani.special import PAD_ID


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


def classifier_inputs(
    tokenizer: Tokenizer, texts: list[str], model: ModelConfig, max_length: int, lowercase: bool = False
) -> list[np.ndarray]:
    """Each text as the model reads it for classification: `ids EOS` (decoder_only) or `BOS ids EOS`
    (encoder_only), with the model's special ids, cut to `max_length` tokens (keeping the last special token)."""
    out = []
    for ids in tokenizer.encode_src([t.lower() if lowercase else t for t in texts]):
        head = [model.bos_id] if family(model.type).bos_first else []
        ids = [*[*head, *ids][: max_length - 1], model.eos_id]
        out.append(np.asarray(ids, dtype=np.int64))
    return out


def pad(rows: list[np.ndarray], pad_id: int = PAD_ID) -> torch.Tensor:
    """Right-padded (B, L) int64 (with the model's pad_id)."""
    out = np.full((len(rows), max(len(r) for r in rows)), pad_id, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)
