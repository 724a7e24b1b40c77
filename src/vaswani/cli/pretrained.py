"""`vaswani import`: a Hugging Face checkpoint (OPUS-MT/Marian) as a vaswani model directory."""

from __future__ import annotations

import argparse


def _import(args: argparse.Namespace) -> None:
    from vaswani.config import Config
    from vaswani.nn import build_model
    from vaswani.pretrained import import_pretrained

    out = import_pretrained(args.src, args.model_dir)
    config = Config.load(out / "config.yaml")
    m = config.model
    parameters = sum(p.numel() for p in build_model(m).parameters())
    print(
        f"imported {args.src} into {out}: {m.type}, {m.n_layers}+{m.decoder_layers} layers, d_model {m.d_model}, "
        f"{parameters / 1e6:.1f}M parameters, activation {m.activation}; decode defaults beam "
        f"{config.decode.beam_size}, length penalty {config.decode.length_penalty} ({config.decode.length_rule})"
    )


def register(commands: argparse._SubParsersAction) -> None:
    verb = commands.add_parser(
        "import",
        help="import a Hugging Face checkpoint (MarianMTModel: OPUS-MT) as a vaswani model directory",
    )
    verb.add_argument(
        "src",
        help="a directory written by save_pretrained (or a hub id such as Helsinki-NLP/opus-mt-de-en, online)",
    )
    verb.add_argument("model_dir", help="the model directory to write (new or empty)")
    verb.set_defaults(run=_import)
