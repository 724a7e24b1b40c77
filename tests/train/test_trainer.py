import dataclasses
import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.helpers.toy import TOY, quiet, run_cli, toy_config
from vaswani.config import Config
from vaswani.train import checkpoint as ckpt
from vaswani.train.trainer import Trainer


@pytest.mark.slow
def test_interrupted_and_resumed_run_equals_uninterrupted(tmp_path):
    Trainer(toy_config(max_steps=6), tmp_path / "straight", quiet()).train()
    Trainer(toy_config(max_steps=3), tmp_path / "resumed", quiet()).train()
    state = Trainer(toy_config(max_steps=6), tmp_path / "resumed", quiet()).train()
    assert state.step == 6
    a = ckpt.load_weights(tmp_path / "straight/checkpoints/step_00000006" / ckpt.WEIGHTS)
    b = ckpt.load_weights(tmp_path / "resumed/checkpoints/step_00000006" / ckpt.WEIGHTS)
    first = ckpt.load_weights(tmp_path / "straight/checkpoints/step_00000003" / ckpt.WEIGHTS)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert any(not torch.equal(a[n], first[n]) for n in a)  # training moved the weights


@pytest.mark.slow
def test_resumed_run_with_subword_sampling_equals_uninterrupted(tmp_path):
    from tests.helpers.corpus import write_corpus

    data = {
        **write_corpus(tmp_path),
        "tokenizer": "bpe",
        "vocab_size": 120,
        "max_tokens": 400,
        "src_sampling_alpha": 0.1,
        "tgt_sampling_alpha": 0.1,
    }

    def config(steps):
        values = {k: dict(v) for k, v in TOY.items()}
        values["data"] = data
        values["train"].update(max_steps=steps, valid_every=5)
        return Config.from_dict(values)

    # 120 pairs make a few batches an epoch: the run crosses epochs, and resumes in the middle of one.
    Trainer(config(12), tmp_path / "straight", quiet()).train()
    stopped = Trainer(config(7), tmp_path / "resumed", quiet()).train()
    assert stopped.position > 0  # mid-epoch
    state = Trainer(config(12), tmp_path / "resumed", quiet()).train()
    assert state.step == 12 and state.epoch >= 1  # 0-based: past the first epoch
    a = ckpt.load_weights(tmp_path / "straight/checkpoints/step_00000010" / ckpt.WEIGHTS)
    b = ckpt.load_weights(tmp_path / "resumed/checkpoints/step_00000010" / ckpt.WEIGHTS)
    assert a and a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.slow
def test_model_directory_is_self_contained_and_reported(tmp_path):
    trainer = Trainer(toy_config(max_steps=3), tmp_path / "run", quiet())
    state = trainer.train()
    run = tmp_path / "run"
    for name in (
        "config.yaml",
        "tokenizer.model",
        "model.safetensors",
        "vaswani.json",
        "metrics.jsonl",
        "curves.png",
        "data_report.json",
    ):
        assert (run / name).is_file(), name
    model, config = ckpt.load_model(run)
    assert config.model.src_vocab_size == model.config.src_vocab_size < 16
    trained = trainer.model.state_dict()  # the directory holds the trained model, not a fresh one
    assert model.state_dict().keys() == trained.keys()
    assert all(torch.equal(value, trained[name]) for name, value in model.state_dict().items())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in records if "valid_loss" in r] == state.history  # every validation, as the run saw it
    assert [r["step"] for r in records if "train_loss" in r] == [1, 2, 3]  # every valid_every // 4 updates, at least 1
    assert json.loads((run / "data_report.json").read_text())["kept"] == 300


