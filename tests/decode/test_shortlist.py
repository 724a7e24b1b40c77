import random
from pathlib import Path

import pytest
import torch

from tests.helpers.common import write_tiny_model_directory
from tests.helpers.decode_models import random_model
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import PerSource, search_ids
from vaswani.decode.shortlist import Shortlist, Vocabularies, learn
from vaswani.nn.cpu_linear.int8 import int8_available, quantize_int8
from vaswani.nn.cpu_linear.onednn_fp32 import pack_fp32, packed_available
from vaswani.nn.transformer import NEVER, OutputRows

LAYERS = {
    "plain": lambda m: m,
    "packed": pytest.param(
        lambda m: pack_fp32(m, every_layer=True),
        marks=pytest.mark.skipif(not packed_available(), reason="no oneDNN packing"),
    ),
    "int8": pytest.param(quantize_int8, marks=pytest.mark.skipif(int8_available() is not None, reason="no int8")),
}
SOURCES = [[5, 9, 3, 17], [4], [30, 31, 32, 8, 8, 12, 40], [22, 7]]


def _every_word(vocab: int) -> Shortlist:
    return Shortlist(torch.arange(vocab)[:, None].repeat(1, vocab), torch.arange(vocab), vocab, False)


def _tokens(results):
    return [[h.tokens for h in hyps] for hyps in results]


def test_model_1_finds_each_source_pieces_translation_among_reordered_noisy_lines():
    rng = random.Random(0)
    sources, targets = [], []
    for _ in range(3000):  # target piece = source piece + 40, reversed, with a function word (99) half the time
        s = [rng.randrange(3, 40) for _ in range(rng.randint(1, 8))]
        t = [x + 40 for x in reversed(s)] + ([99] if rng.random() < 0.5 else [])
        sources.append(s)
        targets.append(t)
    shortlist = learn(sources, targets, Vocabularies(50, 100, 2), top=3, frequent=4)
    assert shortlist.translations[3:40, 0].tolist() == list(range(43, 80))  # each piece's best is its translation
    assert not set(shortlist.translations[3:40, 1:].flatten().tolist()) & set(range(43, 80))  # no others: noise < 1e-3
    assert (shortlist.translations[40:] == -1).all()  # never seen: no candidates
    assert {2, 99} <= set(shortlist.frequent.tolist())  # EOS, and the function word (NULL's and the most frequent)
    assert len(shortlist.frequent) <= 4 + 3 + 1


def test_a_batch_gets_its_pieces_translations_the_frequent_ones_its_copies_and_the_extra_words():
    translations = torch.full((10, 2), -1)
    translations[4] = torch.tensor([11, 12])
    translations[5, 0] = 13
    shortlist = Shortlist(translations, torch.tensor([2, 7]), 20, copy=False)
    src = torch.tensor([[4, 5, 2], [4, 0, 0]])
    assert shortlist.words(src)[0].tolist() == shortlist.words(src, pad_id=0)[0].tolist()  # PAD has no candidates
    translations[0] = torch.tensor([15, 16])  # (as if it had)
    assert 15 not in shortlist.words(src, pad_id=0)[0].tolist()
    translations[0] = -1
    ids, allowed = shortlist.words(src)
    assert ids.tolist() == [2, 7, 11, 12, 13]
    assert allowed.tolist() == [[True] * 5, [True, True, True, True, False]]  # the second has no 5: no 13
    ids, allowed = shortlist.words(src, extra=[[], [19, 7]])
    assert ids.tolist() == [2, 7, 11, 12, 13, 19] and allowed[:, -1].tolist() == [False, True]
    copying = Shortlist(translations, torch.tensor([2, 7]), 20, copy=True)
    ids, allowed = copying.words(src)
    assert ids.tolist() == [0, 2, 4, 5, 7, 11, 12, 13]
    assert ids[allowed[1]].tolist() == [0, 2, 4, 7, 11, 12]


