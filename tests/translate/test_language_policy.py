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
