"""A change's effect on translating: the test set translated by the package as it is and as it was at another commit,
each in a fresh process, in turns, with the same model; words/s and whether the outputs are the same.

    python benchmarks/translate_before_after.py runs/quick --before f359022 --rounds 2
    python benchmarks/translate_before_after.py runs/quick --before f359022 --precisions fp32 --beams 1

The other commit's src/ is checked out into a temporary git worktree and put first on PYTHONPATH; the model and the
test set are the same. Each measurement: Multi30k test_2016_flickr (1,000 sources) translated three times at batch
64 after a warm-up batch, the median kept; words/s counts the source's words. Writes
benchmarks/results/translate_before_after.json (--out) with the commit, the CPU and the split.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from distill import timed_translations
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "../shared/data/multi30k/raw/test_2016_flickr.de.gz"


def measure(model_dir: str, precision: str, beam: int) -> dict:
    """One process's measurement (the module docstring), with the package on its PYTHONPATH."""
    import torch

    from vaswani.data.corpus import read_lines
    from vaswani.translate.translator import Translator

    sources = read_lines(SOURCES)
    outputs, runs = timed_translations(Translator.load(model_dir, precision=precision), sources, beam)
    seconds = statistics.median(runs)
    return {
        "seconds": round(seconds, 3),
        "words_per_s": round(sum(len(s.split()) for s in sources) / seconds, 1),
        "outputs_sha256": hashlib.sha256("\n".join(outputs).encode()).hexdigest(),
        "threads": torch.get_num_threads(),
    }


def measured(src: Path, model_dir: str, precision: str, beam: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, __file__, "--measure", model_dir, precision, str(beam)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    if done.returncode != 0:
        raise SystemExit(f"measuring {src} {precision} beam {beam} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", nargs="?")
    parser.add_argument("--before", help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "int8"])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/translate_before_after.json"))
    parser.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)  # MODEL_DIR PRECISION BEAM
    args = parser.parse_args()
    if args.measure:
        model_dir, precision, beam = args.measure
        print(json.dumps(measure(model_dir, precision, int(beam))))
        return
    if not args.model_dir or not args.before:
        parser.error("give a model directory and --before COMMIT")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.before], check=True, cwd=ROOT)
        try:
            for round_ in range(args.rounds):
                for precision in args.precisions:
                    for beam in args.beams:
                        for which, src in (("before", tree / "src"), ("after", ROOT / "src")):
                            row = {"round": round_, "code": which, "precision": precision, "beam": beam}
                            row.update(measured(src, args.model_dir, precision, beam))
                            print(json.dumps(row), flush=True)
                            rows.append(row)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], check=False, cwd=ROOT)
    print("\n| precision | search | words/s before | after | after / before (per round) | outputs |")
    print("|---|---|---|---|---|---|")
    summary = []
    for precision in args.precisions:
        for beam in args.beams:
            before, after = ([r for r in rows if (r["code"], r["precision"], r["beam"]) == (c, precision, beam)]
                             for c in ("before", "after"))  # fmt: skip
            ratios = [a["words_per_s"] / b["words_per_s"] for a, b in zip(after, before, strict=True)]
            same = all(a["outputs_sha256"] == b["outputs_sha256"] for a, b in zip(after, before, strict=True))
            line = {
                "precision": precision, "beam": beam, "ratios": [round(r, 3) for r in ratios], "same_outputs": same,
                "before_words_per_s": statistics.median(r["words_per_s"] for r in before),
                "after_words_per_s": statistics.median(r["words_per_s"] for r in after),
            }  # fmt: skip
            summary.append(line)
            search = "greedy" if beam == 1 else f"beam {beam}"
            print(f"| {precision} | {search} | {line['before_words_per_s']:,.0f} | {line['after_words_per_s']:,.0f} | "
                  f"{statistics.median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)}) | "
                  f"{'the same' if same else 'DIFFERENT'} |")  # fmt: skip
    result = {**stamp("Multi30k test_2016_flickr"), "model": args.model_dir, "before": args.before}
    Path(args.out).write_text(json.dumps({**result, "summary": summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
