"""`in_order` (data/streaming.py), the process pool that encodes a corpus's chunks: results in input order, a
consumer that stops early never hangs, a worker that dies is a one-line DataError."""

import os
import time

import pytest

from vaswani.data.corpus import DataError
from vaswani.data.streaming import in_order

STATE = {}


def _setup(tag: str) -> None:  # module-level: spawned processes import it
    STATE["tag"] = tag


def _square(job: tuple) -> dict:
    (i,) = job
    time.sleep(0.01 * (i % 3))  # chunks finishing out of order
    return {"i": i, "square": i * i, "tag": STATE["tag"]}


def _dies_at_five(job: tuple) -> dict:
    if job[0] == 5:
        os._exit(1)  # as the kernel's out-of-memory killer leaves it
    return _square(job)


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_in_input_order_from_set_up_workers(workers):
    out = list(in_order(((i,) for i in range(20)), workers, _square, _setup, ("ready",)))
    assert out == [{"i": i, "square": i * i, "tag": "ready"} for i in range(20)]


def test_a_consumer_that_stops_early_returns_without_hanging():
    started = time.perf_counter()
    for _ in range(3):  # multiprocessing.Pool's terminate hung here once in a while
        results = in_order(((i,) for i in range(1000)), 2, _square, _setup, ("x",))
        assert [next(results)["i"] for _ in range(6)] == list(range(6))
        results.close()  # what an error or Ctrl-C in the consumer does
    assert time.perf_counter() - started < 60


def test_a_worker_that_dies_is_a_one_line_data_error():
    with pytest.raises(DataError, match=r"a worker preparing the data died .* fewer --workers") as error:
        list(in_order(((i,) for i in range(12)), 2, _dies_at_five, _setup, ("x",)))
    assert "\n" not in str(error.value)
