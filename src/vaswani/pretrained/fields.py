"""What the fields of a checkpoint's config.json and generation_config.json may hold, checked as they are read: a
field of another type (a hand edit, another tool's file, a damaged download) is refused in one line naming the file
and the field, before it becomes one of vaswani's settings under another name."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _int(value: Any) -> bool:
    return type(value) is int


def _number(value: Any) -> bool:
    return type(value) in (int, float) and value == value and abs(value) != float("inf")


def _ids(value: Any) -> bool:
    return isinstance(value, list) and all(_int(i) and i >= 0 for i in value)


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
PROBABILITIES = ["dropout", "attention_dropout", "activation_dropout"]
FLAGS = [
    "scale_embedding",
    "tie_word_embeddings",
    "share_encoder_decoder_embeddings",
    "normalize_before",
    "add_final_layer_norm",
    "normalize_embedding",
    "static_position_embeddings",
    "add_bias_logits",
]
NUMBERS = ["length_penalty", "layer_norm_eps", "layer_norm_epsilon"]
NAMES = ["model_type", "activation_function", "hidden_act"]
RULES: dict[str, tuple[str, Any]] = {
    **{name: ("a whole number of at least 1", lambda v: _int(v) and v >= 1) for name in COUNTS},
    **{name: ("a token id (a whole number of at least 0)", lambda v: _int(v) and v >= 0) for name in IDS},
    **{name: ("a number from 0 to 1", lambda v: _number(v) and 0 <= v <= 1) for name in PROBABILITIES},
    **{name: ("true or false", lambda v: isinstance(v, bool)) for name in FLAGS},
    **{name: ("a number", _number) for name in NUMBERS},
    **{name: ("a name", lambda v: isinstance(v, str) and v != "") for name in NAMES},
    "early_stopping": ('true, false or "never"', lambda v: isinstance(v, bool) or v == "never"),
    "no_repeat_ngram_size": ("a whole number of at least 0", lambda v: _int(v) and v >= 0),
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

    def __getitem__(self, name: str) -> Any:
        """A field the layout needs: set, and not null."""
        from vaswani.pretrained import PretrainedError

        value = self.get(name)
        if value is None:
            raise PretrainedError(f"{self.path} has no {name}, which this model needs; download the file again")
        return value
