"""Prepared data: the streamed, worker-encoded, memory-mapped path gives exactly the batches of the
in-memory path; it is reused only when it matches; it is never trusted when damaged or incomplete."""

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.corpus import write_corpus
from vaswani.config import Config, DataConfig
from vaswani.data import parallel, store
from vaswani.data.batching import collate, epoch_order, token_batches
from vaswani.data.corpus import DataError, filter_pairs, read_parallel
from vaswani.data.parallel import ParallelRecipe
from vaswani.data.prepare import open_or_prepare
from vaswani.data.tokenizer import Tokenizer
from vaswani.train.loader import EpochBatches, EpochPlan, Reader, batch_stream, load_run_data

pytestmark = pytest.mark.shared_data  # reads ../shared/data (tests/conftest.py skips it where absent)

MULTI30K = Path(__file__).resolve().parents[2] / "../shared/data/multi30k/raw"


def _open(config: DataConfig, directory: Path, workers: int = 2, joint: bool = True):
    recipe = ParallelRecipe.from_config(config, joint, 1)
    prepared = open_or_prepare(recipe, directory, workers=workers)
    return load_run_data(prepared, Tokenizer.load(directory), config)


def _multi30k(tmp_path: Path, gz: bool = False) -> DataConfig:
    """Multi30k de-en as shipped (.gz), or decompressed into plain files."""
    files = {}
    for key, name in (
        ("train_src", "train.de"),
        ("train_tgt", "train.en"),
        ("valid_src", "val.de"),
        ("valid_tgt", "val.en"),
    ):
        path = MULTI30K / f"{name}.gz"
        if not gz:
            target = tmp_path / name
            target.write_bytes(gzip.decompress(path.read_bytes()))
            path = target
        files[key] = str(path)
    return DataConfig(**files, vocab_size=2000, max_len=40, max_len_ratio=1.6, max_tokens=2000)


@pytest.mark.slow
def test_prepared_batches_equal_the_in_memory_path_on_multi30k(tmp_path, monkeypatch):
    """Bit-identical batches (ids, order, per seed and epoch): the in-memory reference reads whole files,
    encodes in one call and filters in one pass; the prepared path streams small chunks through two
    worker processes (gzipped too) and maps the arrays back."""
    monkeypatch.setattr(parallel, "CHUNK_PAIRS", 997)  # many chunks, out of step with everything else
    config = _multi30k(tmp_path)
    data = _open(config, tmp_path / "prepared")
    text = read_parallel(config.train_src, config.train_tgt)
    usable = [(s, t) for s, t in text if s and t]
    reference_tok = Tokenizer.train(
        [s for s, _ in usable], [t for _, t in usable], config.vocab_size, "bpe", True, tmp_path
    )
    assert (tmp_path / "tokenizer.model").read_bytes() == (tmp_path / "prepared/tokenizer.model").read_bytes()
    pairs = list(
        zip(reference_tok.encode_src([s for s, _ in text]), reference_tok.encode_tgt([t for _, t in text]), strict=True)
    )
    keep, report = filter_pairs(pairs, config.max_len, config.max_len_ratio)
    assert report.removed and data.report["removed"] == dict(report.removed) and data.report["kept"] == len(keep)
    pairs = [pairs[i] for i in keep]
    for seed in (1, 2):
        expected = token_batches([(len(s), len(t)) for s, t in pairs], config.max_tokens, seed)
        plan = EpochPlan(data, config.max_tokens, seed)
        got = plan.batches(0)
        assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
        stream = batch_stream(data, plan, config, seed, 0, 0, Reader())
        for epoch in (0, 1):
            for number in epoch_order(len(expected), seed, epoch):
                reference = collate([pairs[i] for i in expected[number]])
                e, _, batch = next(stream)
                assert e == epoch and torch.equal(batch.src, reference.src)
                assert torch.equal(batch.tgt_out, reference.tgt_out) and batch.tgt_tokens == reference.tgt_tokens
        stream.close()
    gzipped = _open(_multi30k(tmp_path, gz=True), tmp_path / "prepared-gz")
    for name, entry in data.prepared.manifest["files"].items():
        assert gzipped.prepared.manifest["files"][name]["sha256"] == entry["sha256"], name
    valid = read_parallel(config.valid_src, config.valid_tgt)
    assert data.valid_text == valid and data.valid[0][0] == reference_tok.encode_src([valid[0][0]])[0]


