"""Threads from the CPU quota and the free CPUs: cgroup files and /proc/stat read from fake trees, the user's number
from VASWANI_THREADS > OMP_NUM_THREADS > MKL_NUM_THREADS, a bad value named in one line."""

import os
import subprocess
import sys

import pytest
import torch

from vaswani.runtime import threads

USER = ("VASWANI_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _stat(tmp_path, name, rows):
    """A /proc/stat with these (user, idle) jiffies per CPU, the other fields zero."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{i} {user} 0 0 {idle} 0 0 0 0 0 0" for i, (user, idle) in enumerate(rows)]
    path = tmp_path / name
    path.write_text("\n".join([*lines, "intr 1 2 3", "ctxt 5"]) + "\n")
    return path


def _tree(root, cgroup, files):
    """A fake / under `root`: /proc/self/cgroup holding `cgroup`, and `files` ({path under /sys/fs/cgroup: text})."""
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    for path, text in files.items():
        (root / "sys/fs/cgroup" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "sys/fs/cgroup" / path).write_text(text)
    return root


@pytest.fixture
def torch_threads():
    original = torch.get_num_threads()
    yield
    torch.set_num_threads(original)


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


def test_cgroup_v2_cpu_max_is_the_smallest_over_the_cgroup_and_its_parents(tmp_path):
    root = _tree(tmp_path, "0::/a/b\n", {"a/cpu.max": "300000 100000\n", "a/b/cpu.max": "max 100000\n"})
    assert threads.cpu_quota(root) == threads.Quota(3, "cgroup v2 cpu.max 300000/100000")  # the parent's limit
    (root / "sys/fs/cgroup/a/b/cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: rounded up
    assert threads.cpu_quota(root).cpus == 2
    (root / "sys/fs/cgroup/cpu.max").write_text("50000 100000\n")  # the root's half a CPU: at least one
    assert threads.cpu_quota(root) == threads.Quota(1, "cgroup v2 cpu.max 50000/100000")
    nowhere = _tree(tmp_path / "n", "0::/c\n", {"c/cpu.max": "max 100000\n", "cpu.max": "max 100000\n"})
    assert threads.cpu_quota(nowhere) is None
    assert threads.cpu_quota(_tree(tmp_path / "m", "0::/c\n", {})) is None  # no cpu.max anywhere
    outside = _tree(tmp_path / "o", "0::/../../host/slice\n", {"cpu.max": "200000 100000\n"})
    assert threads.cpu_quota(outside).cpus == 2  # a path outside the mount: the mount's own limit


def test_cgroup_v1_cfs_quota_of_the_cpu_controller(tmp_path):
    lines = "5:memory:/docker/x\n4:cpu,cpuacct:/docker/x\n0::/\n"
    files = {"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "200000\n", "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000"}
    files["cpu.max"] = "max 100000\n"  # the unified hierarchy of a hybrid setup: the cpu controller is on v1
    assert threads.cpu_quota(_tree(tmp_path, lines, files)) == threads.Quota(
        2, "cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us 200000/100000"
    )
    split = {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}
    assert threads.cpu_quota(_tree(tmp_path / "s", "2:cpuacct:/\n1:cpu:/\n", split)) is None  # -1: none
    mounted_here = {"cpu/cpu.cfs_quota_us": "250000\n", "cpu/cpu.cfs_period_us": "100000\n"}  # the container's own
    assert threads.cpu_quota(_tree(tmp_path / "h", "1:cpu:/docker/y\n", mounted_here)).cpus == 3
    assert threads.cpu_quota(_tree(tmp_path / "e", "1:cpu:/docker/y\n", {})) is None  # no files


def test_an_unreadable_proc_self_cgroup_is_no_quota(tmp_path):
    assert threads.cpu_quota(tmp_path) is None
    (tmp_path / "proc/self/cgroup").mkdir(parents=True)  # a directory: reading it fails
    assert threads.cpu_quota(tmp_path) is None
    assert threads.cpu_quota(_tree(tmp_path / "g", "garbage\n", {"cpu.max": "100000 100000\n"})) is None


def test_a_quota_bounds_the_count_without_reading_the_host_s_busy_cpus(tmp_path, monkeypatch, torch_threads):
    root = _tree(tmp_path, "0::/pod\n", {"pod/cpu.max": "200000 100000\n"})
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(threads, "cpu_times", lambda cpus, stat: pytest.fail("read the host-wide /proc/stat"))
    torch.set_num_threads(3)  # torch's default saw more CPUs than the quota allows: lowered
    line = threads.settle_threads(0.0, root, environ={})
    assert torch.get_num_threads() == 2
    assert line.startswith("threads: 2 (the container's CPU quota, cgroup v2 cpu.max 200000/100000;")
    assert "torch would run 3" in line
    torch.set_num_threads(2)
    assert threads.settle_threads(0.0, root, environ={}) is None and torch.get_num_threads() == 2


def test_without_a_quota_the_free_cpus_count_and_a_low_default_is_raised(tmp_path, monkeypatch, torch_threads):
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
    readings = iter([{0: (0, 100), 1: (0, 100)}, {0: (100, 200), 1: (0, 200)}])  # one CPU busy throughout
    monkeypatch.setattr(threads, "cpu_times", lambda cpus, stat: next(readings))
    torch.set_num_threads(2)
    line = threads.settle_threads(0.0, tmp_path, environ={})  # no /proc/self/cgroup: no quota
    assert torch.get_num_threads() == 1 and "1 of 2 CPUs" in line and "1.0 CPUs busy" in line
    idle = iter([{0: (0, 100), 1: (0, 100)}, {0: (1, 200), 1: (0, 200)}])
    monkeypatch.setattr(threads, "cpu_times", lambda cpus, stat: next(idle))
    line = threads.settle_threads(0.0, tmp_path, environ={})  # torch's 1 is below the 2 free CPUs: raised
    assert torch.get_num_threads() == 2 and line is None  # raised, and not said: every command would say it
    wide = _tree(tmp_path / "w", "0::/\n", {"cpu.max": "400000 100000\n"})  # a quota above the CPUs: no bound
    busy = iter([{0: (0, 100), 1: (0, 100)}, {0: (100, 200), 1: (0, 200)}])
    monkeypatch.setattr(threads, "cpu_times", lambda cpus, stat: next(busy))
    assert "1 of 2 CPUs" in threads.settle_threads(0.0, wide, environ={}) and torch.get_num_threads() == 1


def test_the_user_s_number_wins_in_order(tmp_path, monkeypatch, torch_threads):
    root = _tree(tmp_path, "0::/\n", {"cpu.max": "100000 100000\n"})  # a quota of one CPU, overridden
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(threads, "cpu_times", lambda cpus, stat: pytest.fail("measured despite the user's number"))
    for environ, expected in [
        ({"VASWANI_THREADS": "3", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "4"}, 3),
        ({"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "4"}, 2),
        ({"MKL_NUM_THREADS": "4"}, 4),
        ({"VASWANI_THREADS": "", "OMP_NUM_THREADS": "3,1"}, 3),  # empty: unset; OpenMP's nested list: the outer
        ({"VASWANI_THREADS": " 2 ", "MKL_NUM_THREADS": "abc"}, 2),  # a variable not read is not judged
    ]:
        torch.set_num_threads(1 if expected != 1 else 2)
        assert threads.settle_threads(0.0, root, environ=environ) is None
        assert torch.get_num_threads() == expected, environ
    torch.set_num_threads(3)
    assert threads.settle_threads(0.0, root, environ={"VASWANI_THREADS": "  "}).startswith("threads: 1 (")


@pytest.mark.parametrize("name", USER)
@pytest.mark.parametrize("value", ["abc", "0", "-1", "2.5", "1e3", "²"])
def test_a_bad_value_is_named_with_the_fix(name, value, tmp_path, torch_threads):
    with pytest.raises(ValueError) as error:
        threads.settle_threads(0.0, tmp_path, environ={name: value})
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{name} must be a whole number of threads")
    assert repr(value) in message and "unset it" in message


def test_the_command_line_names_a_bad_value_in_one_line():
    env = {k: v for k, v in os.environ.items() if k not in USER} | {"VASWANI_THREADS": "abc"}
    done = subprocess.run(
        [sys.executable, "-m", "vaswani.cli", "model", "base"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "vaswani: error: VASWANI_THREADS must be a whole number of threads, 1 or more, got 'abc' "
        "(unset it to let vaswani choose)"
    ]


def test_the_governor_follows_what_other_processes_leave_free(tmp_path, monkeypatch, torch_threads):
    """A server's threads (serve/batching.py): a CPU another process keeps busy costs one thread; its own use is not
    counted as another's; back to every CPU once the other stops; and the user's number is never changed."""
    root = _tree(tmp_path, "0::/\n", {})
    (root / "proc/stat").write_text(_stat(tmp_path, "s0", [(0, 100), (0, 100)]).read_text())
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
    clock = {"wall": 0.0, "own": 0.0}
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(threads.time, "process_time", lambda: clock["own"])
    torch.set_num_threads(2)
    governor = threads.ThreadGovernor(every=2.0, root=root, environ={})

    def after(seconds, stat_rows, own_seconds):
        clock["wall"] += seconds
        clock["own"] += own_seconds
        (root / "proc/stat").write_text(_stat(tmp_path, "s", stat_rows).read_text())
        return governor.tick()

    assert after(1.0, [(100, 100), (0, 200)], 0.0) is None  # too soon to look again
    assert after(1.0, [(200, 100), (0, 300)], 0.0) == 1 and torch.get_num_threads() == 1  # cpu0 busy: not ours
    assert after(2.0, [(400, 100), (200, 300)], 2.0) is None  # both busy, one of them ours: still one free
    assert after(2.0, [(400, 300), (400, 300)], 2.0) == 2 and torch.get_num_threads() == 2  # the other stopped
    user = threads.ThreadGovernor(root=root, environ={"VASWANI_THREADS": "2"})
    clock["wall"] += 5
    (root / "proc/stat").write_text(_stat(tmp_path, "s", [(900, 300), (400, 800)]).read_text())
    assert user.tick() is None and torch.get_num_threads() == 2
