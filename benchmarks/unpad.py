"""The encoder with and without its padding (nn/unpad.py), side by side in one process: an OPUS-MT-shaped model
(benchmarks/imported_speed.py, packed float32 or int8 as `Translator.load` makes it) encoding test_2016_flickr's
sources in batches of 32, sorted by length (as `vaswani translate` batches a file) and in the order they come
(as a server's micro-batches meet them); rounds alternate the two, medians. Then how many of beam 4's outputs
(24 tokens at most) the padding's removal changes, at each order (its products have other row counts, so they
round differently).

    python benchmarks/unpad.py
    python benchmarks/unpad.py --precision int8
    python benchmarks/unpad.py --bert          # a BERT-base-shaped classifier (random weights) on SST-2's dev sentences
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python benchmarks/unpad.py   # an AVX2-only CPU's kernels
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median

import torch
from imported_speed import RAW, ROOT, opus_shaped

from vaswani.config import ModelConfig
from vaswani.data.batching import collate
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import beam_search
from vaswani.nn import MaskedLM, unpad
from vaswani.pretrained import import_pretrained
from vaswani.runtime.machine import cpu_name
from vaswani.translate.translator import Translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    parser.add_argument("--bert", action="store_true", help="instead: `classify` of a BERT-base-shaped model (fp32)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.bert:
        return bert(args)
    with gzip.open(RAW / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        sources = [line.strip() for _, line in zip(range(args.sentences), f, strict=False)]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = import_pretrained(opus_shaped(Path(tmp) / "hf"), Path(tmp) / "model")
        tokenizer = Tokenizer.load(model_dir)
        model = Translator.load(model_dir, "cpu", args.precision).model
    c = model.config
    ids = tokenizer.encode_src(sources)
    orders = {
        "sorted by length": sorted(range(len(ids)), key=lambda i: -len(ids[i])),
        "as they come": list(range(len(ids))),
    }
    print(f"CPU: {cpu_name()}, 2 threads, torch {torch.__version__}; {args.precision}; {len(ids)} sources in "
          f"batches of {args.batch}; median of {args.rounds} rounds, the two alternating\n")  # fmt: skip
    print("| batches | padding | padded (s) | without padding (s) | speed-up | beam 4's outputs unchanged |")
    print("|---|---|---|---|---|---|")
    request = DecodeRequest.of(beam_size=4, max_len_a=0, max_len_b=24)
    for name, order in orders.items():
        batches = [
            collate([(ids[i], []) for i in order[j : j + args.batch]], c.pad_id, c.bos_id, c.eos_id).src
            for j in range(0, len(order), args.batch)
        ]
        positions = sum(b.numel() for b in batches)
        padding = sum(int((b == c.pad_id).sum()) for b in batches) / positions
        padded, unpadded = side_by_side(model.encode, batches, args.rounds)
        outputs = {}
        for kind in ("padded", "unpadded"):
            with padding_kept(kind == "padded"), torch.inference_mode():
                outputs[kind] = [hyps[0].tokens for src in batches for hyps in beam_search(model, src, request)]
        same = sum(a == b for a, b in zip(*outputs.values(), strict=True))
        print(f"| {name} | {padding:.0%} | {padded:.3f} | {unpadded:.3f} | **{padded / unpadded:.2f}x** | "
              f"{same}/{len(ids)} |")  # fmt: skip


@contextmanager
def padding_kept(kept: bool) -> Iterator[None]:
    """The encoders keep their padding (`kept`) or drop it as they do by default (nn/unpad.py)."""
    default = unpad.MIN_PADDING
    unpad.MIN_PADDING = 2.0 if kept else default  # 2.0: no batch has that much padding
    try:
        yield
    finally:
        unpad.MIN_PADDING = default


def side_by_side(
    run: Callable[[torch.Tensor], object], batches: list[torch.Tensor], rounds: int
) -> tuple[float, float]:
    """Seconds for `run` over every batch with the padding kept and dropped, alternating, medians over `rounds`
    (after one untimed round of each)."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds + 1):
        for kept, spent in times.items():
            with padding_kept(kept), torch.inference_mode():
                start = time.perf_counter()
                for batch in batches:
                    run(batch)
                spent.append(time.perf_counter() - start)
    return median(times[True][1:]), median(times[False][1:])


def bert(args) -> None:
    """`MaskedLM.classify` (what `vaswani classify` runs) of a BERT-base-shaped model with random weights, as a
    Classifier holds it in fp32, over SST-2's dev sentences: [CLS], a piece per word (SST-2's text is split into
    words already; WordPiece gives a few more), [SEP]."""
    config = ModelConfig(
        type="encoder_only", src_vocab_size=30522, tgt_vocab_size=30522, d_model=768, n_heads=12, d_ff=3072,
        n_layers=12, activation="gelu", positions="learned", max_positions=512, n_classes=2,
    )  # fmt: skip
    model = MaskedLM(config).eval()
    lines = (ROOT / "../shared/data/sst2/dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    lengths = [len(line.split("\t", 1)[1].split()) + 2 for line in lines]
    print(f"CPU: {cpu_name()}, 2 threads, torch {torch.__version__}; BERT-base-shaped classify, fp32; {len(lengths)} "
          f"SST-2 dev sentences in batches of 64; median of {args.rounds} rounds, the two alternating\n")  # fmt: skip
    print("| batches | padding | padded (s) | without padding (s) | speed-up |\n|---|---|---|---|---|")
    for name, order in (("sorted by length", sorted(lengths, reverse=True)), ("as they come", lengths)):
        batches = []
        for j in range(0, len(order), 64):
            part = order[j : j + 64]
            ids = torch.zeros(len(part), max(part), dtype=torch.long)  # 0: BERT's [PAD]
            for row, n in enumerate(part):
                ids[row, :n] = torch.randint(1000, 30000, (n,))
            batches.append(ids)
        padding = sum(int((b == 0).sum()) for b in batches) / sum(b.numel() for b in batches)
        padded, unpadded = side_by_side(model.classify, batches, args.rounds)
        print(f"| {name} | {padding:.0%} | {padded:.3f} | {unpadded:.3f} | **{padded / unpadded:.2f}x** |")


if __name__ == "__main__":
    main()
