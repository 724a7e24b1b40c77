"""`vaswani finetune`: a pretrained model trained further on the user's data.

- A language model (decoder_only, encoder_only): a classifier added, trained on labelled text. The config
  holds the labelled files (data.labelled_train, data.labelled_valid), the optimisation (train) and the
  finetune section (aux_weight λ, init, labels); model.dropout and model.pool may be changed too.
- A language model on the user's plain text (data.text instead of data.labelled_train): its own objective
  continued (lm: the next token for a decoder_only model, an imported GPT-2 too; mlm: masked tokens for an
  encoder_only one, an imported BERT too), adapting it to the domain before fine-tuning or generating.
- A translation model (encoder_decoder, trained here or imported): domain adaptation on new parallel text.
  The config holds the in-domain files (data.train_src/train_tgt or data.corpora, data.valid_src/valid_tgt),
  the optimisation, and optionally a sample of the original training data (finetune.original_src/_tgt) with
  λ = finetune.aux_weight: loss = in-domain + λ · original, against forgetting the original domain.

Everything else (architecture, vocabulary and tokenizer, text settings, decoding) is the pretrained model's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from vaswani import atomic
from vaswani.config import Config, ConfigError, DataConfig, apply_overrides
from vaswani.data.labelled import read_labelled
from vaswani.data.languages import LANGUAGES_FILE, Languages
from vaswani.data.tokenizer import Tokenizer
from vaswani.families import FAMILIES, family
from vaswani.model_dir import CheckpointError
from vaswani.train.trainer import Trainer

_MODEL_KEYS = ("dropout", "attention_dropout", "pool")  # what a fine-tuning config may change in the model


# What the fine-tuning config's data section may set for a translation model: the in-domain text and how
# it is batched and filtered. The tokenizer, vocabulary and text normalisation are the pretrained model's.
_TRANSLATION_DATA_KEYS = (
    "train_src", "train_tgt", "valid_src", "valid_tgt", "corpora", "prepared", "max_tokens", "max_len",
    "max_len_ratio", "invalid_utf8", "valid_max_sentences", "src_sampling_alpha", "tgt_sampling_alpha",
    "source_language", "target_language",
)  # fmt: skip


# What the fine-tuning config's data section may set for continued pretraining on plain text.
_TEXT_DATA_KEYS = (
    "text", "valid_text", "valid_fraction", "block_size", "batch_size", "max_tokens", "mask_prob", "invalid_utf8",
    "prepared",
)  # fmt: skip


def finetune_config(pretrained: Config, values: dict) -> Config:
    """The run's config: the pretrained model and data settings, the fine-tuning config's sections."""
    kind = family(pretrained.model.type)
    data = values.get("data") or {}
    if "translation" in kind.tasks:
        if data.get("text") or data.get("labelled_train"):
            raise ConfigError(
                "a translation model is fine-tuned on parallel text: give data.train_src and data.train_tgt "
                "(or data.corpora), not data.text or data.labelled_train"
            )
        return _translation_config(pretrained, values)
    if data.get("text") and data.get("labelled_train"):
        raise ConfigError(
            "give data.text (continue the language model's pretraining on plain text) or data.labelled_train "
            "(fine-tune a classifier), not both"
        )
    if data.get("text") and kind.task in ("lm", "mlm"):
        return _text_config(pretrained, values, kind.task)
    if "classify" not in kind.tasks:
        takes = [f.type for f in FAMILIES.values() if "classify" in f.tasks or "translation" in f.tasks]
        raise CheckpointError(
            f"fine-tuning needs a pretrained {' or '.join(takes)} model; this one is {kind.type} ({kind.about})"
        )
    base, model = _sections(pretrained, values, _MODEL_KEYS)
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


def _sections(pretrained: Config, values: dict, model_keys: tuple[str, ...]) -> tuple[dict, dict]:
    """The pretrained config as a mapping, and its model section with the fine-tuning config's `model_keys`
    applied (any other model key, or an unknown section, is an error naming what may be set)."""
    allowed = ", ".join("model." + k for k in model_keys)
    unknown = set(values) - {"model", "data", "train", "finetune"}
    if unknown:
        raise ConfigError(
            f"a fine-tuning config has the sections data, train, finetune (and {allowed}); remove "
            f"{', '.join(sorted(unknown))}"
        )
    base = pretrained.to_dict()
    model = dict(base["model"])
    for key, value in (values.get("model") or {}).items():
        if key not in model_keys:
            raise ConfigError(f"model.{key} is the pretrained model's; a fine-tuning config may set only {allowed}")
        model[key] = value
    return base, model


def _user_data(pretrained: dict, own: tuple[str, ...], values: dict, allowed: tuple[str, ...], whose: str) -> dict:
    """The pretrained model's data section without its own training files (`own`), with the fine-tuning config's
    data keys, which must be among `allowed` (the tokenizer and text settings are the pretrained model's)."""
    data = {k: v for k, v in pretrained.items() if k not in own}
    for key, value in (values.get("data") or {}).items():
        if key not in allowed:
            raise ConfigError(
                f"data.{key} is the pretrained model's (its tokenizer and text settings are kept); {whose} data "
                f"section may set {', '.join(allowed)}"
            )
        data[key] = value
    return data


def _text_config(pretrained: Config, values: dict, task: str) -> Config:
    """Continued pretraining: the pretrained language model's own objective on the user's plain text."""
    base, model = _sections(pretrained, values, ("dropout", "attention_dropout"))
    own = ("text", "valid_text", "prepared", "labelled_train")  # the pretrained model's text is not the user's
    data = _user_data(base["data"], own, values, _TEXT_DATA_KEYS, "continued pretraining's")
    m = pretrained.model
    if m.positions == "learned" and data.get("block_size", 0) > m.max_positions:
        raise ConfigError(
            f"data.block_size {data['block_size']} is longer than the model's learned positions "
            f"(model.max_positions {m.max_positions}); set data.block_size to at most that"
        )
    finetune = dict(values.get("finetune") or {})
    taken = [k for k in ("labels", "aux_weight", "original_src", "original_tgt") if finetune.get(k)]
    if taken:
        raise ConfigError(
            f"finetune.{taken[0]} is for classifiers and translation models; continued pretraining on data.text "
            "takes only finetune.init (give data.labelled_train to fine-tune a classifier)"
        )
    train = {**(values.get("train") or {}), "task": task}
    sections = {"model": model, "data": data, "train": train, "decode": base["decode"], "finetune": finetune}
    return Config.from_dict(sections)


def _translation_config(pretrained: Config, values: dict) -> Config:
    """Domain adaptation: the pretrained translation model with new parallel text (and the original's sample)."""
    base, model = _sections(pretrained, values, ("dropout", "attention_dropout"))
    own = ("train_src", "train_tgt", "valid_src", "valid_tgt", "corpora", "prepared")  # not the in-domain data
    data = _user_data(base["data"], own, values, _TRANSLATION_DATA_KEYS, "a fine-tuning config's")
    train = {**(values.get("train") or {}), "task": "translation"}
    finetune = {k: v for k, v in (values.get("finetune") or {}).items()}
    if "labels" in finetune:
        raise ConfigError("finetune.labels is for classifiers; a translation model is fine-tuned on parallel text")
    config = Config.from_dict(
        {"model": model, "data": data, "train": train, "decode": base["decode"], "finetune": finetune}
    )
    config.data.require_training_data()
    return config


def _pair(data: DataConfig, languages: Languages | None, pretrained_dir: Path) -> Languages | None:
    """A many-to-many model's languages with the fine-tuned pair as the defaults; a ConfigError in one line where
    the pair is missing, unknown (the model's codes listed) or given to a model of one pair."""
    pair = (data.source_language, data.target_language)
    if languages is None:
        if any(pair):
            raise ConfigError(
                "data.source_language and data.target_language are for a many-to-many model (NLLB-200, M2M-100, "
                f"mBART-50); {pretrained_dir} has no language codes: leave them out"
            )
        return None
    for key, code in zip(("data.source_language", "data.target_language"), pair, strict=True):
        if not code:
            raise ConfigError(
                f"{pretrained_dir} translates between many languages: give {key}, one of {languages.listed()}"
            )
        if code not in languages.codes:
            raise ConfigError(f"{key} {code!r} is not one of this model's codes: {languages.listed(near=code)}")
    if data.src_sampling_alpha or data.tgt_sampling_alpha:
        raise ConfigError("subword sampling (data.*_sampling_alpha) is not supported with a many-to-many pair: set 0")
    return dataclasses.replace(languages, default_source=pair[0], default_target=pair[1])


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
    tokenizer = Tokenizer.load(pretrained_dir)
    languages = _pair(config.data, tokenizer.languages, pretrained_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not Tokenizer.present(out_dir):  # the pretrained model's tokenizer, whatever its layout
        tokenizer.save(out_dir)
        if languages is not None:  # the fine-tuned pair is what it translates when asked for none
            atomic.write_bytes(out_dir / LANGUAGES_FILE, languages.encoded())
    init = pretrained_dir if config.finetune.init == "pretrained" else None
    origin = {"finetuned_from": str(pretrained_dir.resolve()), "init": config.finetune.init}
    return Trainer(config, out_dir, console, init_from=init, origin=origin).train()
