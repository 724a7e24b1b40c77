"""GPT-2 in: a GPT2LMHeadModel saved as the hub publishes it, imported, proven equal to transformers'."""

import itertools
import json
import shutil

import pytest
import torch

from tests.helpers.checks import (
    adapt_to_captions,
    assert_refused,
    finetune_a_classifier,
    rewrite_weights,
    saved_and_imported,
    set_config,
    without,
)
from tests.helpers.gpt2_models import EOT, SHAKESPEARE, save_gpt2, shakespeare
from vaswani.cli import main
from vaswani.data.labelled import classifier_inputs
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.classifier import Classifier
from vaswani.decode.generate import Generator
from vaswani.model_dir import load_model

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]  # slow: checkpoints trained by transformers

transformers = pytest.importorskip("transformers")

SST2 = SHAKESPEARE.parents[1] / "sst2"
MAX_NEW = 40


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Matrices this small gain nothing from more threads, and lose much on a CPU other processes share."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory, _one_thread):
    """A small GPT2LMHeadModel (2 layers, d 64, n_positions 128, byte-level BPE of 1,001 ids, <|endoftext|>
    last), its GPT2TokenizerFast and the vaswani model imported from it by the CLI."""
    root = tmp_path_factory.mktemp("gpt2")
    return saved_and_imported(root, save_gpt2, transformers.GPT2LMHeadModel, transformers.GPT2TokenizerFast)


@pytest.fixture(scope="module")
def held_out():
    """Speeches from the last tenth of Tiny Shakespeare (the model trained on the first), newlines kept."""
    text = shakespeare()
    return [s for s in text[int(0.9 * len(text)) :].split("\n\n") if s.strip()][:150]


PROMPTS = [
    "",  # GPT-2's start of a document: <|endoftext|>
    "ROMEO:\nWhat",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n",
    "KING RICHARD III:\nNow is the winter of our discontent\nMade glorious summer",
    "O, wilt thou leave me so unsatisfied?\n",
    "JULIET:\n'Tis but thy name that is my enemy;",
    "Café — “naïve” ☃\n\n\n",
    f"An end.{EOT}A new beginning:\n",
]


def test_the_import_records_its_origin_and_gpt2_s_settings(gpt2):
    _, model_dir, hf, _ = gpt2
    info = json.loads((model_dir / "vaswani.json").read_text())
    assert info["origin"]["model_type"] == "gpt2" and info["origin"]["architectures"] == ["GPT2LMHeadModel"]
    _, config = load_model(model_dir)
    m, eot = config.model, hf.config.eos_token_id
    assert eot == hf.config.vocab_size - 1 == 1000  # as GPT-2's 50256: the last id
    assert (m.type, m.norm_first, m.positions, m.max_positions) == ("decoder_only", True, "learned", 128)
    assert (m.activation, m.scale_embeddings, m.output_bias, m.layer_norm_eps) == ("gelu_tanh", False, False, 1e-5)
    assert (m.pad_id, m.bos_id, m.eos_id) == (eot, eot, eot)  # <|endoftext|>: the one special token
    assert config.data.block_size == 128
    assert sorted(p.name for p in model_dir.iterdir()) == [
        "config.yaml",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vaswani.json",
    ]


def test_our_tokenizer_gives_gpt2_tokenizer_s_ids_and_text(gpt2, held_out):
    _, model_dir, _, tokenizer = gpt2
    ours = Tokenizer.load(model_dir)
    sample = [
        *held_out,
        *PROMPTS,
        "  two leading spaces,\ttabs\t\tand trailing spaces   ",
        "\n\n\nnewlines first\r\nand a Windows line end",
        "unicode: Ünïcödé, 日本語のテキスト, emoji 🤖👍🏽, math ∑∫√, RTL שלום",
        "digits 1234567890 and 3.14159, 'quotes' \"double\" — dashes –",
        f"{EOT}{EOT} specials back to back, and a partial <|endof",
    ]
    theirs = tokenizer(sample)["input_ids"]
    assert ours.encode_src(sample) == theirs
    assert sum(len(ids) for ids in theirs) > 5000
    assert ours.decode_tgt(theirs) == tokenizer.batch_decode(theirs, skip_special_tokens=True)
    assert ours.decode_tgt(theirs)[:-1] == [s.replace(EOT, "") for s in sample[:-1]]  # byte-level: text back
    assert ours.text_newlines and ours.mask_id is None and ours.src_vocab_size == 1001