@pytest.mark.slow
def test_cli_errors_are_one_line_without_traceback(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump({"data": {"train_src": str(tmp_path / "missing.de"), "train_tgt": str(tmp_path / "missing.en")}})
    )
    result = run_cli("train", str(config), str(tmp_path / "run"))
    assert result.returncode == 2
    said = [line for line in result.stderr.splitlines() if not line.startswith("vaswani: threads:")]  # a busy CPU's
    assert said == [f"vaswani: error: {tmp_path / 'missing.de'}: file not found"]
    config.write_text("train:\n  max_step: 3\n")
    result = run_cli("train", str(config), str(tmp_path / "run"))
    assert result.returncode == 2 and "did you mean 'max_steps'" in result.stderr
    assert "Traceback" not in result.stderr
    config.write_text("train: [unclosed\n")
    result = run_cli("train", str(config), str(tmp_path / "run"))
    assert result.returncode == 2 and "is not valid YAML" in result.stderr


@pytest.mark.slow
def test_average_command_writes_the_mean_of_the_last_checkpoints(tmp_path):
    Trainer(toy_config(max_steps=6), tmp_path / "run", quiet()).train()
    result = run_cli("average", str(tmp_path / "run"), "--last", "2")
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    averaged = ckpt.load_weights(run / ckpt.WEIGHTS)
    parts = [ckpt.load_weights(p / ckpt.WEIGHTS) for p in ckpt.checkpoint_dirs(run)[-2:]]
    for name, value in averaged.items():
        torch.testing.assert_close(value, (parts[0][name] + parts[1][name]) / 2)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.slow
