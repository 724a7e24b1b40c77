"""A Hugging Face Marian directory: `MarianMTModel.from_pretrained(OUT_DIR)` and `MarianTokenizer` load it offline.

Marian's architecture is ours (post-norm, sinusoidal positions, embeddings scaled by sqrt(d_model), tied
pre-softmax weights) with four differences this exporter removes:

- Marian's sinusoid table puts all sines before all cosines (dimension i < D/2 is our 2i, dimension
  D/2 + i our 2i + 1) and it is recomputed at load time, not read. Permuting the dimensions of the
  residual stream is an exact equivalence: the columns of every matrix that reads it (embeddings,
  W^Q, W^K, W^V, W_1), the rows and biases of every matrix that writes it (W^O, W_2) and the LayerNorm
  gains and biases are permuted the same way. Heads and the feed-forward's inner dimensions are untouched.
- Special ids: Marian starts decoding with `decoder_start_token_id`, which we set to our BOS (Marian's
  own models use PAD, and so do theirs imported: model.bos_id = pad_id); PAD and BOS are never generated
  (`bad_words_ids`), as in our search.
- Marian adds `final_logits_bias` to the logits: our `logit_bias` (model.output_bias, and -10,000 on the words a
  model.output_words target model does not produce), else zeros.
- Marian's LayerNorm epsilon is fixed at 1e-5 in its code; ours is `model.layer_norm_eps` (1e-6,
  tensor2tensor's). LayerNorm(s z, 1e-5) equals LayerNorm(z, 1e-6) for s = sqrt(10), so every LayerNorm
  that can be fed s times our input is: the gains and biases of the LayerNorms before it, and of the
  sub-layers' output matrices, are multiplied by s and the matrices reading the stream divided by s.
  Only the first LayerNorm of each stack (whose input holds the unscaled embeddings) keeps Marian's
  epsilon: logits differ by ~1e-5 (tests/export/), from 1e-4 without the rescaling.

Pre-norm and learned positions have no Marian equivalent and are refused with the option to blame.
Needs the `transformers` package: pip install 'vaswani[hf]'.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import torch

from vaswani.config import Config
from vaswani.data.tokenizer import Tokenizer
from vaswani.export import ExportError, check_output, output_directory, pieces
from vaswani.model_dir import load_model
from vaswani.nn import Transformer

MARIAN_EPS = 1e-5  # nn.LayerNorm's default, fixed in modeling_marian.py
HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "swish"}  # ours: theirs


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ImportError("export to Hugging Face needs the transformers package: pip install 'vaswani[hf]'") from None
    return transformers


def marian_permutation(d_model: int) -> torch.Tensor:
    """Marian's dimension m is our dimension perm[m]: all even dimensions (sines), then all odd (cosines)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def check_exportable(config: Config) -> None:
    c = config.model
    if c.norm_first:
        raise ExportError(
            "model.norm_first: true (pre-norm) has no Marian equivalent: Marian is post-norm; "
            "export with --to ctranslate2, which supports pre-norm"
        )
    if c.positions != "sinusoidal":
        raise ExportError(
            f"model.positions: {c.positions} has no Marian equivalent: Marian computes sinusoids; "
            "export with --to ctranslate2, which takes any position table"
        )
    if c.d_model % 2:
        raise ExportError(f"model.d_model {c.d_model} is odd: Marian's sinusoids need an even d_model")


def marian_config(config: Config):
    c = config.model
    transformers = _transformers()
    return transformers.MarianConfig(
        vocab_size=c.src_vocab_size,
        decoder_vocab_size=c.tgt_vocab_size,
        d_model=c.d_model,
        encoder_layers=c.n_layers,
        decoder_layers=c.decoder_layers,
        encoder_attention_heads=c.n_heads,
        decoder_attention_heads=c.n_heads,
        encoder_ffn_dim=c.d_ff,
        decoder_ffn_dim=c.d_ff,
        activation_function=HF_ACTIVATIONS[c.activation],
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        activation_dropout=0.0,
        scale_embedding=c.scale_embeddings,
        max_position_embeddings=c.max_positions,
        share_encoder_decoder_embeddings=c.share_embeddings,
        tie_word_embeddings=c.tie_output,
        pad_token_id=c.pad_id,
        eos_token_id=c.eos_id,
        bos_token_id=c.bos_id,
        decoder_start_token_id=c.bos_id,
        forced_eos_token_id=None,
    )


def generation_config(config: Config):
    """`generate`'s defaults: our special ids, PAD and BOS never generated, our beam size and our ban on repeated
    n-grams (decode.no_repeat_ngram is generate's no_repeat_ngram_size exactly; the length penalty is Hugging
    Face's own, length^alpha, so it is left at its default)."""
    c, decode = config.model, config.decode
    return _transformers().GenerationConfig(
        decoder_start_token_id=c.bos_id,
        bos_token_id=c.bos_id,
        eos_token_id=c.eos_id,
        pad_token_id=c.pad_id,
        forced_eos_token_id=None,
        bad_words_ids=[[i] for i in dict.fromkeys((c.pad_id, c.bos_id))],
        num_beams=decode.beam_size,
        max_length=c.max_positions,
        no_repeat_ngram_size=decode.no_repeat_ngram,
    )


