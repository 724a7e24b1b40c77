"""The `vaswani` command: thin argument parsing over the library; errors are one line, no traceback."""

from __future__ import annotations

import argparse
import sys

from vaswani.config import PRECISIONS, PRESETS, ConfigError, ModelConfig
from vaswani.export import CT2_TYPES


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
    from vaswani.runtime import keep_freed_memory, pick_device
    from vaswani.train.trainer import Trainer

    prepared = [f"data.prepared={args.prepared}"] if args.prepared else []
    config = Config.load(args.config, [*(args.set or []), *prepared])
    keep_freed_memory()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # started by torchrun
        backend = "nccl" if pick_device(config.train.device).type == "cuda" else "gloo"
        dist.init_process_group(backend)
    try:
        Trainer(config, args.model_dir).train()
        if dist.is_initialized():
            dist.barrier()  # leave together: rank 0 still validates and saves while the others are done
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _prepare(args: argparse.Namespace) -> None:
    import time
    from pathlib import Path

    from rich.console import Console

    from vaswani.config import Config
    from vaswani.train.data import default_workers, open_or_prepare, recipe_of

    config = Config.load(args.config, args.set or [])
    console = Console(stderr=True, soft_wrap=True)
    if config.task in ("lm", "mlm"):
        from vaswani.data.text import prepare_text

        prepare_text(config.data, Path(args.data_dir), config.train.seed,
                            log=lambda message: console.print(message, highlight=False))
        print(f"{args.data_dir}: train with: vaswani train {args.config} MODEL_DIR --prepared {args.data_dir}")
        return
    config.data.require_training_data()
    recipe = recipe_of(config.data, config.model.share_embeddings, config.train.seed)
    started = time.perf_counter()
    data = open_or_prepare(recipe, Path(args.data_dir), None, args.workers or default_workers(),
                           lambda message: console.print(message, highlight=False), console)
    report = data.manifest["report"]
    print(f"{args.data_dir}: {report['kept']:,} of {report['total']:,} training pairs kept, "
          f"{sum(e['bytes'] for e in data.manifest['files'].values()) / 1e6:,.1f} MB, "
          f"{time.perf_counter() - started:.1f} s; train with: vaswani train {args.config} MODEL_DIR "
          f"--prepared {args.data_dir}")


def _finetune(args: argparse.Namespace) -> None:
    from vaswani.runtime import keep_freed_memory
    from vaswani.train.finetune import finetune

    keep_freed_memory()
    finetune(args.pretrained_dir, args.config, args.model_dir, args.set or [])


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

    def on_token(k: int, token: int) -> None:  # stream: print what the new token adds to the text
        ids_so_far.setdefault(k, []).append(token)
        text = generator.decode(ids_so_far[k])
        sys.stdout.write(text[len(written.get(k, "")):])
        sys.stdout.flush()
        written[k] = text

    for k in range(args.n):
        if k:
            sys.stdout.write("\n\n---\n\n")
        sys.stdout.write(prompt)
        generator.generate_ids(ids, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed + k,
                               1, args.greedy, not args.no_cache, on_token=lambda _, t, k=k: on_token(k, t))
    sys.stdout.write("\n")


def _classify(args: argparse.Namespace) -> None:
    from vaswani.data.corpus import LineReader
    from vaswani.decode.classifier import Classifier

    classifier = Classifier.load(args.model_dir, args.device)
    console = _stderr()
    reader = LineReader(args.input)
    output = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    try:
        for first, lines in reader.chunks(1 if reader.interactive else 4096):
            for number in reader.replaced:
                console.print(f"vaswani: warning: line {number}: invalid UTF-8, replaced with U+FFFD")
            reader.replaced.clear()
            for i, line in enumerate(lines):
                if not line.strip():
                    console.print(f"vaswani: warning: line {first + i + 1} is empty; classified as empty text")
            for label, probability in classifier.classify(lines, args.batch_size):
                output.write(f"{label}\t{probability:.4f}\n")
            output.flush()
    finally:
        if output is not sys.stdout:
            output.close()


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


