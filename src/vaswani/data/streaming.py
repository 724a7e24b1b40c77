"""Text streamed: files are read chunk by chunk (plain or .gz), never whole; each chunk is worked on in a
worker process (data/parallel.py: decoded, normalised, encoded, filtered), results coming back in input order.

    files ──chunks──► N worker processes ──in order──► results
"""

from __future__ import annotations

import gzip
import itertools
import multiprocessing
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from vaswani.data.corpus import READ_ERRORS, DataError, file_lines, unreadable

Chunk = tuple[int, list[bytes], list[bytes]]  # (number of the first line, source lines, target lines)


# -- reading ------------------------------------------------------------------------------------
class _Reader:
    """Lines of a plain or .gz file as bytes without the line end; `position` in the file on disk
    (compressed bytes for .gz), for progress."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise DataError(f"{path}: file not found")
        self.path = path
        self.raw = open(path, "rb")  # noqa: SIM115 (closed by close())
        self.handle = gzip.GzipFile(fileobj=self.raw, mode="rb") if path.suffix == ".gz" else self.raw

    @property
    def position(self) -> int:
        return self.raw.tell()

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from file_lines(self.handle)
        except READ_ERRORS as error:
            raise unreadable(self.path, error) from None

    def close(self) -> None:
        self.handle.close()
        self.raw.close()


def raw_chunks(src: Path, tgt: Path, size: int, progress: Callable[[int], None] | None = None) -> Iterator[Chunk]:
    """`size` aligned lines of two files at a time; a different number of lines is a DataError naming both
    files with their counts. `progress(n)` is advanced by the bytes read (compressed bytes for .gz)."""
    a, b = _Reader(src), _Reader(tgt)
    try:
        lines_a, lines_b, first, done = iter(a), iter(b), 1, 0
        while True:
            chunk_a = list(itertools.islice(lines_a, size))
            chunk_b = list(itertools.islice(lines_b, size))
            if len(chunk_a) != len(chunk_b):
                n_a = first - 1 + len(chunk_a) + sum(1 for _ in lines_a)
                n_b = first - 1 + len(chunk_b) + sum(1 for _ in lines_b)
                raise DataError(
                    f"{src} has {n_a} lines but {tgt} has {n_b}; parallel files need one sentence per line, aligned"
                )
            if not chunk_a:
                return
            if progress is not None:
                position = a.position + b.position
                progress(position - done)
                done = position
            yield first, chunk_a, chunk_b
            first += len(chunk_a)
    finally:
        a.close()
        b.close()


def text_chunks(pairs: list[tuple[str, str]], size: int) -> Iterator[Chunk]:
    """Pairs already in memory (a toy task's), as `raw_chunks` gives files."""
    for start in range(0, len(pairs), size):
        part = pairs[start : start + size]
        yield start + 1, [s.encode() for s, _ in part], [t.encode() for _, t in part]


def in_order(
    jobs: Iterator[tuple],
    workers: int,
    work: Callable[[tuple], dict],
    initializer: Callable[..., None],
    initargs: tuple,
) -> Iterator[dict]:
    """`work(job)` of each job, in input order; with workers > 1 on a process pool (each process set up by
    `initializer(*initargs)`) holding at most 2 x workers chunks in flight, so reading never runs ahead of
    encoding (bounded memory). `work` and `initializer` are module-level functions (spawned processes import them).
    Stopped early (an error, Ctrl-C, the consumer closing it), the chunks not yet started are cancelled and the
    running ones finished before it returns; a worker that dies (killed, out of memory) is a one-line DataError.
    (multiprocessing.Pool's terminate could hang there: its task thread blocked on the queue of workers it had
    just killed, seen once in this project's tests.)"""
    if workers <= 1:
        initializer(*initargs)
        yield from map(work, jobs)
        return
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold torch's threads
    with ProcessPoolExecutor(workers, mp_context=context, initializer=initializer, initargs=initargs) as pool:
        pending: deque[Future] = deque()
        try:
            for job in jobs:
                pending.append(pool.submit(work, job))
                if len(pending) >= 2 * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except BrokenProcessPool as error:
            raise DataError(
                f"a worker preparing the data died ({error}): killed, or out of memory; run again with fewer --workers"
            ) from None
        finally:
            for future in pending:
                future.cancel()
