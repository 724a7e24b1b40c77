"""How a model is told its languages, chosen once when a Translator is loaded (`policy_for`), and asked by every
caller (the Python API, the CLI, the server) in the same words:

- `OneLanguage`: a model of one source and one target language (trained here, most OPUS-MT pairs): a target language
  is refused, a source language only says whose sentence rules split a document (an ISO 639 code).
- `LanguageTokens`: OPUS-MT's multilingual models: the target asked for by a `>>lang<<` piece before the sentence.
- `LanguageCodes`: many-to-many models (NLLB-200, M2M-100, mBART-50; data/languages.py): the source starts with its
  language's code, the first output token is forced to the target's, one per sentence if need be.

    policy = policy_for(tokenizer, config)
    policy.check(target, source)                      # before any input is read: one line listing the model's
    ids = policy.encode(tokenizer, texts, target, source)
    policy.forced(target, len(texts))                 # the first output token per sentence, or None
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from vaswani.data.language_codes import iso_to_nllb
from vaswani.data.languages import iso_language
from vaswani.data.tokenizer import LANGUAGE_TOKEN

if TYPE_CHECKING:
    from vaswani.config import Config
    from vaswani.data.languages import Languages
    from vaswani.data.tokenizer import Tokenizer

_LEADING_LANGUAGE = re.compile(r"^>>[^<>\s]+<<\s*")
Targets = str | Sequence[str | None] | None  # one target language for all sentences, or one per sentence
AUTO = "auto"  # a source language to detect, sentence by sentence (translate/language_id.py)


class OneLanguage:
    """A model of one source and one target language."""

    def __init__(self, config: Config) -> None:
        self.source, self.target = config.data.languages()

    def check(self, target: str | None, source: str | None) -> None:
        """The languages a request names, checked before any input is read (a one-line ValueError)."""
        self.target_piece(target)
        if source == AUTO:
            raise ValueError(
                '--source-language auto ("source_language": "auto" in the API) picks each sentence\'s code for a '
                "many-to-many model (NLLB, M2M-100, mBART-50); this model reads one language: leave it out"
            )
        if source is not None and not re.fullmatch(r"[a-z]{2,3}", source):
            raise ValueError(
                f'--source-language {source!r} ("source_language" in the API): give an ISO 639 code such as de or en'
            )

    def target_piece(self, target: str | None) -> str | None:
        """The `>>lang<<` piece asking for `target` (None: none needed)."""
        if target:
            raise ValueError(
                f"target language {target!r}: this model translates into one language (it has no >>lang<< "
                "tokens); leave the target language out"
            )
        return None

    def encode(self, tokenizer: Tokenizer, texts: list[str], target: Targets, source: str | None) -> list[list[int]]:
        """Source token ids of the (normalised) `texts`, before EOS, as this model is asked for `target`."""
        if target is not None and not isinstance(target, str):
            raise ValueError("a target language per sentence needs a many-to-many model (NLLB, M2M-100, mBART-50)")
        piece = self.target_piece(target)
        if source:
            raise ValueError(f"source language {source!r}: this model reads one source language; leave it out")
        if piece is not None:
            texts = [f"{piece} {_LEADING_LANGUAGE.sub('', s)}" if s else s for s in texts]
        return tokenizer.encode_src(texts)

    def forced(self, target: Targets, n: int) -> list[int] | None:
        """The first output token of each of `n` sentences, where the model's target language is one (None)."""
        return None

    def per_sentence(self, target: str | None, n: int) -> list[str | None] | None:
        """`target` for each of `n` sentences where the model takes one per sentence (a batch mixing requests)."""
        return None

    def model_source(self, source: str | None) -> str | None:
        """What of a request's source language the model reads (None: it only says how sentences are split)."""
        return None

    def sentence_language(self, source: str | None) -> str:
        """The ISO 639 language sentences are split in: the one named, or the one the model was trained on."""
        return source or self.source

    def reads(self, iso: str) -> bool | None:
        """Whether the model reads a text in the ISO 639 language `iso` as its source (None where its source language
        is not known: an imported pair whose files name none, a model of many sources)."""
        return iso_language(iso) == iso_language(self.source) if self.source else None

    def target_iso(self, target: str | None) -> str | None:
        """The ISO 639 language translations are written in (their sentences are joined with spaces or not), None
        where neither the request nor the model's training files say it (an imported one-pair model)."""
        target = target or self.target
        return iso_language(target) if target else None

    @property
    def targets(self) -> list[str]:
        """The target languages a request may name (empty: none, the model's own)."""
        return []

    @property
    def sources(self) -> list[str]:
        """The source language codes a request may name for the model to read (empty: none)."""
        return []


