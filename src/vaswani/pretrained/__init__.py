"""Pretrained Transformers in: a Hugging Face `save_pretrained` directory becomes a vaswani model directory.

    vaswani import SRC MODEL_DIR

SRC is a local directory (or, where the machine is online and huggingface_hub is installed, a hub id such
as Helsinki-NLP/opus-mt-de-en). The layout is recognised by config.json's `model_type`; each one has a module
here that maps its configuration onto ModelConfig, its weights onto ours and its tokenizer files into the
model directory, and says in one line what it cannot take. `translate`, `evaluate`, `serve`, `attention`,
`export` and `finetune` then treat the model as one trained here; `vaswani.json` records its origin.

What this package reads (config.json, weights, tokenizer files) it reads without `transformers`.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from vaswani import atomic
from vaswani.config import Config, ConfigError
from vaswani.model_dir import WEIGHTS, load_into, save_weights, weights_of, write_model_directory
from vaswani.nn import build_model
from vaswani.pretrained.fields import CHECKED, Fields


class PretrainedError(ValueError):
    """A directory that cannot be imported; the message names the file (or setting) and what to do."""


def read_config(src: Path) -> dict:
    path = src / "config.json"
    if not path.is_file():
        raise PretrainedError(f"{path} not found: SRC must be a directory written by save_pretrained")
    return read_json(path)


def read_json(path: Path, default: dict | None = None) -> dict:
    """A JSON file of the checkpoint; `default` when it is absent (None: it is required)."""
    if not path.is_file():
        if default is not None:
            return default
        raise PretrainedError(f"{path} not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # a BOM, as Windows editors write, is no fault
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PretrainedError(f"{path} is not valid JSON ({error}); download the file again") from None
    if not isinstance(data, dict):
        raise PretrainedError(f"{path} holds a JSON {type(data).__name__}, not an object; download the file again")
    return Fields(data, path) if path.name in CHECKED else data


class Checkpoint(dict):
    """A checkpoint's tensors by name, remembering which ones the layout read: `account` then refuses a
    checkpoint with a tensor that nothing read and no rule explains, so no weight is ever dropped silently."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        super().__init__(tensors)
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> torch.Tensor:
        self.read.add(name)
        return super().__getitem__(name)

    def get(self, name: str, default=None):
        """dict.get, through __getitem__ so that the read is recorded."""
        return self[name] if name in self else default  # noqa: SIM401

    def account(self, layout: str, unused: dict[str, str], source: Path) -> None:
        """Every tensor read, or matching a pattern of `unused` (a regular expression over the whole name, and why
        nothing reads it: position-id buffers, attention masks, a pretraining head vaswani does not run); else a
        one-line refusal naming the first such tensor."""
        left = [
            name for name in sorted(set(self) - self.read) if not any(re.fullmatch(pattern, name) for pattern in unused)
        ]
        if left:
            more = f" (and {len(left) - 1} more)" if len(left) > 1 else ""
            raise PretrainedError(
                f"{source}: the checkpoint holds {left[0]}{more}, which vaswani's {layout} import has no place "
                "for; it would be dropped and the model would compute something else, so nothing was imported"
            )


def same_tensor(weights: Checkpoint, alias: str, read: str, source: Path, why: str) -> None:
    """`alias`, where the checkpoint stores it, must equal the tensor `read` (the one place transformers keeps for
    both: `why`); a one-line refusal otherwise."""
    if alias in weights and not torch.equal(weights[alias].float(), weights[read].float()):
        raise PretrainedError(f"{source}: {alias} differs from {read}, but {why}; the checkpoint is inconsistent")


