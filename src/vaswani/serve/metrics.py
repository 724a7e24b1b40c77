"""`GET /metrics`: what the service has done, in Prometheus' text format (prometheus_client), for the monitoring
people run servers under.

    vaswani_requests_total{route, status}            requests answered (route: the path, or "other")
    vaswani_request_duration_seconds{route}          time from request to response (histogram)
    vaswani_sentences_translated_total               sentences decoded (a text of 3 sentences counts 3)
    vaswani_source_tokens_total, vaswani_target_tokens_total
    vaswani_batch_sentences, vaswani_batch_requests  sentences and requests per decoding batch (histograms)
    vaswani_batch_duration_seconds                   time the model spent on each batch (histogram)
    vaswani_queue_sentences                          sentences waiting for the worker now
    vaswani_model_load_seconds                       time taken to load the model and measure its precision
    vaswani_model_info{name, version}                always 1, labelled

Each app has its own registry (several apps in one process, as in the tests, keep their counts apart).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    def __init__(self, routes: frozenset[str], model_name: str, version: str) -> None:
        self.routes = routes  # the label values of `route`; anything else is "other" (bounded cardinality)
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "vaswani_requests", "HTTP requests answered, by route and status", ["route", "status"], registry=registry
        )
        self.latency = Histogram(
            "vaswani_request_duration_seconds",
            "Time from receiving a request to the end of its response",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.sentences = Counter("vaswani_sentences_translated", "Sentences translated", registry=registry)
        self.source_tokens = Counter("vaswani_source_tokens", "Source tokens translated", registry=registry)
        self.target_tokens = Counter(
            "vaswani_target_tokens", "Target tokens generated (best translations)", registry=registry
        )
        self.batch_sentences = Histogram(
            "vaswani_batch_sentences", "Sentences per decoding batch", buckets=SIZE_BUCKETS, registry=registry
        )
        self.batch_requests = Histogram(
            "vaswani_batch_requests", "Requests per decoding batch", buckets=SIZE_BUCKETS, registry=registry
        )
        self.batch_seconds = Histogram(
            "vaswani_batch_duration_seconds", "Decoding time per batch", buckets=LATENCY_BUCKETS, registry=registry
        )
        self.queue = Gauge("vaswani_queue_sentences", "Sentences waiting to be translated", registry=registry)
        self.load_seconds = Gauge(
            "vaswani_model_load_seconds", "Seconds to load the model and choose its precision", registry=registry
        )
        info = Gauge("vaswani_model_info", "The model served", ["name", "version"], registry=registry)
        info.labels(model_name, version).set(1)

    def watch_queue(self, queued: Callable[[], float]) -> None:
        self.queue.set_function(queued)

    def batch(self, sentences: int, requests: int, source_tokens: int, target_tokens: int, seconds: float) -> None:
        """One decoding batch done (called from the batcher's worker thread; prometheus_client is thread-safe)."""
        self.sentences.inc(sentences)
        self.source_tokens.inc(source_tokens)
        self.target_tokens.inc(target_tokens)
        self.batch_sentences.observe(sentences)
        self.batch_requests.observe(requests)
        self.batch_seconds.observe(seconds)

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition in the format the scraper asks for (Prometheus text, or OpenMetrics), its content type."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type


class RequestMetrics:
    """ASGI middleware counting every HTTP response by route and status, and timing it."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500
        route = scope["path"] if scope["path"] in self.metrics.routes else "other"

        async def sending(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)
