"""Property-based fuzzing of every input surface (issue 60): each surface module holds a Hypothesis strategy of
inputs as users bring them, broken ones included, and a check of the surface's promise on one input.

A surface is a `Surface`: `inputs()` builds the strategy, `check(value, context)` runs the input through the code
and returns the outcome's name ("translated", "refused", ...) or raises AssertionError where the promise broke (a
traceback, a 500, output cut short, an error that names nothing). `context()` builds what the checks share once
(a model directory, a server), entered as a context manager. The suite runs a few hundred cases per surface
(tests/fuzz/test_surfaces.py), new ones each run from a seed it prints; benchmarks/fuzz.py runs ≥ 10,000 and
writes the counts.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@dataclass(frozen=True)
class Surface:
    """One input surface: its name, a strategy of inputs, the check of one input, and what the checks share."""

    name: str
    inputs: Callable[[], st.SearchStrategy]
    check: Callable[[Any, Any], str]
    context: Callable[[], contextlib.AbstractContextManager] = field(default=contextlib.nullcontext)


@dataclass
class Report:
    """What a run of one surface met: outcomes counted by name, the cases run, the seconds taken."""

    surface: str
    outcomes: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def cases(self) -> int:
        return sum(self.outcomes.values())


def run_surface(surface: Surface, examples: int, seed: int | None = None) -> Report:
    """`examples` generated inputs through `surface.check`; the first broken promise raises (shrunk by
    Hypothesis to a small input). `seed`: the run's seed (the same seed draws the same inputs: a failure is
    reproduced by it), None for Hypothesis's own random one."""
    import torch

    report = Report(surface.name)
    start, threads = time.perf_counter(), torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices gain nothing from more threads, and lose much on a busy CPU
    try:
        with surface.context() as context:
            _run(surface, examples, seed, context, report)
    finally:
        torch.set_num_threads(threads)
    report.seconds = time.perf_counter() - start
    return report


def _run(surface: Surface, examples: int, seed: int | None, context: Any, report: Report) -> None:
    """The Hypothesis run: no deadline (a busy CPU is not a bug), no example database (a fresh clone draws as its
    seed says, not as an earlier run's failures do)."""

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(surface.inputs())
    def one(value: Any) -> None:
        report.outcomes[surface.check(value, context)] += 1

    (one if seed is None else hypothesis.seed(seed)(one))()


def text(min_size: int = 0, max_size: int = 200) -> st.SearchStrategy[str]:
    """Any Unicode text users bring: every plane, surrogates excluded (not encodable), controls, marks, RTL."""
    return st.text(st.characters(blacklist_categories=("Cs",)), min_size=min_size, max_size=max_size)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Warnings from the code under test are outcomes, not noise: silenced inside a check."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


_MODEL: list[Any] = []


def tiny_translator() -> Any:
    """One Translator on a tiny untrained model with a real tokenizer (write_tiny_model_directory), built once per
    process for the surfaces that translate (its outputs are nonsense, everything around the search is real)."""
    if not _MODEL:
        import atexit
        import shutil
        import tempfile
        from pathlib import Path

        from tests.helpers.common import write_tiny_model_directory
        from vaswani.translate.translator import Translator

        directory = Path(tempfile.mkdtemp(prefix="vaswani-fuzz-"))
        atexit.register(shutil.rmtree, directory, True)
        model = write_tiny_model_directory(
            directory, max_len_a=0.0, max_len_b=12, beam_size=2
        )  # outputs of 12 tokens at most
        _MODEL.append(Translator.load(model, "cpu"))
    return _MODEL[0]


def one_line(error: BaseException, *names: str) -> str:
    """The message of an error a user sees, checked: one line, naming one of `names` (the file, the field)."""
    message = str(error)
    assert message and "\n" not in message.strip(), f"not one line: {message!r}"
    assert "Traceback" not in message, message
    assert not names or any(name in message for name in names), f"{message!r} names none of {names}"
    return message