def _decode_options(args: argparse.Namespace) -> dict:
    """DecodeConfig overrides given on the command line (None: the model's own setting)."""
    return dict(beam_size=args.beam, length_penalty=args.length_penalty, max_len_a=args.max_len_a,
                max_len_b=args.max_len_b, early_stopping=args.early_stopping or None, batch_size=args.batch_size,
                sampling=args.sample or None, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                seed=args.seed)


def _precision(args: argparse.Namespace) -> str:
    return "bf16" if args.bf16 else args.precision


def _load_translator(args: argparse.Namespace):
    from vaswani.decode.translator import Translator

    if args.compute_type and args.engine != "ctranslate2":
        raise ValueError("--compute-type applies to --engine ctranslate2; for --engine torch use --precision")
    return Translator.load(args.model_dir, args.device, _precision(args), args.engine, args.compute_type or "float32")


def _report_precision(translator, decode, console) -> None:
    """The precision decoding runs in, with its measurement; a warning where an explicit bf16 is slower."""
    if translator.engine is not None:
        console.print(f"vaswani: {translator.engine.describe()}")
        if decode.length_penalty and not decode.sampling and decode.beam_size > 1:
            console.print(f"vaswani: note: CTranslate2 divides scores by length^{decode.length_penalty}, not by GNMT's "
                          f"((5 + length) / 6)^{decode.length_penalty}; --length-penalty 0 gives --engine torch's "
                          "output exactly")
        return
    choice = translator.choose_precision(decode)
    if choice.measurement is not None or choice.reason:
        console.print(f"vaswani: {choice.describe()}")
    if choice.warning():
        console.print(f"vaswani: warning: {choice.warning()}")


def _stderr():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _translate(args: argparse.Namespace) -> None:
    import json

    from vaswani.console import progress_bar
    from vaswani.data.corpus import LineReader

    translator = _load_translator(args)
    overrides = _decode_options(args)
    decode = translator.options(**overrides)  # validated once, before reading any input
    batch_size = decode.batch_size
    detailed = args.n_best > 1 or args.scores
    console = _stderr()
    _report_precision(translator, decode, console)
    reader = LineReader(args.input)
    output = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    try:
        with progress_bar(console, "translating", reader.total, enabled=reader.total is not None) as advance:
            for first, lines in reader.chunks(1 if reader.interactive else 16 * batch_size):
                def warn(index: int, message: str, first: int = first) -> None:
                    console.print(f"vaswani: warning: line {first + index + 1}: {message}")

                for number in reader.replaced:
                    console.print(f"vaswani: warning: line {number}: invalid UTF-8, replaced with U+FFFD")
                reader.replaced.clear()
                results = translator.translate_with_details(lines, n_best=args.n_best, warn=warn, progress=advance,
                                                            **overrides)
                for result in results:
                    if detailed:
                        record = [{"text": c.text, "score": round(c.score, 4), "log_prob": round(c.log_prob, 4)}
                                  for c in result.candidates]
                        output.write(json.dumps(record, ensure_ascii=False) + "\n")
                    else:
                        output.write(result.text + "\n")
                output.flush()
    finally:
        if output is not sys.stdout:
            output.close()


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
        translator = _load_translator(args)
        console = _stderr()
        _report_precision(translator, translator.options(**_decode_options(args)), console)
        with progress_bar(console, "translating", len(sources)) as advance:
            hypotheses = translator.translate(sources, progress=advance, **_decode_options(args))
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


