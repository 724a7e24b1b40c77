"""What every importer's tests check: broken copies of a checkpoint directory and the refusal owed to them
(one line, exit 2, nothing written), and fine-tuning an imported language model into a classifier."""

import json
import shutil

from vaswani.cli import main


def set_config(directory, name="config.json", **values):
    """config.json (or the JSON file `name`) with `values` changed."""
    path = directory / name
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps(config))


def saved_and_imported(root, save, model_class, tokenizer_class):
    """A Hugging Face checkpoint written by `save(root / "hf")` and imported by the CLI into root / "model":
    (its directory, the vaswani model directory, transformers' model in eval mode, its tokenizer)."""
    src = save(root / "hf")
    assert main(["import", str(src), str(root / "model")]) == 0
    return src, root / "model", model_class.from_pretrained(str(src)).eval(), tokenizer_class.from_pretrained(str(src))


def without(*names):
    """An edit removing these files."""
    return lambda d: [(d / name).unlink() for name in names]


def assert_refused(src, tmp_path, capsys, edit, named: str) -> None:
    """`vaswani import` of `src` changed by `edit`: a one-line error naming `named`, exit 2, nothing written."""
    broken = shutil.copytree(src, tmp_path / "src")
    edit(broken)
    assert main(["import", str(broken), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vaswani: error: ") and len(err.strip().splitlines()) == 1 and named in err, err
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def finetune_a_classifier(model_dir, tmp_path, train: list[str], dev: list[str]):
    """`vaswani finetune` of `model_dir` for 4 steps on these labelled TSV lines (header included), the
    pretraining loss beside the task's (λ 0.5); returns the fine-tuned model directory."""
    import yaml

    for name, lines in (("train", train), ("dev", dev)):
        (tmp_path / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    recipe = {
        "data": {"labelled_train": str(tmp_path / "train.tsv"), "labelled_valid": str(tmp_path / "dev.tsv"),
                 "batch_size": 8},
        "train": {"max_steps": 4, "valid_every": 2, "lr_schedule": "constant", "warmup_steps": 1,
                  "precision": "fp32", "loader_workers": 0},
        "finetune": {"aux_weight": 0.5},
    }  # fmt: skip
    (tmp_path / "ft.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    assert main(["finetune", str(model_dir), str(tmp_path / "ft.yaml"), str(tmp_path / "out")]) == 0
    return tmp_path / "out"


def adapt_to_captions(model_dir, tmp_path):
    """`vaswani finetune` of the language model in `model_dir` on 3,000 Multi30k English captions (data.text),
    80 steps of blocks of 64 tokens, 300 held-out captions; returns (the adapted model's directory, those
    held-out captions)."""
    import yaml

    from tests.helpers.hf_models import multi30k

    train, valid = multi30k("train", "en", 3000), multi30k("val", "en", 300)
    (tmp_path / "captions.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    (tmp_path / "valid.txt").write_text("\n".join(valid) + "\n", encoding="utf-8")
    recipe = {
        "data": {"text": str(tmp_path / "captions.txt"), "valid_text": str(tmp_path / "valid.txt"),
                 "block_size": 64, "batch_size": 16},
        "train": {"max_steps": 80, "valid_every": 40, "lr_schedule": "constant", "peak_lr": 1e-3,
                  "warmup_steps": 1, "precision": "fp32"},
    }  # fmt: skip
    (tmp_path / "adapt.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    out = tmp_path / "adapted"
    assert main(["finetune", str(model_dir), str(tmp_path / "adapt.yaml"), str(out)]) == 0
    return out, valid


def rewrite_weights(directory, edit, legacy: bool = False) -> None:
    """The checkpoint in `directory` with its tensors changed by `edit(weights)` (in place); `legacy`: saved as
    pytorch_model.bin, as older transformers wrote checkpoints, in place of model.safetensors."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(directory / "model.safetensors"))
    edit(weights)
    if legacy:
        torch.save(weights, directory / "pytorch_model.bin")
        (directory / "model.safetensors").unlink()
    else:
        save_file(weights, str(directory / "model.safetensors"))
