"""`vaswani shortlist`: learn a translation model's vocabulary shortlist (decode/shortlist.py) for `--shortlist`."""

from __future__ import annotations

import argparse

from vaswani.cli.lines import stderr_console

MAX_LINES = 200_000  # lines Model 1 learns from by default: a few minutes of EM on 2 CPU cores at 30 pieces a side


def _shortlist(args: argparse.Namespace) -> None:
    from pathlib import Path

    from vaswani.console import progress_bar
    from vaswani.data.corpus import read_lines
    from vaswani.decode.shortlist import FILE, ITERATIONS, check_sizes
    from vaswani.translate.translator import Translator

    if args.max_lines < 1:
        raise ValueError(f"--max-lines must be >= 1, got {args.max_lines}")
    check_sizes(args.top, args.frequent)
    sources = read_lines(args.src, "replace")
    targets = read_lines(args.tgt, "replace") if args.tgt else None
    if targets is not None and len(targets) != len(sources):
        raise ValueError(f"{args.src} has {len(sources)} lines but {args.tgt} has {len(targets)}")
    if len(sources) > args.max_lines:  # spread over the whole file, in order
        picked = [i * len(sources) // args.max_lines for i in range(args.max_lines)]
        sources = [sources[i] for i in picked]
        targets = None if targets is None else [targets[i] for i in picked]
    translator = Translator.load(args.model_dir, args.device)
    console = stderr_console()
    total = (0 if targets is not None else len(sources)) + ITERATIONS + 1
    with progress_bar(console, "learning the shortlist", total) as advance:
        shortlist = translator.learn_shortlist(sources, targets, args.top, args.frequent, advance, args.target_language)
    out = Path(args.output) if args.output else Path(args.model_dir) / FILE
    shortlist.save(out)
    covered = int((shortlist.translations[:, 0] >= 0).sum())
    lines = f"{shortlist.lines:,} parallel lines"
    if targets is None:
        lines = f"its own translations of {shortlist.lines:,} lines"
    console.print(
        f"vaswani: wrote {out}: up to {args.top} target pieces for each of {covered:,} source pieces and "
        f"{len(shortlist.frequent)} for every batch, learned from {lines}; translate with "
        f"--shortlist{'' if not args.output else ' ' + str(out)}"
    )


def register(commands: argparse._SubParsersAction) -> None:
    verb = commands.add_parser(
        "shortlist",
        help="learn a vocabulary shortlist for --shortlist: the target words each source word can turn into",
    )
    verb.add_argument("model_dir", help="the translation model (trained or imported)")
    verb.add_argument("--src", required=True, help="source lines, plain or .gz (e.g. the training data's)")
    verb.add_argument(
        "--tgt",
        help="their translations, one per line (e.g. the training data's); without it the model translates --src "
        "itself (greedy) and learns from its own output",
    )
    verb.add_argument("--top", type=int, default=50, help="translations kept per source piece (default 50)")
    verb.add_argument(
        "--frequent", type=int, default=100, help="most frequent target pieces every batch gets (default 100)"
    )
    verb.add_argument(
        "--max-lines",
        type=int,
        default=MAX_LINES,
        help=f"learn from at most this many lines, spread over the files (default {MAX_LINES:,})",
    )
    verb.add_argument(
        "--target-language",
        metavar="CODE",
        help="a multilingual model's target language (its >>CODE<< token before every source), e.g. fra",
    )
    verb.add_argument("-o", "--output", help="the file to write (default: MODEL_DIR/shortlist.safetensors)")
    verb.add_argument("--device", default="auto", help="where the model translates without --tgt (default: a GPU)")
    verb.set_defaults(run=_shortlist)