def test_loader_workers_give_the_same_batches_as_none(tmp_path):
    config = DataConfig(**write_corpus(tmp_path, 400), vocab_size=120, max_tokens=150, src_sampling_alpha=0.2)
    data = _open(config, tmp_path / "p")
    plan = EpochPlan(data, config.max_tokens, 3)
    streams = [batch_stream(data, plan, config, 3, 0, 0, Reader(workers=w)) for w in (0, 2)]
    n = len(plan.batches(0))
    for _ in range(n + 3):  # into the second epoch
        (e0, p0, a), (e1, p1, b) = (next(s) for s in streams)
        assert (e0, p0) == (e1, p1) and torch.equal(a.src, b.src) and torch.equal(a.tgt_in, b.tgt_in)
    for s in streams:
        s.close()


@pytest.mark.parametrize("src_alpha,tgt_alpha", [(0.1, 0.0), (0.0, 0.3)])
def test_sampling_segments_each_batch_afresh_reproducibly_and_keeps_the_text(tmp_path, src_alpha, tgt_alpha):
    config = DataConfig(
        **write_corpus(tmp_path),
        vocab_size=120,
        max_tokens=150,
        src_sampling_alpha=src_alpha,
        tgt_sampling_alpha=tgt_alpha,
    )
    data = _open(config, tmp_path / "p")
    plan = EpochPlan(data, config.max_tokens, 1)
    batches = plan.batches(0)
    numbers = list(range(len(batches)))

    def epoch(e):
        return [EpochBatches(data, batches, numbers, e, 1, config)[k] for k in numbers]

    first, again, second = epoch(0), epoch(0), epoch(1)
    plain = [collate([data.prepared.train.pair(i) for i in b]) for b in batches]
    side = "src" if src_alpha else "tgt_out"
    assert all(torch.equal(getattr(a, side), getattr(b, side)) for a, b in zip(first, again, strict=True))
    assert any(not torch.equal(getattr(a, side), getattr(b, side)) for a, b in zip(first, second, strict=True))
    assert sum(getattr(b, side).ne(0).sum() for b in first) > sum(getattr(b, side).ne(0).sum() for b in plain)
    fixed = "tgt_out" if src_alpha else "src"
    assert all(torch.equal(getattr(a, fixed), getattr(b, fixed)) for a, b in zip(first, plain, strict=True))
    tok = data.tokenizer
    for a, b in zip(first, plain, strict=True):  # only the segmentation changes
        rows_a = [[x for x in row if x > 2] for row in getattr(a, side).tolist()]
        rows_b = [[x for x in row if x > 2] for row in getattr(b, side).tolist()]
        assert tok.decode_tgt(rows_a) == tok.decode_tgt(rows_b)


def test_a_sampled_side_over_max_len_keeps_its_deterministic_ids(tmp_path):
    config = DataConfig(**write_corpus(tmp_path), vocab_size=120, max_tokens=150, src_sampling_alpha=0.5, max_len=9)
    data = _open(config, tmp_path / "p")
    batches = EpochPlan(data, config.max_tokens, 1).batches(0)
    items = EpochBatches(data, batches, list(range(len(batches))), 0, 1, config)
    assert all(items[k].src.ne(0).sum(1).max() <= 10 for k in range(len(batches)))  # + EOS


