"""Using a translation model: `vaswani translate`, `evaluate` and `attention`, and the search options they share."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import TYPE_CHECKING, Any

from vaswani.cli.lines import Lines, stderr_console
from vaswani.config import DECODING_PRECISIONS
from vaswani.decode.engine import CT2_TYPES

if TYPE_CHECKING:
    from rich.console import Console

    from vaswani.decode.request import DecodeRequest
    from vaswani.translate.translation import Translation
    from vaswani.translate.translator import Translator


def decode_request(args: argparse.Namespace, translator: Translator) -> DecodeRequest:
    """The decoding request of the command line: the model's decode section with the options given, validated
    once, before any input is read."""
    n_best = getattr(args, "n_best", 1)
    glossary = None
    if args.glossary:
        from vaswani.decode.glossary import Glossary

        glossary = Glossary.read(args.glossary)
    others = getattr(args, "other_languages", None)
    return translator.request(n_best=n_best, glossary=glossary, other_languages=others, **decode_options(args))


def decode_options(args: argparse.Namespace) -> dict[str, Any]:
    """DecodeConfig overrides given on the command line (None: the model's own setting)."""
    return dict(
        beam_size=args.beam,
        length_penalty=args.length_penalty,
        length_rule=args.length_rule,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        early_stopping={"on": True, "off": False}.get(args.early_stopping, args.early_stopping),
        batch_size=args.batch_size,
        sampling=args.sample or None,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        compile=args.compile,
        no_repeat_ngram=args.no_repeat_ngram,
        repetition_penalty=args.repetition_penalty,
    )


def _precision(args: argparse.Namespace) -> str:
    return "bf16" if args.bf16 else args.precision


def load_translator(args: argparse.Namespace) -> Translator:
    from vaswani.translate.translator import Translator, check_engine

    check_engine(args.engine, _precision(args))  # before converting anything

    if args.compute_type and args.engine != "ctranslate2":
        raise ValueError("--compute-type applies to --engine ctranslate2; for --engine torch use --precision")
    if args.compile and args.engine != "torch":
        raise ValueError("--compile applies to --engine torch (our own search); CTranslate2 runs compiled code already")
    if args.shortlist and args.engine != "torch":
        raise ValueError("--shortlist applies to --engine torch (our own search)")
    if args.engine == "ctranslate2":  # converted once into MODEL_DIR/ctranslate2, again when the weights change
        from vaswani.export.ctranslate2 import converted

        converted(args.model_dir)
    return Translator.load(
        args.model_dir, args.device, _precision(args), args.engine, args.compute_type or "float32", args.shortlist
    )


def report_precision(translator: Translator, request: DecodeRequest, console: Console) -> None:
    """The precision decoding runs in, with its measurement (settled here: Engine.prepare, so a server's first
    request does not wait for it); a warning where an explicit bf16 is slower."""
    decode = request.decode
    if translator.engine.describe() is not None:
        console.print(f"vaswani: {translator.engine.describe()}")
        if decode.length_penalty and decode.length_rule == "gnmt" and not decode.sampling and decode.beam_size > 1:
            console.print(
                f"vaswani: note: CTranslate2 divides scores by length^{decode.length_penalty}, not by GNMT's "
                f"((5 + length) / 6)^{decode.length_penalty}; --length-penalty 0 gives --engine torch's "
                "output exactly, and so does --length-rule power"
            )
        return
    choice = translator.engine.prepare(request)
    if choice.measurement is not None or choice.reason:
        console.print(f"vaswani: {choice.describe()}")
    device = next(translator.model.parameters()).device
    step = translator.engine.step_choice(request)  # decided once, in decode/engine.py's choose_step
    if step.note:
        console.print(f"vaswani: note: {step.note}")
    shortlist = getattr(translator.engine, "shortlist", None)
    if shortlist is not None:
        console.print(f"vaswani: {shortlist.describe()}")
        if device.type == "cuda":
            console.print(
                "vaswani: note: with a shortlist the decoder's step runs without the static cache and CUDA graphs"
            )
    if choice.warning():
        console.print(f"vaswani: warning: {choice.warning()}")


def _translate(args: argparse.Namespace) -> None:
    from vaswani.translate.quality import check_threshold

    _file_format(args)  # a PDF or an unknown --format named before the model is loaded
    check_threshold(args.min_confidence)
    translator = load_translator(args)
    request = decode_request(args, translator)  # validated once, before reading any input
    console = stderr_console()
    translator.languages.check(args.target_language, args.source_language)  # before any input is read
    report_precision(translator, request, console)
    languages = dict(
        target_language=args.target_language, source_language=translator.languages.model_source(args.source_language)
    )
    if _file_format(args) is not None:
        _translate_file(args, translator, request, console)
        return
    if args.document or args.format != "text":
        _translate_document(args, translator, request, console, languages)
        return
    _translate_lines(args, translator, request, console, languages)


def _translate_lines(
    args: argparse.Namespace, translator: Translator, request: DecodeRequest, console: Console, languages: dict
) -> None:
    """Line mode: one translation (or --scores / --n-best record) a line, in order; what was detected and the lines
    under --min-confidence counted on stderr."""
    import json

    from vaswani.console import progress_bar
    from vaswani.translate.quality import low

    detailed = args.n_best > 1 or args.scores
    detected: Counter = Counter()  # --source-language auto: the languages the lines were read as
    others: Counter = Counter()  # a model of one source language: lines detected as another
    doubtful: list[int] = []  # line numbers under --min-confidence
    with (
        Lines(args.input, args.output, console) as lines,
        progress_bar(console, "translating", lines.total, enabled=lines.total is not None) as advance,
    ):
        for first, chunk in lines.chunks(16 * request.decode.batch_size):

            def warn(index: int, message: str, first: int = first) -> None:
                console.print(f"vaswani: warning: line {first + index + 1}: {message}")

            results = translator.translate_with_details(chunk, request, warn, advance, **languages)
            detected.update(r.detected[0] if r.detected[1] else "not sure" for r in results if r.detected)
            others.update(r.other_language[0] for r in results if r.other_language)
            flags = [bool(r.candidates) and low(r.candidates[0].confidence, args.min_confidence) for r in results]
            doubtful += [first + i + 1 for i, flagged in enumerate(flags) if flagged]
            lines.write(
                json.dumps(_record(result, flagged), ensure_ascii=False) if detailed else result.text
                for result, flagged in zip(results, flags, strict=True)
            )
    if detected:
        said = ", ".join(f"{code} {n:,}" for code, n in detected.most_common())
        console.print(f"vaswani: source languages detected: {said} (lines not sure read as most others were)")
    report_other_languages(others, "lines", translator, args, console)
    if doubtful:
        shown = ", ".join(map(str, doubtful[:20])) + (f" and {len(doubtful) - 20:,} more" if len(doubtful) > 20 else "")
        where = "marked low_confidence in --scores" if detailed else "give --scores to have them marked"
        console.print(
            f"vaswani: low confidence: {len(doubtful):,} lines under {args.min_confidence} (lines {shown}; {where})"
        )


def _record(result: Translation, flagged: bool) -> list[dict]:
    """A line's --scores record: its candidates, the best marked low_confidence where it is under the threshold."""
    record = result.n_best_record()
    if flagged:
        record[0]["low_confidence"] = True
    return record


def report_other_languages(
    others: Counter, what: str, translator: Translator, args: argparse.Namespace, console: Console
) -> None:
    """One warning counting the lines (sentences) detected as a language the model does not read."""
    if not others:
        return
    said = ", ".join(f"{code} {n:,}" for code, n in others.most_common())
    done = (
        "copied unchanged" if args.other_languages == "copy" else "translated anyway (--other-languages copy: copied)"
    )
    console.print(
        f"vaswani: warning: {sum(others.values()):,} {what} read as another language than this model's "
        f"({translator.languages.source}): {said}; {done}"
    )


def _file_format(args: argparse.Namespace) -> Any:
    """The file format (translate/files) of --format, or of the input's extension where --format is left as text;
    None for text, HTML and Markdown."""
    from vaswani.translate.files import FileError, format_for

    if args.format not in ("text", "html", "markdown"):
        return format_for(None, args.format)
    if args.format != "text" or not args.input:
        return None
    try:
        return format_for(args.input)
    except FileError as error:
        raise ValueError(f"{args.input}: {error}") from None


def _translate_file(args: argparse.Namespace, translator: Translator, request: DecodeRequest, console: Console) -> None:
    """A subtitle, office or e-book file translated into a file of its format (translate/files), written whole or
    not at all; a file that cannot be translated named in one line."""
    from vaswani.console import progress_bar
    from vaswani.translate.files import FileError, translate_file

    if not args.input or not args.output:
        raise ValueError(
            f"--format {_file_format(args).name}: give the file to translate (-i) and the file to write (-o)"
        )
    if args.n_best > 1 or args.scores or args.document:
        raise ValueError("--n-best, --scores and --document apply to text: a file is translated into a file")
    bars = []

    def progress_for(sentences: int):
        bars.append(progress_bar(console, "translating", sentences, enabled=sentences > 0))
        return bars[-1].__enter__()

    def warn(index: int, message: str) -> None:
        console.print(f"vaswani: warning: sentence {index + 1}: {message}")

    try:
        translate_file(
            translator,
            args.input,
            args.output,
            args.format if args.format not in ("text", "html", "markdown") else None,
            progress_for,
            request=request,
            target_language=args.target_language,
            source_language=args.source_language,
            warn=warn,
        )
    except FileError as error:
        raise ValueError(f"{args.input}: {error}") from None
    finally:
        for bar in bars:
            bar.__exit__(None, None, None)


def _translate_document(
    args: argparse.Namespace, translator: Translator, request: DecodeRequest, console: Console, languages: dict
) -> None:
    """`--document`: the whole input is one text, split into sentences and put back together (translate/document.py);
    `--format html|markdown`: one document whose text is translated so and whose tags go back around the aligned
    words (translate/markup). With --scores (or --n-best, plain text only), one JSON record of the text and each of
    its sentences instead."""
    import json

    from vaswani.console import progress_bar
    from vaswani.translate.formats import text_format, translate_split
    from vaswani.translate.quality import flag

    if args.format != "text" and args.n_best > 1:
        raise ValueError(f"--n-best applies to plain text: --format {args.format} writes one translation")
    with Lines(args.input, args.output, console) as lines:
        text = lines.text()
        split = text_format(args.format).split([text], translator.languages.sentence_language(args.source_language))
        for reason in split.kept:
            console.print(f"vaswani: warning: {reason}")
        sentences = len(split.sentences)
        with progress_bar(console, "translating", sentences, enabled=sentences > 0) as advance:

            def warn(index: int, message: str) -> None:
                console.print(f"vaswani: warning: sentence {index + 1}: {message}")

            [result] = translate_split(translator, split, request, warn=warn, progress=advance, **languages)
        others = Counter(s.other_language[0] for s in getattr(result, "sentences", []) if s.other_language)
        report_other_languages(others, "sentences", translator, args, console)
        record = result.to_dict()
        doubtful = flag(record, args.min_confidence)
        if doubtful:
            console.print(f"vaswani: low confidence: {doubtful:,} sentences under {args.min_confidence} (--scores)")
        if args.n_best > 1 or args.scores:
            lines.write([json.dumps(record, ensure_ascii=False)])
        else:
            lines.output.write(result.text)  # the text's own line ends, its last one included


def add_decode_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("search (default: the model's config.yaml decode section)")
    group.add_argument("--beam", type=int, help="beam size; 1 is greedy search (paper: 4)")
    group.add_argument("--length-penalty", type=float, help="length penalty alpha (paper: 0.6)")
    group.add_argument(
        "--no-repeat-ngram",
        type=int,
        metavar="N",
        help="no n-gram of N tokens twice in an output (a cure for repetition loops; 0: off, the default)",
    )
    group.add_argument(
        "--repetition-penalty",
        type=float,
        metavar="P",
        help="divide the logits of tokens already output by P (> 1 discourages repeating; transformers' "
        "definition; 1: off, the default)",
    )
    group.add_argument(
        "--length-rule",
        choices=("gnmt", "power"),
        help="score / ((5 + length) / 6)^alpha (gnmt: the paper's code) or score / length^alpha (power: Hugging "
        "Face, fairseq, CTranslate2; an imported Marian model's default)",
    )
    group.add_argument("--max-len-a", type=float, help="maximum output length = a * source length + b")
    group.add_argument("--max-len-b", type=int, help="(paper: source length + 50)")
    group.add_argument(
        "--early-stopping",
        nargs="?",
        const="on",
        choices=("on", "off", "heuristic"),
        help="on: end a sentence as soon as beam-size hypotheses have finished (fairseq's rule; faster, shorter "
        "outputs); off: when none can improve on the best (the paper's code); heuristic: transformers' "
        "early_stopping false (an imported model's default)",
    )
    group.add_argument("--batch-size", type=int, help="sentences per batch")
    group.add_argument("--sample", action="store_true", help="sample instead of beam search")
    group.add_argument("--temperature", type=float, help="sampling temperature")
    group.add_argument("--top-k", type=int, help="sample among the k most probable tokens")
    group.add_argument("--top-p", type=float, help="nucleus sampling probability mass")
    group.add_argument("--seed", type=int, help="sampling seed")
    _add_engine_options(group)


def _add_engine_options(group) -> None:
    """Where and how the search runs, and what it must hold (a glossary, a language)."""
    group.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: the GPU if any)")
    group.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        help="torch.compile the decoder's step (decode.compile; default: the model's config.yaml, off): minutes "
        "of compiling as new kinds of step come, then faster steps where the step is overhead (one sentence at a "
        "time on a CPU; a GPU runs its faster CUDA graphs instead)",
    )
    group.add_argument(
        "--precision",
        choices=DECODING_PRECISIONS,
        default="auto",
        help="auto (default): fp32, so that the same command gives the same output on any machine and under any "
        "load; fp32; bf16 (autocast: faster on CPUs and GPUs with fast bf16, changes some outputs); int8 (a CPU's: "
        "int8 linear layers, faster, changes some outputs)",
    )
    group.add_argument(
        "--glossary",
        metavar="FILE",
        help="your terms, one 'source term<TAB>target term' per line: where a source term occurs (whole words, any "
        "case), its target term is in that sentence's translation, exactly as written, as a word of its own in the "
        "place of the model's own word for it; sentences without one are translated as without a glossary",
    )
    group.add_argument(
        "--target-language",
        metavar="CODE",
        help="a multilingual model's target language: OPUS-MT's, e.g. fra (its >>fra<< token goes before every "
        "sentence); NLLB's, M2M-100's or mBART-50's code, e.g. fra_Latn, __fr__, fr_XX (the output starts with it)",
    )
    add_shortlist_option(group)
    group.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)  # old spelling of --precision bf16
    group.add_argument(
        "--engine",
        choices=["torch", "ctranslate2"],
        default="torch",
        help="torch (default): vaswani's own search; ctranslate2: convert once into "
        "MODEL_DIR/ctranslate2 and decode with CTranslate2 (pip install 'vaswani[ct2]')",
    )
    group.add_argument(
        "--compute-type",
        choices=CT2_TYPES,
        help="with --engine ctranslate2: float32 (default, our outputs), int8 (faster), ...",
    )


