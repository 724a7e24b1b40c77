"""`vaswani distill` on Multi30k de→en (issue 62): a teacher, students of decreasing size distilled from it, and for
each model test_2016_flickr sacreBLEU and chrF, source words/s in float32 and int8, greedy and beam 4, peak memory,
the ratios to the teacher (int8, beam 4) and to CTranslate2 int8 running the teacher (beam 4), and each phase's
wall time. Prints a Markdown table; writes benchmarks/results/distill.json.

    python benchmarks/distill.py --teacher runs/multi30k_de_en         # a trained teacher
    python benchmarks/distill.py                                       # trains the full recipe's teacher first
    python benchmarks/distill.py --students 2-1 4-1 --max-time 5m --skip-training   # measure students already made
    python benchmarks/distill.py --teacher runs/multi30k_de_en --students "2-1 taught by 4-4"   # with its assistant
    python benchmarks/distill.py --teacher runs/distill/teacher --students 2-1 "2-1 d64" --seeds 1 2 3 \
        --once "2-1 d64" --parallel 4                   # the recipe thrice, a narrower shape once; all four at once

Every student is trained once per seed (train.seed; `--seeds`, default 1) and reported as the median over its seeds.
The recipe is chosen on Multi30k validation alone (val BLEU, greedy fp32, each student's median): which shape, and
whether the greedy search bans a repeated 4-gram (val BLEU with the ban off, 3 and 4); test_2016_flickr only reports.
Speed is compared at equal search (student greedy against teacher greedy, beam 4 against beam 4, same precision)
beside the mixed comparison (the student's greedy against the teacher's int8 beam 4).
`--parallel N` trains N students at once, one thread each (the recipe's 31 minutes are "on one thread beside another":
on a 2-core CPU four at once give each half a core, a faster CPU's half core a slower one's whole).

Phases: the teacher (the full de→en recipe trained here when --teacher is missing, its last 10 checkpoints
averaged), the teacher's pass over the 29,000 training sources
(beam 4, its 4-best, `vaswani distill`'s own code; once, shared by every student), and each student's training
(`vaswani distill` in a process of its own, reusing that pass, or making its own where its settings differ or its
teacher is another student: TAUGHT_BY), the last 3 checkpoints averaged. Speed: a process per measurement
translates the 1,000 test sentences three times (batch 64, the model loaded and warmed on 64 of them first; the
median time, and the first's apart: what a process translating a file once sees); words/s counts the source's
words; peak memory is the process's VmHWM.
Models go to runs/distill/ (not committed).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "../shared/data/multi30k/raw"
RECIPE = ROOT / "configs/multi30k_de_en_distill.yaml"
RESULTS = ROOT / "benchmarks/results/distill.json"
REPEATS = 3  # translations of the test set per measurement: the median is kept (one takes 1-6 s here)
# started from the teacher at a fine-tuning rate, taught the closest of its 4-best alone for 16 min (the greedy
# recipe's settings: configs/multi30k_de_en_distill_greedy.yaml)
FROM_TEACHER = ["distill.init=teacher", "train.peak_lr=5e-4", "distill.original_weight=0", "train.max_time=16m"]
STUDENTS = {  # name: the recipe's model overrides (layers encoder-decoder, width)
    "2-1": [],
    "3-1": ["model.n_layers=3"],
    "4-1": ["model.n_layers=4"],
    "6-1": ["model.n_layers=6"],
    "2-1, 14 epochs": ["train.max_epochs=14", "train.max_time=20m"],
    "2-1 d64": ["model.d_model=64", "model.d_ff=128", "model.n_heads=2"],
    "4-4 from teacher": ["model.n_layers=4", "model.n_decoder_layers=4", *FROM_TEACHER],
    "4-2 from teacher": ["model.n_layers=4", "model.n_decoder_layers=2", *FROM_TEACHER],
    "2-1 taught by 4-4": [],
}
# a student taught by another student (a teacher assistant, Mirzadeh et al. 2020), which is trained first: the
# assistant's own pass (its 4-best) is its corpus
TAUGHT_BY = {"2-1 taught by 4-4": "4-4 from teacher"}
DEFAULT_STUDENTS = ["2-1", "3-1", "4-4 from teacher", "2-1 taught by 4-4"]


def measure_val(model_dir: str) -> dict:
    """Validation BLEU (fp32, untimed): greedy with the repeated-n-gram ban off, 3 and 4 (the recipe's choice), and
    beam 4, each with the model's other decoding settings."""
    import sacrebleu

    from vaswani.data.corpus import read_lines
    from vaswani.translate.translator import Translator

    sources, references = read_lines(DATA / "val.de.gz"), read_lines(DATA / "val.en.gz")
    translator = Translator.load(model_dir, precision="fp32")
    settings = {f"greedy, ban {n}": {"beam_size": 1, "no_repeat_ngram": n} for n in (0, 3, 4)}
    settings["beam 4, the model's ban"] = {"beam_size": 4}
    bleu = {}
    for name, options in settings.items():
        outputs = translator.translate(sources, translator.request(batch_size=64, **options))
        bleu[name] = round(sacrebleu.corpus_bleu(outputs, [references]).score, 2)
    return {"val_bleu": bleu, "model_ban": translator.config.decode.no_repeat_ngram}


def measure(model_dir: str, precision: str, beam: int, engine: str) -> dict:
    """One process's measurement (see the module docstring): BLEU, chrF, seconds, words/s, peak RSS."""
    import sacrebleu
    import torch

    from vaswani.data.corpus import read_lines
    from vaswani.translate.translator import Translator

    sources = read_lines(DATA / "test_2016_flickr.de.gz")
    references = read_lines(DATA / "test_2016_flickr.en.gz")
    if engine == "ctranslate2":
        translator = Translator.load(model_dir, engine="ctranslate2", compute_type=precision)
    else:
        translator = Translator.load(model_dir, precision=precision)
    outputs, runs = timed_translations(translator, sources, beam)
    seconds = statistics.median(runs)
    words = sum(len(s.split()) for s in sources)
    return {
        "first_words_per_s": round(words / runs[0], 1),
        "bleu": round(sacrebleu.corpus_bleu(outputs, [references]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(outputs, [references]).score, 2),
        "seconds": round(seconds, 3),
        "words_per_s": round(words / seconds, 1),
        "peak_rss_mb": round(_peak_rss_kib() / 1024, 1),
        "threads": torch.get_num_threads(),
    }


def timed_translations(translator, sources: list[str], beam: int) -> tuple[list[str], list[float]]:
    """`sources` translated REPEATS times at batch 64 after a warm-up on 64 of them: the last outputs and each
    time in seconds."""
    import torch

    request = translator.request(beam_size=beam, batch_size=64)
    translator.translate(sources[:64], request)  # warm: kernels chosen, caches made
    runs = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        with torch.inference_mode():
            outputs = translator.translate(sources, request)
        runs.append(time.perf_counter() - started)
    return outputs, runs


def _peak_rss_kib() -> int:
    """This process's peak resident memory (VmHWM; getrusage's ru_maxrss keeps the parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measured(model_dir: Path, precision: str, beam: int, engine: str = "torch") -> dict:
    """measure() in a process of its own; precision "val": measure_val()."""
    if precision == "val":
        command = [sys.executable, __file__, "--measure-val", str(model_dir)]
    else:
        command = [sys.executable, __file__, "--measure", str(model_dir), precision, str(beam), engine]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"measuring {model_dir} {precision} beam {beam} {engine} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(*command: str) -> float:
    print("$", " ".join(command), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT)
    return time.perf_counter() - started


def run_together(commands: list[list[str]], logs: list[Path]) -> list[float]:
    """The commands at once, one thread each (VASWANI_THREADS=1), each's output to its log: their wall times."""
    started = time.perf_counter()
    env = {**os.environ, "VASWANI_THREADS": "1"}
    procs = []
    for command, log in zip(commands, logs, strict=True):
        print("$", " ".join(command), ">", log, flush=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        procs.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT))
    times = []
    for proc, command in zip(procs, commands, strict=True):
        if proc.wait() != 0:
            raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}")
        times.append(time.perf_counter() - started)
    return times


