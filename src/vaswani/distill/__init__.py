"""`vaswani distill TEACHER CONFIG STUDENT`: sequence-level knowledge distillation (Kim & Rush, 2016). The teacher
(any translation model directory: trained here or imported, OPUS-MT too) translates the training sources of CONFIG
(distill/teacher.py: chunked, resumable, sharded over torchrun's processes); its translations that pass the filters
are the student's targets, optionally mixed with the original pairs; the student (CONFIG's model section: a preset
such as student-6-1, or any shape), from random weights or from some of the teacher's layers (distill/start.py),
is trained on them by the trainer, as `vaswani train` trains, resumable too.

The student's directory is a model directory like any other; its vaswani.json records the teacher, the
distillation settings and what the filters kept; STUDENT/distill/ holds the teacher's translations and the
distilled corpus, which a rerun reuses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vaswani import atomic
from vaswani.config import Config, ConfigError, apply_overrides
from vaswani.config.distill import DistillConfig
from vaswani.config.recipe import load_values
from vaswani.distill import start
from vaswani.distill import teacher as passes
from vaswani.model_dir import CheckpointError

WORK = "distill"  # STUDENT/distill: the teacher's chunks, the distilled corpus and its report
# What the student takes from the teacher with its tokenizer: the vocabulary and its special ids, the text settings.
_TOKENIZER_MODEL_KEYS = ("src_vocab_size", "tgt_vocab_size", "share_embeddings", "pad_id", "bos_id", "eos_id")
_TOKENIZER_DATA_KEYS = ("tokenizer", "vocab_size", "lowercase")


def student_config(values: dict, teacher: Config, settings: DistillConfig, work: Path) -> Config:
    """The student's recipe: CONFIG's sections, its training data the distilled corpus (and the original pairs,
    weighted, when distill.original_weight is above 0); with the teacher's tokenizer, the teacher's vocabulary and
    text settings. A ConfigError where the student cannot start from the teacher as distill.init asks."""
    unknown = set(values) - {"model", "data", "train", "decode"}
    if unknown:
        raise ConfigError(
            f"a distillation config has the sections model, data, train, decode and distill; remove "
            f"{', '.join(sorted(unknown))}"
        )
    original = Config.from_dict({k: v for k, v in values.items() if k in ("data",)}).data
    original.require_training_data()
    data = {k: v for k, v in (values.get("data") or {}).items() if k not in ("train_src", "train_tgt", "corpora")}
    corpora = [{"name": "distilled", "src": str(work / passes.SOURCES), "tgt": str(work / passes.TARGETS)}]
    if settings.original_weight > 0:
        corpora += [{**c, "name": f"original {c['name']}", "weight": c["weight"] * settings.original_weight}
                    for c in original.training_corpora()]  # fmt: skip
    data["corpora"] = corpora
    model = dict(values.get("model") or {})
    if settings.tokenizer == "teacher":
        for key in _TOKENIZER_MODEL_KEYS:
            model[key] = getattr(teacher.model, key)
        model.pop("vocab_size", None)
        for key in _TOKENIZER_DATA_KEYS:
            data[key] = getattr(teacher.data, key)
    config = Config.from_dict({**values, "model": model, "data": data})
    if settings.init == "teacher":  # before the teacher's pass: a student that cannot start from it is told now
        start.check_shape(teacher.model, config.model)
    return config


def original_pairs(values: dict) -> tuple[list[str], list[str]]:
    """CONFIG's training pairs (every corpus of data.corpora, or data.train_src/train_tgt), read once."""
    from vaswani.data.corpus import DataError, read_lines

    data = Config.from_dict({"data": values.get("data") or {}}).data
    data.require_training_data()
    sources, targets = [], []
    for corpus in data.training_corpora():
        src, tgt = read_lines(corpus["src"], data.invalid_utf8), read_lines(corpus["tgt"], data.invalid_utf8)
        if len(src) != len(tgt):
            raise DataError(f"{corpus['src']} has {len(src):,} lines but {corpus['tgt']} has {len(tgt):,}")
        sources += src
        targets += tgt
    return sources, targets


def distill(
    teacher_dir: str | Path,
    config_path: str | Path,
    student_dir: str | Path,
    overrides: list[str] = (),
    console: Any = None,
):
    """Distil the teacher in `teacher_dir` into a student trained by the recipe `config_path` in `student_dir`
    (resumed where a run stopped: the teacher's pass from its last chunk, the training from its last checkpoint).
    Returns the student's final TrainState."""
    teacher_dir, student_dir = Path(teacher_dir), Path(student_dir)
    if not (teacher_dir / "config.yaml").is_file():
        raise CheckpointError(f"{teacher_dir} is not a model directory (no config.yaml): give the teacher's directory")
    values = apply_overrides(load_values(config_path), list(overrides))
    run = Distillation(teacher_dir, student_dir, values, console)
    run.start_pass()
    run.teach()
    report = run.build_corpus()
    run.copy_tokenizer()
    return run.train(report)


