"""A whole recipe: the sections together, read from YAML with `section.key=value` overrides, checked across
sections, and written into each model directory as config.yaml with the fields that take effect."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vaswani.config.data import DataConfig
from vaswani.config.decode import DecodeConfig
from vaswani.config.fields import ConfigError, build, check_keys, closest, every_field, reset, shown, written
from vaswani.config.finetune import FinetuneConfig
from vaswani.config.model import PRESETS, ModelConfig, fitting
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
            if name == "distill":
                raise ConfigError(
                    "section 'distill' belongs to a distillation recipe: run it with `vaswani distill "
                    "TEACHER RECIPE STUDENT`, not `vaswani train`"
                )
            if name not in SECTIONS:
                raise ConfigError(f"unknown section '{shown(name)}'{closest(name, list(SECTIONS))}")
            sections[name] = _section(name, {} if section is None else section)  # `train:` alone: the defaults
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
        return cls.from_dict(apply_overrides(load_values(path), overrides))

    def save(self, path: str | Path) -> None:
        """config.yaml: the fields that take effect (see `in_effect`)."""
        Path(path).write_text(yaml.safe_dump(self.in_effect(), sort_keys=False), encoding="utf-8")


def load_values(path: str | Path) -> dict[str, Any]:
    """A YAML recipe's sections as a mapping (an empty file: none), read as UTF-8; a one-line ConfigError for a
    missing file, broken YAML or anything but a mapping."""
    path = Path(path)
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    values = parse_yaml(_utf8(content, path), str(path))
    if values is None:  # an empty file: the defaults
        return {}
    if not isinstance(values, dict):
        raise ConfigError(
            f"{path} must hold a mapping of sections (model, data, train, decode, finetune), "
            f"got a {type(values).__name__}"
        )
    return values


def _section(name: str, values: Any) -> Any:
    """A section from its mapping; the model section may name a preset (and then a vocab_size for both sides)."""
    if name != "model" or not isinstance(values, dict):
        return build(name, SECTIONS[name], values)
    known = [f.name for f in dataclasses.fields(ModelConfig)]
    check_keys("model", values, [*known, "preset", *(["vocab_size"] if "preset" in values else [])])
    if "preset" in values:
        values = dict(values)
        preset = values.pop("preset")
        if preset is None:  # `preset:` left empty: none
            return build(name, ModelConfig, values)
        if not isinstance(preset, str):
            raise ConfigError(f"model.preset must name a preset ({', '.join(PRESETS)}), got {preset!r}")
        return ModelConfig.preset(preset, **values)
    return build(name, SECTIONS[name], values)


def apply_overrides(values: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`train.max_steps=2000` sets values['train']['max_steps'] = 2000. A section that is not a mapping is left
    as it is (from_dict names it), unless an override sets one of its keys."""
    values = {k: dict(v) if isinstance(v, dict) else v for k, v in values.items()}
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or not name:
            raise ConfigError(f"override '{shown(item)}' must look like section.key=value, e.g. train.max_steps=2000")
        if values.get(section) is None:
            values[section] = {}
        if not isinstance(values[section], dict):
            raise ConfigError(f"override '{shown(item)}': section '{shown(section)}' of the config is not a mapping")
        values[section][name] = parse_yaml(raw, f"override '{shown(item)}'")
    return values


class _Loader(yaml.SafeLoader):
    """yaml.safe_load's loader, but a key given twice in one mapping is an error: PyYAML keeps the last one
    silently, and a recipe edited in two places would run with the value its author did not look at."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults`: keys given beside it override the merged ones
            key = self.construct_object(key_node, deep=True)
            with contextlib.suppress(TypeError):  # an unhashable key: construct_mapping's own error names it
                if key in seen:
                    raise _Duplicate(key, seen[key], key_node.start_mark.line + 1)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


class _Duplicate(yaml.YAMLError):
    def __init__(self, key: Any, first: int, line: int) -> None:
        super().__init__(f"line {line}: key '{shown(key)}' given twice (first at line {first}); keep one")


def parse_yaml(text: str, where: str) -> Any:
    """The YAML document `text` (safe types only); a ConfigError naming `where` (the file, the override), the line
    and the problem in one line."""
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader: plain types only
    except _Duplicate as error:
        raise ConfigError(f"{where}, {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{where} is not valid YAML{_yaml_problem(error, text)}") from None
    except RecursionError:
        raise ConfigError(f"{where} is not a recipe: its values are nested too deeply for a YAML reader") from None


def _yaml_problem(error: yaml.YAMLError, text: str) -> str:
    """' at line N: problem' of a YAML error, in one line (PyYAML's own messages span several)."""
    if isinstance(error, yaml.reader.ReaderError):
        line = text.count("\n", 0, error.position) + 1 if isinstance(error.position, int) else None
        code = error.character if isinstance(error.character, int) else ord(str(error.character)[:1] or "\0")
        problem = f"character U+{code:04X} is not allowed (a control character)"
    else:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        parts = [getattr(error, "context", None), getattr(error, "problem", None)]
        problem = ": ".join(p for p in parts if p) or str(error)
    where = f" at line {line}" if line is not None else ""
    return f"{where}: {' '.join(str(problem).split())}"


def _utf8(content: bytes, path: Path) -> str:
    """The recipe's text; bytes that are not UTF-8 are a ConfigError naming the file and line."""
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as error:
        line = content.count(b"\n", 0, error.start) + 1
        raise ConfigError(f"{path}, line {line}: not UTF-8 text (byte {error.start}); save the file as UTF-8") from None
