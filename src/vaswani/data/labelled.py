"""Labelled text (classify): TSV files of label and text (or label and a sentence pair), and each text framed as a
classifier reads it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vaswani.config import ModelConfig
from vaswani.data.corpus import DataError, decode_line, without_bom
from vaswani.data.tokenizer import Tokenizer
from vaswani.families import family
from vaswani.special import PAD_ID

Text = str | tuple[str, str]  # one text, or a sentence pair


def read_labelled(path: str | Path, invalid_utf8: str = "error") -> list[tuple[int, str, Text]]:
    """(line number, label, text) of each line of a TSV file. A header line naming a `label` column says which column
    holds the labels; without one the label comes first. Lines of two fields are label and text; lines of three,
    label and a sentence pair (text a, text b: paraphrase, entailment, question and answer), the pair's texts in
    their order. Every line must have as many fields as the first, and some text: anything else is an error naming
    the file and line, nothing is skipped."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    raw = without_bom(path.read_bytes()).split(b"\n")  # a BOM would hide the header's label column
    if raw and raw[-1] == b"":
        raw.pop()
    rows = [[decode_line(field, path, i, invalid_utf8) for field in line.split(b"\t")] for i, line in enumerate(raw, 1)]
    label_column, first = 0, 0
    if rows and "label" in [f.lower() for f in rows[0]]:
        label_column, first = [f.lower() for f in rows[0]].index("label"), 1
    width = len(rows[0]) if rows and len(rows[0]) == 3 else 2
    expected = "label and text" if width == 2 else "label, text a and text b"
    out: list[tuple[int, str, Text]] = []
    for number, fields in enumerate(rows[first:], first + 1):
        if len(fields) != width:
            raise DataError(
                f"{path}, line {number}: {len(fields)} tab-separated fields, expected {width} ({expected}, as the "
                "first line has)"
            )
        label, texts = fields[label_column], [f for i, f in enumerate(fields) if i != label_column]
        if not label or not all(texts):
            raise DataError(f"{path}, line {number}: empty {'label' if not label else 'text'}")
        out.append((number, label, texts[0] if width == 2 else (texts[0], texts[1])))
    if not out:
        raise DataError(f"{path} has no labelled lines")
    return out


def classifier_inputs(
    tokenizer: Tokenizer, texts: list[Text], model: ModelConfig, max_length: int, lowercase: bool = False
) -> list[np.ndarray]:
    """Each text as the model reads it for classification: `ids EOS` (decoder_only) or `BOS ids EOS`
    (encoder_only), with the model's special ids, cut to `max_length` tokens (keeping the last special token).
    A sentence pair is `BOS a EOS b EOS` (BERT's `[CLS] a [SEP] b [SEP]`; model.pairs), cut as transformers'
    tokenizers cut a pair (longest first: a token off the longer text until the pair fits)."""
    if any(isinstance(t, tuple) for t in texts):
        return _pair_inputs(tokenizer, texts, model, max_length, lowercase)
    out = []
    for ids in tokenizer.encode_src([t.lower() if lowercase else t for t in texts]):
        head = [model.bos_id] if family(model.type).bos_first else []
        ids = [*[*head, *ids][: max_length - 1], model.eos_id]
        out.append(np.asarray(ids, dtype=np.int64))
    return out


def _pair_inputs(
    tokenizer: Tokenizer, pairs: list[Text], model: ModelConfig, max_length: int, lowercase: bool
) -> list[np.ndarray]:
    if not model.pairs:
        raise ValueError("sentence pairs need a model that reads them: an encoder_only model with segments (BERT)")
    if not all(isinstance(p, tuple) for p in pairs):
        raise ValueError("give every input as a pair (text a, text b), or none")
    flat = [t.lower() if lowercase else t for pair in pairs for t in pair]
    encoded = tokenizer.encode_src(flat)
    out = []
    for a, b in zip(encoded[0::2], encoded[1::2], strict=True):
        a, b = list(a), list(b)
        while len(a) + len(b) > max_length - 3 and (a or b):  # [CLS] a [SEP] b [SEP]
            (a if len(a) > len(b) else b).pop()
        out.append(np.asarray([model.bos_id, *a, model.eos_id, *b, model.eos_id], dtype=np.int64))
    return out


def pad(rows: list[np.ndarray], pad_id: int = PAD_ID) -> torch.Tensor:
    """Right-padded (B, L) int64 (with the model's pad_id)."""
    out = np.full((len(rows), max(len(r) for r in rows)), pad_id, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)
