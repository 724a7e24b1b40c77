"""The hub_checkpoint surface: a Hugging Face checkpoint directory as `vaswani import` meets it on a user's disk:
OPUS-MT (Marian), NLLB-200, mBART-50, M2M-100, GPT-2 and BERT (a classifier) fixtures laid out as the hub lays
them out, then downloaded half way, edited by hand or by another tool, or holding more than vaswani reads: any file
missing, empty, cut short, bytes flipped or replaced by garbage, a BOM before its JSON; a config.json,
generation_config.json or tokenizer_config.json field deleted or given a value of another type, or a field added;
the weights in float16 or bfloat16, as pytorch_model.bin, in shards (one missing), a tensor of integers, of another
shape, dropped or added; files the hub's repositories also hold (tf_model.h5, flax_model.msgpack, rust_model.ot,
README.md, .gitattributes).

The promise (issues 60 and 61): `vaswani import SRC OUT` either imports, and the model directory then loads and
is used as its command uses it (a sentence translated from German into English, its languages named where the
model needs them; GPT-2 continuing a prompt; BERT labelling a sentence), or exits with a one-line error that names
the checkpoint's file or setting at fault, with nothing written to OUT; never a traceback, never an import that
cannot then be used. What must import (an unharmed checkpoint, the other precisions and file layouts, files vaswani
does not read, a field added, generation_config.json missing) and what must be refused (the weights unreadable, a
tensor of integers or another shape, one added or missing) are asserted as such; and where the weights were only
saved otherwise (float16, bfloat16, .bin, shards) or not touched, the imported model's outputs are transformers' on
the same checkpoint, within 1e-4 (issue 78), not just a string."""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.fuzz import Surface, quiet, text
from tests.fuzz.config_yaml import SECONDS, deadline
from tests.fuzz.model_directory import _reshaped

FAMILIES = ("marian", "nllb", "mbart50", "m2m100", "gpt2", "bert")
WEIGHTS = "model.safetensors"
JSONS = ("config.json", "generation_config.json", "tokenizer_config.json")
OTHER_FILES = ("tf_model.h5", "flax_model.msgpack", "rust_model.ot", "README.md", ".gitattributes")
SENTENCE = "Ein Mann fährt Fahrrad."
# what a hand, another tool or another model's file puts in a field
WILD = [None, True, 0, -1, 1, 2**40, 1.5, "", "x", "relu", "64", [1], {"a": 1}, [], {}]
FILE_KINDS = ("missing", "empty", "truncate", "flip", "garbage", "bom")
JSON_KINDS = ("field", "field", "drop_field", "add_field")
WEIGHT_KINDS = ("float16", "bfloat16", "int32", "reshape", "drop_tensor", "extra_tensor", "bin", "shards")
WEIGHT_KINDS += ("shard_missing",)
KINDS = ("none", "stray", *FILE_KINDS, *FILE_KINDS, *JSON_KINDS, *WEIGHT_KINDS)


@dataclass(frozen=True)
class Fault:
    """What is done to a fresh copy of `family`'s checkpoint: `kind`, the file it hits (by index into the files
    of the copy where `file` is None), and its parameters."""

    family: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)


@st.composite
def faults(draw: st.DrawFn) -> Fault:
    kind = draw(st.sampled_from(KINDS))
    params: dict[str, Any] = {"at": draw(st.integers(0, 2**31)), "seed": draw(st.integers(0, 2**31))}
    if kind == "garbage":
        params["content"] = draw(st.binary(max_size=64) | text(max_size=64).map(str.encode))
    elif kind in ("field", "add_field"):
        params["value"] = draw(st.sampled_from(WILD) | text(max_size=8) | st.integers(-(2**70), 2**70))
    elif kind == "reshape":
        params["how"] = draw(st.sampled_from(["cut", "grow", "flat", "extra_dim"]))
    return Fault(draw(st.sampled_from(FAMILIES)), kind, params)


def _pick(items: list, seed: int) -> Any:
    return sorted(items)[seed % len(items)]


def _target(fault: Fault, src: Path) -> Path:
    """The file a file or JSON fault hits: any of the checkpoint's files, or one of its JSON files."""
    if fault.kind in JSON_KINDS:
        return src / _pick([n for n in JSONS if (src / n).is_file()], fault.params["seed"])
    return src / _pick([p.name for p in src.iterdir()], fault.params["seed"])


def _edit_json(path: Path, fault: Fault) -> str:
    """A field of the JSON file given a wild value, deleted, or one added; returns the field's name."""
    data = json.loads(path.read_text("utf-8"))
    if fault.kind == "add_field":
        name = f"my_field_{fault.params['seed'] % 7}"
        data[name] = fault.params["value"]
    else:
        name = _pick(list(data), fault.params["seed"])
        if fault.kind == "drop_field":
            del data[name]
        else:
            data[name] = fault.params["value"]
    path.write_text(json.dumps(data), "utf-8")
    return name


