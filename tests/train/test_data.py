"""The training data of a run; subword sampling (BPE-dropout) segments it afresh each epoch."""

import random
from pathlib import Path

import pytest

from vaswani.config import DataConfig
from vaswani.train.data import epoch_data, prepare

WORDS = ["a", "man", "woman", "child", "dog", "ball", "street", "water", "red", "blue", "green", "playing",
         "running", "walking", "holding", "through", "under", "beside", "the", "with", "young", "old", "small",
         "large", "sitting", "standing", "looking"]


def write_corpus(directory: Path, n: int = 120, seed: int = 0) -> dict[str, str]:
    """n random caption-like pairs (the target is the source reversed word by word) as train files."""
    rng = random.Random(seed)
    src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(n)]
    tgt = [" ".join(reversed(line.split())) for line in src]
    (directory / "train.src").write_text("\n".join(src) + "\n")
    (directory / "train.tgt").write_text("\n".join(tgt) + "\n")
    return {"train_src": str(directory / "train.src"), "train_tgt": str(directory / "train.tgt")}


def _prepare(tmp_path, **fields):
    config = DataConfig(**write_corpus(tmp_path), tokenizer="bpe", vocab_size=120, max_tokens=150, **fields)
    return config, prepare(config, True, tmp_path, 1, lambda _: None)


def test_without_sampling_every_epoch_is_the_prepared_data(tmp_path):
    config, data = _prepare(tmp_path)
    for epoch in (0, 5):
        pairs, batches = epoch_data(data, config, 1, epoch)
        assert pairs is data.train and batches is data.train_batches


@pytest.mark.parametrize("src_alpha,tgt_alpha", [(0.1, 0.0), (0.0, 0.3), (0.2, 0.2)])
def test_sampling_resegments_each_epoch_reproducibly_and_keeps_the_text(tmp_path, src_alpha, tgt_alpha):
    config, data = _prepare(tmp_path, src_sampling_alpha=src_alpha, tgt_sampling_alpha=tgt_alpha)
    first, first_batches = epoch_data(data, config, 1, 0)
    again, again_batches = epoch_data(data, config, 1, 0)
    second, _ = epoch_data(data, config, 1, 1)
    assert first == again and first_batches == again_batches  # a function of (seed, epoch): resumable
    assert first != second and first != data.train
    tok = data.tokenizer
    for side, alpha in ((0, src_alpha), (1, tgt_alpha)):
        sampled, fixed = [p[side] for p in first], [p[side] for p in data.train]
        assert tok.decode_tgt(sampled) == tok.decode_tgt(fixed)  # only the segmentation changes
        if alpha:
            assert sum(map(len, sampled)) > sum(map(len, fixed))  # dropped merges: more, shorter pieces
        else:
            assert sampled == fixed
    assert sorted(i for b in first_batches for i in b) == list(range(len(data.train)))
    for batch in first_batches:  # the token budget holds for the sampled lengths
        longest = max(max(len(first[i][0]), len(first[i][1])) + 1 for i in batch)
        assert longest * len(batch) <= config.max_tokens or len(batch) == 1


def test_a_sampled_side_over_max_len_keeps_its_deterministic_ids(tmp_path):
    config, data = _prepare(tmp_path, src_sampling_alpha=0.5, max_len=9)
    pairs, _ = epoch_data(data, config, 1, 0)
    assert all(len(s) <= 9 for s, _ in pairs)
    assert any(s == fixed for (s, _), (fixed, _) in zip(pairs, data.train, strict=True))
