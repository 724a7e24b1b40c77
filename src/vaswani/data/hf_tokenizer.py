"""Hugging Face tokenizers (imported models: GPT-2's byte-level BPE, BERT's WordPiece), answering as a
SentencePiece processor does.

A model directory holds tokenizer.json (the `tokenizers` library's own file, as save_pretrained writes it), or
GPT-2's older pair vocab.json + merges.txt, from which the byte-level BPE is built as GPT2TokenizerFast builds
it. As Hugging Face's tokenizers called with add_special_tokens=False and skip_special_tokens=True: encoding
adds no special tokens (one written in the text, such as <|endoftext|>, is still that token) and decoding
leaves them out. tokenizer_config.json, where present, says whether decoding cleans up spaces before
punctuation (BERT's `clean_up_tokenization_spaces`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer as _Tokenizer
from tokenizers import decoders, models, pre_tokenizers, processors

from vaswani.data.corpus import DataError

TOKENIZER_JSON = "tokenizer.json"
BPE_FILES = ("vocab.json", "merges.txt")  # GPT-2's byte-level BPE without tokenizer.json
TOKENIZER_CONFIG = "tokenizer_config.json"  # optional; read for clean_up_tokenization_spaces
_GPT2_SPECIAL = "<|endoftext|>"

# transformers' clean_up_tokenization: the spaces WordPiece decoding leaves before punctuation and contractions
_CLEANUP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def holds_hf_tokenizer(directory: Path) -> bool:
    """`directory` holds a tokenizer this module reads (tokenizer.json, or GPT-2's vocab.json + merges.txt)."""
    return (directory / TOKENIZER_JSON).is_file() or (directory / BPE_FILES[1]).is_file()


class HfPieces:
    """A `tokenizers` tokenizer answering what vaswani asks of a SentencePieceProcessor (encode, decode,
    id_to_piece, piece_to_id, get_piece_size, unk_id). `file_names`: the files it was read from, which
    `save` copies."""

    def __init__(
        self,
        tokenizer: _Tokenizer,
        directory: Path,
        file_names: list[str],
        cleanup: bool = False,
        mask_piece: str | None = None,
    ) -> None:
        self.tokenizer, self.directory, self.file_names, self.cleanup = tokenizer, directory, file_names, cleanup
        # the masked LM's mask token (BERT's [MASK]): tokenizer_config.json's mask_token, else None
        self.mask_piece = mask_piece
        unk = getattr(tokenizer.model, "unk_token", None)
        unk_id = tokenizer.token_to_id(unk) if unk else None
        self._unk = -1 if unk_id is None else unk_id  # byte-level BPE has no unknown piece: -1, no id
        self.text_newlines = self._round_trips("\n")

    @classmethod
    def load(cls, directory: str | Path) -> HfPieces:
        directory = Path(directory)
        names = [TOKENIZER_JSON] if (directory / TOKENIZER_JSON).is_file() else list(BPE_FILES)
        for name in names:
            if not (directory / name).is_file():
                raise DataError(
                    f"{directory / name} not found: a tokenizer needs {TOKENIZER_JSON}, or {' and '.join(BPE_FILES)}"
                )
        try:
            tokenizer = (
                _Tokenizer.from_file(str(directory / names[0])) if len(names) == 1 else _byte_level_bpe(directory)
            )
        except BaseException as error:  # tokenizers raises a bare Exception for a malformed file, or panics
            if not isinstance(error, Exception) and type(error).__name__ != "PanicException":  # pyo3's: no Exception
                raise
            raise DataError(
                f"{directory / names[0]} is not a tokenizer the tokenizers library reads ({error})"
            ) from None
        tokenizer.no_padding()  # a saved tokenizer.json may pad or cut every batch (NLLB's does): ids are per text
        tokenizer.no_truncation()
        cleanup, mask = False, None
        if (directory / TOKENIZER_CONFIG).is_file():
            names.append(TOKENIZER_CONFIG)
            try:
                settings = json.loads((directory / TOKENIZER_CONFIG).read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise DataError(f"{directory / TOKENIZER_CONFIG} is not valid JSON ({error})") from None
            if not isinstance(settings, dict):
                raise DataError(f"{directory / TOKENIZER_CONFIG} holds no JSON object; write one or remove the file")
            cleanup = bool(settings.get("clean_up_tokenization_spaces", False))
            mask = settings.get("mask_token")
            mask = mask.get("content") if isinstance(mask, dict) else mask  # an AddedToken's serialised form
        return cls(tokenizer, directory, names, cleanup, mask if isinstance(mask, str) else None)

    def get_piece_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def unk_id(self) -> int:
        return self._unk

    def id_to_piece(self, i: int) -> str:
        return self.tokenizer.id_to_token(i)

    def piece_to_id(self, piece: str) -> int:
        i = self.tokenizer.token_to_id(piece)
        return self._unk if i is None else i

    def encode(self, lines: Sequence[str], **sampling) -> list[list[int]]:
        sampling.pop("num_threads", None)
        if sampling:
            raise DataError("subword sampling (data.*_sampling_alpha) is not available with an imported tokenizer")
        return [e.ids for e in self.tokenizer.encode_batch(list(lines), add_special_tokens=False)]

    def decode(self, ids: Sequence[int] | Sequence[Sequence[int]]) -> str | list[str]:
        if ids and not isinstance(ids[0], int):
            return [
                self._clean(t) for t in self.tokenizer.decode_batch([list(x) for x in ids], skip_special_tokens=True)
            ]
        return self._clean(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def _clean(self, text: str) -> str:
        if self.cleanup:
            for before, after in _CLEANUP:
                text = text.replace(before, after)
        return text

    def _round_trips(self, text: str) -> bool:
        ids = self.encode([text])[0]
        return bool(ids) and self.decode(ids) == text


def _byte_level_bpe(directory: Path) -> _Tokenizer:
    """GPT-2's tokenizer from vocab.json and merges.txt, as GPT2TokenizerFast builds it (<|endoftext|> special)."""
    vocab, merges = (str(directory / name) for name in BPE_FILES)
    tokenizer = _Tokenizer(models.BPE.from_file(vocab, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    if tokenizer.token_to_id(_GPT2_SPECIAL) is not None:
        tokenizer.add_special_tokens([_GPT2_SPECIAL])
    return tokenizer