class LanguageTokens(OneLanguage):
    """OPUS-MT's multilingual models: `>>lang<<` before the sentence asks for its target language."""

    def __init__(self, config: Config, pieces: Sequence[str]) -> None:
        super().__init__(config)
        self.pieces = tuple(pieces)

    def target_piece(self, target: str | None) -> str | None:
        if not target:
            return None
        piece = target if LANGUAGE_TOKEN.fullmatch(target) else f">>{target}<<"
        if piece in self.pieces:
            return piece
        raise ValueError(f"target language {target!r}: this model has no {piece} token; it translates into {self}")

    def encode(self, tokenizer: Tokenizer, texts: list[str], target: Targets, source: str | None) -> list[list[int]]:
        if target is None and len(self.pieces) > 1:
            bare = next((i for i, s in enumerate(texts) if s and not _LEADING_LANGUAGE.match(s)), None)
            if bare is not None:
                raise ValueError(
                    f"sentence {bare + 1}: no target language, and this model translates into {self}; give one "
                    '(--target-language, "target_language" in the API, the page\'s Target menu) or start the '
                    "sentence with >>lang<<"
                )
        return super().encode(tokenizer, texts, target, source)

    @property
    def targets(self) -> list[str]:
        return [piece[2:-2] for piece in self.pieces]

    def __str__(self) -> str:
        names = self.targets
        return ", ".join(names[:40]) + (f" and {len(names) - 40} more" if len(names) > 40 else "")


class LanguageCodes(OneLanguage):
    """Many-to-many models: a code at the source's start, the target's code forced as the first output token."""

    def __init__(self, config: Config, languages: Languages) -> None:
        super().__init__(config)
        self.languages = languages

    def check(self, target: str | None, source: str | None) -> None:
        self.languages.code(target, "target")
        if source != AUTO:
            self.languages.code(source, "source")

    def code_for(self, iso: str) -> str | None:
        """The model's code of an ISO 639 language (de: NLLB's deu_Latn, M2M-100's de, mBART-50's de_DE), None
        where the model has none."""
        codes = self.languages.codes
        if iso in codes:
            return iso
        nllb = iso_to_nllb(iso)
        if nllb in codes:
            return nllb
        return next((code for code in sorted(codes) if code.startswith(f"{iso}_")), None)

    def target_piece(self, target: str | None) -> str | None:
        self.languages.code(target, "target")
        return None

    def encode(self, tokenizer: Tokenizer, texts: list[str], target: Targets, source: Targets) -> list[list[int]]:
        self.forced(target, len(texts))
        encoded = tokenizer.encode_src(texts)
        if source is None or isinstance(source, str):
            code = self.languages.id(source, "source")
            return [self.languages.coded(ids, code) for ids in encoded]
        if len(source) != len(texts):  # one source language a sentence (detected: --source-language auto)
            raise ValueError(f"{len(source)} source languages for {len(texts)} sentences")
        pairs = zip(encoded, source, strict=True)  # an empty sentence stays empty, whatever its language
        return [
            self.languages.coded(ids, self.languages.id(language, "source")) if ids else [] for ids, language in pairs
        ]

    def forced(self, target: Targets, n: int) -> list[int] | None:
        if target is None or isinstance(target, str):
            return [self.languages.id(target, "target")] * n
        if len(target) != n:
            raise ValueError(f"{len(target)} target languages for {n} sentences")
        return [self.languages.id(language, "target") for language in target]

    def per_sentence(self, target: str | None, n: int) -> list[str | None] | None:
        self.forced(target, n)
        return [target] * n

    def model_source(self, source: str | None) -> str | None:
        return source

    def reads(self, iso: str) -> bool | None:
        return None  # many sources: --source-language auto reads each sentence in its own

    def sentence_language(self, source: str | None) -> str:
        return iso_language(source) if source and source != AUTO else self.source or "en"

    @property
    def targets(self) -> list[str]:
        return sorted(self.languages.codes)

    @property
    def sources(self) -> list[str]:
        return sorted(self.languages.codes)


def policy_for(tokenizer: Tokenizer, config: Config) -> OneLanguage:
    """The policy of a model with this tokenizer: its codes, its `>>lang<<` pieces, or one language."""
    if tokenizer.languages is not None:
        return LanguageCodes(config, tokenizer.languages)
    if tokenizer.language_tokens:
        return LanguageTokens(config, tokenizer.language_tokens)
    return OneLanguage(config)
