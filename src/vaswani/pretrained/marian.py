"""MarianMTModel (OPUS-MT) in: the paper's architecture, with what Marian does differently made options.

- Activation `swish` (model.activation silu); a bias on the logits, `final_logits_bias` (model.output_bias).
- The decoder starts from PAD (model.bos_id = pad_id); EOS ends every source, as ours.
- Sinusoids laid out sines first, then cosines: the residual stream is permuted back to our interleaved layout
  (the inverse of vaswani/export/huggingface.py's permutation, an exact equivalence).
- LayerNorm epsilon 1e-5 (model.layer_norm_eps).
- Ids are vocab.json's (data/tokenizer.py, VocabPieces); `>>lang<<` target tokens stay text.
- generation_config.json (where the checkpoint has none, config.json's generation fields, as transformers reads
  them) becomes the model's decode defaults: num_beams, max_length (max_len_a 0, max_len_b max_length - 1: HF
  counts the start token; - 1 again with forced_eos_token_id, decode.forced_eos), length_penalty with Hugging
  Face's rule (decode.length_rule power: score / |Y|^alpha), early_stopping, no_repeat_ngram_size
  (decode.no_repeat_ngram); greedy and beam outputs are then generate's, token for token
  (tests/pretrained/test_marian.py).

Refused, in one line: pre-norm variants (normalize_before, normalize_embedding, add_final_layer_norm),
unequal encoder/decoder widths or heads, learned positions, bad_words_ids beyond PAD, the generation settings
our search does not follow (pretrained/__init__.py, GENERATION_UNSUPPORTED).
"""

from __future__ import annotations

from pathlib import Path

import torch

