"""Faults, nothing lost: `vaswani train`, `prepare`, `average`, `import` and `export` killed with SIGKILL at random
moments; what each leaves must be the old version of its output or the new one, never a torn one, and a killed
training run, resumed, must end with the weights of a run never killed.

Each command runs on a tiny setup (the trainer tests' toy run; 3,000 Multi30k pairs; five checkpoints of a 4M-parameter
model; a tiny Marian saved by transformers; a tiny model directory exported to Hugging Face and CTranslate2), once to
the end, watched for the temporaries of its writes (vaswani/atomic.py), then again and again killed (its whole process
group: workers too) inside a write: one drawn in proportion to the writes' durations (time-weighted), at a uniform
moment of it, counted from its temporary's appearance in the killed run (issue 78: uniform moments of the whole run
fell mostly in start-up, 1 of 31 train/average/export kills mid-write). After each kill its output is read with the
project's own loaders (config, weights, training state, tokenizer, prepared data's manifest and hashes; transformers
and CTranslate2 for exports): it must be absent, the old version, or the new one. A killed training run is killed a
second time after it restarts, then resumed to the end, and its last checkpoint and model.safetensors compared with
the uninterrupted run's (torch.equal).
Last, each command runs once more to the end: no temporary a killed writer left may survive it (vaswani/atomic.py).

    python benchmarks/faults.py                      # 50 kills over the five commands: benchmarks/results/faults.json
    python benchmarks/faults.py --kills 10 --only train prepare
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import safetensors.torch
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from provenance import stamp  # noqa: E402

from tests.helpers.common import MULTI30K, write_tiny_model_directory  # noqa: E402
from tests.helpers.toy import TOY  # noqa: E402
from vaswani import ModelConfig, Transformer  # noqa: E402
from vaswani.train import checkpoint as ckpt  # noqa: E402

COMMANDS = ("train", "prepare", "average", "import", "export")
TEMPORARY = (".tmp", ".partial-", ".old-", ".deleted-")  # what vaswani.atomic names a write in progress
# one thread in every process: the machine is shared, and a resumed run must sum as the uninterrupted one did
ENV = {**os.environ, "VASWANI_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@dataclass
class Tally:
    """One command's kills and what they left."""

    kills: int = 0
    finished_first: int = 0  # runs that ended before their delay: not counted as kills
    mid_write: int = 0  # kills that left a temporary: the kill fell inside a write
    writes_seen: int = 0  # writes the watched run to the end saw (the kills are aimed inside them)
    corrupt: int = 0
    resumed: int = 0
    resumed_equal: int = 0
    stale_after_completed_run: int = 0
    duration_s: float = 0.0
    problems: list[str] = field(default_factory=list)


@dataclass
class Case:
    """A command to kill: how to run it, put its output back to the old version, and judge what a kill left."""

    name: str
    argv: Callable[[int], list[str]]  # the i-th run's command line
    output: Path  # where temporaries appear: this directory, its parent and (train) its checkpoints/
    reset: Callable[[], None]  # before a run: the output as its old version
    check: Callable[[], str | None]  # after a kill: None where the output is whole (absent, old or new)
    variants: int = 1  # command lines that differ in duration (export: two targets), each timed once


def vaswani(*args: str) -> list[str]:
    return [sys.executable, "-m", "vaswani.cli", *args]


