"""translate/formats.py: every format cut into sentences and put back through one interface; with
--source-language auto, each paragraph's language detected once for its sentences."""

from vaswani.translate.document import split
from vaswani.translate.formats import detect_paragraphs, text_format

TEXT = "Ein Hund läuft. Er bellt.\n\nA dog runs. It barks.\n- Eine Liste.\n"


def test_a_document_s_lines_are_its_paragraphs():
    document = split(TEXT, "de")
    assert document.sentences == ("Ein Hund läuft.", "Er bellt.", "A dog runs.", "It barks.", "- Eine Liste.")
    assert document.lines() == [[0, 1], [2, 3], [4]]
    assert split("", "de").lines() == [] and split("Eins.", "de").lines() == [[0]]


def test_each_format_says_which_sentences_make_a_paragraph():
    assert text_format("text", sentences=False).split(["a", "b"], "de").paragraphs == [[0], [1]]
    documents = text_format("text").split([TEXT, "Zwei. Drei."], "de")
    assert documents.paragraphs == [[0, 1], [2, 3], [4], [5, 6]]
    html = text_format("html").split(["<p>Ein Hund. Er bellt.</p><p>Eine Katze.</p>"], "de")
    assert html.sentences == ["Ein Hund.", "Er bellt.", "Eine Katze."] and html.paragraphs == [[0, 1], [2]]


class _Detector:
    """Stands for a Translator: a text's language by its first word, each call recorded."""

    def __init__(self):
        self.asked = []

    def detect_sources(self, texts):
        self.asked.append(list(texts))
        return [("eng_Latn", 0.9) if text.startswith(("A ", "It ")) else ("deu_Latn", 0.8) for text in texts]


def test_auto_detects_once_a_paragraph_and_gives_its_language_to_each_sentence():
    detector = _Detector()
    found = detect_paragraphs(detector, text_format("text").split([TEXT], "de"))
    assert detector.asked == [["Ein Hund läuft. Er bellt.", "A dog runs. It barks.", "- Eine Liste."]]
    assert [code for code, _ in found] == ["deu_Latn", "deu_Latn", "eng_Latn", "eng_Latn", "deu_Latn"]
