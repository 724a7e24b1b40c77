"""OPUS-MT/Marian in: a MarianMTModel saved as the hub publishes it, imported, proven equal to transformers'."""

import json
import shutil

import pytest
import torch

from tests.pretrained.checks import assert_refused, saved_and_imported, set_config
from tests.pretrained.hf_models import multi30k, save_marian
from vaswani.cli import main
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.translator import Translator
from vaswani.model_dir import load_model
from vaswani.pretrained import import_pretrained

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def opus(tmp_path_factory):
    """A small de-en MarianMTModel (swish, joint vocab.json with a >>en<< token, non-zero final_logits_bias),
    its MarianTokenizer and the vaswani model imported from it by the CLI."""
    root = tmp_path_factory.mktemp("opus")
    save = lambda out: save_marian(out, steps=400)  # noqa: E731
    return saved_and_imported(root, save, transformers.MarianMTModel, transformers.MarianTokenizer)


@pytest.fixture(scope="module")
def lines():
    return multi30k("val", "de", 200)


def test_the_import_records_its_origin_and_the_checkpoint_s_settings(opus):
    src, model_dir, hf, _ = opus
    info = json.loads((model_dir / "vaswani.json").read_text())
    assert info["origin"]["imported_from"] == str(src) and info["origin"]["model_type"] == "marian"
    _, config = load_model(model_dir)
    m, d = config.model, config.decode
    assert (m.activation, m.output_bias, m.layer_norm_eps, m.bos_id) == ("silu", True, 1e-5, hf.config.pad_token_id)
    assert (m.eos_id, m.pad_id) == (0, hf.config.pad_token_id)
    assert (d.beam_size, d.length_penalty, d.length_rule) == (4, 1.0, "power")
    assert (d.max_len_a, d.max_len_b) == (0.0, 62)  # max_length 64 counts the start token and the forced EOS


def test_our_tokenizer_gives_marian_tokenizer_s_ids_and_text(opus, lines):
    _, model_dir, _, tokenizer = opus
    ours = Tokenizer.load(model_dir)
    sample = [*lines, ">>en<< Ein Hund läuft.", "Ein ☃ unbekanntes Zeichen"]
    theirs = tokenizer(sample)["input_ids"]
    assert [[*ids, 0] for ids in ours.encode_src(sample)] == theirs
    targets = tokenizer(text_target=multi30k("val", "en", 50))["input_ids"]
    assert ours.decode_tgt([t[:-1] for t in targets]) == tokenizer.batch_decode(targets, skip_special_tokens=True)


def test_logits_are_transformers_within_1e_4(opus, lines):
    _, model_dir, hf, tokenizer = opus
    model, _ = load_model(model_dir)
    batch = tokenizer(lines[:32], return_tensors="pt", padding=True)
    with torch.no_grad():
        outputs = hf.generate(**batch, num_beams=1, max_length=64)
        theirs = hf(**batch, decoder_input_ids=outputs).logits
        ours = model(batch["input_ids"], outputs)
    real = torch.ones_like(outputs, dtype=torch.bool)
    real[:, 1:] = outputs[:, 1:] != hf.config.pad_token_id
    assert real.sum() > 200
    assert (ours - theirs)[real].abs().max() < 1e-4
    assert theirs[real].std() > 1.0  # the comparison is between logits that differ from token to token


def test_greedy_is_identical_and_beam_with_the_checkpoint_s_settings_is_generate_s(opus, lines):
    _, model_dir, hf, tokenizer = opus
    translator = Translator.load(model_dir, "cpu", "fp32")
    batch = tokenizer(lines, return_tensors="pt", padding=True)
    with torch.no_grad():
        greedy = tokenizer.batch_decode(hf.generate(**batch, num_beams=1), skip_special_tokens=True)
        beam = tokenizer.batch_decode(hf.generate(**batch), skip_special_tokens=True)  # num_beams 4, its config
    assert translator.translate(lines, beam_size=1) == greedy
    ours = translator.translate(lines)
    assert sum(a == b for a, b in zip(ours, beam, strict=True)) >= 0.95 * len(lines)
    assert len(set(beam)) > 20 and beam != greedy  # real, varied outputs where beam search has choices


