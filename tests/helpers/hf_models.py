"""Small Hugging Face checkpoints built offline, as the hub publishes them: random weights made realistic
(non-zero biases, LayerNorms and logits bias), then briefly trained on Multi30k so that search has real
choices to make, saved with save_pretrained beside their tokenizer files."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import sentencepiece as spm
import torch

MULTI30K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "multi30k" / "raw"


# texts that write a tokenizer's special tokens, as users' texts may (copied from logs, markup, papers): transformers'
# tokenizers read </s>, <unk> and <pad> (M2M-100's and NLLB's <s> too) in a text as those tokens
WRITTEN_SPECIALS = [
    "Ein </s> Hund läuft durch den Park.",
    "Ein<unk>Mann schläft auf einer Bank.",
    "<s>Zwei Hunde spielen im Schnee.</s>",
    "Eine Frau </s></s>  liest ein Buch.",
    "Kinder <S> spielen </ś> im < /s> Garten.",
]
PAD_WRITTEN = "Ein <pad> Hund im <pad>Wasser."  # read as the pad token, which no model attends to (generate does)


def multi30k(split: str, language: str, n: int) -> list[str]:
    with gzip.open(MULTI30K / f"{split}.{language}.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for _, line in zip(range(n), f, strict=False)]


def _sentencepiece(lines: list[str], vocab_size: int) -> spm.SentencePieceProcessor:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def _marian_vocab(
    processors: list[spm.SentencePieceProcessor], extra: tuple[str, ...] = (), pad_last: bool = True
) -> dict[str, int]:
    """OPUS-MT's order: </s> 0, <unk> 1, the pieces, <pad> last (or third: two vocabularies share its id)."""
    pieces = ["</s>", "<unk>", *extra, *([] if pad_last else ["<pad>"])]
    for processor in processors:
        for i in range(processor.get_piece_size()):
            piece = processor.id_to_piece(i)
            if not processor.is_control(i) and not processor.is_unknown(i) and piece not in pieces:
                pieces.append(piece)
    if pad_last:
        pieces.append("<pad>")
    return {piece: i for i, piece in enumerate(pieces)}


_TRAINED: dict[tuple, dict] = {}  # save_marian's trained weights, per training: layouts of one model train it once


def save_marian(
    out: Path,
    separate: bool = False,
    steps: int = 150,
    num_beams: int = 4,
    d_model: int = 32,
    pairs: int = 3000,
    tie_output: bool = True,
    legacy: bool = False,
    generation: dict | None = None,
) -> Path:
    """A MarianMTModel de-en in OPUS-MT's layout (source.spm, target.spm, vocab.json, generation_config.json).

    `tie_output` false: one shared input embedding and an lm_head of its own (tie_word_embeddings false, as
    transformers 4.x saved such models). `legacy`: as the hub's older uploads are laid out: pytorch_model.bin
    holding every name of a tied matrix and the sinusoid tables, the generation settings in config.json and no
    generation_config.json. `generation`: settings that replace OPUS-MT's (num_beams, max_length, ...)."""
    import transformers

    torch.manual_seed(0)
    out.mkdir(parents=True, exist_ok=True)
    src_lines, tgt_lines = multi30k("train", "de", pairs), multi30k("train", "en", pairs)
    sp_src, sp_tgt = _sentencepiece(src_lines, 300), _sentencepiece(tgt_lines, 250)
    (out / "source.spm").write_bytes(sp_src.serialized_model_proto())
    (out / "target.spm").write_bytes(sp_tgt.serialized_model_proto())
    if separate:
        src_vocab, tgt_vocab = _marian_vocab([sp_src], pad_last=False), _marian_vocab([sp_tgt], pad_last=False)
        (out / "target_vocab.json").write_text(json.dumps(tgt_vocab, ensure_ascii=False), encoding="utf-8")
    else:
        src_vocab = tgt_vocab = _marian_vocab([sp_src, sp_tgt], extra=(">>en<<",))
    (out / "vocab.json").write_text(json.dumps(src_vocab, ensure_ascii=False), encoding="utf-8")
    pad = src_vocab["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(src_vocab),
        decoder_vocab_size=len(tgt_vocab),
        d_model=d_model,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        activation_function="swish",
        max_position_embeddings=128,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=tgt_vocab["<pad>"],
        share_encoder_decoder_embeddings=not separate,
        tie_word_embeddings=tie_output,
        scale_embedding=True,
        dropout=0.1,
    )
    model = transformers.MarianMTModel(config)
    with torch.no_grad():  # what training leaves: LayerNorms and biases away from 1 and 0
        for name, p in model.named_parameters():
            if name.endswith("bias") or "layer_norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
        model.final_logits_bias.normal_(0.0, 0.5)
    tokenizer = transformers.MarianTokenizer(
        str(out / "source.spm"),
        str(out / "target.spm"),
        str(out / "vocab.json"),
        target_vocab_file=str(out / "target_vocab.json") if separate else None,
        separate_vocabs=separate,
        source_lang="de",
        target_lang="en",
    )
    key = (separate, steps, d_model, pairs, tie_output)  # what training depends on (the layout and settings do not)
    if key not in _TRAINED:
        _train(model, tokenizer, src_lines, tgt_lines, steps)
        _TRAINED[key] = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    model.load_state_dict(_TRAINED[key])
    model.eval()
    settings = {"forced_eos_token_id": 0, "bad_words_ids": [[tgt_vocab["<pad>"]]], "num_beams": num_beams,
                "max_length": 64, **(generation or {})}  # fmt: skip
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=tgt_vocab["<pad>"], pad_token_id=pad, eos_token_id=0, **settings
    )
    model.eval().save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    if legacy:
        _as_legacy_upload(model, out, settings)
    return out


def _as_legacy_upload(model, out: Path, generation: dict) -> None:
    """The layout of the hub's older uploads (transformers 3 and 4): every tensor of the state dict in
    pytorch_model.bin, tied matrices under each of their names and the sinusoid tables included; the generation
    settings in config.json, and no generation_config.json."""
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    assert "model.encoder.embed_positions.weight" in state and "lm_head.weight" in state
    if not model.config.tie_word_embeddings:  # transformers 4 kept one input matrix, saved under each of its names
        for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
            state[name] = state["model.shared.weight"].clone()
    torch.save(state, out / "pytorch_model.bin")
    (out / "model.safetensors").unlink()
    (out / "generation_config.json").unlink()
    config = json.loads((out / "config.json").read_text())
    config.update(generation)
    (out / "config.json").write_text(json.dumps(config, indent=2))


def _train(model, tokenizer, src_lines: list[str], tgt_lines: list[str], steps: int, batch: int = 32) -> None:
    train_briefly(model, tokenizer, lambda step: (src_lines, tgt_lines), steps, batch)


def train_briefly(model, tokenizer, pairs, steps: int, batch: int = 32) -> None:
    """`steps` of Adam at 3e-3 on batches of `pairs(step)` (source lines, target lines: the tokenizer set for them),
    taken in turn."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for step in range(steps):
        src_lines, tgt_lines = pairs(step)
        start = step * batch % (len(src_lines) - batch)
        inputs = tokenizer(
            src_lines[start : start + batch],
            text_target=tgt_lines[start : start + batch],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=64,
        )
        inputs["labels"][inputs["labels"] == tokenizer.pad_token_id] = -100
        loss = model(**inputs).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
