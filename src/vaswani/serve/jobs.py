"""A request as the batcher holds it while its sentences are translated (serve/batching.py, serve/continuous.py), and
its answer, given on its event loop."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from vaswani.decode.request import DecodeRequest
from vaswani.translate.translation import Translation
from vaswani.translate.translator import Prepared


@dataclass(eq=False)  # a request is itself: hashed by identity
class Job:
    texts: list[str]
    ids: list[list[int]]  # the texts' source token ids (Translator.encode_sources): tokenized once, by the caller
    request: DecodeRequest  # one batch shares it
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    languages: list[str | None] | None = None  # per text, its target language (a many-to-many model's code)
    queued: float = field(default_factory=time.perf_counter)
    taken: int = 0  # sentences handed to a batch so far, in order
    tokens_left: int = field(init=False)  # source tokens of the sentences not taken: read at every look at the queue
    results: list[Translation | None] = field(init=False)
    done: int = 0  # sentences translated
    order: list[int] = field(init=False)  # the sentences to take, in order: all, or those a continuous batch searches
    prepared: Prepared | None = None  # a continuous batch's: Translator.prepare's (serve/continuous.py)
    found: dict[int, list] = field(default_factory=dict)  # a continuous batch's hypotheses per sentence
    closed: bool = False  # answered (or failed) by a continuous batch

    def __post_init__(self) -> None:
        self.tokens_left = sum(map(len, self.ids))
        self.results = [None] * len(self.texts)
        self.order = list(range(len(self.texts)))

    def plan(self, prepared: Prepared) -> None:
        """Only the sentences `prepared` searches are taken (none yet taken)."""
        self.prepared, self.order = prepared, prepared.todo
        self._at = {i: j for j, i in enumerate(self.order)}
        self.tokens_left = sum(len(prepared.ids[i]) for i in self.order)

    @property
    def key(self) -> Hashable:
        return self.request

    @property
    def left(self) -> int:
        """Sentences not yet handed to a batch."""
        return len(self.order) - self.taken

    def next_size(self) -> int:
        """Source tokens of the next sentence to take."""
        return len((self.prepared or self).ids[self.order[self.taken]])

    def forced(self, i: int) -> int | None:
        """The token sentence `i`'s output starts with (a many-to-many model's target language), of a planned job."""
        forced = self.prepared.forced
        return None if forced is None else forced[self._at[i]]

    def take(self) -> int:
        """The next sentence's index, handed to a batch."""
        i = self.order[self.taken]
        self.taken += 1
        self.tokens_left -= len(self.ids[i])
        return i

    def drop(self) -> None:
        """No more of its sentences are taken (it failed, or its client went away)."""
        self.taken, self.tokens_left = len(self.order), 0


def take_in_turn(jobs: list[Job], held: int, tokens: int, max_sentences: int, max_tokens: int) -> list[tuple[Job, int]]:
    """Sentences of `jobs`, one of each in turn, oldest first, while a batch holding `held` sentences of `tokens` source
    tokens holds fewer than `max_sentences` and at most `max_tokens` (a first sentence always): a shorter sentence of a
    later job still fits where a longer one does not."""
    taken: list[tuple[Job, int]] = []
    added = True
    while added and held < max_sentences:
        added = False
        for job in jobs:
            if not job.left or held >= max_sentences:
                continue
            n = job.next_size()
            if held and tokens + n > max_tokens:
                continue  # a shorter sentence of another request may still fit
            taken.append((job, job.take()))
            held, tokens, added = held + 1, tokens + n, True
    return taken


Reply = tuple[Job, Any, BaseException | None]  # a request, its result, or the error that stopped it


def reply(job: Job, result: Any, error: BaseException | None) -> None:
    reply_all([(job, result, error)])


def reply_all(replies: list[Reply]) -> None:
    """Each request answered on its event loop, with one wake-up of each loop for all of them: a continuous batch
    answers every request done at a step at once: each wake-up of a loop from the worker waits for the GIL its
    thread holds (docs/benchmarks.md, "Serving")."""
    loops: dict[asyncio.AbstractEventLoop, list[Reply]] = {}
    for item in replies:
        loops.setdefault(item[0].loop, []).append(item)
    for loop, mine in loops.items():
        with contextlib.suppress(RuntimeError):  # the event loop has closed: nobody is waiting
            loop.call_soon_threadsafe(_set_all, mine)


def _set_all(replies: list[Reply]) -> None:
    for job, result, error in replies:
        if job.future.cancelled():  # the client went away
            continue
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)
