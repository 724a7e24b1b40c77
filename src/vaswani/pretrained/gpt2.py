"""GPT2LMHeadModel in: a decoder-only language model (model.type decoder_only), with what GPT-2 does made options.

- Pre-norm layers and a final LayerNorm (model.norm_first), LayerNorm epsilon from config.json (1e-5).
- Activation gelu_new, the tanh approximation (model.activation gelu_tanh); gelu and relu as the config says.
- Learned positions, n_positions of them (model.positions learned, model.max_positions); token embeddings not
  scaled by sqrt(d_model) (model.scale_embeddings false); the LM head is the token embedding (tied).
- Conv1D weights are stored (in, out): transposed into our Linear's (out, in). c_attn's columns are q, k, v,
  as our in_proj's rows.
- One special token, <|endoftext|>: it starts (bos_token_id), ends (eos_token_id) and, GPT-2 having no padding
  token, pads. model.pad_id = bos_id = eos_id is its id (config/model.py allows the three equal for a
  decoder-only model); the search then bans nothing, so the model may write <|endoftext|>, where generation
  stops, as transformers' generate does.
- data.block_size = n_positions: generation sees the whole context GPT-2 was trained on.
- Ids are the tokenizer's (tokenizer.json, or vocab.json + merges.txt; data/hf_tokenizer.py). Newlines are text
  to it, so `vaswani generate` reads and writes them as tokens (Tokenizer.text_newlines).

Refused, in one line: scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, scale_attn_weights false,
add_cross_attention, untied LM heads, activations other than gelu_new, gelu and relu.
"""

from __future__ import annotations

from pathlib import Path

import torch

from vaswani.config import Config
from vaswani.data.corpus import DataError
from vaswani.data.hf_tokenizer import BPE_FILES, TOKENIZER_CONFIG, TOKENIZER_JSON, HfPieces
from vaswani.pretrained import Checkpoint, PretrainedError, read_weights, same_tensor, take

# Tensors of a GPT-2 checkpoint that hold no weight: the causal mask buffers older versions saved with each layer.
UNUSED = {r"(transformer\.)?h\.\d+\.attn\.(masked_)?bias": "attention mask buffers"}
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
# config.json settings whose non-default value changes the computation in a way vaswani does not follow
REFUSED = {
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "scale_attn_weights": True,
    "add_cross_attention": False,
}


def model_section(hf: dict, path: Path) -> dict:
    """ModelConfig fields from a GPT2Config's config.json; a one-line refusal for what has no equivalent."""
    for name, supported in REFUSED.items():
        if hf.get(name, supported) != supported:
            raise PretrainedError(f"{path}: {name}: {hf[name]} is not supported (vaswani imports {name}: {supported})")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        raise PretrainedError(
            f"{path}: activation_function {activation!r} is not supported; vaswani takes {', '.join(ACTIVATIONS)}"
        )
    try:
        d_model, vocab = hf["n_embd"], hf["vocab_size"]
        eos = hf.get("eos_token_id", vocab - 1)
        if not isinstance(eos, int):
            raise PretrainedError(f"{path}: eos_token_id {eos!r} must be one id (vaswani models have one EOS)")
        bos = hf.get("bos_token_id", eos)
        pad = hf.get("pad_token_id")
        return {
            "type": "decoder_only",
            "src_vocab_size": vocab,
            "tgt_vocab_size": vocab,
            "d_model": d_model,
            "n_heads": hf["n_head"],
            "d_ff": hf.get("n_inner") or 4 * d_model,
            "n_layers": hf["n_layer"],
            "dropout": hf.get("resid_pdrop", 0.1),
            "attention_dropout": hf.get("attn_pdrop", 0.1),
            "activation": ACTIVATIONS[activation],
            "norm_first": True,
            "positions": "learned",
            "max_positions": hf["n_positions"],
            "share_embeddings": True,
            "tie_output": bool(hf.get("tie_word_embeddings", True)),  # false: lm_head.weight is its own matrix
            "scale_embeddings": False,
            "output_bias": False,
            "layer_norm_eps": hf.get("layer_norm_epsilon", 1e-5),
            "pad_id": eos if pad is None else pad,  # no padding token: <|endoftext|> pads (module docstring)
            "bos_id": eos if bos is None else bos,
            "eos_id": eos,
        }
    except KeyError as missing:
        raise PretrainedError(f"{path} has no {missing.args[0]}; is it a GPT2Config?") from None


