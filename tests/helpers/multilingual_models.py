"""Small many-to-many checkpoints built offline as the hub lays them out: NLLB-200
(M2M100ForConditionalGeneration with NllbTokenizer's tokenizer.json: codes like deu_Latn, the source's code first)
and mBART-50 (MBartForConditionalGeneration with MBart50Tokenizer's: de_DE). Random weights made realistic, then
briefly trained on Multi30k in three directions (de→en, de→fr, en→de)
so that the output depends on the input and on the target language asked for."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import sentencepiece as spm
import torch

from tests.helpers.hf_models import multi30k, train_briefly

PAIRS = (("de", "en"), ("de", "fr"), ("en", "de"))
CODES = {
    "nllb": {"de": "deu_Latn", "en": "eng_Latn", "fr": "fra_Latn"},
    "mbart50": {"de": "de_DE", "en": "en_XX", "fr": "fr_XX"},
    "m2m100": {"de": "de", "en": "en", "fr": "fr"},
}
_TRAINED: dict[str, dict] = {}


def _sentencepiece(directory: Path, model_type: str) -> None:
    lines = [line for language in ("de", "en", "fr") for line in multi30k("train", language, 2000)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=1000,
        model_type=model_type,
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    (directory / "sentencepiece.bpe.model").write_bytes(model.getvalue())


def _tokenizer(kind: str, work: Path):
    """The tokenizer as transformers converts the SentencePiece model of such a checkpoint."""
    import transformers

    work.mkdir(parents=True, exist_ok=True)
    if kind == "nllb":
        from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

        _sentencepiece(work, "bpe")
        return transformers.NllbTokenizer.from_pretrained(
            str(work), src_lang="deu_Latn", tgt_lang="eng_Latn", additional_special_tokens=FAIRSEQ_LANGUAGE_CODES
        )
    if kind == "m2m100":  # fairseq's dictionary: the four specials, then SentencePiece's pieces (vocab.json)
        _sentencepiece(work, "bpe")
        processor = spm.SentencePieceProcessor(model_file=str(work / "sentencepiece.bpe.model"))
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for i in range(processor.get_piece_size()):
            if not processor.is_control(i) and not processor.is_unknown(i):
                vocab.setdefault(processor.id_to_piece(i), len(vocab))
        (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        return transformers.M2M100Tokenizer(
            str(work / "vocab.json"), str(work / "sentencepiece.bpe.model"), src_lang="de", tgt_lang="en"
        )
    _sentencepiece(work, "unigram")  # mBART's "sentencepiece.bpe.model" is a unigram model
    return transformers.MBart50Tokenizer.from_pretrained(str(work), src_lang="de_DE", tgt_lang="en_XX")


def _model(kind: str, vocab_size: int, d_model: int):
    import transformers

    common = dict(
        vocab_size=vocab_size,
        d_model=d_model,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_position_embeddings=128,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        dropout=0.1,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        scale_embedding=True,
    )
    if kind in ("nllb", "m2m100"):
        return transformers.M2M100ForConditionalGeneration(transformers.M2M100Config(**common))
    hub = dict(  # in the hub's config.json
        normalize_before=True, add_final_layer_norm=True, normalize_embedding=True, tokenizer_class="MBart50Tokenizer"
    )
    return transformers.MBartForConditionalGeneration(
        transformers.MBartConfig(**common, **hub, activation_function="gelu", forced_eos_token_id=2)
    )


def save_multilingual(out: Path, kind: str = "nllb", steps: int = 240, d_model: int = 32) -> Path:
    """A many-to-many checkpoint (`kind` nllb or mbart50) saved with save_pretrained beside its tokenizer files."""
    import transformers

    torch.manual_seed(0)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(kind, out.parent / f"{out.name}.spm")
    # M2M-100's language tokens and its 8 "madeup" words come after vocab.json's pieces (not in len(tokenizer))
    # NLLB-200's embedding has two rows past its tokenizer's 256,204 tokens (256,206), as here
    size = len(tokenizer) + (2 if kind == "nllb" else 0)
    if kind == "m2m100":
        size = len(tokenizer.encoder) + len(tokenizer.lang_token_to_id) + 8
    model = _model(kind, size, d_model)
    with torch.no_grad():  # what training leaves: LayerNorms and biases away from 1 and 0
        for name, p in model.named_parameters():
            if name.endswith("bias") or "layer_norm" in name or "layernorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
        if kind == "mbart50":
            model.final_logits_bias.normal_(0.0, 0.5)
    key = f"{kind}-{steps}-{d_model}"
    if key not in _TRAINED:
        _train(model, tokenizer, kind, steps)
        _TRAINED[key] = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    model.load_state_dict(_TRAINED[key])
    model.eval()
    settings = {"max_length": 64, **({"num_beams": 5, "forced_eos_token_id": 2} if kind == "mbart50" else {})}
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=2, bos_token_id=0, pad_token_id=1, eos_token_id=2, **settings
    )
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    if kind == "mbart50":  # the hub's tokenizer_config.json names <s> (transformers 5 leaves it out)
        config_path = out / "tokenizer_config.json"
        config_path.write_text(json.dumps({**json.loads(config_path.read_text("utf-8")), "bos_token": "<s>"}))
    if not (out / "sentencepiece.bpe.model").is_file():
        shutil.copyfile(out.parent / f"{out.name}.spm" / "sentencepiece.bpe.model", out / "sentencepiece.bpe.model")
    return out


def _train(model, tokenizer, kind: str, steps: int) -> None:
    """Each step one direction of PAIRS in turn, the tokenizer's languages set for it."""
    codes = CODES[kind]
    texts = {language: multi30k("train", language, 3000) for language in ("de", "en", "fr")}

    def pairs(step: int) -> tuple[list[str], list[str]]:
        source, target = PAIRS[step % len(PAIRS)]
        tokenizer.src_lang, tokenizer.tgt_lang = codes[source], codes[target]
        return texts[source], texts[target]

    train_briefly(model, tokenizer, pairs, steps)


