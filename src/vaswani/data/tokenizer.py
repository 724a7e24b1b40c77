"""Tokenizers: raw text in and out, stored in the model directory.

Three layouts, one interface (`Tokenizer`, whose `src` and `tgt` answer as SentencePiece processors do):
- SentencePiece models trained here on the training text: tokenizer.model (joint) or src.model + tgt.model;
  a piece's id is SentencePiece's, and special ids are vaswani/special.py's.
- Marian's (OPUS-MT, imported by `vaswani import`): source.spm and target.spm segment the text, and
  vocab.json (target_vocab.json where the vocabularies are separate) numbers the pieces: ids are the JSON's,
  not SentencePiece's. A leading `>>lang<<` token (a multilingual model's target language) is kept whole.
- Hugging Face `tokenizers` files (GPT-2's, BERT's, imported): tokenizer.json, or vocab.json + merges.txt
  (data/hf_tokenizer.py, HfPieces); one vocabulary; ids are the file's, its special tokens its own.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from vaswani import atomic
from vaswani.data.corpus import DataError
from vaswani.data.hf_tokenizer import HfPieces, holds_hf_tokenizer
from vaswani.data.languages import LANGUAGES_FILE, Languages
from vaswani.special import BOS_ID, EOS_ID, MASK, PAD_ID, UNK_ID

_SPECIAL = {"pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID, "unk_id": UNK_ID}


MARIAN_FILES = ("source.spm", "target.spm", "vocab.json")  # + target_vocab.json with separate vocabularies
MARIAN_TARGET_VOCAB = "target_vocab.json"
LANGUAGE_TOKEN = re.compile(r">>[^<>\s]+<<")  # a multilingual model's target-language token, e.g. >>fra<<
# the special tokens MarianTokenizer (and M2M100Tokenizer, with <s>) reads as themselves where a text holds them
MARIAN_SPECIALS = ("</s>", "<unk>", "<pad>")


# Fewer lines than this are encoded (and decoded) one at a time: SentencePiece's list calls hand the lines to a pool of
# threads, which costs a short sentence many times its own work, the more where every core is busy (a server decoding
# beside its requests); from this many lines the pool is as fast (docs/benchmarks.md, "Serving").
ONE_BY_ONE = 64


def _by_line(call: Callable[[Any], Any], items: list) -> list:
    """`call(items)`, SentencePiece's list call, or one call an item where they are fewer than ONE_BY_ONE."""
    return call(items) if len(items) >= ONE_BY_ONE else [call(item) for item in items]


class VocabPieces:
    """A SentencePiece model whose pieces are numbered by a vocabulary of their own (Marian's vocab.json).

    It answers what vaswani asks of a SentencePieceProcessor (encode, decode, id_to_piece, piece_to_id,
    get_piece_size, unk_id). As MarianTokenizer: a piece missing from the vocabulary is <unk>; a leading
    `>>lang<<` token is one piece; </s>, <unk> and <pad> written in a text are those tokens; on decoding, pieces
    SentencePiece does not know (special tokens, language tokens) are written as text between the decoded runs."""

    def __init__(self, processor: spm.SentencePieceProcessor, vocab: dict[str, int], path: Path) -> None:
        self.processor, self.vocab, self.path = processor, vocab, path
        size = max(vocab.values()) + 1
        self.pieces = [""] * size
        for piece, i in vocab.items():
            self.pieces[i] = piece
        if "<unk>" not in vocab:
            raise DataError(f"{path} has no <unk> token; is it a Marian vocabulary?")
        self._unk = vocab["<unk>"]
        self._known = {p for p in vocab if processor.piece_to_id(p) != processor.unk_id() or p == "<unk>"}
        self.hidden: frozenset[int] = frozenset()  # ids never written on decoding (a many-to-many model's codes)
        self.leading_codes = True  # a line's leading >>lang<< is one piece (Marian's; a many-to-many model's: text)
        self.read_as_tokens(MARIAN_SPECIALS)

    def read_as_tokens(self, specials: Iterable[str]) -> None:
        """The special tokens (of `specials`, those in the vocabulary) that a text holding them is split at, each
        read as its own id, as transformers' tokenizers read them ("a </s> b": a, </s>, b)."""
        present = [s for s in specials if s in self.vocab]
        self._specials = re.compile("(" + "|".join(map(re.escape, present)) + ")") if present else None

    def get_piece_size(self) -> int:
        return len(self.pieces)

    def unk_id(self) -> int:
        return self._unk

    def id_to_piece(self, i: int) -> str:
        return self.pieces[i]

    def piece_to_id(self, piece: str) -> int:
        return self.vocab.get(piece, self._unk)

    def encode(self, lines: Sequence[str], **sampling) -> list[list[int]]:
        sampling.pop("num_threads", None)
        codes, texts = [], []
        for line in lines:  # MarianTokenizer.remove_language_code: a leading >>lang<< is one piece
            end = line.find("<<") if self.leading_codes and line.startswith(">>") else -1
            codes.append([line[: end + 2]] if end != -1 else [])
            texts.append(line[end + 2 :] if end != -1 else line)
        parts = [self._specials.split(t) if self._specials and "<" in t else [t] for t in texts]
        runs = [run for line in parts for run in line[::2]]  # the text between special tokens
        encode = functools.partial(self.processor.encode, out_type=str, **sampling)
        pieces = iter(encode(runs) if sampling else _by_line(encode, runs))  # sampled: one seeded call
        encoded = []
        for code, line in zip(codes, parts, strict=True):
            ids = [self.vocab.get(p, self._unk) for p in code]
            for k, part in enumerate(line):
                ids += [self.vocab.get(p, self._unk) for p in next(pieces)] if k % 2 == 0 else [self.vocab[part]]
            encoded.append(ids)
        return encoded

    def decode(self, ids: Sequence[int] | Sequence[Sequence[int]]) -> str | list[str]:
        if ids and not isinstance(ids[0], int):
            return [self._decode_one(x) for x in ids]
        return self._decode_one(ids)

    def _decode_one(self, ids: Sequence[int]) -> str:
        text, run = [], []
        for i in ids:
            if i in self.hidden:
                continue
            piece = self.pieces[i]
            if piece in self._known and not (piece.startswith("<") and piece.endswith(">")):
                run.append(piece)
                continue
            text.append(self.processor.decode_pieces(run) + piece + " ")  # as MarianTokenizer writes specials
            run = []
        text.append(self.processor.decode_pieces(run))
        return "".join(text).strip()


