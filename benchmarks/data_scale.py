"""Corpora of the paper's size: preparation, first update and memory, against SentencePiece alone and
against the in-memory path this replaced (issue 19).

Generated corpora with WMT-like lengths: each pair joins two random Multi30k training pairs
(deterministic; ~27 words a side). For each size:
  - floor: SentencePiece alone encoding the same lines (read in chunks) on every core, in one process;
  - prepare: `vaswani prepare` (tokenizer trained on its sample, encoding in one worker per core);
  - train: `vaswani train --prepared` to the first update, and memory at update 10;
  - before: the same `vaswani train` at the commit before prepared data (--before-commit, a git worktree),
    where it fits (--before-max pairs).
Memory is the proportional set size (PSS) of the whole process tree, sampled every 0.1 s, so pages
shared by workers are counted once.

    python benchmarks/data_scale.py --sizes 0.3M,1M,3M,10M --before-commit 703aaa4 --before-max 3M
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import yaml
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT / "../shared/data/multi30k/raw"
RESULTS = ROOT / "benchmarks" / "results"


def parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * scale)


def label(n: int) -> str:
    return f"{n / 1e6:g}M"


# -- corpora -------------------------------------------------------------------------------------
def generate(work: Path, sizes: list[int]) -> dict[int, tuple[Path, Path]]:
    """corpus-N.de/.en for each size: the largest is generated, the others are its first N lines."""
    import gzip

    de = gzip.decompress((MULTI30K / "train.de.gz").read_bytes()).decode().splitlines()
    en = gzip.decompress((MULTI30K / "train.en.gz").read_bytes()).decode().splitlines()
    largest = max(sizes)
    paths = {n: (work / f"corpus-{label(n)}.de", work / f"corpus-{label(n)}.en") for n in sizes}
    big = paths[largest]
    if not all(p.is_file() for p in big):
        rng = np.random.default_rng(19)
        with open(big[0], "w", encoding="utf-8") as out_de, open(big[1], "w", encoding="utf-8") as out_en:
            for start in range(0, largest, 1_000_000):
                picks = rng.integers(0, len(de), size=(min(1_000_000, largest - start), 2)).tolist()
                out_de.write("".join(f"{de[a]} {de[b]}\n" for a, b in picks))
                out_en.write("".join(f"{en[a]} {en[b]}\n" for a, b in picks))
    for n, (p_de, p_en) in paths.items():
        if n != largest and not p_de.is_file():
            for source, target in ((big[0], p_de), (big[1], p_en)):
                with open(target, "wb") as out:
                    subprocess.run(["head", "-n", str(n), str(source)], stdout=out, check=True)
    return paths


# -- measuring a process tree ------------------------------------------------------------------
def _tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as handle:
                    stack.extend(int(c) for c in handle.read().split())
        except OSError:
            pass
    return pids


def _pss(pid: int) -> int:
    total = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as handle:
                for line in handle:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


def run(command: list[str], marks: dict[str, str], env: dict | None = None, timeout: float = 3600) -> dict:
    """Run `command`; seconds from start to the first stderr line containing each mark, the peak PSS of
    the tree until each mark (and overall), and the exit status."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _pss(process.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    result: dict = {}
    tail: list[str] = []
    for line in process.stderr:
        tail = [*tail, line.rstrip()][-20:]
        for name, mark in marks.items():
            if name not in result and mark in line:
                result[name] = time.perf_counter() - started
                result[f"{name}_peak_pss"] = peak[0]
    process.wait(timeout=timeout)
    done.set()
    sampler.join()
    result.update(seconds=time.perf_counter() - started, peak_pss=peak[0], returncode=process.returncode)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed ({process.returncode}):\n" + "\n".join(tail))
    return result


FLOOR = """
import sys, time, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
threads = int(sys.argv[4])
start = time.perf_counter()
tokens = 0
for path in sys.argv[2:4]:
    with open(path, "rb") as handle:
        while True:
            lines = handle.readlines(1 << 24)
            if not lines:
                break
            ids = sp.encode([line.decode().rstrip("\\n") for line in lines], num_threads=threads)
            tokens += sum(map(len, ids))
print(f"floor done {time.perf_counter() - start:.2f} tokens {tokens}", file=sys.stderr)
"""