from vaswani.config import Config
from vaswani.data.tokenizer import MARIAN_FILES, MARIAN_TARGET_VOCAB
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
    vocab = hf["vocab_size"]
    shared = bool(hf.get("share_encoder_decoder_embeddings", True))
    tgt_vocab = vocab if shared else hf.get("decoder_vocab_size") or vocab  # shared: transformers' rule
    pad = hf.get("pad_token_id", vocab - 1)
    try:
        return {
            "type": "encoder_decoder",
            "src_vocab_size": vocab,
            "tgt_vocab_size": tgt_vocab,
            **stacks(hf, "swish", path),
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


def stacks(hf: dict, activation: str, path: Path) -> dict:
    """The ModelConfig fields of a BART-family config.json's two stacks (Marian's, M2M-100's, mBART's: one set of
    names), `activation` where it names none; a one-line refusal for unequal stacks or an activation we lack."""
    for a, b in [("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")]:
        if hf.get(a) != hf.get(b):
            raise PretrainedError(f"{path}: {a} ({hf.get(a)}) differs from {b} ({hf.get(b)}); vaswani needs them equal")
    activation = hf.get("activation_function", activation)
    if activation not in ACTIVATIONS:
        raise PretrainedError(
            f"{path}: activation_function {activation!r} is not supported; vaswani takes {', '.join(ACTIVATIONS)}"
        )
    return {
        "d_model": hf["d_model"],
        "n_heads": hf["encoder_attention_heads"],
        "d_ff": hf["encoder_ffn_dim"],
        "n_layers": hf["encoder_layers"],
        "n_decoder_layers": hf["decoder_layers"],
        "dropout": hf.get("dropout", 0.1),
        "attention_dropout": hf.get("attention_dropout", 0.0),
        "activation": ACTIVATIONS[activation],
    }


def decode_section(generation: dict, max_positions: int, pad: int, bos: int, eos: int, path: Path) -> dict:
    """The checkpoint's generation settings as decode defaults, absent ones at transformers' defaults, so that
    translating gives what `generate` gives: beam search's scores normalised before PAD is banned, transformers'
    stopping rule (early_stopping false: decode.early_stopping heuristic; "never": our default rule),
    forced_eos_token_id's EOS counted in the length (decode.forced_eos), and no n-gram of no_repeat_ngram_size
    tokens twice (decode.no_repeat_ngram)."""
    banned = {pad, bos}
    bad = [ids for ids in generation.get("bad_words_ids") or [] if not (len(ids) == 1 and ids[0] in banned)]
    if bad:
        raise PretrainedError(
            f"{path}: bad_words_ids {bad[:3]} are not supported (vaswani never generates PAD and the start token "
            "only); remove them to import"
        )
    # max_length counts the start token; with forced_eos_token_id (OPUS-MT's), an output cut at the limit ends
    # in EOS in place of its last token, so one token fewer is searched for (the same text comes out).
    max_length = 1 + generation["max_new_tokens"] if generation.get("max_new_tokens") else generation["max_length"]
    forced_eos = generation.get("forced_eos_token_id") == eos
    early_stopping = generation["early_stopping"]
    return {
        "beam_size": generation["num_beams"],
        "length_penalty": generation["length_penalty"],
        "length_rule": "power",
        "max_len_a": 0.0,
        "max_len_b": max(1, min(max_length - 1 - forced_eos, max_positions)),
        "early_stopping": {True: True, False: "heuristic", "never": False}[early_stopping],
        "forced_eos": forced_eos,
        "ban_after_softmax": True,
        "no_repeat_ngram": generation["no_repeat_ngram_size"],
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
    generation = generation_settings(src, hf)
    decode = decode_section(generation, model["max_positions"], model["pad_id"], model["bos_id"], model["eos_id"], src)
    checkpoint = read_weights(src)
    model["share_embeddings"] = one_input_matrix(checkpoint, model)
    config = base_config(model, decode)
    weights = convert_weights(checkpoint, config, src)
    _check_vocabulary(files, config, src)
    return config, weights, files


def convert_weights(hf: Checkpoint, config: Config, src: Path) -> dict[str, torch.Tensor]:
    """Marian's weights under our names, the residual stream back in our dimension order."""
    c, layout = config.model, layout_of("marian")  # permuted, no norm after a stack, an output bias
    D, inv = c.d_model, inverse_permutation(c.d_model)
    weights = WeightMap(hf, src, D)
    map_stacks(weights, c.n_layers, c.decoder_layers, c.d_ff, order=inv if layout.permuted else None)
    out = weights.out

    def reads(name: str, rows: int) -> torch.Tensor:  # (rows, D): its columns read the stream
        return weights.get(name, (rows, D))[:, inv].contiguous()

    out.update(_embeddings(hf, c, src, reads))
    if layout.output_bias:
        out["output_bias"] = weights.get("final_logits_bias", (1, c.tgt_vocab_size))[0].clone()
    for stack in ("encoder", "decoder"):
        _check_positions(hf, f"model.{stack}.embed_positions.weight", c.max_positions, D, src)
    hf.account("Marian", {}, src)
    return out


SHARED = "model.shared.weight"
ENCODER, DECODER = "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"


def _first_of(hf: Checkpoint, *names: str) -> str:
    """The first of `names` the checkpoint holds (save_pretrained stores a tied matrix under one or all of them)."""
    return next((n for n in names if n in hf), names[0])


def one_input_matrix(hf: Checkpoint, model: dict) -> bool:
    """Whether the encoder and the decoder read one embedding matrix. With share_encoder_decoder_embeddings and
    tie_word_embeddings: false, transformers 4 made them one matrix (and saved it under each name); transformers 5
    unties them, so a checkpoint trained there holds two: vaswani then gives each stack its own (exactly what
    transformers computes)."""
    if not model["share_embeddings"] or model["tie_output"]:
        return model["share_embeddings"]
    encoder, decoder = _first_of(hf, ENCODER, SHARED), _first_of(hf, DECODER, SHARED)
    return encoder == decoder or encoder not in hf or decoder not in hf or torch.equal(hf[encoder], hf[decoder])


def _embeddings(hf: Checkpoint, c, src: Path, reads) -> dict[str, torch.Tensor]:
    """The token embeddings and the pre-softmax matrix, tied as config.json says; copies of one matrix must be
    equal. Untied (tie_word_embeddings: false), lm_head.weight is a matrix of its own (model.tie_output false)."""
    if c.share_embeddings and c.tie_output:  # one matrix: both stacks' embeddings and the output
        target = _first_of(hf, SHARED, ENCODER, DECODER)
        why = "share_encoder_decoder_embeddings and tie_word_embeddings make them one matrix"
        for alias in (SHARED, ENCODER, DECODER, "lm_head.weight"):
            same_tensor(hf, alias, target, src, why)
        return {"encoder.embed.tokens.weight": reads(target, c.src_vocab_size)}
    encoder = _first_of(hf, ENCODER, SHARED)
    decoder = _first_of(hf, DECODER, "lm_head.weight" if c.tie_output else SHARED)
    out = {"encoder.embed.tokens.weight": reads(encoder, c.src_vocab_size)}
    if c.share_embeddings:
        same_tensor(hf, decoder, encoder, src, "the encoder and the decoder share one embedding matrix")
    else:
        out["decoder.embed.tokens.weight"] = reads(decoder, c.tgt_vocab_size)
    if SHARED in hf:  # where each stack has its own, transformers' forward never reads model.shared
        hf.read.add(SHARED)
    if c.tie_output:
        why = "tie_word_embeddings: true ties the output to the target embedding (set it to false to import lm_head)"
        same_tensor(hf, "lm_head.weight", decoder, src, why)
    else:
        out["output_weight"] = reads("lm_head.weight", c.tgt_vocab_size)
    return out


def marian_positions(n: int, d_model: int) -> torch.Tensor:
    """Marian's sinusoid table: the sines of every frequency, then the cosines. Shape: (n, D)"""
    position = torch.arange(n, dtype=torch.float64)[:, None]
    frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.cat([torch.sin(position * frequency), torch.cos(position * frequency)], dim=1).float()


def _check_positions(hf: Checkpoint, name: str, n: int, d_model: int, src: Path) -> None:
    """Older checkpoints store the sinusoid table Marian computes; one that holds other values is refused."""
    if name not in hf:
        return
    table = hf[name].float()
    expected = marian_positions(table.size(0), d_model)
    if table.shape != expected.shape or (table - expected).abs().max() > 1e-4:
        raise PretrainedError(
            f"{src}: {name} is not Marian's sinusoid table (learned or altered positions); vaswani computes "
            "the sinusoids and cannot take other values"
        )


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
