"""The languages of a many-to-many model (NLLB-200, M2M-100, mBART-50: pretrained/multilingual.py): each one's code
token, and where the codes go.

A source carries its own language's code before its text (`[deu_Latn] Ein Hund . </s>`), or, in NLLB's legacy
layout (its tokenizer_config.json's `legacy_behaviour: true`), after its end (`Ein Hund . </s> [deu_Latn]`: the
tokenizer writes that `</s>` and the model appends none, model.source_eos false); the decoder starts from its start
token and its first output is forced to the target language's code (transformers' forced_bos_token_id), so that
every row of a batch may ask for a pair of its own. Stored beside the tokenizer as `languages.json`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from vaswani.data.corpus import DataError
from vaswani.special import EOS_ID

LANGUAGES_FILE = "languages.json"
LAYOUTS = ("prefix", "suffix")  # where a source's code goes (Languages.source)
# ISO 639-3 codes (NLLB's deu_Latn) of the languages the sentence splitter knows by their ISO 639-1 code
_ISO_639_1 = {"eng": "en", "deu": "de", "fra": "fr", "spa": "es", "ita": "it", "nld": "nl", "dan": "da", "pol": "pl",
              "rus": "ru", "bul": "bg", "ell": "el", "hin": "hi", "mar": "mr", "zho": "zh", "amh": "am", "arb": "ar",
              "hye": "hy", "urd": "ur", "pes": "fa", "mya": "my", "jpn": "ja", "kaz": "kk", "slk": "sk"}  # fmt: skip


def iso_language(code: str) -> str:
    """The ISO 639 code inside a model's language code, as the sentence splitter reads it: deu_Latn, de_DE and
    __de__ are "de"."""
    base = _base(code)
    return _ISO_639_1.get(base, base)


def _base(code: str) -> str:
    """The language part of a model's code: deu of deu_Latn, de of de_DE and of __de__."""
    return code.strip("_").split("_")[0]


@dataclass
class Languages:
    """`codes`: each language code and its token id; `source`: where a source's code goes (prefix: before its
    text; suffix: after its text and </s>, NLLB's legacy layout); `default_source`, `default_target`: the codes a
    request without one gets (None: it must name one)."""

    codes: dict[str, int]
    source: str = "prefix"
    default_source: str | None = None
    default_target: str | None = None

    def to_dict(self) -> dict:
        return {
            "codes": self.codes,
            "source": self.source,
            "default_source": self.default_source,
            "default_target": self.default_target,
        }

    def encoded(self) -> bytes:
        """languages.json's bytes, as `load` reads them."""
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=1).encode()

    @classmethod
    def load(cls, path: str | Path) -> Languages:
        path = Path(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            languages = cls(
                {str(k): int(v) for k, v in raw["codes"].items()},
                raw.get("source", "prefix"),
                raw.get("default_source"),
                raw.get("default_target"),
            )
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise DataError(f"{path} is not a languages file ({type(error).__name__}: {error}); import again") from None
        if languages.source not in LAYOUTS:
            raise DataError(f"{path}: source {languages.source!r} is not a layout (prefix or suffix); import again")
        return languages

    def coded(self, ids: list[int], code: int) -> list[int]:
        """A source's ids with its language's `code` where the model reads it: `[code, *ids]`, or (suffix)
        `[*ids, </s>, code]` (fairseq's </s>, EOS_ID). An empty source stays empty (it is not translated)."""
        if not ids:
            return []
        return [*ids, EOS_ID, code] if self.source == "suffix" else [code, *ids]

    def cut(self, ids: list[int], limit: int) -> list[int]:
        """A coded source cut to `limit` ids: its end, where the suffix layout's </s> and code are, kept."""
        tail = 2 if self.source == "suffix" and len(ids) > limit else 0
        return [*ids[: limit - tail], *ids[len(ids) - tail :]]

    def listed(self, near: str | None = None) -> str:
        """Every code, sorted, for a one-line message (NLLB's 202 make a long line: the one that says it all); first
        the ones a mistyped `near` may mean (`Languages.near`), where it has any."""
        meant = self.near(near) if near else []
        return (f"did you mean {' or '.join(meant)}? " if meant else "") + ", ".join(sorted(self.codes))

    def code(self, language: str | None, role: str) -> str:
        """The code of `language` as the `role` ("source" or "target"), its default where None; a one-line
        ValueError naming the option and listing the codes where it is unknown or missing."""
        default = self.default_source if role == "source" else self.default_target
        language = language or default
        option = f'--{role}-language ("{role}_language" in the API)'
        if not language:
            raise ValueError(f"this model translates between many languages: give {option}, one of {self.listed()}")
        if language not in self.codes:
            raise ValueError(f"{role} language {language!r} is not one of this model's: {self.listed(near=language)}")
        return language

    def near(self, language: str) -> list[str]:
        """The codes a mistyped `language` may mean: the same letters in another case or with spaces around
        (deu_latn: deu_Latn; __de__: de), or the ISO 639 language inside them (de or deu: deu_Latn; zh: zho_Hans,
        zho_Hant)."""
        asked = language.strip().strip("_").lower()
        same = [c for c in self.codes if c.lower() == asked]
        return same or sorted(c for c in self.codes if asked in (iso_language(c), _base(c).lower()))

    def id(self, language: str | None, role: str) -> int:
        return self.codes[self.code(language, role)]