def _edit_file(path: Path, fault: Fault) -> None:
    data, at = path.read_bytes(), fault.params["at"]
    if fault.kind == "missing":
        path.unlink()
    elif fault.kind == "empty":
        path.write_bytes(b"")
    elif fault.kind == "truncate":
        path.write_bytes(data[: at % max(len(data), 1)])
    elif fault.kind == "garbage":
        path.write_bytes(fault.params["content"])
    elif fault.kind == "bom":
        path.write_bytes(b"\xef\xbb\xbf" + data)
    else:  # flip: up to 8 bytes xor-ed
        flipped, rng = bytearray(data), random.Random(fault.params["seed"])
        for _ in range(1 + at % 8 if flipped else 0):
            flipped[rng.randrange(len(flipped))] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(flipped))


def _edit_weights(src: Path, fault: Fault) -> str:
    """The weights saved again as the fault says; returns the tensor's name where one tensor is changed."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(src / WEIGHTS))
    name = _pick(list(weights), fault.params["seed"])
    if fault.kind in ("float16", "bfloat16", "int32"):
        weights[name] = weights[name].to(getattr(torch, fault.kind))
    elif fault.kind == "reshape":
        weights[name] = _reshaped(weights[name], fault.params["how"])
    elif fault.kind == "drop_tensor":
        del weights[name]
    elif fault.kind == "extra_tensor":
        name = "model.decoder.layers.0.extra.weight"
        weights[name] = torch.zeros(3)
    (src / WEIGHTS).unlink()
    if fault.kind == "bin":
        torch.save(weights, src / "pytorch_model.bin")
    elif fault.kind in ("shards", "shard_missing"):
        _save_shards(weights, src, missing=fault.kind == "shard_missing")
    else:
        save_file(weights, str(src / WEIGHTS), metadata={"format": "pt"})
    return name


def _save_shards(weights: dict, src: Path, missing: bool) -> None:
    """Two shards and the index naming them, as save_pretrained writes a large model (the second left out)."""
    from safetensors.torch import save_file

    names = sorted(weights)
    half = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, held in half.items():
        if not (missing and shard.startswith("model-00002")):
            save_file({n: weights[n] for n in held}, str(src / shard), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {n: shard for shard, held in half.items() for n in held}}
    (src / "model.safetensors.index.json").write_text(json.dumps(index), "utf-8")


def apply(fault: Fault, src: Path) -> str:
    """`fault` done to the checkpoint copy `src`; returns what a refusal must name (a file or a field)."""
    if fault.kind == "stray":
        for name in OTHER_FILES:
            (src / name).write_bytes(b"\x89HDF\r\n not read by vaswani")
        return ""
    if fault.kind in WEIGHT_KINDS:
        return _edit_weights(src, fault)
    if fault.kind == "none":
        return ""
    path = _target(fault, src)
    if fault.kind in JSON_KINDS:
        return _edit_json(path, fault)
    _edit_file(path, fault)
    return path.name


def _must_import(fault: Fault, named: str) -> bool:
    """An unharmed checkpoint, another float precision or file layout, files not read, a field added; also
    generation_config.json missing (the hub's older uploads have none)."""
    if fault.kind in ("none", "stray", "float16", "bfloat16", "bin", "shards", "add_field"):
        return True
    return fault.kind == "missing" and named == "generation_config.json"


def _must_refuse(fault: Fault, named: str) -> bool:
    """The weights unreadable or not the model's (a tensor of integers, another shape, one missing or added)."""
    if fault.kind in ("int32", "reshape", "extra_tensor", "shard_missing"):
        return True
    if fault.kind == "drop_tensor":  # a tied matrix's other names, and buffers transformers makes again, may go
        return not any(word in named for word in ("embed_tokens", "lm_head", "shared", "embed_positions", "bias"))
    return fault.kind in ("missing", "empty", "garbage", "truncate") and named == WEIGHTS


def _refused(message: str, fault: Fault, named: str, src: Path, out: Path) -> str:
    assert len(message.splitlines()) == 1 and message.strip(), f"not one line: {message!r}"
    for words in ("Traceback", 'File "'):
        assert words not in message, message
    assert not out.exists() or not any(out.iterdir()), f"refused, but {sorted(p.name for p in out.iterdir())} written"
    assert not _must_import(fault, named), f"{fault} refused: {message}"
    names = [str(src), named] if named else [str(src)]
    assert any(word in message for word in names), f"names none of {names}: {message!r}"
    return "refused"


def _used(out: Path, family: str) -> str:
    """The imported model loaded and used as its command would: a translation of a sentence (from German into
    English, its languages named where the model needs them), GPT-2's continuation, BERT's label."""
    from tests.helpers.multilingual_models import CODES
    from vaswani.decode.classifier import Classifier
    from vaswani.decode.generate import Generator
    from vaswani.translate.translator import Translator

    if family == "gpt2":
        output = Generator.load(out, device="cpu").generate("ROMEO:", max_new_tokens=4)
    elif family == "bert":
        output = [label for label, _ in Classifier.load(out, device="cpu").classify(["a gorgeous , witty movie ."])]
    else:
        codes = CODES.get(family, {})
        languages = {"source_language": codes["de"], "target_language": codes["en"]} if codes else {}
        output = Translator.load(out, device="cpu", precision="fp32").translate([SENTENCE], beam_size=2, **languages)
    assert len(output) == 1 and isinstance(output[0], str), output
    return "imported"


EQUAL_KINDS = ("none", "stray", "float16", "bfloat16", "bin", "shards")  # values as transformers reads them


def _equals_transformers(src: Path, out: Path, family: str) -> None:
    """The imported model's outputs are transformers' on the same checkpoint (as it was given: a tensor in float16 or
    bfloat16, the weights as pytorch_model.bin or in shards) within 1e-4: logits for random ids (no special token),
    BERT's probabilities for two texts."""
    import torch
    import transformers

    from vaswani.decode.classifier import Classifier
    from vaswani.model_dir import load_model

    if family == "bert":
        texts = ["a gorgeous , witty movie .", "the plot is dull and the jokes are old ."]
        hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(src)).eval()
        batch = transformers.AutoTokenizer.from_pretrained(str(src))(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            theirs = hf(**batch).logits.softmax(-1)
        ours = Classifier.load(out, "cpu").probabilities(texts)
    else:
        kind = transformers.AutoModelForCausalLM if family == "gpt2" else transformers.AutoModelForSeq2SeqLM
        hf = kind.from_pretrained(str(src)).eval()
        model = load_model(out)[0].eval()
        ids = _plain_ids(hf.config, (2, 12))
        with torch.no_grad():
            if family == "gpt2":
                theirs, ours = hf(ids).logits, model(ids)
            else:
                target = _plain_ids(hf.config, (2, 7))
                target[:, 0] = hf.config.decoder_start_token_id
                theirs, ours = hf(input_ids=ids, decoder_input_ids=target).logits, model(ids, target)
    assert ours.shape == theirs.shape and (ours - theirs).abs().max() < 1e-4, (ours - theirs).abs().max()


def _plain_ids(config: Any, shape: tuple[int, int]) -> Any:
    """Token ids drawn with a fixed seed, none of them a special token (padding would be masked by one side only)."""
    import torch

    vocab = getattr(config, "decoder_vocab_size", None) or config.vocab_size
    special = {getattr(config, f"{name}_token_id", None) for name in ("pad", "eos", "bos", "unk", "decoder_start")}
    ids = torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(0))
    for token in special - {None}:
        ids[ids == token] = (token + 7) % vocab if (token + 7) % vocab not in special else 5
    return ids


