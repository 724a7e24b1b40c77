"""Load and fault test of `vaswani serve` (localhost only, bounded in time).

    python benchmarks/serve_load.py runs/multi30k_de_en --clients 1,8,32 --seconds 30

Starts the server on 127.0.0.1, then for each number of concurrent clients sends Multi30k test sentences
(`--per-request`: 1, or a range such as 1-4) for `--seconds`, with malformed requests mixed in (invalid
JSON, invalid UTF-8, wrong types, empty lists, NUL bytes, over-long texts and bodies, out-of-range options,
a wrong path).
Then the same server with `--no-batching` (one request at a time) at the largest number of clients.
Reports requests/s, sentences/s, p50/p99 latency of the good requests, responses by status, the
server's memory at start and end; checks that every malformed request got a 4xx, none a 5xx, and
that the server still answers. Results: benchmarks/results/serve_load.json (and a table on stdout).
"""

import argparse
import asyncio
import gzip
import json
import random
import statistics
import time
from collections import Counter
from pathlib import Path

import httpx
from provenance import stamp

from vaswani.serve.launch import launch

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ROOT / "../shared/data/multi30k/raw/test_2016_flickr.de.gz"
JSON = {"content-type": "application/json"}
MALFORMED = [  # (method, path, keyword arguments): each must get a 4xx
    ("POST", "/v1/translate", {"content": b'{"text": ["Ein Mann"', "headers": JSON}),
    ("POST", "/v1/translate", {"content": b'{"text": ["\xff\xfe\xfa"]}', "headers": JSON}),
    ("POST", "/v1/translate", {"json": {"text": "not a list"}}),
    ("POST", "/v1/translate", {"json": {"text": []}}),
    ("POST", "/v1/translate", {"json": {"text": ["a\x00b"]}}),
    ("POST", "/v1/translate", {"json": {"text": ["x" * 5000]}}),
    ("POST", "/v1/translate", {"json": {"text": ["Hallo"] * 500}}),
    ("POST", "/v1/translate", {"json": {"text": ["Hallo"], "beam": 0}}),
    ("POST", "/v1/translate", {"json": {"text": ["Hallo"], "beam": 2, "n_best": 5}}),
    ("POST", "/v1/translate", {"json": {"text": ["Hallo"], "attention": "yes"}}),
    ("POST", "/v1/translate", {"content": b'{"text": ["\\ud800"]}', "headers": JSON}),
    ("POST", "/v1/translate", {"content": b"x" * (2 << 20), "headers": JSON}),
    ("GET", "/v1/translate", {}),
    ("POST", "/v2/translate", {"json": {"text": ["Hallo"]}}),
]


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def phase(
    url: str,
    clients: int,
    seconds: float,
    sentences: list[str],
    malformed: float,
    seed: int,
    per_request: tuple[int, int] = (1, 1),
) -> dict:
    """`clients` loops sending requests for `seconds`; counts and latencies."""
    statuses: Counter = Counter()
    bad_statuses: Counter = Counter()
    latencies: list[float] = []
    done_sentences = 0
    deadline = time.perf_counter() + seconds

    async def client(i: int, http: httpx.AsyncClient) -> None:
        nonlocal done_sentences
        rng = random.Random(seed * 1000 + i)
        while time.perf_counter() < deadline:
            if rng.random() < malformed:
                method, path, kwargs = rng.choice(MALFORMED)
                try:
                    response = await http.request(method, url + path, **kwargs)
                    bad_statuses[response.status_code] += 1
                except httpx.TransportError as error:  # e.g. a reset after an early 413: counted, reported
                    bad_statuses[f"connection: {type(error).__name__}"] += 1
                continue
            texts = rng.sample(sentences, rng.randint(*per_request))
            started = time.perf_counter()
            response = await http.post(f"{url}/v1/translate", json={"text": texts})
            statuses[response.status_code] += 1
            if response.status_code == 200:
                latencies.append(time.perf_counter() - started)
                done_sentences += len(response.json()["translations"])

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    started = time.perf_counter()
    async with httpx.AsyncClient(limits=limits, timeout=120) as http:
        await asyncio.gather(*(client(i, http) for i in range(clients)))
    elapsed = time.perf_counter() - started
    good = sum(statuses.values())
    latencies.sort()
    return {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "requests_per_s": round(good / elapsed, 2),
        "sentences_per_s": round(done_sentences / elapsed, 2),
        "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1)
        if latencies
        else None,
        "good_by_status": dict(statuses),
        "malformed_by_status": dict(bad_statuses),
    }