class Distillation:
    """One distillation's steps, in order (`distill`): the teacher's pass started (or resumed), the teacher
    translating its share of the chunks, the distilled corpus built, the teacher's tokenizer copied, the student
    trained. Each step holds its own synchronisation: under torchrun every process runs every step, the first one
    (`rank` 0) writing what all share."""

    def __init__(self, teacher_dir: Path, student_dir: Path, values: dict, console: Any = None) -> None:
        import torch.distributed as dist

        from vaswani.console import stderr_console

        self.teacher_dir, self.student_dir, self.work = teacher_dir, student_dir, student_dir / WORK
        self.settings = DistillConfig.from_dict(values.pop("distill", None))
        self.teacher_config = Config.load(teacher_dir / "config.yaml")
        self.config = student_config(values, self.teacher_config, self.settings, self.work)
        self.rank, self.world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        self.console = console or stderr_console()
        self.sources, self.targets = original_pairs(values)

    def log(self, message: str) -> None:
        if self.rank == 0:
            self.console.print(f"vaswani: {message}", highlight=False)

    def barrier(self) -> None:
        from vaswani.train.distributed import barrier

        barrier(self.world)

    def start_pass(self) -> None:
        """The teacher's pass ready in STUDENT/distill (chunks of another teacher, settings or sources removed, with
        the student's prepared data; refused where a student was trained on them)."""
        stamp = passes.stamp_of(self.teacher_dir, self.settings, self.sources)
        if passes.changed(self.work, stamp):
            self._made_anew("the translations of another teacher, other distill settings or other sources")
        if self.rank == 0:
            self.student_dir.mkdir(parents=True, exist_ok=True)
            passes.start(self.work, stamp, self.log)
        self.barrier()

    def teach(self) -> None:
        """The teacher translates the chunks of this process's share not done yet."""
        from vaswani.console import progress_bar

        settings, sources = self.settings, self.sources
        chunks = passes.pending(self.work, len(sources), settings.chunk_lines, self.rank, self.world)
        if not chunks:
            return
        translator = _teacher(self.teacher_dir, settings, self.config.train.device)
        size = settings.chunk_lines
        todo = sum(len(sources[i * size : (i + 1) * size]) for i in chunks)
        share = f" (this process's share of {self.world})" if self.world > 1 else ""
        self.log(f"teacher {self.teacher_dir}: translating {todo:,} of {len(sources):,} training sources{share}, "
                 f"beam {settings.beam_size}, {settings.n_best}-best")  # fmt: skip
        with progress_bar(self.console, "teacher translating", todo, enabled=self.rank == 0) as advance:
            passes.translate_chunks(translator, sources, self.work, settings, chunks, advance)

    def build_corpus(self) -> dict:
        """After the pass: the distilled corpus's report, the corpus built by the first process where none is there
        or it was built with other filters or another pick (refused where a student was trained on it)."""
        from vaswani.train import checkpoint as ckpt

        work, settings = self.work, self.settings
        self.barrier()
        rebuild = not passes.corpus_current(work, settings)
        if rebuild and (work / passes.REPORT).is_file():
            built = passes.read_report(work).get("settings")
            if built is None and ckpt.checkpoint_dirs(self.student_dir):
                rebuild = False  # built before the settings were recorded, and a student trained on it: kept
            else:
                self._made_anew(f"a distilled corpus built with other filters or another pick ({built})")
        if self.rank == 0 and rebuild:
            report = passes.build_corpus(work, self.sources, self.targets, settings)
            dropped = ", ".join(f"{n:,} {reason}" for reason, n in report["dropped"].items()) or "none"
            self.log(f"distilled corpus: {report['kept']:,} of {report['translations']:,} translations kept "
                     f"(dropped: {dropped})")  # fmt: skip
        self.barrier()
        return passes.read_report(work)

    def copy_tokenizer(self) -> None:
        """The teacher's tokenizer in the student's directory (distill.tokenizer teacher), once."""
        from vaswani.data.tokenizer import Tokenizer

        if self.rank == 0 and self.settings.tokenizer == "teacher" and not Tokenizer.present(self.student_dir):
            Tokenizer.load(self.teacher_dir).save(self.student_dir)
        self.barrier()

    def train(self, report: dict):
        """The student trained on the distilled corpus, from its first weights; its final TrainState."""
        from vaswani.train.trainer import Trainer

        origin = {"distilled_from": str(self.teacher_dir.resolve()), "distill": self.settings.to_dict(),
                  "distilled_pairs": report}  # fmt: skip
        first = self.first_weights()
        return Trainer(self.config, self.student_dir, self.console, init_from=first, origin=origin).train()

    def first_weights(self) -> Path | None:
        """Where the student's first weights are (distill.init teacher: written by the first process), or None:
        random."""
        if self.settings.init != "teacher":
            return None
        if self.rank == 0:
            start.write_start(self.teacher_dir, self.teacher_config, self.config, self.work)
        self.barrier()
        return self.work / start.START

    def _made_anew(self, what: str) -> None:
        """Before what a student learns from (`what`: the old one) is made again: refused in one line where a student
        was trained on it; the student's prepared data, made from it, removed by the first process."""
        from vaswani.train import checkpoint as ckpt

        if ckpt.checkpoint_dirs(self.student_dir):
            raise ConfigError(
                f"{self.student_dir} holds a student trained on {what}: distil into a new directory, or remove "
                f"{self.student_dir / 'checkpoints'} to train it again"
            )
        self.barrier()  # every rank has read the old files before the first process replaces them
        if self.rank == 0 and (self.student_dir / "prepared").is_dir():
            atomic.remove_directory(self.student_dir / "prepared")


def _teacher(teacher_dir: Path, settings: DistillConfig, device: str):
    from vaswani.translate.translator import Translator

    local = os.environ.get("LOCAL_RANK")
    if device == "auto" and local is not None:
        import torch

        device = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    return Translator.load(teacher_dir, device=device, precision=settings.precision)
