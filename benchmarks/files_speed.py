"""Files translated as fast as their text (issue 77): a 30-page DOCX and a 1,000-cue SRT through `vaswani translate`
against the same text through `vaswani translate --document`, whole commands timed in turn (file, text, file, text,
...), the ratio taken pair by pair; the goal: the file within 1.2x of its text (the format's handling ≤ 20%).

    python benchmarks/files_speed.py runs/quick            # 3 pairs each; benchmarks/results/files_speed.json
    python benchmarks/files_speed.py runs/quick --pairs 5

The files are built by their formats' own libraries from Multi30k's test sets (German), as real ones hold their text:
- DOCX (python-docx): the first 1,400 sentences of test_2016_flickr then test_2017_flickr (~15,000 words: 30 pages
  of 500), in paragraphs of 4 to 6 sentences; a heading every 12 paragraphs; a word in every third sentence bold,
  one in every fifth italic; a 3x2 table every 40 paragraphs (its cells the next sentences); a header and a footer.
- SRT (pysubs2's timing format, written here): cues from test_2016_flickr's sentences, a sentence of more than 8
  words spread over two cues (cut between words), every 7th cue in italics, every 11th two speakers' lines
  ("- ..."), 2 seconds a cue; until 1,000 cues.
The text each is measured against: the same sentences as a plain document (the DOCX's paragraphs separated by blank
lines; the SRT's sentences one per line in paragraphs of five), translated with --document, so that both sides
translate the same sentences and differ only in the format's reading, alignment and writing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vaswani.runtime.machine import cpu_name

DATA = Path(__file__).resolve().parents[2] / "shared/data/multi30k/raw"
RESULTS = Path(__file__).parent / "results" / "files_speed.json"


def sentences(name: str) -> list[str]:
    with gzip.open(DATA / f"{name}.de.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def build_docx(lines: list[str], path: Path) -> str:
    """The DOCX (this module's docstring) written to `path`; its text as a plain document."""
    import docx

    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = "Bildbeschreibungen aus Multi30k"
    document.sections[0].footer.paragraphs[0].text = "Testdaten, nicht zur Veröffentlichung"
    plain, i, paragraph_number = [], 0, 0
    while i < len(lines):
        if paragraph_number % 12 == 0:
            title = f"Teil {paragraph_number // 12 + 1}: {lines[i].rstrip('.')}"
            document.add_heading(title, 1)
            plain.append(title)
            i += 1
            paragraph_number += 1
            continue
        if paragraph_number % 40 == 39 and i + 6 <= len(lines):
            table = document.add_table(rows=3, cols=2)
            for k, cell in enumerate(c for row in table.rows for c in row.cells):
                cell.text = lines[i + k]
                plain.append(lines[i + k])
            i += 6
            paragraph_number += 1
            continue
        size = 4 + paragraph_number % 3
        group = lines[i : i + size]
        p = document.add_paragraph()
        for k, sentence in enumerate(group):
            n = i + k
            words = sentence.split(" ")
            if n % 3 == 0 and len(words) > 3:  # a word in bold, as an author marks one
                p.add_run(" ".join(words[:2]) + " ")
                p.add_run(words[2]).bold = True
                p.add_run(" " + " ".join(words[3:]))
            elif n % 5 == 0 and len(words) > 2:
                p.add_run(words[0] + " ")
                p.add_run(words[1]).italic = True
                p.add_run(" " + " ".join(words[2:]))
            else:
                p.add_run(sentence)
            if k < len(group) - 1:
                p.add_run(" ")
        plain.append(" ".join(group))
        i += size
        paragraph_number += 1
    document.save(path)
    return "\n\n".join(plain) + "\n"


def build_srt(lines: list[str], path: Path, cues: int = 1000) -> str:
    """The SRT (this module's docstring) written to `path`; its text as a plain document."""

    def stamp(ms: int) -> str:
        return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"

    blocks, plain, i = [], [], 0
    while len(blocks) < cues:
        sentence = lines[i % len(lines)]
        i += 1
        n = len(blocks)
        if n % 11 == 10:  # two speakers
            other = lines[i % len(lines)]
            i += 1
            texts = [f"- {sentence}\n- {other}"]
            plain += [sentence, other]
        else:
            words = sentence.split(" ")
            texts = (
                [" ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])]
                if len(words) > 8
                else [sentence]
            )
            plain.append(sentence)
        for text in texts[: cues - len(blocks)]:
            k = len(blocks)
            text = f"<i>{text}</i>" if k % 7 == 6 else text
            blocks.append(f"{k + 1}\n{stamp(1000 + 2000 * k)} --> {stamp(2900 + 2000 * k)}\n{text}\n")
    path.write_text("\n".join(blocks), encoding="utf-8")
    paragraphs = [" ".join(plain[j : j + 5]) for j in range(0, len(plain), 5)]
    return "\n\n".join(paragraphs) + "\n"


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {run.stderr.strip()[-500:]}")
    return seconds


def pair(model: str, file: Path, text: Path, pairs: int, out: Path) -> dict:
    """The file's command and the text's, in turn, `pairs` times after one warm-up each."""
    base = [sys.executable, "-m", "vaswani.cli", "translate", model]
    as_file = [*base, "-i", str(file), "-o", str(out / f"out{file.suffix}")]
    as_text = [*base, "-i", str(text), "-o", str(out / "out.txt"), "--document"]
    timed(as_file), timed(as_text)
    files, texts = [], []
    for _ in range(pairs):
        files.append(timed(as_file))
        texts.append(timed(as_text))
    ratios = [f / t for f, t in zip(files, texts, strict=True)]
    return {
        "file_seconds": [round(x, 2) for x in files],
        "document_seconds": [round(x, 2) for x in texts],
        "ratio_median": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = sentences("test_2016_flickr") + sentences("test_2017_flickr")
    row = {"commit": commit, "date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "model": args.model_dir,
           "data": "multi30k test_2016_flickr + test_2017_flickr (de)"}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        docx_text = build_docx(lines[:1400], work / "report.docx")
        (work / "report.txt").write_text(docx_text, encoding="utf-8")
        srt_text = build_srt(lines[:1000], work / "talk.srt")
        (work / "talk.txt").write_text(srt_text, encoding="utf-8")
        words = len(docx_text.split())
        row["docx"] = {"words": words, "pages_of_500_words": round(words / 500, 1),
                       **pair(args.model_dir, work / "report.docx", work / "report.txt", args.pairs, work)}  # fmt: skip
        print("docx", json.dumps(row["docx"]), flush=True)
        row["srt"] = {"cues": 1000, **pair(args.model_dir, work / "talk.srt", work / "talk.txt", args.pairs, work)}
        print("srt", json.dumps(row["srt"]), flush=True)
    RESULTS.write_text(json.dumps(row, indent=1, ensure_ascii=False) + "\n")
    print(f"written {RESULTS}")


if __name__ == "__main__":
    main()
