"""Translating with an imported OPUS-MT model: vaswani against transformers' `generate` and CTranslate2.

The model has the shape of Helsinki-NLP/opus-mt-de-en (6+6 layers, d_model 512, 8 heads, d_ff 2048, swish,
58,101 pieces, a logits bias) with random weights (nothing can be downloaded here; the speed is the
shape's), saved in OPUS-MT's layout and brought in by `vaswani import`. A random model does not stop by
itself, so every engine decodes exactly --steps tokens per sentence (EOS forbidden before, the end there):
equal work, about a Multi30k sentence's length. The same test_2016_flickr sources, the same batches.

    python benchmarks/imported_speed.py              # ~6 minutes on 2 cores

Each engine runs alone in a fresh process (its peak resident memory is its own). Prints a Markdown table for
docs/benchmarks.md (sentences/s, peak memory; CPU named), the ratios, and how many outputs int8 changes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

import torch

from vaswani.allocator import keep_freed_memory
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.translator import Translator
from vaswani.export.ctranslate2 import converted
from vaswani.machine import cpu_name
from vaswani.pretrained import import_pretrained

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "../shared/data/multi30k/raw"
VOCAB = 58101  # opus-mt-de-en's


def opus_shaped(out: Path) -> Path:
    """A random MarianMTModel of opus-mt-de-en's shape, with SentencePiece models trained on Multi30k and a
    vocab.json of OPUS-MT's size (its pieces, then filler pieces, <pad> last)."""
    import sentencepiece as spm
    import transformers

    out.mkdir(parents=True, exist_ok=True)
    pieces = ["</s>", "<unk>"]
    for side, name in (("de", "source.spm"), ("en", "target.spm")):
        with gzip.open(RAW / f"train.{side}.gz", "rt", encoding="utf-8") as f:
            lines = [line.strip() for line in f]
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_prefix=str(out / side), vocab_size=6000, minloglevel=2
        )
        (out / f"{side}.model").rename(out / name)
        processor = spm.SentencePieceProcessor(model_file=str(out / name))
        pieces += [p for p in (processor.id_to_piece(i) for i in range(3, processor.get_piece_size()))]
    pieces = list(dict.fromkeys(pieces))
    pieces += [f"<filler{i}>" for i in range(VOCAB - 1 - len(pieces))] + ["<pad>"]
    (out / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}), encoding="utf-8")
    torch.manual_seed(0)
    config = transformers.MarianConfig(
        vocab_size=VOCAB, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
        decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish",
        max_position_embeddings=512, pad_token_id=VOCAB - 1, eos_token_id=0, decoder_start_token_id=VOCAB - 1,
    )  # fmt: skip
    model = transformers.MarianMTModel(config)
    model.final_logits_bias.normal_(0, 0.1)
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=VOCAB - 1, pad_token_id=VOCAB - 1, eos_token_id=0, num_beams=4, max_length=512,
        bad_words_ids=[[VOCAB - 1]],
    )  # fmt: skip
    model.save_pretrained(str(out))
    (out / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": False}), encoding="utf-8")
    return out


ENGINES = (
    "vaswani (fp32)",
    "vaswani (int8)",
    "transformers generate (fp32)",
    "CTranslate2 float32",
    "CTranslate2 int8",
)
THREADS = torch.get_num_threads()


def _engine_worker(name: str, hf_dir: str, model_dir: str, batches, beam: int, steps: int):
    """(seconds for `batches` after one warm-up batch, peak resident memory in MiB, outputs): one engine alone in
    a fresh process, so that its memory is its own and two OpenMP runtimes (torch's, CTranslate2's) do not meet.
    The peak includes loading (vaswani int8 holds the float32 weights until they are made int8)."""
    from vaswani.data.batching import collate
    from vaswani.decode.request import DecodeRequest
    from vaswani.decode.search import beam_search, decoding, greedy

    torch.set_num_threads(THREADS)
    keep_freed_memory()  # as the command line does, for every engine alike
    tokenizer = Tokenizer.load(model_dir)
    if name.startswith("vaswani"):
        precision = "int8" if "int8" in name else "fp32"
        model = Translator.load(model_dir, "cpu", precision).model
        c = model.config

        def run(batch):
            src = collate([(x, []) for x in tokenizer.encode_src(batch)], c.pad_id, c.bos_id, c.eos_id).src
            request = DecodeRequest.of(beam_size=beam, max_len_a=0, max_len_b=steps, min_len=steps)
            with decoding(torch.device("cpu"), precision):
                if beam == 1:
                    return [h.tokens for h in greedy(model, src, request)]
                return [h[0].tokens for h in beam_search(model, src, request)]

    elif name.startswith("transformers"):
        import transformers

        hf = transformers.MarianMTModel.from_pretrained(hf_dir).eval()

        def run(batch):
            ids = [[*x, 0] for x in tokenizer.encode_src(batch)]
            width = max(map(len, ids))
            input_ids = torch.tensor([x + [VOCAB - 1] * (width - len(x)) for x in ids])
            with torch.inference_mode():
                out = hf.generate(
                    input_ids=input_ids, attention_mask=input_ids != VOCAB - 1, num_beams=beam,
                    max_new_tokens=steps, min_new_tokens=steps,
                )  # fmt: skip
            return [row[1:].tolist() for row in out]

    else:
        import ctranslate2

        translator = ctranslate2.Translator(
            str(Path(model_dir) / "ctranslate2"), "cpu", compute_type=name.split()[-1], intra_threads=THREADS
        )

        def run(batch):
            pieces = [[tokenizer.src.id_to_piece(i) for i in x] for x in tokenizer.encode_src(batch)]
            out = translator.translate_batch(
                pieces, beam_size=beam, max_decoding_length=steps, min_decoding_length=steps
            )  # fmt: skip
            return [[tokenizer.tgt.piece_to_id(p) for p in r.hypotheses[0]] for r in out]

    run(batches[0])  # warm-up: first-call allocations, kernel choices
    start = time.perf_counter()
    outputs = [x for batch in batches for x in run(batch)]
    seconds = time.perf_counter() - start
    return seconds, _peak_resident_mib(), outputs


def _peak_resident_mib() -> float:
    """This process's peak resident memory (VmHWM): its own, where ru_maxrss would also count the parent's
    memory before the exec that started it."""
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=192)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--profile", action="store_true", help="instead: where vaswani's beam 4 step spends its time")
    args = parser.parse_args()
    import concurrent.futures
    import multiprocessing

    import ctranslate2
    import transformers

    with gzip.open(RAW / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        sources = [line.strip() for _, line in zip(range(args.sentences), f, strict=False)]
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = opus_shaped(Path(tmp) / "hf")
        model_dir = import_pretrained(hf_dir, Path(tmp) / "model")
        converted(model_dir)
        lengths = [len(x) for x in Tokenizer.load(model_dir).encode_src(sources)]
        order = sorted(range(len(sources)), key=lambda i: -lengths[i])  # sorted by length, as every engine does
        batches = [[sources[i] for i in order[j : j + args.batch]] for j in range(0, len(order), args.batch)]
        if args.profile:
            for precision in ("fp32", "int8"):
                profile(model_dir, batches[:2], precision, args.steps)
            return
        results, memory, outputs = {}, {}, {}
        spawn = multiprocessing.get_context("spawn")
        for beam in (1, 4):
            for name in ENGINES:
                with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
                    job = pool.submit(_engine_worker, name, str(hf_dir), str(model_dir), batches, beam, args.steps)
                    seconds, rss, out = job.result()
                key = (name, beam)
                results[key], memory[key], outputs[key] = len(sources) / seconds, rss, out
                print(f"{name}, beam {beam}: {results[key]:.1f} sentences/s, peak {rss:,.0f} MiB", flush=True)
    print(f"\nCPU: {cpu_name()}, {THREADS} threads; torch {torch.__version__}, transformers "
          f"{transformers.__version__}, ctranslate2 {ctranslate2.__version__}; {len(sources)} sentences in "
          f"batches of {args.batch} sorted by length, {args.steps} tokens each; each engine alone in a fresh "
          "process\n")  # fmt: skip
    print("| engine | greedy (sentences/s) | beam 4 (sentences/s) | peak memory, beam 4 (MiB) |")
    print("|---|---|---|---|")
    for name in ENGINES:
        print(f"| {name} | {results[(name, 1)]:.1f} | {results[(name, 4)]:.1f} | {memory[(name, 4)]:,.0f} |")
    print()
    for ours, theirs in (("vaswani (int8)", "CTranslate2 int8"), ("vaswani (fp32)", "CTranslate2 float32")):
        ratios = [results[(ours, b)] / results[(theirs, b)] for b in (1, 4)]
        print(f"{ours} vs {theirs}: greedy {ratios[0]:.2f}x, beam 4 {ratios[1]:.2f}x, memory "
              f"{memory[(ours, 4)] / memory[(theirs, 4)]:.2f}x")  # fmt: skip
    for a, b in (("vaswani (fp32)", "vaswani (int8)"), ("CTranslate2 float32", "CTranslate2 int8")):
        for beam in (1, 4):
            same = sum(x == y for x, y in zip(outputs[(a, beam)], outputs[(b, beam)], strict=True))
            print(f"{b} output = {a} output: {same}/{len(sources)} sentences, beam {beam}")


def profile(model_dir: Path, batches, precision: str, steps: int) -> None:
    """torch.profiler over beam 4 on `batches` (after one warm-up batch): the operations by share of the time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    from vaswani.data.batching import collate
    from vaswani.decode.request import DecodeRequest
    from vaswani.decode.search import beam_search, decoding

    keep_freed_memory()  # as the command line does (else the logits' fresh pages show as the log-softmax's time)
    tokenizer = Tokenizer.load(model_dir)
    model = Translator.load(model_dir, "cpu", precision).model
    c = model.config

    def run(batch):
        src = collate([(x, []) for x in tokenizer.encode_src(batch)], c.pad_id, c.bos_id, c.eos_id).src
        with decoding(torch.device("cpu"), precision):
            beam_search(model, src, DecodeRequest.of(beam_size=4, max_len_a=0, max_len_b=steps, min_len=steps))

    run(batches[0])
    with profiler(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches:
            run(batch)
    print(f"\n# vaswani {precision}, beam 4, {len(batches)} batches of {len(batches[0])}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=40))


if __name__ == "__main__":
    main()
