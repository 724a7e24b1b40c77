"""Soak test of `vaswani serve` (issue 60): the real uvicorn process under 32 client threads for minutes, a quarter
of the requests malformed, every answer checked to be its own and the server's memory watched.

    python benchmarks/soak.py                      # a tiny model directory, 5 minutes, 32 clients
    python benchmarks/soak.py runs/quick --minutes 1 --clients 8 --threads 1

Before the load, each text of a pool (Multi30k test sentences) is translated once per option set: decoding is
deterministic and batch-invariant, so under load every valid request's translations must equal those, text by
text, and each sentence record's `source` must be that request's own text; a response carrying another request's
texts or translations counts as swapped. Each malformed request (a fixed set: wrong types, unknown keys, huge
values, broken JSON and UTF-8, wrong content types, empty and oversized bodies, wrong methods and paths) must get
its own 4xx with a one-line JSON error. The server's RSS is sampled every few seconds (/proc/PID/status):
its median over the first minute against the last ("memory flat": under 10% growth). A minute's warm-up at full
load comes first: the RSS grows with each batch shape decoded for the first time (sentences x length x beam: the
math libraries' per-shape caches and the allocator's high-water mark, bounded), not with the requests; decoding
the same shapes again adds nothing.
Results: benchmarks/results/soak.json, and a table on stdout.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # provenance.py, also where this module is imported by path (tests)
from provenance import stamp  # noqa: E402

from tests.helpers.common import MULTI30K, write_tiny_model_directory  # noqa: E402
from vaswani.serve.launch import launch  # noqa: E402

RESULTS = ROOT / "benchmarks/results/soak.json"
JSON = {"content-type": "application/json"}
OPTION_SETS = ({}, {"beam": 1}, {"beam": 2, "n_best": 2})  # requests batch apart by options: three queues at once
LIMIT = 1 << 20  # the server's default body limit
MALFORMED: list[tuple[str, str, str, dict[str, Any], int]] = [  # (what, method, path, request arguments, status)
    ("broken JSON", "POST", "/v1/translate", {"content": b'{"text": ["Ein Mann"', "headers": JSON}, 422),
    ("invalid UTF-8", "POST", "/v1/translate", {"content": b'{"text": ["\xff\xfe"]}', "headers": JSON}, 400),
    ("a lone surrogate", "POST", "/v1/translate", {"content": b'{"text": ["\\ud800"]}', "headers": JSON}, 422),
    ("a string for the list", "POST", "/v1/translate", {"json": {"text": "Hallo"}}, 422),
    ("an empty list", "POST", "/v1/translate", {"json": {"text": []}}, 422),
    ("a number in the list", "POST", "/v1/translate", {"json": {"text": ["a", 3]}}, 422),
    ("null text", "POST", "/v1/translate", {"json": {"text": None}}, 422),
    ("an object for text", "POST", "/v1/translate", {"json": {"text": {"a": ["b"]}}}, 422),
    ("a NUL character", "POST", "/v1/translate", {"json": {"text": ["a\x00b"]}}, 422),
    ("beam as a string", "POST", "/v1/translate", {"json": {"text": ["a"], "beam": "4"}}, 422),
    ("beam 10**9", "POST", "/v1/translate", {"json": {"text": ["a"], "beam": 10**9}}, 422),
    ("beam -1", "POST", "/v1/translate", {"json": {"text": ["a"], "beam": -1}}, 422),
    ("n_best 0", "POST", "/v1/translate", {"json": {"text": ["a"], "n_best": 0}}, 422),
    (
        "repetition_penalty 1e-300",
        "POST",
        "/v1/translate",
        {"json": {"text": ["a"], "repetition_penalty": 1e-300}},
        422,
    ),
    ("an unknown key", "POST", "/v1/translate", {"json": {"text": ["a"], "bean": 4}}, 422),
    ("a key with a line break", "POST", "/v1/translate", {"json": {"text": ["a"], "a\nb": 1}}, 422),
    ("10**4 texts", "POST", "/v1/translate", {"json": {"text": ["Hallo"] * 10**4}}, 422),
    ("a 20,001-character text", "POST", "/v1/translate", {"json": {"text": ["x" * 20001]}}, 422),
    ("1,001 glossary pairs", "POST", "/v1/translate", {"json": {"text": ["a"], "glossary": [["w", "x"]] * 1001}}, 422),
    (
        "a surrogate in a glossary",
        "POST",
        "/v1/translate",
        {"content": b'{"text": ["a"], "glossary": [["a", "\\udc00"]]}', "headers": JSON},
        422,
    ),
    ("a body over the limit", "POST", "/v1/translate", {"content": b"x" * (LIMIT + 1), "headers": JSON}, 413),
    ("a JSON list for the body", "POST", "/v1/translate", {"json": ["Hallo"]}, 422),
    ("an empty body", "POST", "/v1/translate", {"content": b"", "headers": JSON}, 422),
    (
        "text/plain",
        "POST",
        "/v1/translate",
        {"content": b'{"text": ["a"]}', "headers": {"content-type": "text/plain"}},
        415,
    ),
    ("GET on translate", "GET", "/v1/translate", {}, 405),
    ("an unknown path", "POST", "/v2/translate", {"json": {"text": ["Hallo"]}}, 404),
]


@dataclass
class Tally:
    """What the clients met, counted under one lock (32 threads add to it)."""

    valid: Counter = field(default_factory=Counter)  # status (or transport error) of the valid requests
    malformed: Counter = field(default_factory=Counter)  # status of the malformed ones
    unexpected: Counter = field(default_factory=Counter)  # "what: got status" where a malformed one got another
    swapped: int = 0  # valid 200s whose translations or sources were not their own
    examples: list = field(default_factory=list)  # the first few swaps, for the report
    latencies: list = field(default_factory=list)  # seconds of each valid 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, update: Callable[[Tally], None]) -> None:
        with self.lock:
            update(self)


def candidates(count: int) -> list[str]:
    """Distinct one-line German sentences: Multi30k's test set where the shared data has it, else made up."""
    path = MULTI30K / "raw/test_2016_flickr.de.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            lines = list(dict.fromkeys(line.strip() for line in handle if line.strip()))
        return lines[:count]
    return [f"Ein Mann mit {n} Hunden geht über die Brücke." for n in range(count)]


