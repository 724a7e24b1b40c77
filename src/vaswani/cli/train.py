"""Making a model: `vaswani model`, `train`, `prepare`, `finetune`, `distill` and `average`."""

from __future__ import annotations

import argparse
import sys

from vaswani.config import PRESETS, ModelConfig


def _model(args: argparse.Namespace) -> None:
    import torch

    from vaswani.nn import Transformer

    overrides = {"vocab_size": args.vocab_size} if args.vocab_size else {}
    config = ModelConfig.preset(args.preset, **overrides)
    with torch.device("meta"):  # counting parameters needs no memory
        model = Transformer(config)
    for key, value in config.in_effect().items():  # the fields that take effect
        print(f"{key}: {value}")
    print(f"parameters: {model.num_parameters():,}")


def _train(args: argparse.Namespace) -> None:
    from vaswani.config import Config
    from vaswani.runtime.allocator import keep_freed_memory
    from vaswani.train.distributed import process_group
    from vaswani.train.trainer import Trainer

    prepared = [f"data.prepared={args.prepared}"] if args.prepared else []
    config = Config.load(args.config, [*(args.set or []), *prepared])
    keep_freed_memory()
    with process_group(config.train.device):  # one process per GPU under torchrun; alone otherwise
        Trainer(config, args.model_dir).train()


def _prepare(args: argparse.Namespace) -> None:
    import time
    from pathlib import Path

    from rich.console import Console

    from vaswani.config import Config
    from vaswani.data.parallel import ParallelRecipe
    from vaswani.data.plain import PlainRecipe
    from vaswani.data.prepare import open_or_prepare

    config = Config.load(args.config, args.set or [])
    console = Console(stderr=True, soft_wrap=True)
    if config.task in ("lm", "mlm"):
        open_or_prepare(
            PlainRecipe(config.data, config.train.seed, config.model.eos_id),
            Path(args.data_dir),
            log=lambda message: console.print(message, highlight=False),
        )
        print(f"{args.data_dir}: train with: vaswani train {args.config} MODEL_DIR --prepared {args.data_dir}")
        return
    config.data.require_training_data()
    recipe = ParallelRecipe.from_config(config.data, config.model.share_embeddings, config.train.seed)
    started = time.perf_counter()
    data = open_or_prepare(
        recipe,
        Path(args.data_dir),
        None,
        args.workers,
        lambda message: console.print(message, highlight=False),
        console,
    )
    report = data.manifest["report"]
    print(
        f"{args.data_dir}: {report['kept']:,} of {report['total']:,} training pairs kept, "
        f"{sum(e['bytes'] for e in data.manifest['files'].values()) / 1e6:,.1f} MB, "
        f"{time.perf_counter() - started:.1f} s; train with: vaswani train {args.config} MODEL_DIR "
        f"--prepared {args.data_dir}"
    )


def _finetune(args: argparse.Namespace) -> None:
    from vaswani.runtime.allocator import keep_freed_memory
    from vaswani.train.finetune import finetune

    keep_freed_memory()
    finetune(args.pretrained_dir, args.config, args.model_dir, args.set or [])


def _distill(args: argparse.Namespace) -> None:
    from vaswani.distill import distill
    from vaswani.runtime.allocator import keep_freed_memory
    from vaswani.train.distributed import process_group

    keep_freed_memory()
    with process_group():  # one process per GPU (or per machine's share of CPUs) under torchrun; alone otherwise
        distill(args.teacher_dir, args.config, args.student_dir, args.set or [])


def _average(args: argparse.Namespace) -> None:
    from pathlib import Path

    from vaswani.model_dir import WEIGHTS, save_weights
    from vaswani.train import checkpoint as ckpt

    model_dir = Path(args.model_dir)
    if args.checkpoints:
        paths = [Path(p) for p in args.checkpoints]
    else:
        paths = ckpt.checkpoint_dirs(model_dir)[-args.last :]
        if len(paths) < args.last:
            print(f"vaswani: note: {model_dir} has {len(paths)} checkpoints, averaging those", file=sys.stderr)
    weights = ckpt.average_checkpoints(paths)
    output = Path(args.output) if args.output else model_dir / WEIGHTS
    save_weights(weights, output)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {output}")


def register(commands: argparse._SubParsersAction) -> None:
    model = commands.add_parser("model", help="show a preset architecture and its parameter count")
    model.add_argument("preset", help=f"one of {', '.join(PRESETS)}")
    model.add_argument("--vocab-size", type=int, help="shared vocabulary size (default: 37000, as the paper)")
    model.set_defaults(run=_model)

    train = commands.add_parser(
        "train", help="train a model (translation, lm or mlm: the config's model.type); resumes an existing run"
    )
    train.add_argument("config", help="YAML recipe, e.g. configs/multi30k_de_en.yaml")
    train.add_argument("model_dir", help="directory for the model, checkpoints and logs")
    _add_overrides(train, "train.max_steps=2000")
    train.add_argument(
        "--prepared",
        metavar="DATA_DIR",
        help="prepared data to train from (made by vaswani prepare; made here when missing)",
    )
    train.set_defaults(run=_train)

    prepare = commands.add_parser("prepare", help="tokenize a config's corpora once into memory-mapped arrays")
    prepare.add_argument("config", help="YAML recipe: its data section (and model.share_embeddings) decide the arrays")
    prepare.add_argument("data_dir", help="directory to write (new), or to check when it exists")
    prepare.add_argument("--workers", type=int, help="encoding processes (default: every core)")
    _add_overrides(prepare, "data.vocab_size=16000")
    prepare.set_defaults(run=_prepare)

    finetune = commands.add_parser(
        "finetune",
        help="train a pretrained model further: a classifier on labelled text, a language model on plain text "
        "(data.text), a translation model on parallel text",
    )
    finetune.add_argument("pretrained_dir", help="a model directory (trained by vaswani train, or imported)")
    finetune.add_argument("config", help="fine-tuning recipe, e.g. configs/sst2_finetune.yaml")
    finetune.add_argument("model_dir", help="directory for the fine-tuned model (resumes a run there)")
    _add_overrides(finetune, "finetune.aux_weight=0")
    finetune.set_defaults(run=_finetune)

    distill = commands.add_parser(
        "distill",
        help="train a smaller, faster student on a teacher's translations of the training sources "
        "(sequence-level knowledge distillation); resumes an existing run",
    )
    distill.add_argument("teacher_dir", help="the teacher: a translation model directory (trained here or imported)")
    distill.add_argument("config", help="the student's recipe, e.g. configs/multi30k_de_en_distill.yaml")
    distill.add_argument("student_dir", help="directory for the student (its distill/ folder: the teacher's output)")
    _add_overrides(distill, "train.max_time=6m")
    distill.set_defaults(run=_distill)

    average = commands.add_parser("average", help="average checkpoints into the model to translate with")
    average.add_argument("model_dir")
    average.add_argument("--last", type=int, default=5, help="average the last N checkpoints (default 5, as §6.1)")
    average.add_argument("--checkpoints", nargs="+", help="checkpoint directories to average instead")
    average.add_argument("--output", help="weights file to write (default: MODEL_DIR/model.safetensors)")
    average.set_defaults(run=_average)


def _add_overrides(parser, example: str) -> None:
    """--set SECTION.KEY=VALUE, repeatable: a config field overridden on the command line."""
    parser.add_argument(
        "--set",
        action="append",
        metavar="SECTION.KEY=VALUE",
        help=f"override one config field, e.g. --set {example} (repeatable)",
    )