@pytest.mark.parametrize("beam", [1, 3])
def test_with_a_shortlist_a_sentences_output_does_not_depend_on_its_batch(beam):
    model = pack_fp32(random_model(50, seed=4), every_layer=True)
    shortlist = Shortlist(torch.randint(3, 50, (50, 3)), torch.tensor([2]), 50, copy=False)
    request = DecodeRequest.of(beam_size=beam, n_best=beam, max_len_a=1.0, max_len_b=5, batch_size=4)
    batched = search_ids(model, SOURCES, request, shortlist=shortlist)
    alone = [search_ids(model, [source], request, shortlist=shortlist)[0] for source in SOURCES]
    assert _tokens(batched) == _tokens(alone)
    scores = [h.score for hyps in alone for h in hyps]
    assert [h.score for hyps in batched for h in hyps] == pytest.approx(scores, rel=1e-5)
    assert len({t for hyps in batched for h in hyps for t in h.tokens}) > 2  # not all the same word


@pytest.mark.parametrize("layer", LAYERS.values(), ids=LAYERS.keys())
def test_output_rows_give_the_whole_layers_logits_on_their_words_and_never_elsewhere(layer):
    model = layer(random_model(50, seed=1))
    ids = torch.tensor([2, 5, 6, 20, 49])
    hidden = torch.randn(7, model.config.d_model)
    with torch.no_grad():
        whole, some = model.logits(hidden), OutputRows(model, ids)(hidden)
    torch.testing.assert_close(some[:, ids], whole[:, ids], rtol=1e-5, atol=1e-5)
    others = torch.ones(50, dtype=torch.bool)
    others[ids] = False
    assert (some[:, others] == NEVER).all()


@pytest.mark.parametrize("layer", LAYERS.values(), ids=LAYERS.keys())
@pytest.mark.parametrize("beam", [1, 4])
def test_a_shortlist_of_every_word_gives_the_searchs_own_output(layer, beam):
    model = layer(random_model(50, seed=4))
    request = DecodeRequest.of(beam_size=beam, n_best=min(beam, 2), max_len_a=1.0, max_len_b=5, batch_size=3)
    plain = search_ids(model, SOURCES, request)
    listed = search_ids(model, SOURCES, request, shortlist=_every_word(50))
    assert _tokens(listed) == _tokens(plain)
    assert [h.score for hyps in listed for h in hyps] == pytest.approx([h.score for hyps in plain for h in hyps])


@pytest.mark.parametrize("precision", ["fp32", pytest.param("int8", marks=LAYERS["int8"].marks)])
def test_with_a_shortlist_the_engine_makes_no_whole_output_layer_and_decodes_as_with_one(precision):
    from vaswani.decode.engine import TorchEngine

    shortlist = Shortlist(torch.randint(3, 50, (50, 6)), torch.tensor([2, 3, 4]), 50, copy=True)
    request = DecodeRequest.of(beam_size=3, n_best=2, max_len_a=1.0, max_len_b=5, batch_size=3)
    whole = TorchEngine(random_model(50, seed=4), precision, owned=True)
    lean = TorchEngine(random_model(50, seed=4), precision, owned=True, shortlist=shortlist)
    from vaswani.nn.cpu_linear.onednn_fp32 import output_packed

    made = precision == "int8" or output_packed(whole.model.output_weight)  # float32 with AVX2 alone: where faster
    assert (whole.model.output_projection is not None) == made and lean.model.output_projection is None
    assert lean.model.output_kind is whole.model.output_kind
    expected = search_ids(whole.model, SOURCES, request, precision, shortlist=shortlist)
    found = lean(SOURCES, request)
    assert _tokens(found) == _tokens(expected)
    assert [h.score for hyps in found for h in hyps] == [h.score for hyps in expected for h in hyps]


