"""Progress shown on standard error while commands work: a live bar on a terminal, plain lines in a log."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

# Where stderr is not a terminal (a log file, nohup, a scheduler, CI), a plain line at most this often.
PLAIN_EVERY_S = 10.0


@contextlib.contextmanager
def progress_bar(console: Console, description: str, total: int | None,
                 enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """Yields `advance(n)`. A rich bar on a terminal; otherwise, when the work outlasts PLAIN_EVERY_S,
    lines such as `translating: 3,200/10,000, 21s elapsed, ~45s left`, and one when it is done."""
    if not enabled:
        yield lambda n: None
    elif console.is_terminal:
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task(description, total=total)
            yield lambda n: progress.advance(task, n)
    else:
        started = last = time.perf_counter()
        done = 0
        printed = False

        def line(now: float) -> str:
            elapsed = now - started
            text = f"{description}: {done:,}" + (f"/{total:,}" if total else "")
            text += f", {format_duration(elapsed)} elapsed"
            if total and done and done < total:
                text += f", ~{format_duration(elapsed * (total - done) / done)} left"
            return text

        def advance(n: int) -> None:
            nonlocal done, last, printed
            done += n
            now = time.perf_counter()
            if now - last >= PLAIN_EVERY_S:
                console.print(line(now), highlight=False)
                last, printed = now, True

        yield advance
        if printed:
            console.print(line(time.perf_counter()) + ", done", highlight=False)


def format_duration(seconds: float) -> str:
    """45s, 9m 05s, 1h 02m."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