def _add_decode_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("search (default: the model's config.yaml decode section)")
    group.add_argument("--beam", type=int, help="beam size; 1 is greedy search (paper: 4)")
    group.add_argument("--length-penalty", type=float, help="GNMT length penalty alpha (paper: 0.6)")
    group.add_argument("--max-len-a", type=float, help="maximum output length = a * source length + b")
    group.add_argument("--max-len-b", type=int, help="(paper: source length + 50)")
    group.add_argument("--early-stopping", action="store_true",
                       help="end a sentence as soon as beam-size hypotheses have finished (fairseq's rule; faster, "
                            "shorter outputs) instead of when none can improve on the best (the paper's code)")
    group.add_argument("--batch-size", type=int, help="sentences per batch")
    group.add_argument("--sample", action="store_true", help="sample instead of beam search")
    group.add_argument("--temperature", type=float, help="sampling temperature")
    group.add_argument("--top-k", type=int, help="sample among the k most probable tokens")
    group.add_argument("--top-p", type=float, help="nucleus sampling probability mass")
    group.add_argument("--seed", type=int, help="sampling seed")
    group.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: the GPU if any)")
    group.add_argument("--precision", choices=PRECISIONS, default="auto",
                       help="auto (default): bf16 autocast only where it measures clearly faster than fp32 for "
                            "this model and batch on this device; fp32; bf16")
    group.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)  # old spelling of --precision bf16
    group.add_argument("--engine", choices=["torch", "ctranslate2"], default="torch",
                       help="torch (default): vaswani's own search; ctranslate2: convert once into "
                            "MODEL_DIR/ctranslate2 and decode with CTranslate2 (pip install 'vaswani[ct2]')")
    group.add_argument("--compute-type", choices=CT2_TYPES,
                       help="with --engine ctranslate2: float32 (default, our outputs), int8 (faster), ...")


def _attention(args: argparse.Namespace) -> None:
    from vaswani.decode.translator import Translator
    from vaswani.viz import plot_attention

    if not args.source.strip():
        raise ValueError("the source sentence is empty: give a sentence to look at")
    translator = Translator.load(args.model_dir, args.device, precision="fp32")
    options = {"beam_size": args.beam} if args.beam else {}
    translation = translator.attention(args.source, args.target, **options)
    path = plot_attention(translation, args.output, args.kind, args.layer, args.head)
    print(f"{translation.source}  →  {translation.text}\nwrote {path}")


def _serve(args: argparse.Namespace) -> None:
    import os

    try:
        import uvicorn

        from vaswani.serve.app import Settings, create_app
    except ImportError as error:
        raise ImportError(f"vaswani serve needs FastAPI and uvicorn ({error}): pip install 'vaswani[serve]'") from None
    from vaswani.decode.translator import Translator

    translator = Translator.load(args.model_dir, args.device, args.precision)
    console = _stderr()
    _report_precision(translator, translator.options(), console)  # measured once, before the first request
    api_key = args.api_key or os.environ.get("VASWANI_API_KEY") or None
    if api_key is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"vaswani: warning: serving on {args.host} without an API key: anyone who can reach this "
                      "machine can use it (--api-key, or VASWANI_API_KEY)")
    batching = dict(max_wait=0.0, max_batch_sentences=1) if args.no_batching else dict(
        max_wait=args.max_wait_ms / 1000, max_batch_tokens=args.max_batch_tokens)
    settings = Settings(max_texts=args.max_texts, max_chars=args.max_chars, api_key=api_key,
                        cors_origins=tuple(args.cors_origin or ()), **batching)
    app = create_app(translator, args.model_dir, settings)
    where = f"http://{args.host}:{args.port}"
    print(f"vaswani: serving {args.model_dir} at {where}/ (API docs: {where}/docs"
          f"{'; API key required' if api_key else ''}); Ctrl+C stops", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=30)


