"""A fair share under load: vaswani's training and translation speed alone and beside other CPU-bound work.

    python benchmarks/fair_share.py [--steps 300] [--out benchmarks/results/fair_share.json]

Each row runs a whole `vaswani` command (training the toy recipe for --steps updates, then translating 1,000
Multi30k sentences greedily with the model it trained) alone, and beside a busy process (one single-threaded
spin loop, as a second job would be), with the threads vaswani settles itself (one per CPU other work leaves
free, vaswani/runtime/threads.py) and with torch's default of one per core (VASWANI_THREADS set to the core count: how
vaswani ran before). Speeds are the training's tokens/s (its log) and translated sentences per second; a fair
share beside one busy process on a 2-core machine is about half of the speed alone. Hugging Face's Marian is
trained under the same load by benchmarks/race.py's training race (fp32, the tiny preset, torch's default threads,
as a Marian user runs it), with vaswani's model beside it in that process. Never run it with anything else busy.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k" / "raw"
SENTENCES = 1000


def run(command: list[str], env: dict[str, str], stdout: bool = False) -> tuple[float, str]:
    """Seconds the command took, and what it wrote to standard error (or output)."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - started, done.stdout if stdout else done.stderr


def one(steps: int, busy: bool, threads: str | None, work: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("VASWANI_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if threads:
        env["VASWANI_THREADS"] = threads
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        time.sleep(0.5 if busy else 0.0)  # the load is there when vaswani starts
        model = work / f"toy-{busy}-{threads}"
        train = [sys.executable, "-m", "vaswani.cli", "train", str(ROOT / "configs" / "toy_reverse.yaml"), str(model)]
        _, log = run([*train, "--set", f"train.max_steps={steps}", "--set", f"train.valid_every={steps}"], env)
        speed = re.findall(r"speed: ([\d,]+) tokens/s", log)
        sources = work / "test.de"
        seconds, _ = run(
            [sys.executable, "-m", "vaswani.cli", "translate", str(model), "-i", str(sources), "--beam", "1",
             "--max-len-a", "0", "--max-len-b", "20"],
            env,
        )  # fmt: skip
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    settled = re.search(r"threads: (\d+) \(", log)  # runtime/threads.py settle_threads' line: "threads: 1 (1 of 2 ..."
    return {
        "busy_process": busy,
        "threads": threads or "auto",
        "threads_used": int(settled.group(1)) if settled else int(threads or os.cpu_count()),
        "train_tokens_per_s": float(speed[-1].replace(",", "")) if speed else None,
        "translate_sentences_per_s": SENTENCES / seconds,
    }


def race(busy: bool, steps: int) -> dict:
    """benchmarks/race.py's fp32 training row (vaswani and Marian in one process, torch's default threads)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        time.sleep(0.5 if busy else 0.0)
        command = [sys.executable, str(ROOT / "benchmarks" / "race.py"), "--only", "training"]
        _, out = run([*command, "--train-steps", str(steps), "--warmup", "3"], dict(os.environ), stdout=True)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    row = next(line for line in out.splitlines() if line.startswith("| fp32 |"))
    vaswani, marian = (float(x.replace(",", "")) for x in row.split("|")[2:4])
    return {"busy_process": busy, "race_vaswani_tokens_per_s": vaswani, "race_marian_tokens_per_s": marian}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--race-steps", type=int, default=20, help="the Marian race's measured training steps")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fair_share.json"))
    args = parser.parse_args()
    cores = str(len(os.sched_getaffinity(0)))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with gzip.open(MULTI30K / "train.de.gz", "rt", encoding="utf-8") as f:
            (work / "test.de").write_text("".join(line for _, line in zip(range(SENTENCES), f, strict=False)))
        for busy in (False, True):
            for threads in (None, cores):
                rows.append(one(args.steps, busy, threads, work))
                print(json.dumps(rows[-1]), flush=True)
            rows.append(race(busy, args.race_steps))
            print(json.dumps(rows[-1]), flush=True)
    split = f"Multi30k train (de), its first {SENTENCES} lines translated; the toy task trained"
    Path(args.out).write_text(json.dumps({**stamp(split), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
