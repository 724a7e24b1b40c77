"""Decoding on a GPU: the dynamic KV cache against the static cache replayed as CUDA graphs (decode.static_cache),
fp32 and bf16, against CTranslate2 float16, on the OPUS-MT-shaped model of benchmarks/imported_speed.py.

Every decoder decodes exactly --steps tokens per sentence (EOS forbidden before, the end there): equal work.
The same test_2016_flickr sources in batches sorted by length, one untimed warm-up batch per decoder and shape.
All decoders run in this one process, one after another (on a GPU they share no CPU threads that matter).
Also compares the outputs of the dynamic and the static cache (fp32), token for token.

    python benchmarks/gpu_decoding.py --data ../shared/data/multi30k/raw     # a CUDA GPU; ~2 minutes

Prints Markdown tables for docs/benchmarks.md (GPU named) and writes them to --out if given.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import imported_speed

from vaswani.data.batching import collate
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import beam_search, compiled_step, decoding, greedy, length_batches
from vaswani.decode.static import StaticDecoding
from vaswani.export.ctranslate2 import converted
from vaswani.pretrained import import_pretrained
from vaswani.translate.translator import Translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=imported_speed.RAW)
    parser.add_argument("--sentences", type=int, default=512, help="sentences at batch 64 (batch 1: an eighth)")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--precisions", default="fp32,bf16", help="vaswani's decoders in these (a CPU: fp32)")
    parser.add_argument("--device", default="cuda", help="cuda (cpu: a dry run of the script)")
    parser.add_argument("--compiled", action="store_true", help="also decode.compile's step (dynamic cache)")
    parser.add_argument("--decoders", help="only these decoders (names as in the table, separated by ;)")
    parser.add_argument("--profile", action="store_true", help="instead: where beam 4 spends its time")
    parser.add_argument("--profile-runs", default="bf16:64,fp32:64,fp32:1", help="precision:batch pairs profiled")
    args = parser.parse_args()
    imported_speed.RAW = args.data
    device = torch.device(args.device)
    with gzip.open(args.data / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        lines = [line.strip() for _, line in zip(range(args.sentences), f, strict=False)]
    report: list[str] = []

    def say(line: str = "") -> None:
        print(line, flush=True)
        report.append(line)
        if args.out:
            args.out.write_text("\n".join(report) + "\n", encoding="utf-8")

    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        model_dir = import_pretrained(imported_speed.opus_shaped(Path(tmp) / "hf"), Path(tmp) / "model")
        converted(model_dir)
        say(f"# model built, imported and converted in {time.perf_counter() - began:.0f} s")
        tokenizer = Tokenizer.load(model_dir)
        model = Translator.load(model_dir, device, "fp32").model
        c = model.config
        sources = tokenizer.encode_src(lines)
        cuda = device.type == "cuda"
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        reset = torch.cuda.reset_peak_memory_stats if cuda else (lambda: None)
        peak = torch.cuda.max_memory_allocated if cuda else (lambda: 0)
        where = torch.cuda.get_device_name(device) if cuda else "CPU"
        say(f"# {where}, torch {torch.__version__}; {args.steps} tokens per sentence")
        results: dict[tuple[str, int, int], float] = {}
        memory: dict[tuple[str, int, int], float] = {}
        outputs: dict[tuple[str, int, int], list] = {}

        def ours(precision: str, static: bool, mode: str = "chained"):
            step = StaticDecoding(model, rows=64 * 4) if static else None
            if mode == "compiled":  # decode.compile: torch.compile's step on the dynamic cache
                step = compiled_step(model)
            if static:  # unfused: each beam step's search outside the graph, autocast's casts in it
                step.fused = step.cast_weights = mode != "unfused"
                step.chains = mode == "chained"  # fused: no step launched before the last one's results are read

            def run(batch: list[list[int]], beam: int):
                src = collate([(s, []) for s in batch], c.pad_id, c.bos_id, c.eos_id).src.to(device)
                request = DecodeRequest.of(beam_size=beam, max_len_a=0, max_len_b=args.steps, min_len=args.steps)
                with decoding(device, precision):
                    if beam == 1:
                        return [h.tokens for h in greedy(model, src, request, step=step)]
                    return [h[0].tokens for h in beam_search(model, src, request, step=step)]

            run.static = step if static else None
            return run

        def ctranslate2_engine(kind: str):
            import ctranslate2

            translator = ctranslate2.Translator(str(model_dir / "ctranslate2"), device.type, compute_type=kind)
            piece = tokenizer.src.id_to_piece

            def run(batch: list[list[int]], beam: int):
                out = translator.translate_batch(
                    [[piece(i) for i in s] for s in batch], beam_size=beam, max_decoding_length=args.steps,
                    min_decoding_length=args.steps, max_batch_size=0,
                )  # fmt: skip
                return [r.hypotheses[0] for r in out]

            return run

        decoders = {
            "vaswani fp32": ours("fp32", False),
            "vaswani fp32, CUDA graphs": ours("fp32", True),
            "vaswani bf16": ours("bf16", False),
            "vaswani bf16, CUDA graphs": ours("bf16", True),
            "vaswani bf16, CUDA graphs, not chained": ours("bf16", True, "fused"),
            "vaswani bf16, CUDA graphs, unfused (stop 52)": ours("bf16", True, "unfused"),
        }
        if args.compiled:
            decoders["vaswani fp32, compiled"] = ours("fp32", False, "compiled")
            decoders["vaswani bf16, compiled"] = ours("bf16", False, "compiled")
        decoders = {name: run for name, run in decoders.items() if name.split()[1].strip(",") in args.precisions}
        if args.decoders:
            decoders = {name: run for name, run in decoders.items() if name in args.decoders.split(";")}
        try:
            for kind in ("float16", "float32"):
                if not args.decoders or f"CTranslate2 {kind}" in args.decoders.split(";"):
                    decoders[f"CTranslate2 {kind}"] = ctranslate2_engine(kind)
        except Exception as error:
            say(f"# CTranslate2 could not run: {type(error).__name__}: {error}")
        if args.profile:
            for precision, size in (pair.split(":") for pair in args.profile_runs.split(",")):
                size = int(size)
                profile(ours(precision, True), [sources[:size]], say, f"{precision}, batch {size}", args.out)
            return
        for batch_size in (64, 1):
            chosen = sources if batch_size > 1 else sources[: max(8, len(sources) // 8)]
            batches = [[chosen[i] for i in chunk] for chunk in length_batches(chosen, batch_size)]
            for beam in (1, 4):
                for name, run in decoders.items():
                    began = time.perf_counter()
                    for batch in (batches[0], batches[-1]):  # warm-up: allocations, kernels, the graphs captured
                        run(batch, beam)
                    sync()
                    print(f"{name}, batch {batch_size}, beam {beam}: warm-up {time.perf_counter() - began:.1f} s")
                    reset()
                    start = time.perf_counter()
                    produced = [run(b, beam) for b in batches]
                    sync()
                    seconds = time.perf_counter() - start
                    key = (name, batch_size, beam)
                    results[key] = len(chosen) * args.steps / seconds
                    memory[key] = peak() / 2**20
                    outputs[key] = [x for p in produced for x in p]
                    print(f"{name}, batch {batch_size}, beam {beam}: {results[key]:,.0f} tok/s", flush=True)
                for precision in args.precisions.split(","):
                    a = outputs.get((f"vaswani {precision}", batch_size, beam))
                    for variant in (
                        "compiled",
                        "CUDA graphs",
                        "CUDA graphs, not chained",
                        "CUDA graphs, unfused (stop 52)",
                    ):
                        if a is None or (f"vaswani {precision}, {variant}", batch_size, beam) not in outputs:
                            continue
                        b = outputs[(f"vaswani {precision}, {variant}", batch_size, beam)]
                        same = sum(x == y for x, y in zip(a, b, strict=True))
                        say(f"# batch {batch_size}, beam {beam}, {precision}: {variant} output = dynamic on "
                            f"{same}/{len(a)} sentences")  # fmt: skip
        say()
        say("| target tokens/s | " + " | ".join(decoders) + " | best vaswani vs CT2 float16 |")
        say("|---|" + "---|" * (len(decoders) + 1))
        for batch_size in (64, 1):
            for beam in (1, 4):
                row = [results[(n, batch_size, beam)] for n in decoders]
                ours_best = max(results[(n, batch_size, beam)] for n in decoders if n.startswith("vaswani"))
                ct2 = results.get(("CTranslate2 float16", batch_size, beam))
                ratio = f"{ours_best / ct2:.2f}x" if ct2 else "-"
                cells = " | ".join(f"{r:,.0f}" for r in row)
                say(f"| batch {batch_size}, {'greedy' if beam == 1 else f'beam {beam}'} | {cells} | {ratio} |")
        say()
        say("Peak GPU memory (torch's allocator, MiB; CTranslate2's own allocator is not counted): " + ", ".join(
            f"{n} {memory[(n, 64, 4)]:,.0f}" for n in decoders if n.startswith("vaswani")
        ))  # fmt: skip


def profile(run, batches, say, label: str = "", out: Path | None = None) -> None:
    """Where beam 4 on `batches` spends its time (after one warm-up): the wall time per batch without a profiler,
    the captured step graph alone replayed as often (the model's own GPU time), and under torch.profiler the busiest
    operations by host and by device time and the share of the wall time the device was busy."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for batch in batches:
        run(batch, 4)
    sync()
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        for batch in batches:
            run(batch, 4)
        sync()
        walls.append(time.perf_counter() - start)
    steps = len(batches) * 24
    static = getattr(run, "static", None)
    if static is not None and static._captured:
        key = max(static._captured, key=lambda key: key[1] * key[2])  # the beam graph of the most rows
        graph = static._captured[key][0]
        graph.replay()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            graph.replay()
        torch.cuda.synchronize()
        alone = time.perf_counter() - start
        say(f"# {label}: wall {min(walls) * 1e3:.1f} ms for {steps} steps ({min(walls) / steps * 1e3:.3f} ms a step); "
            f"the step graph {key} alone {alone / steps * 1e3:.3f} ms a step")  # fmt: skip
    start = time.perf_counter()
    with profiler(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as prof:
        for batch in batches:
            run(batch, 4)
        sync()
    wall = time.perf_counter() - start
    if out is not None:
        prof.export_chrome_trace(str(out.with_name(f"trace_{label.replace(', ', '_').replace(' ', '')}.json")))
    events = prof.key_averages()
    device_time = sum(e.self_device_time_total for e in events) / 1e6
    say(f"# {label} profile: wall {wall * 1e3:.1f} ms (under the profiler), device busy {device_time * 1e3:.1f} ms")
    say(events.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=48))
    say(events.table(sort_by="self_device_time_total", row_limit=25, max_name_column_width=48))


if __name__ == "__main__":
    main()
