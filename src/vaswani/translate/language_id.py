"""Which language a text is in: `vaswani detect`, `POST /v1/detect`.

The identifier is py3langid (langid.py's model: 140 languages, 4.4 MB, offline from its wheel, `pip install
'vaswani[detect]'`), chosen by measurement against lingua and fastText's lid.176 on FLORES-200 (docs/benchmarks.md,
"Language identification": 97.8% of sentences right, macro-averaged over 108 FLORES languages, 7,600 sentences/s).
Its probabilities are normalised over its languages; an answer below `THRESHOLD` is `und` (undetermined) rather than a
confident wrong guess: the threshold keeps wrong answers above it to ≤ 2% on 3-word snippets, chosen on the first half
of FLORES dev's sentences (the second half checked it). A text without letters (numbers, emoji, punctuation) is `und`.

    identifier = LanguageIdentifier()
    identifier.detect(["Ein Hund läuft.", "12:30"])    # [Detection("de", 0.99...), Detection("und", 0.0)]
    identifier.ranked("Ein Hund läuft.", 3)             # the three likeliest, best first
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from vaswani.data.language_codes import ALIASES, iso_to_nllb

THRESHOLD = 0.58  # benchmarks/language_id.py: confident wrong ≤ 2% on 3-word snippets of FLORES dev's first half
UNDETERMINED = "und"
CODES = ("iso", "nllb")  # how a language is written: ISO 639 (639-1 where there is one), NLLB-200's code


@dataclass(frozen=True)
class Detection:
    """A text's language (ISO 639, or NLLB's code; `und` where not sure) and its probability."""

    language: str
    probability: float

    def to_dict(self, decimals: int = 4) -> dict:
        return {"language": self.language, "probability": round(self.probability, decimals)}


class LanguageIdentifier:
    """Texts' languages (the module's docstring). `threshold`: below it a text is `und`; `codes`: iso or nllb."""

    def __init__(self, threshold: float = THRESHOLD, codes: str = "iso") -> None:
        if not 0 <= threshold <= 1:
            raise ValueError(f"--threshold {threshold}: give a probability between 0 and 1")
        if codes not in CODES:
            raise ValueError(f"--codes {codes}: give one of {', '.join(CODES)}")
        self.threshold, self.codes = threshold, codes

    @property
    def _model(self):
        return _model()

    def load(self) -> None:
        """The model loaded now (a one-line ImportError where py3langid is missing), not at the first text."""
        _model()

    @property
    def languages(self) -> list[str]:
        """Every language the identifier tells apart, as `codes` writes them (those NLLB has, for nllb)."""
        found = {self._written(str(code)) for code in self._model.nb_classes}
        return sorted(code for code in found if code != UNDETERMINED)

    def detect(self, texts: Sequence[str]) -> list[Detection]:
        """Each text's language and its probability; `und` below the threshold or without letters."""
        out = []
        for text in texts:
            best = self.ranked(text, 1)
            sure = best and best[0].probability >= self.threshold
            out.append(best[0] if sure else Detection(UNDETERMINED, best[0].probability if best else 0.0))
        return out

    def ranked(self, text: str, k: int = 3) -> list[Detection]:
        """The `k` likeliest languages of `text` and their probabilities, best first, whatever the threshold (none
        where the text has no letters; with nllb codes, the languages NLLB has)."""
        if not any(c.isalpha() for c in text):
            return []
        out = []
        for code, probability in self._model.rank(" ".join(text.split())):
            written = self._written(ALIASES.get(code, code))
            if written != UNDETERMINED:
                out.append(Detection(written, float(probability)))
            if len(out) == k:
                break
        return out

    def _written(self, iso: str) -> str:
        if self.codes == "nllb":
            return iso_to_nllb(iso) or UNDETERMINED
        return iso


@functools.cache
def _model():
    """py3langid's model, loaded once per process: every identifier (the CLI's, the server's for each code style,
    a Translator's for --source-language auto) shares it (it holds ~100 MB)."""
    try:
        from py3langid.langid import MODEL_DIR, MODEL_FILE
        from py3langid.langid import LanguageIdentifier as Model
    except ImportError:
        raise ImportError("language detection needs py3langid: pip install 'vaswani[detect]'") from None
    return Model.from_modelpath(MODEL_DIR / MODEL_FILE, norm_probs=True)