def read_weights(src: Path) -> Checkpoint:
    """model.safetensors, or pytorch_model.bin (read with weights_only: no code runs), or their shards as
    model.safetensors.index.json / pytorch_model.bin.index.json list them."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (src / name).is_file():
            return Checkpoint(_legacy_names(_read_weight_file(src / name), src / name))
    for name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (src / name).is_file():
            return Checkpoint(_legacy_names(_read_shards(src / name), src / name))
    raise PretrainedError(f"{src} has no model.safetensors or pytorch_model.bin (nor their sharded index)")


LEGACY_NAMES = {"LayerNorm.gamma": "LayerNorm.weight", "LayerNorm.beta": "LayerNorm.bias"}


def _legacy_names(weights: dict[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """The names of TensorFlow-era checkpoints as transformers reads them: LayerNorm.gamma and LayerNorm.beta are
    LayerNorm.weight and LayerNorm.bias (bert-base-uncased's files, its model.safetensors too, are written so)."""
    renamed: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        for old, new in LEGACY_NAMES.items():
            if name.endswith(old):
                name = name[: -len(old)] + new
                if name in weights and not torch.equal(weights[name], tensor):
                    raise PretrainedError(f"{path} holds {name} twice, under its old name ({old}) too, unequal")
        renamed[name] = tensor
    return renamed


def _read_weight_file(path: Path) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(path, map_location="cpu", weights_only=True)
    except (SafetensorError, OSError, RuntimeError, ValueError, EOFError) as error:
        raise PretrainedError(f"{path} is corrupt or incomplete ({error})") from None


def _read_shards(index: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a sharded checkpoint: each shard its index names, read once, checked to hold its tensors."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not a mapping")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise PretrainedError(
            f"{index} is not a checkpoint index ({type(error).__name__}: {error}); download the checkpoint again"
        ) from None
    weights: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        path = index.parent / shard
        if Path(shard).name != shard or not path.is_file():
            raise PretrainedError(
                f"{index} names the shard {shard}, which is not in {index.parent}; download the checkpoint again"
            )
        weights.update(_read_weight_file(path))
    missing = sorted(set(weight_map) - set(weights))
    if missing:
        more = f" and {len(missing) - 1} more tensors" if len(missing) > 1 else ""
        raise PretrainedError(f"{index} lists {missing[0]}{more}, which no shard holds; download the checkpoint again")
    return weights


# transformers' GenerationConfig defaults for what vaswani's search reads, and for what it cannot do (refused when
# a checkpoint sets it otherwise: its outputs would differ from generate's). no_repeat_ngram_size is our
# decode.no_repeat_ngram exactly (-inf after the log-softmax, as generate's beam search bans it; generate's history
# also holds the start token, but an n-gram holding it cannot occur twice). repetition_penalty is not ours: generate's
# beam search applies it to the log-probabilities, ours to the logits before the softmax; nor are the encoder's rules.
GENERATION_DEFAULTS = {"num_beams": 1, "max_length": 20, "max_new_tokens": None, "length_penalty": 1.0,
                       "early_stopping": False, "forced_eos_token_id": None, "bad_words_ids": None,
                       "no_repeat_ngram_size": 0}  # fmt: skip
GENERATION_UNSUPPORTED = {"do_sample": False, "num_beam_groups": 1, "diversity_penalty": 0.0, "min_length": 0,
                          "min_new_tokens": None, "encoder_no_repeat_ngram_size": 0, "repetition_penalty": 1.0,
                          "encoder_repetition_penalty": 1.0, "forced_bos_token_id": None, "suppress_tokens": None,
                          "begin_suppress_tokens": None, "constraints": None, "force_words_ids": None,
                          "exponential_decay_length_penalty": None}  # fmt: skip


def generation_settings(src: Path, hf: dict, allowed: tuple[str, ...] = ()) -> dict:
    """The generation settings transformers' `generate` uses for this checkpoint: generation_config.json, or,
    where the checkpoint has none (older uploads), config.json's generation fields (GenerationConfig.
    from_model_config); transformers' defaults for the rest. A setting vaswani's search cannot follow is refused
    in one line, naming the file; `allowed`: such settings a layout follows itself (returned too)."""
    path = src / "generation_config.json"
    if not path.is_file():
        path = src / "config.json"
    settings = read_json(path) if path.name != "config.json" else hf
    for name, default in GENERATION_UNSUPPORTED.items():
        if name not in allowed and settings.get(name) not in (None, default, []):
            raise PretrainedError(
                f"{path}: {name} {settings[name]!r} is not supported by vaswani's search; set it to {default!r} "
                "(or remove it) to import"
            )
    return {
        name: settings[name] if settings.get(name) is not None else default
        for name, default in GENERATION_DEFAULTS.items()
    } | {name: settings.get(name) for name in allowed}


def take(weights: dict[str, torch.Tensor], name: str, shape: tuple[int, ...], source: Path) -> torch.Tensor:
    """The tensor `name`, checked against the shape its config promises."""
    if name not in weights:
        raise PretrainedError(f"{source}: the weights have no {name}; is config.json this checkpoint's?")
    tensor = weights[name]
    if not tensor.is_floating_point():
        raise PretrainedError(
            f"{source}: {name} holds {str(tensor.dtype).removeprefix('torch.')} numbers, not floats (a quantized or "
            "damaged checkpoint); import its float32, float16 or bfloat16 weights"
        )
    if tuple(tensor.shape) != shape:
        raise PretrainedError(
            f"{source}: {name} has shape {tuple(tensor.shape)} where config.json implies {shape}; "
            "the weights and config.json do not belong together"
        )
    return tensor.float()


class WeightMap:
    """Our weights by our names (`out`), read from a checkpoint by its names, each checked against the shape its
    config.json implies: a tensor (`get`), a linear layer's weight and bias (`linear`), a LayerNorm's (`norm`)."""

    def __init__(self, weights: dict[str, torch.Tensor], source: Path, d_model: int) -> None:
        self.weights, self.source, self.d_model = weights, source, d_model
        self.out: dict[str, torch.Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        return take(self.weights, name, shape, self.source)

    def linear(self, ours: str, theirs: str, rows: int, columns: int) -> None:
        self.out[f"{ours}.weight"] = self.get(f"{theirs}.weight", (rows, columns))
        self.out[f"{ours}.bias"] = self.get(f"{theirs}.bias", (rows,))

    def norm(self, ours: str, theirs: str) -> None:
        self.out[f"{ours}.weight"] = self.get(f"{theirs}.weight", (self.d_model,))
        self.out[f"{ours}.bias"] = self.get(f"{theirs}.bias", (self.d_model,))


def resolve(src: str | Path) -> Path:
    """A local directory as it is; a hub id (owner/name) downloaded where huggingface_hub and a network are."""
    path = Path(src)
    if path.is_dir():
        return path
    if path.exists():
        raise PretrainedError(f"{src} is a file; SRC must be a directory written by save_pretrained")
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", str(src)):
        raise PretrainedError(f"{src} not found")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise PretrainedError(
            f"{src} is not a local directory, and fetching it from the Hugging Face hub needs huggingface_hub "
            "(pip install huggingface_hub); or pass a directory saved with save_pretrained"
        ) from None
    try:
        return Path(snapshot_download(str(src), allow_patterns=_hub_patterns(str(src))))
    except Exception as error:  # offline, unknown id, gated model: huggingface_hub raises many kinds
        raise PretrainedError(
            f"could not fetch {src} from the Hugging Face hub ({type(error).__name__}: {error})"
        ) from None


def _hub_patterns(repo: str) -> list[str]:
    """The files to fetch: configs and tokenizer files, and the weights once: safetensors (and their shards)
    where the repository has them, else pytorch_model.bin (many older checkpoints, OPUS-MT's among them)."""
    from huggingface_hub import list_repo_files

    patterns = ["*.json", "*.spm", "*.txt", "*.model"]
    try:
        files = list_repo_files(repo)
    except Exception:  # offline (HF_HUB_OFFLINE, no network): the cached snapshot, whichever weights it holds
        return [*patterns, "*.safetensors", "pytorch_model*.bin"]
    weights = "*.safetensors" if any(f.endswith(".safetensors") for f in files) else "pytorch_model*.bin"
    return [*patterns, weights]


def import_pretrained(src: str | Path, model_dir: str | Path) -> Path:
    """Write the model in `src` as a vaswani model directory `model_dir` (new or empty); nothing is written
    when it cannot be imported. Returns `model_dir`."""
    from vaswani.pretrained import bert, gpt2, marian, multilingual

    layouts = {"marian": marian, "bert": bert, "gpt2": gpt2, "m2m_100": multilingual, "mbart": multilingual}
    source = resolve(src)
    out = Path(model_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PretrainedError(f"{out} exists and is not empty; import into a new or empty directory")
    hf = read_config(source)
    kind = hf.get("model_type")
    if kind not in layouts:
        raise PretrainedError(
            f"{source / 'config.json'}: model_type {kind!r} cannot be imported; vaswani imports {', '.join(layouts)}"
        )
    layout = layouts[kind]
    try:
        config, weights, tokenizer_files = layout.convert(source, hf)
    except ConfigError as error:  # settings that make no model (e.g. d_model not a multiple of the heads)
        raise PretrainedError(
            f"{source / 'config.json'}: {error} (its settings, with generation_config.json's, describe a model "
            "vaswani cannot build)"
        ) from None
    model = build_model(config.model)
    load_into(model, weights, source)
    origin = {
        "imported_from": str(src),
        "model_type": kind,
        "architectures": hf.get("architectures"),
        "transformers_version": hf.get("transformers_version"),
    }
    with atomic.building(out) as tmp:  # a kill leaves `out` as it was (absent or empty), never half imported
        for name, file in tokenizer_files.items():  # a file of the checkpoint, or one the layout made (bytes)
            if isinstance(file, bytes):
                (tmp / name).write_bytes(file)
            else:
                shutil.copyfile(file, tmp / name)
        save_weights(weights_of(model), tmp / WEIGHTS)
        write_model_directory(tmp, config, origin)
        _check_tokenizer(tmp, config, source)
    return out


def _check_tokenizer(directory: Path, config: Config, source: Path) -> None:
    """The imported tokenizer read back as `vaswani translate` reads it, before the import is done: a tokenizer
    file of the checkpoint that no layout's check caught (damaged, another model's) refused here, naming it."""
    from vaswani.model_dir import load_tokenizer

    try:
        load_tokenizer(directory, config)
    except ValueError as error:  # DataError, CheckpointError
        said = str(error).replace(f"{directory}/", "")
        raise PretrainedError(f"{source}: its tokenizer, as imported, cannot be read ({said})") from None


def base_config(model: dict, decode: dict) -> Config:
    """A Config with these model and decode sections (the data and train sections at their defaults)."""
    return Config.from_dict({"model": model, "decode": decode})
