"""NLLB-200's legacy source layout (tokenizer_config.json's `legacy_behaviour: true`, as NllbTokenizer wrote
sources until transformers changed it in 2023: `text </s> code`, the code after the end): imported, proven equal to
transformers' tokenizer and `generate` with that layout, and carried through everything a source goes through
(glossaries, alignment and markup, CTranslate2, fine-tuning)."""

import json
import shutil

import pytest
import torch

from tests.helpers.hf_models import multi30k
from tests.helpers.multilingual_models import (
    CODES,
    HELD_APART_GAIN,
    held_apart_pairs,
    pair_recipe,
    save_multilingual,
    terms_as_written,
)
from vaswani.cli import main
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.search import PerSource, search_ids
from vaswani.model_dir import load_model
from vaswani.translate.formats import translate_markup
from vaswani.translate.translator import Translator

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]  # slow: a checkpoint trained by transformers

transformers = pytest.importorskip("transformers")
pytest.importorskip("google.protobuf")

DE, EN, FR = CODES["nllb"]["de"], CODES["nllb"]["en"], CODES["nllb"]["fr"]


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    """(checkpoint directory with legacy_behaviour: true, vaswani model directory, transformers' model, its
    tokenizer: the legacy layout's)."""
    root = tmp_path_factory.mktemp("nllb_legacy")
    src = save_multilingual(root / "hf", "nllb")
    settings = json.loads((src / "tokenizer_config.json").read_text())
    (src / "tokenizer_config.json").write_text(json.dumps({**settings, "legacy_behaviour": True}))
    model_dir = root / "vaswani"
    assert main(["import", str(src), str(model_dir)]) == 0
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(src)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(src))
    tokenizer.src_lang = DE
    assert tokenizer("Ein Hund")["input_ids"][-2:] == [2, tokenizer.convert_tokens_to_ids(DE)]  # the layout's
    return src, model_dir, hf, tokenizer


@pytest.fixture(scope="module")
def lines():
    return multi30k("val", "de", 60)


def test_the_import_records_the_layout_and_the_tokenizer_gives_transformers_ids(legacy, lines, tmp_path):
    src, model_dir, _, tokenizer = legacy
    _, config = load_model(model_dir)
    assert config.model.source_eos is False and config.model.source_end == ()
    assert json.loads((model_dir / "languages.json").read_text())["source"] == "suffix"
    sample = [*lines, "Ein ☃ unbekanntes Zeichen", "Zwei  Leerzeichen"]
    theirs = tokenizer(sample)["input_ids"]
    assert Translator.load(model_dir, "cpu").encode_sources(sample, FR, DE) == theirs  # </s> and code written
    hub = tmp_path / "hub"  # the same checkpoint without tokenizer.json: its SentencePiece model, the codes by id
    shutil.copytree(src, hub)
    added = json.loads((hub / "tokenizer.json").read_text())["added_tokens"]
    (hub / "tokenizer.json").unlink()
    settings = json.loads((hub / "tokenizer_config.json").read_text())
    settings["added_tokens_decoder"] = {str(t["id"]): {"content": t["content"], "special": True} for t in added}
    (hub / "tokenizer_config.json").write_text(json.dumps(settings))
    assert main(["import", str(hub), str(tmp_path / "spm")]) == 0
    assert Translator.load(tmp_path / "spm", "cpu").encode_sources(sample, FR, DE) == theirs


@pytest.mark.parametrize("beams", [1, 4])
def test_greedy_and_beam_give_generate_s_tokens_on_every_line(legacy, lines, beams):
    _, model_dir, hf, tokenizer = legacy
    translator = Translator.load(model_dir, "cpu")
    batch = tokenizer(lines, return_tensors="pt", padding=True)
    outputs = {}
    for target in (EN, FR):
        with torch.no_grad():
            forced = tokenizer.convert_tokens_to_ids(target)
            generated = hf.generate(**batch, num_beams=beams, max_length=64, forced_bos_token_id=forced)
        theirs = [[i for i in row[1:] if i not in (1, 2)] for row in generated.tolist()]
        found = translator.translate_with_details(lines, target_language=target, source_language=DE, beam_size=beams)
        assert [t.candidates[0].tokens for t in found] == theirs
        assert [t.text for t in found] == tokenizer.batch_decode(generated[:, 2:], skip_special_tokens=True)
        outputs[target] = theirs
    assert sum(a != b for a, b in zip(outputs[EN], outputs[FR], strict=True)) > len(lines) // 2
    # the layout matters: the same sources with the code first give other translations
    current = [[ids[-1], *ids[:-2]] for ids in translator.encode_sources(lines, EN, DE)]
    request = translator.request(beam_size=beams)
    codes = [tokenizer.convert_tokens_to_ids(EN)] * len(lines)
    assert current != translator.encode_sources(lines, EN, DE)
    model = translator.model
    prefix_found = search_ids(model, current, request, asked=PerSource(forced=codes))
    assert sum(h[0].tokens != t for h, t in zip(prefix_found, outputs[EN], strict=True)) > 0
    # both languages in one batch
    mixed = [EN if i % 2 else FR for i in range(len(lines))]
    found = translator.translate_with_details(lines, target_language=mixed, source_language=DE, beam_size=beams)
    assert [t.candidates[0].tokens for t in found] == [outputs[code][i] for i, code in enumerate(mixed)]