def test_vocab_json_and_merges_txt_without_tokenizer_json_import_the_same_tokenizer(gpt2, held_out, tmp_path):
    src = shutil.copytree(gpt2[0], tmp_path / "src")
    (src / "tokenizer.json").unlink()
    assert main(["import", str(src), str(tmp_path / "model")]) == 0
    ours = Tokenizer.load(tmp_path / "model")
    assert ours.file_names == ["vocab.json", "merges.txt", "tokenizer_config.json"]
    lines = [*held_out[:50], *PROMPTS]
    assert ours.encode_src(lines) == gpt2[3](lines)["input_ids"]  # the tokenizer.json the hub model has
    assert ours.encode_src(lines) == transformers.GPT2TokenizerFast.from_pretrained(str(src))(lines)["input_ids"]
    (tmp_path / "copy").mkdir()
    ours.save(tmp_path / "copy")
    assert Tokenizer.load(tmp_path / "copy").encode_src(lines) == ours.encode_src(lines)


def test_logits_are_transformers_within_1e_4(gpt2, held_out):
    _, model_dir, hf, tokenizer = gpt2
    model, _ = load_model(model_dir)
    ids = [x for x in tokenizer(held_out)["input_ids"] if len(x) >= 120][:16]
    batch = torch.tensor([x[:120] for x in ids])  # (16, 120): positions up to n_positions
    with torch.no_grad():
        theirs = hf(batch).logits
        ours = model(batch)
        _, cache = model.decode_step(batch[:, :-1])
        last, _ = model.decode_step(batch[:, -1], cache)  # the KV cache's path
    assert batch.shape == (16, 120)
    assert (ours - theirs).abs().max() < 1e-4
    assert (last - theirs[:, -1]).abs().max() < 1e-4
    assert theirs.std() > 1.0  # the comparison is between logits that differ from token to token


@pytest.mark.parametrize("layout", ["legacy-buffers", "own-lm-head"])
def test_older_and_untied_layouts_import_equal(gpt2, held_out, tmp_path, layout):
    """An older upload (pytorch_model.bin with each layer's causal-mask buffers, attn.bias and attn.masked_bias) and
    a GPT-2 whose lm_head is its own (tie_word_embeddings false): logits equal to transformers' on either."""
    src = shutil.copytree(gpt2[0], tmp_path / "hf")
    n_layer = json.loads((src / "config.json").read_text())["n_layer"]

    def edit(weights):
        prefix = "transformer." if "transformer.wte.weight" in weights else ""
        if layout == "legacy-buffers":
            for i in range(n_layer):
                weights[f"{prefix}h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 8, 8))
                weights[f"{prefix}h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
        else:
            wte = weights[f"{prefix}wte.weight"]
            weights["lm_head.weight"] = wte + 0.05 * torch.randn(wte.shape, generator=torch.Generator().manual_seed(0))

    rewrite_weights(src, edit, legacy=layout == "legacy-buffers")
    if layout == "own-lm-head":
        set_config(src, tie_word_embeddings=False)
    assert main(["import", str(src), str(tmp_path / "model")]) == 0
    model, _ = load_model(tmp_path / "model")
    assert model.config.tie_output is (layout != "own-lm-head")
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(src)).eval()
    assert not torch.equal(hf.lm_head.weight, hf.transformer.wte.weight) or layout != "own-lm-head"
    batch = torch.tensor([x[:64] for x in gpt2[3](held_out)["input_ids"] if len(x) >= 64][:8])
    with torch.no_grad():
        assert (model(batch) - hf(batch).logits).abs().max() < 1e-4


def _hf_greedy(hf, ids: list[int], max_new: int) -> list[int]:
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=max_new,
            pad_token_id=hf.config.eos_token_id,
        )
    return out[0, len(ids) :].tolist()


