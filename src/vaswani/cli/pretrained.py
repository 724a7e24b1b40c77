"""`vaswani import`: a Hugging Face checkpoint (OPUS-MT/Marian, BERT, GPT-2) as a vaswani model directory."""

from __future__ import annotations

import argparse


def _import(args: argparse.Namespace) -> None:
    from vaswani.config import Config
    from vaswani.families import TRANSLATE, family
    from vaswani.nn import build_model
    from vaswani.pretrained import import_pretrained

    out = import_pretrained(args.src, args.model_dir)
    config = Config.load(out / "config.yaml")
    m = config.model
    parameters = sum(p.numel() for p in build_model(m).parameters())
    if TRANSLATE in family(m.type).can:
        layers = f"{m.n_layers}+{m.decoder_layers} layers"
        more = (
            f"decode defaults beam {config.decode.beam_size}, length penalty {config.decode.length_penalty} "
            f"({config.decode.length_rule})"
        )
    else:
        layers = f"{m.n_layers} layers"
        more = f"classifier labels {', '.join(map(str, config.finetune.labels))}" if m.n_classes else "no classifier"
    print(
        f"imported {args.src} into {out}: {m.type}, {layers}, d_model {m.d_model}, {parameters / 1e6:.1f}M "
        f"parameters, activation {m.activation}; {more}"
    )


def register(commands: argparse._SubParsersAction) -> None:
    verb = commands.add_parser(
        "import",
        help="import a Hugging Face checkpoint (MarianMTModel: OPUS-MT; BERT; GPT-2) as a vaswani model directory",
    )
    verb.add_argument(
        "src",
        help="a directory written by save_pretrained (or a hub id such as Helsinki-NLP/opus-mt-de-en, online)",
    )
    verb.add_argument("model_dir", help="the model directory to write (new or empty)")
    verb.set_defaults(run=_import)
