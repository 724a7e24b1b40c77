"""A CTranslate2 model directory built with CTranslate2's own model specification API.

The specification is filled layer by layer from our weights: post-norm (or pre-norm with the final
LayerNorm), our sinusoid table given explicitly (CTranslate2's built-in one puts all sines before all
cosines; ours interleave them), embeddings scaled by sqrt(d_model), the pre-softmax projection tied to
the target embedding, our LayerNorm epsilon, the vocabulary of our SentencePiece model(s) with EOS
appended to every source by CTranslate2 itself. The SentencePiece model(s) are copied alongside, so

    translator = ctranslate2.Translator(OUT_DIR)
    sp = sentencepiece.SentencePieceProcessor(model_file=OUT_DIR + "/tokenizer.model")
    result = translator.translate_batch([sp.encode(text, out_type=str)])

needs nothing from vaswani. Needs the `ctranslate2` package: pip install 'vaswani[ct2]'.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import numpy as np
import torch

from vaswani import atomic
from vaswani.config import ModelConfig
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.ct2_engine import DIRECTORY, STAMP, current, stamp
from vaswani.decode.engine import CT2_TYPES
from vaswani.export import ExportError, check_output, output_directory, pieces
from vaswani.model_dir import load_model
from vaswani.nn import Transformer
from vaswani.nn.embedding import sinusoid_table
from vaswani.special import BOS, EOS, PAD


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise ImportError("export to CTranslate2 needs the ctranslate2 package: pip install 'vaswani[ct2]'") from None
    return ctranslate2


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().contiguous().numpy()


def _linear(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = _array(weight)
    if bias is not None:
        spec.bias = _array(bias)


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _attention_self(spec, attn) -> None:
    _linear(spec.linear[0], attn.in_proj.weight, attn.in_proj.bias)  # W^Q, W^K, W^V stacked, as CTranslate2 wants
    _linear(spec.linear[1], attn.out_proj.weight, attn.out_proj.bias)


def _attention_cross(spec, attn) -> None:
    D = attn.d_model
    _linear(spec.linear[0], attn.in_proj.weight[:D], attn.in_proj.bias[:D])  # W^Q
    _linear(spec.linear[1], attn.in_proj.weight[D:], attn.in_proj.bias[D:])  # W^K, W^V
    _linear(spec.linear[2], attn.out_proj.weight, attn.out_proj.bias)


def _feed_forward(spec, layer) -> None:
    _linear(spec.linear_0, layer.feed_forward.linear1.weight, layer.feed_forward.linear1.bias)
    _linear(spec.linear_1, layer.feed_forward.linear2.weight, layer.feed_forward.linear2.bias)
    _norm(spec.layer_norm, layer.norms[-1])


def _positions(stack, c: ModelConfig) -> np.ndarray:
    if c.positions == "learned":
        return _array(stack.embed.positions.weight)
    return _array(sinusoid_table(c.max_positions, c.d_model))  # our interleaved table, up to max_positions


def build_spec(model: Transformer, tokenizer: Tokenizer):
    """The CTranslate2 TransformerSpec holding `model`'s weights and `tokenizer`'s vocabularies."""
    _ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    c = model.config
    activations = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "gelu_tanh": common_spec.Activation.GELUTanh,
        "silu": common_spec.Activation.SWISH,
    }
    activation = activations[c.activation]
    spec = transformer_spec.TransformerSpec.from_config(
        (c.n_layers, c.decoder_layers),
        c.n_heads,
        pre_norm=c.norm_first,
        no_final_norm=not c.norm_first,
        activation=activation,
        layernorm_embedding=c.embedding_norm,  # mBART's, after the positions are added (ours too)
    )
    encoder, decoder = model.encoder, model.decoder
    spec.encoder.embeddings[0].weight = _array(encoder.embed.tokens.weight)
    spec.encoder.scale_embeddings = c.scale_embeddings  # §3.4: embeddings times sqrt(d_model)
    spec.encoder.position_encodings.encodings = _positions(encoder, c)
    for layer_spec, layer in zip(spec.encoder.layer, encoder.layers, strict=True):
        _attention_self(layer_spec.self_attention, layer.self_attn)
        _norm(layer_spec.self_attention.layer_norm, layer.norms[0])
        _feed_forward(layer_spec.ffn, layer)
    spec.decoder.embeddings.weight = _array(decoder.embed.tokens.weight)
    spec.decoder.scale_embeddings = c.scale_embeddings
    spec.decoder.position_encodings.encodings = _positions(decoder, c)
    _linear(spec.decoder.projection, model.output_weight, model.logit_bias)
    for layer_spec, layer in zip(spec.decoder.layer, decoder.layers, strict=True):
        _attention_self(layer_spec.self_attention, layer.self_attn)
        _norm(layer_spec.self_attention.layer_norm, layer.norms[0])
        _attention_cross(layer_spec.attention, layer.cross_attn)
        _norm(layer_spec.attention.layer_norm, layer.norms[1])
        _feed_forward(layer_spec.ffn, layer)
    if c.norm_first:
        _norm(spec.encoder.layer_norm, encoder.norm)
        _norm(spec.decoder.layer_norm, decoder.norm)
    if c.embedding_norm:
        _norm(spec.encoder.layernorm_embedding, encoder.embed.norm)
        _norm(spec.decoder.layernorm_embedding, decoder.embed.norm)

    src_vocab = _rows(pieces(tokenizer.src), c.src_vocab_size)
    tgt_vocab = _rows(pieces(tokenizer.tgt), c.tgt_vocab_size)
    for name, vocab in (("source", src_vocab), ("target", tgt_vocab)):
        # A decoder starting from PAD (Marian's) has no BOS of its own.
        expected = {c.bos_id: BOS, c.pad_id: PAD, c.eos_id: EOS}
        wrong = {i: vocab[i] for i, piece in expected.items() if i >= len(vocab) or vocab[i] != piece}
        if wrong:
            raise ExportError(f"the {name} vocabulary has {wrong} where CTranslate2 needs {expected}")
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.add_source_eos = c.source_eos  # as our encoder reads a source: EOS appended (or written: legacy NLLB)
    spec.config.decoder_start_token = tgt_vocab[c.bos_id]
    spec.config.layer_norm_epsilon = c.layer_norm_eps
    return spec


def _rows(vocab: list[str], rows: int) -> list[str]:
    """One piece per embedding row: where the model has more rows than its tokenizer has pieces (NLLB-200: 256,206
    rows, 256,204 tokens), the rest are named as CTranslate2's own converter names them (madeupword0, ...)."""
    return vocab + [f"madeupword{i}" for i in range(rows - len(vocab))]


