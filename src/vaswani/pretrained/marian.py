"""MarianMTModel (OPUS-MT) in: the paper's architecture, with what Marian does differently made options.

- Activation `swish` (model.activation silu); a bias on the logits, `final_logits_bias` (model.output_bias).
- The decoder starts from PAD (model.bos_id = pad_id); EOS ends every source, as ours.
- Sinusoids laid out sines first, then cosines: the residual stream is permuted back to our interleaved layout
  (the inverse of vaswani/export/huggingface.py's permutation, an exact equivalence).
- LayerNorm epsilon 1e-5 (model.layer_norm_eps).
- Ids are vocab.json's (data/tokenizer.py, VocabPieces); `>>lang<<` target tokens stay text.
- generation_config.json becomes the model's decode defaults: num_beams, max_length (max_len_a 0,
  max_len_b max_length - 1: HF counts the start token; - 1 again with forced_eos_token_id), length_penalty
  with Hugging Face's rule (decode.length_rule power: score / |Y|^alpha), early_stopping.

Refused, in one line: pre-norm variants (normalize_before, normalize_embedding, add_final_layer_norm),
unequal encoder/decoder widths or heads, learned positions, bad_words_ids beyond PAD.
"""

from __future__ import annotations

from pathlib import Path

import torch

from vaswani.config import Config
from vaswani.data.tokenizer import MARIAN_FILES, MARIAN_TARGET_VOCAB
from vaswani.pretrained import PretrainedError, base_config, read_json, read_weights, take

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh"}
MARIAN_EPS = 1e-5  # nn.LayerNorm's default, fixed in modeling_marian.py


def inverse_permutation(d_model: int) -> torch.Tensor:
    """Our dimension i is Marian's dimension inv[i] (Marian: all even dimensions, then all odd)."""
    perm = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])
    return torch.argsort(perm)


def model_section(hf: dict, path: Path) -> dict:
    """ModelConfig fields from a MarianConfig's config.json; a one-line refusal for what has no equivalent."""
    for flag in ("normalize_before", "normalize_embedding", "add_final_layer_norm"):
        if hf.get(flag):
            raise PretrainedError(f"{path}: {flag}: true is not supported (vaswani imports post-norm Marian models)")
    if hf.get("static_position_embeddings") is False or hf.get("learned_positional_embeddings"):
        raise PretrainedError(f"{path}: learned position embeddings are not supported (Marian's are sinusoidal)")
    pairs = [("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")]
    for a, b in pairs:
        if hf.get(a) != hf.get(b):
            raise PretrainedError(f"{path}: {a} ({hf.get(a)}) differs from {b} ({hf.get(b)}); vaswani needs them equal")
    activation = hf.get("activation_function", "swish")
    if activation not in ACTIVATIONS:
        raise PretrainedError(
            f"{path}: activation_function {activation!r} is not supported; vaswani takes {', '.join(ACTIVATIONS)}"
        )
    vocab = hf["vocab_size"]
    tgt_vocab = hf.get("decoder_vocab_size") or vocab
    shared = bool(hf.get("share_encoder_decoder_embeddings", True)) and tgt_vocab == vocab
    pad = hf.get("pad_token_id", vocab - 1)
    try:
        return {
            "type": "encoder_decoder",
            "src_vocab_size": vocab,
            "tgt_vocab_size": tgt_vocab,
            "d_model": hf["d_model"],
            "n_heads": hf["encoder_attention_heads"],
            "d_ff": hf["encoder_ffn_dim"],
            "n_layers": hf["encoder_layers"],
            "n_decoder_layers": hf["decoder_layers"],
            "dropout": hf.get("dropout", 0.1),
            "attention_dropout": hf.get("attention_dropout", 0.0),
            "activation": ACTIVATIONS[activation],
            "norm_first": False,
            "positions": "sinusoidal",
            "max_positions": hf.get("max_position_embeddings", 512),
            "share_embeddings": shared,
            "tie_output": bool(hf.get("tie_word_embeddings", True)),
            "scale_embeddings": bool(hf.get("scale_embedding", True)),
            "output_bias": True,
            "layer_norm_eps": MARIAN_EPS,
            "pad_id": pad,
            "bos_id": hf.get("decoder_start_token_id", pad),
            "eos_id": hf.get("eos_token_id", 0),
        }
    except KeyError as missing:
        raise PretrainedError(f"{path} has no {missing.args[0]}; is it a MarianConfig?") from None


def decode_section(generation: dict, max_positions: int, pad: int, bos: int, eos: int, path: Path) -> dict:
    """The checkpoint's generation settings as decode defaults (absent ones: Hugging Face's defaults)."""
    banned = {pad, bos}
    bad = [ids for ids in generation.get("bad_words_ids") or [] if not (len(ids) == 1 and ids[0] in banned)]
    if bad:
        raise PretrainedError(
            f"{path}: bad_words_ids {bad[:3]} are not supported (vaswani never generates PAD and the start token "
            "only); remove them from generation_config.json to import"
        )
    # max_length counts the start token; with forced_eos_token_id (OPUS-MT's), an output cut at the limit ends
    # in EOS in place of its last token, so one token fewer is searched for (the same text comes out).
    max_length = generation.get("max_length", max_positions)
    forced_eos = generation.get("forced_eos_token_id") == eos
    return {
        "beam_size": generation.get("num_beams", 4),
        "length_penalty": generation.get("length_penalty", 1.0),
        "length_rule": "power",
        "max_len_a": 0.0,
        "max_len_b": min(max_length - 1 - forced_eos, max_positions),
        "early_stopping": generation.get("early_stopping") is True,
    }