def serve_and_load(model_dir: str, server_args: list[str], clients: list[int], args, sentences: list[str]) -> dict:
    server = launch(model_dir, "--log-level", "warning", *server_args)
    process, url = server.process, server.url
    try:
        # Warm-up at the heaviest load, so that "start" memory has seen every batch shape the run will.
        asyncio.run(phase(url, max(clients), args.warmup, sentences, 0.0, seed=0, per_request=args.per_request))
        memory_start = rss(process.pid)
        phases = []
        for n in clients:
            before = httpx.get(f"{url}/health").json()
            result = asyncio.run(
                phase(url, n, args.seconds, sentences, args.malformed, seed=n, per_request=args.per_request)
            )
            after = httpx.get(f"{url}/health").json()
            batches = after["batches"] - before["batches"]
            result["mean_batch_requests"] = round((after["requests"] - before["requests"]) / max(batches, 1), 1)
            print(json.dumps(result), flush=True)
            phases.append(result)
        memory_end = rss(process.pid)
        still = httpx.post(f"{url}/v1/translate", json={"text": [sentences[0]]}, timeout=60).status_code
        return {
            "server_args": server_args,
            "phases": phases,
            "rss_start": memory_start,
            "rss_end": memory_end,
            "answers_after": still == 200,
        }
    finally:
        server.stop(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--malformed", type=float, default=0.1, help="share of requests that are malformed")
    parser.add_argument("--per-request", default="1", help="sentences per request: N, or a range A-B drawn at random")
    parser.add_argument("--server-args", nargs="*", default=[], help="more options for the batching server")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load before memory is first measured")
    parser.add_argument("--results", default=str(ROOT / "benchmarks/results/serve_load.json"))
    args = parser.parse_args()
    clients = [int(n) for n in args.clients.split(",")]
    low, _, high = args.per_request.partition("-")
    args.per_request = (int(low), int(high or low))
    with gzip.open(SENTENCES, "rt", encoding="utf-8") as handle:
        sentences = [line.rstrip("\n") for line in handle]
    batched = serve_and_load(args.model_dir, args.server_args, clients, args, sentences)
    alone = serve_and_load(args.model_dir, ["--no-batching"], [max(clients)], args, sentences)
    runs = {"batching": batched, "one_at_a_time": alone}
    checks = check(runs)
    split = "Multi30k test_2016_flickr (de), sentences drawn at random"
    result = {**stamp(split), "per_request": args.per_request, "runs": runs, "checks": checks}
    Path(args.results).write_text(json.dumps(result, indent=1) + "\n")
    print(table(runs, checks))
    if not all(checks.values()):
        raise SystemExit(f"failed: {[name for name, ok in checks.items() if not ok]}")


def check(runs: dict) -> dict[str, bool]:
    phases = [p for run in runs.values() for p in run["phases"]]
    most = max(p["clients"] for p in phases)
    batched = next(p for p in runs["batching"]["phases"] if p["clients"] == most)
    alone = runs["one_at_a_time"]["phases"][0]
    return {
        "batching >= 5x one-at-a-time sentences/s": batched["sentences_per_s"] >= 5 * alone["sentences_per_s"],
        "no 5xx": all(
            not isinstance(s, int) or s < 500 for p in phases for s in [*p["good_by_status"], *p["malformed_by_status"]]
        ),
        "every good request 200": all(set(p["good_by_status"]) <= {200} for p in phases),
        "every malformed request 4xx": all(
            isinstance(s, int) and 400 <= s < 500 for p in phases for s in p["malformed_by_status"]
        ),
        "memory growth < 10%": all(run["rss_end"] < 1.1 * run["rss_start"] for run in runs.values()),
        "answers after": all(run["answers_after"] for run in runs.values()),
    }


def table(runs: dict, checks: dict) -> str:
    lines = [
        "| server | clients | requests/s | sentences/s | p50 ms | p99 ms | good (status: n) | malformed (status: n) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        for p in run["phases"]:
            statuses = lambda d: ", ".join(f"{k}: {v}" for k, v in sorted(d.items(), key=str))  # noqa: E731
            lines.append(
                f"| {name.replace('_', ' ')} | {p['clients']} | {p['requests_per_s']} | "
                f"{p['sentences_per_s']} | {p['p50_ms']} | {p['p99_ms']} | {statuses(p['good_by_status'])} | "
                f"{statuses(p['malformed_by_status'])} |"
            )
    for name, run in runs.items():
        lines.append(
            f"\n{name}: server RSS {run['rss_start'] / 2**20:.0f} MiB at start, "
            f"{run['rss_end'] / 2**20:.0f} MiB at end; answers after: {run['answers_after']}"
        )
    lines += ["", *(f"- {'ok' if ok else 'FAILED'}: {name}" for name, ok in checks.items())]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
