"""Configuration: frozen dataclasses with the paper's defaults, and the presets of its Table 3.

YAML recipes (added with `vaswani train`) only override these defaults; the defaults live here.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, Literal


class ConfigError(ValueError):
    """A configuration value or key that cannot be used; the message says which and how to fix it."""


def _closest(name: str, choices: list[str]) -> str:
    match = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the encoder-decoder Transformer (§3). Defaults are the paper's base model."""

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

    def __post_init__(self) -> None:
        self._validate()

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def _validate(self) -> None:
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
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