def run_to_end(argv: list[str]) -> float:
    """Seconds the command takes; an error where it fails."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:])} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - started


def run_killed(argv: list[str], delay: float) -> tuple[bool, str | None]:
    """Start `argv` in a session of its own and SIGKILL the whole group (workers too) after `delay` s. Returns whether
    the kill fell while it ran, and the end of its error output where it ended first with a failure (a restart that
    refuses what an earlier kill left)."""
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)
        try:
            code = process.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
            if code == -signal.SIGKILL:
                return True, None
        errors.seek(0)
        return False, None if code == 0 else f"exit {code}: {errors.read()[-500:]}"


POLL_S = 0.0005  # how often a run's output is looked at for the temporaries of a write under way


def watched_run(argv: list[str], output: Path) -> tuple[float, list[float]]:
    """Run `argv` to its end, watching `output` for the temporaries vaswani.atomic names: its duration, and each
    write's (a temporary's life, in order of appearance; writes shorter than the poll are not seen)."""
    writes: list[float] = []
    open_: dict[str, float] = {}  # a temporary seen: when it appeared
    with tempfile.TemporaryFile("w+") as errors:
        started = time.perf_counter()
        process = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)
        while process.poll() is None:
            now, names = time.perf_counter(), {p.name for p in temporaries(output)}
            open_.update({name: now for name in names - open_.keys()})
            writes += [now - open_.pop(name) for name in list(open_) if name not in names]
            time.sleep(POLL_S)
        duration = time.perf_counter() - started
        if process.returncode != 0:
            errors.seek(0)
            raise RuntimeError(f"{' '.join(argv[2:])} failed: {errors.read()[-2000:]}")
    return duration, writes


@dataclass
class Aim:
    """Where a kill falls: inside a write, drawn in proportion to the writes' durations (time-weighted over the
    writes a watched run saw), at a uniform moment of it; or, where no write was seen, at a uniform moment of the
    run."""

    duration: float
    writes: list[float]

    def draw(self, rng: random.Random) -> tuple[int | None, float]:
        if not self.writes:
            return None, rng.uniform(0.0, self.duration)
        [index] = rng.choices(range(len(self.writes)), weights=self.writes)
        return index, rng.uniform(0.0, self.writes[index])


def run_aimed(argv: list[str], output: Path, aim: Aim, rng: random.Random) -> tuple[bool, str | None]:
    """`run_killed`, the kill aimed inside a write: the run is watched, and killed `offset` s after the temporary of
    its `index`-th write appears (or at a uniform moment, with no write seen)."""
    index, offset = aim.draw(rng)
    if index is None:
        return run_killed(argv, offset)
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)
        seen, previous = 0, set()
        while process.poll() is None:
            names = {p.name for p in temporaries(output)}
            seen, previous = seen + len(names - previous), names
            if seen > index:
                time.sleep(offset)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                break
            time.sleep(POLL_S)
        code = process.wait()
        if code == -signal.SIGKILL:
            return True, None
        errors.seek(0)
        return False, None if code == 0 else f"exit {code}: {errors.read()[-500:]}"


def temporaries(output: Path) -> list[Path]:
    """Entries vaswani.atomic names while writing, beside `output`, inside it and in its checkpoints/."""
    places = [output.parent, output, output / "checkpoints"]
    return [p for d in places if d.is_dir() for p in d.iterdir() if p.name.startswith(".") and _temporary(p.name)]


def _temporary(name: str) -> bool:
    return any(tag in name for tag in TEMPORARY) and not name.startswith(".write-test")


def guarded(check: Callable[[], None]) -> Callable[[], str | None]:
    """A check that raises, as one that returns what went wrong."""

    def run() -> str | None:
        try:
            check()
        except Exception as error:  # any loader's error is a corrupt output
            return f"{type(error).__name__}: {str(error)[:300]}"
        return None

    return run


# -- train -------------------------------------------------------------------------------------------------------
TRAIN_STEPS = 12


def check_train_dir(run: Path) -> None:
    """Everything a reader of a model directory in training reads, with the project's own loaders."""
    from vaswani.config import Config
    from vaswani.data import store
    from vaswani.data.tokenizer import Tokenizer

    if (run / "config.yaml").exists():
        Config.load(run / "config.yaml")
    if (run / "vaswani.json").exists():
        json.loads((run / "vaswani.json").read_text())
    if (run / ckpt.WEIGHTS).exists():
        ckpt.load_weights(run / ckpt.WEIGHTS)
    if Tokenizer.present(run):
        Tokenizer.load(run)
    if (run / "prepared").exists():
        store.PreparedData.open(run / "prepared")
    for name in ("metrics.jsonl",):
        if (run / name).exists():
            [json.loads(line) for line in (run / name).read_text().splitlines()]
    if (run / "data_report.json").exists():
        json.loads((run / "data_report.json").read_text())
    root = run / "checkpoints"
    for path in sorted(root.glob("step_*")) if root.is_dir() else []:
        ckpt.load_state(path)  # a step_* directory a reader lists must be whole
        ckpt.load_weights(path / ckpt.WEIGHTS)


def same_weights(a: Path, b: Path) -> bool:
    x, y = ckpt.load_weights(a), ckpt.load_weights(b)
    return x.keys() == y.keys() and all(torch.equal(x[n], y[n]) for n in x)


def train_case(work: Path) -> tuple[Case, Path]:
    values = {k: dict(v) for k, v in TOY.items()}
    values["train"].update(max_steps=TRAIN_STEPS, valid_every=3)
    recipe = work / "toy.yaml"
    recipe.write_text(yaml.safe_dump(values))
    run = work / "train" / "run"
    case = Case(
        "train",
        lambda i: vaswani("train", str(recipe), str(run)),
        run,
        lambda: None,
        guarded(lambda: check_train_dir(run)),
    )
    return case, recipe


def resumed_equal(run: Path, reference: Path) -> bool:
    """Resume `run` to the end; True where its last checkpoint and model.safetensors equal the reference's."""
    run_to_end(vaswani("train", str(run.parent.parent / "toy.yaml"), str(run)))
    last = f"checkpoints/step_{TRAIN_STEPS:08d}/{ckpt.WEIGHTS}"
    return all(same_weights(run / name, reference / name) for name in (last, ckpt.WEIGHTS))


