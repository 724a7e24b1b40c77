"""`vaswani detect`: each input line's language (translate/language_id.py), one output line per input line."""

from __future__ import annotations

import argparse
import json

from vaswani.cli.lines import Lines, stderr_console


def register(commands: argparse._SubParsersAction) -> None:
    from vaswani.translate.language_id import CODES, THRESHOLD

    verb = commands.add_parser(
        "detect",
        help="each line's language and its probability (und where not sure)",
        description="Each input line's language: ISO 639 (639-1 where there is one) and a probability, `und` below "
        "--threshold or without letters. Needs py3langid: pip install 'vaswani[detect]'.",
    )
    verb.add_argument("-i", "--input", help="lines to read, plain or .gz (default: standard input)")
    verb.add_argument("-o", "--output", help="where to write one answer a line (default: standard output)")
    verb.add_argument(
        "--json", action="store_true", help='one JSON object a line: {"language": "de", "probability": 0.97}'
    )
    verb.add_argument("--codes", choices=CODES, default="iso", help="iso (de, default) or nllb (deu_Latn): NLLB's")
    verb.add_argument(
        "--threshold",
        type=float,
        default=THRESHOLD,
        help=f"below this probability a line is und (default {THRESHOLD}: ≤ 2%% confident wrong answers on 3-word "
        "snippets of FLORES-200 dev)",
    )
    verb.set_defaults(run=_detect)


def _detect(args: argparse.Namespace) -> None:
    from vaswani.translate.language_id import LanguageIdentifier

    identifier = LanguageIdentifier(args.threshold, args.codes)
    console = stderr_console()
    with Lines(args.input, args.output, console) as lines:
        for _, chunk in lines.chunks(4096):
            found = identifier.detect(chunk)
            if args.json:
                lines.write(json.dumps(d.to_dict(), ensure_ascii=False) for d in found)
            else:
                lines.write(f"{d.language}\t{d.probability:.4f}" for d in found)