class Tokenizer:
    """One SentencePiece model (joint vocabulary) or two (source and target); or Marian's pair of SentencePiece
    models numbered by one vocabulary (or two), as `VocabPieces`; or a Hugging Face tokenizer, as `HfPieces`."""

    def __init__(
        self,
        src: spm.SentencePieceProcessor | VocabPieces | HfPieces,
        tgt: spm.SentencePieceProcessor | VocabPieces | HfPieces | None = None,
        languages: Languages | None = None,
    ) -> None:
        self.src = src
        self.tgt = tgt or src
        self.languages = languages  # a many-to-many model's language codes (data/languages.py), None otherwise

    @property
    def marian(self) -> bool:
        """Marian's layout (VocabPieces), imported; else SentencePiece models trained here."""
        return isinstance(self.src, VocabPieces)

    @property
    def text_newlines(self) -> bool:
        """A newline is text to this tokenizer (GPT-2's byte-level BPE encodes it and decodes it back), so a
        language model reads and writes it as tokens and EOS ends a document. Else (SentencePiece models
        trained here) a language model's EOS is the line break (data/plain.py)."""
        return isinstance(self.src, HfPieces) and self.src.text_newlines

    @property
    def file_names(self) -> list[str]:
        """The files of this tokenizer in a model directory."""
        if isinstance(self.src, HfPieces):
            return [*self.src.file_names, *([LANGUAGES_FILE] if self.languages else [])]
        if self.marian:
            separate = self.src.vocab is not self.tgt.vocab
            return [
                *MARIAN_FILES,
                *([MARIAN_TARGET_VOCAB] if separate else []),
                *([LANGUAGES_FILE] if self.languages else []),
            ]
        return self.files(self.joint)

    @property
    def joint(self) -> bool:
        """One vocabulary numbers source and target pieces (one SentencePiece model, or Marian's one vocab.json)."""
        if self.marian:
            return self.src.vocab is self.tgt.vocab
        return self.src is self.tgt

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def cut_source(self, ids: list[int], limit: int) -> list[int]:
        """Source ids cut to `limit`, a many-to-many model's code kept where it is (data/languages.py)."""
        return ids[:limit] if self.languages is None else self.languages.cut(ids, limit)

    def encode_src(self, lines: Sequence[str], alpha: float = 0.0, seed: int = 0) -> list[list[int]]:
        return _encode(self.src, lines, alpha, seed)

    def encode_tgt(self, lines: Sequence[str], alpha: float = 0.0, seed: int = 0) -> list[list[int]]:
        return _encode(self.tgt, lines, alpha, seed)

    def decode_tgt(self, ids: Sequence[Sequence[int]]) -> list[str]:
        lists = [list(x) for x in ids]
        return (
            _by_line(self.tgt.decode, lists)
            if isinstance(self.tgt, spm.SentencePieceProcessor)
            else self.tgt.decode(lists)
        )

    @functools.cached_property
    def language_tokens(self) -> list[str]:
        """The source vocabulary's `>>lang<<` pieces, sorted: the target languages a multilingual model (OPUS-MT's
        mul models) is asked for by the token before a sentence; empty for a model of one target language."""
        if isinstance(self.src, VocabPieces):
            pieces = self.src.vocab
        else:
            pieces = (self.src.id_to_piece(i) for i in range(self.src.get_piece_size()))
        return sorted(piece for piece in pieces if LANGUAGE_TOKEN.fullmatch(piece))

    @functools.cached_property
    def code_pieces(self) -> frozenset[str]:
        """A many-to-many model's language code pieces, and the </s> before a code in NLLB's legacy layout (no word
        of the text: translate/align.py); empty otherwise."""
        if self.languages is None:
            return frozenset()
        ends = [EOS_ID] if self.languages.source == "suffix" else []
        return frozenset(self.src.id_to_piece(i) for i in [*self.languages.codes.values(), *ends])

    @property
    def mask_id(self) -> int | None:
        """The id of <mask> (a masked LM's [MASK], its tokenizer_config.json's mask_token for an imported BERT) in a
        text tokenizer; None in a translation one."""
        i = self.src.piece_to_id(getattr(self.src, "mask_piece", None) or MASK)
        return None if i == self.src.unk_id() else i

    def save(self, directory: str | Path) -> None:
        """Write the tokenizer's files into `directory`, as `load` reads them."""
        if self.marian or isinstance(self.src, HfPieces):
            source = self.src.directory if isinstance(self.src, HfPieces) else self.src.path.parent
            for name in self.file_names:
                atomic.copy_file(source / name, Path(directory) / name)
            return
        processors = [self.src] if self.joint else [self.src, self.tgt]
        for name, processor in zip(self.files(self.joint), processors, strict=True):  # each whole or absent
            atomic.write_bytes(Path(directory) / name, processor.serialized_model_proto())

    @staticmethod
    def files(joint: bool) -> list[str]:
        return ["tokenizer.model"] if joint else ["src.model", "tgt.model"]

    @classmethod
    def train(
        cls,
        src_lines: Iterable[str],
        tgt_lines: Iterable[str],
        vocab_size: int,
        model_type: str,
        joint: bool,
        directory: str | Path,
        seed: int = 1,
        text: bool = False,
    ) -> Tokenizer:
        """Train on the training text and write the model(s) into `directory`. The lines may be
        streamed (generators): SentencePiece samples data.SAMPLE_SENTENCES of them as they pass.

        `text`: a language model's tokenizer, which gives back exactly the text it read (no Unicode
        normalisation, spaces kept as they are, no space added before a line) and has a <mask> piece."""
        directory = Path(directory)
        src_lines, tgt_lines = (x for x in src_lines if x), (x for x in tgt_lines if x)
        corpora = [itertools.chain(src_lines, tgt_lines)] if joint else [src_lines, tgt_lines]
        processors = []
        for name, lines in zip(cls.files(joint), corpora, strict=True):
            processors.append(_train_one(lines, vocab_size, model_type, directory / name, seed, text))
        return cls(*processors)

    @staticmethod
    def present(directory: str | Path) -> bool:
        """Whether `directory` holds a tokenizer of any layout (`load` then reads it, or says what is wrong)."""
        names = ("tokenizer.model", "src.model", MARIAN_FILES[2], "tokenizer.json")
        return any((Path(directory) / name).is_file() for name in names)

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        directory = Path(directory)
        if holds_hf_tokenizer(directory):
            languages = directory / LANGUAGES_FILE
            return cls(HfPieces.load(directory), languages=Languages.load(languages) if languages.is_file() else None)
        if (directory / MARIAN_FILES[2]).is_file():
            tokenizer = cls.load_marian(directory)
            if (directory / LANGUAGES_FILE).is_file():  # M2M-100's (pretrained/multilingual.py): its codes unwritten
                tokenizer.languages = Languages.load(directory / LANGUAGES_FILE)
                tokenizer.tgt.hidden = frozenset(tokenizer.languages.codes.values())
                tokenizer.src.leading_codes = tokenizer.tgt.leading_codes = False
                for pieces in (tokenizer.src, tokenizer.tgt):
                    pieces.read_as_tokens(("<s>", *MARIAN_SPECIALS))  # M2M100Tokenizer's: its <s> too
            return tokenizer
        for joint in (True, False):
            paths = [directory / name for name in cls.files(joint)]
            if all(p.is_file() for p in paths):
                return cls(*(_sentencepiece(p) for p in paths))
        raise DataError(f"{directory} has no tokenizer.model (or src.model and tgt.model); is it a model directory?")

    @classmethod
    def load_marian(cls, directory: Path) -> Tokenizer:
        """Marian's layout: source.spm, target.spm, vocab.json (and target_vocab.json when separate)."""
        for name in MARIAN_FILES:
            if not (directory / name).is_file():
                raise DataError(f"{directory / name} not found: a Marian tokenizer needs {', '.join(MARIAN_FILES)}")
        source_vocab = _read_vocab(directory / MARIAN_FILES[2])
        separate = (directory / MARIAN_TARGET_VOCAB).is_file()
        target_vocab = _read_vocab(directory / MARIAN_TARGET_VOCAB) if separate else source_vocab
        processors = []
        for name in MARIAN_FILES[:2]:
            try:
                processors.append(spm.SentencePieceProcessor(model_file=str(directory / name)))
            except (OSError, RuntimeError) as error:
                raise DataError(f"{directory / name} is not a SentencePiece model ({error})") from None
        src = VocabPieces(processors[0], source_vocab, directory / MARIAN_FILES[2])
        tgt = VocabPieces(processors[1], target_vocab, directory / (MARIAN_TARGET_VOCAB if separate else "vocab.json"))
        return cls(src, tgt)