# -- prepare -----------------------------------------------------------------------------------------------------
def prepare_case(work: Path) -> Case:
    from vaswani.data.corpus import read_lines

    corpus = work / "corpus"
    corpus.mkdir()
    for lang in ("de", "en"):
        lines = read_lines(MULTI30K / f"raw/train.{lang}.gz")[:3000]
        (corpus / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    recipe = work / "prepare.yaml"
    data = {"train_src": str(corpus / "train.de"), "train_tgt": str(corpus / "train.en"), "vocab_size": 400}
    recipe.write_text(yaml.safe_dump({"data": data}))
    out = work / "prepare" / "data"
    out.parent.mkdir()

    def check() -> None:
        from vaswani.data import store

        if out.exists():  # absent, or whole: a manifest and the arrays it describes
            store.PreparedData.open(out)

    return Case(
        "prepare", lambda i: vaswani("prepare", str(recipe), str(out)), out, lambda: remove(out), guarded(check)
    )


# -- average -----------------------------------------------------------------------------------------------------
def average_case(work: Path) -> Case:
    """Five checkpoints of a 4M-parameter model; model.safetensors holds other weights (the old version)."""
    model_dir = work / "average" / "model"
    config = ModelConfig(src_vocab_size=8000, tgt_vocab_size=8000, d_model=128, n_heads=4, d_ff=256, n_layers=2)
    torch.manual_seed(0)
    for step in range(1, 6):
        weights = ckpt.weights_of(Transformer(config))
        ckpt.save_checkpoint(model_dir, step, weights, {"step": step})
    old = ckpt.weights_of(Transformer(config))
    new = ckpt.average_checkpoints(ckpt.checkpoint_dirs(model_dir))
    path = model_dir / ckpt.WEIGHTS

    def reset() -> None:  # not through vaswani.atomic: what a killed writer left is for the next `average` to clean
        safetensors.torch.save_file(old, str(model_dir / "old.safetensors"))
        os.replace(model_dir / "old.safetensors", path)

    def check() -> None:
        saved = ckpt.load_weights(path)
        if not any(all(torch.equal(saved[n], w[n]) for n in w) for w in (old, new)):
            raise ValueError("model.safetensors is neither the old weights nor the average")

    return Case("average", lambda i: vaswani("average", str(model_dir)), path, reset, guarded(check))


# -- import ------------------------------------------------------------------------------------------------------
def import_case(work: Path) -> Case:
    from tests.helpers.hf_models import save_marian

    source = save_marian(work / "import" / "marian_hf", steps=10, pairs=600)
    out = work / "import" / "model"
    return Case(
        "import", lambda i: vaswani("import", str(source), str(out)), out, lambda: remove(out), model_check(out)
    )


def model_check(out: Path) -> Callable[[], str | None]:
    """Absent, empty, or a model directory that loads with its tokenizer."""

    def check() -> None:
        from vaswani.data.tokenizer import Tokenizer
        from vaswani.model_dir import load_model

        if out.exists() and any(out.iterdir()):
            load_model(out)
            Tokenizer.load(out)

    return guarded(check)


# -- export ------------------------------------------------------------------------------------------------------
def export_case(work: Path) -> Case:
    """Alternately --to huggingface and --to ctranslate2, each into a new directory."""
    model_dir = work / "export" / "model"
    model_dir.mkdir(parents=True)
    write_tiny_model_directory(model_dir)
    out = work / "export" / "out"
    targets = ("huggingface", "ctranslate2")
    state = {"to": targets[0]}

    def argv(i: int) -> list[str]:
        state["to"] = targets[i % 2]
        return vaswani("export", str(model_dir), str(out), "--to", state["to"])

    def check() -> None:
        if not out.exists() or not any(out.iterdir()):
            return
        if state["to"] == "huggingface":
            import transformers

            transformers.MarianMTModel.from_pretrained(str(out))
            transformers.MarianTokenizer.from_pretrained(str(out))
        else:
            import ctranslate2
            import sentencepiece

            ctranslate2.Translator(str(out), device="cpu")
            sentencepiece.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))

    return Case("export", argv, out, lambda: remove(out), guarded(check), variants=2)


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# -- the kills ---------------------------------------------------------------------------------------------------
def record(case: Case, tally: Tally, run: tuple[bool, str | None]) -> None:
    """What one run (killed, or ended before its delay) left, judged."""
    killed, failure = run
    if not killed:
        tally.finished_first += 1
    else:
        tally.kills += 1
        tally.mid_write += bool(temporaries(case.output))
    problem = failure or case.check()
    if problem is not None:
        tally.corrupt += 1
        tally.problems.append(problem)