def test_the_manifest_decides_reuse_and_names_what_changed(tmp_path):
    config = DataConfig(**write_corpus(tmp_path), vocab_size=120)
    data = _open(config, tmp_path / "p")
    built = (tmp_path / "p/train.src.bin").stat().st_mtime_ns
    Path(config.train_src).touch()  # a new time, the same content: hashed, found equal, reused
    _open(config, tmp_path / "p")
    assert (tmp_path / "p/train.src.bin").stat().st_mtime_ns == built
    with pytest.raises(DataError, match="prepared with max_len=256, this run asks for 50"):
        _open(DataConfig(**write_corpus(tmp_path), vocab_size=120, max_len=50), tmp_path / "p")
    with pytest.raises(DataError, match="prepared with joint=True"):
        _open(config, tmp_path / "p", joint=False)
    text = Path(config.train_tgt).read_text()
    Path(config.train_tgt).write_text(text.replace("man", "men", 1))  # same size, new content
    with pytest.raises(DataError, match=r"train\.tgt has changed since .* was prepared"):
        _open(config, tmp_path / "p")
    assert len(data.prepared.train) == 120


def test_a_text_prepared_with_another_eos_is_not_reused(tmp_path):
    """The EOS a text was prepared with (an imported GPT-2's <|endoftext|>, BERT's [SEP]) is in its manifest; a
    manifest from before it was recorded stands for vaswani's own EOS, so such directories are still reused."""
    from vaswani.data.plain import PlainRecipe
    from vaswani.special import EOS_ID

    (tmp_path / "t.txt").write_text("A man rides a bike.\nTwo dogs play in the snow.\n" * 40, encoding="utf-8")
    data = DataConfig(text=str(tmp_path / "t.txt"), tokenizer="char", vocab_size=40, block_size=8)
    prepared = open_or_prepare(PlainRecipe(data, 1), tmp_path / "p")
    assert prepared.manifest["recipe"]["eos_id"] == EOS_ID
    manifest = json.loads((tmp_path / "p" / store.MANIFEST).read_text())
    del manifest["recipe"]["eos_id"]  # as written before the EOS was recorded
    store.write_manifest(tmp_path / "p", manifest)
    open_or_prepare(PlainRecipe(data, 1), tmp_path / "p")  # reused
    with pytest.raises(DataError, match=f"prepared with eos_id={EOS_ID}, this run asks for 50256"):
        open_or_prepare(PlainRecipe(data, 1, eos_id=50256), tmp_path / "p")


def _no_hashing(path):
    raise AssertionError(f"{path} was hashed")


def test_damaged_or_unfinished_prepared_data_is_never_trusted(tmp_path, monkeypatch):
    config = DataConfig(**write_corpus(tmp_path), vocab_size=120)
    _open(config, tmp_path / "p")
    shutil.copytree(tmp_path / "p", tmp_path / "q")
    ids = tmp_path / "p/train.src.bin"
    raw = bytearray(ids.read_bytes())
    raw[10] ^= 0xFF
    stamp = ids.stat().st_mtime_ns
    monkeypatch.setattr(store, "file_sha256", _no_hashing)
    _open(config, tmp_path / "p")  # unchanged files are trusted without reading them
    monkeypatch.undo()
    ids.write_bytes(bytes(raw))
    os.utime(ids, ns=(stamp + 10**9, stamp + 10**9))  # written a second later, as any later edit is
    with pytest.raises(DataError, match=r"train\.src\.bin does not match the sha256 .* delete .* prepare again"):
        _open(config, tmp_path / "p")
    ids.write_bytes(bytes(raw[:-6]))
    with pytest.raises(DataError, match="truncated"):
        _open(config, tmp_path / "p")
    (tmp_path / "q/manifest.json").unlink()  # what a kill before the last write leaves
    with pytest.raises(DataError, match=r"is not prepared data .* not empty"):
        _open(config, tmp_path / "q")


