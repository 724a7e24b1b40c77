"""The server's continuous batch: waiting requests' sentences join the running search at every decoding step and
each leaves it the step it is done (decode/continuous.py), so a request is answered as soon as its own sentences are,
never after a longer one's end, and new requests do not wait for the batch before them to finish.

At every step the waiting requests that share the running search's decoding request, up to the first that does not
(it is next: requests are served in the order they came), give one sentence each in turn, oldest first, while the
batch holds fewer than `max_sentences` sentences and `max_tokens` source tokens: a long document's sentences share the
batch with the short requests that came after it. A client gone (its future cancelled) takes its sentences out at the
next step. Runs on the batcher's worker thread (serve/batching.py), until nothing runs and nothing can join.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from vaswani.decode.continuous import ContinuousSearch
from vaswani.decode.request import DecodeRequest
from vaswani.serve.jobs import Job, Reply, reply, reply_all, take_in_turn


class ContinuousRun:
    """One continuous batch of `request` for `batcher` (a MicroBatcher: its queue, budgets, stats and callback)."""

    def __init__(self, batcher, request: DecodeRequest, search: ContinuousSearch) -> None:
        self.batcher, self.request, self.search = batcher, request, search
        self.jobs: list[Job] = []  # the requests with sentences in the batch

    def run(self) -> None:
        """Until nothing runs and nothing can join: the first requests wait for company up to the batcher's
        `max_wait`, as a batch's do; later ones join at the next step."""
        b = self.batcher
        with b._ready:
            if b._pending:
                b.wait_for_company(b._pending[0])
        b.stats.batches += 1
        while True:
            b.tick()
            self._admit()
            if not self.search.running:
                return
            started = time.perf_counter()
            try:
                done = self.search.step()
            except Exception as error:  # every request in the batch fails with it; the worker goes on
                self._fail(error)
                return
            self._deliver(done, time.perf_counter() - started)

    def _waiting(self) -> list[Job]:
        """The requests that may join now, in the order they came (the batcher's lock held); cancelled ones dropped
        (and their sentences taken out of the batch)."""
        gone: set[Hashable] = set()
        for job in dict.fromkeys([*self.batcher._pending, *self.jobs]):  # waiting, or all its sentences running
            if job.future.done() and not job.closed:  # its client went away: its sentences are not decoded further
                job.drop()
                job.closed = True  # nobody waits for it: not prepared, taken or answered
                gone |= {(job, i) for i in job.order}
        if gone:
            self.search.drop(gone)
            self.jobs = [job for job in self.jobs if not job.future.done()]
        waiting = []
        for job in self.batcher._pending:
            if job.key != self.request:
                break  # requests are served in order: this one is next, once the batch has emptied
            if not job.closed and (job.left or job.prepared is None):
                waiting.append(job)
        return waiting

    def _admit(self) -> None:
        b = self.batcher
        with b._ready:
            waiting = self._waiting()
        for job in waiting:
            if job.prepared is None:
                self._prepare(job)
        with b._ready:
            waiting = [job for job in self._waiting() if job.prepared is not None]
            taken = take_in_turn(waiting, self.search.running, self.search.source_tokens, b.max_sentences, b.max_tokens)
            for job, i in taken:
                self.search.add((job, i), job.prepared.ids[i], job.forced(i))
                if job not in self.jobs:
                    self.jobs.append(job)
            b._pending = type(b._pending)(
                job for job in b._pending if not job.closed and (job.left or job.prepared is None)
            )

    def _prepare(self, job: Job) -> None:
        """`job`'s sentences made ready (Translator.prepare); one with none to search is answered at once, one that
        fails gets its error."""
        try:
            prepared = self.batcher.translator.prepare(
                job.texts, job.request, encoded=job.ids, target_language=job.languages
            )
        except Exception as error:
            with self.batcher._ready:
                job.drop()
                job.closed = True
            reply(job, None, error)
            return
        with self.batcher._ready:
            job.plan(prepared)
        if not prepared.todo:
            reply(*self._answered(job))

    def _deliver(self, done: list, seconds: float) -> None:
        """The sentences done at this step, and the requests whose last one it was answered."""
        b, replies = self.batcher, []
        for (job, i), hyps in done:
            job.found[i] = hyps
            job.done += 1
            if job.done == len(job.order) and not job.left:
                replies.append(self._answered(job))
        reply_all(replies)
        b.stats.steps += 1
        b.stats.running += self.search.running + len(done) - len(self.search.joining)
        b.stats.sentences += len(done)
        b.stats.largest = max(b.stats.largest, self.search.running + len(done))
        if b.on_batch is not None and done:
            source = sum(len(job.prepared.ids[i]) for (job, i), _ in done)
            generated = sum(len(hyps[0].tokens) for _, hyps in done if hyps)
            b.on_batch(len(done), len({job for (job, _), _ in done}), source, generated, seconds)

    def _answered(self, job: Job) -> Reply:
        """`job`'s answer: its translations, or the error making them gave."""
        prepared, job.closed = job.prepared, True
        try:
            results = self.batcher.translator.finish(prepared, [job.found[i] for i in prepared.todo])
        except Exception as error:
            return job, None, error
        if job in self.jobs:
            self.jobs.remove(job)
        self.batcher.stats.requests += 1
        return job, results, None

    def _fail(self, error: BaseException) -> None:
        """A step failed (`error`): each request in the batch is translated again alone (translate_with_details), so
        that only one that fails by itself gets an error, and the worker goes on."""
        self.search.clear()
        jobs, self.jobs = self.jobs, []
        with self.batcher._ready:
            for job in jobs:
                job.drop()
                job.closed = True
        for job in jobs:
            try:
                results = self.batcher.translator.translate_with_details(
                    job.texts, job.request, encoded=job.ids, target_language=job.languages
                )
            except Exception as own:
                reply(job, None, own)
                continue
            self.batcher.stats.requests += 1
            reply(job, results, None)