def test_a_source_cut_at_the_model_s_length_keeps_its_end_and_code(legacy):
    """A source longer than the model's positions is cut as transformers' truncation cuts it: its text, never the
    </s> and code after it; one warning names it."""
    _, model_dir, hf, tokenizer = legacy
    translator = Translator.load(model_dir, "cpu")
    long = " ".join(multi30k("val", "de", 30))
    limit = translator.max_source_tokens
    assert limit == translator.model.config.max_positions  # no EOS appended: the tokenizer wrote it
    batch = tokenizer([long], return_tensors="pt", truncation=True, max_length=limit)
    assert batch["input_ids"].size(1) == limit
    with torch.no_grad():
        forced = tokenizer.convert_tokens_to_ids(EN)
        generated = hf.generate(**batch, num_beams=1, max_length=64, forced_bos_token_id=forced)
    warned = []
    found = translator.translate_with_details(
        [long], warn=lambda i, message: warned.append(message), target_language=EN, source_language=DE, beam_size=1
    )
    assert found[0].truncated and len(warned) == 1
    assert found[0].candidates[0].tokens == [i for i in generated[0, 1:].tolist() if i not in (1, 2)]


@pytest.mark.parametrize("beams", [1, 4])
def test_glossaries_alignment_and_markup_read_the_text_not_the_code(legacy, lines, beams):
    _, model_dir, _, _ = legacy
    translator = Translator.load(model_dir, "cpu")
    codes = dict(target_language=FR, source_language=DE)
    terms_as_written(translator, lines, beams, **codes)
    sample = ["Ein Mann und ein Hund laufen.", "Zwei Frauen sitzen auf einer Bank.", *lines[:6]]
    aligned = translator.translate_with_details(sample, translator.request(beam_size=beams, alignment=True), **codes)
    for translation in aligned:  # every source word's links are target words: the code and </s> are no word
        targets = len(translation.alignment.target)
        assert len(translation.alignment.links) == len(translation.alignment.source)
        assert all(0 <= j < targets for links in translation.alignment.links for j in links)
        assert sum(map(len, translation.alignment.links)) > 0
    [result] = translate_markup(translator, ["<p>Ein <b>Hund</b> läuft.</p>"], "html", beam_size=beams, **codes)
    html = result.text
    assert html.startswith("<p>") and html.endswith("</p>") and html.count("<b>") == 1 and html.count("</b>") == 1
    attention = translator.attention("Ein Hund läuft.", **codes)
    assert attention.src_pieces[-2:] == ["</s>", DE]
    assert len(attention.src_pieces) == attention.attention.cross[0].size(-1)


def test_ctranslate2_reads_the_sources_as_written(legacy, lines, tmp_path):
    """`vaswani export --to ctranslate2` appends no EOS (add_source_eos false): the engine gives our tokens, and
    CTranslate2's own converter, fed transformers' legacy sources, the same."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from vaswani.export.ctranslate2 import converted

    src, model_dir, _, tokenizer = legacy
    assert main(["export", str(model_dir), str(tmp_path / "ours"), "--to", "ctranslate2"]) == 0
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["add_source_eos"] is False
    converted(model_dir)
    ours, engine = Translator.load(model_dir, "cpu"), Translator.load(model_dir, "cpu", engine="ctranslate2")
    for beams in (1, 4):
        codes = dict(target_language=FR, source_language=DE, beam_size=beams)
        expected = [t.candidates[0].tokens for t in ours.translate_with_details(lines, **codes)]
        assert [t.candidates[0].tokens for t in engine.translate_with_details(lines, **codes)] == expected
    theirs = ctranslate2.converters.TransformersConverter(str(src)).convert(str(tmp_path / "theirs"))
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(lines)["input_ids"]]
    vocabulary = Tokenizer.load(model_dir)
    ids = ours.encode_sources(lines, FR, DE)
    prefix = [[FR]] * len(lines)
    got = ctranslate2.Translator(str(tmp_path / "ours")).translate_batch(
        [[vocabulary.src.id_to_piece(i) for i in x] for x in ids], target_prefix=prefix, max_decoding_length=40
    )
    want = ctranslate2.Translator(theirs).translate_batch(sources, target_prefix=prefix, max_decoding_length=40)
    assert [r.hypotheses[0] for r in got] == [r.hypotheses[0] for r in want]


def test_finetune_learns_the_pair_in_the_legacy_layout(legacy, tmp_path, capsys):
    """`vaswani finetune` writes each source as the model reads it (`text </s> code`, no EOS appended by the batches):
    chrF on pairs held apart from those it learnt HELD_APART_GAIN above the imported model's, and the tuned model
    keeps the layout."""
    import sacrebleu

    _, model_dir, _, _ = legacy
    de, fr = held_apart_pairs(tmp_path)
    asked = dict(source_language=DE, target_language=FR, beam_size=1)
    before = sacrebleu.corpus_chrf(Translator.load(model_dir, "cpu").translate(de, **asked), [fr]).score
    out = tmp_path / "out"
    assert main(["finetune", str(model_dir), pair_recipe(tmp_path / "ft.yaml", tmp_path, "nllb"), str(out)]) == 0
    capsys.readouterr()
    tuned = Translator.load(out, "cpu")
    assert tuned.model.config.source_eos is False and tuned.tokenizer.languages.source == "suffix"
    assert sacrebleu.corpus_chrf(tuned.translate(de, **asked), [fr]).score > before + HELD_APART_GAIN
