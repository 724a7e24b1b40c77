"""`vaswani finetune`: a pretrained language model, a classifier added, trained on labelled text.

The fine-tuning config holds the labelled files (data.labelled_train, data.labelled_valid), the
optimisation (train) and the finetune section (aux_weight λ, init, labels); model.dropout and
model.pool may be changed too. Everything else (architecture, tokenizer, text settings) is the
pretrained model's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from vaswani.config import Config, ConfigError, apply_overrides
from vaswani.data.labelled import read_labelled
from vaswani.data.tokenizer import Tokenizer
from vaswani.families import FAMILIES, family
from vaswani.model_dir import CheckpointError
from vaswani.train.trainer import Trainer

_MODEL_KEYS = ("dropout", "attention_dropout", "pool")  # what a fine-tuning config may change in the model


def finetune_config(pretrained: Config, values: dict) -> Config:
    """The run's config: the pretrained model and data settings, the fine-tuning config's sections."""
    kind = family(pretrained.model.type)
    if "classify" not in kind.tasks:
        takes = [f.type for f in FAMILIES.values() if "classify" in f.tasks]
        raise CheckpointError(
            f"fine-tuning needs a pretrained {' or '.join(takes)} model; this one is {kind.type} ({kind.about})"
        )
    unknown = set(values) - {"model", "data", "train", "finetune"}
    if unknown:
        raise ConfigError(
            f"a fine-tuning config has the sections data, train, finetune (and model.dropout / "
            f"model.pool); remove {', '.join(sorted(unknown))}"
        )
    base = pretrained.to_dict()
    model = dict(base["model"])
    for key, value in (values.get("model") or {}).items():
        if key not in _MODEL_KEYS:
            raise ConfigError(
                f"model.{key} is the pretrained model's; a fine-tuning config may set only "
                f"{', '.join('model.' + k for k in _MODEL_KEYS)}"
            )
        model[key] = value
    data = {**base["data"], "prepared": "", **(values.get("data") or {})}
    finetune = dict(values.get("finetune") or {})
    labelled = data.get("labelled_train")
    if not labelled:
        raise ConfigError("data.labelled_train must name the labelled training file (TSV of label and text)")
    if not finetune.get("labels"):
        finetune["labels"] = sorted(
            {label for _, label, _ in read_labelled(labelled, data.get("invalid_utf8", "error"))}
        )
    model["n_classes"] = len(finetune["labels"])
    train = {**(values.get("train") or {}), "task": "classify"}
    return Config.from_dict(
        {"model": model, "data": data, "train": train, "decode": base["decode"], "finetune": finetune}
    )


def finetune(
    pretrained_dir: str | Path, config_path: str | Path, out_dir: str | Path, overrides: list[str] = (), console=None
):
    """Fine-tune the model in `pretrained_dir` with the recipe `config_path` into `out_dir` (resumed when it
    holds a run). Returns the final TrainState."""
    pretrained_dir, out_dir = Path(pretrained_dir), Path(out_dir)
    if not (pretrained_dir / "config.yaml").is_file():
        raise CheckpointError(f"{pretrained_dir} is not a model directory (no config.yaml)")
    try:
        values = yaml.safe_load(Path(config_path).read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {config_path} not found") from None
    config = finetune_config(Config.load(pretrained_dir / "config.yaml"), apply_overrides(values, list(overrides)))
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in Tokenizer.files(True):
        if not (out_dir / name).is_file():
            shutil.copyfile(pretrained_dir / name, out_dir / name)
    init = pretrained_dir if config.finetune.init == "pretrained" else None
    origin = {"finetuned_from": str(pretrained_dir.resolve()), "init": config.finetune.init}
    return Trainer(config, out_dir, console, init_from=init, origin=origin).train()