def test_greedy_is_transformers_generate_and_stops_at_endoftext(gpt2):
    _, model_dir, hf, tokenizer = gpt2
    generator = Generator.load(model_dir, "cpu")
    eot, stopped, limited = hf.config.eos_token_id, 0, 0
    for prompt, max_new in itertools.product(PROMPTS, (MAX_NEW, 3)):
        ids = generator.encode(prompt)
        assert ids == (tokenizer(prompt)["input_ids"] or [eot])
        theirs = _hf_greedy(hf, ids, max_new)
        ended = theirs[-1] == eot
        ours = generator.generate_ids(ids, max_new, greedy_search=True)[0]
        assert ours == (theirs[:-1] if ended else theirs), prompt  # ours ends at <|endoftext|>, not with it
        assert generator.generate_ids(ids, max_new, greedy_search=True, cache=False)[0] == ours
        text = generator.generate(prompt, max_new, greedy_search=True)[0]
        assert text == tokenizer.decode(theirs, skip_special_tokens=True)
        stopped, limited = stopped + ended, limited + (not ended)
    assert stopped and limited  # some documents end, some continuations run to the limit
    int8 = Generator.load(model_dir, "cpu", precision="int8")  # int8 linear layers (nn/cpu_linear/int8.py)
    assert int8.generate_ids(generator.encode(PROMPTS[0]), MAX_NEW, greedy_search=True)[0]  # it runs, it writes


