"""Small BERT checkpoints built offline, as the hub publishes them: a WordPiece vocabulary trained by the
`tokenizers` library on SST-2 text, random weights made realistic (LayerNorms, biases and token type embeddings
away from their initial values), briefly trained (masked tokens; the classifier on SST-2's labels), saved with
save_pretrained beside the tokenizer's files (BertTokenizerFast.save_pretrained: tokenizer.json)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

SST2 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "sst2"
# [CLS], [SEP] and [MASK] where a vocabulary trained here has other pieces (BOS 1, EOS 2, <mask> 4), and
# [UNK] among the first five, as in bert-base-uncased ([PAD] 0, [unused0..98], [UNK] 100, [CLS] 101, ...).
SPECIAL_TOKENS = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LABELS = {0: "negative", 1: "positive"}


def sst2(split: str, n: int, start: int = 0) -> list[tuple[int, str]]:
    """(label, text) of `n` lines of SST-2's train.tsv or dev.tsv, after the header, from line `start`."""
    rows = (SST2 / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1 + start : 1 + start + n]
    return [(int(label), text) for label, text in (row.split("\t") for row in rows)]


def save_bert_mlm(out: Path, steps: int = 120, vocab_size: int = 1000) -> Path:
    """A BertForMaskedLM (hidden 64, 2 layers, 4 heads, intermediate 128, 128 positions) in `out`, the same bytes
    on every run, thread count and x86 vector width (`_wordpiece`, `_one_thread`, trained in float64)."""
    torch.manual_seed(0)
    with _one_thread():
        return _save_mlm(out, steps, vocab_size)


@contextmanager
def _one_thread() -> Iterator[None]:
    """torch on one thread, then as many as before: sums in one order, so the weights do not depend on the thread
    count (and a model this small trains far faster on one thread of a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _wordpiece(lines: list[str], vocab_size: int):
    """A WordPiece vocabulary trained by `tokenizers`, the same on every run. Its trainer numbers the continuing
    pieces ("##e") in the order of a hash map seeded per process, and breaks ties between merges of equal count by
    those numbers: the vocabulary differed from run to run (a few pieces of 1000, and the order of the rest), and
    so did the model trained on it. Given as special tokens, in sorted order, the continuing characters get their
    numbers before the trainer sees a word (and stand in vocab.txt right after [MASK])."""
    from tokenizers import BertWordPieceTokenizer

    wordpiece = BertWordPieceTokenizer(lowercase=True)
    words = (
        w
        for line in lines
        for w, _ in wordpiece.pre_tokenizer.pre_tokenize_str(wordpiece.normalizer.normalize_str(line))
    )
    continuing = sorted({f"##{c}" for word in words for c in word[1:]})
    wordpiece.train_from_iterator(
        lines, vocab_size=vocab_size, min_frequency=2, special_tokens=[*SPECIAL_TOKENS, *continuing]
    )
    return wordpiece


def _save_mlm(out: Path, steps: int, vocab_size: int) -> Path:
    import transformers

    out.mkdir(parents=True, exist_ok=True)
    lines = [text for _, text in sst2("train", 6000)]
    _wordpiece(lines, vocab_size).save_model(str(out))  # vocab.txt
    tokenizer = transformers.BertTokenizerFast(vocab=str(out / "vocab.txt"))
    config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = transformers.BertForMaskedLM(config)
    with torch.no_grad():  # what training leaves: LayerNorms, biases and the segment embeddings moved
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
            # Attention that picks tokens out and moves them, as a trained BERT's does: at the initial scale it
            # averages all tokens and adds little, and [CLS]'s state is nearly the same for every text.
            if name.endswith(("query.weight", "key.weight")):
                p.mul_(8.0)
            if name.endswith(("value.weight", "attention.output.dense.weight")):
                p.mul_(5.0)
        model.bert.embeddings.token_type_embeddings.weight.normal_(0.0, 0.05)
        model.cls.predictions.bias.normal_(0.0, 0.5)
    # In float64, saved as float32: ATen's AVX2 and AVX-512 kernels round float32 sums apart, and 120 steps grew that
    # into other weights (the int8 test's errors moved with them); float64's differences stay below float32's last bit
    _train_mlm(model.double(), tokenizer, lines, steps)
    model.float().eval().save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def save_bert_classifier(mlm: Path, out: Path) -> Path:
    """A BertForSequenceClassification (negative / positive) from the masked LM in `mlm`. Its head is random,
    scaled and centred on SST-2 training text so that both labels come out with probabilities far from 0.5 (the
    tiny pretrained model's [CLS] states differ little from text to text, and a few steps of fine-tuning on
    SST-2 do not move them)."""
    torch.manual_seed(1)
    with _one_thread():
        return _save_classifier(mlm, out)


def _save_classifier(mlm: Path, out: Path) -> Path:
    import transformers

    model = transformers.BertForSequenceClassification.from_pretrained(
        str(mlm), num_labels=2, id2label=LABELS, label2id={v: k for k, v in LABELS.items()}
    ).eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(mlm))
    batch = tokenizer([t for _, t in sst2("train", 256, start=6000)], return_tensors="pt", padding=True)
    with torch.no_grad():
        model.bert.pooler.dense.weight.normal_(0.0, 0.5)
        model.bert.pooler.dense.bias.normal_(0.0, 0.1)
        logits = model.double()(**batch).logits.float()  # in float64 too: the same scale on every CPU
        model.float()
        margin = logits[:, 1] - logits[:, 0]  # (B,)
        model.classifier.weight.mul_(3.0 / margin.std())  # margins of about 3 nats, half of them each way
        centre = (margin * 3.0 / margin.std()).median() - (model.classifier.bias[1] - model.classifier.bias[0])
        model.classifier.bias.copy_(torch.stack([centre / 2, -centre / 2]))
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def _train_mlm(model, tokenizer, lines: list[str], steps: int, batch: int = 32) -> None:
    """BERT's masking: 15% of the regular tokens, 80% [MASK], 10% random, 10% kept."""
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    special = torch.tensor(sorted(tokenizer.all_special_ids))
    model.train()
    for step in range(steps):
        start = step * batch % (len(lines) - batch)
        inputs = tokenizer(
            lines[start : start + batch], return_tensors="pt", padding=True, truncation=True, max_length=64
        )
        ids = inputs["input_ids"]
        chosen = (torch.rand(ids.shape) < 0.15) & ~torch.isin(ids, special)
        labels = torch.where(chosen, ids, -100)
        action = torch.rand(ids.shape)
        masked = ids.clone()
        masked[chosen & (action < 0.8)] = tokenizer.mask_token_id
        random = chosen & (action >= 0.8) & (action < 0.9)
        masked[random] = torch.randint(len(SPECIAL_TOKENS), len(tokenizer), (int(random.sum()),))
        loss = model(input_ids=masked, attention_mask=inputs["attention_mask"], labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
