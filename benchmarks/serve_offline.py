"""Served against offline: the same lines translated by `vaswani serve` under load and by the Translator in one call.

    python benchmarks/serve_offline.py runs/quick --lines 1000 --clients 32 --rounds 3

(a) offline: `Translator`'s engine on all the lines' source ids at once (decode only: tokenizing and detokenizing
left out; the model's decode section, its precision); (a') the continuous search in this process, `--clients`
sentences in it at every step, no HTTP; (b) served: `vaswani serve` on 127.0.0.1, `--clients` closed-loop clients
(each sends one line a request and the next as soon as it is answered) until every line is translated once,
no malformed requests (serve_load.py has those); for each batching (continuous, the default, and --batch-by-request).
Each round runs (a) then (b) for each batching; the median of the rounds is reported. The served translations must
equal the offline ones line by line (checked in every round); p50/p99 latency of a request; the server's memory at
start, after its first round (warm) and at the end. Also one client alone: its median latency against one
`Translator.translate` call of the same line. The client runs on the same machine (it shares the 2 cores). Where
the cores' time went, per 1,000 lines: offline (this process, all its threads), and served: the server's event loop
(its main thread), its decoding (the other threads: the compute thread and torch's workers, spinning included), the
clients (this process), and the seconds x cores there were.
Results: benchmarks/results/serve_offline.json, with the commit, the data split and the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from provenance import stamp

from vaswani.serve.launch import launch

ROOT = Path(__file__).resolve().parents[1]
SPLIT = "test_2016_flickr"
SOURCES = ROOT / f"../shared/data/multi30k/raw/{SPLIT}.de.gz"
MODES = {"continuous": [], "by request": ["--batch-by-request"]}


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds the server's threads have used: its main thread (the event loop: HTTP, splitting, tokenizing) and
    the others (the compute thread and torch's workers, decoding)."""
    tick, used = os.sysconf("SC_CLK_TCK"), {"event loop": 0.0, "decoding": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        used["event loop" if int(task.name) == pid else "decoding"] += (int(fields[11]) + int(fields[12])) / tick
    return used


def offline(translator, lines: list[str]) -> float:
    """Seconds the engine takes to search every line at once (the server's request: scores asked, as /v1/translate
    reports them)."""
    request = translator.request()
    ids = translator.encode_sources(lines)
    started = time.perf_counter()
    translator.engine(ids, request)
    return time.perf_counter() - started


def in_process(translator, lines: list[str], clients: int) -> float:
    """Seconds the continuous search (decode/continuous.py) takes over every line with `clients` sentences in it at
    every step, as closed-loop clients keep it, without HTTP: the serving stack's share is what (b) loses beyond it."""
    request, ids = translator.request(), translator.encode_sources(lines)
    search, added, done = translator.continuous(request), 0, 0
    started = time.perf_counter()
    while done < len(ids):
        while search.running < clients and added < len(ids):
            search.add(added, ids[added])
            added += 1
        done += len(search.step())
    return time.perf_counter() - started


async def served(url: str, lines: list[str], clients: int) -> tuple[list[str], list[float], float]:
    """`clients` closed-loop clients, one line a request, each line once: translations, latencies, seconds."""
    out: list[str | None] = [None] * len(lines)
    latencies: list[float] = []
    queue = list(range(len(lines)))[::-1]

    async def client(http: httpx.AsyncClient) -> None:
        while queue:
            i = queue.pop()
            started = time.perf_counter()
            response = await http.post(f"{url}/v1/translate", json={"text": [lines[i]]})
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()
            out[i] = response.json()["translations"][0]["text"]

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        seconds = time.perf_counter() - started
    return out, latencies, seconds


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES), help="which batchings to serve with")
    parser.add_argument("--server-args", default="", help="more arguments for vaswani serve (e.g. --precision int8)")
    parser.add_argument("--busy", action="store_true", help="also serve beside one busy process (a Python loop)")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server's environment")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/serve_offline.json"))
    args = parser.parse_args()

    from vaswani.translate.translator import Translator

    with gzip.open(SOURCES, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f][: args.lines]
    extra = args.server_args.split()
    precision = extra[extra.index("--precision") + 1] if "--precision" in extra else "auto"
    translator = Translator.load(args.model_dir, precision=precision)
    modes = args.modes.split(",")
    env = dict(item.split("=", 1) for item in args.env)
    servers = {mode: launch(args.model_dir, "--log-level", "warning", *MODES[mode], *extra, env=env) for mode in modes}
    rounds: list[dict] = []
    memory = {mode: {"start_mb": rss(server.process.pid) / 2**20} for mode, server in servers.items()}
    reference = translator.translate(lines)
    try:
        for r in range(args.rounds):
            used = time.process_time()
            seconds = offline(translator, lines)
            used = time.process_time() - used
            row = {"offline": {"sentences_per_s": len(lines) / seconds, "cpu_s_per_1000": 1000 * used / len(lines)}}
            if translator.continuous(translator.request()) is not None:
                took = in_process(translator, lines, args.clients)
                row["continuous, in process"] = {"sentences_per_s": len(lines) / took}
            for mode, server in servers.items():
                before = httpx.get(f"{server.url}/health").json()
                used, client = cpu_seconds(server.process.pid), time.process_time()
                texts, latencies, took = asyncio.run(served(server.url, lines, args.clients))
                client = time.process_time() - client
                used = {k: v - used[k] for k, v in cpu_seconds(server.process.pid).items()}
                after = httpx.get(f"{server.url}/health").json()
                differ = sum(a != b for a, b in zip(texts, reference, strict=True))
                row[mode] = {
                    "sentences_per_s": len(lines) / took,
                    "p50_ms": 1000 * percentile(latencies, 50),
                    "p99_ms": 1000 * percentile(latencies, 99),
                    "lines_differing_from_offline": differ,
                    # CPU seconds per 1,000 lines: what the 2 cores were given to (the seconds x cores they had)
                    "cpu_s_per_1000": {
                        **{k: 1000 * v / len(lines) for k, v in used.items()},
                        "clients": 1000 * client / len(lines),
                        "available": 1000 * took * len(os.sched_getaffinity(0)) / len(lines),
                    },
                }
                steps = after["steps"] - before["steps"]
                if steps:  # continuous: the mean sentences a step decoded
                    row[mode]["mean_running"] = (after["running"] - before["running"]) / steps
                else:  # by request: the mean sentences a batch decoded
                    batches = max(1, after["batches"] - before["batches"])
                    row[mode]["mean_running"] = (after["sentences"] - before["sentences"]) / batches
                if r == 0:
                    memory[mode]["warm_mb"] = rss(server.process.pid) / 2**20
                if args.busy:  # the same load beside one CPU-bound process (a server shares its machine)
                    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    try:
                        texts, latencies, took = asyncio.run(served(server.url, lines, args.clients))
                    finally:
                        busy.kill()
                        busy.wait()
                    row[f"{mode}, beside a busy process"] = {
                        "sentences_per_s": len(lines) / took,
                        "share_of_alone": (len(lines) / took) / row[mode]["sentences_per_s"],
                        "p50_ms": 1000 * percentile(latencies, 50),
                        "p99_ms": 1000 * percentile(latencies, 99),
                        "lines_differing_from_offline": sum(a != b for a, b in zip(texts, reference, strict=True)),
                    }
            rounds.append(row)
            print(json.dumps(row))
        alone = {}
        for mode, server in servers.items():
            _, latencies, _ = asyncio.run(served(server.url, lines[:50], 1))
            alone[mode] = 1000 * statistics.median(latencies)
            memory[mode]["end_mb"] = rss(server.process.pid) / 2**20
        one_call = []
        for line in lines[:50]:
            started = time.perf_counter()
            translator.translate([line])
            one_call.append(time.perf_counter() - started)
        alone["translate_call"] = 1000 * statistics.median(one_call)
    finally:
        for server in servers.values():
            server.stop()

    def median(mode: str, key: str) -> float:
        return round(statistics.median(row[mode][key] for row in rounds), 2)

    table = {
        name: {"sentences_per_s": median(name, "sentences_per_s")}
        for name in rounds[0]
        if name not in modes and "busy" not in name
    }
    table["offline"]["cpu_s_per_1000"] = median("offline", "cpu_s_per_1000")
    for mode in modes:
        table[mode] = {key: median(mode, key) for key in ("sentences_per_s", "p50_ms", "p99_ms")}
        table[mode]["vs_offline"] = round(table[mode]["sentences_per_s"] / table["offline"]["sentences_per_s"], 3)
        table[mode]["lines_differing_from_offline"] = max(row[mode]["lines_differing_from_offline"] for row in rounds)
        table[mode]["cpu_s_per_1000"] = {
            key: round(statistics.median(row[mode]["cpu_s_per_1000"][key] for row in rounds), 2)
            for key in rounds[0][mode]["cpu_s_per_1000"]
        }
        busy = f"{mode}, beside a busy process"
        if busy in rounds[0]:
            table[busy] = {key: median(busy, key) for key in ("sentences_per_s", "share_of_alone", "p50_ms", "p99_ms")}
            table[busy]["lines_differing_from_offline"] = max(
                row[busy]["lines_differing_from_offline"] for row in rounds
            )
    result = {
        **stamp(f"Multi30k {SPLIT} (de), the first {len(lines)} lines"),
        "model": str(args.model_dir),
        "server_args": extra,
        "server_env": env,
        "clients": args.clients,
        "client": "on the same machine (httpx, one process)",
        "median_of_rounds": table,
        "one_client_median_ms": {k: round(v, 1) for k, v in alone.items()},
        "memory_mb": {mode: {k: round(v) for k, v in m.items()} for mode, m in memory.items()},
        "rounds": rounds,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("median_of_rounds", "one_client_median_ms", "memory_mb")}, indent=1))


if __name__ == "__main__":
    main()
