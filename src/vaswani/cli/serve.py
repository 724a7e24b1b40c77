"""Serving a model: `vaswani serve` (HTTP: serve/app.py)."""

from __future__ import annotations

import argparse

from vaswani.cli.lines import stderr_console
from vaswani.cli.translate import add_shortlist_option, report_precision
from vaswani.config import DECODING_PRECISIONS


def _serve(args: argparse.Namespace) -> None:
    import os

    try:
        import uvicorn

        from vaswani.serve.app import Settings, create_app
    except ImportError as error:
        raise ImportError(f"vaswani serve needs FastAPI and uvicorn ({error}): pip install 'vaswani[serve]'") from None
    import time

    from vaswani.runtime.allocator import keep_freed_memory, step_bytes
    from vaswani.serve.compute import ComputeThread
    from vaswani.translate.translator import Translator

    # Loading, measuring and decoding on one thread, never the event loop's: serve/compute.py says why.
    compute = ComputeThread()
    started = time.perf_counter()
    translator = compute.call(Translator.load, args.model_dir, args.device, args.precision, shortlist=args.shortlist)
    defaults = translator.request(compile=args.compile)  # what every HTTP request starts from
    console = stderr_console()
    compute.call(report_precision, translator, defaults, console)  # prepares the engine for it: Engine.prepare
    load_seconds = time.perf_counter() - started
    api_key = args.api_key or os.environ.get("VASWANI_API_KEY") or None
    if api_key is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        console.print(
            f"vaswani: warning: serving on {args.host} without an API key: anyone who can reach this "
            "machine can use it (--api-key, or VASWANI_API_KEY)"
        )
    batching = (
        dict(max_wait=0.0, max_batch_sentences=1)
        if args.no_batching
        else dict(
            max_wait=None if args.max_wait_ms is None else args.max_wait_ms / 1000,
            max_batch_tokens=args.max_batch_tokens,
            continuous=not args.batch_by_request,
        )
    )
    settings = Settings(
        max_texts=args.max_texts,
        max_chars=args.max_chars,
        max_text_chars=args.max_text_chars,
        api_key=api_key,
        metrics_token=args.metrics_token or os.environ.get("VASWANI_METRICS_TOKEN") or None,
        cors_origins=tuple(args.cors_origin or ()),
        govern_threads=True,
        **batching,
    )
    # the heap keeps freed memory up to a decoding step's largest tensor at the batch bound, not a fixed GiB
    rows = settings.max_batch_sentences * defaults.decode.beam_size
    keep_freed_memory(step_bytes(rows, translator.model.config.tgt_vocab_size))
    app = create_app(translator, args.model_dir, settings, load_seconds, compute, defaults)
    where = f"http://{args.host}:{args.port}"
    console.print(
        f"vaswani: serving {args.model_dir} at {where}/ (API docs: {where}/docs"
        f"{'; API key required' if api_key else ''}); Ctrl+C stops"
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=30)


def register(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="serve a model over HTTP: a JSON API and a web page")
    serve.add_argument("model_dir")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 opens it to the network)",
    )
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--api-key",
        help="require 'Authorization: Bearer KEY' on /v1/ (better: set VASWANI_API_KEY, "
        "which other users of this machine cannot read in the process list)",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="allow browser requests from this origin, e.g. https://example.org (repeatable; default: none)",
    )
    serve.add_argument(
        "--metrics-token",
        help="require 'Authorization: Bearer TOKEN' on /metrics (for a Prometheus scraper; better: set "
        "VASWANI_METRICS_TOKEN; default: /metrics is guarded by the API key, open when there is none)",
    )
    serve.add_argument(
        "--max-texts", type=int, default=64, help="sentences per request, counted after splitting (default 64)"
    )
    serve.add_argument("--max-chars", type=int, default=2000, help="characters per sentence (default 2000)")
    serve.add_argument(
        "--max-text-chars", type=int, default=20000, help="characters per text before splitting (default 20000)"
    )
    serve.add_argument(
        "--max-wait-ms",
        type=float,
        default=None,
        help="how long the first request of a batch waits for others to be translated with (default: 0 in a "
        "continuous batch, which later requests join at its next step; 5 ms with --batch-by-request)",
    )
    serve.add_argument(
        "--max-batch-tokens", type=int, default=4096, help="source tokens in a batch at once (default 4096)"
    )
    serve.add_argument("--no-batching", action="store_true", help="translate one sentence at a time")
    serve.add_argument(
        "--batch-by-request",
        action="store_true",
        help="run each batch to its end before the next starts, instead of sentences joining and leaving the "
        "running batch at every decoding step (continuous batching, the default)",
    )
    serve.add_argument("--device", default="auto", help="cpu, cuda, ... (default: the GPU if any)")
    serve.add_argument("--precision", choices=DECODING_PRECISIONS, default="auto", help="as for vaswani translate")
    add_shortlist_option(serve)
    serve.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        help="torch.compile the decoder's step (decode.compile; default: the model's config.yaml, off), compiled at "
        "startup before serving",
    )
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(run=_serve)
