"""Weights read a row at a time (runtime/mapped.py): the token embeddings of a model loaded to translate, read from
its weights file mapped, give the translations of the model in memory, and are left in memory where decoding reads
them whole or they changed since loading."""

from pathlib import Path

import pytest
import torch

from tests.helpers.common import write_tiny_model_directory
from vaswani.decode.engine import TorchEngine
from vaswani.model_dir import WEIGHTS, load_model
from vaswani.runtime.mapped import map_lookups
from vaswani.translate.translator import Translator

pytestmark = pytest.mark.shared_data

SOURCES = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen im Schnee .", "Eine Frau liest ein Buch ."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_model_directory(tmp_path_factory.mktemp("mapped"), max_len_a=0.0, max_len_b=8)


def _mapped_file(tensor: torch.Tensor) -> str | None:
    """The file whose mapping holds `tensor`'s memory (/proc/self/maps), or None (memory of its own)."""
    address = tensor.data_ptr()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if low <= address < high:
            return fields[5] if len(fields) > 5 else None
    return None


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads where memory comes from in /proc")
@pytest.mark.parametrize("beams", [1, 4])
def test_an_int8_translator_reads_its_embedding_from_the_file_and_translates_as_in_memory(model_dir, beams):
    translator = Translator.load(model_dir, "cpu", precision="int8")
    model = translator.model
    assert model.output_projection is not None  # the output projection runs on a copy: the matrix is looked up only
    assert _mapped_file(model.encoder.embed.tokens.weight) == str(model_dir / WEIGHTS)
    assert model.output_weight is model.encoder.embed.tokens.weight  # tied: one tensor, mapped once
    reference, _ = load_model(model_dir)  # the same weights in memory, made int8 the same way
    in_memory = Translator(reference, translator.tokenizer, translator.config, TorchEngine(reference, "int8", True))
    assert _mapped_file(reference.encoder.embed.tokens.weight) != str(model_dir / WEIGHTS)
    found = translator.translate_with_details(SOURCES, beam_size=beams)
    expected = in_memory.translate_with_details(SOURCES, beam_size=beams)
    assert [t.candidates[0].tokens for t in found] == [t.candidates[0].tokens for t in expected]
    assert [t.candidates[0].score for t in found] == [t.candidates[0].score for t in expected]


def test_a_matrix_read_whole_or_changed_since_loading_stays_in_memory(model_dir):
    model, _ = load_model(model_dir)
    weights = model_dir / WEIGHTS
    assert map_lookups(model, weights, output_on_copy=False) == []  # tied to the output torch reads whole: kept
    embedding = model.encoder.embed.tokens.weight
    loaded = embedding[0, 0].item()
    with torch.no_grad():
        embedding[0, 0] = loaded + 1.0  # changed since loading: the file no longer holds it
    assert map_lookups(model, weights, output_on_copy=True) == []
    assert _mapped_file(embedding) != str(weights)
    with torch.no_grad():
        embedding[0, 0] = loaded
    assert map_lookups(model, weights, output_on_copy=True) == ["encoder.embed.tokens.weight"]
