"""precision auto in the trainer, train.max_time, the budget schedule, and progress lines in a log."""

import io
import time

import pytest
import yaml
from rich.console import Console

from tests.helpers.toy import quiet, toy_config
from vaswani.config import ConfigError, TrainConfig, parse_duration
from vaswani.runtime import precision
from vaswani.runtime.precision import Measurement
from vaswani.train.schedule import learning_rate, progress
from vaswani.train.trainer import Trainer


def _measuring(monkeypatch, speedup):
    calls = []

    def measure(config, device, rows, training):
        calls.append(rows)
        return Measurement(fp32_s=0.01, bf16_s=0.01 / speedup, rows=rows)

    monkeypatch.setattr(precision, "measure_matmuls", measure)
    return calls


def _log() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=200), buffer  # not a terminal, as a log file


@pytest.mark.parametrize(("speedup", "expected"), [(1.8, "bf16"), (0.5, "fp32")])
@pytest.mark.slow
def test_auto_resolves_by_measurement_and_the_model_directory_keeps_the_result(
    tmp_path, monkeypatch, speedup, expected
):
    calls = _measuring(monkeypatch, speedup)
    console, log = _log()
    trainer = Trainer(toy_config(max_steps=2, valid_every=2, precision="auto"), tmp_path / "run", console)
    trainer.train()
    assert calls == [120]  # the batch's token budget, measured once
    saved = yaml.safe_load((tmp_path / "run/config.yaml").read_text())
    assert saved["train"]["precision"] == expected == trainer.config.train.precision
    assert f"precision auto -> {expected}" in log.getvalue() and "fp32 10.0 ms" in log.getvalue()