def expected(url: str, texts: list[str], size: int) -> tuple[list[str], dict[tuple[int, str], str]]:
    """Each text's translation under each option set, asked before the load (32 texts a request: batches of other
    shapes than the load's, which must not matter), and the pool: `size` texts whose translations differ from
    every other's, where there are enough (a swap between two texts translated alike would go unseen)."""
    out: dict[tuple[int, str], str] = {}
    with httpx.Client(base_url=url, timeout=300) as http:
        for (k, options), start in itertools.product(enumerate(OPTION_SETS), range(0, len(texts), 32)):
            chunk = texts[start : start + 32]
            response = http.post("/v1/translate", json={"text": chunk, **options})
            response.raise_for_status()
            for text, translation in zip(chunk, response.json()["translations"], strict=True):
                out[k, text] = translation["text"]
    outputs = Counter(tuple(out[k, t] for k in range(len(OPTION_SETS))) for t in texts)
    unique = [t for t in texts if outputs[tuple(out[k, t] for k in range(len(OPTION_SETS)))] == 1]
    pool = (unique + [t for t in texts if t not in unique])[:size]
    return pool, out


def own(texts: list[str], translations: Any, options: int, reference: dict[tuple[int, str], str]) -> bool:
    """Whether a 200's body answers these texts: one translation per text, each equal to the text's translation
    alone, and each sentence record's source found in its own text, in order."""
    if not isinstance(translations, list) or len(translations) != len(texts):
        return False
    for text, translation in zip(texts, translations, strict=True):
        if translation.get("text") != reference[options, text]:
            return False
        at = 0
        for sentence in translation.get("sentences", []):
            found = text.find(sentence.get("source", "\0"), at)
            if found < 0:
                return False
            at = found + len(sentence["source"])
    return True


def valid_request(http: httpx.Client, rng: random.Random, pool: list[str], reference: dict, tally: Tally) -> None:
    """One request of 1 to 3 pool texts under one option set, checked to be answered with its own translations."""
    options = rng.randrange(len(OPTION_SETS))
    texts = rng.sample(pool, rng.randint(1, min(3, len(pool))))
    started = time.perf_counter()
    try:
        response = http.post("/v1/translate", json={"text": texts, **OPTION_SETS[options]})
    except httpx.TransportError as error:
        name = f"connection: {type(error).__name__}"
        tally.add(lambda t: t.valid.update([name]))
        return
    seconds, status = time.perf_counter() - started, response.status_code
    mine = status != 200 or own(texts, response.json()["translations"], options, reference)

    def update(t: Tally) -> None:
        t.valid[status] += 1
        if status == 200:
            t.latencies.append(seconds)
        if not mine:
            t.swapped += 1
            if len(t.examples) < 5:
                t.examples.append({"texts": texts, "options": OPTION_SETS[options], "got": response.json()})

    tally.add(update)


