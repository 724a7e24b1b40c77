"""Micro-batching: the sentences of concurrent requests are translated together.

Requests put their sentences on a queue and wait. One worker (torch already uses every core for one batch),
running on the service's compute thread (serve/compute.py: the thread that loaded the model), takes the oldest waiting
request, waits up to `max_wait` seconds for more with the same decoding request (decode/request.py: frozen, so it is
the batch key), and takes one sentence of each waiting request in turn, oldest first, within `max_tokens` source
tokens and `max_sentences` sentences: a long document's sentences share the batch with the short requests that came
after it, so that their wait does not grow with its length.

By default the batch is continuous (serve/continuous.py): the sentences join the running search at its next decoding
step and leave it the step they are done, and a request is answered as soon as its last sentence is. With
`continuous=False` (`vaswani serve --batch-by-request`), and for requests the continuous search does not take (a
glossary, sampling, repetition rules, a shortlist, a compiled step, CTranslate2), a batch runs to its end
(`Translator.translate_with_details`) before the next is taken. Either way a request's result never depends on what it
was batched with (tests/decode: batch-of-N == N-of-1, rows joining mid-batch == alone).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

from vaswani.decode.request import DecodeRequest
from vaswani.runtime.threads import ThreadGovernor
from vaswani.serve.compute import ComputeThread
from vaswani.serve.continuous import ContinuousRun
from vaswani.serve.jobs import Job as _Job
from vaswani.serve.jobs import reply as _reply
from vaswani.serve.jobs import reply_all, take_in_turn
from vaswani.translate.translation import Translation
from vaswani.translate.translator import Translator

_Item = tuple[_Job, int]  # a request and one of its sentences


@dataclass
class BatchStats:
    """What the worker has done: batches (a continuous batch counts once, from its first sentence to its last), their
    decoding steps (a continuous batch's), requests and sentences translated, and the most sentences in one batch."""

    batches: int = 0
    steps: int = 0
    running: int = 0  # sentences a step ran, summed over the steps: / steps, the mean a continuous batch held
    threads: int = 0  # torch's threads now (runtime/threads.py ThreadGovernor: the CPUs other processes leave free)
    requests: int = 0
    sentences: int = 0
    largest: int = 0


# What the worker reports after each batch: sentences, requests, source tokens, target tokens, seconds.
OnBatch = Callable[[int, int, int, int, float], None]


class BusyError(RuntimeError):
    """The queue is full (or the worker has stopped): the client should retry later (HTTP 503)."""


class MicroBatcher:
    """`await batcher.translate(texts, ids, translator.request(...))` from any number of
    concurrent requests; `max_sentences=1` with `max_wait=0` serves one request at a time. At most
    `max_queued` sentences wait; more are refused with `BusyError` rather than queued without bound.
    `compute`: the thread to decode on (the one that loaded the translator; the worker holds it until `close`);
    None: a thread of its own."""

    def __init__(
        self,
        translator: Translator,
        max_wait: float = 0.005,
        max_tokens: int = 4096,
        max_sentences: int = 256,
        max_queued: int = 4096,
        on_batch: OnBatch | None = None,
        compute: ComputeThread | None = None,
        continuous: bool = True,
    ) -> None:
        self.translator, self.max_wait, self.max_tokens, self.max_sentences = (
            translator,
            max_wait,
            max_tokens,
            max_sentences,
        )
        self.max_queued, self.on_batch, self.continuous = max_queued, on_batch, continuous
        # torch's threads kept to the CPUs other processes leave free (runtime/threads.py), where the owner sets one
        # (`vaswani serve` does): ticked by the worker, which runs torch; a library's caller keeps its own count
        self.governor: ThreadGovernor | None = None
        self.stats = BatchStats()
        self._pending: deque[_Job] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._own = compute is None
        self._compute = compute or ComputeThread("vaswani-batcher")
        self._worker = self._compute.submit(self._run)

    @property
    def alive(self) -> bool:
        return not self._worker.done() and not self._closed

    @property
    def queued(self) -> int:
        """Sentences waiting for the worker."""
        with self._ready:
            return sum(job.left for job in self._pending)

    async def translate(
        self,
        texts: list[str],
        ids: Sequence[list[int]] | None = None,
        request: DecodeRequest | None = None,
        languages: Sequence[str | None] | None = None,
    ) -> list[Translation]:
        """The translations of `texts`, in order, decoded together with other requests' sentences that share
        `request` (default: the model's own settings). `ids`: their `translator.encode_sources(texts)`, where the
        caller has them already (one tokenization); `languages`: each text's target language, where the model
        is a many-to-many one (the ids of other models hold theirs): requests for other languages share a batch."""
        loop = asyncio.get_running_loop()
        ids = list(ids) if ids is not None else self.translator.encode_sources(texts)
        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} encoded sentences for {len(texts)} texts")
        job = _Job(list(texts), ids, request or self.translator.request(), loop, loop.create_future())
        job.languages = None if languages is None else list(languages)
        with self._ready:
            if not self.alive:
                raise BusyError("the translation worker has stopped")
            if self._pending and sum(j.left for j in self._pending) + len(texts) > self.max_queued:
                raise BusyError(f"more than {self.max_queued} sentences are waiting to be translated; retry shortly")
            self._pending.append(job)
            self._ready.notify()
        return await job.future

    def close(self, timeout: float | None = 30.0) -> None:
        """Translate what is queued, then stop the worker."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        concurrent.futures.wait([self._worker], timeout)
        if self._own:
            self._compute.close()

    def _next(self) -> DecodeRequest | None:
        """The oldest waiting request's decoding request, once there is one; None once closed and none waits."""
        with self._ready:
            while not self._pending:
                if self._closed:
                    return None
                self._ready.wait()
            return self._pending[0].key

    def _take(self) -> list[_Item]:
        """The next batch: sentences of the oldest request and of the waiting ones with its options, one of each
        in turn, within the budgets."""
        with self._ready:
            first = self._pending[0]
            self.wait_for_company(first)
            for job in self._pending:
                if job.future.done():  # its client went away (a cancelled future): its sentences are not decoded
                    job.drop()
            jobs = [job for job in self._pending if job.key == first.key and job.left]
            batch = take_in_turn(jobs, 0, 0, self.max_sentences, self.max_tokens)
            self._pending = deque(job for job in self._pending if job.left)
            return batch

    def wait_for_company(self, first: _Job) -> None:
        """Up to `max_wait` after `first` came, until requests with its options fill a batch (the lock held)."""
        deadline = first.queued + self.max_wait
        while not self._closed and not self._full(first.key) and time.perf_counter() < deadline:
            self._ready.wait(max(0.0, deadline - time.perf_counter()))

    def _full(self, key: Hashable) -> bool:
        jobs = [job for job in self._pending if job.key == key]
        return (
            sum(job.left for job in jobs) >= self.max_sentences
            or sum(job.tokens_left for job in jobs) >= self.max_tokens
        )

    def tick(self) -> None:
        """torch's threads kept to the CPUs other processes leave free (runtime/threads.py), checked every few
        seconds; from the worker (the thread that runs torch), between steps."""
        if self.governor is not None and self.governor.tick() is not None:
            self.stats.threads = torch.get_num_threads()

    def _run(self) -> None:
        self.stats.threads = torch.get_num_threads()
        try:
            while (request := self._next()) is not None:
                self.tick()
                search = self.translator.continuous(request) if self.continuous else None
                if search is not None:  # sentences join and leave the running batch at every step
                    ContinuousRun(self, request, search).run()
                else:
                    self._translate(self._take())
        finally:  # whatever stopped the worker, nobody waits for ever
            with self._ready:
                self._closed = True
                left, self._pending = list(self._pending), deque()
            for job in left:
                _reply(job, None, BusyError("the translation worker has stopped"))

    def _translate(self, batch: list[_Item]) -> None:
        texts = [job.texts[i] for job, i in batch]
        ids = [job.ids[i] for job, i in batch]
        jobs = list(dict.fromkeys(job for job, _ in batch))  # the requests in the batch, in order
        started = time.perf_counter()
        try:
            known = all(job.languages is not None for job in jobs)
            languages = [job.languages[i] for job, i in batch] if known else None
            results = self.translator.translate_with_details(
                texts, batch[0][0].request, encoded=ids, target_language=languages
            )
        except Exception as error:
            if len(jobs) > 1:  # one request's failure must not fail the others: each alone
                for job in jobs:
                    self._translate([item for item in batch if item[0] is job])
                return
            with self._ready:
                jobs[0].drop()
            _reply(jobs[0], None, error)
            return
        self.stats.batches += 1
        self.stats.sentences += len(texts)
        self.stats.largest = max(self.stats.largest, len(texts))
        if self.on_batch is not None:
            generated = sum(len(r.candidates[0].tokens) for r in results if r.candidates)
            self.on_batch(len(texts), len(jobs), sum(map(len, ids)), generated, time.perf_counter() - started)
        replies = []
        for (job, i), result in zip(batch, results, strict=True):
            job.results[i] = result
            job.done += 1
            if job.done == len(job.texts):  # its last sentence: the request is answered now
                self.stats.requests += 1
                replies.append((job, job.results, None))
        reply_all(replies)