def test_vaswani_generate_writes_the_prompt_and_its_continuation(gpt2, capsys):
    _, model_dir, hf, tokenizer = gpt2
    prompt = "ROMEO:\nWhat"
    ids = tokenizer(prompt)["input_ids"]
    expected = prompt + tokenizer.decode(_hf_greedy(hf, ids, 30), skip_special_tokens=True) + "\n"
    args = ["generate", str(model_dir), "--prompt", prompt, "--greedy", "--max-new-tokens", "30", "--device", "cpu"]
    assert main(args) == 0
    assert capsys.readouterr().out == expected
    assert main(["generate", str(model_dir), "--max-new-tokens", "20", "-n", "2", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.count("\n---\n") == 1  # sampled, from <|endoftext|>


def test_finetune_and_classify_an_imported_gpt2(gpt2, tmp_path):
    _, model_dir, _, _ = gpt2
    train, dev = (
        (SST2 / f"{name}.tsv").read_text(encoding="utf-8").splitlines()[: n + 1]
        for name, n in (("train", 200), ("dev", 40))
    )
    out = finetune_a_classifier(model_dir, tmp_path, train, dev)
    assert Tokenizer.load(out).file_names == Tokenizer.load(model_dir).file_names
    classifier = Classifier.load(out, "cpu")
    texts = ["a gorgeous , witty , seductive movie .", "", "the plot is nothing but boilerplate clichés"]
    inputs = classifier_inputs(classifier.tokenizer, texts, classifier.config.model, 128)
    assert all(x[-1] == 1000 for x in inputs)  # `text <|endoftext|>`, padded with <|endoftext|>
    together = classifier.probabilities(texts)
    for text, probs in zip(texts, together, strict=True):
        torch.testing.assert_close(classifier.probabilities([text])[0], probs, rtol=1e-4, atol=1e-5)


def _sharded(d, safetensors: bool = True):
    """An edit: the checkpoint saved again in shards of at most 100 kB, with their index; or those shards as
    pickled pytorch_model-*.bin files, as older transformers wrote them (transformers 5 writes safetensors only)."""
    from safetensors.torch import load_file

    hf = transformers.GPT2LMHeadModel.from_pretrained(str(d))
    (d / "model.safetensors").unlink()
    hf.save_pretrained(str(d), max_shard_size="100KB")
    if not safetensors:
        index = json.loads((d / "model.safetensors.index.json").read_text())
        names = {shard: shard.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
                 for shard in set(index["weight_map"].values())}  # fmt: skip
        for shard, name in names.items():
            torch.save(load_file(d / shard), d / name)
            (d / shard).unlink()
        index["weight_map"] = {k: names[v] for k, v in index["weight_map"].items()}
        (d / "pytorch_model.bin.index.json").write_text(json.dumps(index))
        (d / "model.safetensors.index.json").unlink()
    return d


@pytest.mark.parametrize("safetensors", [True, False], ids=["safetensors", "bin"])
def test_a_sharded_checkpoint_imports_the_same_weights(gpt2, tmp_path, safetensors):
    from safetensors.torch import load_file

    src, model_dir, _, _ = gpt2
    sharded = _sharded(shutil.copytree(src, tmp_path / "src"), safetensors)
    index = "model.safetensors.index.json" if safetensors else "pytorch_model.bin.index.json"
    shards = set(json.loads((sharded / index).read_text())["weight_map"].values())
    assert len(shards) > 3 and not (sharded / "model.safetensors").exists()
    assert main(["import", str(sharded), str(tmp_path / "out")]) == 0
    ours, whole = load_file(tmp_path / "out" / "model.safetensors"), load_file(model_dir / "model.safetensors")
    assert ours and ours.keys() == whole.keys() and all(torch.equal(ours[k], whole[k]) for k in ours)


def test_a_sharded_checkpoint_missing_a_shard_is_refused(gpt2, tmp_path, capsys):
    def edit(d):
        _sharded(d)
        index = json.loads((d / "model.safetensors.index.json").read_text())
        (d / sorted(set(index["weight_map"].values()))[1]).unlink()
        capsys.readouterr()  # transformers' progress bars while saving

    assert_refused(gpt2[0], tmp_path, capsys, edit, "names the shard model-00002-of-")


def test_a_hub_id_fetches_safetensors_where_the_repository_has_them_else_the_bin(monkeypatch, tmp_path):
    """Online, `vaswani import owner/name` downloads the configs, the tokenizer files and one kind of weights:
    many older checkpoints (OPUS-MT's among them) have pytorch_model.bin only."""
    import huggingface_hub

    from vaswani.pretrained import resolve

    asked = {}
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, allow_patterns: asked.update(
        {repo: allow_patterns}) or str(tmp_path))  # fmt: skip
    repos = {
        "Helsinki-NLP/opus-mt-de-en": ["config.json", "pytorch_model.bin", "tf_model.h5", "source.spm"],
        "gpt2": ["config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json"],
    }
    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda repo: repos[repo])
    for repo in repos:
        assert resolve(repo) == tmp_path
    assert asked["Helsinki-NLP/opus-mt-de-en"][-1] == "pytorch_model*.bin"
    assert asked["gpt2"][-1] == "*.safetensors" and not any(".bin" in p for p in asked["gpt2"])

    def offline(repo):
        raise huggingface_hub.errors.OfflineModeIsEnabled("HF_HUB_OFFLINE is set")

    monkeypatch.setattr(huggingface_hub, "list_repo_files", offline)  # the cache serves it: either weights
    assert resolve("gpt2") == tmp_path and {"*.safetensors", "pytorch_model*.bin"} <= set(asked["gpt2"])


def _held_out_loss(model_dir, stream, block: int) -> float:
    """Nats per predicted token of the model in `model_dir` on consecutive blocks of the token `stream`."""
    from vaswani.train.tasks.base import TextBatch
    from vaswani.train.tasks.language import held_out_loss

    model = load_model(model_dir)[0].eval()
    ids = torch.from_numpy(stream.astype("int64"))
    n = (len(ids) - 1) // block
    x, y = ids[: n * block].view(n, block), ids[1 : n * block + 1].view(n, block)
    return held_out_loss(model, [TextBatch(x, y, y.numel())], torch.device("cpu"))["loss"]


