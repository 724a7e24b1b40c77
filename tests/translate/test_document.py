import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from vaswani.data.corpus import read_lines
from vaswani.translate.document import Document, split
from vaswani.translate.formats import translate_documents
from vaswani.translate.sentences import rule_spans, sentence_spans
from vaswani.translate.translator import Translator

pytestmark = pytest.mark.shared_data  # reads ../shared/data (tests/conftest.py skips it where absent)

MULTI30K = Path(__file__).resolve().parents[2] / "../shared/data/multi30k/raw"


# (language, text, its sentences): abbreviations, numbers, quotes, no final punctuation.
CASES = [
    ("de", "Dr. Müller kam am 3. Oktober an. Er war spät.", ["Dr. Müller kam am 3. Oktober an.", "Er war spät."]),
    (
        "de",
        "Das kostet 3.50 Euro, z.B. im Laden. Wir gehen heim.",
        ["Das kostet 3.50 Euro, z.B. im Laden.", "Wir gehen heim."],
    ),
    (
        "de",
        "Der Zug fährt um 14.30 Uhr ab. Bitte sei pünktlich.",
        ["Der Zug fährt um 14.30 Uhr ab.", "Bitte sei pünktlich."],
    ),
    ("de", "Er sagt: „Komm her.“ Dann ging er.", ["Er sagt: „Komm her.“", "Dann ging er."]),
    ("de", "Ein Mann fährt Fahrrad. Zwei Hunde spielen", ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen"]),
    ("de", "Was? Wirklich! Ja...", ["Was?", "Wirklich!", "Ja..."]),
    (
        "en",
        "Mr. Smith went to Washington, D.C. on Jan. 5. He arrived at 3 p.m. yesterday.",
        ["Mr. Smith went to Washington, D.C. on Jan. 5.", "He arrived at 3 p.m. yesterday."],
    ),
    ("en", "The U.S. economy grew 2.5 percent. Prices rose.", ["The U.S. economy grew 2.5 percent.", "Prices rose."]),
    ("en", "It costs $4.50. That is cheap!", ["It costs $4.50.", "That is cheap!"]),
    ("en", 'He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("en", "J. R. R. Tolkien wrote it. It is long.", ["J. R. R. Tolkien wrote it.", "It is long."]),
    ("en", "A man rides a bike", ["A man rides a bike"]),
]


@pytest.mark.parametrize(("language", "text", "sentences"), CASES, ids=[c[1][:24] for c in CASES])
def test_sentences_of_abbreviations_numbers_quotes_and_unfinished_text(language, text, sentences):
    assert list(split(text, language).sentences) == sentences


# The rules (for languages pysbd lacks) on the same cases, less the German ordinal "am 3. Oktober", which needs a
# language's knowledge.
@pytest.mark.parametrize(("language", "text", "sentences"), [c for c in CASES if "3. Oktober" not in c[1]])
def test_the_fallback_rules_split_the_same_cases(language, text, sentences):
    assert [text[a:b] for a, b in rule_spans(text)] == sentences
    assert list(split(text, "xx").sentences) == sentences  # a language pysbd lacks goes to the rules


def test_the_fallback_rules_on_other_scripts():
    assert [s for s in split("你好。今天天气很好！我们走吧", "zh").sentences] == [
        "你好。",
        "今天天气很好！",
        "我们走吧",
    ]
    assert list(split("Привет. Как дела? Хорошо", "uk").sentences) == ["Привет.", "Как дела?", "Хорошо"]
    assert rule_spans("   ") == [] and sentence_spans("", "de") == []


def _multi30k_paragraphs(language: str, size: int = 4) -> list[list[str]]:
    sentences = [s.strip() for s in read_lines(MULTI30K / f"test_2016_flickr.{language}.gz")]
    sentences = [s for s in sentences if s[-1:] in ".!?"]
    return [sentences[i : i + size] for i in range(0, len(sentences) - size + 1, size)]


@pytest.mark.parametrize("language", ["de", "en"])
def test_multi30k_paragraphs_split_back_into_their_sentences(language):
    """benchmarks/sentence_split.py measures nearly all of these paragraphs cut exactly right, in both languages
    (docs/benchmarks.md, "Serving"); the bar leaves a little room below that."""
    paragraphs = _multi30k_paragraphs(language)
    exact = sum(list(split(" ".join(p), language).sentences) == p for p in paragraphs)
    assert exact >= 0.97 * len(paragraphs)


def test_the_text_is_kept_exactly_around_its_sentences():
    rng = random.Random(0)
    sentences = [s for p in _multi30k_paragraphs("de")[:60] for s in p]
    separators = [" ", "  ", "\n", "\n\n", "\r\n", "\n \n\t", "\u2028", " \n"]
    for _ in range(50):
        parts = [rng.choice(["", " ", "\n", "  \n\n"])]
        for sentence in rng.sample(sentences, rng.randint(1, 8)):
            parts += [sentence, rng.choice(separators)]
        text = "".join(parts)
        document = split(text, "de")
        assert document.text == text
        assert all(not gap.strip() for gap in document.gaps)
        assert len(document.gaps) == len(document.sentences) + 1
        assert document.join([s.upper() for s in document.sentences], spaced=False) == text.upper()


def test_join_keeps_paragraphs_and_spaces_sentences_that_met_without_one():
    document = split("  Ein Mann.  Zwei Hunde.\n\nEine Frau.\n", "de")
    assert document.sentences == ("Ein Mann.", "Zwei Hunde.", "Eine Frau.")
    assert document.join(["A man.", "Two dogs.", "A woman."]) == "  A man.  Two dogs.\n\nA woman.\n"
    chinese = split("你好。再见。", "zh")
    assert chinese.join(["Hello.", "Bye."]) == "Hello. Bye."
    assert chinese.join(["你好。", "再见。"], spaced=False) == "你好。再见。"
    assert split("", "de") == Document((), ("",)) and split("\n\n", "de").join([]) == "\n\n"
    with pytest.raises(ValueError, match="2 translations for 3 sentences"):
        document.join(["a", "b"])


TEXTS = [
    "Ein Mann fährt Fahrrad. Zwei Hunde spielen im Schnee.\n\nEine Frau liest ein Buch.  Ein Kind lacht\n",
    "  Dr. Müller kam am 3. Oktober an.\r\nEr sagt: „Komm her.“",
    "",
    "\n\n",
    "Ein kleines Mädchen in einem rosa Kleid klettert auf eine Treppe.",
]


def test_a_document_translates_as_line_mode_translates_its_sentences(model_dir):
    translator = Translator.load(model_dir)
    results = translate_documents(translator, TEXTS, n_best=2, beam_size=2)
    for text, result in zip(TEXTS, results, strict=True):
        document = split(text, "de")
        assert result.document == document
        lines = translator.translate(list(document.sentences), beam_size=2)
        assert result.text == document.join(lines)
        record = result.to_dict()
        assert record["text"] == result.text and [s["source"] for s in record["sentences"]] == list(document.sentences)
        assert [s["text"] for s in record["sentences"]] == lines
        assert record["score"] == pytest.approx(sum(s["score"] for s in record["sentences"]), abs=1e-3)
        assert len(record["n_best"]) == (2 if document.sentences else 0)
        assert not document.sentences or record["n_best"][0]["text"] == result.text
    assert results[2].text == "" and results[3].text == "\n\n" and results[2].to_dict()["score"] == 0.0
    assert "\n\n" in results[0].text and results[0].text.endswith("\n") and results[1].text.startswith("  ")
    assert "\r\n" in results[1].text


def _cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "vaswani.cli", *args], input=stdin, capture_output=True, timeout=120)


