"""The model section: the Transformer's architecture (§3) and its two descendants, and the presets of the
paper's Table 3. What a model type is comes from its row in vaswani/families.py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from vaswani.config.fields import ConfigError, build, closest, written
from vaswani.families import FAMILIES, MODEL_TYPES, family
from vaswani.special import BOS_ID, EOS_ID, PAD_ID


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
    # §3.3: max(0, xW1 + b1)W2 + b2. gelu: BERT's (erf); gelu_tanh: GPT-2's tanh approximation ("gelu_new");
    # silu: x * sigmoid(x), Marian's "swish" (OPUS-MT).
    activation: Literal["relu", "gelu", "gelu_tanh", "silu"] = "relu"
    norm_first: bool = False  # False: post-norm, LayerNorm(x + Sublayer(x)) as in §3.1
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"  # §3.5; learned is Table 3 row (E)
    # The longest sequence a stack reads: sources are cut to it (EOS included), outputs end at it, learned
    # positions have this many rows. Sinusoids are tabulated up to it and computed beyond (generation).
    max_positions: int = 1024
    share_embeddings: bool = True  # §3.4: one matrix for source, target and pre-softmax weights
    # The pre-softmax weights are the target embedding (§3.4). false: a matrix of its own, whether or not the
    # input embeddings are shared (Marian's tie_word_embeddings: false, GPT-2's or BERT's untied heads).
    tie_output: bool = True
    scale_embeddings: bool = True  # §3.4: token embeddings times sqrt(d_model); GPT-2 and BERT do not scale
    # A bias added to the logits (Marian's final_logits_bias); §3.4's pre-softmax projection has none.
    output_bias: bool = False
    # The words the output layer can produce. all: the whole target vocabulary (§3.4). target: the pieces the
    # training targets use (a joint vocabulary's target side with EOS: 4,270 of Multi30k's 8,000 for English), set by
    # `vaswani train` from the prepared data; the softmax of the loss covers those only, and decoding gives the
    # others a logit of -10,000 (`Transformer.logit_bias`). A smaller output projection: the quick recipe makes
    # more updates in its time (docs/benchmarks.md, "Quality").
    output_words: Literal["all", "target"] = "all"
    layer_norm_eps: float = 1e-6  # the tensor2tensor reference value
    # BERT's additions (Devlin et al. 2019), off in the paper: a LayerNorm over the summed embeddings, before
    # their dropout; the masked-LM head's transform (dense, activation, LayerNorm) between the last layer and
    # the pre-softmax projection (decoder_only and encoder_only); the pooler (dense, tanh) between the pooled
    # state and the classifier.
    embedding_norm: bool = False
    # BERT's token type ("segment") embeddings: this many vectors, one added to each position's embedding (0: none;
    # BERT has 2). pairs: the classifier reads sentence pairs `[CLS] a [SEP] b [SEP]`, segment B after the first
    # [SEP] (paraphrase, entailment, question-answer matching); needs segments >= 2.
    segments: int = 0
    pairs: bool = False
    output_transform: bool = False
    pooler: bool = False
    pad_id: int = PAD_ID  # vaswani/special.py: the ids every vocabulary trained here gives its special tokens
    bos_id: int = BOS_ID  # the decoder's first input; may be pad_id (Marian's decoders start from PAD)
    eos_id: int = EOS_ID  # decoder_only: may equal pad_id and bos_id (GPT-2's one special token; see _validate)
    # Every path that feeds the encoder appends eos_id to a source (the search, training's batches, alignment,
    # CTranslate2's add_source_eos). false: a source ends as its tokenizer wrote it (NLLB's legacy layout,
    # `tokens </s> code`: data/languages.py); an encoder_decoder's option.
    source_eos: bool = True
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
        return family(self.type).pool if self.pool == "auto" else self.pool

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def source_end(self) -> tuple[int, ...]:
        """What is appended to every source before the encoder reads it: (eos_id,), or nothing (source_eos)."""
        return (self.eos_id,) if self.source_eos else ()

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def unused(self) -> frozenset[str]:
        """The fields that do not take effect given the others (read in nn/transformer.py, nn/language_model.py)."""
        names = set()
        if not self.n_classes:
            names.update(("n_classes", "pool", "pooler"))  # no classifier (a fine-tuning config sets model.pool)
        return frozenset(names)

    def in_effect(self) -> dict[str, Any]:
        """The fields that take effect, with their values: what config.yaml and `vaswani model` show."""
        return written(self, self.unused())

    def _validate(self) -> None:
        self._validate_kind()
        self._validate_sizes()

    def _validate_kind(self) -> None:
        """What the model is: its type, and the options that apply to some types only."""
        if self.type not in MODEL_TYPES:
            raise ConfigError(
                f"model.type must be one of {', '.join(MODEL_TYPES)}, got {self.type!r}"
                f"{closest(str(self.type), list(MODEL_TYPES))}"
            )
        if family(self.type).one_vocabulary:
            if self.n_decoder_layers is not None:
                raise ConfigError(
                    f"model.n_decoder_layers applies to a model with a decoder after an encoder (this "
                    f"is {self.type}, one stack); remove it and set model.n_layers"
                )
            if not self.share_embeddings or self.src_vocab_size != self.tgt_vocab_size:
                raise ConfigError(
                    f"model.type {self.type} has one vocabulary: model.share_embeddings must be true "
                    f"and model.src_vocab_size ({self.src_vocab_size}) equal model.tgt_vocab_size "
                    f"({self.tgt_vocab_size})"
                )
        if self.n_classes < 0 or isinstance(self.n_classes, bool):
            raise ConfigError(f"model.n_classes must be 0 (no classifier) or more, got {self.n_classes!r}")
        if self.n_classes and "classify" not in family(self.type).tasks:
            raise ConfigError(
                f"model.n_classes needs a model.type that classifies ({' or '.join(fitting('classify'))}"
                f"; a classifier reads one stack's states); set model.n_classes: 0 for {self.type}"
            )
        if self.output_transform and family(self.type).stack == "encoder-decoder":
            raise ConfigError(
                f"model.output_transform applies to a language model ({' or '.join(fitting('classify'))}); "
                f"remove it for {self.type}"
            )
        if self.output_words not in ("all", "target"):
            raise ConfigError(f"model.output_words must be all or target, got {self.output_words!r}")
        if self.output_words == "target" and self.type != "encoder_decoder":
            raise ConfigError(
                f"model.output_words target applies to a translation model (encoder_decoder), whose targets are "
                f"another language; a {self.type} model predicts its own vocabulary: set model.output_words: all"
            )
        if not isinstance(self.segments, int) or isinstance(self.segments, bool) or self.segments < 0:
            raise ConfigError(f"model.segments must be 0 (none) or more, got {self.segments!r}")
        if self.pairs and (self.segments < 2 or self.type != "encoder_only"):
            raise ConfigError(
                "model.pairs needs an encoder_only model with model.segments >= 2 (segment A and segment B), "
                f"got type {self.type} with segments {self.segments}"
            )
        if not self.source_eos and self.type != "encoder_decoder":
            raise ConfigError(f"model.source_eos applies to an encoder_decoder's sources; remove it for {self.type}")
        if self.pool not in ("auto", "first", "last", "mean"):
            raise ConfigError(f"model.pool must be auto, first, last or mean, got {self.pool!r}")

    def _validate_sizes(self) -> None:
        """Its dimensions, rates, activation, positions and special ids."""
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
        if self.activation not in ACTIVATIONS:
            raise ConfigError(
                f"model.activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}"
                f"{closest(str(self.activation), list(ACTIVATIONS))}"
            )
        if self.positions not in ("sinusoidal", "learned"):
            raise ConfigError(f"model.positions must be 'sinusoidal' or 'learned', got {self.positions!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                f"model.share_embeddings needs one vocabulary, but model.src_vocab_size={self.src_vocab_size} and "
                f"model.tgt_vocab_size={self.tgt_vocab_size}; set share_embeddings: false or use a joint vocabulary"
            )
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            if not 0 <= value < min(self.src_vocab_size, self.tgt_vocab_size):
                raise ConfigError(f"model.{name}={value} is outside the vocabulary")
        # A decoder-only model is never fed BOS by the search (a prompt starts it) and pads only past its last
        # real token, so one token may be all three: GPT-2's <|endoftext|> (vaswani/pretrained/gpt2.py). An
        # encoder-decoder's decoder may start from EOS (fairseq's: NLLB, M2M-100, mBART; pretrained/multilingual.py).
        if self.eos_id == self.pad_id and family(self.type).stack != "decoder":
            raise ConfigError(f"model.eos_id must differ from pad_id, got {ids}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named architecture (see PRESETS), with any field overridden, e.g. `preset("base", src_vocab_size=8000)`."""
        if not isinstance(name, str) or name not in PRESETS:
            raise ConfigError(
                f"unknown model preset '{name}'{closest(name, list(PRESETS))}; choose one of {', '.join(PRESETS)}"
            )
        fields = {**PRESETS[name], **overrides}
        if "vocab_size" in fields:  # convenience for the shared-vocabulary case
            size = fields.pop("vocab_size")
            fields.setdefault("src_vocab_size", size)
            fields.setdefault("tgt_vocab_size", size)
        return cls.from_dict(fields)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """Build from a mapping; an unknown key is an error naming the closest valid key."""
        return build("model", cls, values)

    def to_dict(self) -> dict[str, Any]:
        """Every field with its value (`in_effect` leaves out those that do not take effect)."""
        return dataclasses.asdict(self)


ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")


