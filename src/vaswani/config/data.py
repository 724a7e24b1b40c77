"""The data section: where the text is (parallel, plain or labelled) and how it becomes batches."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vaswani.config.fields import ConfigError, check_keys, every_field, number


@dataclass(frozen=True)
class DataConfig:
    """Where the text is (parallel, plain or labelled) and how it becomes batches. Paths are relative to the
    working directory."""

    train_src: str = ""
    train_tgt: str = ""
    valid_src: str = ""
    valid_tgt: str = ""
    toy_task: Literal["copy", "reverse"] | None = None  # generated data instead of files
    toy_train_size: int = 20000
    toy_valid_size: int = 200
    toy_max_len: int = 12
    tokenizer: Literal["bpe", "unigram", "char"] = "bpe"  # §5.1: byte-pair encoding
    vocab_size: int = 8000  # joint source+target vocabulary when model.share_embeddings
    max_len: int = 256  # training pairs longer than this (in subwords) are removed, and counted
    max_len_ratio: float = 4.0  # remove pairs whose length ratio exceeds this (both sides > 5 subwords)
    invalid_utf8: Literal["error", "replace"] = "error"
    lowercase: bool = False  # lowercase both sides (training, validation, and sentences to translate)
    max_tokens: int = 4000  # padded positions per batch (the larger of source and target)
    # The pair a many-to-many model (NLLB-200, M2M-100, mBART-50) is fine-tuned on, in its codes (deu_Latn,
    # de_DE, de): each source starts with source_language's code and each target with target_language's, forced
    # at validation as in translation; the fine-tuned model then translates this pair when none is asked for.
    source_language: str = ""
    target_language: str = ""
    # Subword sampling of the training text, drawn afresh each epoch (validation and translation stay
    # deterministic). bpe: BPE-dropout, the probability of skipping each merge (Provilkov et al., 2020);
    # unigram: the smoothing alpha of subword regularization (Kudo, 2018). 0: off, the paper's setting.
    src_sampling_alpha: float = 0.0
    tgt_sampling_alpha: float = 0.0
    valid_max_sentences: int = 1000  # dev sentences decoded for BLEU at each validation
    # Several training corpora instead of train_src/train_tgt, each sampled `weight` times per epoch
    # (2: every pair twice; 0.5: a fresh random half each epoch), as WMT systems mix their sources:
    #   corpora: [{name: europarl, src: ep.de, tgt: ep.en, weight: 1}, {src: cc.de.gz, tgt: cc.en.gz, weight: 0.5}]
    corpora: list | None = None
    # The prepared-data directory (token ids in memory-mapped arrays, see `vaswani prepare`); made when
    # missing, reused when it matches this section and the files. Empty: MODEL_DIR/prepared.
    prepared: str = ""
    # Plain text, for a language model (train.task lm or mlm): one file or a list of files, read line by
    # line; each line's tokens end with EOS (a newline for a char model), all lines one stream of tokens.
    text: str | list | None = None
    # The held-out text: a file, or (empty) the last valid_fraction of the text's characters (nanoGPT's split).
    valid_text: str = ""
    valid_fraction: float = 0.1
    block_size: int = 256  # tokens per training sequence (lm, mlm: contiguous blocks of the stream)
    batch_size: int = 0  # sequences per batch for lm, mlm and classify; 0: max_tokens // block_size
    mask_prob: float = 0.15  # mlm: tokens chosen per sequence (BERT: 15%, of which 80% [MASK], 10% random, 10% kept)
    # Labelled text for classify (fine-tuning): TSV files of label and text; a header line names the columns
    # (the one called label holds the labels), without one the label comes first.
    labelled_train: str = ""
    labelled_valid: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.text, str):
            object.__setattr__(self, "text", [self.text] if self.text else None)
        if self.text is not None and (
            not isinstance(self.text, list | tuple) or not all(isinstance(t, str) and t for t in self.text)
        ):
            raise ConfigError(f"data.text must name a file or a list of files, got {self.text!r}")
        if self.corpora is not None:
            object.__setattr__(self, "corpora", _corpora(self.corpora))

    def training_corpora(self) -> list[dict]:
        """[{name, src, tgt, weight}] of the training corpora, the train_src/train_tgt pair included."""
        if self.corpora:
            return self.corpora
        return [{"name": "train", "src": self.train_src, "tgt": self.train_tgt, "weight": 1.0}]

    def languages(self) -> tuple[str | None, str | None]:
        """Source and target languages as the training files' names say them (train.de.gz -> "de"), else None."""

        def language(path: str | None) -> str | None:
            match = re.search(r"\.([a-z]{2,3})(\.gz)?$", path or "")
            return match.group(1) if match else None

        first = self.training_corpora()[0] if self.train_src or self.corpora else {}
        return language(first.get("src")), language(first.get("tgt"))

    def require_training_data(self) -> None:
        if self.toy_task is None and not (self.train_src and self.train_tgt) and not self.corpora:
            raise ConfigError(
                "data.train_src and data.train_tgt are required (or data.corpora, or set data.toy_task: reverse)"
            )
        if self.corpora and (self.train_src or self.train_tgt):
            raise ConfigError("give the training text either as data.train_src/train_tgt or as data.corpora, not both")

    def unused(self, task: str, masks: bool) -> frozenset[str]:
        """The fields that do not take effect in a run of `task` (translation, lm, mlm or classify); `masks`:
        whether it masks tokens (mlm, or classify with the masked-token auxiliary loss)."""
        if task not in _READ_BY:
            return frozenset()  # the task's own check names the mistake
        read = _EVERY_TASK | _READ_BY[task] | ({"mask_prob"} if masks else set())
        if self.toy_task:
            read -= {"train_src", "train_tgt", "valid_src", "valid_tgt", "corpora"}  # generated pairs instead
        else:
            read -= {"toy_train_size", "toy_valid_size", "toy_max_len"}
            if not self.valid_src:
                read -= {"valid_max_sentences"}  # no dev set to decode
        if self.valid_text:
            read -= {"valid_fraction"}  # the held-out text is a file, not the end of the training text
        return every_field(DataConfig) - read

    def validate(self) -> None:
        if self.toy_task not in (None, "copy", "reverse"):
            raise ConfigError(f"data.toy_task must be copy or reverse, got {self.toy_task!r}")
        if self.tokenizer not in ("bpe", "unigram", "char"):
            raise ConfigError(f"data.tokenizer must be bpe, unigram or char, got {self.tokenizer!r}")
        if self.invalid_utf8 not in ("error", "replace"):
            raise ConfigError(f"data.invalid_utf8 must be error or replace, got {self.invalid_utf8!r}")
        if not 0.0 < self.valid_fraction < 1.0:
            raise ConfigError(f"data.valid_fraction must be in (0, 1), got {self.valid_fraction!r}")
        if not 0.0 < self.mask_prob < 1.0:
            raise ConfigError(f"data.mask_prob must be in (0, 1), got {self.mask_prob!r}")
        if self.batch_size < 0:
            raise ConfigError(f"data.batch_size must be 0 (max_tokens // block_size) or more, got {self.batch_size!r}")
        for name in ("vocab_size", "max_len", "max_tokens", "block_size", "max_len_ratio", *_TOY_SIZES):
            if getattr(self, name) <= 0:
                raise ConfigError(f"data.{name} must be positive, got {getattr(self, name)!r}")
        if self.toy_max_len < 2:
            raise ConfigError(
                f"data.toy_max_len must be 2 or more (toy strings are 2 to toy_max_len long), got {self.toy_max_len!r}"
            )
        for name in ("valid_max_sentences", "toy_valid_size"):
            if getattr(self, name) < 0:
                raise ConfigError(f"data.{name} must be 0 or more, got {getattr(self, name)!r}")
        for name in ("src_sampling_alpha", "tgt_sampling_alpha"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"data.{name} must be in [0, 1), got {value!r}")
            if value and self.tokenizer == "char":
                raise ConfigError(
                    f"data.{name} needs a bpe or unigram tokenizer (a char tokenizer has nothing to "
                    "sample); set it to 0 or data.tokenizer: bpe"
                )


