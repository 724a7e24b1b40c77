"""A many-to-many model's languages (data/languages.py): where a source's code goes, and a cut that keeps it."""

import json
import re

import pytest

from vaswani.data.corpus import DataError
from vaswani.data.languages import Languages
from vaswani.special import EOS_ID


@pytest.mark.parametrize("source", ["prefix", "suffix"])
def test_a_source_is_coded_and_cut_where_the_model_reads_its_code(source, tmp_path):
    languages = Languages({"deu_Latn": 40, "eng_Latn": 41}, source=source)
    text = [10, 11, 12, 13, 14]
    coded = languages.coded(text, 40)
    assert coded == ([40, *text] if source == "prefix" else [*text, EOS_ID, 40])
    assert languages.coded([], 40) == []  # an empty line is not translated: no code either
    cut = languages.cut(coded, 4)
    assert cut == ([40, 10, 11, 12] if source == "prefix" else [10, 11, EOS_ID, 40])  # the end kept (suffix)
    assert languages.cut(coded, 10) == coded
    path = tmp_path / "languages.json"
    path.write_bytes(languages.encoded())
    assert Languages.load(path) == languages


def test_an_unknown_layout_is_refused_in_one_line(tmp_path):
    path = tmp_path / "languages.json"
    path.write_text(json.dumps({"codes": {"de": 4}, "source": "middle"}))
    with pytest.raises(DataError, match=r"source 'middle' is not a layout \(prefix or suffix\); import again"):
        Languages.load(path)


@pytest.mark.parametrize(
    ("codes", "asked", "meant"),
    [
        (["deu_Latn", "eng_Latn", "zho_Hans", "zho_Hant"], "deu_latn", "did you mean deu_Latn?"),
        (["deu_Latn", "eng_Latn", "zho_Hans", "zho_Hant"], " deu_Latn", "did you mean deu_Latn?"),
        (["deu_Latn", "eng_Latn", "zho_Hans", "zho_Hant"], "de", "did you mean deu_Latn?"),
        (["deu_Latn", "eng_Latn", "zho_Hans", "zho_Hant"], "zh", "did you mean zho_Hans or zho_Hant?"),
        (["de_DE", "en_XX"], "EN_xx", "did you mean en_XX?"),
        (["de_DE", "en_XX"], "de", "did you mean de_DE?"),
        (["de", "en", "fr"], "__en__", "did you mean en?"),
        (["de", "en", "fr"], "DE", "did you mean de?"),
    ],
)
def test_a_mistyped_language_is_refused_naming_the_code_it_may_mean(codes, asked, meant):
    languages = Languages({code: 10 + i for i, code in enumerate(codes)})
    expected = re.escape(f"target language {asked!r} is not one of this model's: {meant} ")
    with pytest.raises(ValueError, match=f"^{expected}") as error:
        languages.code(asked, "target")
    assert len(str(error.value).splitlines()) == 1 and ", ".join(sorted(codes)) in str(error.value)
    with pytest.raises(ValueError, match=r"is not one of this model's: de_DE, en_XX$"):
        Languages({"de_DE": 1, "en_XX": 2}).code("xx_YY", "source")  # nothing near: the codes alone
