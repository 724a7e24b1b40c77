"""One decoding request: what a caller asks of a search, validated once where it comes in and then passed unchanged.

    request = translator.request(beam_size=5, n_best=2)   # the model's decode section with overrides, checked
    translator.translate_with_details(lines, request=request)

The command line, the HTTP API and the Python API each build one (`DecodeRequest.of`, `Translator.request`); the
Translator, the engine, the server's micro-batcher (whose batch key it is: frozen, so hashable) and the searches
(decode/search.py) take it as it is, never a dozen keyword arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vaswani.config import ConfigError, DecodeConfig
from vaswani.decode.glossary import Glossary
from vaswani.decode.repetition import Repetition

DECODE_FIELDS = frozenset(f.name for f in dataclasses.fields(DecodeConfig))


@dataclass(frozen=True)
class DecodeRequest:
    """The search settings (decode), how many candidates per input (n_best), whether the best one's attention
    weights come back (attention: the Translator's, not the search's), the user's terms (glossary:
    decode/glossary.py, placed by translate/term_placement.py), whether the best one's word alignment comes back
    (alignment: translate/align.py; markup needs it) and whether scores do (scores: each candidate's log-probability
    and its tokens' probabilities; without them a greedy search picks each word from the logits, skipping the
    softmax over the vocabulary, as CTranslate2 does without return_scores: its log_prob and score are then NaN
    and its confidence None). Invalid settings raise ConfigError or ValueError in one line at construction."""

    decode: DecodeConfig = field(default_factory=DecodeConfig)
    n_best: int = 1
    attention: bool = False
    glossary: Glossary | None = None  # terms each translation must hold where the source has them
    alignment: bool = False
    scores: bool = True

    def __post_init__(self) -> None:
        self.decode.validate()
        if self.n_best < 1:
            raise ValueError(f"n_best must be >= 1, got {self.n_best}")
        if not self.decode.sampling and self.n_best > self.decode.beam_size:
            raise ValueError(f"n_best={self.n_best} needs beam_size >= {self.n_best} (it is {self.decode.beam_size})")

    @classmethod
    def of(
        cls,
        base: DecodeConfig | None = None,
        n_best: int = 1,
        attention: bool = False,
        glossary: Glossary | Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        alignment: bool = False,
        scores: bool = True,
        **overrides: Any,
    ) -> DecodeRequest:
        """`base` (default: the paper's settings) with `overrides` (DecodeConfig fields; None keeps base's), as a
        request. A one-line ConfigError names unknown fields and lists the valid ones."""
        unknown = sorted(set(overrides) - DECODE_FIELDS)
        if unknown:
            raise ConfigError(
                f"unknown decoding option(s) {', '.join(unknown)}; valid: {', '.join(sorted(DECODE_FIELDS))}"
            )
        given = {k: v for k, v in overrides.items() if v is not None}
        if glossary is not None and not isinstance(glossary, Glossary):  # pairs or a mapping, checked here
            glossary = Glossary.of(glossary)
        decode = dataclasses.replace(base or DecodeConfig(), **given)
        return cls(decode, n_best, attention, glossary or None, alignment, scores)

    def replace(self, **overrides: Any) -> DecodeRequest:
        """This request with some DecodeConfig fields (or n_best, attention, glossary, alignment, scores) changed,
        validated again."""
        n_best, attention = overrides.pop("n_best", self.n_best), overrides.pop("attention", self.attention)
        glossary, alignment = overrides.pop("glossary", self.glossary), overrides.pop("alignment", self.alignment)
        scores = overrides.pop("scores", self.scores)
        return DecodeRequest.of(self.decode, n_best, attention, glossary, alignment, scores, **overrides)

    @property
    def rows(self) -> int:
        """Rows of a full batch in the search: sentences times beam (a precision is measured for this shape)."""
        return self.decode.batch_size * (1 if self.decode.sampling else self.decode.beam_size)

    @property
    def greedy(self) -> bool:
        """Whether the search is greedy: one candidate from a beam of one, not sampled."""
        return not self.decode.sampling and self.decode.beam_size == 1 and self.n_best == 1

    @property
    def repetition(self) -> Repetition | None:
        """The repetition rules (decode/repetition.py), None where both are off."""
        rules = Repetition(self.decode.no_repeat_ngram, self.decode.repetition_penalty)
        return rules if rules.active else None