def fitting(task: str) -> list[str]:
    """The model types that can learn `task`."""
    return [f.type for f in FAMILIES.values() if task in f.tasks]


def _divisor_near(d_model: int, n_heads: int, reach: int = 4096) -> int:
    """The divisor of d_model nearest n_heads (the smaller on a tie), searched within `reach` of it: a d_model of
    10^12 is not walked through (1 divides everything)."""
    if n_heads >= d_model:
        return d_model
    for distance in range(min(reach, n_heads)):
        for h in (n_heads - distance, n_heads + distance):
            if 0 < h <= d_model and d_model % h == 0:
                return h
    return 1


# Table 3 of the paper, and small models that train on a CPU.
PRESETS: dict[str, dict[str, Any]] = {
    "base": {},
    "big": {"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3},
    # 3+3 layers at d_model 256: the size our CPU benchmarks use.
    "small": {"d_model": 256, "d_ff": 1024, "n_heads": 4, "n_layers": 3},
    # Wu et al. (2021), the best published text-only Multi30k model: 4+4 layers, d_model 128.
    "tiny": {"d_model": 128, "d_ff": 256, "n_heads": 4, "n_layers": 4, "dropout": 0.3},
    # Students for `vaswani distill` (a teacher's translations make a shallow decoder enough; decoding time is
    # mostly the decoder's): a deep encoder and a one-layer decoder at the base width (Kasai et al. 2021, "Deep
    # Encoder, Shallow Decoder": 12-1 with distillation matched 6-6 on WMT en-de), and Bergamot's "tiny" shape
    # (Firefox Translations: 6 encoder layers, 2 decoder layers, d_model 256, FFN 1,536).
    "student-12-1": {"n_layers": 12, "n_decoder_layers": 1},
    "student-6-1": {"n_layers": 6, "n_decoder_layers": 1},
    "student-tiny": {"d_model": 256, "d_ff": 1536, "n_heads": 8, "n_layers": 6, "n_decoder_layers": 2},
}
