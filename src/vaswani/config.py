"""Configuration: frozen dataclasses with the paper's defaults, and the presets of its Table 3.

YAML recipes (added with `vaswani train`) only override these defaults; the defaults live here.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml


class ConfigError(ValueError):
    """A configuration value or key that cannot be used; the message says which and how to fix it."""


def _coerce(section: str, cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Check each value against the field's type; numbers written as strings (YAML reads 1e-3 as a
    string) become floats."""
    hints = typing.get_type_hints(cls)
    out = {}
    for key, value in values.items():
        hint = hints[key]
        optional = isinstance(hint, types.UnionType) and type(None) in hint.__args__
        base = next((a for a in hint.__args__ if a is not type(None)), hint) if optional else hint
        if (value is None and optional) or (optional and len(hint.__args__) > 2):
            pass  # None where allowed; a union of types is checked by its section (data.text)
        elif base is float and not isinstance(value, bool) and isinstance(value, int | float | str):
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{section}.{key} must be a number, got {value!r}") from None
        elif base is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{section}.{key} must be an integer, got {value!r}")
        elif base is bool and not isinstance(value, bool):
            raise ConfigError(f"{section}.{key} must be true or false, got {value!r}")
        elif cls.__dataclass_fields__[key].metadata.get("duration"):
            parse_duration(value, f"{section}.{key}")
        elif base is list:
            pass  # checked by the section itself (data.corpora)
        elif base is str and not isinstance(value, str):
            raise ConfigError(f"{section}.{key} must be a string, got {value!r}")
        out[key] = value
    return out


