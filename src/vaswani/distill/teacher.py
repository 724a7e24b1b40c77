"""The teacher's pass of `vaswani distill`: the training sources translated in chunks of `distill.chunk_lines`,
each written whole (atomic.py) as it is done, so that a rerun (or another process) skips what is there; under
torchrun, process r translates the chunks i with i % world == r, and since a chunk is translated alone whoever
translates it, the chunks are the same as one process's. Then the distilled corpus: each source with the teacher's
translations that pass the filters (distill section), and a report of what was dropped and why."""

from __future__ import annotations

import functools
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vaswani import atomic
from vaswani.config.distill import DistillConfig

STAMP = "teacher.json"  # what the chunks were made from: the teacher, its settings, the sources
REPORT = "report.json"  # the distilled corpus: how many pairs were kept, and why the others were dropped
SOURCES, TARGETS = "distilled.src", "distilled.tgt"


def chunk_path(work: Path, index: int) -> Path:
    return work / "chunks" / f"{index:06d}.jsonl"


def stamp_of(teacher_dir: Path, settings: DistillConfig, sources: Sequence[str]) -> dict[str, Any]:
    """What decides the chunks: the teacher (its weights file's size and time), the settings, the sources' text."""
    weights = next((p for p in sorted(teacher_dir.glob("*.safetensors")) if p.name != "shortlist.safetensors"), None)
    digest = hashlib.sha256()
    for line in sources:
        digest.update(line.encode("utf-8", "surrogatepass") + b"\n")
    return {
        "teacher": str(teacher_dir.resolve()),
        "weights": None if weights is None else [weights.name, weights.stat().st_size, weights.stat().st_mtime_ns],
        "settings": settings.teacher_settings(),
        "lines": len(sources),
        "sources_sha256": digest.hexdigest(),
    }


