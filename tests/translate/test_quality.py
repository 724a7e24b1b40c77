"""--min-confidence (the API's "min_confidence"): translations under the threshold marked low_confidence, counted on
stderr with their line numbers; a text's confidence is its least sure sentence's (issue 80, point 8)."""

import json

import pytest

from vaswani.cli import main
from vaswani.translate.quality import flag
from vaswani.translate.translator import Translator

LINES = ["Ein Hund läuft.", "", "Zwei Männer spielen Fußball auf einer Wiese.", "Eine Frau liest."]


def test_records_under_the_threshold_are_marked_and_counted():
    line = {"text": "a", "confidence": 0.4}
    assert flag(line, 0.5) == 1 and line["low_confidence"] is True
    sure = {"text": "b", "confidence": 0.9}
    assert flag(sure, 0.5) == 0 and "low_confidence" not in sure
    assert flag({"text": "", "confidence": None}, 0.5) == 0  # an empty line has no confidence: never marked
    document = {"confidence": 0.3, "sentences": [{"confidence": 0.3}, {"confidence": 0.8}, {"confidence": 0.2}]}
    assert flag(document, 0.5) == 2
    assert [s.get("low_confidence", False) for s in document["sentences"]] == [True, False, True]
    assert document["low_confidence"] is True
    assert flag({"confidence": 0.1}, None) == 0  # no threshold: nothing marked


def test_the_command_line_marks_the_lines_under_the_threshold(model_dir, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["translate", str(model_dir), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--beam", "2", "--scores"]
    confidences = [r.candidates[0].confidence if r.candidates else None for r in
                   Translator.load(model_dir).translate_with_details(LINES, beam_size=2)]  # fmt: skip
    threshold = sorted(c for c in confidences if c is not None)[1]  # the least sure line is under it, no other
    assert main([*args, "--min-confidence", str(threshold)]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    least = confidences.index(min(c for c in confidences if c is not None))
    assert [bool(r and r[0].get("low_confidence")) for r in records] == [i == least for i in range(len(LINES))]
    assert f"low confidence: 1 lines under {threshold} (lines {least + 1}; marked" in capsys.readouterr().err
    assert main([*args, "--min-confidence", "1.5"]) == 2
    assert "--min-confidence 1.5: give a confidence between 0 and 1" in capsys.readouterr().err


def test_the_api_marks_texts_and_sentences(model_dir):
    from fastapi.testclient import TestClient

    from vaswani.serve.app import create_app

    with TestClient(create_app(Translator.load(model_dir), model_dir)) as client:
        body = {"text": [" ".join(LINES)], "beam": 2, "min_confidence": 1.0}
        [text] = client.post("/v1/translate", json=body).json()["translations"]
        assert text["low_confidence"] is True and all(s["low_confidence"] for s in text["sentences"])
        [text] = client.post("/v1/translate", json={**body, "min_confidence": 0.0}).json()["translations"]
        assert "low_confidence" not in text and not any("low_confidence" in s for s in text["sentences"])
        assert client.post("/v1/translate", json={**body, "min_confidence": 2}).status_code == 422


def test_a_threshold_that_is_no_probability_is_refused(model_dir, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("Ein Hund.\n", encoding="utf-8")
    assert main(["translate", str(model_dir), "-i", str(tmp_path / "in.txt"), "--min-confidence", "-0.1"]) == 2
    assert capsys.readouterr().err.strip().endswith("--min-confidence -0.1: give a confidence between 0 and 1")
    with pytest.raises(SystemExit):  # argparse's own one line, exit status 2
        main(["translate", str(model_dir), "--min-confidence", "x"])