def test_separate_vocabularies_import_equal(tmp_path, lines):
    src = save_marian(tmp_path / "hf", separate=True, steps=150)
    model_dir = import_pretrained(src, tmp_path / "model")
    hf = transformers.MarianMTModel.from_pretrained(str(src)).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(str(src))
    translator = Translator.load(model_dir, "cpu", "fp32")
    assert translator.model.config.share_embeddings is False
    assert translator.model.config.src_vocab_size != translator.model.config.tgt_vocab_size
    batch = tokenizer(lines[:50], return_tensors="pt", padding=True)
    with torch.no_grad():
        outputs = hf.generate(**batch, num_beams=1)
        diff = (translator.model(batch["input_ids"], outputs) - hf(**batch, decoder_input_ids=outputs).logits).abs()
    assert diff[:, 0].max() < 1e-4
    greedy = tokenizer.batch_decode(outputs, skip_special_tokens=True)
    assert translator.translate(lines[:50], beam_size=1) == greedy


def test_export_import_export_leaves_the_model_unchanged(opus, tmp_path):
    src, model_dir, _, _ = opus
    assert main(["export", str(model_dir), str(tmp_path / "hf"), "--to", "huggingface"]) == 0
    again = import_pretrained(tmp_path / "hf", tmp_path / "again")
    first, _ = load_model(model_dir)
    second, _ = load_model(again)
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    from safetensors.torch import load_file

    original = load_file(str(src / "model.safetensors"))
    exported = load_file(str(tmp_path / "hf" / "model.safetensors"))
    for name, tensor in original.items():
        if name in exported:
            assert torch.allclose(tensor, exported[name], atol=1e-6), name
    assert (tmp_path / "hf" / "vocab.json").read_bytes() != b"" and (tmp_path / "hf" / "source.spm").is_file()


def test_ctranslate2_runs_the_imported_model_as_we_do(opus, lines, tmp_path):
    pytest.importorskip("ctranslate2")
    _, model_dir, _, _ = opus
    ours = Translator.load(model_dir, "cpu", "fp32").translate(lines[:40], beam_size=1)
    copy = shutil.copytree(model_dir, tmp_path / "model")
    from vaswani.export.ctranslate2 import converted

    converted(copy)
    ct2 = Translator.load(copy, "cpu", engine="ctranslate2").translate(lines[:40], beam_size=1)
    assert sum(a == b for a, b in zip(ours, ct2, strict=True)) >= 38


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: (d / "config.json").unlink(), "config.json"),
        (lambda d: set_config(d, model_type="gpt_neo"), "config.json"),
        (lambda d: (d / "source.spm").unlink(), "source.spm"),
        (lambda d: set_config(d, d_model=64), "shape"),
        (lambda d: set_config(d, normalize_before=True), "normalize_before"),
        (lambda d: (d / "model.safetensors").write_bytes(b"garbage"), "model.safetensors"),
    ],
    ids=["no-config", "unknown-type", "no-source-spm", "shape-mismatch", "pre-norm", "corrupt-weights"],
)
def test_a_wrong_directory_is_one_line_exit_2_and_nothing_written(opus, tmp_path, capsys, edit, named):
    assert_refused(opus[0], tmp_path, capsys, edit, named)


def test_the_imported_model_serves_and_shows_its_attention(opus, lines):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from vaswani.serve.app import Settings, create_app

    _, model_dir, _, _ = opus
    translator = Translator.load(model_dir, "cpu", "fp32")
    expected = translator.translate(lines[:2])
    with TestClient(create_app(translator, model_dir, Settings())) as client:
        reply = client.post("/v1/translate", json={"text": lines[:2], "attention": True, "split_sentences": False})
    assert reply.status_code == 200
    translations = reply.json()["translations"]
    assert [t["text"] for t in translations] == expected
    attention = translations[0]["attention"]
    cross = torch.tensor(attention["cross"])  # (layers, heads, target, source)
    assert attention["source_pieces"][-1] == "</s>" and cross.shape[-1] == len(attention["source_pieces"])
    assert len(attention["source_pieces"]) == len(translator.encode_sources(lines[:1])[0]) + 1  # pieces, EOS
    assert torch.allclose(cross.sum(-1), torch.ones(()), atol=1e-2)
    found = translator.attention(lines[0])
    assert found.text == expected[0] and found.attention is not None