def terms_as_written(translator, lines, beams: int, **codes):
    """A glossary's terms that the model would never choose come out as whole words, written as given; sentences
    without terms translate as without the glossary. Returns the translations with it."""
    sample = ["Ein Mann und ein Hund laufen.", "Zwei Frauen sitzen auf einer Bank.", *lines[:6]]
    plain = translator.translate_with_details(sample, beam_size=beams, **codes)
    request = translator.request(beam_size=beams, glossary={"Hund": "Zebrastreifen", "Bank": "Quittung"})
    found = translator.translate_with_details(sample, request, **codes)
    words = [re.findall(r"\w+", t.text) for t in found]  # whole words, not substrings
    assert "Zebrastreifen" in words[0] and "Quittung" in words[1], [t.text for t in found[:2]]
    assert [t.text for t in found[2:]] == [t.text for t in plain[2:]]  # sentences without terms: as without
    return found


HELD_APART_GAIN = 5.0  # chrF a fine-tuning on German-French pairs must add on pairs it never saw (fixed in advance)


def held_apart_pairs(root) -> tuple[list[str], list[str]]:
    """German-French pairs to fine-tune on written to `root` (in.*: 2,000 Multi30k training pairs; dev.*: 32
    validation pairs) and the pairs to judge it on, held apart from both (100 test_2016_flickr lines): what it
    learnt must carry over to sentences it never saw, not be those pairs learnt by heart."""
    for side in ("de", "fr"):
        (root / f"in.{side}").write_text("\n".join(multi30k("train", side, 2000)) + "\n", encoding="utf-8")
        (root / f"dev.{side}").write_text("\n".join(multi30k("val", side, 32)) + "\n", encoding="utf-8")
    return multi30k("test_2016_flickr", "de", 100), multi30k("test_2016_flickr", "fr", 100)


def pair_recipe(path, root, kind: str, **data) -> str:
    """A fine-tuning recipe of one language pair (German into French, the codes of `kind`) on the files in `root`
    (`held_apart_pairs`), written to `path`; `data`: data fields changed (None drops one)."""
    values = {
        "data": {"train_src": str(root / "in.de"), "train_tgt": str(root / "in.fr"), "valid_src": str(root / "dev.de"),
                 "valid_tgt": str(root / "dev.fr"), "max_tokens": 600, "source_language": CODES[kind]["de"],
                 "target_language": CODES[kind]["fr"], **data},
        "train": {"max_steps": 400, "lr_schedule": "constant", "peak_lr": 3e-3, "warmup_steps": 1, "valid_every": 400,
                  "loader_workers": 0, "precision": "fp32"},
    }  # fmt: skip
    path.write_text(json.dumps({k: {n: v for n, v in s.items() if v is not None} for k, s in values.items()}))
    return str(path)
