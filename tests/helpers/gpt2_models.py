"""A small GPT2LMHeadModel built offline, as the hub publishes GPT-2: a byte-level BPE tokenizer trained by the
`tokenizers` library on Tiny Shakespeare (<|endoftext|> its last id, as in GPT-2), random weights made
realistic (LayerNorms and biases away from 1 and 0), briefly trained on documents joined by <|endoftext|>, so
that greedy search has real choices to make and ends some documents; saved with save_pretrained beside
tokenizer.json, vocab.json and merges.txt."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SHAKESPEARE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
EOT = "<|endoftext|>"


def shakespeare() -> str:
    return SHAKESPEARE.read_text(encoding="utf-8")


def byte_level_bpe(text: str, vocab_size: int) -> Tokenizer:
    """GPT-2's pipeline (byte-level pre-tokenizer, BPE, byte-level decoder), <|endoftext|> added last."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    speeches = text.split("\n\n")
    tokenizer.train_from_iterator(("\n\n".join(speeches[i : i + 20]) for i in range(0, len(speeches), 20)), trainer)
    tokenizer.add_special_tokens([EOT])
    return tokenizer


def documents(text: str, seed: int = 0) -> str:
    """The text with most of its line ends (70%, at random) ending a document (<|endoftext|> for the newline):
    short documents, so that a model this small learns to end them, and greedy search ends some."""
    rng = random.Random(seed)
    return "".join(line + (EOT if line and rng.random() < 0.7 else "\n") for line in text.split("\n"))


def save_gpt2(
    out: Path,
    steps: int = 250,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_positions: int = 128,
    vocab_size: int = 1000,
) -> Path:
    """A GPT2LMHeadModel and its tokenizer files in `out` (config.json, model.safetensors,
    generation_config.json, tokenizer.json, tokenizer_config.json, vocab.json, merges.txt)."""
    import transformers

    torch.manual_seed(0)
    out.mkdir(parents=True, exist_ok=True)
    text = shakespeare()
    tokenizer = byte_level_bpe(text, vocab_size)
    eot = tokenizer.token_to_id(EOT)
    config = transformers.GPT2Config(
        vocab_size=tokenizer.get_vocab_size(),
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        bos_token_id=eot,
        eos_token_id=eot,
    )
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():  # what training leaves: LayerNorms and biases away from 1 and 0
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    stream = torch.tensor(tokenizer.encode(documents(text[:300_000])).ids)
    _train(model, stream, steps, n_positions // 2)
    model.generation_config = transformers.GenerationConfig(bos_token_id=eot, eos_token_id=eot)
    model.eval().save_pretrained(str(out))
    fast = transformers.GPT2TokenizerFast(tokenizer_object=tokenizer, bos_token=EOT, eos_token=EOT, unk_token=EOT)
    fast.save_pretrained(str(out))  # tokenizer.json and tokenizer_config.json
    tokenizer.model.save(str(out))  # merges.txt, and vocab.json that GPT-2's also numbers <|endoftext|> in:
    (out / "vocab.json").write_text(json.dumps(tokenizer.get_vocab(), ensure_ascii=False), encoding="utf-8")
    return out


def _train(model, stream: torch.Tensor, steps: int, length: int, batch: int = 16) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices this small gain nothing from more threads, and lose much on a busy CPU
    model.train()
    try:
        for _ in range(steps):
            starts = torch.randint(0, len(stream) - length, (batch,), generator=generator)
            ids = torch.stack([stream[s : s + length] for s in starts.tolist()])
            loss = model(input_ids=ids, labels=ids).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
