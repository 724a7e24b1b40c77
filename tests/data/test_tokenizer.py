"""Loading a tokenizer from a model directory (issue 60; tests/fuzz/model_directory.py found it)."""

import shutil

import pytest
import sentencepiece as spm

from vaswani.data.corpus import DataError
from vaswani.data.tokenizer import ONE_BY_ONE, Tokenizer

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


LINES = ["Ein Mann fährt Fahrrad.", "", "  zwei   Leerzeichen ", "Ünïcödé — «quotes» 😀", "x" * 500]


@pytest.mark.parametrize("n", [1, 5, ONE_BY_ONE - 1, ONE_BY_ONE, 3 * ONE_BY_ONE])
def test_few_lines_are_encoded_one_at_a_time_as_the_pool_would(model_dir, n):
    """Below ONE_BY_ONE lines SentencePiece is called once a line, not with the list (its pool of threads cost a
    short sentence 10x its own time, and a busy server's event loop a third of its time): the same ids and texts,
    and no list call where the lines are few."""
    tokenizer = Tokenizer.load(model_dir)
    calls = []

    class Spy(spm.SentencePieceProcessor):
        def encode(self, input, *args, **kwargs):
            calls.append(isinstance(input, list))  # a list of lines: the pool's
            return super().encode(input, *args, **kwargs)

        def decode(self, input, *args, **kwargs):
            calls.append(bool(input) and isinstance(input[0], list))  # a list of lines' ids: the pool's
            return super().decode(input, *args, **kwargs)

    spy = Spy(model_file=str(model_dir / "tokenizer.model"))
    lines = (LINES * n)[:n]
    pooled = spy.encode(lines)
    tokenizer.src = tokenizer.tgt = spy
    calls.clear()
    assert tokenizer.encode_src(lines) == pooled
    assert tokenizer.decode_tgt(pooled) == spy.decode(pooled)
    pooled_calls = sum(calls[:-1])  # the last call is the reference decode's
    assert pooled_calls == (0 if n < ONE_BY_ONE else 2), calls
