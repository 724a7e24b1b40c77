"""What the fields of a checkpoint's config.json, generation_config.json and tokenizer settings (CHECKED) may hold,
checked as they are read: a field of another type or out of bounds (a hand edit, another tool's file, a damaged
download) is refused in one line naming the file and the field, before it becomes one of vaswani's settings under
another name, a traceback or a model that computes NaN."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHECKED = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json")


def _int(value: Any) -> bool:
    return type(value) is int


def _number(value: Any) -> bool:
    return type(value) in (int, float) and value == value and abs(value) != float("inf")


def _ids(value: Any) -> bool:
    return isinstance(value, list) and all(_int(i) and i >= 0 for i in value)


def _token(value: Any) -> bool:
    """A special token as tokenizer files write it: its text, or an object holding it (transformers' AddedToken)."""
    return isinstance(value, str) or (isinstance(value, dict) and isinstance(value.get("content"), str))


def _numbered(value: Any) -> bool:
    return isinstance(value, dict) and all(key.isdigit() for key in value)


# the fields the layouts read, by what they must hold
COUNTS = [
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "vocab_size",
    "decoder_vocab_size",
    "max_position_embeddings",
    "n_embd",
    "n_layer",
    "n_head",
    "n_positions",
    "n_inner",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "type_vocab_size",
    "num_beams",
    "max_length",
    "max_new_tokens",
]
IDS = [
    "pad_token_id",
    "eos_token_id",
    "bos_token_id",
    "decoder_start_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
]
PROBABILITIES = ["dropout", "attention_dropout", "activation_dropout", "hidden_dropout_prob"]
PROBABILITIES += ["attention_probs_dropout_prob", "attn_pdrop", "resid_pdrop", "embd_pdrop"]
FLAGS = [
    "scale_embedding",
    "tie_word_embeddings",
    "share_encoder_decoder_embeddings",
    "normalize_before",
    "add_final_layer_norm",
    "normalize_embedding",
    "static_position_embeddings",
    "add_bias_logits",
    "legacy_behaviour",
    "do_lower_case",
    "tokenize_chinese_chars",
]
NUMBERS = ["length_penalty"]
NAMES = ["model_type", "activation_function", "hidden_act", "position_embedding_type", "problem_type"]
NAMES += ["tokenizer_class", "language_codes", "spm_file", "vocab_file", "src_lang", "tgt_lang"]
TOKENS = ["bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"]
MOST, POSITIONS = 2**24, 2**20  # beyond any checkpoint's sizes: a damaged number, not a model to build
RULES: dict[str, tuple[str, Any]] = {
    **{name: (f"a whole number from 1 to {MOST:,}", lambda v: _int(v) and 1 <= v <= MOST) for name in COUNTS},
    # positions a table is computed for (M2M-100's, Marian's sinusoids): bounded so that it fits in memory
    **{
        name: (f"a whole number from 1 to {POSITIONS:,}", lambda v: _int(v) and 1 <= v <= POSITIONS)
        for name in ("max_position_embeddings", "n_positions")
    },
    **{name: ("a token id (a whole number of at least 0)", lambda v: _int(v) and v >= 0) for name in IDS},
    **{name: ("a number from 0 to 1", lambda v: _number(v) and 0 <= v <= 1) for name in PROBABILITIES},
    **{name: ("true or false", lambda v: isinstance(v, bool)) for name in FLAGS},
    **{name: ("a number", _number) for name in NUMBERS},
    **{name: ("a number above 0", lambda v: _number(v) and v > 0) for name in ("layer_norm_eps", "layer_norm_epsilon")},
    **{name: ("a name", lambda v: isinstance(v, str) and v != "") for name in NAMES},
    "early_stopping": ('true, false or "never"', lambda v: isinstance(v, bool) or v == "never"),
    "no_repeat_ngram_size": ("a whole number of at least 0", lambda v: _int(v) and v >= 0),
    **{name: ("a token's text", _token) for name in TOKENS},
    "id2label": ('an object of labels by number ({"0": "negative", "1": "positive"})', _numbered),
    "bad_words_ids": ("a list of lists of token ids", lambda v: isinstance(v, list) and all(map(_ids, v))),
}


class Fields(dict):
    """A checkpoint's JSON file as read (`path`): every field the layouts read checked against RULES (None stands
    for "not set"), and a field the layout needs but the file lacks (or sets to null) refused naming both, not a
    KeyError."""

    def __init__(self, data: dict, path: Path) -> None:
        from vaswani.pretrained import PretrainedError

        super().__init__(data)
        self.path = path
        for name, value in data.items():
            what, fits = RULES.get(name, ("", None))
            if fits is not None and value is not None and not fits(value):
                shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:40]}..."
                raise PretrainedError(
                    f"{path}: {name} is {shown}, where it must be {what}; fix the value or download the file again"
                )

    def get(self, name: str, default: Any = None) -> Any:
        """A field's value; `default` where it is absent or null (as written by a tool that writes every field)."""
        value = super().get(name)
        return default if value is None else value

    def __getitem__(self, name: str) -> Any:
        """A field the layout needs: set, and not null."""
        from vaswani.pretrained import PretrainedError

        value = self.get(name)
        if value is None:
            raise PretrainedError(f"{self.path} has no {name}, which this model needs; download the file again")
        return value