@pytest.mark.slow
def test_translate_document_cli_keeps_the_layout_and_equals_line_mode_on_the_sentences(model_dir, tmp_path):
    text = TEXTS[0] + "\n" + TEXTS[1] + "\n"
    source = tmp_path / "doc.de"
    source.write_text(text, encoding="utf-8")
    run = _cli("translate", str(model_dir), "--document", "-i", str(source), "-o", str(tmp_path / "doc.en"))
    assert run.returncode == 0, run.stderr.decode()
    document = split(text, "de")
    lines = _cli("translate", str(model_dir), stdin="\n".join(document.sentences).encode() + b"\n")
    assert lines.returncode == 0
    expected = document.join(lines.stdout.decode().splitlines())
    assert (tmp_path / "doc.en").read_bytes() == expected.encode()
    assert expected.count("\n\n") == text.count("\n\n") and expected.count("\n") == text.count("\n")

    scored = _cli("translate", str(model_dir), "--document", "--scores", stdin=text.encode())
    record = json.loads(scored.stdout)
    assert record["text"] == expected and len(record["sentences"]) == len(document.sentences)

    # Line mode is unchanged: one line out per line in, a paragraph's sentences translated as one line.
    line_mode = _cli("translate", str(model_dir), stdin=text.encode())
    assert len(line_mode.stdout.decode().splitlines()) == len(text.splitlines())


@pytest.mark.slow
def test_translate_document_cli_errors(model_dir, tmp_path):
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"Ein Mann.\n\xff\xfe\n")
    run = _cli("translate", str(model_dir), "--document", "-i", str(bad))
    assert run.returncode == 0 and b"line 2: invalid UTF-8, replaced" in run.stderr  # as line mode does
    assert run.stdout.count(b"\n") == 2
    run = _cli("translate", str(model_dir), "--document", "--source-language", "German", stdin=b"x")
    assert run.returncode == 2 and b"--source-language 'German'" in run.stderr and b"Traceback" not in run.stderr


def test_a_line_pysbd_fails_on_is_split_by_the_rules_found_by_fuzzing():
    from vaswani.translate.document import split

    assert split("\x1f1. Ein Hund.", "de").sentences == ("1.", "Ein Hund.")  # pysbd raised ValueError
