"""`--source-language auto` ("source_language": "auto" in the API): a many-to-many model reads each line of a mixed
input in the language it was detected as (the same translation as naming that language), reports what it detected,
and a model of one language refuses auto in one line."""

import json

import pytest

from tests.helpers.hf_models import multi30k
from vaswani.cli import main
from vaswani.translate.translator import Translator

pytest.importorskip("py3langid", reason="pip install 'vaswani[detect]' to detect languages")
pytestmark = pytest.mark.shared_data


def test_a_model_of_one_language_refuses_auto_in_one_line(model_dir, tmp_path, capsys):
    translator = Translator.load(model_dir)
    with pytest.raises(ValueError, match="this model reads one language"):
        translator.translate(["Ein Hund."], source_language="auto")
    (tmp_path / "in.txt").write_text("Ein Hund.\n")
    assert main(["translate", str(model_dir), "-i", str(tmp_path / "in.txt"), "--source-language", "auto"]) == 2
    assert "this model reads one language" in capsys.readouterr().err.splitlines()[-1]


@pytest.fixture(scope="module")
def nllb(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("google.protobuf")
    from tests.helpers.multilingual_models import save_multilingual

    root = tmp_path_factory.mktemp("nllb")
    src = save_multilingual(root / "hf", "nllb")
    assert main(["import", str(src), str(root / "vaswani")]) == 0
    return root / "vaswani"


@pytest.mark.slow  # a multilingual fixture model trained for the test
def test_a_mixed_input_is_read_line_by_line_in_the_language_each_is_in(nllb, tmp_path, capsys):
    german, english = multi30k("test_2016_flickr", "de", 4), multi30k("test_2016_flickr", "en", 4)
    mixed = [german[0], english[0], german[1], "", english[1], german[2], english[2]]
    translator = Translator.load(nllb)
    found = translator.translate_with_details(mixed, source_language="auto", target_language="fra_Latn")
    codes = {"de": "deu_Latn", "en": "eng_Latn"}
    truth = [codes["de"], codes["en"], codes["de"], None, codes["en"], codes["de"], codes["en"]]
    assert [t.detected[0] if t.detected else None for t in found] == truth
    for line, code, result in zip(mixed, truth, found, strict=True):  # as if the language had been named
        if code:
            named = translator.translate([line], source_language=code, target_language="fra_Latn")
            assert result.text == named[0], line
    assert found[3].text == "" and found[3].detected is None
    # the command line: one line out per line in, the languages counted on stderr
    (tmp_path / "in.txt").write_text("\n".join(mixed) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    args = ["translate", str(nllb), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--source-language", "auto"]
    assert main([*args, "--target-language", "fra_Latn"]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == [t.text for t in found]
    assert "source languages detected: deu_Latn 3, eng_Latn 3" in capsys.readouterr().err
    # the API: each text's detected language
    from fastapi.testclient import TestClient

    from vaswani.serve.app import create_app

    with TestClient(create_app(translator, nllb)) as client:
        body = {"text": [german[3], english[3]], "source_language": "auto", "target_language": "fra_Latn"}
        answer = client.post("/v1/translate", json=body)
        assert answer.status_code == 200, answer.text
        detected = [t["detected_language"]["language"] for t in answer.json()["translations"]]
        assert detected == ["deu_Latn", "eng_Latn"]
        named = translator.translate([german[3]], source_language="deu_Latn", target_language="fra_Latn")
        assert answer.json()["translations"][0]["text"] == named[0]
        assert json.dumps(answer.json())  # plain JSON


@pytest.mark.slow  # the multilingual fixture model
def test_a_mixed_document_is_read_paragraph_by_paragraph(nllb):
    from vaswani.translate.formats import translate_documents

    german, english = multi30k("test_2016_flickr", "de", 6), multi30k("test_2016_flickr", "en", 6)
    paragraphs = [f"{german[4]} {german[5]}", f"{english[4]} {english[5]}"]
    translator = Translator.load(nllb)
    [result] = translate_documents(translator, ["\n\n".join(paragraphs)], source_language="auto",
                                   target_language="fra_Latn")  # fmt: skip
    codes = [s.detected[0] for s in result.sentences]
    assert codes == ["deu_Latn", "deu_Latn", "eng_Latn", "eng_Latn"]  # one language a paragraph, for its sentences
    named = [
        translate_documents(translator, [text], source_language=code, target_language="fra_Latn")[0].text
        for text, code in zip(paragraphs, ("deu_Latn", "eng_Latn"), strict=True)
    ]
    assert result.text == "\n\n".join(named)  # as if each paragraph's language had been named
