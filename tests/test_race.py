"""benchmarks/race.py's training race runs on the device it is given (docs/benchmarks.md, "Training speed"):
the same code on the CPU here, on CUDA where there is a GPU."""

import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.common import tiny_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _batches(vocab: int) -> list[tuple]:
    from train_step import make_batches

    lengths = [(5 + i % 7, 4 + i % 5) for i in range(64)]
    return make_batches(lengths, 200, vocab)


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the GPU race)")
        ),
    ],
)
def test_the_training_race_measures_every_contender_and_the_flops_per_token(device):
    pytest.importorskip("transformers")
    import race

    config = tiny_config(src_vocab_size=50, tgt_vocab_size=50)
    rates = race.train_race(config, _batches(50), steps=2, warmup=1, bf16=False, device=torch.device(device))
    for name in ("vaswani", "Marian (HF)", "torch.nn.Transformer"):
        assert rates[name] > 0
    assert rates["FLOPs per token"] > 6 * sum(p.numel() for p in race.Transformer(config).parameters()) * 0.5
    assert ("matrix-product floor" in rates) == (device == "cpu")