def check(fault: Fault, context: dict[str, Any]) -> str:
    """A fresh copy of the family's checkpoint with `fault`, imported by the CLI; its error (stderr) checked, or
    the model directory it wrote used."""
    from vaswani.cli import main

    root = Path(tempfile.mkdtemp(dir=context["root"]))
    src, out = root / "checkpoint", root / "out"
    shutil.copytree(context[fault.family], src)
    try:
        named = apply(fault, src)
        stderr = io.StringIO()
        with quiet(), deadline(SECONDS), contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            code = main(["import", str(src), str(out)])
        if code != 0:
            return _refused(stderr.getvalue().strip().removeprefix("vaswani: error: "), fault, named, src, out)
        assert not _must_refuse(fault, named), f"{fault} on {named} was imported"
        with quiet(), deadline(SECONDS):
            if fault.kind in EQUAL_KINDS:
                _equals_transformers(src, out, fault.family)
            return _used(out, fault.family)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def checkpoints() -> Iterator[dict[str, Any]]:
    """Each family's checkpoint (untrained: their import is what is fuzzed), made once in a temporary folder the
    cases' copies go into too."""
    from tests.helpers.bert_models import save_bert_classifier, save_bert_mlm
    from tests.helpers.gpt2_models import save_gpt2
    from tests.helpers.hf_models import save_marian
    from tests.helpers.multilingual_models import save_multilingual

    with tempfile.TemporaryDirectory(prefix="fuzz-hub-") as root, quiet():
        made: dict[str, Any] = {"root": root, "marian": save_marian(Path(root) / "marian", steps=0)}
        for family in FAMILIES[1:4]:
            made[family] = save_multilingual(Path(root) / family, family, steps=0)
        made["gpt2"] = save_gpt2(Path(root) / "gpt2", steps=0)
        made["bert"] = save_bert_classifier(save_bert_mlm(Path(root) / "mlm", steps=0), Path(root) / "bert")
        yield made


SURFACE = Surface("hub_checkpoint", faults, check, checkpoints)