def marian_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our weights under Marian's names, the residual stream permuted and scaled (see the module docstring)."""
    c = model.config
    perm, D = marian_permutation(c.d_model), c.d_model
    s = math.sqrt(MARIAN_EPS / c.layer_norm_eps)  # LayerNorm(s * z, MARIAN_EPS) == LayerNorm(z, ours)
    out: dict[str, torch.Tensor] = {}

    def reads(w: torch.Tensor, scale: float) -> torch.Tensor:  # (out, D), reading a stream `scale` times ours
        return (w[:, perm] / scale).contiguous()

    def writes(w: torch.Tensor, scale: float) -> torch.Tensor:  # (D, ...) or (D,), writing `scale` times ours
        return (w[perm] * scale).contiguous()

    def attention(prefix: str, attn, scale: float, memory_scale: float | None = None) -> None:
        w, b = attn.in_proj.weight, attn.in_proj.bias
        for i, name in enumerate("qkv"):
            read = scale if name == "q" or memory_scale is None else memory_scale
            out[f"{prefix}.{name}_proj.weight"] = reads(w[i * D : (i + 1) * D], read)
            out[f"{prefix}.{name}_proj.bias"] = b[i * D : (i + 1) * D].clone()
        out[f"{prefix}.out_proj.weight"] = writes(attn.out_proj.weight, scale)
        out[f"{prefix}.out_proj.bias"] = writes(attn.out_proj.bias, scale)

    def norm(prefix: str, module, scale: float) -> None:
        out[f"{prefix}.weight"], out[f"{prefix}.bias"] = writes(module.weight, scale), writes(module.bias, scale)

    def feed_forward(prefix: str, ff, scale: float) -> None:
        out[f"{prefix}.fc1.weight"] = reads(ff.linear1.weight, scale)
        out[f"{prefix}.fc1.bias"] = ff.linear1.bias.clone()
        out[f"{prefix}.fc2.weight"] = writes(ff.linear2.weight, scale)
        out[f"{prefix}.fc2.bias"] = writes(ff.linear2.bias, scale)

    # The embeddings enter each stack at our scale (1); every LayerNorm after the first writes s times ours,
    # so that all but the first of each stack see s times our input; the decoder's last writes ours again,
    # for the tied pre-softmax matrix.
    for i, layer in enumerate(model.encoder.layers):
        prefix, scale = f"model.encoder.layers.{i}", 1.0 if i == 0 else s
        attention(f"{prefix}.self_attn", layer.self_attn, scale)
        norm(f"{prefix}.self_attn_layer_norm", layer.norms[0], s)
        feed_forward(prefix, layer.feed_forward, s)
        norm(f"{prefix}.final_layer_norm", layer.norms[1], s)
    last = len(model.decoder.layers) - 1
    for i, layer in enumerate(model.decoder.layers):
        prefix, scale = f"model.decoder.layers.{i}", 1.0 if i == 0 else s
        attention(f"{prefix}.self_attn", layer.self_attn, scale)
        norm(f"{prefix}.self_attn_layer_norm", layer.norms[0], s)
        attention(f"{prefix}.encoder_attn", layer.cross_attn, s, memory_scale=s)
        norm(f"{prefix}.encoder_attn_layer_norm", layer.norms[1], s)
        feed_forward(prefix, layer.feed_forward, s)
        norm(f"{prefix}.final_layer_norm", layer.norms[2], 1.0 if i == last else s)
    src_embed, tgt_embed = reads(model.encoder.embed.tokens.weight, 1.0), reads(model.decoder.embed.tokens.weight, 1.0)
    if c.share_embeddings:
        out["model.shared.weight"] = src_embed
    out["model.encoder.embed_tokens.weight"] = src_embed
    out["model.decoder.embed_tokens.weight"] = tgt_embed
    out["lm_head.weight"] = reads(model.output_weight, 1.0)
    bias = model.logit_bias
    out["final_logits_bias"] = torch.zeros(1, c.tgt_vocab_size) if bias is None else bias.detach()[None].clone()
    return out


def to_marian(model: Transformer, config: Config):
    """A MarianMTModel computing what `model` computes, in eval mode."""
    check_exportable(config)
    transformers = _transformers()
    marian = transformers.MarianMTModel(marian_config(config))
    marian.generation_config = generation_config(config)
    missing, unexpected = marian.load_state_dict(marian_state_dict(model), strict=False)
    missing = [k for k in missing if not k.endswith("embed_positions.weight")]  # computed, not stored
    if missing or unexpected:
        raise ExportError(f"Marian did not take these weights (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return marian.eval()


def export_huggingface(model_dir: str | Path, out_dir: str | Path) -> Path:
    """Write `model_dir` as a Marian model and tokenizer that `from_pretrained(out_dir)` loads offline."""
    model, config = load_model(model_dir)
    check_exportable(config)
    tokenizer = Tokenizer.load(model_dir)
    check_output(out_dir, model_dir)
    marian = to_marian(model, config)
    with output_directory(out_dir, model_dir) as out:
        marian.save_pretrained(str(out))
        _save_tokenizer(tokenizer, config, Path(model_dir), out)
    return Path(out_dir)


def _save_tokenizer(tokenizer: Tokenizer, config: Config, model_dir: Path, out: Path) -> None:
    """The SentencePiece models and vocabularies MarianTokenizer reads, and its tokenizer_config.json."""
    if tokenizer.marian:  # imported from Marian: its own files
        tokenizer.save(out)
    else:
        names = Tokenizer.files(tokenizer.joint)
        shutil.copyfile(model_dir / names[0], out / "source.spm")
        shutil.copyfile(model_dir / names[-1], out / "target.spm")
    vocab = {piece: i for i, piece in enumerate(pieces(tokenizer.src))}
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    tokenizer_config = {
        "tokenizer_class": "MarianTokenizer",
        "model_max_length": config.model.max_positions,
        "unk_token": "<unk>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "separate_vocabs": not tokenizer.joint,
    }
    if not tokenizer.joint:
        target = {piece: i for i, piece in enumerate(pieces(tokenizer.tgt))}
        (out / "target_vocab.json").write_text(
            json.dumps(target, ensure_ascii=False, indent=0) + "\n", encoding="utf-8"
        )
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")
