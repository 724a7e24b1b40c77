"""The `vaswani` command: thin argument parsing over the library; errors are one line, no traceback.

Each module registers its family of verbs next to the code that runs them:
train.py (model, train, prepare, finetune, distill, average), lm.py (generate, classify),
translate.py (translate), evaluate.py (evaluate, attention), detect.py (detect), shortlist.py (shortlist),
serve.py (serve), export.py (export), pretrained.py (import); lines.py is what they share.
Nothing here imports torch: the command functions import the library when they run."""

from __future__ import annotations

import argparse
import sys

from vaswani.cli import detect, evaluate, export, lm, pretrained, serve, shortlist, train, translate
from vaswani.config import ConfigError
from vaswani.runtime.allocator import keep_freed_memory


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vaswani", description="The Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    for family in (train, lm, translate, evaluate, detect, shortlist, serve, export, pretrained):
        family.register(commands)
    return parser


def _settle_threads() -> None:
    from vaswani.runtime.threads import settle_threads

    line = settle_threads()
    if line is not None:
        print(f"vaswani: {line}", file=sys.stderr)


def _version() -> str:
    from vaswani import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    """The command line (`argv`: its arguments; None: the process's own, which also settles torch's threads to the
    CPUs other work leaves free within the CPU quota, vaswani/runtime/threads.py: a library call or a test keeps the
    process's setting)."""
    args = build_parser().parse_args(argv)
    try:
        if argv is None:
            _settle_threads()
            keep_freed_memory()  # a step's large tensors reused, not page-faulted in again (runtime/allocator.py)
        args.run(args)
    except (ConfigError, ValueError, OSError, ImportError) as error:  # DataError, CheckpointError are ValueErrors
        message = (
            str(error)
            if not isinstance(error, OSError) or not error.filename
            else (f"{error.filename}: {error.strerror}")
        )
        message = " ".join(message.splitlines())  # one line, whatever the input it quotes
        print(f"vaswani: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vaswani: interrupted", file=sys.stderr)
        return 130
    return 0