def tokenizer_files(src: Path, separate: bool) -> dict[str, Path]:
    names = [*MARIAN_FILES, *([MARIAN_TARGET_VOCAB] if separate else [])]
    for name in names:
        if not (src / name).is_file():
            raise PretrainedError(f"{src / name} not found: a Marian tokenizer needs {', '.join(names)}")
    return {name: src / name for name in names}


def convert(src: Path, hf: dict) -> tuple[Config, dict[str, torch.Tensor], dict[str, Path]]:
    """Our config, our weights (by our names) and the tokenizer files of the Marian model in `src`."""
    path = src / "config.json"
    model = model_section(hf, path)
    tokenizer_config = read_json(src / "tokenizer_config.json", {})
    separate = bool(tokenizer_config.get("separate_vocabs")) or model["tgt_vocab_size"] != model["src_vocab_size"]
    files = tokenizer_files(src, separate)
    generation = read_json(src / "generation_config.json", {})
    decode = decode_section(generation, model["max_positions"], model["pad_id"], model["bos_id"], model["eos_id"], src)
    config = base_config(model, decode)
    weights = convert_weights(read_weights(src), config, src)
    _check_vocabulary(files, config, src)
    return config, weights, files


def convert_weights(hf: dict[str, torch.Tensor], config: Config, src: Path) -> dict[str, torch.Tensor]:
    """Marian's weights under our names, the residual stream back in our dimension order."""
    c = config.model
    D, F, inv = c.d_model, c.d_ff, inverse_permutation(c.d_model)
    out: dict[str, torch.Tensor] = {}

    def get(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        return take(hf, name, shape, src)

    def reads(name: str, rows: int) -> torch.Tensor:  # (rows, D): its columns read the stream
        return get(name, (rows, D))[:, inv].contiguous()

    def writes(name: str, shape: tuple[int, ...]) -> torch.Tensor:  # (D, ...) or (D,): writes the stream
        return get(name, shape)[inv].contiguous()

    def attention(ours: str, theirs: str) -> None:
        out[f"{ours}.in_proj.weight"] = torch.cat([reads(f"{theirs}.{p}_proj.weight", D) for p in "qkv"])
        out[f"{ours}.in_proj.bias"] = torch.cat([get(f"{theirs}.{p}_proj.bias", (D,)) for p in "qkv"])
        out[f"{ours}.out_proj.weight"] = writes(f"{theirs}.out_proj.weight", (D, D))
        out[f"{ours}.out_proj.bias"] = writes(f"{theirs}.out_proj.bias", (D,))

    def norm(ours: str, theirs: str) -> None:
        out[f"{ours}.weight"] = writes(f"{theirs}.weight", (D,))
        out[f"{ours}.bias"] = writes(f"{theirs}.bias", (D,))

    def feed_forward(ours: str, theirs: str) -> None:
        out[f"{ours}.feed_forward.linear1.weight"] = reads(f"{theirs}.fc1.weight", F)
        out[f"{ours}.feed_forward.linear1.bias"] = get(f"{theirs}.fc1.bias", (F,))
        out[f"{ours}.feed_forward.linear2.weight"] = writes(f"{theirs}.fc2.weight", (D, F))
        out[f"{ours}.feed_forward.linear2.bias"] = writes(f"{theirs}.fc2.bias", (D,))

    for i in range(c.n_layers):
        ours, theirs = f"encoder.layers.{i}", f"model.encoder.layers.{i}"
        attention(f"{ours}.self_attn", f"{theirs}.self_attn")
        norm(f"{ours}.norms.0", f"{theirs}.self_attn_layer_norm")
        feed_forward(ours, theirs)
        norm(f"{ours}.norms.1", f"{theirs}.final_layer_norm")
    for i in range(c.decoder_layers):
        ours, theirs = f"decoder.layers.{i}", f"model.decoder.layers.{i}"
        attention(f"{ours}.self_attn", f"{theirs}.self_attn")
        norm(f"{ours}.norms.0", f"{theirs}.self_attn_layer_norm")
        attention(f"{ours}.cross_attn", f"{theirs}.encoder_attn")
        norm(f"{ours}.norms.1", f"{theirs}.encoder_attn_layer_norm")
        feed_forward(ours, theirs)
        norm(f"{ours}.norms.2", f"{theirs}.final_layer_norm")
    V, V_tgt = c.src_vocab_size, c.tgt_vocab_size

    def first_of(*names: str) -> str:  # save_pretrained stores a tied matrix under one of its names
        return next((n for n in names if n in hf), names[0])

    out["encoder.embed.tokens.weight"] = reads(first_of("model.shared.weight", "model.encoder.embed_tokens.weight"), V)
    if not c.share_embeddings:
        decoder_embed = first_of("model.decoder.embed_tokens.weight", "lm_head.weight")
        out["decoder.embed.tokens.weight"] = reads(decoder_embed, V_tgt)
        if not c.tie_output:
            out["output_weight"] = reads("lm_head.weight", V_tgt)
    out["output_bias"] = get("final_logits_bias", (1, V_tgt))[0].clone()
    return out


def _check_vocabulary(files: dict[str, Path], config: Config, src: Path) -> None:
    """vocab.json (target_vocab.json) must number exactly the model's embedding rows."""
    c = config.model
    checks = [("vocab.json", c.src_vocab_size)]
    checks.append(
        (MARIAN_TARGET_VOCAB, c.tgt_vocab_size) if MARIAN_TARGET_VOCAB in files else ("vocab.json", c.tgt_vocab_size)
    )
    for name, size in checks:
        vocab = read_json(files[name])
        largest = max(vocab.values(), default=-1) + 1
        if largest > size:
            raise PretrainedError(
                f"{src / name} numbers {largest} pieces but the model's embedding has {size} rows; "
                "the tokenizer files and the weights do not belong together"
            )
