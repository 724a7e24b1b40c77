import pytest

from vaswani.config import Config
from vaswani.data.languages import Languages
from vaswani.translate.language_policy import LanguageCodes, LanguageTokens, OneLanguage


def test_a_model_whose_files_name_no_language_writes_in_none_and_a_named_one_in_its_iso_code():
    config = Config()  # an imported one-pair model: no training files name its languages
    assert config.data.languages() == (None, None)
    assert OneLanguage(config).target_iso(None) is None
    assert LanguageTokens(config, [">>fra<<", ">>deu<<"]).target_iso("fra") == "fr"
    codes = LanguageCodes(config, Languages({"deu_Latn": 5, "jpn_Jpan": 6}))
    assert codes.target_iso("jpn_Jpan") == "ja"
    assert codes.target_iso(None) is None


def test_a_language_a_sentence_codes_each_and_leaves_an_empty_sentence_empty():
    class Pieces:  # the tokenizer's source side: two ids a non-empty text
        def encode_src(self, texts):
            return [[5, 6] if t else [] for t in texts]

    codes = LanguageCodes(Config(), Languages({"deu_Latn": 10, "eng_Latn": 11}))
    coded = codes.encode(Pieces(), ["Ein Hund.", "", "A dog."], "eng_Latn", ["deu_Latn", "", "eng_Latn"])
    assert coded == [[10, 5, 6], [], [11, 5, 6]]
    assert codes.code_for("de") == "deu_Latn" and codes.code_for("xx") is None
    with pytest.raises(ValueError, match="2 source languages for 3 sentences"):
        codes.encode(Pieces(), ["a", "b", "c"], "eng_Latn", ["deu_Latn", "eng_Latn"])
    with pytest.raises(ValueError, match="this model reads one language"):
        OneLanguage(Config()).check(None, "auto")
