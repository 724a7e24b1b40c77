"""A model of one source language told lines in another (issue 80): each such line is marked with the language it was
detected as, counted on stderr, flagged in the API, and with `--other-languages copy` copied through unchanged; the
lines in the model's own language are translated exactly as without the check."""

import json

import pytest

from tests.helpers.hf_models import multi30k
from vaswani.cli import main
from vaswani.translate.translator import Translator

pytest.importorskip("py3langid", reason="pip install 'vaswani[detect]' to detect languages")
pytestmark = pytest.mark.shared_data

FRENCH = "Deux enfants jouent au ballon dans un grand parc ensoleillé."


@pytest.fixture(scope="module")
def lines():
    """German lines (the tiny model's source, Multi30k de) with an English and a French one among them, and an empty
    line and a number, which no language is read in."""
    german, english = multi30k("test_2016_flickr", "de", 3), multi30k("test_2016_flickr", "en", 1)
    return [german[0], english[0], german[1], "", "12:30", FRENCH, german[2]]


def test_lines_in_another_language_are_marked_and_copied_on_request(model_dir, lines):
    translator = Translator.load(model_dir)
    plain = translator.translate_with_details(lines, beam_size=2)
    marked = translator.translate_with_details(lines, beam_size=2, other_languages="translate")
    copied = translator.translate_with_details(lines, beam_size=2, other_languages="copy")
    assert [t.other_language[0] if t.other_language else None for t in marked] == [
        None, "en", None, None, None, "fr", None,
    ]  # fmt: skip
    assert all(t.other_language[1] > 0.58 for t in marked if t.other_language)
    assert [t.text for t in marked] == [t.text for t in plain]  # marked, translated as without the check
    assert all(t.other_language is None for t in plain)  # not looked at unless asked
    for i, (line, a, b) in enumerate(zip(lines, plain, copied, strict=True)):
        assert b.text == (line if i in (1, 5) else a.text)  # copied unchanged, the others as translated
    assert copied[1].candidates[0].confidence is None and copied[1].to_dict()["other_language"]["language"] == "en"


def test_the_command_line_counts_them_and_copies_on_request(model_dir, lines, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    args = ["translate", str(model_dir), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--beam", "2"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "2 lines read as another language than this model's (de): en 1, fr 1; translated anyway" in err
    translated = out.read_text(encoding="utf-8").splitlines()
    assert main([*args, "--other-languages", "copy"]) == 0
    assert "copied unchanged" in capsys.readouterr().err
    written = out.read_text(encoding="utf-8").splitlines()
    assert len(written) == len(lines) and written[1] == lines[1] and written[5] == FRENCH
    assert [w for i, w in enumerate(written) if i not in (1, 5)] == [
        t for i, t in enumerate(translated) if i not in (1, 5)
    ]


def test_the_api_flags_them_and_copies_on_request(model_dir, lines):
    from fastapi.testclient import TestClient

    from vaswani.serve.app import create_app

    translator = Translator.load(model_dir)
    with TestClient(create_app(translator, model_dir)) as client:
        body = {"text": lines, "beam": 2, "split_sentences": False}
        flagged = client.post("/v1/translate", json=body).json()["translations"]
        copied = client.post("/v1/translate", json={**body, "other_languages": "copy"}).json()["translations"]
        refused = client.post("/v1/translate", json={**body, "other_languages": "drop"})
    assert [t.get("other_language", {}).get("language") for t in flagged] == [
        None, "en", None, None, None, "fr", None,
    ]  # fmt: skip
    assert [t["text"] for t in copied] == [
        line if i in (1, 5) else t["text"] for i, (line, t) in enumerate(zip(lines, flagged, strict=True))
    ]
    assert refused.status_code == 422 and json.dumps(refused.json())
