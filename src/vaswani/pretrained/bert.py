"""BERT in (BertForMaskedLM, BertForSequenceClassification; BertForPreTraining and BertModel too): the
encoder-only model, with what BERT has beyond the paper's encoder made options.

- Post-norm layers, attention as ours; activation gelu (erf: model.activation gelu), relu, or gelu_new
  (gelu_tanh). Unscaled token embeddings (model.scale_embeddings false), learned positions, LayerNorm
  epsilon 1e-12 (model.layer_norm_eps).
- A LayerNorm over the summed embeddings (model.embedding_norm).
- The token type ("segment") embeddings: model.segments (type_vocab_size of them); one text is segment A, a
  sentence pair `[CLS] a [SEP] b [SEP]` (model.pairs: `vaswani classify --pairs`, fine-tuning on pairs) has
  segment B after its first [SEP], as BERT reads paraphrase, entailment and question-answer pairs.
- The masked-LM head: dense + activation + LayerNorm (model.output_transform) before the tied projection, whose
  bias is model.output_bias.
- A sequence classifier: the pooler (dense + tanh on [CLS]: model.pooler, model.pool first) and the classifier;
  its labels are config.json's id2label (finetune.labels), in class order.
- The classifier's framing `BOS text EOS` is `[CLS] text [SEP]`: model.bos_id is [CLS]'s id, eos_id [SEP]'s,
  pad_id [PAD]'s. The tokenizer is tokenizer.json, or made from vocab.txt (and tokenizer_config.json's
  do_lower_case) with the `tokenizers` library's BertWordPieceTokenizer.

Refused, in one line: position_embedding_type other than absolute, hidden_act other than gelu, relu and
gelu_new, is_decoder, add_cross_attention, an untied MLM output matrix, heads other than the above (token
classification, question answering, ...), regression and multi-label classifiers.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from vaswani.config import Config
from vaswani.pretrained import Checkpoint, PretrainedError, WeightMap, read_json, read_weights, same_tensor

ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
ARCHITECTURES = ("BertForMaskedLM", "BertForSequenceClassification", "BertForPreTraining", "BertModel")
SPECIAL = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]"}
TOKENIZER, TOKENIZER_CONFIG = "tokenizer.json", "tokenizer_config.json"
QKV = ("query", "key", "value")
# Tensors of a BERT checkpoint that vaswani's import leaves, and why: buffers that hold no weight, the pretraining
# heads and the pooler of a model imported as a masked language model (no sentence-level head reads them).
UNUSED = {
    r"(bert\.)?embeddings\.position_ids": "the positions buffer of older checkpoints",
    r"(bert\.)?embeddings\.token_type_ids": "the segment buffer of some checkpoints",
    r"cls\.seq_relationship\.(weight|bias)": "the next-sentence prediction head of BertForPreTraining",
    # read where the checkpoint is a classifier (model.pooler); a fine-tuned classifier starts its pooler anew
    r"(bert\.)?pooler\.dense\.(weight|bias)": "the pooler of a checkpoint imported as a masked language model",
}


def convert(src: Path, hf: dict) -> tuple[Config, dict[str, torch.Tensor], dict[str, Path | bytes]]:
    """Our config, our weights (by our names) and the tokenizer's files (tokenizer.json, made from vocab.txt where
    the checkpoint has none; tokenizer_config.json) of the BERT in `src`."""
    path = src / "config.json"
    _check_architecture(hf, path)
    weights = read_weights(src)
    prefix = "bert." if any(name.startswith("bert.") for name in weights) else ""
    mlm = "cls.predictions.transform.dense.weight" in weights
    labels = _labels(hf, path) if "classifier.weight" in weights else None
    tokenizer, vocab = _tokenizer(src)
    ids = _special_ids(src, vocab)
    model = model_section(hf, path, ids, mlm, labels)
    if max(vocab.values()) + 1 > model["src_vocab_size"]:
        raise PretrainedError(
            f"{src}: the tokenizer numbers {max(vocab.values()) + 1} pieces but the model's embedding has "
            f"{model['src_vocab_size']} rows; the tokenizer files and the weights do not belong together"
        )
    data = {"block_size": min(model["max_positions"], 512)}  # what a classifier reads: [CLS] text [SEP], cut
    finetune = {"labels": labels} if labels else {}
    config = Config.from_dict({"model": model, "data": data, "finetune": finetune})
    files = {TOKENIZER: tokenizer}
    if (src / TOKENIZER_CONFIG).is_file():  # read by the tokenizer for clean_up_tokenization_spaces
        files[TOKENIZER_CONFIG] = src / TOKENIZER_CONFIG
    return config, convert_weights(weights, config, prefix, src), files


def _check_architecture(hf: dict, path: Path) -> None:
    for flag in ("is_decoder", "add_cross_attention"):
        if hf.get(flag):
            raise PretrainedError(f"{path}: {flag}: true is not supported (vaswani imports BERT as an encoder)")
    kind = hf.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise PretrainedError(
            f"{path}: position_embedding_type {kind!r} is not supported; vaswani imports absolute positions"
        )
    activation = hf.get("hidden_act", "gelu")
    if activation not in ACTIVATIONS:
        raise PretrainedError(
            f"{path}: hidden_act {activation!r} is not supported; vaswani takes {', '.join(ACTIVATIONS)}"
        )
    for architecture in hf.get("architectures") or []:
        if architecture not in ARCHITECTURES:
            raise PretrainedError(
                f"{path}: architecture {architecture} cannot be imported; vaswani imports {', '.join(ARCHITECTURES)}"
            )


def _labels(hf: dict, path: Path) -> list[str]:
    """The classifier's labels in class order (config.json's id2label)."""
    problem = hf.get("problem_type")
    if problem not in (None, "single_label_classification"):
        raise PretrainedError(f"{path}: problem_type {problem} is not supported; vaswani imports softmax classifiers")
    id2label = {int(i): str(label) for i, label in (hf.get("id2label") or {}).items()}
    n = len(id2label)
    if n < 2 or sorted(id2label) != list(range(n)):
        raise PretrainedError(f"{path}: id2label must number two or more labels 0, 1, ..., got {hf.get('id2label')}")
    if len(set(id2label.values())) != n:
        raise PretrainedError(f"{path}: id2label names a label twice ({hf.get('id2label')})")
    return [id2label[i] for i in range(n)]


def model_section(hf: dict, path: Path, ids: dict[str, int], mlm: bool, labels: list[str] | None) -> dict:
    """ModelConfig fields from a BertConfig's config.json and the tokenizer's special ids."""
    try:
        vocab = hf["vocab_size"]
        return {
            "type": "encoder_only",
            "src_vocab_size": vocab,
            "tgt_vocab_size": vocab,
            "d_model": hf["hidden_size"],
            "n_heads": hf["num_attention_heads"],
            "d_ff": hf["intermediate_size"],
            "n_layers": hf["num_hidden_layers"],
            "dropout": hf.get("hidden_dropout_prob", 0.1),
            "attention_dropout": hf.get("attention_probs_dropout_prob", 0.1),
            "activation": ACTIVATIONS[hf.get("hidden_act", "gelu")],
            "norm_first": False,
            "positions": "learned",
            "max_positions": hf.get("max_position_embeddings", 512),
            "share_embeddings": True,
            "tie_output": bool(hf.get("tie_word_embeddings", True)),  # false: the MLM head's own decoder matrix
            "scale_embeddings": False,
            "layer_norm_eps": hf.get("layer_norm_eps", 1e-12),
            "embedding_norm": True,
            "segments": hf.get("type_vocab_size", 2),
            "output_transform": mlm,
            "output_bias": mlm,
            "pad_id": ids["pad_token"],
            "bos_id": ids["cls_token"],
            "eos_id": ids["sep_token"],
            "n_classes": len(labels) if labels else 0,
            "pool": "first" if labels else "auto",
            "pooler": bool(labels),
        }
    except KeyError as missing:
        raise PretrainedError(f"{path} has no {missing.args[0]}; is it a BertConfig?") from None


def _tokenizer(src: Path) -> tuple[Path | bytes, dict[str, int]]:
    """tokenizer.json (its path; its bytes where it pads or truncates), or one made from vocab.txt (its bytes);
    and the vocabulary {piece: id}."""
    if (src / TOKENIZER).is_file():
        spec = read_json(src / TOKENIZER)
        vocab = (spec.get("model") or {}).get("vocab")
        if not isinstance(vocab, dict) or not vocab:
            raise PretrainedError(f"{src / TOKENIZER} holds no WordPiece vocabulary; is it a BERT tokenizer?")
        vocab = {**vocab, **{t["content"]: t["id"] for t in spec.get("added_tokens") or []}}
        if spec.get("padding") or spec.get("truncation"):  # a tokenizer saved after a padded call keeps padding
            spec = {**spec, "padding": None, "truncation": None}  # vaswani encodes texts, pads batches itself
            return json.dumps(spec, ensure_ascii=False).encode("utf-8"), vocab
        return src / TOKENIZER, vocab
    if not (src / "vocab.txt").is_file():
        raise PretrainedError(f"{src / 'vocab.txt'} not found: a BERT tokenizer needs {TOKENIZER} or vocab.txt")
    try:
        from tokenizers import BertWordPieceTokenizer
    except ImportError:
        raise PretrainedError(
            f"{src} has vocab.txt but no {TOKENIZER}; making one needs the tokenizers library (pip install tokenizers)"
        ) from None

    options = read_json(src / TOKENIZER_CONFIG, {})
    lowercase = bool(options.get("do_lower_case", True))
    strip_accents = options.get("strip_accents")  # None: as lowercase (BertTokenizer's rule)
    try:
        tokenizer = BertWordPieceTokenizer(
            str(src / "vocab.txt"),
            lowercase=lowercase,
            strip_accents=strip_accents,
            handle_chinese_chars=bool(options.get("tokenize_chinese_chars", True)),
            **{key: options.get(key, piece) for key, piece in {**SPECIAL, "unk_token": "[UNK]"}.items()},
        )
    except Exception as error:  # the Rust side raises its own kinds for a vocabulary it cannot read
        raise PretrainedError(f"{src / 'vocab.txt'} is not a WordPiece vocabulary ({error})") from None
    return tokenizer.to_str().encode("utf-8"), tokenizer.get_vocab()


def _special_ids(src: Path, vocab: dict[str, int]) -> dict[str, int]:
    """The ids of [CLS], [SEP], [PAD] and [MASK] (as tokenizer_config.json names them, else BERT's names)."""
    options = read_json(src / TOKENIZER_CONFIG, {})
    ids = {}
    for key, default in SPECIAL.items():
        piece = options.get(key, default)
        piece = piece.get("content", default) if isinstance(piece, dict) else piece
        if piece not in vocab:
            raise PretrainedError(f"{src}: the tokenizer has no {piece!r} ({key}); is it a BERT tokenizer?")
        ids[key] = vocab[piece]
    return ids


def convert_weights(hf: Checkpoint, config: Config, prefix: str, src: Path) -> dict[str, torch.Tensor]:
    """BERT's weights under our names."""
    c = config.model
    D, F, V, P = c.d_model, c.d_ff, c.src_vocab_size, c.max_positions
    weights = WeightMap(hf, src, D)
    out, get, linear, norm = weights.out, weights.get, weights.linear, weights.norm

    embeddings = f"{prefix}embeddings"
    out["encoder.embed.tokens.weight"] = get(f"{embeddings}.word_embeddings.weight", (V, D))
    out["encoder.embed.segments"] = get(f"{embeddings}.token_type_embeddings.weight", (c.segments, D))
    out["encoder.embed.positions.weight"] = get(f"{embeddings}.position_embeddings.weight", (P, D))
    norm("encoder.embed.norm", f"{embeddings}.LayerNorm")
    for i in range(c.n_layers):
        ours, theirs = f"encoder.layers.{i}", f"{prefix}encoder.layer.{i}"
        attention = f"{theirs}.attention"
        out[f"{ours}.self_attn.in_proj.weight"] = torch.cat([get(f"{attention}.self.{p}.weight", (D, D)) for p in QKV])
        out[f"{ours}.self_attn.in_proj.bias"] = torch.cat([get(f"{attention}.self.{p}.bias", (D,)) for p in QKV])
        linear(f"{ours}.self_attn.out_proj", f"{attention}.output.dense", D, D)
        norm(f"{ours}.norms.0", f"{attention}.output.LayerNorm")
        linear(f"{ours}.feed_forward.linear1", f"{theirs}.intermediate.dense", F, D)
        linear(f"{ours}.feed_forward.linear2", f"{theirs}.output.dense", D, F)
        norm(f"{ours}.norms.1", f"{theirs}.output.LayerNorm")
    if c.output_transform:
        linear("output_transform.dense", "cls.predictions.transform.dense", D, D)
        norm("output_transform.norm", "cls.predictions.transform.LayerNorm")
        out["output_bias"] = get("cls.predictions.bias", (V,))
        same_tensor(hf, "cls.predictions.decoder.bias", "cls.predictions.bias", src, "transformers ties them")
        if c.tie_output:
            why = "tie_word_embeddings: true ties them (set it to false in config.json to import the decoder)"
            same_tensor(hf, "cls.predictions.decoder.weight", f"{embeddings}.word_embeddings.weight", src, why)
        else:
            out["output_weight"] = get("cls.predictions.decoder.weight", (V, D))
    if c.n_classes:
        linear("pooler", f"{prefix}pooler.dense", D, D)
        linear("classifier", "classifier", c.n_classes, D)
    hf.account("BERT", UNUSED, src)
    return out