def test_greedy_with_the_words_it_chose_anyway_chooses_them_again():
    model = random_model(50, seed=4)
    request = DecodeRequest.of(beam_size=1, max_len_a=1.0, max_len_b=5)
    plain = _tokens(search_ids(model, SOURCES, request))
    chosen = sorted({t for hyps in plain for tokens in hyps for t in tokens} | {model.config.eos_id})
    shortlist = Shortlist(torch.full((50, 1), -1), torch.tensor(chosen), 50, copy=False)
    assert len(chosen) < 40  # a real restriction
    assert _tokens(search_ids(model, SOURCES, request, shortlist=shortlist)) == plain
    narrow = Shortlist(torch.full((50, 1), -1), torch.tensor([2, 33, 34]), 50, copy=False)
    outputs = {t for hyps in search_ids(model, SOURCES, request, shortlist=narrow) for h in hyps for t in h.tokens}
    assert outputs <= {33, 34}


def test_a_glossarys_terms_are_produced_whatever_the_shortlist():
    model = random_model(50, seed=4)
    request = DecodeRequest.of(beam_size=3, max_len_a=1.0, max_len_b=6)
    narrow = Shortlist(torch.full((50, 1), -1), torch.tensor([2, 33]), 50, copy=False)
    constraints = [[[11, 12]], [], [[40]], []]
    found = search_ids(model, SOURCES, request, shortlist=narrow, asked=PerSource(constraints))
    tokens = found[0][0].tokens
    assert any(tokens[i : i + 2] == [11, 12] for i in range(len(tokens)))
    assert 40 in found[2][0].tokens
    assert set(found[1][0].tokens) <= {33}


def test_a_shortlist_is_saved_and_read_back_and_a_wrong_file_is_named(tmp_path):
    shortlist = Shortlist(torch.tensor([[3, -1], [4, 5]]), torch.tensor([2]), 9, copy=True, lines=7, origin="model")
    shortlist.save(tmp_path / "s.safetensors")
    back = Shortlist.load(tmp_path / "s.safetensors")
    assert back.translations.tolist() == [[3, -1], [4, 5]] and back.frequent.tolist() == [2]
    assert (back.tgt_vocab_size, back.copy, back.lines, back.origin) == (9, True, 7, "model")
    with pytest.raises(ValueError, match="learned for vocabularies of 2 source and 9 target pieces"):
        back.check(50, 50, "s.safetensors")
    (tmp_path / "bad").write_bytes(b"not a shortlist")
    with pytest.raises(ValueError, match="not a readable shortlist"):
        Shortlist.load(tmp_path / "bad")
    with pytest.raises(FileNotFoundError):
        Shortlist.load(tmp_path / "absent")


@pytest.mark.shared_data
def test_shortlist_command_then_translate_with_it(tmp_path, capsys):
    from vaswani import cli

    (tmp_path / "model").mkdir()
    model_dir = write_tiny_model_directory(tmp_path / "model")
    raw = Path(__file__).resolve().parents[2] / "../shared/data/multi30k/raw"
    learn_args = ["shortlist", str(model_dir), "--src", str(raw / "val.de.gz"), "--tgt", str(raw / "val.en.gz")]
    assert cli.main([*learn_args, "--max-lines", "300"]) == 0
    assert "learned from 300 parallel lines" in capsys.readouterr().err
    source = tmp_path / "in.de"
    source.write_text("Ein Mann fährt Fahrrad.\n\nZwei Hunde spielen im Schnee.\n", encoding="utf-8")
    out = tmp_path / "out.en"
    assert cli.main(["translate", str(model_dir), "-i", str(source), "-o", str(out), "--shortlist"]) == 0
    assert "vaswani: shortlist: each batch's output layer covers" in capsys.readouterr().err
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and lines[1] == ""
    # from the model's own translations, to a file of one's choosing
    own = tmp_path / "own.safetensors"
    assert cli.main(["shortlist", str(model_dir), "--src", str(source), "-o", str(own)]) == 0
    assert Shortlist.load(own).origin == "model"
    assert cli.main(["translate", str(model_dir), "-i", str(source), "-o", str(out), "--shortlist", str(own)]) == 0
    # one-line errors
    short = tmp_path / "short.en"
    short.write_text("one line\n", encoding="utf-8")
    assert cli.main(["shortlist", str(model_dir), "--src", str(source), "--tgt", str(short)]) == 2
    assert "has 3 lines but" in capsys.readouterr().err
    assert cli.main(["translate", str(model_dir), "--shortlist", str(tmp_path / "absent")]) == 2
    assert "no shortlist here" in capsys.readouterr().err
    assert cli.main(["translate", str(model_dir), "--shortlist", "--engine", "ctranslate2"]) == 2
    assert "--shortlist applies to --engine torch" in capsys.readouterr().err
    assert not (model_dir / "ctranslate2").exists()  # refused before converting anything


