"""Threads from the free CPUs: /proc/stat read for the CPUs the process may use, one thread per free one."""

import torch

from vaswani.runtime import threads


def _stat(tmp_path, name, rows):
    """A /proc/stat with these (user, idle) jiffies per CPU, the other fields zero."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{i} {user} 0 0 {idle} 0 0 0 0 0 0" for i, (user, idle) in enumerate(rows)]
    path = tmp_path / name
    path.write_text("\n".join([*lines, "intr 1 2 3", "ctxt 5"]) + "\n")
    return path


def test_a_busy_cpu_is_counted_and_leaves_one_thread_per_free_cpu(tmp_path):
    before = threads.cpu_times({0, 1}, _stat(tmp_path, "a", [(100, 100), (100, 100)]))
    after = threads.cpu_times({0, 1}, _stat(tmp_path, "b", [(120, 100), (101, 119)]))  # cpu0 busy, cpu1 idle
    assert before == {0: (100, 200), 1: (100, 200)}
    busy = threads.busy_cpus(before, after)
    assert abs(busy - 1.05) < 1e-9
    assert threads.free_threads(2, busy) == 1 and threads.free_threads(2, 0.1) == 2
    assert threads.free_threads(2, 2.0) == 1  # never none
    only = threads.cpu_times({1}, _stat(tmp_path, "c", [(1, 1), (2, 2)]))
    assert only == {1: (2, 4)}  # the CPUs outside the affinity are not read
    assert threads.cpu_times({0}, tmp_path / "absent") is None


def test_settle_threads_takes_the_free_cpus_and_the_user_s_number(monkeypatch):
    original = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setenv("VASWANI_THREADS", "1")
        assert threads.settle_threads(0.0) is None and torch.get_num_threads() == 1
        monkeypatch.delenv("VASWANI_THREADS")
        torch.set_num_threads(2)
        readings = iter([{0: (0, 100), 1: (0, 100)}, {0: (100, 200), 1: (0, 200)}])  # one CPU busy throughout
        monkeypatch.setattr(threads, "cpu_times", lambda cpus: next(readings))
        monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
        line = threads.settle_threads(0.0)
        assert torch.get_num_threads() == 1 and "1 of 2 CPUs" in line and "1.0 CPUs busy" in line
        torch.set_num_threads(2)
        idle = iter([{0: (0, 100), 1: (0, 100)}, {0: (1, 200), 1: (0, 200)}])
        monkeypatch.setattr(threads, "cpu_times", lambda cpus: next(idle))
        assert threads.settle_threads(0.0) is None and torch.get_num_threads() == 2  # idle: every CPU
    finally:
        torch.set_num_threads(original)
