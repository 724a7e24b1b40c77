"""Language codes as people and models write them: ISO 639 (639-1 where a language has one, else 639-3: what
`vaswani detect` answers) and NLLB-200's (FLORES-200's `deu_Latn`), each language's standard variety.

    iso_to_nllb("de") == "deu_Latn"
"""

from __future__ import annotations

# NLLB-200 / FLORES-200 code -> ISO 639 (one code a language: the standard variety, e.g. arb_Arab for ar)
NLLB_ISO = {
    "afr_Latn": "af", "als_Latn": "sq", "amh_Ethi": "am", "arb_Arab": "ar", "asm_Beng": "as", "ast_Latn": "ast",
    "azj_Latn": "az", "bak_Cyrl": "ba", "bel_Cyrl": "be", "ben_Beng": "bn", "bod_Tibt": "bo", "bos_Latn": "bs",
    "bul_Cyrl": "bg", "cat_Latn": "ca", "ceb_Latn": "ceb", "ces_Latn": "cs", "ckb_Arab": "ckb", "cym_Latn": "cy",
    "dan_Latn": "da", "deu_Latn": "de", "ell_Grek": "el", "eng_Latn": "en", "epo_Latn": "eo", "est_Latn": "et",
    "eus_Latn": "eu", "ewe_Latn": "ee", "fao_Latn": "fo", "fin_Latn": "fi", "fra_Latn": "fr", "fur_Latn": "fur",
    "gaz_Latn": "om", "gla_Latn": "gd", "gle_Latn": "ga", "glg_Latn": "gl", "grn_Latn": "gn", "guj_Gujr": "gu",
    "hat_Latn": "ht", "hau_Latn": "ha", "heb_Hebr": "he", "hin_Deva": "hi", "hrv_Latn": "hr", "hun_Latn": "hu",
    "hye_Armn": "hy", "ibo_Latn": "ig", "ilo_Latn": "ilo", "ind_Latn": "id", "isl_Latn": "is", "ita_Latn": "it",
    "jav_Latn": "jv", "jpn_Jpan": "ja", "kan_Knda": "kn", "kat_Geor": "ka", "kaz_Cyrl": "kk", "khk_Cyrl": "mn",
    "khm_Khmr": "km", "kin_Latn": "rw", "kir_Cyrl": "ky", "kmr_Latn": "ku", "kor_Hang": "ko", "lao_Laoo": "lo",
    "lim_Latn": "li", "lin_Latn": "ln", "lit_Latn": "lt", "lmo_Latn": "lmo", "ltz_Latn": "lb", "lug_Latn": "lg",
    "lvs_Latn": "lv", "mai_Deva": "mai", "mal_Mlym": "ml", "mar_Deva": "mr", "min_Latn": "min", "mkd_Cyrl": "mk",
    "mlt_Latn": "mt", "mri_Latn": "mi", "mya_Mymr": "my", "nld_Latn": "nl", "nno_Latn": "nn", "nob_Latn": "nb",
    "npi_Deva": "ne", "nya_Latn": "ny", "oci_Latn": "oc", "ory_Orya": "or", "pan_Guru": "pa", "pbt_Arab": "ps",
    "pes_Arab": "fa", "plt_Latn": "mg", "pol_Latn": "pl", "por_Latn": "pt", "quy_Latn": "qu", "ron_Latn": "ro",
    "run_Latn": "rn", "rus_Cyrl": "ru", "san_Deva": "sa", "scn_Latn": "scn", "sin_Sinh": "si", "slk_Latn": "sk",
    "slv_Latn": "sl", "smo_Latn": "sm", "sna_Latn": "sn", "snd_Arab": "sd", "som_Latn": "so", "sot_Latn": "st",
    "spa_Latn": "es", "srd_Latn": "sc", "srp_Cyrl": "sr", "ssw_Latn": "ss", "sun_Latn": "su", "swe_Latn": "sv",
    "swh_Latn": "sw", "tam_Taml": "ta", "tat_Cyrl": "tt", "tel_Telu": "te", "tgk_Cyrl": "tg", "tgl_Latn": "tl",
    "tha_Thai": "th", "tir_Ethi": "ti", "tsn_Latn": "tn", "tso_Latn": "ts", "tuk_Latn": "tk", "tur_Latn": "tr",
    "uig_Arab": "ug", "ukr_Cyrl": "uk", "urd_Arab": "ur", "uzn_Latn": "uz", "vec_Latn": "vec", "vie_Latn": "vi",
    "war_Latn": "war", "wol_Latn": "wo", "xho_Latn": "xh", "ydd_Hebr": "yi", "yor_Latn": "yo", "yue_Hant": "yue",
    "zho_Hans": "zh", "zsm_Latn": "ms", "zul_Latn": "zu",
}  # fmt: skip
_NLLB_OF = {iso: code for code, iso in NLLB_ISO.items()}
# older or macrolanguage codes identifiers answer with, and the code they mean here
ALIASES = {"no": "nb", "iw": "he", "in": "id", "ji": "yi", "jw": "jv"}


def iso_to_nllb(iso: str) -> str | None:
    """NLLB-200's code of an ISO 639 language (its standard variety), None where NLLB has none."""
    return _NLLB_OF.get(iso)
