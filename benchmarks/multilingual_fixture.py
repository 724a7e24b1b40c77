"""Random checkpoints of NLLB-200-distilled-600M's and mBART-50-many-to-many's shapes, laid out as the hub's.

    python benchmarks/multilingual_fixture.py nllb runs/nllb_shaped       # ~2.5 GB written, a minute
    vaswani import runs/nllb_shaped runs/nllb                              # as a user imports the real one

Nothing can be downloaded here, so the weights are random (the speed is the shape's) and the tokenizer is the tests'
(tests/helpers/multilingual_models.py: a SentencePiece model trained on Multi30k, converted by transformers'
NllbTokenizer or MBart50Tokenizer) widened to the hub's size: filler pieces, which no text produces, take the
numbers up to where the hub's language codes start, so the codes, <mask> and the output layer have the hub's
numbers and width (NLLB: 256,204 tokens over 256,206 embedding rows; mBART-50: 250,054 over 250,054).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.multilingual_models import _tokenizer

# the hub's config.json values (facebook/nllb-200-distilled-600M, facebook/mbart-large-50-many-to-many-mmt)
SHAPES = {
    "nllb": {"kind": "nllb", "tokens": 256_204, "rows": 256_206, "activation": "relu"},
    "mbart": {"kind": "mbart50", "tokens": 250_054, "rows": 250_054, "activation": "gelu"},
}
LANGUAGES = {"nllb": ("deu_Latn", "eng_Latn"), "mbart": ("de_DE", "en_XX")}  # (source, target) of the race


def widened(tokenizer_json: dict, tokens: int) -> dict:
    """`tokenizer_json` (tokenizers' format) with filler pieces after its model's own, so that it holds `tokens`
    tokens: every added token (specials after the pieces, language codes, <mask>) moves up by as many, in the
    added tokens and in the post-processor's template alike."""
    model = tokenizer_json["model"]
    own = len(model["vocab"])
    added = [t for t in tokenizer_json["added_tokens"] if t["id"] >= own]
    extra = tokens - own - len(added)
    fillers = [f"\u2581filler{i}" for i in range(extra)]
    if isinstance(model["vocab"], dict):  # BPE (NLLB): piece -> number, no merge reaches a filler
        model["vocab"].update({piece: own + i for i, piece in enumerate(fillers)})
    else:  # Unigram (mBART-50): [piece, log-probability], a filler never the likeliest
        model["vocab"].extend([piece, -99.0] for piece in fillers)
    for token in added:
        token["id"] += extra
    for special in (tokenizer_json.get("post_processor") or {}).get("special_tokens", {}).values():
        special["ids"] = [i + extra if i >= own else i for i in special["ids"]]
    return tokenizer_json


def save_shaped(out: Path, shape: str) -> Path:
    """The checkpoint of `shape` (nllb or mbart) saved with save_pretrained beside its widened tokenizer files."""
    import transformers

    s = SHAPES[shape]
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(s["kind"], out.parent / f"{out.name}.spm")
    tokenizer.save_pretrained(str(out))
    path = out / "tokenizer.json"
    path.write_text(json.dumps(widened(json.loads(path.read_text("utf-8")), s["tokens"])), encoding="utf-8")
    config_path = out / "tokenizer_config.json"  # its numbers are the narrow tokenizer's: tokenizer.json has them
    config = json.loads(config_path.read_text("utf-8"))
    config.pop("added_tokens_decoder", None)
    config.setdefault("bos_token", "<s>")  # as the hub's (transformers 5 leaves it out)
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    common = dict(
        vocab_size=s["rows"], d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
        decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024,
        activation_function=s["activation"], scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, init_std=0.1,
    )  # fmt: skip
    torch.manual_seed(0)
    if shape == "nllb":
        model = transformers.M2M100ForConditionalGeneration(transformers.M2M100Config(**common))
        settings = {"max_length": 200}
    else:
        hub = dict(normalize_before=True, add_final_layer_norm=True, tokenizer_class="MBart50Tokenizer")
        model = transformers.MBartForConditionalGeneration(
            transformers.MBartConfig(**common, **hub, forced_eos_token_id=2)
        )
        settings = {"max_length": 200, "num_beams": 5, "forced_eos_token_id": 2}
        with torch.no_grad():
            model.final_logits_bias.normal_(0.0, 0.1)
    with torch.no_grad():  # layers that outweigh the embedding (std 0.02) move the output off the input's tokens
        model.get_input_embeddings().weight.normal_(0.0, 0.02)
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=2, bos_token_id=0, pad_token_id=1, eos_token_id=2, **settings
    )
    model.eval().save_pretrained(str(out))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("out")
    args = parser.parse_args()
    print(save_shaped(Path(args.out), args.shape))


if __name__ == "__main__":
    main()
