"""Meta's many-to-many translators in: NLLB-200 and M2M-100 (M2M100ForConditionalGeneration, model_type m2m_100)
and mBART-50 (MBartForConditionalGeneration, mbart). What they do differently from the paper is made options:

- Pre-norm layers with a final LayerNorm on each stack (model.norm_first); LayerNorm epsilon 1e-5.
- Positions counted from 2 (fairseq's padding index + 1). M2M-100's are fairseq's sinusoids (sines of every
  frequency, then cosines, the frequencies spaced by log(10000) / (D/2 - 1)), mBART's learned: either becomes a
  table of positions (model.positions learned), the rows transformers reads for positions 0, 1, ..., exactly.
- mBART: a LayerNorm on the embeddings (model.embedding_norm) and a bias on the logits (model.output_bias).
- The decoder starts from EOS (decoder_start_token_id) and its first output is forced to the target language's
  code (generate's forced_bos_token_id): `languages.json` (data/languages.py) names every code and how a source
  carries its own (NLLB and mBART-50: `[code] text </s>`; NLLB's legacy layout, tokenizer_config.json's
  `legacy_behaviour: true`: `text </s> [code]`, with model.source_eos false: the tokenizer writes the </s>).
- The tokenizer is the checkpoint's tokenizer.json, read by `tokenizers` (data/hf_tokenizer.py): the pieces
  transformers gives, token for token, without transformers. Without one (the hub's mBART-50, M2M-100): its
  SentencePiece model numbered as fairseq's dictionary (vocab.json, as Marian's: data/tokenizer.py VocabPieces).

Refused, in one line: unequal encoder/decoder widths or heads, an activation we do not have, a checkpoint without a
tokenizer, the generation settings our search does not follow (pretrained/__init__.py, GENERATION_UNSUPPORTED).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch

from vaswani.config import Config
from vaswani.data.languages import LANGUAGES_FILE, Languages
from vaswani.pretrained import (
    Checkpoint,
    PretrainedError,
    WeightMap,
    base_config,
    generation_settings,
    read_json,
    read_weights,
    same_tensor,
)
from vaswani.pretrained.bart_layers import layout_of, map_stacks
from vaswani.pretrained.marian import decode_section, stacks
from vaswani.special import EOS_ID

EPS = 1e-5  # nn.LayerNorm's default, fixed in modeling_m2m_100.py and modeling_mbart.py
OFFSET = 2  # positions start at padding_idx + 1 (fairseq's make_positions; mBART's learned table's offset)
# a language code as each family writes it: NLLB's deu_Latn, mBART-50's de_DE, M2M-100's __de__
CODE = {"m2m_100": re.compile(r"[a-z]{3}_[A-Z][a-z]{3}|__[a-z]{2,3}__"), "mbart": re.compile(r"[a-z]{2}_[A-Z]{2}")}
# M2M-100's languages in fairseq's order, their tokens numbered after vocab.json's pieces (M2M100Tokenizer's
# language_codes: m2m100, or wmt21 for the WMT21 models); a checkpoint that lists its own is read instead
M2M_LANGUAGES = {
    "m2m100": "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi "
    "hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa pl "
    "ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu",
    "wmt21": "en ha is ja cs ru zh de",
}
# NLLB-200's and mBART-50's codes in fairseq's order, by tokenizer_class, for a checkpoint without tokenizer.json that
# lists none (NllbTokenizer's and MBart50Tokenizer's FAIRSEQ_LANGUAGE_CODES): numbered after SentencePiece's pieces
FAIRSEQ_CODES = {
    "NllbTokenizer": (
        "ace_Arab ace_Latn acm_Arab acq_Arab aeb_Arab afr_Latn ajp_Arab aka_Latn amh_Ethi apc_Arab arb_Arab "
        "ars_Arab ary_Arab arz_Arab asm_Beng ast_Latn awa_Deva ayr_Latn azb_Arab azj_Latn bak_Cyrl bam_Latn "
        "ban_Latn bel_Cyrl bem_Latn ben_Beng bho_Deva bjn_Arab bjn_Latn bod_Tibt bos_Latn bug_Latn bul_Cyrl "
        "cat_Latn ceb_Latn ces_Latn cjk_Latn ckb_Arab crh_Latn cym_Latn dan_Latn deu_Latn dik_Latn dyu_Latn "
        "dzo_Tibt ell_Grek eng_Latn epo_Latn est_Latn eus_Latn ewe_Latn fao_Latn pes_Arab fij_Latn fin_Latn "
        "fon_Latn fra_Latn fur_Latn fuv_Latn gla_Latn gle_Latn glg_Latn grn_Latn guj_Gujr hat_Latn hau_Latn "
        "heb_Hebr hin_Deva hne_Deva hrv_Latn hun_Latn hye_Armn ibo_Latn ilo_Latn ind_Latn isl_Latn ita_Latn "
        "jav_Latn jpn_Jpan kab_Latn kac_Latn kam_Latn kan_Knda kas_Arab kas_Deva kat_Geor knc_Arab knc_Latn "
        "kaz_Cyrl kbp_Latn kea_Latn khm_Khmr kik_Latn kin_Latn kir_Cyrl kmb_Latn kon_Latn kor_Hang kmr_Latn "
        "lao_Laoo lvs_Latn lij_Latn lim_Latn lin_Latn lit_Latn lmo_Latn ltg_Latn ltz_Latn lua_Latn lug_Latn "
        "luo_Latn lus_Latn mag_Deva mai_Deva mal_Mlym mar_Deva min_Latn mkd_Cyrl plt_Latn mlt_Latn mni_Beng "
        "khk_Cyrl mos_Latn mri_Latn zsm_Latn mya_Mymr nld_Latn nno_Latn nob_Latn npi_Deva nso_Latn nus_Latn "
        "nya_Latn oci_Latn gaz_Latn ory_Orya pag_Latn pan_Guru pap_Latn pol_Latn por_Latn prs_Arab pbt_Arab "
        "quy_Latn ron_Latn run_Latn rus_Cyrl sag_Latn san_Deva sat_Beng scn_Latn shn_Mymr sin_Sinh slk_Latn "
        "slv_Latn smo_Latn sna_Latn snd_Arab som_Latn sot_Latn spa_Latn als_Latn srd_Latn srp_Cyrl ssw_Latn "
        "sun_Latn swe_Latn swh_Latn szl_Latn tam_Taml tat_Cyrl tel_Telu tgk_Cyrl tgl_Latn tha_Thai tir_Ethi "
        "taq_Latn taq_Tfng tpi_Latn tsn_Latn tso_Latn tuk_Latn tum_Latn tur_Latn twi_Latn tzm_Tfng uig_Arab "
        "ukr_Cyrl umb_Latn urd_Arab uzn_Latn vec_Latn vie_Latn war_Latn wol_Latn xho_Latn ydd_Hebr yor_Latn "
        "yue_Hant zho_Hans zho_Hant zul_Latn"
    ),
    "MBart50Tokenizer": (
        "ar_AR cs_CZ de_DE en_XX es_XX et_EE fi_FI fr_XX gu_IN hi_IN it_IT ja_XX kk_KZ ko_KR lt_LT lv_LV "
        "my_MM ne_NP nl_XX ro_RO ru_RU si_LK tr_TR vi_VN zh_CN af_ZA az_AZ bn_IN fa_IR he_IL hr_HR id_ID "
        "ka_GE km_KH mk_MK ml_IN mn_MN mr_IN pl_PL ps_AF pt_XX sv_SE sw_KE ta_IN te_IN th_TH tl_XX uk_UA "
        "ur_PK xh_ZA gl_ES sl_SI"
    ),
}
SPM = "sentencepiece.bpe.model"
FAIRSEQ_SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}  # fairseq's dictionary starts with these


def fairseq_positions(n: int, d_model: int, padding_idx: int) -> torch.Tensor:
    """M2M-100's sinusoid table (M2M100SinusoidalPositionalEmbedding.get_embedding), computed as it computes it,
    in float32. Shape: (n, D)"""
    half = d_model // 2
    step = math.log(10000) / (half - 1)
    frequency = torch.exp(torch.arange(half, dtype=torch.int64).float() * -step)
    angles = torch.arange(n, dtype=torch.int64).float().unsqueeze(1) * frequency.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).view(n, -1)
    if d_model % 2:
        table = torch.cat([table, torch.zeros(n, 1)], dim=1)
    table[padding_idx] = 0
    return table


def model_section(hf: dict, kind: str, path: Path) -> dict:
    """ModelConfig fields from config.json; a one-line refusal for what has no equivalent."""
    try:
        eos = hf.get("eos_token_id", 2)
        return {
            "type": "encoder_decoder",
            "src_vocab_size": hf["vocab_size"],
            "tgt_vocab_size": hf["vocab_size"],
            **stacks(hf, "relu", path),
            "norm_first": True,
            "positions": "learned",
            "max_positions": hf["max_position_embeddings"],
            "share_embeddings": True,
            "tie_output": bool(hf.get("tie_word_embeddings", True)),
            "scale_embeddings": bool(hf.get("scale_embedding", layout_of(kind).scale_embeddings)),
            "output_bias": layout_of(kind).output_bias,
            "embedding_norm": layout_of(kind).embedding_norm,
            "layer_norm_eps": EPS,
            "pad_id": hf.get("pad_token_id", 1),
            "bos_id": hf.get("decoder_start_token_id") if hf.get("decoder_start_token_id") is not None else eos,
            "eos_id": eos,
        }
    except KeyError as missing:
        raise PretrainedError(f"{path} has no {missing.args[0]}; is it this model's config.json?") from None


def source_layout(src: Path) -> str:
    """Where a source's code goes (Languages.source): NllbTokenizer's `legacy_behaviour: true` puts it after the
    text and </s> (suffix), else before the text (prefix)."""
    return "suffix" if read_json(src / "tokenizer_config.json", {}).get("legacy_behaviour") is True else "prefix"


def languages_of(src: Path, kind: str, vocab_size: int) -> Languages:
    """The language codes the tokenizer holds (tokenizer.json's added tokens that look like one), by id, and how a
    source carries its language (tokenizer_config.json)."""
    path = src / "tokenizer.json"
    added = read_json(path).get("added_tokens", [])
    codes = {
        t["content"].strip("_"): t["id"] for t in added if CODE[kind].fullmatch(t["content"]) and t["id"] < vocab_size
    }
    if not codes:
        raise PretrainedError(f"{path} holds no language codes; is it this model's tokenizer?")
    # tokenizer_config.json's src_lang is whatever the tokenizer was last set to, not the model's: no default source
    return Languages(codes, source=source_layout(src))


def _listed_codes(src: Path, settings: dict, kind: str) -> tuple[dict[str, int], list[str]]:
    """The language tokens the tokenizer's files name: with their ids (tokenizer_config.json's
    added_tokens_decoder), else in order (additional_special_tokens, or transformers 5's extra_special_tokens, in
    tokenizer_config.json or special_tokens_map.json)."""
    decoder = settings.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        ids = {t.get("content", ""): int(i) for i, t in decoder.items() if isinstance(t, dict) and str(i).isdigit()}
        ids = {token: i for token, i in ids.items() if CODE[kind].fullmatch(token)}
        if ids:
            return ids, []
    special = read_json(src / "special_tokens_map.json", {})
    for listed in (settings.get("additional_special_tokens"), settings.get("extra_special_tokens"),
                   special.get("additional_special_tokens")):  # fmt: skip
        tokens = [t if isinstance(t, str) else t.get("content", "") for t in listed or [] if isinstance(t, str | dict)]
        tokens = [t for t in tokens if CODE[kind].fullmatch(t)]
        if tokens:
            return {}, tokens
    return {}, []


def _numbered(
    src: Path, vocab: dict[str, int], codes: dict[str, int], vocab_size: int, spm_path: Path
) -> tuple[Languages, dict[str, Path | bytes]]:
    """The languages of `codes` (tokens by id), and the tokenizer's files as vaswani reads Marian's
    (data/tokenizer.py, VocabPieces): the SentencePiece model as source.spm and target.spm, vocab.json numbering
    every embedding row (the pieces, the language tokens, then fairseq's "madeup" words that fill the last rows,
    never produced: an export writes one piece per row)."""
    if max(codes.values()) >= vocab_size:
        raise PretrainedError(
            f"{src}: its {len(vocab)} pieces and {len(codes)} language tokens do not fit the model's {vocab_size} "
            "embedding rows; the tokenizer files and the weights do not belong together"
        )
    numbered = {**vocab, **codes}
    taken = set(numbered.values())
    free = (i for i in range(vocab_size) if i not in taken)
    numbered |= {f"madeupword{j:04d}": i for j, i in zip(range(vocab_size - len(taken)), free, strict=False)}
    spm_bytes = spm_path.read_bytes()
    files: dict[str, Path | bytes] = {"source.spm": spm_bytes, "target.spm": spm_bytes}
    files["vocab.json"] = json.dumps(numbered, ensure_ascii=False).encode()
    return Languages({token.strip("_"): i for token, i in codes.items()}, source=source_layout(src)), files


def spm_tokenizer(src: Path, kind: str, vocab_size: int) -> tuple[Languages, dict[str, Path | bytes]]:
    """NLLB-200's or mBART-50's tokenizer from its SentencePiece model alone (the hub's mBART-50 has no
    tokenizer.json), numbered as NllbTokenizer and MBart50Tokenizer number it: fairseq's <s> <pad> </s> <unk>, each
    SentencePiece piece at its own id + 1, the language codes after the pieces, <mask> after them. The codes: the
    ones the tokenizer's files list, else the family's (FAIRSEQ_CODES, by tokenizer_class)."""
    settings = read_json(src / "tokenizer_config.json", {})
    path = src / Path(str(settings.get("vocab_file") or SPM)).name
    if not path.is_file():
        path = src / SPM
    if not path.is_file():
        raise PretrainedError(
            f"{src}: neither tokenizer.json nor {SPM} found; this model's tokenizer needs one of them"
        )
    processor = read_spm(path)
    size = processor.get_piece_size()
    vocab = dict(FAIRSEQ_SPECIALS)
    for i in range(3, size):  # SentencePiece's own <unk> <s> </s> are 0-2: fairseq's ids stand for them
        vocab.setdefault(processor.id_to_piece(i), i + 1)
    ids, tokens = _listed_codes(src, settings, kind)
    if not ids:
        family_class = settings.get("tokenizer_class") or read_json(src / "config.json", {}).get("tokenizer_class")
        tokens = tokens or FAIRSEQ_CODES.get(str(family_class), "").split()
        if not tokens:
            raise PretrainedError(
                f"{src}: no tokenizer.json and no language codes listed in tokenizer_config.json or "
                f"special_tokens_map.json (tokenizer_class {family_class!r}); save the tokenizer with transformers"
            )
        ids = {token: size + 1 + i for i, token in enumerate(tokens)}
    vocab["<mask>"] = max(ids.values()) + 1
    return _numbered(src, vocab, ids, vocab_size, path)


def read_spm(path: Path):
    """The SentencePiece model at `path`; a one-line refusal naming it where it is not one (empty, cut short)."""
    import sentencepiece as spm

    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as error:
        raise PretrainedError(f"{path} is not a SentencePiece model ({error}); download the checkpoint again") from None


def m2m_tokenizer(src: Path, vocab_size: int) -> tuple[Languages, dict[str, Path | bytes]]:
    """M2M-100's tokenizer: the SentencePiece model, vocab.json with the language tokens (`__de__`) numbered after
    the pieces, as M2M100Tokenizer numbers them. Its languages: the ones the checkpoint lists, else its
    language_codes' list."""
    settings = read_json(src / "tokenizer_config.json", {})
    spm_name = settings.get("spm_file") if isinstance(settings.get("spm_file"), str) else SPM
    if not (src / Path(spm_name).name).is_file():
        raise PretrainedError(f"{src / Path(spm_name).name} not found: M2M-100's tokenizer needs it and vocab.json")
    read_spm(src / Path(spm_name).name)
    vocab = read_json(src / "vocab.json")
    if not isinstance(vocab, dict) or "<unk>" not in vocab:
        raise PretrainedError(f"{src / 'vocab.json'} is not M2M-100's vocabulary (no <unk>)")
    ids, tokens = _listed_codes(src, settings, "m2m_100")
    if not ids:
        if not tokens:
            family = settings.get("language_codes", "m2m100")
            if family not in M2M_LANGUAGES:
                raise PretrainedError(f"{src / 'tokenizer_config.json'}: language_codes {family!r} is not known")
            tokens = [f"__{code}__" for code in M2M_LANGUAGES[family].split()]
        ids = {token: len(vocab) + i for i, token in enumerate(tokens)}
    return _numbered(src, vocab, ids, vocab_size, src / Path(spm_name).name)