def _sentencepiece(path: Path) -> spm.SentencePieceProcessor:
    """The SentencePiece model at `path`; a truncated or corrupt file is a DataError naming it (SentencePiece's
    own is a RuntimeError that names no file)."""
    try:
        processor = spm.SentencePieceProcessor(model_file=str(path))
        processor.id_to_piece(list(range(processor.get_piece_size())))  # a flipped byte in a piece: not UTF-8
        return processor
    except (OSError, RuntimeError, UnicodeDecodeError) as error:
        raise DataError(
            f"{path} is not a SentencePiece model ({' '.join(str(error).split())}): truncated or corrupt; "
            "restore it from the run that trained the model, or from its prepared data"
        ) from None


def _read_vocab(path: Path) -> dict[str, int]:
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(f"{path} is not a JSON vocabulary ({error})") from None
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise DataError(f"{path} must map each piece to an integer id")
    return vocab


def _encode(
    processor: spm.SentencePieceProcessor | VocabPieces | HfPieces, lines: Sequence[str], alpha: float, seed: int
) -> list[list[int]]:
    """Ids of each line; with `alpha` > 0 a sampled segmentation (BPE-dropout for bpe models, subword
    regularization for unigram ones) that is a function of (lines, alpha, seed): one thread, seeded."""
    if not alpha:
        if isinstance(processor, spm.SentencePieceProcessor):
            return _by_line(processor.encode, list(lines))
        return processor.encode(list(lines))
    spm.set_random_generator_seed(seed)  # VocabPieces samples with its SentencePiece model, seeded the same way
    return processor.encode(list(lines), enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1)


