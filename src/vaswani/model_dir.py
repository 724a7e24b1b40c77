"""A model directory: everything needed to translate with a trained model, read and written in one place.

    config.yaml        the fully resolved configuration: every field that takes effect (config/recipe.py)
    tokenizer.model    the SentencePiece model(s) (written by `vaswani.data.tokenizer`)
    model.safetensors  the weights to translate with (the best checkpoint, or an average)
    vaswani.json       the format version, the vaswani version that wrote it, and (fine-tuned models) their origin

Training (`train/`), decoding (`decode/`) and export read and write it through this module only, so no
stage imports another to find a model. Training adds checkpoints/ (train/checkpoint.py).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from vaswani import __version__, atomic
from vaswani.config import Config, ConfigError
from vaswani.nn import build_model
from vaswani.runtime.allocator import freed_memory_returned

if TYPE_CHECKING:
    from vaswani.data.tokenizer import Tokenizer

FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"


class CheckpointError(ValueError):
    """A model directory or checkpoint that cannot be used; the message says which and what to do."""


def weights_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each shared tensor stored once (tied embeddings), contiguous, on the CPU."""
    seen, out = set(), {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        out[name] = tensor.detach().to("cpu").contiguous()
    return out


def save_weights(weights: dict[str, torch.Tensor], path: Path) -> None:
    """Atomically (vaswani.atomic): a kill while saving leaves the previous weights, never a truncated file."""
    atomic.write_file(path, lambda tmp: save_file(weights, str(tmp), metadata={"format_version": str(FORMAT_VERSION)}))


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    with reading(path):
        return load_file(str(path))


def tied_names(model: torch.nn.Module) -> frozenset[str]:
    """The state dict's names of a tied matrix but its first (tied embeddings): weights_of stores it once, under
    its first name, and these others point at the same parameter. An untied model has none."""
    seen: set[int] = set()
    tied = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            tied.add(name)
        seen.add(id(tensor))
    return frozenset(tied)


def untied_missing(missing: list[str], tied: frozenset[str]) -> list[str]:
    """The names `load_state_dict` reports missing, but a tied matrix's other names (`tied`: tied_names)."""
    return [name for name in missing if name not in tied]


def load_into(model: torch.nn.Module, weights: dict[str, torch.Tensor], source: Path) -> None:
    """`weights` copied into `model`; CheckpointError where they do not fit it."""
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as error:  # a shape that differs
        detail = str(error).split("\n\t")[1] if "\n\t" in str(error) else str(error)
        raise CheckpointError(f"{source} does not fit this model ({detail.strip()})") from None
    _check_fit(missing, unexpected, source, tied_names(model))


def _check_fit(missing: list[str], unexpected: list[str], source: Path, tied: frozenset[str]) -> None:
    missing = untied_missing(missing, tied)
    if missing or unexpected:
        raise CheckpointError(
            f"{source} does not fit this model (missing {missing[:3]}, unexpected {unexpected[:3]}): weights and "
            "config.yaml of different models; use the files of one run"
        )


def read_weights_into(model: torch.nn.Module, path: Path) -> None:
    """The weights saved at `path` copied into `model`'s own tensors one at a time, the file opened afresh for
    each, so that no second copy of the model (a state dict, or the file's pages mapped and read) is held while it
    loads: a lower peak than loading through load_weights (docs/benchmarks.md, "CPU decoding", peak memory).
    CheckpointError where the file is corrupt or does not fit (checked on its header first: nothing is copied
    from a file that does not fit)."""
    with reading(path):
        own = model.state_dict()
        names = check_fits(path, own, tied_names(model))
        with torch.no_grad():
            for name in names:
                with safe_open(str(path), framework="pt") as f:
                    saved = f.get_tensor(name)
                    own[name].copy_(saved)
                    del saved  # its pages unmapped before the next tensor's are read


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """What goes wrong reading the weights file `path` as a one-line CheckpointError naming it and the fix (a
    truncated or corrupt file, a directory in its place), not safetensors' or the OS's bare error."""
    try:
        yield
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"{path} not found; {_RESTORE}") from None
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is corrupt or incomplete ({_one_line(error)}); {_RESTORE}") from None


