"""Loading a tokenizer from a model directory (issue 60; tests/fuzz/model_directory.py found it)."""

import shutil

import pytest

from vaswani.data.corpus import DataError
from vaswani.data.tokenizer import Tokenizer

pytestmark = pytest.mark.shared_data  # the tiny model directory's tokenizer reads ../shared/data


@pytest.mark.parametrize("cut", [0, 1000, -1])
def test_a_truncated_sentencepiece_model_is_named(model_dir, tmp_path, cut):
    """SentencePiece's RuntimeError ('could not parse ModelProto') named no file and no fix."""
    copy = shutil.copytree(model_dir, tmp_path / "model")
    data = (copy / "tokenizer.model").read_bytes()
    (copy / "tokenizer.model").write_bytes(data[:cut])
    with pytest.raises(DataError, match=r"tokenizer\.model is not a SentencePiece model .*: truncated or corrupt"):
        Tokenizer.load(copy)


def test_a_piece_that_is_not_utf8_is_refused_when_loading(model_dir, tmp_path):
    """A flipped byte inside a piece still parses; the piece raised UnicodeDecodeError at the first translation
    (Tokenizer.language_tokens), naming no file."""
    copy = shutil.copytree(model_dir, tmp_path / "model")
    data = (copy / "tokenizer.model").read_bytes()
    at = data.index("▁".encode())  # in a piece: the pieces are the model's first field
    (copy / "tokenizer.model").write_bytes(data[:at] + b"\xff" + data[at + 1 :])
    with pytest.raises(DataError, match=r"tokenizer\.model is not a SentencePiece model .*: truncated or corrupt"):
        Tokenizer.load(copy)
