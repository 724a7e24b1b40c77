"""Helpers every test folder uses: the shared data's place, tiny model configurations, random ids, a model
directory with a real tokenizer."""

import os
from pathlib import Path

import torch

from vaswani import ModelConfig

# beside the checkout; VASWANI_SHARED_DATA points elsewhere (tests/test_suite.py points it at nothing)
SHARED_DATA = Path(os.environ.get("VASWANI_SHARED_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")
MULTI30K = SHARED_DATA / "multi30k"
SHARED_FILES = (  # what the suite reads from the shared data
    *(f"multi30k/raw/{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr") for lang in ("de", "en")),
    "tinyshakespeare/input.txt",
    "sst2/train.tsv",
    "sst2/dev.tsv",
)


def missing_shared_data() -> list[str]:
    """The files of SHARED_FILES absent from the shared data (empty files count as absent)."""
    return [
        name for name in SHARED_FILES if not (SHARED_DATA / name).is_file() or not (SHARED_DATA / name).stat().st_size
    ]


def tiny_config(**overrides) -> ModelConfig:
    """Tiny dimensions for fast CPU tests (d_model 32, 2 heads, 2 layers)."""
    fields = dict(src_vocab_size=50, tgt_vocab_size=50, d_model=32, n_heads=2, d_ff=64, n_layers=2, dropout=0.0)
    fields.update(overrides)
    return ModelConfig(**fields)


def random_ids(lengths: list[int], vocab: int = 50, pad: int = 0, low: int = 3) -> torch.Tensor:
    """Right-padded batch of random non-special token ids. Shape: (B, max(lengths))"""
    ids = torch.full((len(lengths), max(lengths)), pad, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(low, vocab, (n,))
    return ids


def write_tiny_model_directory(directory: Path, **decode) -> Path:
    """A model directory with a real BPE tokenizer (Multi30k) and an untrained tiny model: its
    translations are nonsense, but everything around the search is real."""
    from vaswani.config import Config
    from vaswani.data.corpus import read_lines
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.nn import Transformer
    from vaswani.train import checkpoint as ckpt

    src = read_lines(MULTI30K / "raw/val.de.gz")
    tgt = read_lines(MULTI30K / "raw/val.en.gz")
    tokenizer = Tokenizer.train(src, tgt, 600, "bpe", joint=True, directory=directory)
    config = Config.from_dict(
        {
            "model": {
                "d_model": 32,
                "n_heads": 2,
                "d_ff": 64,
                "n_layers": 2,
                "max_positions": 40,
                "src_vocab_size": tokenizer.src_vocab_size,
                "tgt_vocab_size": tokenizer.tgt_vocab_size,
            },
            "data": {"train_src": str(MULTI30K / "raw/train.de.gz"), "train_tgt": str(MULTI30K / "raw/train.en.gz")},
            "decode": {"max_len_b": 6, "batch_size": 3, **decode},
        }
    )
    torch.manual_seed(0)
    ckpt.write_model_directory(directory, config)
    ckpt.save_weights(ckpt.weights_of(Transformer(config.model)), directory / ckpt.WEIGHTS)
    return directory