def add_shortlist_option(group) -> None:
    group.add_argument(
        "--shortlist",
        nargs="?",
        const=True,
        metavar="FILE",
        help="compute each batch's output layer over the target words its source words can turn into (learned by "
        "vaswani shortlist; default file MODEL_DIR/shortlist.safetensors, or --shortlist=FILE): faster on large "
        "vocabularies, may change some outputs",
    )


def register(commands: argparse._SubParsersAction) -> None:
    translate = commands.add_parser("translate", help="translate lines of text, one output line per input line")
    translate.add_argument("model_dir")
    translate.add_argument("-i", "--input", help="input file, plain or .gz (default: standard input)")
    translate.add_argument("-o", "--output", help="output file (default: standard output)")
    translate.add_argument(
        "--n-best",
        type=int,
        default=1,
        help="write the N best translations with scores, as one JSON list per input line",
    )
    translate.add_argument("--scores", action="store_true", help="write JSON lines with scores")
    translate.add_argument(
        "--document",
        action="store_true",
        help="read the whole input as one text: split it into sentences, translate them and write the text back "
        "with its paragraphs, line breaks and spacing (default: one line in, one line out)",
    )
    translate.add_argument(
        "--format",
        choices=["text", "html", "markdown", "srt", "vtt", "docx", "pptx", "odt", "odp", "epub"],
        default="text",
        help="html or markdown: read the whole input as one document, translate its text as --document does and "
        "keep its markup: each inline tag around the words aligned to the ones it wrapped; code, scripts and URLs "
        "as written. srt, vtt, docx, pptx, odt, odp, epub: a file of that format, translated into one (-i and -o; "
        "picked by -i's extension without --format). Default: text",
    )
    translate.add_argument(
        "--source-language",
        metavar="CODE",
        help="NLLB's, M2M-100's or mBART-50's code of the input's language, e.g. deu_Latn (needed), or auto: each "
        "line's (each sentence's) language detected (vaswani[detect]); for other models, with --document or "
        "--format: the language whose sentence rules split the input, e.g. de (default: the training files')",
    )
    translate.add_argument(
        "--min-confidence",
        type=float,
        metavar="P",
        help="mark translations whose confidence is under P (0 to 1): counted on stderr with their line numbers, "
        "and low_confidence: true in --scores records (docs/benchmarks.md, Confidence: how well it predicts quality)",
    )
    translate.add_argument(
        "--other-languages",
        choices=("translate", "copy"),
        default="translate",
        help="a model of one source language: lines (sentences) detected as another language (vaswani[detect]; "
        "above the identifier's threshold) are counted in a warning and translated anyway, or copied unchanged "
        "(copy). Default: translate",
    )
    add_decode_options(translate)
    translate.set_defaults(run=_translate)
