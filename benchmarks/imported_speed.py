"""Translating with an imported OPUS-MT model: vaswani against transformers' `generate` and CTranslate2.

The model has the shape of Helsinki-NLP/opus-mt-de-en (6+6 layers, d_model 512, 8 heads, d_ff 2048, swish,
58,101 pieces, a logits bias) with random weights (nothing can be downloaded here; the speed is the
shape's), saved in OPUS-MT's layout and brought in by `vaswani import`. A random model does not stop by
itself, so every engine decodes exactly --steps tokens per sentence (EOS forbidden before, the end there):
equal work, about a Multi30k sentence's length. The same test_2016_flickr sources, the same batches.

    python benchmarks/imported_speed.py                    # ~7 minutes a round on 2 cores
    python benchmarks/imported_speed.py --rounds 3         # each engine 3 times, in turns: medians and ratios per round
    python benchmarks/imported_speed.py --engines "vaswani (fp32),CTranslate2 float32"
    python benchmarks/imported_speed.py --as-avx2 amd      # every engine as an AVX2-only CPU (AVX2 below)
    python benchmarks/imported_speed.py --shape nllb       # NLLB-200-distilled-600M's shape (mbart: mBART-50's)

`--shape nllb` and `--shape mbart` race a many-to-many model of the hub's shape instead (12+12 layers, d_model 1,024,
16 heads, d_ff 4,096; 256,206 or 250,054 output words; benchmarks/multilingual_fixture.py), German into English:
each source starts with its language code and every engine forces the target's as the first output token (vaswani
`forced`, transformers `forced_bos_token_id`, CTranslate2 `target_prefix`); the --steps tokens count it.

Each engine runs alone in a fresh process (its peak resident memory is its own); a round runs every engine once,
greedy then beam 4, so the engines of one round meet the same machine. "shortlist" engines decode with a
vocabulary shortlist learned from Multi30k's training pairs (decode/shortlist.py; `vaswani shortlist`), the others
over all 58,101 words. vaswani returns the tokens alone, as CTranslate2 does here (no return_scores); "scores"
engines return each output's log-probability too (greedy then runs the log-softmax it otherwise skips).
`--as-avx2` plays an AVX2-only CPU on a newer one, for every engine's kernels: torch's
and oneDNN's (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY), CTranslate2's own (CT2_FORCE_CPU_ISA), MKL's
(MKL_ENABLE_INSTRUCTIONS: CTranslate2 multiplies through MKL on an Intel CPU, which the first three leave at
AVX-512) and fbgemm's (FBGEMM_ENABLE_INSTRUCTIONS: vaswani's int8, likewise); "amd" also has CTranslate2
multiply through oneDNN (CT2_USE_MKL=0), its choice on any other CPU, "intel" keeps MKL. Prints a Markdown
table for docs/benchmarks.md (sentences/s and peak memory, medians over the rounds; CPU named), the ratios
(median and range of the per-round ratios), and how many outputs int8 changes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import torch

from vaswani.data.tokenizer import Tokenizer
from vaswani.export.ctranslate2 import converted
from vaswani.pretrained import import_pretrained
from vaswani.runtime.allocator import keep_freed_memory
from vaswani.runtime.machine import cpu_name
from vaswani.translate.translator import Translator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multilingual_fixture import LANGUAGES, save_shaped

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
    "vaswani (fp32) torch output",
    "vaswani (int8)",
    "vaswani (int8) fbgemm output",
    "vaswani (fp32) shortlist",
    "vaswani (int8) shortlist",
    "vaswani (fp32) scores",
    "vaswani (int8) scores",
    "transformers generate (fp32)",
    "CTranslate2 float32",
    "CTranslate2 int8",
)
MANY_TO_MANY = (  # no shortlist: one learned from Multi30k's pairs would change a random model's every output
    "vaswani (fp32)",
    "vaswani (int8)",
    "transformers generate (fp32)",
    "CTranslate2 float32",
    "CTranslate2 int8",
)
THREADS = torch.get_num_threads()
AS_AVX2 = {  # the environment every engine's process gets with --as-avx2 (read as each one loads its libraries)
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    "CT2_FORCE_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",  # our int8's kernel (fbgemm) reads none of the others
}


def _sources(tokenizer: Tokenizer, batch: list[str], shape: str) -> tuple[list[list[int]], list[int] | None]:
    """The batch's source ids as vaswani reads them (before EOS; a many-to-many model's source code first) and
    the token each output is forced to start with (the target language's code; None for OPUS-MT)."""
    ids = tokenizer.encode_src(batch)
    if shape == "opus":
        return ids, None
    source_code, target_code = LANGUAGES[shape]
    source, target = tokenizer.languages.id(source_code, "source"), tokenizer.languages.id(target_code, "target")
    return [[source, *x] for x in ids], [target] * len(batch)


def _engine_worker(name: str, hf_dir: str, model_dir: str, batches, beam: int, steps: int, shape: str = "opus"):
    """(seconds for `batches` after one warm-up batch, peak resident memory in MiB, outputs): one engine alone in
    a fresh process, so that its memory is its own and two OpenMP runtimes (torch's, CTranslate2's) do not meet.
    The peak includes loading (vaswani int8 holds the float32 weights until they are made int8)."""
    from vaswani.decode.request import DecodeRequest

    torch.set_num_threads(THREADS)
    keep_freed_memory()  # as the command line does, for every engine alike
    tokenizer = Tokenizer.load(model_dir)
    if name.startswith("vaswani"):
        precision = "int8" if "int8" in name else "fp32"
        shortlist = name.endswith("shortlist") or None
        if name.endswith("fbgemm output"):  # the output projection on fbgemm where oneDNN's AMX product would run
            from vaswani.nn.cpu_linear import int8

            int8.OUTPUT_KERNEL = "fbgemm"
        if name.endswith("torch output"):  # the float32 output projection torch's product, never timed against packed
            from vaswani.nn.cpu_linear import onednn_fp32

            onednn_fp32.TIMED_FROM = float("inf")
        engine = Translator.load(model_dir, "cpu", precision, shortlist=shortlist).engine

        def run(batch):
            request = DecodeRequest.of(  # the tokens alone, as CTranslate2's translate_batch returns them below
                scores=name.endswith("scores"), beam_size=beam, max_len_a=0, max_len_b=steps, min_len=steps,
                batch_size=len(batch),
            )  # fmt: skip
            ids, forced = _sources(tokenizer, batch, shape)
            return [hyps[0].tokens for hyps in engine(ids, request, forced=forced)]

    elif name.startswith("transformers"):
        import transformers

        hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
        pad, eos = (VOCAB - 1, 0) if shape == "opus" else (1, 2)

        def run(batch):
            sources, forced = _sources(tokenizer, batch, shape)
            ids = [[*x, eos] for x in sources]
            width = max(map(len, ids))
            input_ids = torch.tensor([x + [pad] * (width - len(x)) for x in ids])
            # mBART's forced EOS at the length limit off: every engine decodes --steps tokens of the model's choice
            options = {} if forced is None else {"forced_bos_token_id": forced[0], "forced_eos_token_id": None}
            with torch.inference_mode():
                out = hf.generate(
                    input_ids=input_ids, attention_mask=input_ids != pad, num_beams=beam,
                    max_new_tokens=steps, min_new_tokens=steps, **options,
                )  # fmt: skip
            return [row[1:].tolist() for row in out]

    else:
        import ctranslate2

        translator = ctranslate2.Translator(
            str(Path(model_dir) / "ctranslate2"), "cpu", compute_type=name.split()[-1], intra_threads=THREADS
        )

        def run(batch):
            sources, forced = _sources(tokenizer, batch, shape)
            pieces = [[tokenizer.src.id_to_piece(i) for i in x] for x in sources]
            prefix = None if forced is None else [[tokenizer.tgt.id_to_piece(i)] for i in forced]
            out = translator.translate_batch(
                pieces, target_prefix=prefix, beam_size=beam, max_decoding_length=steps, min_decoding_length=steps
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
    parser.add_argument("--shape", choices=("opus", "nllb", "mbart"), default="opus", help="the model's (above)")
    parser.add_argument("--profile", action="store_true", help="instead: where vaswani's search spends its time")
    parser.add_argument("--profile-beam", type=int, default=4, help="the beam --profile searches with (1: greedy)")
    parser.add_argument("--rounds", type=int, default=1, help="every engine this many times, in turns")
    parser.add_argument("--engines", help=f"comma-separated, of: {', '.join(ENGINES)} (default: all)")
    parser.add_argument(
        "--as-avx2", choices=("intel", "amd"), help="every engine as an AVX2-only CPU of that maker (see above)"
    )
    args = parser.parse_args()
    if args.as_avx2 and args.profile:
        parser.error("--profile runs in this process, whose torch is loaded: set the variables of AS_AVX2 instead")
    if args.as_avx2:  # before any engine's process starts (spawned: each loads torch and CTranslate2 afresh)
        os.environ.update(AS_AVX2, **({"CT2_USE_MKL": "0"} if args.as_avx2 == "amd" else {}))
    engines = ENGINES if args.shape == "opus" else MANY_TO_MANY
    engines = engines if not args.engines else [e.strip() for e in args.engines.split(",")]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engine(s) {', '.join(unknown)}; choose among {', '.join(ENGINES)}")
    import concurrent.futures
    import multiprocessing

    import ctranslate2
    import transformers

    with gzip.open(RAW / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        sources = [line.strip() for _, line in zip(range(args.sentences), f, strict=False)]
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = opus_shaped(Path(tmp) / "hf") if args.shape == "opus" else save_shaped(Path(tmp) / "hf", args.shape)
        model_dir = import_pretrained(hf_dir, Path(tmp) / "model")
        converted(model_dir)
        if any(name.endswith("shortlist") for name in engines):
            learn_shortlist(model_dir)
        lengths = [len(x) for x in Tokenizer.load(model_dir).encode_src(sources)]
        order = sorted(range(len(sources)), key=lambda i: -lengths[i])  # sorted by length, as every engine does
        batches = [[sources[i] for i in order[j : j + args.batch]] for j in range(0, len(order), args.batch)]
        if args.profile:
            for precision in ("fp32", "int8"):
                profile(model_dir, batches[:2], precision, args.steps, args.profile_beam)
            return
        results: dict = {}  # (engine, beam) -> sentences/s of each round
        memory: dict = {}
        outputs: dict = {}
        spawn = multiprocessing.get_context("spawn")
        for round_ in range(args.rounds):
            for beam in (1, 4):
                for name in engines:
                    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
                        job = pool.submit(
                            _engine_worker, name, str(hf_dir), str(model_dir), batches, beam, args.steps, args.shape
                        )
                        seconds, rss, out = job.result()
                    key = (name, beam)
                    results.setdefault(key, []).append(len(sources) / seconds)
                    memory.setdefault(key, []).append(rss)
                    outputs.setdefault(key, out)
                    print(f"round {round_ + 1}, {name}, beam {beam}: {results[key][-1]:.1f} sentences/s, peak "
                          f"{rss:,.0f} MiB", flush=True)  # fmt: skip
    played = f" played as an AVX2-only {args.as_avx2.upper()} CPU" if args.as_avx2 else ""
    print(f"\n{args.shape}-shaped model; CPU: {cpu_name()}{played}, {THREADS} threads; torch {torch.__version__}, "
          f"transformers "
          f"{transformers.__version__}, ctranslate2 {ctranslate2.__version__}; {len(sources)} sentences in "
          f"batches of {args.batch} sorted by length, {args.steps} tokens each; each engine alone in a fresh "
          f"process; median of {args.rounds} round(s)\n")  # fmt: skip
    print("| engine | greedy (sentences/s) | beam 4 (sentences/s) | peak memory, beam 4 (MiB) |")
    print("|---|---|---|---|")
    for name in engines:
        greedy_, beam_ = median(results[(name, 1)]), median(results[(name, 4)])
        print(f"| {name} | {greedy_:.1f} | {beam_:.1f} | {median(memory[(name, 4)]):,.0f} |")
    print()
    pairs = (
        ("vaswani (int8)", "CTranslate2 int8"),
        ("vaswani (fp32)", "CTranslate2 float32"),
        ("vaswani (fp32) torch output", "CTranslate2 float32"),
        ("vaswani (fp32)", "vaswani (fp32) torch output"),
        ("vaswani (int8) shortlist", "CTranslate2 int8"),
        ("vaswani (fp32) shortlist", "CTranslate2 float32"),
        ("vaswani (fp32) shortlist", "vaswani (fp32)"),
        ("vaswani (int8)", "vaswani (int8) fbgemm output"),
        ("vaswani (int8) fbgemm output", "CTranslate2 int8"),
        ("vaswani (fp32)", "vaswani (fp32) scores"),
        ("vaswani (int8)", "vaswani (int8) scores"),
    )
    for ours, theirs in pairs:
        if ours not in engines or theirs not in engines:
            continue
        shown = []
        for beam, what in ((1, "greedy"), (4, "beam 4")):
            ratios = [a / b for a, b in zip(results[(ours, beam)], results[(theirs, beam)], strict=True)]
            shown.append(f"{what} {_spread(ratios)}")
        memory_ratios = [a / b for a, b in zip(memory[(ours, 4)], memory[(theirs, 4)], strict=True)]
        print(f"{ours} vs {theirs}: {', '.join(shown)}, memory {_spread(memory_ratios)}")
    for a, b in (
        ("vaswani (fp32)", "vaswani (int8)"),
        ("vaswani (fp32)", "vaswani (int8) fbgemm output"),
        ("CTranslate2 float32", "CTranslate2 int8"),
        ("transformers generate (fp32)", "vaswani (fp32)"),
        ("CTranslate2 float32", "vaswani (fp32)"),
    ):
        if a not in engines or b not in engines:
            continue
        for beam in (1, 4):
            same = sum(x == y for x, y in zip(outputs[(a, beam)], outputs[(b, beam)], strict=True))
            print(f"{b} output = {a} output: {same}/{len(sources)} sentences, beam {beam}")


def _spread(ratios: list[float]) -> str:
    """The median of per-round ratios, and their range where there are several."""
    if len(ratios) == 1:
        return f"{ratios[0]:.2f}x"
    return f"{median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def learn_shortlist(model_dir: Path) -> None:
    """A shortlist for the model from Multi30k's 29,000 training pairs, as `vaswani shortlist` writes it."""
    from vaswani.data.corpus import read_lines
    from vaswani.decode.shortlist import FILE

    translator = Translator.load(model_dir, "cpu")
    sources, targets = read_lines(RAW / "train.de.gz"), read_lines(RAW / "train.en.gz")
    translator.learn_shortlist(sources, targets).save(Path(model_dir) / FILE)


def profile(model_dir: Path, batches, precision: str, steps: int, beam: int = 4) -> None:
    """torch.profiler over a search of `beam` (1: greedy) on `batches` (after one warm-up batch): the operations by
    share of the time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    from vaswani.data.batching import collate
    from vaswani.decode.request import DecodeRequest
    from vaswani.decode.search import beam_search, decoding, greedy

    keep_freed_memory()  # as the command line does (else the logits' fresh pages show as the log-softmax's time)
    tokenizer = Tokenizer.load(model_dir)
    model = Translator.load(model_dir, "cpu", precision).model
    c = model.config

    def run(batch):
        src = collate([(x, []) for x in tokenizer.encode_src(batch)], c.pad_id, c.bos_id, c.eos_id).src
        with decoding(torch.device("cpu"), precision):
            request = DecodeRequest.of(beam_size=beam, max_len_a=0, max_len_b=steps, min_len=steps)
            (greedy if beam == 1 else beam_search)(model, src, request)

    run(batches[0])
    with profiler(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches:
            run(batch)
    print(f"\n# vaswani {precision}, beam {beam}, {len(batches)} batches of {len(batches[0])}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=40))


if __name__ == "__main__":
    main()