def test_continued_pretraining_adapts_an_imported_gpt2_to_the_user_s_text(gpt2, tmp_path, capsys):
    """`vaswani finetune` with data.text: GPT-2's next-token objective on new text (Multi30k's captions, far from
    the Shakespeare it learned), its own tokenizer and <|endoftext|>. The prepared stream is GPT2TokenizerFast's
    ids of the text, newlines included, then <|endoftext|>; the held-out loss on captions falls well below the
    imported model's; the result generates."""
    from vaswani.data.store import PreparedData

    _, model_dir, _, hf_tokenizer = gpt2
    out, valid = adapt_to_captions(model_dir, tmp_path)
    assert json.loads((out / "vaswani.json").read_text())["origin"]["finetuned_from"] == str(model_dir.resolve())
    assert (out / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()

    streams = PreparedData.open(out / "prepared").streams
    text = "\n".join(valid) + "\n"
    assert streams["valid"].tolist() == [*hf_tokenizer(text)["input_ids"], 1000]  # 1000: <|endoftext|>
    assert streams["train"][-1] == 1000 and (streams["train"] == 1000).sum() == 1
    before, after = (_held_out_loss(d, streams["valid"], 64) for d in (model_dir, out))
    assert after < before - 0.5, (before, after)  # measured: 5.63 -> 4.81 in 80 steps

    capsys.readouterr()
    assert main(["generate", str(out), "--prompt", "A man", "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out.startswith("A man")


def test_continued_pretraining_refuses_what_belongs_to_the_pretrained_model(gpt2, tmp_path, capsys):
    import yaml

    _, model_dir, _, _ = gpt2
    (tmp_path / "t.txt").write_text("A dog runs.\n" * 50, encoding="utf-8")
    for data, finetune, named in (
        ({"vocab_size": 500}, {}, "data.vocab_size is the pretrained model's"),
        ({"block_size": 256}, {}, "data.block_size 256 is longer than the model's learned positions"),
        ({"labelled_train": "x.tsv"}, {}, "give data.text (continue the language model's pretraining"),
        ({}, {"original_src": "a.de", "original_tgt": "a.en"}, "finetune.original_src is for classifiers"),
    ):
        recipe = {"data": {"text": str(tmp_path / "t.txt"), **data}, "train": {"max_steps": 1}, "finetune": finetune}
        (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
        capsys.readouterr()
        assert main(["finetune", str(model_dir), str(tmp_path / "r.yaml"), str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert named in err and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (without("tokenizer.json", "merges.txt"), "merges.txt"),
        (lambda d: (d / "tokenizer.json").write_text("{not json"), "tokenizer.json"),
        (lambda d: set_config(d, n_embd=32), "shape"),
        (lambda d: set_config(d, vocab_size=1100, eos_token_id=1099, bos_token_id=1099), "shape"),
        (lambda d: set_config(d, vocab_size=900), "config.json: model.pad_id=1000 is outside the vocabulary"),
        (lambda d: set_config(d, n_positions=256), "wpe.weight"),
        (lambda d: set_config(d, scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
        (lambda d: set_config(d, reorder_and_upcast_attn=True), "reorder_and_upcast_attn"),
        (lambda d: set_config(d, activation_function="swish"), "activation_function"),
        (lambda d: set_config(d, tie_word_embeddings=False), "no lm_head.weight"),
        (lambda d: set_config(d, n_inner=100), "c_fc.weight"),
    ],
    ids=[
        "no-tokenizer",
        "corrupt-tokenizer",
        "shape-mismatch",
        "vocabulary-mismatch",
        "special-id-outside",
        "positions-mismatch",
        "inverse-layer-scaling",
        "reorder-and-upcast",
        "activation",
        "untied-head-missing",
        "n-inner-mismatch",
    ],
)
def test_a_wrong_directory_is_one_line_exit_2_and_nothing_written(gpt2, tmp_path, capsys, edit, named):
    assert_refused(gpt2[0], tmp_path, capsys, edit, named)
