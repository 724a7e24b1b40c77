"""An OPUS-MT-shaped Marian model that translates: trained by transformers on Multi30k de→en, saved in the hub's layout.

    python benchmarks/marian_fixture.py runs/marian_hf                 # on a GPU where there is one (~2 min on an H200)
    vaswani import runs/marian_hf runs/marian                           # as a user imports OPUS-MT

The tests' Marian checkpoints (tests/pretrained/hf_models.py) are a few hundred pieces wide and trained for seconds:
enough for the importer's equalities, too weak to judge what a glossary does to a translation. This one has the
layout of an OPUS-MT upload (source.spm, target.spm, one vocab.json, swish, sinusoidal positions, a start token that
is PAD, a final logits bias) and is trained long enough to write fluent Multi30k English, so that
benchmarks/terms.py can measure terms on an imported model as well as on one trained here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.hf_models import _marian_vocab, _sentencepiece, multi30k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=8000, help="pieces of each side's SentencePiece model")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch", type=int, default=96)
    args = parser.parse_args()
    import transformers

    torch.manual_seed(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    src_lines, tgt_lines = multi30k("train", "de", 10**6), multi30k("train", "en", 10**6)
    sp_src, sp_tgt = _sentencepiece(src_lines, args.vocab), _sentencepiece(tgt_lines, args.vocab)
    (out / "source.spm").write_bytes(sp_src.serialized_model_proto())
    (out / "target.spm").write_bytes(sp_tgt.serialized_model_proto())
    vocab = _marian_vocab([sp_src, sp_tgt])
    import json

    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    pad = vocab["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=args.d_model,
        encoder_layers=args.layers, decoder_layers=args.layers, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=4 * args.d_model, decoder_ffn_dim=4 * args.d_model, activation_function="swish",
        max_position_embeddings=256, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True, scale_embedding=True, dropout=0.1,
    )  # fmt: skip
    tokenizer = transformers.MarianTokenizer(
        str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"), source_lang="de", target_lang="en"
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = transformers.MarianMTModel(config).to(device)
    steps = args.epochs * len(src_lines) // args.batch
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min((s + 1) / 500, 1.0) * (1 - s / steps))
    started = time.perf_counter()
    model.train()
    for step in range(steps):
        start = step * args.batch % (len(src_lines) - args.batch)
        batch = tokenizer(
            src_lines[start : start + args.batch], text_target=tgt_lines[start : start + args.batch],
            return_tensors="pt", padding=True, truncation=True, max_length=128,
        ).to(device)  # fmt: skip
        batch["labels"][batch["labels"] == pad] = -100
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 500 == 0:
            print(f"step {step}/{steps} loss {loss.item():.3f} {time.perf_counter() - started:.0f}s", flush=True)
    model = model.eval().cpu()
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=pad, pad_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        bad_words_ids=[[pad]], num_beams=4, max_length=128,
    )  # fmt: skip
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    print(f"saved {out} after {steps} steps, {time.perf_counter() - started:.0f}s on {device}")


if __name__ == "__main__":
    main()