def teacher_pass(teacher: Path, work: Path, overrides: list[str]) -> float:
    """The teacher's pass as `vaswani distill` runs it, into `work` (a student directory's distill/)."""
    from vaswani.config import apply_overrides
    from vaswani.config.distill import DistillConfig
    from vaswani.config.recipe import load_values
    from vaswani.distill import original_pairs
    from vaswani.distill import teacher as passes
    from vaswani.translate.translator import Translator

    values = apply_overrides(load_values(RECIPE), overrides)
    settings = DistillConfig.from_dict(values.pop("distill"))
    sources, targets = original_pairs(values)
    started = time.perf_counter()
    passes.start(work, passes.stamp_of(teacher, settings, sources), print)
    chunks = passes.pending(work, len(sources), settings.chunk_lines)
    if chunks:
        translator = Translator.load(teacher, precision=settings.precision)
        passes.translate_chunks(translator, sources, work, settings, chunks)
    if not passes.corpus_current(work, settings):
        print("distilled corpus:", passes.build_corpus(work, sources, targets, settings))
    return time.perf_counter() - started


def in_order(names: list[str]) -> list[str]:
    """The students asked for, each teacher assistant (TAUGHT_BY) before the students it teaches."""
    ordered: list[str] = []
    for name in names:
        if name in TAUGHT_BY and TAUGHT_BY[name] not in ordered:
            ordered.append(TAUGHT_BY[name])
        if name not in ordered:
            ordered.append(name)
    return ordered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", help="a trained de→en model directory (default: the full recipe's, trained)")
    parser.add_argument("--students", nargs="+", default=DEFAULT_STUDENTS, choices=list(STUDENTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1], help="train.seed of each student's runs")
    parser.add_argument("--once", nargs="*", default=[], choices=list(STUDENTS), help="students of the first seed only")
    parser.add_argument("--parallel", type=int, default=1, help="students trained at once, one thread each")
    parser.add_argument("--max-time", help="each student's training budget (train.max_time; default: the recipe's)")
    parser.add_argument("--runs", default="runs/distill")
    parser.add_argument("--skip-training", action="store_true", help="measure the students already in --runs")
    parser.add_argument("--no-ctranslate2", action="store_true")
    parser.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)  # MODEL_DIR PRECISION BEAM ENGINE
    parser.add_argument("--measure-val", help=argparse.SUPPRESS)  # MODEL_DIR
    args = parser.parse_args()
    if args.measure:
        model_dir, precision, beam, engine = args.measure
        print(json.dumps(measure(model_dir, precision, int(beam), engine)))
        return
    if args.measure_val:
        print(json.dumps(measure_val(args.measure_val)))
        return
    if args.parallel > 1 and any(name in TAUGHT_BY for name in args.students):
        raise SystemExit("--parallel trains students at once: a student taught by another needs --parallel 1")
    from vaswani.runtime.machine import cpu_name

    provenance = stamp("Multi30k: the recipe chosen on val; test_2016_flickr reported")  # the code as the run starts
    runs = ROOT / args.runs
    phases: dict[str, float] = {}
    teacher = Path(args.teacher) if args.teacher else runs / "teacher"
    if not (teacher / "model.safetensors").is_file():
        phases["teacher training"] = run("vaswani", "train", "configs/multi30k_de_en.yaml", str(teacher))
        phases["teacher training"] += run("vaswani", "average", str(teacher), "--last", "10")
    shared = runs / "teacher_pass"
    phases["teacher's pass (29,000 sources, beam 4)"] = teacher_pass(teacher.resolve(), shared, [])
    students: dict[tuple[str, int], Path] = {}
    waiting: list[tuple[str, list[str]]] = []  # (label, command)
    for name in in_order(args.students):
        for seed in args.seeds[:1] if name in args.once else args.seeds:
            student = runs / f"student {name} seed {seed}".replace(",", "").replace(" ", "_")
            students[(name, seed)] = student
            if args.skip_training:
                continue
            taught_by = students[(TAUGHT_BY[name], seed)] if name in TAUGHT_BY else teacher
            if name not in TAUGHT_BY and not (student / "distill").is_dir():
                shutil.copytree(shared, student / "distill")  # the pass reused (a student asking for another makes it)
            sets = [
                *([f"train.max_time={args.max_time}"] if args.max_time else []),
                *STUDENTS[name],
                f"train.seed={seed}",
            ]
            command = ["vaswani", "distill", str(taught_by), str(RECIPE), str(student)]
            waiting.append((f"student {name} seed {seed}", [*command, *(x for s in sets for x in ("--set", s))]))
    for start in range(0, len(waiting), args.parallel):
        wave = waiting[start : start + args.parallel]
        if args.parallel == 1:
            times = [run(*wave[0][1])]
        else:
            times = run_together([c for _, c in wave], [runs / "logs" / f"{n.replace(' ', '_')}.log" for n, _ in wave])
        for (label, command), seconds in zip(wave, times, strict=True):
            phases[f"{label} (its pass and) training"] = seconds
            run("vaswani", "average", command[4], "--last", "3")
    rows = []
    for (name, seed), model_dir in [(("teacher", 0), teacher), *students.items()]:
        val = measured(model_dir, "val", 0)
        print(json.dumps({"model": name, "seed": seed, **val}), flush=True)
        for precision in ("fp32", "int8"):
            for beam in (1, 4):
                row = {"model": name, "seed": seed, "precision": precision, "beam": beam,
                       **measured(model_dir, precision, beam), **val}  # fmt: skip
                print(json.dumps(row), flush=True)
                rows.append(row)
    if not args.no_ctranslate2:
        from vaswani.export.ctranslate2 import converted

        converted(teacher)
        row = {"model": "teacher (CTranslate2)", "seed": 0, "precision": "int8", "beam": 4,
               **measured(teacher, "int8", 4, "ctranslate2")}  # fmt: skip
        print(json.dumps(row), flush=True)
        rows.append(row)
    summary = summarise(rows)
    print(f"\n{cpu_name()}, {rows[0]['threads']} threads; phases: "
          + ", ".join(f"{k} {v / 60:.1f} min" for k, v in phases.items()))  # fmt: skip
    print(table(summary))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    result = {
        **provenance,
        "teacher": str(teacher),
        "seeds": args.seeds,
        "parallel": args.parallel,
        "phases_s": phases,
        "summary": summary,
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")


def summarise(rows: list[dict]) -> dict:
    """Per model, precision and search: the median over seeds of test BLEU, chrF and words/s, each ratio to the
    teacher at equal search and to the teacher's int8 beam 4; per model the median val BLEU of each greedy ban and
    beam 4; and the choice made on val: the student of the highest median greedy val BLEU (its own ban), and the ban
    of the highest median greedy val BLEU for it."""
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    teacher = {(r["precision"], r["beam"]): r for r in by_model["teacher"]}
    out: dict = {"models": {}}
    for model, model_rows in by_model.items():
        entry: dict = {"seeds": sorted({r["seed"] for r in model_rows}), "runs": {}}
        for precision in ("fp32", "int8"):
            for beam in (1, 4):
                same = [r for r in model_rows if r["precision"] == precision and r["beam"] == beam]
                if not same:
                    continue
                median = {k: statistics.median(r[k] for r in same) for k in ("bleu", "chrf", "words_per_s")}
                base = teacher[(precision, beam)]["words_per_s"]
                median["x_teacher_equal_search"] = round(median["words_per_s"] / base, 2)
                median["x_teacher_int8_beam4"] = round(median["words_per_s"] / teacher[("int8", 4)]["words_per_s"], 2)
                entry["runs"][f"{precision} {'greedy' if beam == 1 else f'beam {beam}'}"] = median
        if "val_bleu" in model_rows[0]:
            per_seed = {r["seed"]: r for r in model_rows}.values()
            keys = model_rows[0]["val_bleu"]
            entry["val_bleu"] = {k: statistics.median(r["val_bleu"][k] for r in per_seed) for k in keys}
            entry["model_ban"] = model_rows[0]["model_ban"]
        out["models"][model] = entry
    students = {m: e for m, e in out["models"].items() if m != "teacher" and "val_bleu" in e}
    if students:
        own = {m: e["val_bleu"][f"greedy, ban {e['model_ban']}"] for m, e in students.items()}
        chosen = max(own, key=own.get)
        bans = {k: v for k, v in students[chosen]["val_bleu"].items() if k.startswith("greedy")}
        out["chosen_on_val"] = {"student": chosen, "greedy val BLEU": own, "ban": max(bans, key=bans.get)}
    return out


def table(summary: dict) -> str:
    lines = [
        "| model (median over seeds) | precision | search | val BLEU | test BLEU | chrF | words/s "
        "| × teacher, equal search | × teacher int8 beam 4 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for model, e in summary["models"].items():
        for run_name, m in e["runs"].items():
            precision, search = run_name.split(" ", 1)
            key = f"greedy, ban {e['model_ban']}" if search == "greedy" else "beam 4, the model's ban"
            val = e.get("val_bleu", {}).get(key, "")
            lines.append(
                f"| {model} ({len(e['seeds'])}) | {precision} | {search} | {val} | {m['bleu']:.2f} | {m['chrf']:.1f} "
                f"| {m['words_per_s']:,.0f} | {m['x_teacher_equal_search']:.2f}x | {m['x_teacher_int8_beam4']:.2f}x |"
            )
    if "chosen_on_val" in summary:
        lines.append(f"\nchosen on val: {json.dumps(summary['chosen_on_val'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