_RESTORE = "re-export or re-train it, or restore a copy"
# safetensors' dtype names of torch's; a float tensor of another precision is converted on loading
_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64"}
_DTYPES |= {torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8"}
_DTYPES |= {torch.bool: "BOOL"}
_FLOATS = frozenset(("F32", "F16", "BF16", "F64"))


def check_fits(path: Path, own: dict[str, torch.Tensor], tied: frozenset[str]) -> list[str]:
    """The tensor names of the safetensors file `path`, each checked against `own` (a model's state dict, on the
    meta device or not; `tied`: its names stored under another, tied_names) from the file's header alone: the same
    names, shapes, and dtypes (any float for a float). A CheckpointError naming the file and the first difference;
    a SafetensorError where the header is corrupt."""
    if path.exists() and not path.is_file():
        raise CheckpointError(f"{path} is not a file (a directory?); {_RESTORE}")
    with safe_open(str(path), framework="pt") as f:
        names = list(f.keys())
        _check_fit([n for n in own if n not in names], [n for n in names if n not in own], path, tied)
        for name in names:
            part, target = f.get_slice(name), own[name]
            shape, dtype, wanted = tuple(part.get_shape()), part.get_dtype(), _DTYPES.get(target.dtype)
            if shape != tuple(target.shape):
                raise CheckpointError(
                    f"{path} does not fit this model ({name} has shape {shape} there, {tuple(target.shape)} in the "
                    "model): its config.yaml describes another model; use the config.yaml of the run that wrote it"
                )
            if dtype != wanted and not (dtype in _FLOATS and wanted in _FLOATS):
                raise CheckpointError(
                    f"{path} holds {name} as {dtype}, the model's is {wanted or target.dtype}: not this model's "
                    f"weights; {_RESTORE}"
                )
    return names


def _one_line(error: Exception) -> str:
    """An error's message with its lines joined: safetensors and JSON messages may span several."""
    return " ".join(str(error).split())


def write_model_directory(directory: Path, config: Config, origin: dict | None = None) -> None:
    """config.yaml and vaswani.json (with `origin`, what the model came from, when given); the tokenizer is
    written by its trainer, weights by save_weights."""
    atomic.write_file(directory / "config.yaml", config.save)  # rewritten by every resumed run: never half there
    info = {"format_version": FORMAT_VERSION, "vaswani_version": __version__}
    if origin:
        info["origin"] = origin
    atomic.write_text(directory / "vaswani.json", json.dumps(info, indent=2) + "\n")


def load_model(directory: str | Path, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, Config]:
    """The model of a model directory (Transformer, CausalLM or MaskedLM: model.type), in eval mode, with its
    config."""
    directory = Path(directory)
    if not (directory / "config.yaml").is_file():
        raise CheckpointError(
            f"{directory} is not a model directory ({directory / 'config.yaml'} not found; vaswani train, "
            "average and import write one)"
        )
    check_format(directory)
    try:
        config = Config.load(directory / "config.yaml")
    except ConfigError as error:
        where = str(directory / "config.yaml")
        raise CheckpointError(str(error) if where in str(error) else f"{where}: {error}") from None
    with reading(directory / WEIGHTS):  # the config checked against the weights' header before memory is taken
        check_fits(directory / WEIGHTS, *_shapes(config, directory))
    with (
        freed_memory_returned()
    ):  # the weights mapped apart: freed at once when packed or made int8 (nn/cpu_linear/onednn_fp32.py)
        model = build_model(config.model)
        read_weights_into(model, directory / WEIGHTS)
    return model.to(device).eval(), config


def _shapes(config: Config, directory: Path) -> tuple[dict[str, torch.Tensor], frozenset[str]]:
    """The state dict of the model config.yaml describes, on the meta device (shapes and dtypes, no memory), and
    its tied names; a CheckpointError where torch cannot even describe it (a d_model of 2^40)."""
    try:
        with torch.device("meta"):
            model = build_model(config.model)
            return model.state_dict(), tied_names(model)
    except (RuntimeError, OverflowError) as error:
        raise CheckpointError(
            f"{directory / 'config.yaml'} describes a model too large to build ({_one_line(error)}); use the "
            "config.yaml of the run that wrote the weights"
        ) from None


def check_format(directory: Path) -> None:
    """vaswani.json names the format this vaswani reads; a CheckpointError naming the file otherwise (missing,
    not JSON, another format)."""
    path = directory / "vaswani.json"
    fix = f'copy it from the run that wrote the model, or write {{"format_version": {FORMAT_VERSION}}} into it'
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise CheckpointError(f"{path} not found: it says which format the model directory has; {fix}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not JSON ({_one_line(error)}); {fix}") from None
    version = info.get("format_version") if isinstance(info, dict) else None
    if type(version) is not int or version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} says model format {version!r}; this vaswani reads format {FORMAT_VERSION} (a model directory "
            f"of another vaswani version, or a damaged file: {fix})"
        )


def load_tokenizer(directory: str | Path, config: Config) -> Tokenizer:
    """The model directory's tokenizer, checked against its model (check_tokenizer)."""
    from vaswani.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(directory)
    check_tokenizer(tokenizer, config, Path(directory))
    return tokenizer


def check_tokenizer(tokenizer: Tokenizer, config: Config, directory: Path) -> None:
    """A CheckpointError naming the tokenizer's file where its pieces are not the model's vocabulary: more pieces
    than embedding rows (an IndexError in the first batch), or, for a tokenizer trained here, another count (the
    model writes ids the tokenizer cannot spell): another run's tokenizer. An imported model's (Marian, Hugging
    Face) may have fewer pieces than rows."""
    from vaswani.data.hf_tokenizer import HfPieces

    own = not tokenizer.marian and not isinstance(tokenizer.src, HfPieces)
    names = tokenizer.file_names
    sides = (
        ("source", tokenizer.src_vocab_size, config.model.src_vocab_size, names[0]),
        ("target", tokenizer.tgt_vocab_size, config.model.tgt_vocab_size, names[-1] if own else names[0]),
    )
    for side, pieces, rows, name in sides:
        if pieces > rows or (own and pieces != rows):
            raise CheckpointError(
                f"{directory / name} has {pieces:,} pieces, but the model's {side} vocabulary has {rows:,} "
                f"(config.yaml, {WEIGHTS}): the tokenizer of another run; restore this model's own"
            )
