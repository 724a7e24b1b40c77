"""Translating with an imported OPUS-MT model: vaswani against transformers' `generate` and CTranslate2.

The model has the shape of Helsinki-NLP/opus-mt-de-en (6+6 layers, d_model 512, 8 heads, d_ff 2048, swish,
58,101 pieces, a logits bias) with random weights (nothing can be downloaded here; the speed is the
shape's), saved in OPUS-MT's layout and brought in by `vaswani import`. A random model does not stop by
itself, so every engine decodes exactly --steps tokens per sentence (EOS forbidden before, the end there):
equal work, about a Multi30k sentence's length. The same test_2016_flickr sources, the same batches.

    python benchmarks/imported_speed.py              # ~5 minutes on 2 cores

Prints a Markdown table for docs/benchmarks.md (sentences/s; CPU named).
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

import torch

from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.translator import Translator
from vaswani.export.ctranslate2 import converted
from vaswani.pretrained import import_pretrained
from vaswani.runtime import cpu_name

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


def timed(run, batches) -> float:
    run(batches[0])  # warm-up: first-call allocations, kernel choices
    start = time.perf_counter()
    for batch in batches:
        run(batch)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=192)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=24)
    args = parser.parse_args()
    import ctranslate2
    import transformers

    with gzip.open(RAW / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        sources = [line.strip() for _, line in zip(range(args.sentences), f, strict=False)]
    batches = [sources[i : i + args.batch] for i in range(0, len(sources), args.batch)]
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = opus_shaped(Path(tmp) / "hf")
        model_dir = import_pretrained(hf_dir, Path(tmp) / "model")
        converted(model_dir)
        hf = transformers.MarianMTModel.from_pretrained(str(hf_dir)).eval()
        tokenizer = Tokenizer.load(model_dir)
        ours = Translator.load(model_dir, "cpu", "fp32")
        results = {}

        def vaswani(batch, beam):
            return ours.translate(batch, beam_size=beam, max_len_a=0, max_len_b=args.steps, batch_size=args.batch)

        def hugging_face(batch, beam):
            ids = [[*x, 0] for x in tokenizer.encode_src(batch)]
            width = max(map(len, ids))
            input_ids = torch.tensor([x + [VOCAB - 1] * (width - len(x)) for x in ids])
            with torch.inference_mode():
                return hf.generate(
                    input_ids=input_ids, attention_mask=input_ids != VOCAB - 1, num_beams=beam,
                    max_new_tokens=args.steps, min_new_tokens=args.steps,
                )  # fmt: skip

        def ctranslate2_engine(kind):
            translator = ctranslate2.Translator(str(model_dir / "ctranslate2"), "cpu", compute_type=kind)

            def run(batch, beam):
                pieces = [[tokenizer.src.id_to_piece(i) for i in x] for x in tokenizer.encode_src(batch)]
                return translator.translate_batch(
                    pieces, beam_size=beam, max_decoding_length=args.steps, min_decoding_length=args.steps
                )

            return run

        runs = {
            "vaswani (fp32)": vaswani,
            "transformers generate (fp32)": hugging_face,
            "CTranslate2 float32": ctranslate2_engine("float32"),
            "CTranslate2 int8": ctranslate2_engine("int8"),
        }
        for beam in (1, 4):
            for name, run in runs.items():
                seconds = timed(lambda batch, run=run, beam=beam: run(batch, beam), batches)
                results[(name, beam)] = len(sources) / seconds
                print(f"{name}, beam {beam}: {results[(name, beam)]:.1f} sentences/s", flush=True)
    print(f"\nCPU: {cpu_name()}, {torch.get_num_threads()} threads; torch {torch.__version__}, transformers "
          f"{transformers.__version__}, ctranslate2 {ctranslate2.__version__}; {len(sources)} sentences in "
          f"batches of {args.batch}, {args.steps} tokens each\n")  # fmt: skip
    print("| engine | greedy (sentences/s) | beam 4 (sentences/s) |")
    print("|---|---|---|")
    for name in runs:
        print(f"| {name} | {results[(name, 1)]:.1f} | {results[(name, 4)]:.1f} |")


if __name__ == "__main__":
    main()
