"""The HTTP service: `POST /v1/translate`, `GET /v1/model`, `GET /health`, `GET /metrics`, and the web page at `/`.

    app = create_app(Translator.load("runs/multi30k_de_en"), "runs/multi30k_de_en")
    uvicorn.run(app, host="127.0.0.1", port=8000)          # what `vaswani serve` does

Every user error is a 4xx with a one-line JSON `{"error": ...}`; requests are decoded together by the
micro-batcher (serve/batching.py); each text is split into sentences (translate/document.py) unless the request
says `split_sentences: false`, and tokenized once; `api_key` requires `Authorization: Bearer KEY` on /v1/ and
/metrics (serve/guards.py; `metrics_token` gives /metrics its own); /metrics is serve/metrics.py; the routes are
serve/routes.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from vaswani import __version__
from vaswani.decode.request import DecodeRequest
from vaswani.serve.batching import MicroBatcher
from vaswani.serve.compute import ComputeThread
from vaswani.serve.guards import ApiKey, BodyLimit
from vaswani.serve.metrics import Metrics, RequestMetrics
from vaswani.serve.routes import TranslateRequest, one_line, router
from vaswani.translate.translator import Translator

DESCRIPTION = "Translation with a Transformer trained by vaswani."
STATIC = Path(__file__).parent / "static"
ROUTES = frozenset(
    {
        "/",
        "/health",
        "/metrics",
        "/v1/model",
        "/v1/translate",
        "/v1/translate_file",
        "/v1/detect",
        "/docs",
        "/openapi.json",
    }
)


@dataclass(frozen=True)
class Settings:
    """What a request may ask for, and how requests are batched."""

    max_texts: int = 64  # sentences per request, counted after splitting texts into sentences
    max_chars: int = 2000  # characters per sentence (after splitting)
    max_text_chars: int = 20000  # characters per text (before splitting: a document's paragraphs)
    max_body: int = 1 << 20  # bytes per request body
    max_file: int = 16 << 20  # bytes per file sent to /v1/translate_file (its body's bound)
    max_beam: int = 16
    max_attention_texts: int = 8  # attention weights are layers x heads x T x S numbers per sentence
    max_glossary: int = 1000  # glossary pairs per request
    max_queued: int = 4096  # sentences waiting for the worker; more get 503 and Retry-After
    # seconds the oldest request waits for others to batch with; None: 0 in a continuous batch (later requests join it
    # at its next step), 5 ms in a batch by request
    max_wait: float | None = None
    max_batch_tokens: int = 4096  # source tokens per decoding batch
    max_batch_sentences: int = 256
    continuous: bool = True  # sentences join and leave the running batch at every step (serve/continuous.py)
    # torch's threads kept to the CPUs other processes leave free while serving (`vaswani serve`'s; runtime/threads.py)
    govern_threads: bool = False
    api_key: str | None = None
    metrics_token: str | None = None  # guards /metrics instead of api_key (a scraper's own token)
    cors_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (
            "max_texts",
            "max_chars",
            "max_text_chars",
            "max_body",
            "max_file",
            "max_beam",
            "max_attention_texts",
            "max_glossary",
            "max_batch_tokens",
            "max_batch_sentences",
            "max_queued",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_wait is None:
            object.__setattr__(self, "max_wait", 0.0 if self.continuous else 0.005)
        if self.max_wait < 0:
            raise ValueError(f"the batching wait must be >= 0 seconds, got {self.max_wait}")


def create_app(
    translator: Translator,
    model_dir: str | Path,
    settings: Settings = Settings(),
    load_seconds: float | None = None,
    compute: ComputeThread | None = None,
    defaults: DecodeRequest | None = None,
) -> FastAPI:
    """The service for one model: serve/routes.py's routes reading what this puts on `app.state`; the
    micro-batcher's worker starts and stops with the app (`lifespan`). `load_seconds`: how long loading the model
    took (reported by /metrics, with the preparing done at start-up). `compute`: the thread that loaded
    `translator`, where it will decode (serve/compute.py; default: a new one, for a translator loaded
    elsewhere). `defaults`: the request each HTTP request starts from (default: the model's decode section)."""
    app = FastAPI(title="vaswani", version=__version__, lifespan=lifespan, description=DESCRIPTION)
    defaults = defaults or translator.request()
    app.state.translator, app.state.settings, app.state.defaults = translator, settings, defaults
    app.state.metrics = Metrics(ROUTES, Path(model_dir).resolve().name, __version__)
    app.state.identifiers = {}  # /v1/detect's language identifiers by codes, made at their first use
    app.state.info = model_info(translator, model_dir, settings, defaults)
    app.state.compute, app.state.load_seconds, app.state.static = compute, load_seconds or 0.0, STATIC
    app.add_middleware(
        BodyLimit, limit=settings.max_body, limits={"/v1/translate_file": settings.max_file + (64 << 10)}
    )
    if settings.api_key or settings.metrics_token:  # checked before the body is read
        guarded = {"/v1/": settings.api_key, "/metrics": settings.metrics_token or settings.api_key}
        app.add_middleware(ApiKey, keys={path: key for path, key in guarded.items() if key})
    if settings.cors_origins:
        methods, headers = ["GET", "POST"], ["Authorization", "Content-Type"]
        app.add_middleware(
            CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=methods, allow_headers=headers
        )
    app.add_middleware(RequestMetrics, metrics=app.state.metrics)  # outermost: counts the guards' answers too
    _add_error_handlers(app)
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    """The model prepared for the default request (precision settled, a compiled step compiled: Engine.prepare, once
    per engine) and the micro-batcher started, on the thread that decodes (serve/compute.py says why)."""
    state, s, started = app.state, app.state.settings, time.perf_counter()
    thread = state.compute or ComputeThread()
    await asyncio.wrap_future(thread.submit(state.translator.engine.prepare, state.defaults))
    state.metrics.load_seconds.set(state.load_seconds + time.perf_counter() - started)
    batcher = MicroBatcher(
        state.translator,
        s.max_wait,
        s.max_batch_tokens,
        s.max_batch_sentences,
        s.max_queued,
        state.metrics.batch,
        thread,
        s.continuous,
    )
    if s.govern_threads:
        from vaswani.runtime.threads import ThreadGovernor

        batcher.governor = ThreadGovernor()
    state.metrics.watch_queue(lambda: batcher.queued)
    state.batcher = batcher
    yield
    batcher.close()  # uvicorn has let the requests in flight finish
    if state.compute is None:
        thread.close()


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        details = [
            {
                "loc": [str(part) for part in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in error.errors()
        ]
        status, message = _validation_message(error, details)
        return JSONResponse({"error": one_line(message), "detail": details}, status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        message = _http_message(request, error)
        return JSONResponse({"error": one_line(message)}, error.status_code, headers=error.headers)

    @app.exception_handler(Exception)
    async def internal(request: Request, error: Exception) -> JSONResponse:
        # Our own failure, never the client's input (which is validated first): said in JSON, logged by uvicorn.
        return JSONResponse({"error": f"internal error ({type(error).__name__}); the server log has the details"}, 500)


EXAMPLE = '{"text": ["Ein Mann fährt Fahrrad."]}'


def _validation_message(error: RequestValidationError, details: list[dict[str, Any]]) -> tuple[int, str]:
    """The status and one-line message of a request that failed its schema, naming the field (or the body, or
    the Content-Type header) and what to send: pydantic's words alone name a JSON position or nothing."""
    first = details[0] if details else {"loc": [], "msg": "invalid request", "type": ""}
    loc, kind = first["loc"][1:] if first["loc"][:1] == ["body"] else first["loc"], first["type"]
    if kind == "json_invalid":
        reason = (error.errors()[0].get("ctx") or {}).get("error", "a syntax error")
        at = f" at character {loc[0]}" if loc else ""
        return 422, f"the request body is not valid JSON ({reason}{at}): send JSON such as {EXAMPLE}"
    if not loc:  # the body as a whole
        if kind == "missing":
            return 422, f"no request body: send JSON such as {EXAMPLE}"
        if isinstance(error.body, bytes | bytearray):  # FastAPI reads JSON only under a JSON content type
            return 415, "Content-Type: the body is read as JSON only with the header Content-Type: application/json"
        if kind in ("model_attributes_type", "dict_type"):
            return 422, f"the request body must be a JSON object such as {EXAMPLE}"
        if kind == "string_unicode":
            return 422, "the request body has a key that is not valid Unicode (a lone surrogate); send UTF-8 text"
        return 422, f"the request body: {first['msg']}"
    where = ".".join(_field_name(part) for part in loc)
    if kind == "extra_forbidden":
        return 422, f"{where}: unknown field; the fields are {', '.join(TranslateRequest.model_fields)}"
    return 422, f"{where}: {first['msg'].removeprefix('Value error, ')}"


def _field_name(part: str) -> str:
    """A field or index as written; any other key (empty, a line break, very long) quoted and cut short."""
    if part.isidentifier() or part.isdecimal():
        return part if len(part) <= 64 else part[:64] + "..."
    return json.dumps(part[:64] + ("..." if len(part) > 64 else ""))  # ASCII: control characters escaped


def _http_message(request: Request, error: StarletteHTTPException) -> str:
    """Starlette's words ("Not Found") with what was asked and what to do instead."""
    message, path = str(error.detail), _field_name(request.url.path)
    if error.status_code == 400 and message == "There was an error parsing the body":  # FastAPI's words
        return "the request body could not be read as JSON: send UTF-8 encoded JSON, its numbers under 4300 digits"
    if error.status_code == 404 and message == "Not Found":
        return f"{path}: no such page; the API is POST /v1/translate and GET /v1/model, /health, /metrics"
    if error.status_code == 405 and message == "Method Not Allowed":
        allowed = next((v for k, v in (error.headers or {}).items() if k.lower() == "allow"), "GET")
        return f"{_field_name(request.method)} {path}: method not allowed; use {allowed}"
    return message


def training_summary(model_dir: Path) -> dict[str, Any] | None:
    """Updates, epochs and the best validation figures from the run's metrics.jsonl, when there is one."""
    path = model_dir / "metrics.jsonl"
    if not path.is_file():
        return None
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            rows.append(json.loads(line))
    if not rows:
        return None
    valid = [r for r in rows if "valid_loss" in r]
    summary: dict[str, Any] = {
        "steps": max(r.get("step", 0) for r in rows),
        "epochs": max(r.get("epoch", 0) for r in rows),
        "elapsed_s": max((r.get("elapsed_s", 0) for r in rows), default=None),
    }
    if valid:
        summary["valid_loss"] = round(min(r["valid_loss"] for r in valid), 4)
        bleus = [r["valid_bleu"] for r in valid if r.get("valid_bleu") is not None]
        summary["valid_bleu"] = round(max(bleus), 2) if bleus else None
    return summary


def model_info(
    translator: Translator, model_dir: str | Path, settings: Settings, defaults: DecodeRequest
) -> dict[str, Any]:
    model_dir = Path(model_dir)
    c, config = translator.model.config, translator.config
    source, target = config.data.languages()
    decode = defaults.decode
    return {
        "name": model_dir.resolve().name,
        "source_language": source,
        "target_language": target,
        # >>lang<< tokens, or a many-to-many model's codes (its sources name theirs: source_languages)
        "target_languages": translator.languages.targets,
        "source_languages": translator.languages.sources,
        "parameters": translator.model.num_parameters(),
        "layers": c.n_layers,
        "decoder_layers": c.decoder_layers,
        "heads": c.n_heads,
        "d_model": c.d_model,
        "d_ff": c.d_ff,
        "vocabulary": {
            "source": c.src_vocab_size,
            "target": c.tgt_vocab_size,
            "shared": c.share_embeddings,
            "type": config.data.tokenizer,
        },
        "lowercase": config.data.lowercase,
        "decode": {
            "beam_size": decode.beam_size,
            "length_penalty": decode.length_penalty,
            "max_len_a": decode.max_len_a,
            "max_len_b": decode.max_len_b,
            "compile": decode.compile,
        },
        "limits": {
            "max_texts": settings.max_texts,
            "max_chars": settings.max_chars,
            "max_text_chars": settings.max_text_chars,
            "max_attention_texts": settings.max_attention_texts,
            "max_glossary": settings.max_glossary,
            "max_body_bytes": settings.max_body,
            "max_file_bytes": settings.max_file,
            "max_beam": settings.max_beam,
            "max_source_tokens": translator.max_source_tokens,
        },
        "training": training_summary(model_dir),
        "auth": settings.api_key is not None,
        "vaswani": __version__,
    }