def kill_command(case: Case, kills: int, rng: random.Random) -> Tally:
    """Time each variant once, then kill runs at uniform moments of their duration until `kills` (at most 3x as many
    runs); last, one run to the end, after which no temporary may be left."""
    aims = []
    for v in range(case.variants):
        case.reset()
        aims.append(Aim(*watched_run(case.argv(v), case.output)))
        if (problem := case.check()) is not None:
            raise RuntimeError(f"{case.name}: a completed run's output does not load: {problem}")
    tally = Tally(duration_s=round(sum(a.duration for a in aims) / len(aims), 2))
    tally.writes_seen = sum(len(a.writes) for a in aims)
    for i in range(3 * kills):
        if tally.kills >= kills:
            break
        case.reset()
        record(case, tally, run_aimed(case.argv(i), case.output, aims[i % case.variants], rng))
    run_to_end(case.argv(0))  # no reset: this run starts from what the last kill left, and cleans it
    if (problem := case.check()) is not None:
        tally.corrupt += 1
        tally.problems.append(f"after the last run: {problem}")
    tally.stale_after_completed_run = len(temporaries(case.output))
    return tally


def kill_training(work: Path, kills: int, rng: random.Random) -> Tally:
    """Episodes: a run killed, restarted and killed again, then resumed to the end and compared with the uninterrupted
    run bit for bit."""
    case, recipe = train_case(work)
    reference = work / "train" / "reference"
    aim = Aim(*watched_run(vaswani("train", str(recipe), str(reference)), reference))
    check_train_dir(reference)
    tally = Tally(duration_s=round(aim.duration, 2), writes_seen=len(aim.writes))
    for _ in range(3 * kills):
        if tally.kills >= kills:
            break
        remove(case.output)
        for _ in range(2):  # the restart writes what the first run's did again: the same aim
            record(case, tally, run_aimed(case.argv(0), case.output, aim, rng))
        tally.resumed += 1
        tally.resumed_equal += resumed_equal(case.output, reference)
        tally.stale_after_completed_run += len(temporaries(case.output))
    return tally


def shares(kills: int, commands: list[str]) -> dict[str, int]:
    """`kills` split over the commands, the remainder to the first."""
    base, extra = divmod(kills, len(commands))
    return {name: base + (i < extra) for i, name in enumerate(commands)}


def run_all(commands: list[str], kills: int, seed: int, work: Path) -> dict[str, Tally]:
    rng, results = random.Random(seed), {}
    builders = {"prepare": prepare_case, "average": average_case, "import": import_case, "export": export_case}
    for name, n in shares(kills, commands).items():
        started = time.perf_counter()
        results[name] = kill_training(work, n, rng) if name == "train" else kill_command(builders[name](work), n, rng)
        t = results[name]
        print(f"{name}: {t.kills} kills, {t.corrupt} corrupt ({time.perf_counter() - started:.0f} s)", flush=True)
    return results


def table(results: dict[str, Tally]) -> str:
    rows = [
        "| command | kills | mid-write | corrupt | resumed equal | stale temporaries | T (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, t in results.items():
        resumed = f"{t.resumed_equal}/{t.resumed}" if name == "train" else "—"
        stale = t.stale_after_completed_run
        rows.append(f"| {name} | {t.kills} | {t.mid_write} | {t.corrupt} | {resumed} | {stale} | {t.duration_s} |")
    total = sum(t.kills for t in results.values()), sum(t.corrupt for t in results.values())
    rows.append(f"| all | {total[0]} | {sum(t.mid_write for t in results.values())} | {total[1]} | | | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50, help="SIGKILLs in all, split over the commands (default 50)")
    parser.add_argument("--only", nargs="+", choices=COMMANDS, default=list(COMMANDS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", default=str(ROOT / "benchmarks/results/faults.json"))
    parser.add_argument("--keep", action="store_true", help="keep the working directory (printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vaswani-faults-"))
    started = time.perf_counter()
    try:
        results = run_all(args.only, args.kills, args.seed, work)
    finally:
        if args.keep:
            print(f"working directory: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report = {
        **stamp("a small corpus written here (faults.py), trained, translated and served"),
        "kills_asked": args.kills,
        "seed": args.seed,
        "seconds": round(time.perf_counter() - started, 1),
        "commands": {name: asdict(t) for name, t in results.items()},
    }
    Path(args.results).write_text(json.dumps(report, indent=2) + "\n")
    print(table(results))
    bad = sum(t.corrupt for t in results.values()) or any(t.resumed_equal != t.resumed for t in results.values())
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
