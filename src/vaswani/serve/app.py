"""The HTTP service: `POST /v1/translate`, `GET /v1/model`, `GET /health`, `GET /metrics`, and the web page at `/`.

    app = create_app(Translator.load("runs/multi30k_de_en"), "runs/multi30k_de_en")
    uvicorn.run(app, host="127.0.0.1", port=8000)          # what `vaswani serve` does

Every user error is a 4xx with a one-line JSON `{"error": ...}`; requests are decoded together by the
micro-batcher (serve/batching.py); each text is split into sentences (decode/document.py) unless the request
says `split_sentences: false`, and tokenized once; `api_key` requires `Authorization: Bearer KEY` on /v1/ and
/metrics (serve/guards.py; `metrics_token` gives /metrics its own); /metrics is serve/metrics.py.

No `from __future__ import annotations` here: FastAPI reads the request model's annotation at run time.
"""

import asyncio
import contextlib
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from vaswani import __version__
from vaswani.decode.document import Document, assemble, puts_spaces, split
from vaswani.decode.engine import TorchEngine
from vaswani.decode.translator import Translator
from vaswani.runtime import ComputeThread
from vaswani.serve.batching import BusyError, MicroBatcher
from vaswani.serve.guards import ApiKey, BodyLimit
from vaswani.serve.metrics import Metrics, RequestMetrics

STATIC = Path(__file__).parent / "static"
ROUTES = frozenset({"/", "/health", "/metrics", "/v1/model", "/v1/translate", "/docs", "/openapi.json"})


