"""The `vaswani` command: thin argument parsing over the library; errors are one line, no traceback."""

from __future__ import annotations

import argparse
import sys

from vaswani.config import PRESETS, ConfigError, ModelConfig


def _model(args: argparse.Namespace) -> None:
    import torch

    from vaswani.nn import Transformer

    overrides = {"vocab_size": args.vocab_size} if args.vocab_size else {}
    config = ModelConfig.preset(args.preset, **overrides)
    with torch.device("meta"):  # counting parameters needs no memory
        model = Transformer(config)
    for key, value in config.to_dict().items():
        print(f"{key}: {value}")
    print(f"parameters: {model.num_parameters():,}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vaswani", description="The Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    model = commands.add_parser("model", help="show a preset architecture and its parameter count")
    model.add_argument("preset", help=f"one of {', '.join(PRESETS)}")
    model.add_argument("--vocab-size", type=int, help="shared vocabulary size (default: 37000, as the paper)")
    model.set_defaults(run=_model)
    return parser


def _version() -> str:
    from vaswani import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (ConfigError, ValueError, FileNotFoundError, PermissionError) as error:
        print(f"vaswani: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vaswani: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