def malformed_request(http: httpx.Client, rng: random.Random, tally: Tally) -> None:
    """One of MALFORMED: its own 4xx, with a one-line JSON error, is expected."""
    what, method, path, kwargs, status = rng.choice(MALFORMED)
    try:
        response = http.request(method, path, **kwargs)
    except httpx.TransportError as error:  # a reset after an early 413 (the body was not read): counted
        name = f"connection: {type(error).__name__}"
        tally.add(lambda t: t.malformed.update([name]))
        return
    got = response.status_code
    try:
        error = response.json()["error"]
        one_line = isinstance(error, str) and len(error.splitlines()) == 1
    except (ValueError, KeyError, TypeError):
        one_line = False

    def update(t: Tally) -> None:
        t.malformed[got] += 1
        if got != status or not one_line:
            t.unexpected[f"{what}: {got}{'' if one_line else ' (error not one JSON line)'}"] += 1

    tally.add(update)


def client(index: int, url: str, deadline: float, work: dict[str, Any], tally: Tally) -> None:
    """One client thread with its own keep-alive connection, sending until the deadline."""
    rng = random.Random(work["seed"] * 1000 + index)
    with httpx.Client(base_url=url, timeout=300) as http:
        while time.monotonic() < deadline:
            if rng.random() < work["malformed"]:
                malformed_request(http, rng, tally)
            else:
                valid_request(http, rng, work["pool"], work["reference"], tally)


def rss(pid: int) -> int:
    """The process's resident memory in bytes (psutil where installed, else /proc/PID/status)."""
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


def load(url: str, clients: int, seconds: float, work: dict[str, Any], pid: int, every: float) -> tuple[Tally, list]:
    """`clients` threads for `seconds`, the server's RSS sampled every `every` seconds meanwhile."""
    tally, samples, done = Tally(), [], threading.Event()
    started = time.monotonic()
    deadline = started + seconds

    def sample() -> None:
        while not done.is_set():
            samples.append((round(time.monotonic() - started, 1), rss(pid)))
            done.wait(every)

    threads = [threading.Thread(target=client, args=(i, url, deadline, work, tally)) for i in range(clients)]
    sampler = threading.Thread(target=sample, daemon=True)
    for thread in [sampler, *threads]:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    sampler.join()
    samples.append((round(time.monotonic() - started, 1), rss(pid)))
    return tally, samples


def memory(samples: list[tuple[float, int]], seconds: float) -> dict[str, Any]:
    """The median RSS of the first and the last window (a minute, or a fifth of a shorter run) and the growth."""
    window = min(60.0, seconds / 5)
    first = [r for t, r in samples if t <= window] or [samples[0][1]]
    last = [r for t, r in samples if t >= seconds - window] or [samples[-1][1]]
    start, end = statistics.median(first), statistics.median(last)
    return {
        "window_s": window,
        "rss_first_mb": round(start / 2**20, 1),
        "rss_last_mb": round(end / 2**20, 1),
        "rss_peak_mb": round(max(r for _, r in samples) / 2**20, 1),
        "growth": round(end / start - 1, 4),
    }