def convert(src: Path, hf: dict) -> tuple[Config, dict[str, torch.Tensor], dict[str, Path | bytes]]:
    """Our config, our weights (by our names) and the tokenizer files of the model in `src`."""
    kind = hf["model_type"]
    model = model_section(hf, kind, src / "config.json")
    if not (src / "tokenizer.json").is_file():
        if kind == "m2m_100" and (src / "vocab.json").is_file():  # M2M100Tokenizer's: vocab.json numbers the pieces
            languages, files = m2m_tokenizer(src, model["src_vocab_size"])
        else:  # NllbTokenizer's or MBart50Tokenizer's SentencePiece model alone
            languages, files = spm_tokenizer(src, kind, model["src_vocab_size"])
    else:
        languages = languages_of(src, kind, model["src_vocab_size"])
        files = {"tokenizer.json": src / "tokenizer.json"}
        if (src / "tokenizer_config.json").is_file():  # how transformers decodes (clean_up_tokenization_spaces)
            files["tokenizer_config.json"] = src / "tokenizer_config.json"
    if languages.source == "suffix":  # the tokenizer writes `</s> code` after the text: the search appends nothing
        if model["eos_id"] != EOS_ID:
            raise PretrainedError(f"{src / 'config.json'}: eos_token_id {model['eos_id']} is not fairseq's {EOS_ID}")
        model["source_eos"] = False
    generation = generation_settings(src, hf, allowed=("forced_bos_token_id",))
    decode = decode_section(generation, model["max_positions"], model["pad_id"], model["bos_id"], model["eos_id"], src)
    forced = generation.get("forced_bos_token_id")
    if forced is not None:  # the checkpoint's own target language (mBART-50's one-to-many models)
        languages.default_target = next((code for code, i in languages.codes.items() if i == forced), None)
    config = base_config(model, decode)
    weights = convert_weights(read_weights(src), config, kind, src)
    files[LANGUAGES_FILE] = languages.encoded()
    return config, weights, files


