"""Checkpoints as users' disks hold them, found by the hub_checkpoint fuzz surface (tests/fuzz/hub_checkpoint.py):
each one imported, or refused in one line naming the file and the field or tensor, with nothing written."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.helpers.hf_models import save_marian
from tests.helpers.multilingual_models import save_multilingual
from vaswani.pretrained import PretrainedError, import_pretrained
from vaswani.translate.translator import Translator

pytestmark = [pytest.mark.shared_data]

pytest.importorskip("transformers")
pytest.importorskip("google.protobuf")


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    return save_marian(tmp_path_factory.mktemp("marian") / "hf", steps=0)


@pytest.fixture
def copy(marian, tmp_path):
    return shutil.copytree(marian, tmp_path / "checkpoint")


def _edit(path, **fields):
    data = json.loads(path.read_text("utf-8"))
    for name, value in fields.items():
        if value is ...:
            del data[name]
        else:
            data[name] = value
    path.write_text(json.dumps(data), "utf-8")


def _refused(src, out, *words):
    with pytest.raises(PretrainedError) as caught:
        import_pretrained(src, out)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and all(word in message for word in words), message
    assert not out.exists() or not any(out.iterdir())
    return message


@pytest.mark.parametrize(
    ("file", "fields", "words"),
    [
        (
            "generation_config.json",
            {"num_beams": True},
            ("num_beams is True", "a whole number"),
        ),  # was decode.beam_size
        ("generation_config.json", {"bad_words_ids": True}, ("bad_words_ids",)),  # was a TypeError
        ("config.json", {"d_model": ...}, ("has no d_model",)),  # was a KeyError
        ("config.json", {"vocab_size": None}, ("has no vocab_size",)),  # was a TypeError
        ("config.json", {"dropout": "0.1"}, ("dropout is '0.1'", "from 0 to 1")),
        ("config.json", {"d_model": 30}, ("cannot build",)),  # 30 is no multiple of the 4 heads
    ],
)
def test_a_field_of_another_type_or_missing_is_refused_naming_the_file_and_field(copy, tmp_path, file, fields, words):
    _edit(copy / file, **fields)
    _refused(copy, tmp_path / "out", str(copy), *words)


def test_json_that_is_not_an_object_is_refused_and_a_bom_is_read_past(copy, tmp_path):
    config = (copy / "config.json").read_bytes()
    (copy / "config.json").write_text("[1, 2]", "utf-8")
    _refused(copy, tmp_path / "out", "config.json", "not an object")
    (copy / "config.json").write_bytes(b"\xef\xbb\xbf" + config)  # as Windows editors save it
    assert Translator.load(import_pretrained(copy, tmp_path / "bom"), "cpu").translate(["Ein Hund."])[0] is not None


def test_a_tensor_of_integers_is_refused_naming_it(copy, tmp_path):
    weights = load_file(str(copy / "model.safetensors"))
    weights["final_logits_bias"] = weights["final_logits_bias"].to(torch.int32)  # zeros: the same values as ints
    save_file(weights, str(copy / "model.safetensors"))
    _refused(copy, tmp_path / "out", "final_logits_bias holds int32 numbers, not floats")


def test_a_damaged_sentencepiece_model_is_refused_not_imported(tmp_path):
    """M2M-100's sentencepiece.bpe.model was copied unread: an empty one imported, and translate failed."""
    src = save_multilingual(tmp_path / "m2m", "m2m100", steps=0)
    (src / "sentencepiece.bpe.model").write_bytes(b"")
    _refused(src, tmp_path / "out", "sentencepiece.bpe.model is not a SentencePiece model")


@pytest.mark.parametrize(
    ("kind", "file", "fields", "words"),
    [  # each was a traceback: an 8 TB sinusoid table, NaN from a negative eps, .items() of a bool, a list as a key
        ("m2m100", "config.json", {"max_position_embeddings": 2**40}, ("max_position_embeddings", "1,048,576")),
        ("nllb", "config.json", {"dropout": None, "d_model": None}, ("has no d_model",)),  # null read as absent
        ("m2m100", "tokenizer_config.json", {"language_codes": [1]}, ("language_codes is [1]",)),
        ("nllb", "tokenizer_config.json", {"unk_token": [1]}, ("unk_token is [1]", "a token's text")),
    ],
)
def test_multilingual_fields_out_of_bounds_are_refused(tmp_path, kind, file, fields, words):
    src = save_multilingual(tmp_path / kind, kind, steps=0)
    (src / "tokenizer.json").unlink(missing_ok=True)  # the hub's M2M-100 layout: vocab.json and the SentencePiece model
    _edit(src / file, **fields)
    _refused(src, tmp_path / "out", file, *words)


def test_a_damaged_tokenizer_json_is_refused_even_where_tokenizers_panics(tmp_path):
    src = save_multilingual(tmp_path / "nllb", "nllb", steps=0)
    spec = json.loads((src / "tokenizer.json").read_text("utf-8"))
    normalizers = spec["normalizer"].get("normalizers", [spec["normalizer"]])
    charsmap = next(n for n in normalizers if "precompiled_charsmap" in n)
    charsmap["precompiled_charsmap"] = "AAAA"  # tokenizers' Rust side panics on it (pyo3's PanicException)
    (src / "tokenizer.json").write_text(json.dumps(spec), "utf-8")
    _refused(src, tmp_path / "out", "tokenizer.json is not a tokenizer the tokenizers library reads")


def test_the_cli_s_error_is_one_line_whatever_it_quotes(tmp_path, capsys):
    from vaswani.cli import main

    assert main(["import", str(tmp_path / "a\nfolder"), str(tmp_path / "out")]) == 2  # a name pasted with its newline
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_tokenizer_config_that_is_no_object_is_refused(tmp_path):
    from tests.helpers.gpt2_models import save_gpt2

    src = save_gpt2(tmp_path / "gpt2", steps=0)
    (src / "tokenizer_config.json").write_text("0", "utf-8")  # was an AttributeError when read back
    _refused(src, tmp_path / "out", "tokenizer_config.json", "JSON object")