def _export(args: argparse.Namespace) -> None:
    from vaswani.config import Config
    from vaswani.export import export

    out = export(args.model_dir, args.out_dir, args.to, args.quantization)
    loader = {"ctranslate2": "ctranslate2.Translator", "huggingface": "MarianMTModel.from_pretrained"}[args.to]
    print(f"exported {args.model_dir} to {out} ({args.to}{', ' + args.quantization if args.quantization else ''}); "
          f"load it with {loader}({str(out)!r})")
    if Config.load(f"{args.model_dir}/config.yaml").data.lowercase:
        print("note: this model was trained on lowercased text (data.lowercase): lowercase its inputs before "
              "translating with the exported model", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vaswani", description="The Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    model = commands.add_parser("model", help="show a preset architecture and its parameter count")
    model.add_argument("preset", help=f"one of {', '.join(PRESETS)}")
    model.add_argument("--vocab-size", type=int, help="shared vocabulary size (default: 37000, as the paper)")
    model.set_defaults(run=_model)

    train = commands.add_parser("train", help="train a model (translation, lm or mlm: the config's model.type); "
                                "resumes an existing run")
    train.add_argument("config", help="YAML recipe, e.g. configs/multi30k_de_en.yaml")
    train.add_argument("model_dir", help="directory for the model, checkpoints and logs")
    train.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                       help="override one config field, e.g. --set train.max_steps=2000 (repeatable)")
    train.add_argument("--prepared", metavar="DATA_DIR",
                       help="prepared data to train from (made by vaswani prepare; made here when missing)")
    train.set_defaults(run=_train)

    prepare = commands.add_parser("prepare", help="tokenize a config's corpora once into memory-mapped arrays")
    prepare.add_argument("config", help="YAML recipe: its data section (and model.share_embeddings) decide the arrays")
    prepare.add_argument("data_dir", help="directory to write (new), or to check when it exists")
    prepare.add_argument("--workers", type=int, help="encoding processes (default: every core)")
    prepare.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one config field")
    prepare.set_defaults(run=_prepare)

    finetune = commands.add_parser("finetune", help="fine-tune a pretrained language model on labelled text")
    finetune.add_argument("pretrained_dir", help="a decoder_only or encoder_only model trained by vaswani train")
    finetune.add_argument("config", help="fine-tuning recipe, e.g. configs/sst2_finetune.yaml")
    finetune.add_argument("model_dir", help="directory for the fine-tuned model (resumes a run there)")
    finetune.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                          help="override one config field, e.g. --set finetune.aux_weight=0 (repeatable)")
    finetune.set_defaults(run=_finetune)

    generate = commands.add_parser("generate", help="continue a prompt with a decoder-only language model")
    generate.add_argument("model_dir")
    generate.add_argument("--prompt", help="text to continue (default: a new line)")
    generate.add_argument("--prompt-file", help="read the prompt from this file")
    generate.add_argument("--max-new-tokens", type=int, default=300)
    generate.add_argument("--temperature", type=float, default=1.0)
    generate.add_argument("--top-k", type=int, default=0, help="sample among the k most probable tokens (0: all)")
    generate.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: the smallest set with this mass")
    generate.add_argument("--greedy", action="store_true", help="the most probable token every time")
    generate.add_argument("--seed", type=int, default=1, help="the same seed gives the same text (default 1)")
    generate.add_argument("-n", type=int, default=1, help="how many continuations (seeds SEED, SEED+1, ...)")
    generate.add_argument("--no-cache", action="store_true", help="re-run the whole text every step (slow; a check)")
    generate.add_argument("--device", default="auto", help="cpu, cuda, ... (default: the GPU if any)")
    generate.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    generate.set_defaults(run=_generate)

    classify = commands.add_parser("classify", help="label lines of text with a fine-tuned model")
    classify.add_argument("model_dir")
    classify.add_argument("-i", "--input", help="input file, plain or .gz (default: standard input)")
    classify.add_argument("-o", "--output", help="output file: label<TAB>probability per line (default: stdout)")
    classify.add_argument("--batch-size", type=int, default=64)
    classify.add_argument("--device", default="auto", help="cpu, cuda, ... (default: the GPU if any)")
    classify.set_defaults(run=_classify)

    average = commands.add_parser("average", help="average checkpoints into the model to translate with")
    average.add_argument("model_dir")
    average.add_argument("--last", type=int, default=5, help="average the last N checkpoints (default 5, as §6.1)")
    average.add_argument("--checkpoints", nargs="+", help="checkpoint directories to average instead")
    average.add_argument("--output", help="weights file to write (default: MODEL_DIR/model.safetensors)")
    average.set_defaults(run=_average)

    translate = commands.add_parser("translate", help="translate lines of text, one output line per input line")
    translate.add_argument("model_dir")
    translate.add_argument("-i", "--input", help="input file, plain or .gz (default: standard input)")
    translate.add_argument("-o", "--output", help="output file (default: standard output)")
    translate.add_argument("--n-best", type=int, default=1,
                           help="write the N best translations with scores, as one JSON list per input line")
    translate.add_argument("--scores", action="store_true", help="write JSON lines with scores")
    _add_decode_options(translate)
    translate.set_defaults(run=_translate)

    evaluate = commands.add_parser("evaluate", help="sacreBLEU and chrF of a model (or of existing output)")
    evaluate.add_argument("model_dir", nargs="?", help="model to translate --src with")
    evaluate.add_argument("--src", help="source file to translate")
    evaluate.add_argument("--ref", required=True, help="reference translations, one per line")
    evaluate.add_argument("--hyp", help="score this file instead of translating")
    evaluate.add_argument("--output", help="also write the translations here")
    evaluate.add_argument("--lc", action="store_true", help="case-insensitive BLEU (sacrebleu -lc)")
    evaluate.add_argument("--tok-lc", action="store_true",
                          help="also report lowercased, Moses-tokenized BLEU, as the Multi30k literature")
    evaluate.add_argument("--tok-ref", help="tokenized lowercased references for --tok-lc (default: Multi30k's tok/ "
                          "file next to --ref, else --ref tokenized)")
    evaluate.add_argument("--lang", help="target language for --tok-lc (default: from the --ref file name)")
    _add_decode_options(evaluate)
    evaluate.set_defaults(run=_evaluate)

    attention = commands.add_parser("attention", help="draw a sentence's attention weights as heatmaps (PNG)")
    attention.add_argument("model_dir")
    attention.add_argument("source", help="the source sentence")
    attention.add_argument("--target", help="the target to look at (default: the model's own translation)")
    attention.add_argument("--kind", choices=["cross", "encoder", "decoder"], default="cross",
                           help="cross (encoder-decoder, default), encoder or decoder self-attention")
    attention.add_argument("--layer", type=int, help="only this layer (1-based; default: every layer)")
    attention.add_argument("--head", type=int, help="only this head (1-based; default: every head)")
    attention.add_argument("--beam", type=int, help="beam size of the translation (default: the model's)")
    attention.add_argument("--device", default="auto", help="cpu, cuda, ... (default: the GPU if any)")
    attention.add_argument("-o", "--output", default="attention.png", help="PNG to write (default attention.png)")
    attention.set_defaults(run=_attention)

    serve = commands.add_parser("serve", help="serve a model over HTTP: a JSON API and a web page")
    serve.add_argument("model_dir")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                       "only; 0.0.0.0 opens it to the network)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on /v1/ (better: set VASWANI_API_KEY, "
                       "which other users of this machine cannot read in the process list)")
    serve.add_argument("--cors-origin", action="append", metavar="ORIGIN",
                       help="allow browser requests from this origin, e.g. https://example.org (repeatable; "
                            "default: none)")
    serve.add_argument("--max-texts", type=int, default=64, help="sentences per request (default 64)")
    serve.add_argument("--max-chars", type=int, default=2000, help="characters per sentence (default 2000)")
    serve.add_argument("--max-wait-ms", type=float, default=5.0,
                       help="how long a request waits for others to be translated with (default 5 ms)")
    serve.add_argument("--max-batch-tokens", type=int, default=4096, help="source tokens per batch (default 4096)")
    serve.add_argument("--no-batching", action="store_true", help="translate one request at a time")
    serve.add_argument("--device", default="auto", help="cpu, cuda, ... (default: the GPU if any)")
    serve.add_argument("--precision", choices=PRECISIONS, default="auto", help="as for vaswani translate")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(run=_serve)

    export = commands.add_parser("export", help="write the model for CTranslate2 or Hugging Face transformers")
    export.add_argument("model_dir")
    export.add_argument("out_dir", help="directory to write (new or empty)")
    export.add_argument("--to", required=True, choices=["ctranslate2", "huggingface"])
    export.add_argument("--quantization", choices=CT2_TYPES,
                        help="CTranslate2 weight type (default float32; int8 is smaller and faster on CPUs)")
    export.set_defaults(run=_export)
    return parser


def _version() -> str:
    from vaswani import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (ConfigError, ValueError, OSError, ImportError) as error:  # DataError, CheckpointError are ValueErrors
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
