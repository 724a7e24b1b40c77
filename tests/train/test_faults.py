"""Faults, nothing lost: a write interrupted at any moment leaves the old version or the new one (vaswani.atomic), and
a training run killed with SIGKILL in the middle of a checkpoint resumes to the weights of one never killed.
benchmarks/faults.py kills every writing command at random moments; these are its bounded, deterministic cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import safetensors.torch
import torch
import yaml

from tests.helpers.toy import TOY, quiet, toy_config
from vaswani import atomic
from vaswani.train import checkpoint as ckpt
from vaswani.train.trainer import Trainer


class InterruptedWriteError(Exception):
    """Stands for a kill in the middle of a write."""


def _torn(tmp: Path) -> None:
    tmp.write_bytes(b"half a fi")
    raise InterruptedWriteError


def _dead_pid() -> int:
    """The id of a process that has ended (a writer killed before it finished)."""
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("old\n")
    with pytest.raises(InterruptedWriteError):
        atomic.write_file(path, _torn)
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
    atomic.write_text(path, "new\n")
    assert path.read_text() == "new\n"


def test_a_writer_killed_while_its_own_temporary_is_open_leaves_nothing_the_next_write_keeps(tmp_path):
    """safetensors writes through a `.tmpXXXXXX` of its own beside the file it is given, then renames it: a kill
    there (faults.py found one, aiming its kills at writes) left a model-sized file no writer removed. It is now
    inside the killed writer's temporary directory, which the next writer removes."""
    path = tmp_path / ckpt.WEIGHTS
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    folder = atomic.temporary_name(path).with_name(f".{path.name}.tmp-{writer.pid}")
    folder.mkdir()
    (folder / ".tmpAbC123").write_bytes(b"half a tensor")  # what the killed writer's safetensors left
    writer.kill()
    writer.wait()
    ckpt.save_weights({"w": torch.arange(3.0)}, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [ckpt.WEIGHTS]
    seen = []  # and the writer's own temporaries lie inside this process's temporary directory, not beside the file
    atomic.write_file(path, lambda tmp: seen.append(sorted(p.name for p in tmp_path.iterdir())) or tmp.write_text("x"))
    assert seen == [[f".{path.name}.tmp-{os.getpid()}", ckpt.WEIGHTS]]


def test_weights_interrupted_while_saving_keep_the_previous_weights(tmp_path, monkeypatch):
    """save_weights (the model to translate with, `vaswani average`'s output) through a save_file that dies half way:
    a non-atomic writer would leave a truncated file here."""
    path = tmp_path / ckpt.WEIGHTS
    old = {"w": torch.arange(6.0)}
    ckpt.save_weights(old, path)
    monkeypatch.setattr("vaswani.model_dir.save_file", lambda weights, name, metadata=None: _torn(Path(name)))
    with pytest.raises(InterruptedWriteError):
        ckpt.save_weights({"w": torch.zeros(6)}, path)
    assert torch.equal(ckpt.load_weights(path)["w"], old["w"])


def test_a_model_directory_rewritten_by_a_resumed_run_keeps_its_config_when_interrupted(tmp_path, monkeypatch):
    """Every run rewrites config.yaml and vaswani.json: torn, the next resume could not read its own config."""
    config = toy_config()
    ckpt.write_model_directory(tmp_path, config)
    before = (tmp_path / "config.yaml").read_text()
    monkeypatch.setattr(type(config), "save", lambda self, path: _torn(Path(path)))
    with pytest.raises(InterruptedWriteError):
        ckpt.write_model_directory(tmp_path, config)
    assert (tmp_path / "config.yaml").read_text() == before


def test_a_checkpoint_pruned_half_way_is_no_longer_listed(tmp_path, monkeypatch):
    """Pruning deletes a checkpoint's files one by one: a kill after its weights went but before its state did must
    not leave a checkpoint that checkpoint_dirs (and so resume, `vaswani average`) takes for complete."""
    for step in (3, 6):
        ckpt.save_checkpoint(tmp_path, step, {"w": torch.ones(2)}, {"step": step})

    def dying_rmtree(path, ignore_errors=False):
        Path(path, ckpt.WEIGHTS).unlink()
        raise InterruptedWriteError

    monkeypatch.setattr(atomic.shutil, "rmtree", dying_rmtree)
    with pytest.raises(InterruptedWriteError):
        ckpt.prune_checkpoints(tmp_path, keep_last=1, keep_best=0)
    assert [p.name for p in ckpt.checkpoint_dirs(tmp_path)] == ["step_00000006"]


def test_an_export_interrupted_half_way_leaves_no_output_directory(tmp_path):
    from vaswani.export import output_directory

    with pytest.raises(InterruptedWriteError), output_directory(tmp_path / "out", tmp_path / "model") as out:
        (out / "config.json").write_text("{}")
        raise InterruptedWriteError
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_checkpoint_is_invisible_and_the_next_save_clears_it(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, 3, {"w": torch.ones(2)}, {"step": 3})
    monkeypatch.setattr(ckpt.torch, "save", lambda state, path: _torn(Path(path)))
    with pytest.raises(InterruptedWriteError):
        ckpt.save_checkpoint(tmp_path, 6, {"w": torch.zeros(2)}, {"step": 6})
    monkeypatch.undo()
    assert [p.name for p in ckpt.checkpoint_dirs(tmp_path)] == ["step_00000003"]
    (tmp_path / "checkpoints/.step_00000006.tmp").mkdir()  # as a SIGKILL leaves it (no finally runs)
    ckpt.save_checkpoint(tmp_path, 9, {"w": torch.zeros(2)}, {"step": 9})
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_00000003", "step_00000009"]


def test_a_directory_is_replaced_whole_or_not_at_all(tmp_path):
    out = tmp_path / "ctranslate2"
    with atomic.building(out) as tmp:
        (tmp / "model.bin").write_text("old")
        (tmp / "stamp.json").write_text("old")
    with pytest.raises(InterruptedWriteError), atomic.building(out) as tmp:
        (tmp / "model.bin").write_text("new")
        raise InterruptedWriteError
    assert (out / "model.bin").read_text() == "old"
    with atomic.building(out) as tmp:  # a complete old one: exchanged with the new in one step, then deleted
        (tmp / "model.bin").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctranslate2"] and os.listdir(out) == ["model.bin"]
    assert (out / "model.bin").read_text() == "new"


def test_a_kill_between_the_two_renames_puts_the_old_directory_back(tmp_path):
    """Where the system cannot exchange two directories, the old one is renamed aside first: a writer killed before
    renaming the new one into place leaves `.NAME.old-PID`, which the next writer restores before going on."""
    out, pid = tmp_path / "model", _dead_pid()
    aside = tmp_path / f".model.old-{pid}"
    aside.mkdir()
    (aside / "config.yaml").write_text("old")
    (tmp_path / f".model.tmp-{pid}").mkdir()  # the new one, never renamed
    atomic.clean_stale(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"] and (out / "config.yaml").read_text() == "old"


def test_a_torn_last_line_is_cut_before_the_next_is_appended(tmp_path):
    log = tmp_path / "metrics.jsonl"
    atomic.append_line(log, json.dumps({"step": 1}))
    with log.open("a") as handle:
        handle.write('{"step": 2, "tra')  # a kill in the middle of a write
    atomic.append_line(log, json.dumps({"step": 2}))
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2]


KILLED_IN_A_CHECKPOINT = textwrap.dedent("""
    import os, signal, sys
    import vaswani.train.checkpoint as ckpt
    real = ckpt.save_file
    def dying_save(weights, path, metadata=None):
        if "step_00000006" in path:  # the second checkpoint: half its weights on disk, then SIGKILL
            real(weights, path, metadata=metadata)
            os.truncate(path, os.path.getsize(path) // 2)
            os.kill(os.getpid(), signal.SIGKILL)
        real(weights, path, metadata=metadata)
    ckpt.save_file = dying_save
    from vaswani.cli import main
    main(["train", sys.argv[1], sys.argv[2]])
""")


@pytest.mark.slow
def test_vaswani_train_killed_in_a_checkpoint_resumes_to_the_uninterrupted_weights(tmp_path):
    """`vaswani train` receives SIGKILL while writing its second checkpoint; the model directory keeps the first,
    complete, and `vaswani train` again ends with the weights of a run never killed (bit for bit)."""
    values = {k: dict(v) for k, v in TOY.items()}
    values["train"].update(max_steps=6, valid_every=3)
    recipe = tmp_path / "toy.yaml"
    recipe.write_text(yaml.safe_dump(values))
    run, env = tmp_path / "run", {**os.environ, "VASWANI_THREADS": "1", "OMP_NUM_THREADS": "1"}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_IN_A_CHECKPOINT, str(recipe), str(run)], env=env, capture_output=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert [p.name for p in ckpt.checkpoint_dirs(run)] == ["step_00000003"]
    ckpt.load_state(run / "checkpoints/step_00000003")
    resumed = subprocess.run(
        [sys.executable, "-m", "vaswani.cli", "train", str(recipe), str(run)], env=env, capture_output=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert not (run / "checkpoints/.step_00000006.tmp").exists()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the runs above: one thread, the same sums
    try:
        Trainer(toy_config(max_steps=6, valid_every=3), tmp_path / "straight", quiet()).train()
    finally:
        torch.set_num_threads(threads)
    for name in ("checkpoints/step_00000006/model.safetensors", "model.safetensors"):
        a, b = (safetensors.torch.load_file(str(d / name)) for d in (run, tmp_path / "straight"))
        assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a), name
