"""Domain adaptation: `vaswani finetune` on a translation model (here an imported OPUS-MT-layout Marian) with
new parallel text, keeping its vocabulary and tokenizer, with λ · the loss on a sample of the original data."""

import gzip

import pytest
import torch
import yaml

from tests.helpers.hf_models import save_marian
from vaswani.cli import main
from vaswani.config import Config
from vaswani.data.tokenizer import Tokenizer
from vaswani.model_dir import load_model, load_weights
from vaswani.pretrained import import_pretrained
from vaswani.train import checkpoint as ckpt
from vaswani.train.finetune import finetune
from vaswani.train.tasks.translation import Translation
from vaswani.train.trainer import Trainer

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]  # slow: fine-tuning runs

pytest.importorskip("transformers")
RAW = "../shared/data/multi30k/raw"


def _lines(name: str, n: int, skip: int = 0) -> list[str]:
    with gzip.open(f"{RAW}/{name}", "rt", encoding="utf-8") as f:
        return [line for _, line in zip(range(skip + n), f, strict=False)][skip:]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapt")
    model = import_pretrained(save_marian(root / "hf", steps=150), root / "model")
    for side in ("de", "en"):
        (root / f"in.{side}").write_text("".join(_lines(f"train.{side}.gz", 200, skip=20000)), encoding="utf-8")
        (root / f"orig.{side}").write_text("".join(_lines(f"train.{side}.gz", 120)), encoding="utf-8")
        (root / f"dev.{side}").write_text("".join(_lines(f"val.{side}.gz", 20)), encoding="utf-8")
    return root, model


