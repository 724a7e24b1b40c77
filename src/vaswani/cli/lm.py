"""Using a language model: `vaswani generate` (decoder_only) and `classify` (a fine-tuned one)."""

from __future__ import annotations

import argparse
import sys

from vaswani.cli.lines import Lines, stderr_console


def _generate(args: argparse.Namespace) -> None:
    from pathlib import Path

    from vaswani.decode.generate import Generator

    if args.prompt is not None and args.prompt_file:
        raise ValueError("give the prompt as --prompt TEXT or --prompt-file FILE, not both")
    if args.max_new_tokens < 1 or args.n < 1:
        raise ValueError("--max-new-tokens and -n must be at least 1")
    prompt = args.prompt or ""
    if args.prompt_file:
        path = Path(args.prompt_file)
        if not path.is_file():
            raise ValueError(f"{path}: file not found")
        prompt = path.read_text(encoding="utf-8").rstrip("\n")
    generator = Generator.load(args.model_dir, args.device, args.precision)
    ids = generator.encode(prompt)
    ids_so_far: dict[int, list[int]] = {}
    written: dict[int, str] = {}

    def on_token(k: int, token: int, last: bool = False) -> None:  # stream: print what the new token adds
        if token >= 0:
            ids_so_far.setdefault(k, []).append(token)
        text = generator.decode(ids_so_far.get(k, []))
        if not last:  # a byte-level token may end inside a character (U+FFFD until its other bytes come)
            text = text.rstrip("\ufffd")
        sys.stdout.write(text[len(written.get(k, "")) :])
        sys.stdout.flush()
        written[k] = text

    for k in range(args.n):
        if k:
            sys.stdout.write("\n\n---\n\n")
        sys.stdout.write(prompt)
        generator.generate_ids(
            ids,
            args.max_new_tokens,
            seed=args.seed + k,
            greedy_search=args.greedy,
            cache=not args.no_cache,
            on_token=lambda _, t, k=k: on_token(k, t),
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            no_repeat_ngram=args.no_repeat_ngram,
            repetition_penalty=args.repetition_penalty,
        )
        on_token(k, -1, last=True)
    sys.stdout.write("\n")


def _classify(args: argparse.Namespace) -> None:
    from vaswani.decode.classifier import Classifier

    classifier = Classifier.load(args.model_dir, args.device, pairs=args.pairs, precision=args.precision)
    console = stderr_console()
    pairs = args.pairs or classifier.config.model.pairs  # a classifier fine-tuned on pairs reads pairs
    with Lines(args.input, args.output, console) as lines:
        for first, chunk in lines.chunks(4096):
            for i, line in enumerate(chunk):
                if pairs and line.count("\t") != 1:
                    raise ValueError(
                        f"{args.input or 'standard input'}, line {first + i + 1}: {line.count(chr(9)) + 1} "
                        "tab-separated fields; --pairs reads two per line (text a<TAB>text b)"
                    )
                if not line.strip():
                    console.print(f"vaswani: warning: line {first + i + 1} is empty; classified as empty text")
            texts = [tuple(line.split("\t")) for line in chunk] if pairs else chunk
            labels = classifier.classify(texts, args.batch_size)
            lines.write(f"{label}\t{probability:.4f}" for label, probability in labels)


def register(commands: argparse._SubParsersAction) -> None:
    generate = commands.add_parser("generate", help="continue a prompt with a decoder-only language model")
    generate.add_argument("model_dir")
    generate.add_argument("--prompt", help="text to continue (default: a new line)")
    generate.add_argument("--prompt-file", help="read the prompt from this file")
    generate.add_argument("--max-new-tokens", type=int, default=300)
    generate.add_argument("--temperature", type=float, default=1.0)
    generate.add_argument("--top-k", type=int, default=0, help="sample among the k most probable tokens (0: all)")
    generate.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: the smallest set with this mass")
    generate.add_argument("--greedy", action="store_true", help="the most probable token every time")
    generate.add_argument(
        "--no-repeat-ngram", type=int, default=0, metavar="N", help="no n-gram of N tokens twice (0: off)"
    )
    generate.add_argument(
        "--repetition-penalty",
        type=float,
        default=1.0,
        metavar="P",
        help="divide the logits of tokens already in the text by P (> 1 discourages repeating; 1: off)",
    )
    generate.add_argument("--seed", type=int, default=1, help="the same seed gives the same text (default 1)")
    generate.add_argument("-n", type=int, default=1, help="how many continuations (seeds SEED, SEED+1, ...)")
    generate.add_argument("--no-cache", action="store_true", help="re-run the whole text every step (slow; a check)")
    generate.add_argument("--device", default="auto", help="cpu, cuda, ... (default: the GPU if any)")
    generate.add_argument(
        "--precision", choices=["fp32", "bf16", "int8"], default="fp32", help="int8: a CPU's (as for vaswani translate)"
    )
    generate.set_defaults(run=_generate)

    classify = commands.add_parser("classify", help="label lines of text with a fine-tuned model")
    classify.add_argument("model_dir")
    classify.add_argument("-i", "--input", help="input file, plain or .gz (default: standard input)")
    classify.add_argument("-o", "--output", help="output file: label<TAB>probability per line (default: stdout)")
    classify.add_argument(
        "--pairs",
        action="store_true",
        help="each line is a sentence pair, text a<TAB>text b, read as [CLS] a [SEP] b [SEP] (a BERT: paraphrase, "
        "entailment, question and answer)",
    )
    classify.add_argument("--batch-size", type=int, default=64)
    classify.add_argument("--device", default="auto", help="cpu, cuda, ... (default: the GPU if any)")
    classify.add_argument(
        "--precision", choices=["fp32", "bf16", "int8"], default="fp32", help="int8: a CPU's (as for vaswani translate)"
    )
    classify.set_defaults(run=_classify)
