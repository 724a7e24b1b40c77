"""The trainer's tasks beyond translation: lm, mlm and classify (fine-tuning with λ · pretraining loss),
each resumed exactly; BERT's masking; bad text and labels named by file and line."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from vaswani.config import Config
from vaswani.data.labelled import read_labelled
from vaswani.data.masking import mask_tokens
from vaswani.data.tokenizer import Tokenizer
from vaswani.train import checkpoint as ckpt
from vaswani.train.finetune import finetune
from vaswani.train.trainer import Trainer

pytestmark = pytest.mark.shared_data  # reads ../shared/data (tests/conftest.py skips it where absent)

SHAKESPEARE = Path(__file__).resolve().parents[2] / "../shared/data/tinyshakespeare/input.txt"
SST2 = Path(__file__).resolve().parents[2] / "../shared/data/sst2"
MODEL = {"d_model": 32, "n_heads": 2, "d_ff": 64, "n_layers": 2, "dropout": 0.1, "norm_first": True}


def _quiet():
    from rich.console import Console

    return Console(file=open("/dev/null", "w"))


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "shakespeare.txt"
    path.write_text("\n".join(SHAKESPEARE.read_text(encoding="utf-8").split("\n")[:1500]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("sst2")
    train = SST2.joinpath("train.tsv").read_text(encoding="utf-8").split("\n")[:401]
    dev = SST2.joinpath("dev.tsv").read_text(encoding="utf-8").split("\n")[:41]
    (d / "train.tsv").write_text("\n".join(train) + "\n", encoding="utf-8")
    (d / "dev.tsv").write_text("\n".join(dev) + "\n", encoding="utf-8")
    return d / "train.tsv", d / "dev.tsv"


def _lm_config(text: Path, kind: str = "decoder_only", **train) -> Config:
    return Config.from_dict(
        {
            "model": {"type": kind, **MODEL},
            "data": {"text": str(text), "tokenizer": "char", "vocab_size": 120, "block_size": 32, "batch_size": 4},
            "train": {
                "max_steps": 6,
                "valid_every": 3,
                "warmup_steps": 4,
                "lr_schedule": "constant",
                "peak_lr": 1e-3,
                "precision": "fp32",
                "label_smoothing": 0.0,
                **train,
            },
        }
    )


def _same_weights(a: Path, b: Path) -> None:
    wa, wb = (ckpt.load_weights(ckpt.checkpoint_dirs(d)[-1] / ckpt.WEIGHTS) for d in (a, b))
    assert wa.keys() == wb.keys()
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("kind", ["decoder_only", "encoder_only"])
@pytest.mark.slow
def test_language_model_resume_is_exact(tmp_path, text, kind):
    Trainer(_lm_config(text, kind), tmp_path / "straight", _quiet()).train()
    Trainer(_lm_config(text, kind, max_steps=3), tmp_path / "resumed", _quiet()).train()
    state = Trainer(_lm_config(text, kind), tmp_path / "resumed", _quiet()).train()
    assert state.step == 6
    _same_weights(tmp_path / "straight", tmp_path / "resumed")
    record = state.history[-1]
    assert record["valid_loss"] > 0 and 0 <= record["valid_accuracy"] <= 1
    if kind == "decoder_only":  # a char model: EOS is the newline, tokens are characters
        assert record["valid_loss_per_char"] == pytest.approx(record["valid_loss"], rel=1e-3)


@pytest.mark.slow
def test_language_model_learns(tmp_path, text):
    state = Trainer(
        _lm_config(text, max_steps=150, valid_every=150, warmup_steps=20, peak_lr=3e-3), tmp_path / "lm", _quiet()
    ).train()
    # a uniform guess over the ~60 characters costs ln(60) = 4.1 nats; unigram frequencies ~3.3
    assert state.history[-1]["valid_loss"] < 3.0


def test_bert_masking_proportions_and_special_tokens():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 100, size=(100, 1000))
    ids[:, 0], ids[:, -1], ids[:, 500] = 1, 2, 0  # BOS, EOS, PAD: special
    inputs, targets, count = mask_tokens(ids, rng, mask_id=4, vocab_size=100, prob=0.15)
    chosen = targets != 0
    assert count == chosen.sum()
    assert not chosen[:, [0, 500, 999]].any()  # special tokens are never chosen
    assert (inputs[:, [0, 500, 999]] == ids[:, [0, 500, 999]]).all()
    regular = 100 * 997
    assert chosen.sum() / regular == pytest.approx(0.15, abs=0.004)
    masked = (inputs == 4) & chosen
    kept = (inputs == ids) & chosen
    assert masked.sum() / count == pytest.approx(0.8, abs=0.01)
    assert kept.sum() / count == pytest.approx(0.1 + 0.1 / 95, abs=0.01)  # 10% kept, and random ones that hit it
    assert (targets[chosen] == ids[chosen]).all()
    assert (inputs[~chosen] == ids[~chosen]).all()


def _finetune_recipe(path: Path, labelled, aux: float, **train) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "data": {"labelled_train": str(labelled[0]), "labelled_valid": str(labelled[1]), "batch_size": 8},
                "train": {
                    "max_steps": 6,
                    "valid_every": 3,
                    "warmup_steps": 4,
                    "lr_schedule": "constant",
                    "peak_lr": 1e-3,
                    "precision": "fp32",
                    **train,
                },
                "finetune": {"aux_weight": aux},
            }
        ),
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module", params=["decoder_only", "encoder_only"])
def pretrained(request, tmp_path_factory, text) -> Path:
    directory = tmp_path_factory.mktemp(request.param)
    Trainer(_lm_config(text, request.param, max_steps=3), directory, _quiet()).train()
    return directory


@pytest.mark.slow
def test_finetune_resume_is_exact_and_classify_writes_a_line_per_line(tmp_path, pretrained, labelled):
    recipe = _finetune_recipe(tmp_path / "ft.yaml", labelled, 0.5)
    finetune(pretrained, recipe, tmp_path / "straight", console=_quiet())
    finetune(pretrained, recipe, tmp_path / "resumed", ["train.max_steps=3"], console=_quiet())
    state = finetune(pretrained, recipe, tmp_path / "resumed", console=_quiet())
    assert state.step == 6
    _same_weights(tmp_path / "straight", tmp_path / "resumed")
    origin = json.loads((tmp_path / "resumed" / "vaswani.json").read_text())["origin"]
    assert origin == {"finetuned_from": str(pretrained.resolve()), "init": "pretrained"}
    assert {"valid_accuracy", "valid_loss", "valid_pretrain_loss"} <= set(state.history[-1])
    lines = ["a gorgeous , witty , seductive movie .", "", "the plot is nothing but boilerplate clichés"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "vaswani.cli", "classify", str(tmp_path / "straight"), "-i", str(tmp_path / "in.txt")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout.splitlines()
    assert len(out) == 3 and "line 2 is empty" in run.stderr
    from vaswani.decode.classifier import Classifier

    probabilities = Classifier.load(tmp_path / "straight", "cpu").probabilities(lines)  # the library, one by one
    for line, text, probs in zip(out, lines, probabilities, strict=True):
        label, p = line.split("\t")
        assert label == str(int(probs.argmax())) and float(p) == pytest.approx(float(probs.max()), abs=1e-4)
        alone = Classifier.load(tmp_path / "straight", "cpu").probabilities([text])[0]
        torch.testing.assert_close(alone, probs, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_continued_pretraining_of_a_model_trained_here_keeps_its_tokenizer_and_resumes_exactly(
    tmp_path, pretrained, labelled
):
    """`vaswani finetune` with data.text on our own language model: its objective (lm or mlm) on new text (SST-2's
    sentences), its char tokenizer kept, each line ending in its EOS; an interrupted run resumes exactly."""
    from vaswani.data.store import PreparedData
    from vaswani.special import EOS_ID

    sentences = [text for _, text in (line.split("\t", 1) for line in labelled[0].read_text().splitlines()[1:])]
    (tmp_path / "domain.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    recipe = tmp_path / "domain.yaml"
    recipe.write_text(yaml.safe_dump({
        "data": {"text": str(tmp_path / "domain.txt"), "block_size": 32, "batch_size": 4, "valid_fraction": 0.2},
        "train": {"max_steps": 6, "valid_every": 3, "lr_schedule": "constant", "peak_lr": 1e-3, "warmup_steps": 1,
                  "precision": "fp32"},
    }))  # fmt: skip
    finetune(pretrained, recipe, tmp_path / "straight", console=_quiet())
    finetune(pretrained, recipe, tmp_path / "resumed", ["train.max_steps=3"], console=_quiet())
    state = finetune(pretrained, recipe, tmp_path / "resumed", console=_quiet())
    assert state.step == 6 and "valid_loss" in state.history[-1]
    _same_weights(tmp_path / "straight", tmp_path / "resumed")
    assert (tmp_path / "straight/tokenizer.model").read_bytes() == (pretrained / "tokenizer.model").read_bytes()
    task = Config.load(tmp_path / "straight/config.yaml").train.task
    assert task == {"decoder_only": "lm", "encoder_only": "mlm"}[Config.load(pretrained / "config.yaml").model.type]
    ids = Tokenizer.load(pretrained).encode_src(sentences[:5])
    stream = PreparedData.open(tmp_path / "straight/prepared").streams["train"]
    assert stream[: sum(len(x) + 1 for x in ids)].tolist() == [i for x in ids for i in (*x, EOS_ID)]


def test_the_task_returns_the_labels_it_finds_and_the_trainer_writes_them(tmp_path, pretrained, labelled, monkeypatch):
    """finetune.labels given as numbers: the task reads them as the file's label strings and returns them
    (Task.run_config); the trainer's config, the task's view of it and config.yaml all hold the strings."""
    recipe = _finetune_recipe(tmp_path / "ft.yaml", labelled, 0.0, max_steps=1, valid_every=1)
    values = yaml.safe_load(recipe.read_text())
    values["finetune"]["labels"] = [1, 0]
    recipe.write_text(yaml.safe_dump(values), encoding="utf-8")
    seen = {}
    original = Trainer._build

    def build(trainer, data):
        original(trainer, data)
        seen.update(trainer=trainer.config, task=trainer.task.config)

    monkeypatch.setattr(Trainer, "_build", build)
    finetune(pretrained, recipe, tmp_path / "run", console=_quiet())
    assert seen["trainer"].finetune.labels == ["1", "0"] and seen["task"] is seen["trainer"]
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["finetune"]["labels"] == ["1", "0"] and saved["model"]["n_classes"] == 2


def test_aux_weight_zero_gives_exactly_the_task_gradients(tmp_path, pretrained, labelled):
    from vaswani.train.finetune import finetune_config
    from vaswani.train.tasks.base import RunContext
    from vaswani.train.tasks.classify import Classify

    base = Config.load(pretrained / "config.yaml")
    values = yaml.safe_load(_finetune_recipe(tmp_path / "ft.yaml", labelled, 0.0).read_text())
    config = finetune_config(base, values)
    (tmp_path / "run").mkdir()
    for name in Tokenizer.files(True):
        (tmp_path / "run" / name).write_bytes((pretrained / name).read_bytes())

    context = RunContext(config, tmp_path / "run")
    task = Classify(context)
    data = task.prepare(rank0=True)
    from vaswani.nn import build_model

    torch.manual_seed(0)
    model = build_model(task.model_config(data)).eval()
    batch = task.batch(data, "train", np.arange(8))

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ours = grads(task.loss(model.hidden_states, model, batch))
    reference = grads(F.cross_entropy(model.classify(batch.ids).float(), batch.labels, reduction="sum"))
    assert ours.keys() == reference.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], reference[name], rtol=0, atol=0, msg=name)
    with_weight = finetune_config(base, {**values, "finetune": {"aux_weight": 0.5}})
    aux_task = Classify(RunContext(with_weight, tmp_path / "run"))
    with_aux = grads(aux_task.loss(model.hidden_states, model, aux_task.batch(data, "train", np.arange(8))))
    assert any((with_aux[n] - reference[n]).abs().max() > 1e-6 for n in reference)  # λ > 0 does change them


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vaswani.cli", *map(str, args)], capture_output=True, text=True)


@pytest.mark.slow
def test_bad_text_and_labels_are_one_line_errors(tmp_path, text, labelled):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    config = tmp_path / "lm.yaml"
    values = _lm_config(text).to_dict()
    values["data"]["text"] = [str(empty)]
    config.write_text(yaml.safe_dump(values), encoding="utf-8")
    run = _cli("train", config, tmp_path / "run")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"{empty} holds no text" in run.stderr

    cases = {
        "line 3: 3 tab-separated fields, expected 2": "label\tsentence\n1\tfine\n0\tbad\textra\n",
        "line 3: empty text": "label\tsentence\n1\tfine\n0\t \n",
        "line 2: 1 tab-separated fields": "1\tfine\nno tab here\n",
    }
    for expected, content in cases.items():
        path = tmp_path / "bad.tsv"
        path.write_text(content, encoding="utf-8")
        with pytest.raises(ValueError, match=f"{path}, {expected}"):
            read_labelled(path)


def test_text_kept_as_it_is_and_a_held_out_part_too_small(tmp_path):
    from vaswani.config import DataConfig
    from vaswani.data.plain import PlainRecipe, split_text
    from vaswani.data.prepare import open_or_prepare

    path = tmp_path / "odd.txt"
    path.write_bytes(b"  indented line\r\nbad \xff byte\n\tTabbed\n" * 200)
    with pytest.raises(ValueError, match=f"{path}, line 2: invalid UTF-8"):
        split_text(DataConfig(text=str(path)))
    train, _ = split_text(DataConfig(text=str(path), invalid_utf8="replace"))
    assert train.startswith("  indented line\nbad \ufffd byte\n\tTabbed\n")  # spaces and tabs kept, CR dropped
    small = DataConfig(
        text=str(path), invalid_utf8="replace", tokenizer="char", vocab_size=40, block_size=1000, valid_fraction=0.1
    )
    with pytest.raises(ValueError, match=r"held-out text has \d+ tokens, fewer than data\.block_size"):
        open_or_prepare(PlainRecipe(small, 1), tmp_path / "prepared")


@pytest.mark.slow
def test_a_label_outside_the_training_labels_names_file_and_line(tmp_path, pretrained, labelled):
    dev = tmp_path / "dev.tsv"
    dev.write_text("label\tcontent\n1\tfine\n0\tbad\n7\tstrange\n", encoding="utf-8")
    recipe = tmp_path / "ft.yaml"
    recipe.write_text(yaml.safe_dump({"data": {"labelled_train": str(labelled[0]), "labelled_valid": str(dev)}}))
    run = _cli("finetune", pretrained, recipe, tmp_path / "out")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"{dev}, line 4: label '7' is not one of ['0', '1']" in run.stderr


@pytest.mark.slow
def test_generate_streams_and_repeats_with_a_seed(tmp_path, text):
    Trainer(_lm_config(text, max_steps=3), tmp_path / "lm", _quiet()).train()
    args = ("generate", tmp_path / "lm", "--prompt", "ROMEO:", "--max-new-tokens", 40, "--top-k", 10, "--seed", 3)
    first, second, other = _cli(*args), _cli(*args), _cli(*args[:-1], 4)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout != other.stdout
    assert first.stdout.startswith("ROMEO:")
    translate = _cli("translate", tmp_path / "lm")
    assert translate.returncode == 2 and "decoder_only" in translate.stderr


def test_weight_decay_reaches_matrices_only(tmp_path, text):
    trainer = Trainer(_lm_config(text, max_steps=2, valid_every=2, weight_decay=0.1), tmp_path / "wd", _quiet())
    trainer.train()
    decayed, plain = trainer.optimizer.param_groups
    assert isinstance(trainer.optimizer, torch.optim.AdamW)
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decayed["params"]) and all(p.dim() == 1 for p in plain["params"])
    assert len(decayed["params"]) + len(plain["params"]) == len(list(trainer.model.parameters()))


@pytest.mark.slow
def test_prepare_text_once_then_train_from_it(tmp_path, text):
    config = tmp_path / "lm.yaml"
    config.write_text(yaml.safe_dump(_lm_config(text, max_steps=2, valid_every=2).to_dict()), encoding="utf-8")
    run = _cli("prepare", config, tmp_path / "prepared")
    assert run.returncode == 0, run.stderr
    manifest = (tmp_path / "prepared" / "manifest.json").read_text()
    assert '"streams"' in manifest and (tmp_path / "prepared" / "train.ids").is_file()
    run = _cli("train", config, tmp_path / "run", "--prepared", tmp_path / "prepared")
    assert run.returncode == 0, run.stderr
    assert "(reused;" in run.stderr
    assert (tmp_path / "prepared" / "manifest.json").read_text() == manifest
