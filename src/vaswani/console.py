"""Progress shown on standard error while commands work: a live bar on a terminal, plain lines in a log."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from rich.console import Console
from rich.filesize import decimal
from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
from rich.text import Text

# Where stderr is not a terminal (a log file, nohup, a scheduler, CI), a plain line at most this often.
PLAIN_EVERY_S = 10.0


@contextlib.contextmanager
def progress_bar(
    console: Console,
    description: str,
    total: int | None,
    enabled: bool = True,
    *,
    completed: int = 0,
    timed: bool = True,
    transient: bool = True,
    in_bytes: bool = False,
) -> Iterator[Reporter]:
    """Yields a `Reporter`: call it with n to advance the count, `.show(status)` for the caller's own figures.

    A rich bar on a terminal (`transient`: gone when the work is done); otherwise plain lines. With
    `timed`, a line at most every PLAIN_EVERY_S, such as `translating: 3,200/10,000, 21s elapsed, ~45s left`,
    and one when it is done; without it, a line at each `show`, such as `step 400/1000 epoch 1 loss 4.210 ...`
    (the caller chooses its cadence and says how the work ended). `completed`: the count to start from (a
    resumed run). `enabled=False` shows nothing (a DDP rank other than 0). `in_bytes`: the count is bytes,
    shown as `1.2 GB/3.4 GB` (reading files)."""
    reporter = Reporter(console if enabled else None, description, total, completed, timed, in_bytes)
    if reporter.console is None or not console.is_terminal:
        yield reporter
        reporter.close()
        return
    count = DownloadColumn() if in_bytes else MofNCompleteColumn()
    columns = [TextColumn("{task.description}"), BarColumn(), count, _StatusColumn(reporter)]
    with Progress(*columns, console=console, transient=transient) as bar:
        reporter.bar, reporter.bar_task = bar, bar.add_task(description, total=total, completed=completed)
        yield reporter


class Reporter:
    """Progress of one piece of work (see `progress_bar`): a live bar on a terminal, plain lines in a log."""

    def __init__(
        self,
        console: Console | None,
        description: str,
        total: int | None,
        completed: int,
        timed: bool,
        in_bytes: bool = False,
    ) -> None:
        self.console, self.description, self.total, self.timed = console, description, total, timed
        self.in_bytes = in_bytes
        self.done = self.first = completed
        self.status: str | None = None  # the caller's figures, shown in place of the reporter's timing
        self.bar: Progress | None = None
        self.bar_task = None
        self.started = self.last_line = time.perf_counter()
        self.printed = False

    def __call__(self, n: int = 1) -> None:
        """Advance the count by `n`."""
        self.done += n
        if self.bar is not None:
            self.bar.update(self.bar_task, completed=self.done)
        elif self.console is not None and self.timed:
            now = time.perf_counter()
            if now - self.last_line >= PLAIN_EVERY_S:
                self._print(f"{self.description}: {self.count()}, {self.timing(now)}")
                self.last_line, self.printed = now, True

    def show(self, status: str) -> None:
        """The caller's own figures (training: loss, learning rate, tokens/s, time left): next to the bar on a
        terminal, a line of their own in a log."""
        self.status = status
        if self.bar is None and self.console is not None:
            self._print(f"{self.description} {self.done}/{self.total} {status}")  # as the trainer's other lines

    def count(self) -> str:
        if self.in_bytes:
            return decimal(self.done) + (f"/{decimal(self.total)}" if self.total else "")
        return f"{self.done:,}" + (f"/{self.total:,}" if self.total else "")

    def timing(self, now: float) -> str:
        """Time spent and, at this pace, time left: `21s elapsed, ~45s left`."""
        elapsed, moved = now - self.started, self.done - self.first
        text = f"{format_duration(elapsed)} elapsed"
        if self.total and moved > 0 and self.done < self.total:
            text += f", ~{format_duration(elapsed * (self.total - self.done) / moved)} left"
        return text

    def close(self) -> None:
        """A last line where timed lines were printed, so a log shows the work finished."""
        if self.printed:
            self._print(f"{self.description}: {self.count()}, {self.timing(time.perf_counter())}, done")

    def _print(self, line: str) -> None:
        self.console.print(line, highlight=False)


class _StatusColumn(ProgressColumn):
    """The bar's last column: the caller's figures, or the time spent and left."""

    def __init__(self, reporter: Reporter) -> None:
        super().__init__()
        self.reporter = reporter

    def render(self, task) -> Text:
        r = self.reporter
        return Text(r.status if r.status is not None else r.timing(time.perf_counter()))


def stderr_console() -> Console:
    """Where commands and the trainer report: standard error, one line per message in a log file (no wrapping),
    text printed as it is (no colouring of numbers, no markup: a path with [brackets] stays whole)."""
    return Console(stderr=True, highlight=False, markup=False, soft_wrap=True)


def format_duration(seconds: float) -> str:
    """45s, 9m 05s, 1h 02m."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
