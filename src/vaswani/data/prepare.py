"""Make or reuse a prepared-data directory, for every kind of text: one entry point, one manifest check.

    ParallelRecipe (data/parallel.py: translation)  ─┐
    PlainRecipe    (data/plain.py: lm, mlm)         ─┴─► open_or_prepare ──► store.PreparedData

A directory with a manifest is reused when the manifest matches the recipe and the input files, and is
an error naming what differs otherwise; a missing or empty one is made (written into a temporary sibling
and renamed into place, store.building). Labelled text (data/labelled.py) is small and read directly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Protocol

from rich.console import Console

from vaswani import atomic
from vaswani.data import store
from vaswani.data.corpus import DataError
from vaswani.data.tokenizer import Tokenizer


class Recipe(Protocol):
    """What decides one kind of prepared text, and how it is made."""

    noun: ClassVar[str]  # how the log names the result: "prepared data: DIR (...)"
    inputs_by_path: ClassVar[bool]  # True: the manifest must name the same files; False: the same content
    absent: ClassVar[dict]  # what a key() entry missing from an older manifest stands for

    def key(self) -> dict:
        """The settings recorded in the manifest and compared on reuse."""

    def input_files(self) -> list[Path]:
        """The files read, in order (their size, time and sha256 are recorded)."""

    def make(
        self,
        directory: Path,
        tokenizer: Tokenizer | None,
        workers: int,
        log: Callable[[str], None],
        console: Console | None,
    ) -> None:
        """Write the directory (manifest last); `tokenizer`: use it instead of training one."""

    def summary(self, prepared: store.PreparedData, reused: bool) -> str:
        """How much was prepared, for the log: `120 training pairs`."""


def open_or_prepare(
    recipe: Recipe,
    directory: str | Path,
    tokenizer: Tokenizer | None = None,
    workers: int | None = None,
    log: Callable[[str], None] = lambda _: None,
    console: Console | None = None,
) -> store.PreparedData:
    """Reuse `directory` when its manifest matches the recipe and the files; make it when missing or empty.
    `workers`: encoding processes (default: the CPUs this process may use); `console`: where the
    encoding's progress shows (none when None)."""
    directory = Path(directory)
    if (directory / store.MANIFEST).is_file():
        check_manifest(recipe, directory, store.read_manifest(directory))
        prepared = store.PreparedData.open(directory)
        log(f"prepared {recipe.noun}: {directory} (reused; {recipe.summary(prepared, reused=True)})")
        return prepared
    store.check_unprepared(directory)
    for path in recipe.input_files():
        if not path.is_file():
            raise DataError(f"{path}: file not found")
    log(f"preparing {directory}")
    recipe.make(directory, tokenizer, workers or default_workers(), log, console)
    prepared = store.PreparedData.open(directory, verify=False)
    log(f"prepared {recipe.noun}: {directory} ({recipe.summary(prepared, reused=False)})")
    return prepared


def check_manifest(recipe: Recipe, directory: Path, manifest: dict) -> None:
    """A DataError saying what differs when `directory` was prepared from other data or settings."""
    fix = f"delete {directory} or prepare into another directory (data.prepared)"
    made = manifest.get("recipe", {})
    for key, value in recipe.key().items():
        recorded = made.get(key, recipe.absent.get(key))
        if recorded != value:
            raise DataError(f"{directory} was prepared with {key}={recorded!r}, this run asks for {value!r}; {fix}")
    files, made_from = recipe.input_files(), manifest["inputs"]
    if recipe.inputs_by_path and [str(p) for p in files] != [entry["path"] for entry in made_from]:
        raise DataError(f"{directory} was prepared from other files; {fix}")
    if len(files) != len(made_from):
        raise DataError(f"{directory} was prepared from {len(made_from)} files, this run names {len(files)}; {fix}")
    for path, entry in zip(files, made_from, strict=True):
        if not path.is_file():
            raise DataError(f"{path}: file not found")
        stat = path.stat()
        # a new time alone (a copy, a touch) is checked by content: only a real change is an error
        if stat.st_size != entry["bytes"] or (
            stat.st_mtime_ns != entry["mtime_ns"] and store.file_sha256(path) != entry["sha256"]
        ):
            raise DataError(f"{path} has changed since {directory} was prepared from it; {fix}")


def install_tokenizer(prepared: store.PreparedData, model_dir: Path) -> Tokenizer:
    """The prepared data's tokenizer, copied into the model directory (which must not hold another)."""
    for name, digest in prepared.manifest["tokenizer"].items():
        target = model_dir / name
        if target.is_file() and store.file_sha256(target) != digest:
            raise DataError(
                f"{target} is not the tokenizer {prepared.directory} was prepared with; use a new "
                "model directory, or prepare the data with this model's tokenizer"
            )
        if not target.is_file():  # whole or absent: a torn copy would refuse every resumed run as "not the tokenizer"
            atomic.copy_file(prepared.directory / name, target)
    return Tokenizer.load(prepared.directory)


def write_report(prepared: store.PreparedData, model_dir: Path) -> None:
    """The filter report (pairs kept and removed, per corpus), kept with the model as data_report.json."""
    atomic.write_text(model_dir / "data_report.json", json.dumps(prepared.manifest["report"], indent=2) + "\n")


def default_workers() -> int:
    """The CPUs this process may use (its affinity, under a scheduler or taskset), else all of them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
