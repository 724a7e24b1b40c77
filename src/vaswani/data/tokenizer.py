"""SentencePiece: trained on the training text, stored in the model directory, raw text in and out."""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from vaswani.data.corpus import DataError
from vaswani.special import BOS_ID, EOS_ID, MASK, PAD_ID, UNK_ID

_SPECIAL = {"pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID, "unk_id": UNK_ID}


class Tokenizer:
    """One SentencePiece model (joint vocabulary) or two (source and target)."""

    def __init__(self, src: spm.SentencePieceProcessor, tgt: spm.SentencePieceProcessor | None = None) -> None:
        self.src = src
        self.tgt = tgt or src

    @property
    def joint(self) -> bool:
        return self.src is self.tgt

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def encode_src(self, lines: Sequence[str], alpha: float = 0.0, seed: int = 0) -> list[list[int]]:
        return _encode(self.src, lines, alpha, seed)

    def encode_tgt(self, lines: Sequence[str], alpha: float = 0.0, seed: int = 0) -> list[list[int]]:
        return _encode(self.tgt, lines, alpha, seed)

    def decode_tgt(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return self.tgt.decode([list(x) for x in ids])

    @property
    def mask_id(self) -> int | None:
        """The id of <mask> (a masked LM's [MASK]) in a text tokenizer; None in a translation one."""
        i = self.src.piece_to_id(MASK)
        return None if i == self.src.unk_id() else i

    def save(self, directory: str | Path) -> None:
        """Write the SentencePiece model(s) into `directory`, as `load` reads them."""
        processors = [self.src] if self.joint else [self.src, self.tgt]
        for name, processor in zip(self.files(self.joint), processors, strict=True):
            (Path(directory) / name).write_bytes(processor.serialized_model_proto())

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

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        directory = Path(directory)
        for joint in (True, False):
            paths = [directory / name for name in cls.files(joint)]
            if all(p.is_file() for p in paths):
                return cls(*(spm.SentencePieceProcessor(model_file=str(p)) for p in paths))
        raise DataError(f"{directory} has no tokenizer.model (or src.model and tgt.model); is it a model directory?")


def _encode(processor: spm.SentencePieceProcessor, lines: Sequence[str], alpha: float, seed: int) -> list[list[int]]:
    """Ids of each line; with `alpha` > 0 a sampled segmentation (BPE-dropout for bpe models, subword
    regularization for unigram ones) that is a function of (lines, alpha, seed): one thread, seeded."""
    if not alpha:
        return processor.encode(list(lines))
    spm.set_random_generator_seed(seed)
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
    path.write_bytes(model.getvalue())
    return spm.SentencePieceProcessor(model_proto=model.getvalue())
