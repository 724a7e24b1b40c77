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


def _train(args: argparse.Namespace) -> None:
    import os

    import torch.distributed as dist

    from vaswani.config import Config
    from vaswani.runtime import keep_freed_memory
    from vaswani.train.trainer import Trainer, pick_device

    config = Config.load(args.config, args.set or [])
    keep_freed_memory()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # started by torchrun
        backend = "nccl" if pick_device(config.train.device).type == "cuda" else "gloo"
        dist.init_process_group(backend)
    try:
        Trainer(config, args.model_dir).train()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _average(args: argparse.Namespace) -> None:
    from pathlib import Path

    from vaswani.train import checkpoint as ckpt

    model_dir = Path(args.model_dir)
    if args.checkpoints:
        paths = [Path(p) for p in args.checkpoints]
    else:
        paths = ckpt.checkpoint_dirs(model_dir)[-args.last :]
        if len(paths) < args.last:
            print(f"vaswani: note: {model_dir} has {len(paths)} checkpoints, averaging those", file=sys.stderr)
    weights = ckpt.average_checkpoints(paths)
    output = Path(args.output) if args.output else model_dir / ckpt.WEIGHTS
    ckpt.save_weights(weights, output)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {output}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vaswani", description="The Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    model = commands.add_parser("model", help="show a preset architecture and its parameter count")
    model.add_argument("preset", help=f"one of {', '.join(PRESETS)}")
    model.add_argument("--vocab-size", type=int, help="shared vocabulary size (default: 37000, as the paper)")
    model.set_defaults(run=_model)

    train = commands.add_parser("train", help="train a model from parallel text (resumes an existing run)")
    train.add_argument("config", help="YAML recipe, e.g. configs/multi30k_de_en.yaml")
    train.add_argument("model_dir", help="directory for the model, checkpoints and logs")
    train.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                       help="override one config field, e.g. --set train.max_steps=2000 (repeatable)")
    train.set_defaults(run=_train)

    average = commands.add_parser("average", help="average checkpoints into the model to translate with")
    average.add_argument("model_dir")
    average.add_argument("--last", type=int, default=5, help="average the last N checkpoints (default 5, as §6.1)")
    average.add_argument("--checkpoints", nargs="+", help="checkpoint directories to average instead")
    average.add_argument("--output", help="weights file to write (default: MODEL_DIR/model.safetensors)")
    average.set_defaults(run=_average)
    return parser


def _version() -> str:
    from vaswani import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (ConfigError, ValueError, OSError) as error:  # DataError, CheckpointError are ValueErrors
        message = str(error) if not isinstance(error, OSError) or not error.filename else (
            f"{error.filename}: {error.strerror}")
        print(f"vaswani: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vaswani: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