SAMPLE_SENTENCES = 2_000_000  # the tokenizer learns from a uniform sample of this many lines (reservoir)


def _train_one(lines: Iterable[str], vocab_size: int, model_type: str, path: Path, seed: int, text: bool = False):
    lines = iter(lines)
    first = next(lines, None)
    if first is None:
        raise DataError(
            "no training pairs left after filtering: every pair has an empty source or target, so "
            "there is no text to train the tokenizer on; check the training files"
        )
    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    options = dict(
        sentence_iterator=itertools.chain([first], lines),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        input_sentence_size=SAMPLE_SENTENCES,
        shuffle_input_sentence=True,
        num_threads=2,
        minloglevel=2,
        **_SPECIAL,
    )
    if model_type != "char":
        options["hard_vocab_limit"] = True
    if text:
        options.update(
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            add_dummy_prefix=False,
            user_defined_symbols=[MASK],
            split_digits=False,
        )
    try:
        spm.SentencePieceTrainer.train(**options)
    except RuntimeError as error:
        message = str(error)
        if "Vocabulary size too high" in message:
            limit = message.rsplit("<=", 1)[-1].strip(" .") if "<=" in message else "a smaller value"
            raise DataError(
                f"data.vocab_size={vocab_size} is too large for this training data; set data.vocab_size to {limit} "
                "or less"
            ) from None
        raise DataError(f"SentencePiece training failed: {message.strip()}") from None
    atomic.write_bytes(path, model.getvalue())
    return spm.SentencePieceProcessor(model_proto=model.getvalue())