def test_an_interrupted_preparation_leaves_nothing_behind(tmp_path, monkeypatch):
    config = DataConfig(**write_corpus(tmp_path, 3000), vocab_size=120)
    monkeypatch.setattr(parallel, "CHUNK_PAIRS", 100)
    calls = []

    def failing(result_iter):
        for i, result in enumerate(result_iter):
            calls.append(i)
            if i == 5:
                raise KeyboardInterrupt
            yield result

    original = parallel.in_order
    monkeypatch.setattr(parallel, "in_order", lambda *a: failing(original(*a)))
    with pytest.raises(KeyboardInterrupt):
        _open(config, tmp_path / "p")
    assert calls and not (tmp_path / "p").exists() and not list(tmp_path.glob(".p.partial-*"))
    monkeypatch.setattr(parallel, "in_order", original)
    assert len(_open(config, tmp_path / "p").prepared.train) == 3000


@pytest.mark.slow
def test_a_killed_preparation_is_remade_by_the_next_run(tmp_path):
    """kill -9 half way: the partial sibling directory is ignored, the target never appears."""
    config = DataConfig(**write_corpus(tmp_path, 20000), vocab_size=120)
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(
        json.dumps({"data": {"train_src": config.train_src, "train_tgt": config.train_tgt, "vocab_size": 120}})
    )
    script = (
        "import os, sys, vaswani.data.parallel as s\n"
        "s.CHUNK_PAIRS = 1000\n"
        "add = s._SplitWriter.add\n"
        "def kill_at_third(results):\n"
        "    for i, result in enumerate(results):\n"
        "        if i == 2:\n"
        "            os.kill(os.getpid(), 9)\n"
        "        yield result\n"
        "s._SplitWriter.add = lambda self, results: add(self, kill_at_third(results))\n"
        "from vaswani.cli import main; main(['prepare', sys.argv[1], sys.argv[2], '--workers', '1'])\n"
    )
    killed = subprocess.run([sys.executable, "-c", script, str(recipe_file), str(tmp_path / "p")], timeout=120)
    assert killed.returncode == -9
    assert not (tmp_path / "p").exists() and list(tmp_path.glob(".p.partial-*"))
    assert len(_open(config, tmp_path / "p").prepared.train) == 20000


def test_weighted_corpora_are_sampled_by_weight_and_reported_per_corpus(tmp_path):
    a, b = write_corpus(tmp_path, 200, 1, "a"), write_corpus(tmp_path, 300, 2, "b")
    (tmp_path / "b.src").write_text((tmp_path / "b.src").read_text() + "\n")  # one empty pair in b, removed
    (tmp_path / "b.tgt").write_text((tmp_path / "b.tgt").read_text() + "x\n")
    corpora = [
        {"name": "a", "src": a["train_src"], "tgt": a["train_tgt"], "weight": 2},
        {"name": "b", "src": b["train_src"], "tgt": b["train_tgt"], "weight": 0.5},
    ]
    config = Config.from_dict({"data": {"corpora": corpora, "vocab_size": 150, "max_tokens": 200}}).data
    data = _open(config, tmp_path / "p")
    assert data.report["corpora"]["a"] == {"total": 200, "kept": 200, "removed": {}}
    assert data.report["corpora"]["b"] == {"total": 301, "kept": 300, "removed": {"empty source or target": 1}}
    plan = EpochPlan(data, config.max_tokens, 1)
    members = [np.sort(np.concatenate(plan.batches(e))) for e in (0, 1)]
    for m in members:
        assert np.array_equal(np.bincount(m[m < 200], minlength=200), np.full(200, 2))  # every a-pair twice
        assert (m >= 200).sum() == 150 and len(np.unique(m[m >= 200])) == 150  # a random half of b
    assert not np.array_equal(members[0], members[1])
    assert np.array_equal(np.sort(np.concatenate(EpochPlan(data, config.max_tokens, 1).batches(1))), members[1])


