"""Deploying a model elsewhere: `vaswani export` (CTranslate2, Hugging Face transformers: vaswani/export/)."""

from __future__ import annotations

import argparse
import sys

from vaswani.decode.engine import CT2_TYPES


def _export(args: argparse.Namespace) -> None:
    from vaswani.config import Config
    from vaswani.export import export

    out = export(args.model_dir, args.out_dir, args.to, args.quantization)
    loader = {"ctranslate2": "ctranslate2.Translator", "huggingface": "MarianMTModel.from_pretrained"}[args.to]
    print(
        f"exported {args.model_dir} to {out} ({args.to}{', ' + args.quantization if args.quantization else ''}); "
        f"load it with {loader}({str(out)!r})"
    )
    if Config.load(f"{args.model_dir}/config.yaml").data.lowercase:
        print(
            "note: this model was trained on lowercased text (data.lowercase): lowercase its inputs before "
            "translating with the exported model",
            file=sys.stderr,
        )


def register(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser("export", help="write the model for CTranslate2 or Hugging Face transformers")
    export.add_argument("model_dir")
    export.add_argument("out_dir", help="directory to write (new or empty)")
    export.add_argument("--to", required=True, choices=["ctranslate2", "huggingface"])
    export.add_argument(
        "--quantization",
        choices=CT2_TYPES,
        help="CTranslate2 weight type (default float32; int8 is smaller and faster on CPUs)",
    )
    export.set_defaults(run=_export)