def soak(
    url: str,
    pid: int,
    clients: int = 32,
    seconds: float = 300.0,
    malformed: float = 0.25,
    seed: int = 0,
    pool: int = 48,
    warmup: float = 60.0,
    every: float = 5.0,
) -> dict[str, Any]:
    """The soak's core, on a running server: the reference translations, a warm-up at full load (so the first
    minute's memory has seen the batch shapes), then the measured load; the counts, the checks and the memory."""
    texts, reference = expected(url, candidates(pool + pool // 2), pool)
    work = {"seed": seed, "malformed": malformed, "pool": texts, "reference": reference}
    before = rss(pid)
    if warmup > 0:
        load(url, clients, warmup, {**work, "seed": seed + 1}, pid, every)
    tally, samples = load(url, clients, seconds, work, pid, every)
    statuses = [*tally.valid, *tally.malformed]
    latencies = sorted(tally.latencies)
    result = {
        "clients": clients,
        "seconds": seconds,
        "malformed_share": malformed,
        "pool_texts": len(texts),
        "valid_by_status": {str(k): v for k, v in sorted(tally.valid.items(), key=str)},
        "malformed_by_status": {str(k): v for k, v in sorted(tally.malformed.items(), key=str)},
        "malformed_unexpected": dict(tally.unexpected),
        "five_xx": sum(
            n for s, n in [*tally.valid.items(), *tally.malformed.items()] if isinstance(s, int) and s >= 500
        ),
        "swapped": tally.swapped,
        "swapped_examples": tally.examples,
        "requests": sum(tally.valid.values()) + sum(tally.malformed.values()),
        "requests_per_s": round((sum(tally.valid.values()) + sum(tally.malformed.values())) / seconds, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 1) if latencies else None,
        "memory": {"rss_before_warmup_mb": round(before / 2**20, 1), **memory(samples, seconds)},
        "rss_samples": samples,
    }
    result["checks"] = checks(result, statuses)
    return result


def checks(result: dict[str, Any], statuses: list) -> dict[str, bool]:
    """The promises: no 5xx, no swapped answer, every valid request a 200, every malformed one its own 4xx (a
    connection reset after an early 413 allowed), memory flat."""
    return {
        "zero 5xx": result["five_xx"] == 0,
        "zero swapped": result["swapped"] == 0,
        "every valid request 200": set(result["valid_by_status"]) == {"200"},
        "every malformed request its own 4xx": not result["malformed_unexpected"]
        and all(isinstance(s, int) or "connection" in s for s in statuses),
        "memory flat (< 10% growth)": result["memory"]["growth"] < 0.10,
    }


def serve_and_soak(model_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """`vaswani serve` started on a free local port (CPU, fp32), soaked, then asked once more and stopped: its
    log must hold no traceback and SIGTERM must end it cleanly."""
    env = dict(item.split("=", 1) for item in args.server_env)
    env |= {"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}
    server = launch(model_dir, "--device", "cpu", "--precision", "fp32", "--log-level", "warning", env=env or None)
    try:
        result = soak(
            server.url,
            server.process.pid,
            args.clients,
            args.minutes * 60,
            args.malformed,
            args.seed,
            args.pool,
            args.warmup,
            args.every,
        )
        result["health_after"] = httpx.get(f"{server.url}/health", timeout=60).json()
    finally:
        exit_code = server.stop(60)
    log = server.output()
    result["server"] = {"threads": args.threads or "torch's default", "env": env, "exit_code": exit_code}
    result["server"]["log_tracebacks"] = log.count("Traceback")
    result["checks"]["server log without tracebacks"] = result["server"]["log_tracebacks"] == 0
    clean = exit_code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
    result["checks"]["answers after, stops cleanly"] = result["health_after"]["status"] == "ok" and clean
    return result


def table(result: dict[str, Any]) -> str:
    """A short summary: the load, the counts by status, the swaps, latency, memory, the checks."""
    m = result["memory"]
    rows = [
        (
            "clients, minutes, malformed share",
            f"{result['clients']}, {result['seconds'] / 60:g}, {result['malformed_share']}",
        ),
        ("requests (per s)", f"{result['requests']} ({result['requests_per_s']})"),
        ("valid by status", ", ".join(f"{k}: {v}" for k, v in result["valid_by_status"].items())),
        ("malformed by status", ", ".join(f"{k}: {v}" for k, v in result["malformed_by_status"].items())),
        ("5xx, swapped", f"{result['five_xx']}, {result['swapped']}"),
        ("p50 / p99 ms (valid 200s)", f"{result['p50_ms']} / {result['p99_ms']}"),
        ("RSS before the warm-up (MB)", str(m["rss_before_warmup_mb"])),
        (
            f"RSS first / last {m['window_s']:g} s, peak (MB)",
            f"{m['rss_first_mb']} / {m['rss_last_mb']}, {m['rss_peak_mb']}",
        ),
        ("RSS growth", f"{100 * m['growth']:+.1f}%"),
    ]
    rows += [(name, "ok" if ok else "FAILED") for name, ok in result["checks"].items()]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", nargs="?", help="a model directory (default: a tiny one, built here)")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--malformed", type=float, default=0.25, help="share of requests that are malformed")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds of load before the measured minutes")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--pool", type=int, default=48, help="texts whose translations are known before the load")
    parser.add_argument("--threads", type=int, help="the server's torch threads (OMP_NUM_THREADS; default torch's)")
    parser.add_argument(
        "--server-env", action="append", default=[], metavar="NAME=VALUE", help="an environment variable for the server"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", default=str(RESULTS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vaswani-soak-") as tmp:
        model_dir = Path(args.model_dir) if args.model_dir else write_tiny_model_directory(Path(tmp))
        result = {
            **stamp("Multi30k test_2016_flickr (de): the texts of the pool"),
            "model_dir": str(args.model_dir or "tiny (tests/helpers/common.py)"),
            **serve_and_soak(model_dir, args),
        }
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    if not all(result["checks"].values()):
        raise SystemExit(f"failed: {[name for name, ok in result['checks'].items() if not ok]}")


if __name__ == "__main__":
    main()