def _recipe(root, path, max_steps=6, original=True, aux_weight=0.5, **train):
    values = {
        "data": {
            "train_src": str(root / "in.de"),
            "train_tgt": str(root / "in.en"),
            "valid_src": str(root / "dev.de"),
            "valid_tgt": str(root / "dev.en"),
            "max_tokens": 600,
        },
        "train": {"max_steps": max_steps, "lr_schedule": "constant", "peak_lr": 3e-4, "warmup_steps": 1,
                  "valid_every": 3, "loader_workers": 0, "precision": "fp32", **train},
        "finetune": {"aux_weight": aux_weight},
    }  # fmt: skip
    if original:
        values["finetune"].update(original_src=str(root / "orig.de"), original_tgt=str(root / "orig.en"))
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.slow
def test_finetune_keeps_the_tokenizer_and_vocabulary_and_records_its_origin(pretrained, tmp_path):
    root, model_dir = pretrained
    assert main(["finetune", str(model_dir), str(_recipe(root, tmp_path / "ft.yaml")), str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    for name in Tokenizer.load(model_dir).file_names:
        assert (out / name).read_bytes() == (model_dir / name).read_bytes()
    tuned, config = load_model(out)
    original, original_config = load_model(model_dir)
    assert config.model == original_config.model and config.decode == original_config.decode
    changed = [n for n, p in tuned.state_dict().items() if not torch.equal(p, original.state_dict()[n])]
    assert "output_bias" in changed and len(changed) > 10  # every part trained, the logits' bias included
    assert (out / "prepared-original").is_dir()


def test_the_loss_is_in_domain_plus_lambda_times_the_original_s_per_token(pretrained, tmp_path):
    root, model_dir = pretrained
    trainer = _trainer(_load(root, model_dir, tmp_path, aux_weight=0.7), model_dir, tmp_path / "run")
    task: Translation = trainer.task
    data = task.prepare(True)
    model, _ = load_model(model_dir)
    _, _, batch = next(iter(task.stream(data, 0, 0)))
    assert batch.replay > 0 and batch.replay_tokens > 0
    n = batch.src.size(0) - batch.replay
    logits = model(batch.src, batch.tgt_in)
    loss = torch.nn.functional.cross_entropy
    c = model.config

    def mean(rows):
        return loss(
            logits[rows].flatten(0, 1), batch.tgt_out[rows].flatten(), ignore_index=c.pad_id, label_smoothing=0.1
        )

    expected = (mean(slice(0, n)) + 0.7 * mean(slice(n, None))) * batch.tgt_tokens
    with torch.no_grad():
        got = task.loss(model.hidden_states, model, batch)
    torch.testing.assert_close(got, expected.detach(), rtol=1e-5, atol=1e-4)


def test_the_original_batches_go_round_all_original_pairs_and_resume_exactly(pretrained, tmp_path):
    root, model_dir = pretrained
    config = _load(root, model_dir, tmp_path)
    trainer = _trainer(config, model_dir, tmp_path / "run")
    task: Translation = trainer.task
    data = task.prepare(True)
    seen, stream = [], task.stream(data, 0, 0)
    original_batches = len(task.original[1].batches(0))
    for _ in range(original_batches):
        _, _, batch = next(stream)
        seen.extend(map(tuple, batch.src[batch.src.size(0) - batch.replay :].tolist()))
    assert len(seen) == len(task.original[0].prepared.train)  # each original pair once in the first round
    later = list(zip(range(3), task.stream(data, 0, 2), strict=False))
    again = list(zip(range(3), task.stream(data, 0, 2), strict=False))
    for (_, (_, _, a)), (_, (_, _, b)) in zip(later, again, strict=True):
        assert torch.equal(a.src, b.src) and a.replay == b.replay


@pytest.mark.slow
def test_an_interrupted_fine_tuning_resumes_to_the_same_weights(pretrained, tmp_path):
    root, model_dir = pretrained
    straight = tmp_path / "straight"
    finetune(model_dir, _recipe(root, tmp_path / "a.yaml", max_steps=6), straight)
    stopped = tmp_path / "stopped"
    finetune(model_dir, _recipe(root, tmp_path / "b.yaml", max_steps=3), stopped)
    finetune(model_dir, _recipe(root, tmp_path / "a.yaml", max_steps=6), stopped)
    a = load_weights(straight / "checkpoints/step_00000006" / ckpt.WEIGHTS)
    b = load_weights(stopped / "checkpoints/step_00000006" / ckpt.WEIGHTS)
    assert a and a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def test_a_translation_fine_tuning_config_keeps_the_model_s_text_settings(pretrained, tmp_path, capsys):
    root, model_dir = pretrained
    recipe = yaml.safe_load(_recipe(root, tmp_path / "ft.yaml").read_text())
    recipe["data"]["vocab_size"] = 1000
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(recipe))
    assert main(["finetune", str(model_dir), str(tmp_path / "bad.yaml"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "data.vocab_size is the pretrained model's" in err and len(err.strip().splitlines()) == 1
    recipe = yaml.safe_load(_recipe(root, tmp_path / "ft.yaml").read_text())
    del recipe["finetune"]["original_tgt"]
    (tmp_path / "half.yaml").write_text(yaml.safe_dump(recipe))
    assert main(["finetune", str(model_dir), str(tmp_path / "half.yaml"), str(tmp_path / "out2")]) == 2
    assert "original_src and finetune.original_tgt go together" in capsys.readouterr().err
    (tmp_path / "text.yaml").write_text(yaml.safe_dump({"data": {"text": "notes.txt"}}))
    assert main(["finetune", str(model_dir), str(tmp_path / "text.yaml"), str(tmp_path / "out3")]) == 2
    assert "a translation model is fine-tuned on parallel text" in capsys.readouterr().err
    recipe = yaml.safe_load(_recipe(root, tmp_path / "ft.yaml").read_text())
    recipe["data"]["target_language"] = "fra_Latn"  # a model of one pair has no codes to ask for
    (tmp_path / "pair.yaml").write_text(yaml.safe_dump(recipe))
    assert main(["finetune", str(model_dir), str(tmp_path / "pair.yaml"), str(tmp_path / "out4")]) == 2
    err = capsys.readouterr().err.strip()
    assert "are for a many-to-many model" in err and len(err.splitlines()) == 1


def _load(root, model_dir, tmp_path, **finetune_values) -> Config:
    from vaswani.train.finetune import finetune_config

    values = yaml.safe_load(_recipe(root, tmp_path / "r.yaml", **finetune_values).read_text())
    return finetune_config(Config.load(model_dir / "config.yaml"), values)


def _trainer(config: Config, model_dir, run) -> Trainer:
    run.mkdir()
    Tokenizer.load(model_dir).save(run)  # as vaswani finetune does
    return Trainer(config, run, init_from=model_dir)