def export_ctranslate2(model_dir: str | Path, out_dir: str | Path, quantization: str | None = None) -> Path:
    """Convert `model_dir` into a CTranslate2 model directory (weights in `quantization`, default float32)."""
    check_output(out_dir, model_dir)
    spec, tokenizer = _spec(model_dir, quantization)
    with output_directory(out_dir, model_dir) as out:
        _save(spec, tokenizer, out)
    return Path(out_dir)


def _spec(model_dir: str | Path, quantization: str | None):
    """The model's CTranslate2 specification, validated and in `quantization`, and its tokenizer."""
    if quantization is not None and quantization not in CT2_TYPES:
        raise ExportError(f"--quantization {quantization} is not one of {', '.join(CT2_TYPES)}")
    _ctranslate2()
    model, _ = load_model(model_dir)
    tokenizer = Tokenizer.load(model_dir)
    spec = build_spec(model, tokenizer)
    spec.validate()
    spec.optimize(quantization=quantization)
    return spec, tokenizer


def _save(spec, tokenizer: Tokenizer, out: Path) -> None:
    """The model and its tokenizer into `out`, a temporary directory that is renamed into place when complete."""
    spec.save(str(out))
    tokenizer.save(out)


def converted(model_dir: str | Path) -> Path:
    """MODEL_DIR/ctranslate2 (what `--engine ctranslate2` runs), converted in float32 where it is missing or was
    made from other weights or by other versions (decode.ct2_engine.stamp).

    Processes converting at once take turns (a lock file); a directory there that this function did not
    make (no stamp) is left alone and reported."""
    model_dir = Path(model_dir)
    target = model_dir / DIRECTORY
    with open(model_dir / ".ctranslate2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists() and not (target / STAMP).is_file():
            raise ValueError(
                f"{target} exists but was not made by --engine ctranslate2; move it elsewhere (export "
                "into a directory of your own with `vaswani export`)"
            )
        if current(model_dir) is not None:
            return target
        spec, tokenizer = _spec(model_dir, None)
        # the stale conversion exchanged for the new one in one step (vaswani.atomic): never one half deleted
        # under its stamp, never none while a translator looks
        with atomic.building(target) as tmp:
            _save(spec, tokenizer, tmp)
            (tmp / STAMP).write_text(json.dumps(stamp(model_dir)) + "\n")
    return target
