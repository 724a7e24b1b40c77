"""Early stopping, checkpoint pruning, a kill during a save, bf16, and bad input through the CLI."""

import gzip
import json
import subprocess
import sys
import textwrap

import pytest
import torch
import yaml

from tests.helpers.toy import TOY, quiet, run_cli, toy_config
from vaswani.train import checkpoint as ckpt
from vaswani.train.trainer import Trainer


def _scripted_validation(monkeypatch, scores):
    """Validation returns these BLEU scores in turn (the loop's bookkeeping is what is under test)."""
    scores = iter(scores)
    monkeypatch.setattr(Trainer, "validate", lambda self, data: {"loss": 1.0, "bleu": next(scores)})


@pytest.mark.slow
def test_early_stopping_keeps_the_best_and_the_last_checkpoints(tmp_path, monkeypatch):
    _scripted_validation(monkeypatch, [10.0, 12.0, 11.0, 9.0, 50.0])
    config = toy_config(max_steps=10, valid_every=2, patience=2, keep_last=1, keep_best=1)
    state = Trainer(config, tmp_path / "run", quiet()).train()
    assert state.step == 8  # stopped after two validations without improvement, never reached 50.0
    assert state.best_score == 12.0 and state.bad_validations == 2
    assert [p.name for p in ckpt.checkpoint_dirs(tmp_path / "run")] == ["step_00000004", "step_00000008"]
    best = ckpt.load_weights(tmp_path / "run/checkpoints/step_00000004" / ckpt.WEIGHTS)
    model = ckpt.load_weights(tmp_path / "run" / ckpt.WEIGHTS)
    # the model to translate with is the best one
    assert best and best.keys() == model.keys() and all(torch.equal(best[n], model[n]) for n in best)


@pytest.mark.slow
def test_pruning_with_loss_keeps_the_lowest_loss(tmp_path, monkeypatch):
    losses = iter([3.0, 1.0, 2.0, 4.0])
    monkeypatch.setattr(Trainer, "validate", lambda self, data: {"loss": next(losses)})
    config = toy_config(max_steps=8, valid_every=2, early_stopping_metric="loss", keep_last=2, keep_best=1)
    Trainer(config, tmp_path / "run", quiet()).train()
    names = [p.name for p in ckpt.checkpoint_dirs(tmp_path / "run")]
    assert names == ["step_00000004", "step_00000006", "step_00000008"]  # best (loss 1.0) + last two


KILLED_SAVE = textwrap.dedent("""
    import os, sys, torch
    from tests.helpers.toy import quiet, toy_config
    from vaswani.train.trainer import Trainer
    real_save = torch.save
    def dying_save(obj, path, *args, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"half a checkpoint")
        os._exit(9)  # as if killed in the middle of writing the training state
    torch.save = dying_save
    Trainer(toy_config(max_steps=6, valid_every=3), sys.argv[1], quiet()).train()
""")


@pytest.mark.slow
def test_a_kill_during_a_save_leaves_the_previous_checkpoint_and_training_resumes(tmp_path):
    run = tmp_path / "run"
    Trainer(toy_config(max_steps=3, valid_every=3), run, quiet()).train()
    killed = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(run)], capture_output=True, text=True, timeout=120)
    assert killed.returncode == 9, killed.stderr[-2000:]
    assert [p.name for p in ckpt.checkpoint_dirs(run)] == ["step_00000003"]
    assert (run / "checkpoints/.step_00000006.tmp").is_dir()  # the half-written one, never seen as complete
    ckpt.load_state(run / "checkpoints/step_00000003")
    state = Trainer(toy_config(max_steps=6, valid_every=3), run, quiet()).train()
    assert state.step == 6 and not (run / "checkpoints/.step_00000006.tmp").exists()
    Trainer(toy_config(max_steps=6, valid_every=3), tmp_path / "straight", quiet()).train()
    a = ckpt.load_weights(run / "checkpoints/step_00000006" / ckpt.WEIGHTS)
    b = ckpt.load_weights(tmp_path / "straight/checkpoints/step_00000006" / ckpt.WEIGHTS)
    assert a and a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


@pytest.mark.slow
def test_bf16_training_keeps_fp32_weights_and_follows_fp32(tmp_path):
    states = {
        p: Trainer(toy_config(max_steps=6, valid_every=6, precision=p), tmp_path / p, quiet()).train()
        for p in ("fp32", "bf16")
    }
    weights = {p: ckpt.load_weights(tmp_path / p / ckpt.WEIGHTS) for p in states}
    assert all(t.dtype == torch.float32 for t in weights["bf16"].values())
    assert any(not torch.equal(weights["bf16"][n], weights["fp32"][n]) for n in weights["fp32"])  # bf16 was used
    fp32, bf16 = (states[p].history[-1]["valid_loss"] for p in ("fp32", "bf16"))
    assert bf16 == pytest.approx(fp32, rel=0.05)


def _write(path, lines):
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


def _recipe(tmp_path, src_lines, tgt_lines, **data):
    _write(tmp_path / "train.de.gz", src_lines)
    _write(tmp_path / "train.en.gz", tgt_lines)
    values = {k: dict(v) for k, v in TOY.items()}
    values["data"] = {
        "train_src": str(tmp_path / "train.de.gz"),
        "train_tgt": str(tmp_path / "train.en.gz"),
        "tokenizer": "bpe",
        "vocab_size": 100,
        **data,
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _one_line_error(result):
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("vaswani: error: ")]
    assert "Traceback" not in result.stderr and len(errors) == 1, result.stderr  # progress lines may come first
    assert result.stderr.strip().endswith(errors[0])
    return errors[0]


@pytest.mark.slow
def test_cli_bad_training_input_gives_one_line_errors(tmp_path):
    words = [f"wort{i} satz{i % 7} ende" for i in range(200)]
    recipe = _recipe(tmp_path, words, [w.replace("wort", "word") for w in words], vocab_size=5000)
    error = _one_line_error(run_cli("train", str(recipe), str(tmp_path / "run")))
    assert "data.vocab_size=5000 is too large" in error and "set data.vocab_size to" in error

    recipe = _recipe(tmp_path, [""] * 50, ["x"] * 50)
    error = _one_line_error(run_cli("train", str(recipe), str(tmp_path / "run2")))
    assert "no training pairs left after filtering" in error

    recipe = _recipe(tmp_path, words, words)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    error = _one_line_error(run_cli("train", str(recipe), str(blocker / "run")))
    assert f"cannot write to model directory {blocker / 'run'}" in error

    _write(tmp_path / "short.en.gz", words[:10])
    values = yaml.safe_load(recipe.read_text())
    values["data"]["train_tgt"] = str(tmp_path / "short.en.gz")
    recipe.write_text(yaml.safe_dump(values))
    error = _one_line_error(run_cli("train", str(recipe), str(tmp_path / "run3")))
    assert "200" in error and "10" in error and "short.en.gz" in error


@pytest.mark.slow
def test_cli_reports_a_corrupt_checkpoint_and_how_to_go_on(tmp_path):
    run = tmp_path / "run"
    Trainer(toy_config(max_steps=3, valid_every=3), run, quiet()).train()
    (run / "checkpoints/step_00000003" / ckpt.STATE).write_bytes(b"garbage")
    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump(json.loads(json.dumps(toy_config(max_steps=6).to_dict()))))
    error = _one_line_error(run_cli("train", str(config), str(run)))
    assert "is corrupt" in error and "delete" in error