def changed(work: Path, stamp: dict[str, Any]) -> bool:
    """Whether `work` holds a pass made from another teacher, other settings or other sources."""
    try:
        old = json.loads((work / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return any((work / "chunks").glob("*.jsonl"))
    return old != stamp


def start(work: Path, stamp: dict[str, Any], log: Callable[[str], None]) -> None:
    """Rank 0, before the pass: chunks made from another teacher, settings or sources are removed (a note says
    so), and the stamp written; chunks made from these are kept and skipped."""
    (work / "chunks").mkdir(parents=True, exist_ok=True)
    path = work / STAMP
    if changed(work, stamp) or not path.is_file():
        stale = sorted((work / "chunks").glob("*.jsonl"))
        if stale:
            log(f"{len(stale)} chunks of the teacher's translations were made from another teacher, other settings "
                "or other sources: translating again")  # fmt: skip
        for chunk in stale:
            atomic.remove(chunk)
        for name in (REPORT, SOURCES, TARGETS):
            atomic.remove(work / name)
        atomic.write_text(path, json.dumps(stamp, indent=1) + "\n")


def pending(work: Path, lines: int, chunk_lines: int, rank: int = 0, world: int = 1) -> list[int]:
    """The chunks this process translates that are not written yet."""
    chunks = range((lines + chunk_lines - 1) // chunk_lines)
    return [i for i in chunks if i % world == rank and not chunk_path(work, i).is_file()]


def translate_chunks(
    translator: Any,
    sources: Sequence[str],
    work: Path,
    settings: DistillConfig,
    chunks: Sequence[int],
    progress: Callable[[int], None] | None = None,
) -> None:
    """Each chunk's sources translated by the teacher (beam, n-best) and written as JSON lines: per source, its
    candidates as [text, mean token probability, log-probability]."""
    request = translator.request(n_best=settings.n_best, **settings.decode)
    size = settings.chunk_lines
    (work / "chunks").mkdir(parents=True, exist_ok=True)
    for index in chunks:
        lines = list(sources[index * size : (index + 1) * size])
        translations = translator.translate_with_details(lines, request, progress=progress)
        records = [
            json.dumps(
                [[c.text, _rounded(c.confidence), round(c.log_prob, 4)] for c in t.candidates], ensure_ascii=False
            )
            for t in translations
        ]
        atomic.write_text(chunk_path(work, index), "".join(record + "\n" for record in records))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def build_corpus(work: Path, sources: Sequence[str], targets: Sequence[str], settings: DistillConfig) -> dict[str, Any]:
    """The distilled corpus from the chunks (every one written): distilled.src and distilled.tgt, one pair per kept
    translation (with distill.pick closest, one per source at most), and the report (also returned), which records
    the settings it was built with (`settings.corpus_settings()`)."""
    kept_src, kept_tgt, dropped = [], [], Counter()
    size = settings.chunk_lines
    for index in range((len(sources) + size - 1) // size):
        records = chunk_path(work, index).read_text(encoding="utf-8").splitlines()
        first = index * size
        if len(records) != len(sources[first : first + size]):
            raise ValueError(f"{chunk_path(work, index)} is incomplete: remove it and run again to translate it")
        for offset, record in enumerate(records):
            source = sources[first + offset]
            original = targets[first + offset]
            taught = []
            for text, confidence, _ in json.loads(record):
                reason = dropped_because(source, text, confidence, original, settings)
                if reason:
                    dropped[reason] += 1
                else:
                    taught.append(text)
            if settings.pick == "closest" and len(taught) > 1:
                dropped["not the closest"] += len(taught) - 1
                taught = [closest(taught, original)]
            kept_src += [source] * len(taught)
            kept_tgt += taught
    atomic.write_text(work / SOURCES, "".join(line + "\n" for line in kept_src))
    atomic.write_text(work / TARGETS, "".join(line + "\n" for line in kept_tgt))
    report = {"sources": len(sources), "translations": len(kept_tgt) + sum(dropped.values()), "kept": len(kept_tgt),
              "dropped": dict(sorted(dropped.items())), "settings": settings.corpus_settings()}  # fmt: skip
    atomic.write_text(work / REPORT, json.dumps(report, indent=1) + "\n")
    return report


def closest(translations: Sequence[str], original: str) -> str:
    """Of the teacher's `translations` of one source, the one with the highest sentence chrF against the original
    target (the first, the teacher's likelier, on a tie): Kim & Rush's sequence-level interpolation, with chrF for
    their sentence BLEU (defined on every sentence, smooth on short ones)."""
    scores = [_chrf().sentence_score(t, [original]).score for t in translations]
    return translations[scores.index(max(scores))]


def corpus_current(work: Path, settings: DistillConfig) -> bool:
    """Whether `work` holds a distilled corpus built with these filters and this pick."""
    try:
        return read_report(work).get("settings") == settings.corpus_settings()
    except (OSError, ValueError):
        return False


def read_report(work: Path) -> dict[str, Any]:
    return json.loads((work / REPORT).read_text(encoding="utf-8"))


@functools.cache
def _chrf() -> Any:
    from sacrebleu.metrics import CHRF

    return CHRF()


def dropped_because(
    source: str, translation: str, confidence: float | None, original: str | None, settings: DistillConfig
) -> str | None:
    """Why the teacher's `translation` of `source` is not taught (None: it is): empty, its length in words against
    the source's, its mean token probability, its sentence chrF against the original target."""
    if not source.strip() or not translation.strip():
        return "empty"
    words, source_words = len(translation.split()), len(source.split())
    ratio = settings.max_len_ratio
    if ratio and max(words, source_words) > 5 and max(words, source_words) > ratio * min(words, source_words):
        return "length ratio"
    if settings.min_confidence and confidence is not None and confidence < settings.min_confidence:
        return "confidence"
    close = settings.min_chrf and original is not None
    if close and _chrf().sentence_score(translation, [original]).score < settings.min_chrf:
        return "chrF"
    return None
