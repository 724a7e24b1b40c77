"""A damaged model directory is one clear error naming its file and the fix (issue 60; tests/fuzz/model_directory.py
found each of these): never a JSON, torch or SentencePiece traceback, never weights of the wrong kind taken."""

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from vaswani.model_dir import WEIGHTS, CheckpointError, load_model, load_tokenizer

pytestmark = pytest.mark.shared_data  # the tiny model directory's tokenizer reads ../shared/data


@pytest.fixture
def copy(model_dir: Path, tmp_path: Path) -> Path:
    """A copy of the session's tiny model directory, to damage."""
    return shutil.copytree(model_dir, tmp_path / "model")


@pytest.mark.parametrize("content", ["{", "", "[]", "{}", '{"format_version": true}', None])
def test_a_damaged_vaswani_json_is_named(copy, content):
    """Was a JSONDecodeError, a KeyError or a TypeError; a directory in its place said 'model format None'."""
    info = copy / "vaswani.json"
    info.unlink()
    info.mkdir() if content is None else info.write_text(content, encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"vaswani\.json (is not JSON|not found|says model format)") as error:
        load_model(copy)
    assert len(str(error.value).splitlines()) == 1


def test_weights_of_a_non_float_dtype_are_refused_and_other_floats_taken(copy):
    """An int64 tensor was copied into the float weights, converted silently."""
    weights = load_file(str(copy / WEIGHTS))
    name = sorted(weights)[0]
    save_file({**weights, name: weights[name].to(torch.int64)}, str(copy / WEIGHTS))
    with pytest.raises(CheckpointError, match=rf"{WEIGHTS} holds {name} as I64, the model's is F32"):
        load_model(copy)
    save_file({**weights, name: weights[name].to(torch.float16)}, str(copy / WEIGHTS))
    assert load_model(copy)[0].state_dict()[name].dtype == torch.float32


def test_a_config_too_large_to_build_is_named(copy):
    """d_model 2^40 divides by n_heads and passes the config's checks; building it raised torch's RuntimeError."""
    config = yaml.safe_load((copy / "config.yaml").read_text(encoding="utf-8"))
    config["model"]["d_model"] = 2**40
    (copy / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"config\.yaml describes a model too large to build"):
        load_model(copy)


def test_a_directory_in_place_of_the_weights_is_named(copy):
    (copy / WEIGHTS).unlink()
    (copy / WEIGHTS).mkdir()
    with pytest.raises(CheckpointError, match=rf"{WEIGHTS} is not a file"):
        load_model(copy)


def test_a_tokenizer_of_another_run_is_named(copy, tmp_path):
    """Its 300 pieces against the model's 600: the model's ids had no piece (an IndexError decoding the output); a
    larger one's ids had no embedding row (an IndexError in the first batch)."""
    from tests.helpers.common import MULTI30K
    from vaswani.data.corpus import read_lines
    from vaswani.data.tokenizer import Tokenizer

    lines = read_lines(MULTI30K / "raw/val.de.gz")
    (tmp_path / "other").mkdir()
    Tokenizer.train(lines, lines, 300, "bpe", joint=True, directory=tmp_path / "other")
    shutil.copyfile(tmp_path / "other/tokenizer.model", copy / "tokenizer.model")
    _, config = load_model(copy)
    with pytest.raises(CheckpointError, match=r"tokenizer\.model has 300 pieces, but the model's source vocabulary"):
        load_tokenizer(copy, config)


def test_a_missing_embedding_is_excused_only_where_it_is_tied_to_one_that_is_there(tmp_path):
    """Any missing '*.embed.tokens.weight' was excused: an untied model then translated with a random matrix."""
    from vaswani.config import Config
    from vaswani.nn import Transformer
    from vaswani.train import checkpoint as ckpt

    for tied in (True, False):
        directory = tmp_path / f"tied_{tied}"
        directory.mkdir()
        model = {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1, "src_vocab_size": 40, "tgt_vocab_size": 40,
                 "share_embeddings": tied, "tie_output": tied}  # fmt: skip
        config = Config.from_dict({"model": model})
        ckpt.write_model_directory(directory, config)
        weights = ckpt.weights_of(Transformer(config.model))
        assert ("decoder.embed.tokens.weight" in weights) is not tied  # stored once where tied
        weights.pop("encoder.embed.tokens.weight" if tied else "decoder.embed.tokens.weight")
        ckpt.save_weights(weights, directory / WEIGHTS)
        with pytest.raises(CheckpointError, match=r"missing \['(en|de)coder\.embed\.tokens\.weight'\]"):
            load_model(directory)


def test_a_language_model_s_tokenizer_is_checked_against_it_as_a_translator_s_is(model_dir, tmp_path):
    """Generator.load and Classifier.load took any tokenizer: ids past the model's vocabulary failed mid-batch."""
    from vaswani.config import Config
    from vaswani.decode.classifier import Classifier
    from vaswani.decode.generate import Generator
    from vaswani.nn import build_model
    from vaswani.train import checkpoint as ckpt

    for kind, n_classes, loader in (("decoder_only", 0, Generator), ("encoder_only", 2, Classifier)):
        directory = tmp_path / kind
        directory.mkdir()
        model = {"type": kind, "d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1, "src_vocab_size": 300,
                 "tgt_vocab_size": 300, "positions": "learned", "max_positions": 256,
                 "n_classes": n_classes}  # fmt: skip
        config = Config.from_dict({"model": model})
        ckpt.write_model_directory(directory, config)
        ckpt.save_weights(ckpt.weights_of(build_model(config.model)), directory / WEIGHTS)
        shutil.copyfile(model_dir / "tokenizer.model", directory / "tokenizer.model")  # 600 pieces
        with pytest.raises(CheckpointError, match=r"tokenizer\.model has 600 pieces"):
            loader.load(directory, "cpu")
