"""A whole recipe: the sections together, read from YAML with `section.key=value` overrides, checked across
sections, and written into each model directory as config.yaml with the fields that take effect."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vaswani.config.data import DataConfig
from vaswani.config.decode import DecodeConfig
from vaswani.config.fields import ConfigError, build, closest, every_field, reset, written
from vaswani.config.finetune import FinetuneConfig
from vaswani.config.model import ModelConfig, fitting
from vaswani.config.train import TrainConfig
from vaswani.families import TRANSLATE, family

SECTIONS = {
    "model": ModelConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "decode": DecodeConfig,
    "finetune": FinetuneConfig,
}


@dataclass(frozen=True)
class Config:
    """A whole recipe: model, data, train, decode and finetune sections.

    A field that does not take effect given the others (train.peak_lr under the noam schedule, data.text in a
    translation run, the decode section of a language model, ...) holds its default: two recipes that differ
    only there are the same run, and config.yaml, which leaves such fields out, loads back equal."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)

    def __post_init__(self) -> None:
        for name, unused in self.unused().items():  # one pass suffices: no reset field decides what is unused
            object.__setattr__(self, name, reset(getattr(self, name), unused))

    @property
    def task(self) -> str:
        """translation, lm, mlm or classify: train.task, or the one of model.type (classify with n_classes)."""
        if self.train.task != "auto":
            return self.train.task
        return "classify" if self.model.n_classes else family(self.model.type).task

    @property
    def metric(self) -> str:
        """The early-stopping metric: train.early_stopping_metric, or the task's own."""
        if self.train.early_stopping_metric != "auto":
            return self.train.early_stopping_metric
        return {"translation": "bleu", "classify": "accuracy"}.get(self.task, "loss")

    def unused(self) -> dict[str, frozenset[str]]:
        """Per section, the fields that do not take effect given the others."""
        task, row = self.task, family(self.model.type)
        masks = task == "mlm" or (task == "classify" and row.task == "mlm" and self.finetune.aux_weight > 0)
        return {
            "model": self.model.unused(),
            "data": self.data.unused(task, masks),
            "train": self.train.unused(task),
            # read by translation alone: vaswani translate and serve, export, BLEU at validation
            "decode": frozenset() if TRANSLATE in row.can else every_field(DecodeConfig),
            "finetune": self.finetune.unused(task),
        }

    def in_effect(self) -> dict[str, dict[str, Any]]:
        """The sections with the fields that take effect and their values, defaults included (None, "not set",
        left out); a section without any is left out. What config.yaml holds: enough to run again."""
        unused = self.unused()
        sections = {name: written(getattr(self, name), unused[name]) for name in SECTIONS}
        return {name: values for name, values in sections.items() if values}

    def to_dict(self) -> dict[str, Any]:
        """Every field of every section (`in_effect` leaves out those that do not take effect)."""
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        if not isinstance(values, dict):
            raise ConfigError("a config must be a mapping of sections: model, data, train, decode, finetune")
        sections = {}
        for name, section in values.items():
            if name not in SECTIONS:
                raise ConfigError(f"unknown section '{name}'{closest(name, list(SECTIONS))}")
            sections[name] = _section(name, section or {})
        for name, section in sections.items():  # before fields without effect are reset: every value is checked
            if name != "model":
                section.validate()
        config = cls(**sections)
        config._check_task()
        return config

    def _check_task(self) -> None:
        """A task the model can learn; the message names the key to change."""
        task, kind = self.task, self.model.type
        if task not in family(kind).tasks:
            raise ConfigError(
                f"train.task {task} needs model.type {' or '.join(fitting(task))}, but model.type is "
                f"{kind}; change one of them (train.task: auto picks {family(kind).task} for {kind})"
            )
        if task == "classify" and not self.model.n_classes:
            raise ConfigError("train.task classify needs model.n_classes (vaswani finetune sets it from the labels)")
        learned = self.model.positions == "learned"
        if task != "translation" and learned and self.data.block_size > self.model.max_positions:
            raise ConfigError(
                f"data.block_size ({self.data.block_size}) exceeds model.max_positions "
                f"({self.model.max_positions}) of the learned positions; raise model.max_positions"
            )
        if self.metric == "bleu" and task != "translation":
            raise ConfigError(
                f"train.early_stopping_metric bleu needs translation, this run's task is {task}; "
                "use loss or accuracy (or auto)"
            )
        if self.metric == "accuracy" and task != "classify":
            raise ConfigError(f"train.early_stopping_metric accuracy needs train.task classify, this run's is {task}")

    @classmethod
    def load(cls, path: str | Path, overrides: list[str] = ()) -> Config:
        """Read a YAML recipe and apply `section.key=value` overrides (values parsed as YAML)."""
        path = Path(path)
        try:
            values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {path} not found") from None
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark else ""
            raise ConfigError(f"{path} is not valid YAML{where}: {getattr(error, 'problem', error)}") from None
        return cls.from_dict(apply_overrides(values, overrides))

    def save(self, path: str | Path) -> None:
        """config.yaml: the fields that take effect (see `in_effect`)."""
        Path(path).write_text(yaml.safe_dump(self.in_effect(), sort_keys=False), encoding="utf-8")


def _section(name: str, values: Any) -> Any:
    if name == "model" and isinstance(values, dict):
        values = dict(values)
        preset = values.pop("preset", None)
        if preset is not None:
            return ModelConfig.preset(preset, **values)
    return build(name, SECTIONS[name], values)


def apply_overrides(values: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`train.max_steps=2000` sets values['train']['max_steps'] = 2000."""
    values = {k: dict(v or {}) for k, v in values.items()}
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or not name:
            raise ConfigError(f"override '{item}' must look like section.key=value, e.g. train.max_steps=2000")
        values.setdefault(section, {})[name] = yaml.safe_load(raw)
    return values
