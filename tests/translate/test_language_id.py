"""Language identification (translate/language_id.py): FLORES-200 lines of many scripts, held apart from the ones
the threshold was chosen on (each file's second half), `und` where a line has no letters or too little to tell, the
CLI's one line per input line, and /v1/detect's LibreTranslate shape."""

import gzip
import json

import pytest

from tests.helpers.common import SHARED_DATA
from vaswani.cli import main

pytest.importorskip("py3langid", reason="pip install 'vaswani[detect]' to detect languages")
pytestmark = pytest.mark.shared_data  # reads ../shared/data/flores200

from vaswani.translate.language_id import LanguageIdentifier  # noqa: E402

FLORES = SHARED_DATA / "flores200" / "dev"
# FLORES files of many scripts and families, each with the code the identifier answers
LANGUAGES = {"deu_Latn": "de", "fra_Latn": "fr", "rus_Cyrl": "ru", "arb_Arab": "ar", "hin_Deva": "hi",
             "zho_Hans": "zh", "jpn_Jpan": "ja", "kor_Hang": "ko", "ell_Grek": "el", "heb_Hebr": "he",
             "tha_Thai": "th", "tam_Taml": "ta", "amh_Ethi": "am", "kat_Geor": "ka", "fin_Latn": "fi",
             "tur_Latn": "tr", "vie_Latn": "vi", "swh_Latn": "sw", "pol_Latn": "pl", "ukr_Cyrl": "uk"}  # fmt: skip


def _held_apart(name: str, n: int = 20) -> list[str]:
    with gzip.open(FLORES / f"{name}.txt.gz", "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[len(lines) // 2 :][:n]  # the half no threshold was chosen on


def test_flores_sentences_of_many_scripts_are_named_and_nllb_codes_are_nllb_s():
    identifier = LanguageIdentifier()
    right = total = 0
    for name, iso in LANGUAGES.items():
        found = identifier.detect(_held_apart(name))
        right += sum(d.language == iso for d in found)
        total += len(found)
        assert sum(d.language == iso for d in found) >= 17, (name, [d.language for d in found])
    assert right / total >= 0.97
    nllb = LanguageIdentifier(codes="nllb").detect(_held_apart("deu_Latn", 5) + _held_apart("rus_Cyrl", 5))
    assert [d.language for d in nllb] == ["deu_Latn"] * 5 + ["rus_Cyrl"] * 5


def test_lines_without_letters_or_too_short_to_tell_are_und_not_a_confident_guess():
    identifier = LanguageIdentifier()
    found = identifier.detect(["", "   ", "12:30 - 14:00", "😀🎉", "!!!", "hello handsome"])
    assert [d.language for d in found] == ["und"] * 6, found  # LibreTranslate #902: "hello handsome" as Bengali
    assert found[0].probability == 0.0
    assert identifier.ranked("😀") == []
    ranked = identifier.ranked("Ein Mann fährt mit dem Fahrrad die Straße entlang.", 3)
    assert len(ranked) == 3 and ranked[0].language == "de"
    assert ranked[0].probability >= ranked[1].probability >= ranked[2].probability
    with pytest.raises(ValueError, match=r"--threshold 1\.5"):
        LanguageIdentifier(threshold=1.5)


def test_the_cli_writes_one_answer_per_input_line(tmp_path, capsys):
    source = tmp_path / "in.txt"
    lines = "Ein Hund läuft über die Straße.\n\nUn chien court dans la rue.\n".encode()
    source.write_bytes(lines + b"\xff\xfe\n")  # a line of invalid UTF-8: replaced, named in a warning, und
    out = tmp_path / "out.jsonl"
    assert main(["detect", "-i", str(source), "-o", str(out), "--json"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["language"] for r in rows] == ["de", "und", "fr", "und"]
    assert set(rows[0]) == {"language", "probability"} and 0.9 < rows[0]["probability"] <= 1
    assert main(["detect", "-i", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err


def test_the_server_detects_in_libretranslate_s_shape(model_dir):
    from fastapi.testclient import TestClient

    from vaswani.serve.app import create_app
    from vaswani.translate.translator import Translator

    with TestClient(create_app(Translator.load(model_dir), model_dir)) as client:
        one = client.post("/v1/detect", json={"q": "Ein Hund läuft über die Straße."})
        assert one.status_code == 200
        assert one.json()[0]["language"] == "de" and one.json()[0]["confidence"] > 90
        assert set(one.json()[0]) == {"language", "confidence"} and len(one.json()) == 3
        many = client.post("/v1/detect", json={"q": ["Bonjour tout le monde.", "1234"], "codes": "nllb"})
        assert many.json()[0][0]["language"] == "fra_Latn" and many.json()[1] == []
        assert client.post("/v1/detect", json={"q": "a\u0000b"}).status_code == 422
        assert client.post("/v1/detect", json={"text": "x"}).status_code == 422