def test_ddp_processes_equal_one_process_on_the_same_global_batch(tmp_path, nodes):
    """torchrun with 2 gloo processes (1 batch each) vs 1 process accumulating the same 2 batches. nodes=2:
    two torchrun launches on 127.0.0.1 (--nnodes 2), one process each, reading data prepared once ahead
    (`vaswani prepare`), as on a cluster with a shared filesystem.

    Adam's epsilon is raised for this comparison only: with 1e-9 its first steps are about
    lr * sign(gradient), which turns float rounding in near-zero gradients into whole steps.
    """
    import os

    config = tmp_path / "ddp.yaml"
    values = {k: dict(v) for k, v in TOY.items()}
    values["model"]["dropout"] = 0.0  # dropout masks differ between ranks by design
    values["train"].update(max_steps=4, valid_every=4, adam_eps=1e-3)
    config.write_text(yaml.safe_dump(values))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = [sys.executable, "-m", "torch.distributed.run"]
    train = ["-m", "vaswani.cli", "train", str(config), str(tmp_path / "ddp")]
    if nodes == 1:
        launches = [[*run, "--nproc_per_node=2", *train]]
    else:
        assert run_cli("prepare", str(config), str(tmp_path / "shared")).returncode == 0
        port = _free_port()
        launches = [
            [
                *run,
                "--nnodes=2",
                f"--node_rank={rank}",
                "--nproc_per_node=1",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                *train,
                "--prepared",
                str(tmp_path / "shared"),
            ]
            for rank in (0, 1)
        ]
    processes = [
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env) for cmd in launches
    ]
    outputs = [p.communicate(timeout=300)[1] for p in processes]
    for process, stderr in zip(processes, outputs, strict=True):
        # On failure, show the lines that name the cause (a C++ abort is far above torchrun's own traceback).
        causes = [line for line in stderr.splitlines() if any(w in line for w in ("rror", "terminate", "what()"))]
        assert process.returncode == 0, "\n".join(causes[:20]) + "\n...\n" + stderr[-2000:]
    if nodes == 2:
        assert "(reused;" in outputs[0] and not (tmp_path / "ddp/prepared").exists()
    single = run_cli("train", str(config), str(tmp_path / "single"), "--set", "train.accumulate=2")
    assert single.returncode == 0, single.stderr[-2000:]
    a = ckpt.load_weights(tmp_path / "ddp/checkpoints/step_00000004" / ckpt.WEIGHTS)
    b = ckpt.load_weights(tmp_path / "single/checkpoints/step_00000004" / ckpt.WEIGHTS)
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_toy_copy_task_converges_in_about_a_minute_of_cpu(tmp_path):
    """Training really learns: >= 95% exact match on 200 held-out strings, in about a minute of CPU time
    (one thread; measured with getrusage, so a busy machine does not make it fail)."""
    recipe = Path(__file__).resolve().parents[2] / "configs" / "toy_reverse.yaml"
    config = Config.load(
        recipe,
        [
            "data.toy_task=copy",
            "model.n_layers=2",
            "model.d_model=64",
            "model.d_ff=256",
            "data.toy_max_len=8",
            "data.max_tokens=600",
            "train.lr_factor=0.5",
            "train.warmup_steps=100",
            "train.max_steps=1200",
            "train.valid_every=600",
        ],
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    before = resource.getrusage(resource.RUSAGE_SELF)
    try:
        state = Trainer(config, tmp_path / "toy", quiet()).train()
    finally:
        torch.set_num_threads(threads)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    # the float kernels differ by CPU (an AMD EPYC, the AVX2 kind and an Intel Xeon score a little apart), so the
    # bar keeps a margin (an untrained model scores ~0)
    assert state.history[-1]["valid_exact"] >= 0.95, state.history
    # the bar is about half as much again as the run's usual CPU time, wider than its spread from run to run
    # (before and after a change alike), so that it fails on a slowdown, not on that spread
    assert cpu < 90, f"{cpu:.0f} s of CPU"


@pytest.mark.slow
def test_a_compiled_training_step_trains_as_the_eager_one(tmp_path):
    """train.compile: torch.compile works on the CPU (Inductor, a C++ compiler) and trains as the eager step does:
    the same losses step by step, to float reordering. (Its weights differ by up to ~lr in single elements whose
    gradient is float noise, such as the attention's key biases, which Adam blows up.) Off by default: on a CPU it
    is no faster, and on a GPU its compiling is repaid only over a long run (docs/benchmarks.md, "Training speed")."""

    def config(**train) -> Config:  # no dropout: compiled code draws its masks apart from eager's
        config = toy_config(max_steps=6, valid_every=6, **train)  # batch shapes vary: the AVX2 refusal was found so
        return dataclasses.replace(config, model=dataclasses.replace(config.model, dropout=0.0))

    trainer = Trainer(config(compile=True), tmp_path / "compiled", quiet())
    Trainer(config(), tmp_path / "eager", quiet()).train()
    trainer.train()
    assert type(trainer.wrapped).__name__ == "OptimizedModule"

    def losses(run: str) -> list[float]:
        records = map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())
        return [r["train_loss"] for r in records if "train_loss" in r]

    eager, compiled = losses("eager"), losses("compiled")
    assert len(eager) == 6 and eager[0] == pytest.approx(compiled[0], rel=1e-6)  # the same model, the same batch
    assert eager[1:] == pytest.approx(compiled[1:], rel=1e-4)  # after updates from compiled gradients
    assert eager[2] < eager[0] - 0.1  # it learns: a wrong gradient would not stay within 1e-4


@pytest.mark.slow
def test_a_failure_to_compile_the_training_step_is_a_one_line_error(tmp_path, monkeypatch):
    """train.compile where torch.compile cannot compile (here a backend that fails as a missing C++ compiler does):
    `vaswani train` prints one line naming the setting and the fix, not the compiler's traceback."""

    def no_compiler(gm, example_inputs):
        raise FileNotFoundError("no C++ compiler: g++ not found")

    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda module, **kw: compile_(module, **{**kw, "backend": no_compiler}))
    with pytest.raises(ValueError) as error:
        Trainer(toy_config(max_steps=2, compile=True), tmp_path / "run", quiet()).train()
    message = str(error.value)
    assert message.startswith("train.compile: torch.compile failed (FileNotFoundError: no C++ compiler")
    assert message.endswith("train with train.compile false") and "\n" not in message