_TOY_SIZES = ("toy_train_size",)  # toy_valid_size may be 0: no dev set

# What each task reads of this section (train/tasks/, data/parallel.py, data/plain.py, and for the model
# directory decode/generate.py and decode/classifier.py). Every task reads _EVERY_TASK (max_tokens also sizes
# the precision measurement); a fine-tuned classifier keeps the pretrained model's tokenizer.
_EVERY_TASK = frozenset({"invalid_utf8", "lowercase", "max_tokens"})
_MADE_HERE = frozenset({"tokenizer", "vocab_size", "prepared"})  # the run trains its tokenizer, prepares its data
_PARALLEL = frozenset(
    {
        "train_src",
        "train_tgt",
        "valid_src",
        "valid_tgt",
        "corpora",
        "toy_task",
        "toy_train_size",
        "toy_valid_size",
        "toy_max_len",
        "max_len",
        "max_len_ratio",
        "src_sampling_alpha",
        "tgt_sampling_alpha",
        "valid_max_sentences",
        "source_language",
        "target_language",
    }
)
_BLOCKS = frozenset({"block_size", "batch_size"})
_TEXT = frozenset({"text", "valid_text", "valid_fraction"})
_READ_BY = {
    "translation": _MADE_HERE | _PARALLEL,
    "lm": _MADE_HERE | _TEXT | _BLOCKS,
    "mlm": _MADE_HERE | _TEXT | _BLOCKS,
    "classify": _BLOCKS | {"labelled_train", "labelled_valid"},
}


def _corpora(values: Any) -> list[dict]:
    """data.corpora checked: a list of {src, tgt, weight > 0, name}, names unique."""
    if not isinstance(values, list | tuple) or not values:
        raise ConfigError("data.corpora must be a list of {src: FILE, tgt: FILE, weight: NUMBER, name: NAME}")
    out = []
    for i, entry in enumerate(values):
        where = f"data.corpora[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a mapping with src, tgt and optionally weight and name")
        check_keys(where, entry, ["name", "src", "tgt", "weight"])
        for key in ("src", "tgt"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise ConfigError(f"{where}.{key} must name a file")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, str) or not number(weight, f"{where}.weight") > 0:
            raise ConfigError(
                f"{where}.weight must be a number above 0 (how often its pairs are sampled per "
                f"epoch), got {weight!r}; to leave a corpus out, remove it from the list"
            )
        if not isinstance(entry.get("name"), str | None):
            raise ConfigError(f"{where}.name must be a name (text), got {entry['name']!r}")
        name = entry.get("name") or Path(entry["src"]).name
        out.append({"name": name, "src": entry["src"], "tgt": entry["tgt"], "weight": float(weight)})
    names = [c["name"] for c in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"data.corpora names must differ, got {names}; give each a name")
    return out
