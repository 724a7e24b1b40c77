"""A service's one torch thread (`ComputeThread`): where a server loads its model and decodes."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class ComputeThread:
    """One long-lived thread for all of a service's torch work: loading the model, measuring its precision,
    decoding. PyTorch's OpenMP runs a thread's parallel regions markedly slower once another thread of the process
    has run its own (docs/benchmarks.md, "Serving"), so a server loads and decodes on this thread and its event
    loop never runs a torch operation. A daemon thread, unlike the standard library's executors (joined at exit):
    a worker loop still waiting there never holds the process open.

        compute = ComputeThread()
        translator = compute.call(Translator.load, "runs/quick")
    """

    def __init__(self, name: str = "vaswani-compute") -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """Run `function(*args, **kwargs)` on the thread, after what was submitted before."""
        future: Future[T] = Future()
        self._calls.put((function, args, kwargs, future))
        return future

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`submit`, then wait for the result (or its exception)."""
        return self.submit(function, *args, **kwargs).result()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def close(self) -> None:
        """Stop after what was submitted."""
        self._calls.put(None)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            function, args, kwargs, future = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function(*args, **kwargs))
            except BaseException as error:  # handed to whoever waits
                future.set_exception(error)