def test_every_output_keeps_to_its_own_sources_words_when_searched_alone():
    model = random_model(50, seed=4)
    shortlist = Shortlist(torch.randint(3, 50, (50, 4)), torch.tensor([2, 3, 4]), 50, copy=True)
    request = DecodeRequest.of(beam_size=2, max_len_a=1.0, max_len_b=5, batch_size=1)
    for source, hyps in zip(SOURCES, search_ids(model, SOURCES, request, shortlist=shortlist), strict=True):
        ids, _ = shortlist.words(torch.tensor([source]))
        assert hyps[0].tokens and set(hyps[0].tokens) <= set(ids.tolist())


@pytest.mark.shared_data
def test_a_server_with_a_shortlist_answers_as_the_library_does(tmp_path):
    from fastapi.testclient import TestClient

    from vaswani.data.corpus import read_lines
    from vaswani.decode.shortlist import FILE
    from vaswani.serve.app import create_app
    from vaswani.translate.translator import Translator

    (tmp_path / "model").mkdir()
    model_dir = write_tiny_model_directory(tmp_path / "model")
    raw = Path(__file__).resolve().parents[2] / "../shared/data/multi30k/raw"
    sources, targets = read_lines(raw / "val.de.gz")[:200], read_lines(raw / "val.en.gz")[:200]
    shortlist = Translator.load(model_dir, "cpu").learn_shortlist(sources, targets, top=5, frequent=10)
    shortlist.save(model_dir / FILE)
    translator = Translator.load(model_dir, "cpu", "fp32", shortlist=True)
    texts = ["Ein Mann fährt Fahrrad.", "", "Zwei Hunde spielen im Schnee."]
    with TestClient(create_app(translator, model_dir)) as client:
        response = client.post("/v1/translate", json={"text": texts, "beam": 2})
    assert response.status_code == 200, response.text
    expected = translator.translate_with_details(texts, beam_size=2)
    assert [t["text"] for t in response.json()["translations"]] == [t.text for t in expected]
    for text, translation in zip(texts, expected, strict=True):  # each keeps to its own sentence's words
        words, _ = shortlist.words(torch.tensor([translator.encode_sources([text])[0] or [0]]))
        assert len(words) < translator.model.config.tgt_vocab_size / 2
        assert {i for c in translation.candidates for i in c.tokens} <= set(words.tolist())


def test_learning_refuses_no_lines_and_ids_outside_the_vocabularies_in_one_line():
    with pytest.raises(ValueError, match="no line with a translation"):
        learn([[4, 5], [6]], [[], []], Vocabularies(50, 50, 2))
    with pytest.raises(ValueError, match="source token id 50 is outside the model's 50-piece source vocabulary"):
        learn([[4, 50]], [[7]], Vocabularies(50, 60, 2))
    with pytest.raises(ValueError, match="target token id 60 is outside"):
        learn([[4]], [[7, 60]], Vocabularies(50, 60, 2))
    with pytest.raises(ValueError, match="--top must be >= 1"):
        learn([[4]], [[7]], Vocabularies(50, 60, 2), top=0)
    outside = Shortlist(torch.tensor([[3, 70]]), torch.tensor([2]), 60, copy=False)
    with pytest.raises(ValueError, match="holds target ids outside the model's 60 pieces"):
        outside.check(1, 60, "s.safetensors")