def config_for(work: Path, n: int, paths: tuple[Path, Path], root: Path = ROOT, name: str = "config") -> Path:
    """The quick recipe of the checkout at `root` (the commit measured, or the one before: its own recipe, whose keys
    its code knows) on the generated corpus, to its 10th update."""
    quick = yaml.safe_load((root / "configs/multi30k_de_en_quick.yaml").read_text())
    quick["data"] = {
        "train_src": str(paths[0]),
        "train_tgt": str(paths[1]),
        "tokenizer": "bpe",
        "vocab_size": 8000,
        "max_tokens": 1600,
    }
    quick["train"].update(precision="fp32", max_time=None, max_steps=10, valid_every=4)
    path = work / f"{name}-{label(n)}.yaml"
    path.write_text(yaml.safe_dump(quick))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0.3M,1M,3M,10M")
    parser.add_argument("--work", default="/tmp/vaswani-scale", help="where the corpora and runs go (GBs)")
    parser.add_argument("--before-commit", help="commit of the in-memory path to compare with (git worktree)")
    parser.add_argument("--before-max", default="3M", help="largest size to run the in-memory path at")
    parser.add_argument("--results", default=str(RESULTS / "data_scale.json"))
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    sizes = sorted(parse_size(s) for s in args.sizes.split(","))
    cores = len(os.sched_getaffinity(0))
    paths = generate(work, sizes)
    before_src = None
    if args.before_commit:
        tree = work / f"before-{args.before_commit}"
        if not tree.is_dir():
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(tree), args.before_commit],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
        before_src = tree / "src"
    results = []
    vaswani = [sys.executable, "-m", "vaswani.cli"]
    for n in sizes:
        row: dict = {"pairs": n, "bytes": sum(p.stat().st_size for p in paths[n])}
        config = config_for(work, n, paths[n])
        prepared = work / f"prepared-{label(n)}"
        subprocess.run(["rm", "-rf", str(prepared)], check=True)
        print(f"{label(n)}: prepare", flush=True)
        row["prepare"] = run(
            [*vaswani, "prepare", str(config), str(prepared), "--workers", str(cores)],
            {"tokenizer_start": "training a", "encoding_start": "encoding with", "encoded": "pairs kept"},
        )
        print(f"{label(n)}: floor", flush=True)
        row["floor"] = run(
            [sys.executable, "-c", FLOOR, str(prepared / "tokenizer.model"), *map(str, paths[n]), str(cores)],
            {"done": "floor done"},
        )
        print(f"{label(n)}: train from prepared data", flush=True)
        run_dir = work / f"run-{label(n)}"
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
        row["train"] = run(
            [*vaswani, "train", str(config), str(run_dir), "--prepared", str(prepared)],
            {"first_update": "step 1/", "update_10": "step 10/"},
        )
        if before_src is not None and n <= parse_size(args.before_max):
            print(f"{label(n)}: train, the in-memory path", flush=True)
            old_dir = work / f"run-before-{label(n)}"
            subprocess.run(["rm", "-rf", str(old_dir)], check=True)
            env = {**os.environ, "PYTHONPATH": str(before_src)}
            old_config = config_for(work, n, paths[n], before_src.parent, "config-before")
            row["before"] = run(
                [sys.executable, "-m", "vaswani.cli", "train", str(old_config), str(old_dir)],
                {"first_update": "step 1/", "update_10": "step 10/"},
                env=env,
            )
        results.append(row)
        print(json.dumps(row), flush=True)
        split = "generated from Multi30k train pairs (two joined a pair)"
        Path(args.results).write_text(json.dumps({**stamp(split), "rows": results}, indent=1) + "\n")
    print(table(results))


def table(rows: list[dict]) -> str:
    gb = 1e9
    lines = [
        "| pairs | text | floor: SentencePiece alone | prepare (tokenizer + encoding) | prepare / floor "
        "| prepare peak PSS | first update, prepared | PSS at update 10 | first update, in-memory path "
        "| its PSS at update 10 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p, f, t, b = r["prepare"], r["floor"], r["train"], r.get("before")
        tokenizer = p["encoding_start"] - p["tokenizer_start"]
        encode = p["encoded"] - p["encoding_start"]
        before = (
            f"{b['first_update']:.1f} s | {b['update_10_peak_pss'] / gb:.2f} GB"
            if b and "first_update" in b
            else "not run | -"
        )
        lines.append(
            f"| {label(r['pairs'])} | {r['bytes'] / gb:.2f} GB | {f['done']:.1f} s | {p['seconds']:.1f} s "
            f"({tokenizer:.0f} + {encode:.0f}) | {p['seconds'] / f['done']:.2f}x | "
            f"{p['peak_pss'] / gb:.2f} GB | {t['first_update']:.1f} s | {t['update_10_peak_pss'] / gb:.2f} GB "
            f"| {before} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, caption: str = "") -> None:
    """Size against time (left) and memory (right), log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [r["pairs"] for r in rows]
    before = [r for r in rows if r.get("before")]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(pairs, [r["floor"]["done"] for r in rows], "k--", marker="o", label="floor: SentencePiece alone")
    left.plot(pairs, [r["prepare"]["seconds"] for r in rows], marker="o", label="vaswani prepare")
    left.plot(pairs, [r["train"]["first_update"] for r in rows], marker="s", label="first update, prepared data")
    left.plot(
        [r["pairs"] for r in before],
        [r["before"]["first_update"] for r in before],
        marker="x",
        label="first update, in-memory path (before)",
    )
    left.set(xscale="log", yscale="log", xlabel="sentence pairs", ylabel="seconds", title="time")
    gb = 1e9
    right.plot(pairs, [r["prepare"]["peak_pss"] / gb for r in rows], marker="o", label="vaswani prepare, peak")
    right.plot(
        pairs,
        [r["train"]["update_10_peak_pss"] / gb for r in rows],
        marker="s",
        label="training to update 10, prepared data",
    )
    right.plot(
        [r["pairs"] for r in before],
        [r["before"]["update_10_peak_pss"] / gb for r in before],
        marker="x",
        label="training to update 10, in-memory path (before)",
    )
    right.set(xscale="log", xlabel="sentence pairs", ylabel="GB (PSS of the process tree)", title="memory")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    if caption:  # the results file's stamp: the picture names what it measured, as the file does
        figure.suptitle(caption, fontsize=8, y=0.995)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    # python benchmarks/data_scale.py --plot benchmarks/results/data_scale.json benchmarks/results/data_scale.png
    if sys.argv[1:2] == ["--plot"]:
        found = json.loads(Path(sys.argv[2]).read_text())
        caption = ", ".join(str(found[key]) for key in ("commit", "date", "cpu") if key in found)
        plot(found["rows"], Path(sys.argv[3]), caption)
        print(table(found["rows"]))
    else:
        main()