def test_prepare_errors_name_the_file_and_the_fix(tmp_path):
    files = write_corpus(tmp_path, 50)
    with pytest.raises(DataError, match=r"missing\.de: file not found"):
        _open(DataConfig(train_src=str(tmp_path / "missing.de"), train_tgt=files["train_tgt"]), tmp_path / "p")
    raw = Path(files["train_tgt"]).read_bytes().split(b"\n")
    raw[30] = b"caf\xe9"
    Path(files["train_tgt"]).write_bytes(b"\n".join(raw))
    with pytest.raises(DataError, match=r"train\.tgt, line 31: invalid UTF-8 at byte 3"):
        _open(DataConfig(**files, vocab_size=100), tmp_path / "p", workers=2)
    Path(files["train_tgt"]).write_text("one\ntwo\n")
    with pytest.raises(DataError, match=r"train\.src has 50 lines but .*train\.tgt has 2"):
        _open(DataConfig(**files, vocab_size=100), tmp_path / "p")
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
def test_cli_prepare_then_train_reuses_it(tmp_path):
    files = write_corpus(tmp_path, 300)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        json.dumps(
            {
                "model": {"d_model": 32, "d_ff": 64, "n_heads": 2, "n_layers": 1},
                "data": {**files, "vocab_size": 100, "max_tokens": 300},
                "train": {"max_steps": 2, "valid_every": 2, "precision": "fp32"},
            }
        )
    )

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "vaswani.cli", *args], capture_output=True, text=True, timeout=300)

    made = cli("prepare", str(recipe), str(tmp_path / "d"), "--workers", "2")
    assert made.returncode == 0, made.stderr
    assert "300 of 300 training pairs kept" in made.stdout
    trained = cli("train", str(recipe), str(tmp_path / "run"), "--prepared", str(tmp_path / "d"))
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "(reused; 300 training pairs)" in trained.stderr and not (tmp_path / "run/prepared").exists()
    assert (tmp_path / "run/tokenizer.model").read_bytes() == (tmp_path / "d/tokenizer.model").read_bytes()
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        json.dumps({"data": {"corpora": [{**{"src": files["train_src"], "tgt": files["train_tgt"]}, "weight": 0}]}})
    )
    result = cli("prepare", str(bad), str(tmp_path / "e"))
    said = [line for line in result.stderr.splitlines() if not line.startswith("vaswani: threads:")]  # a busy CPU's
    assert result.returncode == 2 and len(said) == 1
    assert "data.corpora[0].weight must be a number above 0" in result.stderr
    assert json.loads((tmp_path / "d/manifest.json").read_text())["format"] == store.FORMAT


def test_nothing_left_to_train_on_names_the_files_and_the_dev_set_counts_its_removals(tmp_path):
    """Issue 60 (tests/fuzz/corpus.py): the error named no file nor why the pairs went; dev pairs with an empty side
    were left out of the dev set without a count anywhere."""
    files = write_corpus(tmp_path, 60)
    tokenizer = Tokenizer.load(_open(DataConfig(**files, vocab_size=60), tmp_path / "p").prepared.directory)
    (tmp_path / "empty.de").write_text("\n" * 5, encoding="utf-8")
    empty = str(tmp_path / "empty.de")
    recipe = ParallelRecipe(corpora=(parallel.Corpus("e", empty, empty),))
    with pytest.raises(DataError, match=r"after filtering .*empty\.de and .*empty\.de \(5 read; removed: 5 empty"):
        open_or_prepare(recipe, tmp_path / "q", tokenizer, workers=1)
    lines = Path(files["train_src"]).read_text(encoding="utf-8").splitlines()
    lines[3] = ""
    (tmp_path / "valid.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    train = parallel.Corpus("train", files["train_src"], files["train_tgt"])
    recipe = ParallelRecipe(corpora=(train,), valid=(str(tmp_path / "valid.de"), files["train_tgt"]))
    prepared = open_or_prepare(recipe, tmp_path / "r", tokenizer, workers=1)
    assert prepared.manifest["report"]["valid"] == {"total": 60, "kept": 59, "removed": {"empty source or target": 1}}
    assert len(prepared.valid) == 59