def convert_weights(hf: Checkpoint, config: Config, kind: str, src: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's weights under our names; every tensor read or known unused."""
    c, layout = config.model, layout_of(kind)
    D = c.d_model
    weights = WeightMap(hf, src, D)
    out, get, norm = weights.out, weights.get, weights.norm
    map_stacks(weights, c.n_layers, c.decoder_layers, c.d_ff)
    for ours, theirs in (("encoder", "model.encoder"), ("decoder", "model.decoder")):
        norm(f"{ours}.norm", f"{theirs}.layer_norm")
        if layout.embedding_norm:
            norm(f"{ours}.embed.norm", f"{theirs}.layernorm_embedding")
        if layout.learned_positions:
            table = get(f"{theirs}.embed_positions.weight", (c.max_positions + OFFSET, D))
        else:  # sinusoids transformers computes (a non-persistent buffer; older uploads store them)
            table = fairseq_positions(c.max_positions + OFFSET, D, c.pad_id)
            stored = hf.get(f"{theirs}.embed_positions.weights")
            if stored is not None and (stored.shape != table.shape or (stored.float() - table).abs().max() > 1e-4):
                raise PretrainedError(f"{src}: {theirs}.embed_positions.weights is not fairseq's sinusoid table")
        out[f"{ours}.embed.positions.weight"] = table[OFFSET:].clone()
    shared = next((n for n in ("model.shared.weight", "model.encoder.embed_tokens.weight") if n in hf), None)
    if shared is None:
        raise PretrainedError(f"{src}: the weights have no model.shared.weight; is config.json this checkpoint's?")
    out["encoder.embed.tokens.weight"] = get(shared, (c.src_vocab_size, D))
    why = "the model shares one embedding matrix between both stacks and the output"
    for alias in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
        same_tensor(hf, alias, shared, src, why)
    if c.tie_output:
        same_tensor(hf, "lm_head.weight", shared, src, why)
    else:
        out["output_weight"] = get("lm_head.weight", (c.tgt_vocab_size, D))
    if layout.output_bias:
        out["output_bias"] = get("final_logits_bias", (1, c.tgt_vocab_size))[0].clone()
    hf.account(kind, {}, src)
    return out