PRECISIONS = ("auto", "fp32", "bf16")  # auto: measured per model and device (vaswani/precision.py)
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def parse_duration(value: Any, name: str = "duration") -> float:
    """Seconds in "90s", "10m", "1h30m", "2h", "1.5h", or a plain number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.fullmatch(str(value).strip().replace(" ", "")) if isinstance(value, str) else None
        if not match or not any(match.groups()):
            raise ConfigError(f"{name} must be a duration such as 90s, 10m or 1h30m, got {value!r}")
        hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if seconds <= 0:
        raise ConfigError(f"{name} must be positive, got {value!r}")
    return seconds


def _closest(name: str, choices: list[str]) -> str:
    match = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the Transformer (§3) and its two descendants. Defaults are the paper's base model."""

    # encoder_decoder: the paper's translation model. decoder_only: a causal language model (GPT, Radford
    # et al. 2018): the decoder's layers without encoder-decoder attention. encoder_only: a bidirectional
    # masked language model (BERT, Devlin et al. 2019): the encoder's layers and a pre-softmax projection.
    type: Literal["encoder_decoder", "decoder_only", "encoder_only"] = "encoder_decoder"
    src_vocab_size: int = 37000  # §5.1: shared source-target BPE vocabulary of about 37,000 tokens
    tgt_vocab_size: int = 37000
    d_model: int = 512
    n_heads: int = 8  # §3.2.2: d_k = d_v = d_model / n_heads
    d_ff: int = 2048
    n_layers: int = 6  # encoder layers (N in the paper)
    n_decoder_layers: int | None = None  # None: same as n_layers, as in the paper
    dropout: float = 0.1  # §5.4: on every sub-layer output and on embedding + position sums
    # §5.4 names no dropout inside attention; the tensor2tensor reference code had it. It also
    # disables the fused attention kernels on CPU, so it stays an option.
    attention_dropout: float = 0.0
    activation: Literal["relu", "gelu"] = "relu"  # §3.3: max(0, xW1 + b1)W2 + b2
    norm_first: bool = False  # False: post-norm, LayerNorm(x + Sublayer(x)) as in §3.1
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"  # §3.5; learned is Table 3 row (E)
    max_positions: int = 1024  # only bounds learned positions; sinusoids work for any length
    share_embeddings: bool = True  # §3.4: one matrix for source, target and pre-softmax weights
    tie_output: bool = True  # with separate vocabularies: target embedding = pre-softmax weights
    layer_norm_eps: float = 1e-6  # the tensor2tensor reference value
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    # Fine-tuning (decoder_only / encoder_only): a linear classifier over one pooled position, with this many
    # classes; 0: none. pool: the last real token (GPT; auto for decoder_only), the first (BERT's [CLS]
    # position; auto for encoder_only), or the mean of every real token's state (special tokens included).
    n_classes: int = 0
    pool: Literal["auto", "first", "last", "mean"] = "auto"

    def __post_init__(self) -> None:
        self._validate()

    @property
    def pooling(self) -> str:
        """first, last or mean: where the classification head reads the sequence."""
        if self.pool != "auto":
            return self.pool
        return "last" if self.type == "decoder_only" else "first"

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def _validate(self) -> None:
        if self.type not in MODEL_TYPES:
            raise ConfigError(f"model.type must be one of {', '.join(MODEL_TYPES)}, got {self.type!r}"
                              f"{_closest(str(self.type), list(MODEL_TYPES))}")
        if self.type != "encoder_decoder":
            for name in ("n_decoder_layers",):
                if getattr(self, name) is not None:
                    raise ConfigError(f"model.{name} applies to model.type encoder_decoder only (this is "
                                      f"{self.type}); remove it and set model.n_layers")
            if not self.share_embeddings or self.src_vocab_size != self.tgt_vocab_size:
                raise ConfigError(f"model.type {self.type} has one vocabulary: model.share_embeddings must be true "
                                  "and src_vocab_size equal tgt_vocab_size")
        if self.n_classes < 0 or isinstance(self.n_classes, bool):
            raise ConfigError(f"model.n_classes must be 0 (no classifier) or more, got {self.n_classes!r}")
        if self.n_classes and self.type == "encoder_decoder":
            raise ConfigError("model.n_classes needs model.type decoder_only or encoder_only (a classifier reads "
                              "one stack's states); set model.n_classes: 0 for translation")
        if self.pool not in ("auto", "first", "last", "mean"):
            raise ConfigError(f"model.pool must be auto, first, last or mean, got {self.pool!r}")
        positive = ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_positions")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"model.{name} must be a positive integer, got {value!r}")
        if self.n_decoder_layers is not None and self.n_decoder_layers <= 0:
            raise ConfigError(f"model.n_decoder_layers must be a positive integer, got {self.n_decoder_layers!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads}); "
                f"e.g. n_heads={_divisor_near(self.d_model, self.n_heads)}"
            )
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1), got {value!r}")
        if self.activation not in ("relu", "gelu"):
            raise ConfigError(f"model.activation must be 'relu' or 'gelu', got {self.activation!r}")
        if self.positions not in ("sinusoidal", "learned"):
            raise ConfigError(f"model.positions must be 'sinusoidal' or 'learned', got {self.positions!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                f"model.share_embeddings needs one vocabulary, but src_vocab_size={self.src_vocab_size} and "
                f"tgt_vocab_size={self.tgt_vocab_size}; set share_embeddings: false or use a joint vocabulary"
            )
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            if not 0 <= value < min(self.src_vocab_size, self.tgt_vocab_size):
                raise ConfigError(f"model.{name}={value} is outside the vocabulary")
        if len(set(ids.values())) != 3:
            raise ConfigError(f"model.pad_id, bos_id and eos_id must differ, got {ids}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named architecture (see PRESETS), with any field overridden, e.g. `preset("base", src_vocab_size=8000)`."""
        if name not in PRESETS:
            raise ConfigError(f"unknown model preset '{name}'{_closest(name, list(PRESETS))}; "
                              f"choose one of {', '.join(PRESETS)}")
        fields = {**PRESETS[name], **overrides}
        if "vocab_size" in fields:  # convenience for the shared-vocabulary case
            size = fields.pop("vocab_size")
            fields.setdefault("src_vocab_size", size)
            fields.setdefault("tgt_vocab_size", size)
        return cls.from_dict(fields)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """Build from a mapping; an unknown key is an error naming the closest valid key."""
        known = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                raise ConfigError(f"unknown key 'model.{key}'{_closest(key, known)}")
        return cls(**_coerce("model", cls, values))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


MODEL_TYPES = ("encoder_decoder", "decoder_only", "encoder_only")


def _divisor_near(d_model: int, n_heads: int) -> int:
    divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
    return min(divisors, key=lambda h: abs(h - n_heads))


# Table 3 of the paper, and small models that train on a CPU.
PRESETS: dict[str, dict[str, Any]] = {
    "base": {},
    "big": {"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3},
    # 3+3 layers at d_model 256: the size our CPU benchmarks use.
    "small": {"d_model": 256, "d_ff": 1024, "n_heads": 4, "n_layers": 3},
    # Wu et al. (2021), the best published text-only Multi30k model: 4+4 layers, d_model 128.
    "tiny": {"d_model": 128, "d_ff": 256, "n_heads": 4, "n_layers": 4, "dropout": 0.3},
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
        for key in entry:
            if key not in ("name", "src", "tgt", "weight"):
                raise ConfigError(f"unknown key '{where}.{key}'{_closest(key, ['name', 'src', 'tgt', 'weight'])}")
        for key in ("src", "tgt"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise ConfigError(f"{where}.{key} must name a file")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
            raise ConfigError(f"{where}.weight must be a number above 0 (how often its pairs are sampled per "
                              f"epoch), got {weight!r}; to leave a corpus out, remove it from the list")
        name = str(entry.get("name") or Path(entry["src"]).name)
        out.append({"name": name, "src": entry["src"], "tgt": entry["tgt"], "weight": float(weight)})
    names = [c["name"] for c in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"data.corpora names must differ, got {names}; give each a name")
    return out


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text is and how it becomes batches. Paths are relative to the working directory."""

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
        if self.text is not None and (not isinstance(self.text, list | tuple)
                                      or not all(isinstance(t, str) and t for t in self.text)):
            raise ConfigError(f"data.text must name a file or a list of files, got {self.text!r}")
        if self.corpora is not None:
            object.__setattr__(self, "corpora", _corpora(self.corpora))

    def training_corpora(self) -> list[dict]:
        """[{name, src, tgt, weight}] of the training corpora, the train_src/train_tgt pair included."""
        if self.corpora:
            return self.corpora
        return [{"name": "train", "src": self.train_src, "tgt": self.train_tgt, "weight": 1.0}]

    def require_training_data(self) -> None:
        if self.toy_task is None and not (self.train_src and self.train_tgt) and not self.corpora:
            raise ConfigError("data.train_src and data.train_tgt are required (or data.corpora, or set "
                              "data.toy_task: reverse)")
        if self.corpora and (self.train_src or self.train_tgt):
            raise ConfigError("give the training text either as data.train_src/train_tgt or as data.corpora, not both")

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
        for name in ("vocab_size", "max_len", "max_tokens", "block_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"data.{name} must be positive, got {getattr(self, name)!r}")
        for name in ("src_sampling_alpha", "tgt_sampling_alpha"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"data.{name} must be in [0, 1), got {value!r}")
            if value and self.tokenizer == "char":
                raise ConfigError(f"data.{name} needs a bpe or unigram tokenizer (a char tokenizer has nothing to "
                                  "sample); set it to 0 or data.tokenizer: bpe")


@dataclass(frozen=True)
class TrainConfig:
    """The optimisation recipe; defaults are the paper's §5.3-§5.4."""

    max_steps: int = 100000  # §5.2: base model, 100k steps
    max_epochs: int | None = None
    # noam: §5.3 warmup then step^-0.5; inverse_sqrt: the same, peaking at peak_lr; constant: warmup to peak_lr
    lr_schedule: Literal["noam", "inverse_sqrt", "constant"] = "noam"
    lr_factor: float = 1.0  # noam: lr = lr_factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    peak_lr: float = 5e-4  # inverse_sqrt: linear warmup to peak_lr, then peak_lr * sqrt(warmup / step); constant
    warmup_steps: int = 4000
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    # 0: Adam, as the paper. > 0: AdamW's decoupled weight decay (Loshchilov & Hutter 2019) on the weight
    # matrices, not on biases and norms (GPT-2 and nanoGPT: 0.1)
    weight_decay: float = 0.0
    label_smoothing: float = 0.1  # §5.4
    clip_norm: float = 0.0  # 0: no clipping (the paper clips nothing)
    accumulate: int = 1  # batches per optimizer step
    # processes that collate batches ahead of the step (torch DataLoader workers; 0: in the training
    # process). Results do not depend on it.
    loader_workers: int = 1
    # bf16: autocast, fp32 master weights. auto: bf16 only where it measures faster than fp32 for this
    # model on this device (vaswani/precision.py: CPU flags do not tell); the resolved value is saved.
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # A wall-clock budget for training, validations included ("90s", "10m", "1h30m"; a number is seconds):
    # training stops there as at max_steps, whichever comes first. None: no budget.
    max_time: str | None = field(default=None, metadata={"duration": True})
    # none: the schedule above as it is (the paper). linear: it is multiplied by (1 - progress), progress
    # being the larger of step / max_steps and time / max_time, so it reaches zero where the run ends:
    # a fixed budget is best spent annealing to its end (Li et al., 2020, "Budgeted Training").
    # cosine: multiplied by (1 + cos(pi * progress)) / 2 instead (GPT's schedule)
    lr_decay: Literal["none", "linear", "cosine"] = "none"
    device: str = "auto"
    seed: int = 1
    valid_every: int = 1000  # steps between validations (and checkpoints)
    # bleu (translation), loss, or accuracy (classify); auto: bleu for translation, accuracy for classify,
    # loss for the language models
    early_stopping_metric: Literal["auto", "bleu", "loss", "accuracy"] = "auto"
    patience: int = 0  # validations without improvement before stopping; 0: never stop early
    keep_last: int = 5  # §5.2 averages the last 5 checkpoints
    keep_best: int = 1

    # What is learned: translation (encoder_decoder), lm (next token, decoder_only), mlm (masked tokens,
    # encoder_only), classify (labelled text, the models with model.n_classes). auto: from model.type.
    task: Literal["auto", "translation", "lm", "mlm", "classify"] = "auto"

    @functools.cached_property  # parsed once: the schedule asks at every step
    def max_seconds(self) -> float | None:
        """max_time in seconds (None: no budget)."""
        return None if self.max_time is None else parse_duration(self.max_time, "train.max_time")

    def validate(self) -> None:
        if self.lr_schedule not in ("noam", "inverse_sqrt", "constant"):
            raise ConfigError(f"train.lr_schedule must be noam, inverse_sqrt or constant, got {self.lr_schedule!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"train.precision must be auto, fp32 or bf16, got {self.precision!r}")
        if self.lr_decay not in ("none", "linear", "cosine"):
            raise ConfigError(f"train.lr_decay must be none, linear or cosine, got {self.lr_decay!r}")
        if self.early_stopping_metric not in ("auto", "bleu", "loss", "accuracy"):
            raise ConfigError("train.early_stopping_metric must be auto, bleu, loss or accuracy, got "
                              f"{self.early_stopping_metric!r}")
        if self.task not in ("auto", *TASKS.values(), "classify"):
            raise ConfigError(f"train.task must be auto, translation, lm, mlm or classify, got {self.task!r}")
        for name in ("max_steps", "warmup_steps", "accumulate", "valid_every", "keep_last"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"train.{name} must be positive, got {getattr(self, name)!r}")
        if self.weight_decay < 0:
            raise ConfigError(f"train.weight_decay must be 0 or more, got {self.weight_decay!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"train.label_smoothing must be in [0, 1), got {self.label_smoothing!r}")
        if self.loader_workers < 0:
            raise ConfigError(f"train.loader_workers must be 0 or more, got {self.loader_workers!r}")


@dataclass(frozen=True)
class DecodeConfig:
    """Search settings; defaults are the paper's §6.1 (beam 4, alpha 0.6, input length + 50)."""

    beam_size: int = 4  # 1 is greedy search
    length_penalty: float = 0.6  # α of the GNMT length penalty
    max_len_a: float = 1.0  # maximum output length = a * source length + b (§6.1: input + 50)
    max_len_b: int = 50
    # False: a sentence ends when no live hypothesis can beat its best finished one (tensor2tensor,
    # the paper's code); True: as soon as beam_size hypotheses have finished (fairseq; faster, shorter)
    early_stopping: bool = False
    batch_size: int = 64  # sentences per decoding batch
    sampling: bool = False  # sample instead of searching (beam_size is then ignored)
    temperature: float = 1.0
    top_k: int = 0  # sample among the k most probable tokens; 0: all
    top_p: float = 1.0  # nucleus sampling: the smallest set of tokens with this much probability
    seed: int = 1  # sampling is repeatable for a given seed and batch size

    def validate(self) -> None:
        if self.beam_size <= 0 or self.batch_size <= 0:
            raise ConfigError("decode.beam_size and decode.batch_size must be positive")
        if self.length_penalty < 0 or self.max_len_a < 0 or self.max_len_b < 0:
            raise ConfigError("decode.length_penalty, decode.max_len_a and decode.max_len_b must be >= 0")
        if self.temperature <= 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ConfigError("decode.temperature must be > 0, decode.top_k >= 0 and decode.top_p in (0, 1]")


@dataclass(frozen=True)
class FinetuneConfig:
    """Fine-tuning a pretrained language model on labelled text (`vaswani finetune`)."""

    # λ of GPT's L = L_task + λ L_pretrain (Radford et al. 2018, eq. 3): the model's own pretraining loss
    # (next-token for decoder_only, masked-token for encoder_only) on the task's text; 0: the task loss alone
    aux_weight: float = 0.5
    init: Literal["pretrained", "scratch"] = "pretrained"  # scratch: the same model, freshly initialised
    labels: list | None = None  # the label names in class order; None: those of data.labelled_train, sorted

    def validate(self) -> None:
        if self.aux_weight < 0:
            raise ConfigError(f"finetune.aux_weight must be 0 or more, got {self.aux_weight!r}")
        if self.init not in ("pretrained", "scratch"):
            raise ConfigError(f"finetune.init must be pretrained or scratch, got {self.init!r}")
        if self.labels is not None and (not isinstance(self.labels, list) or len(self.labels) < 2
                                        or len(set(map(str, self.labels))) != len(self.labels)):
            raise ConfigError(f"finetune.labels must list at least two different labels, got {self.labels!r}")


# The task each model type learns when train.task is auto.
TASKS = {"encoder_decoder": "translation", "decoder_only": "lm", "encoder_only": "mlm"}

_SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "decode": DecodeConfig,
             "finetune": FinetuneConfig}


@dataclass(frozen=True)
class Config:
    """A whole recipe: model, data, train and decode sections."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)

    @property
    def task(self) -> str:
        """translation, lm, mlm or classify: train.task, or the one of model.type (classify with n_classes)."""
        if self.train.task != "auto":
            return self.train.task
        return "classify" if self.model.n_classes else TASKS[self.model.type]

    @property
    def metric(self) -> str:
        """The early-stopping metric: train.early_stopping_metric, or the task's own."""
        if self.train.early_stopping_metric != "auto":
            return self.train.early_stopping_metric
        return {"translation": "bleu", "classify": "accuracy"}.get(self.task, "loss")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        if not isinstance(values, dict):
            raise ConfigError("a config must be a mapping of sections: model, data, train, decode, finetune")
        sections = {}
        for name, section in values.items():
            if name not in _SECTIONS:
                raise ConfigError(f"unknown section '{name}'{_closest(name, list(_SECTIONS))}")
            sections[name] = _section(name, section or {})
        config = cls(**sections)
        for section in (config.data, config.train, config.decode, config.finetune):
            section.validate()
        config._check_task()
        return config

    def _check_task(self) -> None:
        """A task the model can learn; the message names the key to change."""
        task, kind = self.task, self.model.type
        fits = {"translation": ("encoder_decoder",), "lm": ("decoder_only",), "mlm": ("encoder_only",),
                "classify": ("decoder_only", "encoder_only")}[task]
        if kind not in fits:
            raise ConfigError(f"train.task {task} needs model.type {' or '.join(fits)}, but model.type is {kind}; "
                              f"change one of them (train.task: auto picks {TASKS[kind]} for {kind})")
        if task == "classify" and not self.model.n_classes:
            raise ConfigError("train.task classify needs model.n_classes (vaswani finetune sets it from the labels)")
        learned = self.model.positions == "learned"
        if task != "translation" and learned and self.data.block_size > self.model.max_positions:
            raise ConfigError(f"data.block_size ({self.data.block_size}) exceeds model.max_positions "
                              f"({self.model.max_positions}) of the learned positions; raise model.max_positions")
        if self.metric == "bleu" and task != "translation":
            raise ConfigError(f"train.early_stopping_metric bleu needs translation, this run's task is {task}; "
                              "use loss or accuracy (or auto)")
        if self.metric == "accuracy" and task != "classify":
            raise ConfigError(f"train.early_stopping_metric accuracy needs train.task classify, this run's is {task}")

    @classmethod
    def load(cls, path: str | Path, overrides: list[str] = ()) -> Config:
        """Read a YAML recipe and apply `section.key=value` overrides (values parsed as YAML)."""
        path = Path(path)
        try:
            values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {path} not found") from None
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark else ""
            raise ConfigError(f"{path} is not valid YAML{where}: {getattr(error, 'problem', error)}") from None
        return cls.from_dict(apply_overrides(values, overrides))

    def to_dict(self) -> dict[str, Any]:
        return {name: dataclasses.asdict(getattr(self, name)) for name in _SECTIONS}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False), encoding="utf-8")


def _section(name: str, values: dict[str, Any]) -> Any:
    cls = _SECTIONS[name]
    if name == "model":
        preset = values.pop("preset", None) if isinstance(values, dict) else None
        if preset is not None:
            return ModelConfig.preset(preset, **values)
        return ModelConfig.from_dict(values)
    known = [f.name for f in dataclasses.fields(cls)]
    if not isinstance(values, dict):
        raise ConfigError(f"section '{name}' must be a mapping of keys to values")
    for key in values:
        if key not in known:
            raise ConfigError(f"unknown key '{name}.{key}'{_closest(key, known)}")
    return cls(**_coerce(name, cls, values))


def apply_overrides(values: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`train.max_steps=2000` sets values['train']['max_steps'] = 2000."""
    values = {k: dict(v or {}) for k, v in values.items()}
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or not name:
            raise ConfigError(f"override '{item}' must look like section.key=value, e.g. train.max_steps=2000")
        values.setdefault(section, {})[name] = yaml.safe_load(raw)
    return values
