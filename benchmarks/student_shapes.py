"""What a distilled student must drop to be fast at equal search: the full de→en recipe's teacher shape against
student shapes (depth, width, output words), each decoding the same sources for the same number of steps, greedy
and beam 4, float32 and int8, on this CPU.

    python benchmarks/student_shapes.py            # ~6 minutes on 2 cores
    python benchmarks/student_shapes.py --shapes "teacher 4-4" "2-1"

Speed depends on a model's shape, not its weights, when the work is equal: every model has random weights and
decodes exactly --steps tokens per sentence (EOS forbidden before; the median length of the references in pieces by
default), so each search makes the same number of steps whatever it would have written. The sources: Multi30k
test_2016_flickr's 1,000 German sentences in the pieces of a joint 8,000-piece BPE learned here on the training pairs
(the teacher recipe's, configs/multi30k_de_en.yaml); batches of 64 as `vaswani translate` makes them; each
measurement the median of three after a warm-up batch; sentences/s. Equal search compares a student with the
teacher in the same precision and search; the mixed figure (a student's greedy against the teacher's int8 beam 4)
is what "Distillation" in docs/benchmarks.md reported. Writes benchmarks/results/student_shapes.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from provenance import stamp

from vaswani import Transformer
from vaswani.config.model import ModelConfig
from vaswani.data.corpus import read_lines
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.engine import TorchEngine
from vaswani.decode.request import DecodeRequest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "../shared/data/multi30k/raw"
RESULTS = ROOT / "benchmarks/results/student_shapes.json"
REPEATS = 3
VOCAB = 8000  # the teacher recipe's joint BPE
TARGET_WORDS = 4270  # the pieces of it Multi30k's English targets use (config/model.py, output_words)
TINY = {"d_model": 128, "d_ff": 256, "n_heads": 4}
SHAPES = {  # name: (encoder layers, decoder layers, width, output words)
    "teacher 4-4": (4, 4, TINY, VOCAB),
    "2-1": (2, 1, TINY, VOCAB),
    "2-1, target words only": (2, 1, TINY, TARGET_WORDS),
    "2-1, 2,000 words": (2, 1, TINY, 2000),
    "2-1, d 64": (2, 1, {"d_model": 64, "d_ff": 128, "n_heads": 2}, VOCAB),
    "2-1, d 64, target words only": (2, 1, {"d_model": 64, "d_ff": 128, "n_heads": 2}, TARGET_WORDS),
    "1-1, d 64, 2,000 words": (1, 1, {"d_model": 64, "d_ff": 128, "n_heads": 2}, 2000),
}


def model_of(shape: str) -> Transformer:
    encoder, decoder, width, words = SHAPES[shape]
    config = ModelConfig(
        src_vocab_size=VOCAB, tgt_vocab_size=words, n_layers=encoder, n_decoder_layers=decoder, dropout=0.0,
        share_embeddings=words == VOCAB, **width,
    )  # fmt: skip
    torch.manual_seed(0)
    return Transformer(config).eval()


def sentences_per_s(shape: str, precision: str, beam: int, sources: list[list[int]], steps: int) -> float:
    engine = TorchEngine(model_of(shape), precision, owned=True)
    request = DecodeRequest.of(beam_size=beam, max_len_a=0, max_len_b=steps, min_len=steps, batch_size=64)
    engine(sources[:64], request)  # warm: kernels chosen and timed, caches made
    runs = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        with torch.inference_mode():
            engine(sources, request)
        runs.append(time.perf_counter() - started)
    return len(sources) / statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--steps", type=int, help="tokens decoded per sentence (default: the references' median)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        pairs = read_lines(DATA / "train.de.gz"), read_lines(DATA / "train.en.gz")
        tokenizer = Tokenizer.train(*pairs, VOCAB, "bpe", joint=True, directory=tmp)
        sources = tokenizer.encode_src(read_lines(DATA / "test_2016_flickr.de.gz"))
        references = tokenizer.encode_tgt(read_lines(DATA / "test_2016_flickr.en.gz"))
    steps = args.steps or int(statistics.median(len(r) for r in references)) + 1  # and EOS
    rows = []
    for shape in args.shapes:
        for precision in ("fp32", "int8"):
            for beam in (1, 4):
                speed = sentences_per_s(shape, precision, beam, sources, steps)
                row = {"shape": shape, "precision": precision, "beam": beam, "sentences_per_s": round(speed, 1)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    teacher = {(r["precision"], r["beam"]): r["sentences_per_s"] for r in rows if r["shape"] == "teacher 4-4"}
    print(f"\n{steps} steps a sentence; sentences/s, and x the teacher at equal search (same precision and search)")
    print("| shape | fp32 greedy | fp32 beam 4 | int8 greedy | int8 beam 4 | int8 greedy vs teacher int8 beam 4 |")
    print("|---|---|---|---|---|---|")
    for shape in args.shapes:
        mine = {(r["precision"], r["beam"]): r["sentences_per_s"] for r in rows if r["shape"] == shape}
        cells = []
        for key in (("fp32", 1), ("fp32", 4), ("int8", 1), ("int8", 4)):
            ratio = f" ({mine[key] / teacher[key]:.2f}x)" if teacher else ""
            cells.append(f"{mine[key]:,.0f}{ratio}")
        mixed = f"{mine[('int8', 1)] / teacher[('int8', 4)]:.2f}x" if teacher else ""
        print(f"| {shape} | {' | '.join(cells)} | {mixed} |")
    result = {**stamp("Multi30k test_2016_flickr (sources; random weights)"), "steps": steps, "rows": rows}
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
