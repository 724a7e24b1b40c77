"""Progress shown on standard error while commands work (hidden when stderr is not a terminal)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


@contextlib.contextmanager
def progress_bar(console: Console, description: str, total: int | None,
                 enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """A rich progress bar; yields `advance(n)`."""
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=True, disable=not (enabled and console.is_terminal)) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)
