"""One decoding request: what a caller asks of a search, validated once where it comes in and then passed unchanged.

    request = translator.request(beam_size=5, n_best=2)   # the model's decode section with overrides, checked
    translator.translate_with_details(lines, request=request)

The command line, the HTTP API and the Python API each build one (`DecodeRequest.of`, `Translator.request`); the
Translator, the engine, the server's micro-batcher (whose batch key it is: frozen, so hashable) and the searches
(decode/search.py) take it as it is, never a dozen keyword arguments.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from vaswani.config import ConfigError, DecodeConfig
from vaswani.decode.glossary import Glossary
from vaswani.decode.repetition import Repetition

DECODE_FIELDS = frozenset(f.name for f in dataclasses.fields(DecodeConfig))
OTHER_LANGUAGES = (None, "translate", "copy")  # what becomes of a sentence in a language the model does not read


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
    # a model of one source language: translate (mark) or copy the sentences detected as another language
    # (Translator.other_languages); None: not looked at
    other_languages: str | None = None

    def __post_init__(self) -> None:
        self.decode.validate()
        if self.n_best < 1:
            raise ValueError(f"n_best must be >= 1, got {self.n_best}")
        if not self.decode.sampling and self.n_best > self.decode.beam_size:
            raise ValueError(f"n_best={self.n_best} needs beam_size >= {self.n_best} (it is {self.decode.beam_size})")
        if self.other_languages not in OTHER_LANGUAGES:
            raise ValueError(f"other languages: {self.other_languages!r}; give translate or copy")

    @classmethod
    def of(cls, base: DecodeConfig | None = None, **settings: Any) -> DecodeRequest:
        """`base` (default: the paper's settings) with `settings`: this request's own fields (n_best, attention,
        glossary as pairs or a mapping, alignment, scores, other_languages) and DecodeConfig fields (None keeps
        base's), as a request. A one-line ConfigError names unknown fields and lists the valid ones."""
        own = {k: settings.pop(k) for k in REQUEST_FIELDS if k in settings}
        unknown = sorted(set(settings) - DECODE_FIELDS)
        if unknown:
            raise ConfigError(
                f"unknown decoding option(s) {', '.join(unknown)}; valid: {', '.join(sorted(DECODE_FIELDS))}"
            )
        given = {k: v for k, v in settings.items() if v is not None}
        glossary = own.get("glossary")
        if glossary is not None and not isinstance(glossary, Glossary):  # pairs or a mapping, checked here
            glossary = Glossary.of(glossary)
        own["glossary"] = glossary or None
        return cls(dataclasses.replace(base or DecodeConfig(), **given), **own)

    def replace(self, **overrides: Any) -> DecodeRequest:
        """This request with some DecodeConfig fields (or its own: n_best, attention, glossary, ...) changed,
        validated again."""
        own = {k: overrides.pop(k, getattr(self, k)) for k in REQUEST_FIELDS}
        return DecodeRequest.of(self.decode, **own, **overrides)

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


REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(DecodeRequest) if f.name != "decode")