def tokenizer_files(src: Path) -> dict[str, Path]:
    """tokenizer.json, or else vocab.json and merges.txt (with tokenizer_config.json where present)."""
    names = [TOKENIZER_JSON] if (src / TOKENIZER_JSON).is_file() else list(BPE_FILES)
    for name in names:
        if not (src / name).is_file():
            raise PretrainedError(
                f"{src / name} not found: a GPT-2 tokenizer needs {TOKENIZER_JSON}, or {' and '.join(BPE_FILES)}"
            )
    if (src / TOKENIZER_CONFIG).is_file():
        names.append(TOKENIZER_CONFIG)
    return {name: src / name for name in names}


def convert(src: Path, hf: dict) -> tuple[Config, dict[str, torch.Tensor], dict[str, Path]]:
    """Our config, our weights (by our names) and the tokenizer files of the GPT-2 model in `src`."""
    path = src / "config.json"
    model = model_section(hf, path)
    files = tokenizer_files(src)
    config = Config.from_dict({"model": model, "data": {"block_size": model["max_positions"]}})
    weights = convert_weights(read_weights(src), config, src)
    _check_tokenizer(src, config)
    return config, weights, files


def convert_weights(hf: Checkpoint, config: Config, src: Path) -> dict[str, torch.Tensor]:
    """GPT-2's weights under our names: Conv1D's (in, out) matrices transposed into Linear's (out, in)."""
    c = config.model
    D, F, V, P = c.d_model, c.d_ff, c.tgt_vocab_size, c.max_positions
    # GPT2LMHeadModel saves its stack under transformer.; GPT2Model (OpenAI's original upload) without a prefix
    prefix = "transformer." if "transformer.wte.weight" in hf else ""
    out: dict[str, torch.Tensor] = {}

    def get(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        return take(hf, prefix + name, shape, src)

    def conv1d(ours: str, theirs: str, n_in: int, n_out: int) -> None:
        out[f"{ours}.weight"] = get(f"{theirs}.weight", (n_in, n_out)).t().contiguous()
        out[f"{ours}.bias"] = get(f"{theirs}.bias", (n_out,))

    def norm(ours: str, theirs: str) -> None:
        out[f"{ours}.weight"] = get(f"{theirs}.weight", (D,))
        out[f"{ours}.bias"] = get(f"{theirs}.bias", (D,))

    for i in range(c.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"h.{i}"
        norm(f"{ours}.norms.0", f"{theirs}.ln_1")
        conv1d(f"{ours}.self_attn.in_proj", f"{theirs}.attn.c_attn", D, 3 * D)
        conv1d(f"{ours}.self_attn.out_proj", f"{theirs}.attn.c_proj", D, D)
        norm(f"{ours}.norms.1", f"{theirs}.ln_2")
        conv1d(f"{ours}.feed_forward.linear1", f"{theirs}.mlp.c_fc", D, F)
        conv1d(f"{ours}.feed_forward.linear2", f"{theirs}.mlp.c_proj", F, D)
    norm("decoder.norm", "ln_f")
    out["decoder.embed.tokens.weight"] = get("wte.weight", (V, D))
    out["decoder.embed.positions.weight"] = get("wpe.weight", (P, D))
    if c.tie_output:
        why = "tie_word_embeddings: true ties them (set it to false in config.json to import lm_head)"
        same_tensor(hf, "lm_head.weight", prefix + "wte.weight", src, why)
    else:
        out["output_weight"] = take(hf, "lm_head.weight", (V, D), src)
    hf.account("GPT-2", UNUSED, src)
    return out


def _check_tokenizer(src: Path, config: Config) -> None:
    """The tokenizer must read, number no more pieces than the embedding has rows, and know the special id."""
    try:
        pieces = HfPieces.load(src)
    except DataError as error:
        raise PretrainedError(str(error)) from None
    name = TOKENIZER_JSON if (src / TOKENIZER_JSON).is_file() else BPE_FILES[0]
    c = config.model
    if pieces.get_piece_size() > c.tgt_vocab_size:
        raise PretrainedError(
            f"{src / name} numbers {pieces.get_piece_size()} pieces but the model's embedding has "
            f"{c.tgt_vocab_size} rows; the tokenizer files and the weights do not belong together"
        )
    if pieces.id_to_piece(c.eos_id) is None:
        raise PretrainedError(f"{src / name} has no token {c.eos_id} (config.json's eos_token_id)")