@dataclass(frozen=True)
class Settings:
    """What a request may ask for, and how requests are batched."""

    max_texts: int = 64  # sentences per request, counted after splitting texts into sentences
    max_chars: int = 2000  # characters per sentence (after splitting)
    max_text_chars: int = 20000  # characters per text (before splitting: a document's paragraphs)
    max_body: int = 1 << 20  # bytes per request body
    max_beam: int = 16
    max_attention_texts: int = 8  # attention weights are layers x heads x T x S numbers per sentence
    max_queued: int = 4096  # sentences waiting for the worker; more get 503 and Retry-After
    max_wait: float = 0.005  # seconds the oldest request waits for others to batch with
    max_batch_tokens: int = 4096  # source tokens per decoding batch
    max_batch_sentences: int = 256
    api_key: str | None = None
    metrics_token: str | None = None  # guards /metrics instead of api_key (a scraper's own token)
    cors_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (
            "max_texts",
            "max_chars",
            "max_text_chars",
            "max_body",
            "max_beam",
            "max_attention_texts",
            "max_batch_tokens",
            "max_batch_sentences",
            "max_queued",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_wait < 0:
            raise ValueError(f"the batching wait must be >= 0 seconds, got {self.max_wait}")


class RequestError(ValueError):
    """A request that passed the schema but not the limits counted after splitting (HTTP 422)."""


def create_app(
    translator: Translator,
    model_dir: str | Path,
    settings: Settings = Settings(),
    load_seconds: float | None = None,
    compute: ComputeThread | None = None,
) -> FastAPI:
    """The service for one model; the micro-batcher's worker starts and stops with the app. `load_seconds`: how
    long loading the model took (reported by /metrics, with the precision measurement made at start-up).
    `compute`: the thread that loaded `translator`, where it will decode (runtime.ComputeThread; default: a new
    one, for a translator loaded elsewhere)."""
    s = settings
    source_language, target_language = translator.config.data.languages()

    class TranslateRequest(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        text: list[str] = Field(
            min_length=1, max_length=s.max_texts, description="texts to translate, in order: sentences or documents"
        )
        split_sentences: bool = Field(
            True,
            description="split each text into paragraphs, lines and sentences, translate the sentences and put "
            "the text back together (as DeepL's split_sentences); false: each text goes to the model as it is",
        )
        source_language: str | None = Field(
            None,
            pattern=r"^[a-z]{2,3}$",
            description="ISO 639 code whose sentence rules split the text (default: the model's source language)",
        )
        target_language: str | None = Field(
            None,
            max_length=64,
            description="a multilingual model's target language, e.g. fra: its >>fra<< token goes before every "
            "sentence (/v1/model lists the model's target_languages)",
        )
        beam: int | None = Field(None, ge=1, le=s.max_beam, description="beam size (default: the model's)")
        n_best: int = Field(1, ge=1, description="alternatives per sentence, best first (at most beam)")
        no_repeat_ngram: int | None = Field(
            None, ge=0, le=32, description="no n-gram of this many tokens twice in a translation (0: off)"
        )
        repetition_penalty: float | None = Field(
            None, gt=0, le=10, description="transformers' repetition penalty on tokens already output (1: off)"
        )
        attention: bool = Field(False, description="add the cross-attention of each sentence's best translation")

        @field_validator("text")
        @classmethod
        def _texts(cls, texts: list[str]) -> list[str]:
            for i, text in enumerate(texts):
                if len(text) > s.max_text_chars:
                    raise ValueError(f"text[{i}] has {len(text)} characters, more than the {s.max_text_chars} allowed")
                if "\x00" in text:
                    raise ValueError(f"text[{i}] contains a NUL character")
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError(f"text[{i}] is not valid Unicode (a lone surrogate)") from None
            return texts

        @field_validator("target_language")
        @classmethod
        def _target(cls, language: str | None) -> str | None:
            translator.language_token(language)  # a one-line ValueError naming the languages the model has
            return language

        @model_validator(mode="after")
        def _n_best(self) -> Self:
            beam = self.beam or translator.config.decode.beam_size
            if self.n_best > beam:
                raise ValueError(f"n_best ({self.n_best}) must be at most the beam size ({beam})")
            return self

    def sentences_of(request: TranslateRequest) -> tuple[list[Document] | None, list[str]]:
        """The request's documents (None without splitting) and all their sentences, within the limits."""
        documents = None
        if request.split_sentences:
            language = request.source_language or source_language
            documents = [split(text, language) for text in request.text]
            sentences = [x for d in documents for x in d.sentences]
        else:
            sentences = list(request.text)
        if len(sentences) > s.max_texts:
            raise RequestError(
                f"text has {len(sentences)} sentences in all, more than the {s.max_texts} a request may have: "
                "send fewer or shorter texts per request"
            )
        for i, sentence in enumerate(sentences):
            if len(sentence) > s.max_chars:
                where = f"sentence {i + 1} of the request" if documents is not None else f"text[{i}]"
                raise RequestError(f"{where} has {len(sentence)} characters, more than the {s.max_chars} allowed")
        if request.attention and len(sentences) > s.max_attention_texts:
            raise RequestError(
                f"attention is returned for at most {s.max_attention_texts} sentences per request, got {len(sentences)}"
            )
        return documents, sentences

    batcher: MicroBatcher | None = None
    metrics = Metrics(ROUTES, Path(model_dir).resolve().name, __version__)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        nonlocal batcher
        started = time.perf_counter()
        thread = compute or ComputeThread()
        # Settled now (an explicit bf16 measured to warn), not in the first request; on the thread that decodes
        # (runtime.ComputeThread says why).
        await asyncio.wrap_future(thread.submit(translator.choose_precision, translator.options()))
        if isinstance(translator.engine, TorchEngine):  # decode.compile: compiled now, not in the first requests
            await asyncio.wrap_future(thread.submit(translator.engine.warm_up, translator.options()))
        metrics.load_seconds.set((load_seconds or 0.0) + time.perf_counter() - started)
        batcher = MicroBatcher(
            translator,
            s.max_wait,
            s.max_batch_tokens,
            s.max_batch_sentences,
            s.max_queued,
            on_batch=metrics.batch,
            compute=thread,
        )
        metrics.watch_queue(lambda: batcher.queued if batcher else 0)
        app.state.batcher = batcher
        yield
        batcher.close()  # uvicorn has let the requests in flight finish
        if compute is None:
            thread.close()

    app = FastAPI(
        title="vaswani",
        version=__version__,
        lifespan=lifespan,
        description="Translation with a Transformer trained by vaswani.",
    )
    app.add_middleware(BodyLimit, limit=s.max_body)
    if s.api_key or s.metrics_token:  # checked before the body is read
        guarded = {"/v1/": s.api_key, "/metrics": s.metrics_token or s.api_key}
        app.add_middleware(ApiKey, keys={path: key for path, key in guarded.items() if key})
    if s.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(s.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(RequestMetrics, metrics=metrics)  # outermost: counts the guards' answers too
    _add_error_handlers(app)
    info = model_info(translator, model_dir, s)

    @app.get("/health")
    async def health() -> JSONResponse:
        """ "ok" while the translation worker runs (else 503), with what it has done."""
        stats = dataclasses.asdict(batcher.stats) if batcher else {}
        ok = batcher is not None and batcher.alive
        return JSONResponse(
            {"status": "ok" if ok else "unavailable", "queued_sentences": batcher.queued if ok else 0, **stats},
            200 if ok else 503,
        )

    @app.get("/metrics", include_in_schema=False)
    async def metrics_page(request: Request) -> Response:
        body, content_type = metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    @app.get("/v1/model")
    async def model() -> dict[str, Any]:
        return info

    @app.post("/v1/translate")
    async def translate(request: TranslateRequest) -> JSONResponse:
        started = time.perf_counter()
        try:
            documents, sentences = sentences_of(request)
        except RequestError as error:
            return JSONResponse({"error": str(error)}, 422)
        # the only tokenization: counted here, decoded by the batcher (requests for other languages batch together)
        ids = translator.encode_sources(sentences, request.target_language)
        tokens = sum(map(len, ids))
        if tokens > s.max_batch_tokens:
            return JSONResponse(
                {
                    "error": f"text has {tokens} source tokens in all, more than the {s.max_batch_tokens} "
                    "a request may have: send fewer or shorter texts per request"
                },
                422,
            )
        given = dict(
            beam_size=request.beam,
            no_repeat_ngram=request.no_repeat_ngram,
            repetition_penalty=request.repetition_penalty,
        )
        options = {k: v for k, v in given.items() if v is not None}
        try:
            results = (
                await batcher.translate(sentences, ids, n_best=request.n_best, attention=request.attention, **options)
                if sentences
                else []
            )
        except BusyError as error:
            return JSONResponse({"error": str(error)}, 503, headers={"Retry-After": "1"})
        if documents is None:
            translations = [r.to_dict() for r in results]
        else:
            joined = assemble(request.text, documents, results, puts_spaces(request.target_language or target_language))
            translations = [d.to_dict() for d in joined]
        return JSONResponse(
            {"translations": translations, "elapsed_ms": round((time.perf_counter() - started) * 1000, 1)}
        )

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


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
        first = details[0] if details else {"loc": [], "msg": "invalid request"}
        where = ".".join(part for part in first["loc"] if part != "body")
        message = first["msg"].removeprefix("Value error, ")
        if not where and first.get("type") == "missing":
            message = 'no request body: send JSON such as {"text": ["Ein Mann fährt Fahrrad."]}'
        return JSONResponse({"error": f"{where}: {message}" if where else message, "detail": details}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        message = str(error.detail)
        if error.status_code == 400 and message == "There was an error parsing the body":  # FastAPI's words
            message = "the request body could not be read as JSON: it must be UTF-8 encoded JSON"
        return JSONResponse({"error": message}, error.status_code, headers=error.headers)

    @app.exception_handler(Exception)
    async def internal(request: Request, error: Exception) -> JSONResponse:
        # Our own failure, never the client's input (which is validated first): said in JSON, logged by uvicorn.
        return JSONResponse({"error": f"internal error ({type(error).__name__}); the server log has the details"}, 500)


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


def model_info(translator: Translator, model_dir: str | Path, settings: Settings) -> dict[str, Any]:
    model_dir = Path(model_dir)
    c, config = translator.model.config, translator.config
    source, target = config.data.languages()
    decode = config.decode
    return {
        "name": model_dir.resolve().name,
        "source_language": source,
        "target_language": target,
        "target_languages": [piece[2:-2] for piece in translator.tokenizer.language_tokens],  # >>lang<< tokens
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
            "max_body_bytes": settings.max_body,
            "max_beam": settings.max_beam,
            "max_source_tokens": translator.max_source_tokens,
        },
        "training": training_summary(model_dir),
        "auth": settings.api_key is not None,
        "vaswani": __version__,
    }