@pytest.mark.slow
def test_explicit_bf16_measured_slower_warns_once_and_trains_in_bf16(tmp_path, monkeypatch):
    _measuring(monkeypatch, 0.5)
    console, log = _log()
    trainer = Trainer(toy_config(max_steps=2, valid_every=2, precision="bf16"), tmp_path / "run", console)
    trainer.train()
    assert trainer.config.train.precision == "bf16"
    warnings = [line for line in log.getvalue().splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "0.50x fp32's speed" in warnings[0]


@pytest.mark.slow
def test_a_resumed_run_keeps_its_precision_whatever_the_new_measurement_says(tmp_path, monkeypatch):
    _measuring(monkeypatch, 1.8)
    Trainer(toy_config(max_steps=2, valid_every=2, precision="auto"), tmp_path / "run", quiet()).train()
    calls = _measuring(monkeypatch, 0.5)  # the machine now says fp32
    console, log = _log()
    trainer = Trainer(toy_config(max_steps=4, valid_every=2, precision="auto"), tmp_path / "run", console)
    state = trainer.train()
    assert state.step == 4 and trainer.config.train.precision == "bf16" and calls == []
    assert "precision bf16: kept from the run being resumed" in log.getvalue()
    assert yaml.safe_load((tmp_path / "run/config.yaml").read_text())["train"]["precision"] == "bf16"


@pytest.mark.slow
def test_progress_lines_appear_in_a_log_before_the_first_validation(tmp_path):
    console, log = _log()
    Trainer(toy_config(max_steps=8, valid_every=8), tmp_path / "run", console).train()
    lines = log.getvalue().splitlines()
    steps = [line for line in lines if line.startswith("step ") and "tok/s" in line]
    assert [line.split()[1] for line in steps] == ["2/8", "4/8", "6/8", "8/8"]  # every valid_every // 4 updates
    for word in ("loss", "lr", "tok/s", "MFU", "elapsed", "left"):
        assert word in steps[0]
    first_validation = next(i for i, line in enumerate(lines) if line.startswith("step 8:"))
    assert lines.index(steps[0]) < first_validation
    assert "training ended at step 8" in lines[-3] and "reached train.max_steps (8)" in lines[-3]
    assert lines[-2].startswith("the model directory holds step 8's weights, the best validation by")
    assert lines[-1].startswith("speed: ") and "MFLOP per token" in lines[-1] and "of measured CPU" in lines[-1]


STOP_WITHIN = 2.0  # seconds past train.max_time a toy run may take to stop: its last update, validation and save


@pytest.mark.slow
def test_max_time_stops_validates_and_saves_and_a_resume_counts_the_time_spent(tmp_path):
    config = toy_config(max_steps=100_000, valid_every=100_000, max_time="1s")
    console, log = _log()
    state = Trainer(config, tmp_path / "run", console).train()
    # the stop (the update under way, a validation of the toy set, a save) is bounded in advance, not by a first run
    assert 0 < state.step < 100_000 and 1.0 <= state.elapsed < 1.0 + STOP_WITHIN
    assert f"training ended at step {state.step}" in log.getvalue()
    assert "reached train.max_time (1s" in log.getvalue()
    assert (tmp_path / f"run/checkpoints/step_{state.step:08d}").is_dir()  # validated and saved there
    assert "valid_loss" in state.history[-1]
    again = Trainer(config, tmp_path / "run", quiet()).train()
    assert again.step == state.step  # the budget was already spent
    budget = 3  # a resumed run: its budget counts the first run's time, its stop bounded alike
    longer = Trainer(
        toy_config(max_steps=100_000, valid_every=100_000, max_time=f"{budget}s"), tmp_path / "run", quiet()
    ).train()
    assert longer.step > state.step and budget <= longer.elapsed < budget + STOP_WITHIN


@pytest.mark.slow
def test_a_checkpoint_counts_the_validation_so_a_resume_does_too(tmp_path, monkeypatch):
    validate = Trainer.validate

    def slow(self, data):
        time.sleep(1.0)
        return validate(self, data)

    monkeypatch.setattr(Trainer, "validate", slow)
    config = toy_config(max_steps=2, valid_every=2)
    state = Trainer(config, tmp_path / "run", quiet()).train()
    again = Trainer(config, tmp_path / "run", quiet()).train()  # resumes at step 2, trains nothing
    assert again.step == 2 and again.elapsed >= 1.0 and again.elapsed <= state.elapsed


@pytest.mark.slow
def test_a_validation_that_spends_the_time_left_ends_the_run_without_another(tmp_path, monkeypatch):
    """max_time counts validation: one that reaches the budget ends the run at its step, where the run went on for
    one more update and validated that too (twice the validation's time, past the budget)."""
    validate = Trainer.validate

    def slow(self, data):
        time.sleep(6.0)  # a long BLEU validation
        return validate(self, data)

    monkeypatch.setattr(Trainer, "validate", slow)
    state = Trainer(toy_config(max_steps=100, valid_every=2, max_time="5s"), tmp_path / "run", quiet()).train()
    validations = [r["step"] for r in state.history if "valid_loss" in r]
    assert validations == [2] and state.step == 2


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("10m", 600), ("1h30m", 5400), ("1.5h", 5400), (45, 45), ("2m30s", 150)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["10 minutes", "m", "-5s", "0s", "1d"])
def test_bad_durations_are_config_errors_naming_the_key(bad):
    with pytest.raises(ConfigError, match=r"train\.max_time must be"):
        toy_config(max_time=bad)


def test_linear_decay_reaches_zero_at_the_end_of_the_budget():
    t = TrainConfig(warmup_steps=10, max_steps=1000, max_time="100s", lr_decay="linear")
    plain = TrainConfig(warmup_steps=10, max_steps=1000)
    assert progress(100, 50.0, t) == 0.5  # time is the larger share
    assert progress(900, 50.0, t) == 0.9  # steps are
    assert progress(100, 500.0, t) == 1.0
    assert learning_rate(200, t, 128, 0.25) == pytest.approx(0.75 * learning_rate(200, plain, 128))
    assert learning_rate(200, t, 128, 1.0) == 0.0
    assert learning_rate(200, plain, 128, 0.9) == learning_rate(200, plain, 128)  # none: the paper's schedule


@pytest.mark.slow
def test_ddp_ranks_stop_together_at_the_time_budget(tmp_path):
    """Each rank has its own clock; rank 0's decides, or one rank would wait forever for the other."""
    import os
    import subprocess
    import sys

    from tests.helpers.toy import TOY

    config = tmp_path / "ddp.yaml"
    values = {k: dict(v) for k, v in TOY.items()}
    values["train"].update(max_steps=100_000, valid_every=100_000, max_time="3s", lr_decay="linear")
    config.write_text(yaml.safe_dump(values))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ddp = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "-m",
            "vaswani.cli",
            "train",
            str(config),
            str(tmp_path / "ddp"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ddp.returncode == 0, ddp.stderr[-2000:]
    assert "reached train.max_time (3s" in ddp.stderr
