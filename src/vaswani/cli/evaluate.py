"""`vaswani evaluate` (sacreBLEU and chrF of a model, or of existing output) and `vaswani attention` (a sentence's
attention weights drawn as heatmaps)."""

from __future__ import annotations

import argparse

from vaswani.cli.lines import stderr_console
from vaswani.cli.translate import add_decode_options, decode_request, load_translator, report_precision


def register(commands: argparse._SubParsersAction) -> None:
    _register_evaluate(commands)
    _register_attention(commands)


def _evaluate(args: argparse.Namespace) -> None:
    from vaswani import evaluate
    from vaswani.data.corpus import read_lines

    references = read_lines(args.ref, "replace")
    if args.hyp:
        hypotheses = read_lines(args.hyp, "replace")
    else:
        if not (args.model_dir and args.src):
            raise ValueError("give MODEL_DIR and --src FILE to translate, or --hyp FILE to score existing output")
        from vaswani.console import progress_bar

        sources = read_lines(args.src, "replace")
        if len(sources) != len(references):
            raise ValueError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}")
        translator = load_translator(args)
        console = stderr_console()
        request = decode_request(args, translator)
        report_precision(translator, request, console)
        source_language = getattr(args, "source_language", None)
        translator.languages.check(args.target_language, source_language)
        with progress_bar(console, "translating", len(sources)) as advance:
            hypotheses = translator.translate(
                sources, request, advance, args.target_language, translator.languages.model_source(source_language)
            )
        if args.output:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.writelines(h + "\n" for h in hypotheses)
    if len(hypotheses) != len(references):
        raise ValueError(f"{args.hyp} has {len(hypotheses)} lines but {args.ref} has {len(references)}")
    for _, line in evaluate.report(hypotheses, references, args.lc):
        print(line)
    if args.tok_lc:
        lang = args.lang or evaluate.language_of(args.ref)
        if lang is None:
            raise ValueError(f"cannot tell the language of {args.ref}; pass --lang (e.g. --lang de)")
        tok_ref = args.tok_ref or evaluate.multi30k_tok_reference(args.ref)
        tok_references = read_lines(tok_ref) if tok_ref else evaluate.tok_lc(references, lang)
        _, line = evaluate.tok_lc_bleu(hypotheses, tok_references, lang)
        print(f"{line} (ref: {tok_ref or 'tokenized ' + str(args.ref)}, sacremoses -l {lang})")


def _attention(args: argparse.Namespace) -> None:
    from vaswani.translate.translator import Translator
    from vaswani.viz import plot_attention

    if not args.source.strip():
        raise ValueError("the source sentence is empty: give a sentence to look at")
    translator = Translator.load(args.model_dir, args.device, precision="fp32")
    options = {"beam_size": args.beam} if args.beam else {}
    translation = translator.attention(args.source, args.target, **options)
    path = plot_attention(translation, args.output, args.kind, args.layer, args.head)
    print(f"{translation.source}  →  {translation.text}\nwrote {path}")


def _register_evaluate(commands) -> None:
    evaluate = commands.add_parser("evaluate", help="sacreBLEU and chrF of a model (or of existing output)")
    evaluate.add_argument("model_dir", nargs="?", help="model to translate --src with")
    evaluate.add_argument("--src", help="source file to translate")
    evaluate.add_argument("--ref", required=True, help="reference translations, one per line")
    evaluate.add_argument("--hyp", help="score this file instead of translating")
    evaluate.add_argument("--output", help="also write the translations here")
    evaluate.add_argument("--lc", action="store_true", help="case-insensitive BLEU (sacrebleu -lc)")
    evaluate.add_argument(
        "--tok-lc", action="store_true", help="also report lowercased, Moses-tokenized BLEU, as the Multi30k literature"
    )
    evaluate.add_argument(
        "--tok-ref",
        help="tokenized lowercased references for --tok-lc (default: Multi30k's tok/ "
        "file next to --ref, else --ref tokenized)",
    )
    evaluate.add_argument("--lang", help="target language for --tok-lc (default: from the --ref file name)")
    evaluate.add_argument("--source-language", metavar="CODE", help="NLLB's, M2M-100's or mBART-50's code of --src")
    add_decode_options(evaluate)
    evaluate.set_defaults(run=_evaluate)


def _register_attention(commands) -> None:
    attention = commands.add_parser("attention", help="draw a sentence's attention weights as heatmaps (PNG)")
    attention.add_argument("model_dir")
    attention.add_argument("source", help="the source sentence")
    attention.add_argument("--target", help="the target to look at (default: the model's own translation)")
    attention.add_argument(
        "--kind",
        choices=["cross", "encoder", "decoder"],
        default="cross",
        help="cross (encoder-decoder, default), encoder or decoder self-attention",
    )
    attention.add_argument("--layer", type=int, help="only this layer (1-based; default: every layer)")
    attention.add_argument("--head", type=int, help="only this head (1-based; default: every head)")
    attention.add_argument("--beam", type=int, help="beam size of the translation (default: the model's)")
    attention.add_argument("--device", default="auto", help="cpu, cuda, ... (default: the GPU if any)")
    attention.add_argument("-o", "--output", default="attention.png", help="PNG to write (default attention.png)")
    attention.set_defaults(run=_attention)
