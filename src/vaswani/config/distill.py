"""The distill section (`vaswani distill`): sequence-level knowledge distillation (Kim & Rush, 2016). A teacher
translates the training sources; its translations, filtered, are the student's targets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from vaswani.config.decode import DecodeConfig
from vaswani.config.fields import ConfigError, build, check_keys, coerce

_DECODE_FIELDS = tuple(f.name for f in dataclasses.fields(DecodeConfig))


@dataclass(frozen=True)
class DistillConfig:
    """How the teacher's translations are made and chosen, and what the student learns from."""

    # How the teacher searches: any decode setting written in this section (beam_size, length_penalty, batch_size,
    # no_repeat_ngram, ...) over the teacher's own decode section (by default the paper's beam 4 and α 0.6: Kim &
    # Rush, the beam's best is the student's target). Held as the keys the section gave, checked as decode's are.
    decode: dict[str, Any] = field(default_factory=dict)
    n_best: int = 1  # translations kept per source, each a training pair (Kim & Rush's n-best variant: 2-5)
    precision: str = "auto"  # the teacher's decoding precision: auto (fp32), fp32, bf16, int8 (a CPU's, faster)
    # Filters (0: off): what a teacher gets wrong is not taught. A translation is dropped when its length in
    # words is over max_len_ratio times its source's or under 1/max_len_ratio of it (a hallucination, a stop);
    # when its mean token probability is under min_confidence; when its sentence chrF against the original
    # target is under min_chrf (a translation of something else).
    max_len_ratio: float = 3.0
    min_confidence: float = 0.0
    min_chrf: float = 0.0
    # The original pairs mixed in, each drawn this many times per epoch (0: the teacher's targets alone;
    # 1: as many original pairs as distilled ones).
    original_weight: float = 0.0
    # all: each of the n-best that passes the filters is a training pair (Kim & Rush's n-best variant). closest:
    # one pair per source, the n-best translation closest to the original target by sentence chrF (Kim & Rush's
    # sequence-level interpolation: what the teacher finds likely and the reference confirms).
    pick: Literal["all", "closest"] = "all"
    # teacher: the student reads and writes with the teacher's tokenizer (its vocabulary sizes and text
    # settings too); own: a tokenizer trained here on the distilled corpus, as `vaswani train` does.
    tokenizer: Literal["teacher", "own"] = "teacher"
    # random: the student starts from random weights (Kim & Rush). teacher: from the teacher's (Shleifer & Rush
    # 2020's shrink and fine-tune): its embeddings and, for each of the student's layers, one of the teacher's
    # spread evenly over its stack, first and last kept (4 -> 2: layers 0 and 3; -> 1: layer 0); needs the
    # teacher's tokenizer and layer shape (d_model, heads, d_ff, activation, norm placement, positions).
    init: Literal["random", "teacher"] = "random"
    chunk_lines: int = 2000  # source lines per chunk of the teacher's pass: what a rerun or another process skips

    @classmethod
    def from_dict(cls, values: Any) -> DistillConfig:
        """The section from a mapping: its own keys, and the teacher's decode settings written among them."""
        values = {} if values is None else values
        own = [f.name for f in dataclasses.fields(cls) if f.name != "decode"]
        check_keys("distill", values, [*own, *_DECODE_FIELDS])
        decode = coerce("distill", DecodeConfig, {k: v for k, v in values.items() if k in _DECODE_FIELDS})
        config = build("distill", cls, {k: v for k, v in values.items() if k in own})
        config = dataclasses.replace(config, decode=decode)
        config.validate()
        return config

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        return {**out.pop("decode"), **out}  # written back as the section is written: decode keys among its own

    @property
    def beam_size(self) -> int:
        """The teacher's beam where this section sets it (else its own decode section's, by default 4)."""
        return self.decode.get("beam_size", DecodeConfig.beam_size)

    def validate(self) -> None:
        try:
            DecodeConfig(**self.decode).validate()
        except (ConfigError, TypeError) as error:
            raise ConfigError(str(error).replace("decode.", "distill.")) from None
        for name in ("n_best", "chunk_lines"):
            if getattr(self, name) < 1:
                raise ConfigError(f"distill.{name} must be 1 or more, got {getattr(self, name)!r}")
        if self.n_best > self.beam_size:
            raise ConfigError(
                f"distill.n_best ({self.n_best}) cannot exceed distill.beam_size ({self.beam_size}); raise the beam"
            )
        if self.max_len_ratio != 0 and self.max_len_ratio < 1:
            raise ConfigError(f"distill.max_len_ratio must be 1 or more (0: off), got {self.max_len_ratio!r}")
        if not 0 <= self.min_confidence <= 1:
            raise ConfigError(f"distill.min_confidence is a probability (0 to 1), got {self.min_confidence!r}")
        if not 0 <= self.min_chrf <= 100:
            raise ConfigError(f"distill.min_chrf is a chrF score (0 to 100), got {self.min_chrf!r}")
        if self.original_weight < 0:
            raise ConfigError(f"distill.original_weight must be 0 or more, got {self.original_weight!r}")
        if self.pick not in ("all", "closest"):
            raise ConfigError(f"distill.pick must be all or closest, got {self.pick!r}")
        if self.pick == "closest" and self.n_best < 2:
            raise ConfigError(
                "distill.pick: closest chooses among the teacher's n-best: set distill.n_best to 2 or more"
            )
        if self.tokenizer not in ("teacher", "own"):
            raise ConfigError(f"distill.tokenizer must be teacher or own, got {self.tokenizer!r}")
        if self.init not in ("random", "teacher"):
            raise ConfigError(f"distill.init must be random or teacher, got {self.init!r}")
        if self.init == "teacher" and self.tokenizer != "teacher":
            raise ConfigError(
                "distill.init: teacher copies the teacher's embeddings: it needs distill.tokenizer: teacher"
            )
        if self.precision not in ("auto", "fp32", "bf16", "int8"):
            raise ConfigError(f"distill.precision must be auto, fp32, bf16 or int8, got {self.precision!r}")

    def teacher_settings(self) -> dict[str, Any]:
        """What decides the teacher's translations (a rerun with other values starts the pass again)."""
        return {**self.decode, "n_best": self.n_best, "precision": self.precision, "chunk_lines": self.chunk_lines}

    def corpus_settings(self) -> dict[str, Any]:
        """What decides the distilled corpus made from the teacher's translations (a rerun with other values builds
        it again)."""
        return {"max_len_ratio": self.max_len_ratio, "min_confidence": self.min_confidence,
                "min_chrf": self.min_chrf, "pick": self.pick}  # fmt: skip
