"""BERT in: a BertForMaskedLM and a BertForSequenceClassification saved as the hub publishes them, imported by
the CLI, proven equal to transformers' (logits, probabilities, labels), fine-tuned and refused where they cannot
be read."""

import json
import shutil
from types import SimpleNamespace

import pytest
import torch

from tests.helpers.bert_models import LABELS, save_bert_classifier, save_bert_mlm, sst2
from tests.helpers.checks import (
    adapt_to_captions,
    assert_refused,
    finetune_a_classifier,
    rewrite_weights,
    set_config,
    without,
)
from vaswani.cli import main
from vaswani.data.labelled import classifier_inputs
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.classifier import Classifier
from vaswani.model_dir import load_model
from vaswani.pretrained import import_pretrained

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]  # slow: checkpoints trained by transformers

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A small BertForMaskedLM and a BertForSequenceClassification built from it, their tokenizer, and the
    vaswani models the CLI imported from them."""
    root = tmp_path_factory.mktemp("bert")
    mlm = save_bert_mlm(root / "hf-mlm")
    classifier = save_bert_classifier(mlm, root / "hf-classifier")
    assert main(["import", str(mlm), str(root / "mlm")]) == 0
    assert main(["import", str(classifier), str(root / "classifier")]) == 0
    return SimpleNamespace(
        hf_mlm=mlm,
        hf_classifier=classifier,
        mlm=root / "mlm",
        classifier=root / "classifier",
        tokenizer=transformers.BertTokenizerFast.from_pretrained(str(mlm)),
    )


@pytest.fixture(scope="module")
def texts():
    return [text for _, text in sst2("dev", 64)]


def _mlm_logits_agree(model_dir, hf_dir, tokenizer, texts) -> None:
    """Our MLM logits at every real position of a padded batch (some tokens [MASK]ed) are transformers'."""
    model, _ = load_model(model_dir)
    hf = transformers.BertForMaskedLM.from_pretrained(str(hf_dir)).eval()
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    ids = batch["input_ids"].clone()
    regular = ~torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
    ids[regular & (torch.rand(ids.shape, generator=torch.Generator().manual_seed(0)) < 0.15)] = tokenizer.mask_token_id
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=batch["attention_mask"]).logits
        ours = model(ids)
    real = batch["attention_mask"].bool()
    assert (~real).sum() > 100 and (ids == tokenizer.mask_token_id).sum() > 50  # padding, and masks, to read
    assert (ours - theirs)[real].abs().max() < 1e-4
    assert theirs[real].std() > 1.0  # logits that differ from token to token


def test_the_import_maps_bert_s_settings_and_special_tokens(bert):
    tokenizer = bert.tokenizer
    info = json.loads((bert.mlm / "vaswani.json").read_text())
    assert info["origin"]["model_type"] == "bert" and info["origin"]["architectures"] == ["BertForMaskedLM"]
    _, config = load_model(bert.mlm)
    m = config.model
    assert (m.type, m.positions, m.scale_embeddings, m.layer_norm_eps, m.activation) == (
        "encoder_only",
        "learned",
        False,
        1e-12,
        "gelu",
    )
    assert m.embedding_norm and m.output_transform and m.output_bias and not m.n_classes
    assert (m.bos_id, m.eos_id, m.pad_id) == (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)
    assert (m.bos_id, m.eos_id) == (4, 5)  # not the ids of a vocabulary trained here (1, 2)
    assert sorted(p.name for p in bert.mlm.iterdir()) == [
        "config.yaml",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vaswani.json",
    ]
    _, config = load_model(bert.classifier)
    assert config.model.pooler and config.model.n_classes == 2 and config.model.pooling == "first"
    assert config.finetune.labels == ["negative", "positive"]
    assert not config.model.output_transform  # a sequence classifier has no masked-LM head


def test_mlm_logits_are_transformers_within_1e_4(bert, texts):
    _mlm_logits_agree(bert.mlm, bert.hf_mlm, bert.tokenizer, texts)


@pytest.mark.parametrize("layout", ["pretraining-heads", "gamma-beta", "own-decoder"])
def test_older_and_untied_layouts_import_equal(bert, texts, tmp_path, layout):
    """A BertForPreTraining upload as the hub's older ones are (pytorch_model.bin with the position_ids buffer, the
    pooler and the next-sentence head, which a masked language model leaves, and TensorFlow's LayerNorm.gamma and
    LayerNorm.beta for LayerNorm.weight and .bias, as bert-base-uncased's files are written), those names alone in a
    model.safetensors (bert-base-uncased's own), and an MLM head whose decoder is its own matrix (tie_word_embeddings
    false): MLM logits equal to transformers' on each."""
    src = shutil.copytree(bert.hf_mlm, tmp_path / "hf")

    def edit(weights):
        D = weights["bert.embeddings.word_embeddings.weight"].size(1)
        if layout in ("pretraining-heads", "gamma-beta"):
            norms = [name for name in weights if ".LayerNorm." in name]
            assert len(norms) >= 6
            for name in norms:
                weights[
                    name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
                ] = weights.pop(name)
        if layout == "pretraining-heads":
            weights["bert.embeddings.position_ids"] = torch.arange(512)[None]
            weights["bert.pooler.dense.weight"], weights["bert.pooler.dense.bias"] = torch.eye(D), torch.zeros(D)
            weights["cls.seq_relationship.weight"], weights["cls.seq_relationship.bias"] = (
                torch.ones(2, D),
                torch.ones(2),
            )
        elif layout == "own-decoder":
            words = weights["bert.embeddings.word_embeddings.weight"]
            weights["cls.predictions.decoder.weight"] = words + 0.05 * torch.randn(words.shape)
            weights["cls.predictions.decoder.bias"] = weights["cls.predictions.bias"].clone()  # untied: stored apart

    rewrite_weights(src, edit, legacy=layout == "pretraining-heads")
    if layout == "own-decoder":
        set_config(src, tie_word_embeddings=False)
    assert main(["import", str(src), str(tmp_path / "model")]) == 0
    _mlm_logits_agree(tmp_path / "model", src, bert.tokenizer, texts)


def test_our_tokenizer_gives_bert_s_ids_and_framing(bert, texts):
    ours = Tokenizer.load(bert.mlm)
    sample = [*texts, "Ein ☃ unbekanntes Zeichen", "A GREAT movie, isn't it?"]
    assert ours.encode_src(sample) == bert.tokenizer(sample, add_special_tokens=False)["input_ids"]
    _, config = load_model(bert.mlm)
    framed = classifier_inputs(ours, sample, config.model, config.data.block_size)
    assert [list(x) for x in framed] == bert.tokenizer(sample)["input_ids"]  # [CLS] text [SEP]


def test_the_masked_token_objective_finds_mask(bert):
    """Tokenizer.mask_id, which the masked-token objectives read (mlm, classify's auxiliary loss), is [MASK]."""
    assert Tokenizer.load(bert.mlm).mask_id == bert.tokenizer.mask_token_id


def test_continued_pretraining_adapts_an_imported_bert_to_the_user_s_text(bert, tmp_path):
    """`vaswani finetune` with data.text continues BERT's masked-token objective on new text (Multi30k's captions):
    each line is `text [SEP]` in the stream, each block starts with [CLS], special tokens are never masked, and
    the held-out masked-token loss falls below the imported model's on the same masked blocks."""
    from vaswani.config import Config
    from vaswani.train.tasks.base import RunContext
    from vaswani.train.tasks.language import MaskedLanguageModelling, held_out_loss

    out, valid = adapt_to_captions(bert.mlm, tmp_path)

    tok = bert.tokenizer
    task = MaskedLanguageModelling(RunContext(Config.load(out / "config.yaml"), out))
    data = task.prepare(True)  # the run's prepared text, reused
    lines = tok(valid, add_special_tokens=False)["input_ids"]
    assert data.valid.tolist() == [i for ids in lines for i in (*ids, tok.sep_token_id)]
    batch = task.batch(data, 0, 0)
    assert (batch.ids[:, 0] == tok.cls_token_id).all()
    predicted = batch.targets[batch.targets != tok.pad_token_id]  # PAD: nothing to predict there
    assert predicted.numel() > 0
    assert not torch.isin(predicted, torch.tensor([tok.cls_token_id, tok.sep_token_id, tok.unk_token_id])).any()
    assert (batch.ids == tok.mask_token_id).sum() > 0
    blocks = task.held_out_blocks(data)
    cpu = torch.device("cpu")
    before, after = (held_out_loss(load_model(d)[0].eval(), blocks, cpu)["loss"] for d in (bert.mlm, out))
    assert after < before - 0.5, (before, after)  # measured: 6.03 -> 5.36 in 80 steps


def test_classifier_probabilities_are_transformers_within_1e_4(bert, texts):
    hf = transformers.BertForSequenceClassification.from_pretrained(str(bert.hf_classifier)).eval()
    batch = bert.tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = hf(**batch).logits.softmax(-1)
    ours = Classifier.load(bert.classifier, "cpu").probabilities(texts)  # our tokenizer, framing and padding
    assert (ours - theirs).abs().max() < 1e-4
    assert theirs[:, 1].std() > 0.1  # probabilities that differ from text to text


# int8 on the fixture's classifier and the 64 texts, as measured (the fixture is the same bytes on every run, with
# ATen's AVX2 or AVX-512 kernels alike; Intel Xeon with AMX, torch 2.13): oneDNN's 8-bit activations move the
# probabilities by a median of 0.025, at most 0.144, and flip 2 labels, both of texts within 0.04 of 0.5; fbgemm's 7
# bits by 0.040, at most 0.297, and flip 6, all within 0.14 of 0.5. The bounds: about 2x the median, 1.5x the
# largest, one flip more, and no flip where float32 says more than 0.65 (0.7 for fbgemm) either way. oneDNN's
# 8-bit activations on a CPU without VNNI (its 16-bit sums saturate) moved them by a median of 0.27.
INT8_BOUNDS = {"onednn": (0.05, 0.22, 3, 0.15), "fbgemm": (0.08, 0.45, 7, 0.2)}  # median, max, flips, band


@pytest.mark.parametrize("kernel", ["onednn", "fbgemm"])
def test_int8_classifier_probabilities_are_float32_s_within_measured_bounds(bert, texts, monkeypatch, kernel):
    from vaswani.nn.cpu_linear import int8

    if kernel == "onednn" and int8._by_cpu() != "onednn":
        pytest.skip(
            "oneDNN's int8 product needs AMX or VNNI, which this CPU lacks (or ONEDNN_MAX_CPU_ISA stops short of)"
        )
    monkeypatch.setattr(int8, "LAYER_KERNEL", kernel)
    monkeypatch.setattr(int8, "OUTPUT_KERNEL", kernel)
    hf = transformers.BertForSequenceClassification.from_pretrained(str(bert.hf_classifier)).eval()
    with torch.no_grad():
        theirs = hf(**bert.tokenizer(texts, return_tensors="pt", padding=True)).logits.softmax(-1)
    ours = Classifier.load(bert.classifier, "cpu", precision="int8").probabilities(texts)
    moved = (ours - theirs)[:, 1].abs()
    flipped = ours.argmax(-1) != theirs.argmax(-1)
    median, largest, flips, band = INT8_BOUNDS[kernel]
    assert 0 < moved.median() < median and moved.max() < largest, moved
    assert flipped.sum() <= flips and ((theirs[:, 1] - 0.5).abs()[flipped] < band).all(), (
        theirs[flipped],
        ours[flipped],
    )


def test_sentence_pairs_are_bert_for_sequence_classification_s(bert, texts, tmp_path, capsys):
    """Pairs read as `[CLS] a [SEP] b [SEP]`, segment B after the first [SEP] (token type embeddings imported, not
    folded away): probabilities within 1e-4 of BertForSequenceClassification on tokenizer(a, b), long pairs cut as
    its tokenizer cuts them; `vaswani classify --pairs` (a line without one tab refused in one line); fine-tuning
    on pair data gives a classifier that reads pairs."""
    hf = transformers.BertForSequenceClassification.from_pretrained(str(bert.hf_classifier)).eval()
    with torch.no_grad():  # segment B's embedding, barely trained, made to matter
        hf.bert.embeddings.token_type_embeddings.weight[1].normal_(0.0, 0.5)
    hf.save_pretrained(str(tmp_path / "hf"))
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        if (bert.hf_classifier / name).exists():
            shutil.copy(bert.hf_classifier / name, tmp_path / "hf" / name)
    assert main(["import", str(tmp_path / "hf"), str(tmp_path / "model")]) == 0
    pairs = [(a, b) for a, b in zip(texts[0::2], texts[1::2], strict=True)]
    pairs.append((" ".join(texts[:8]), texts[9]))  # longer than block_size: cut longest first
    classifier = Classifier.load(tmp_path / "model", "cpu", pairs=True)
    length = classifier.config.data.block_size
    batch = bert.tokenizer(*map(list, zip(*pairs, strict=True)), return_tensors="pt", padding=True,
                           truncation="longest_first", max_length=length)  # fmt: skip
    assert batch["token_type_ids"].sum() > 100 and batch["input_ids"].size(1) == length
    with torch.no_grad():
        theirs = hf(**batch).logits.softmax(-1)
        single = hf(**{**batch, "token_type_ids": torch.zeros_like(batch["token_type_ids"])}).logits.softmax(-1)
    ours = classifier.probabilities(pairs)
    assert (ours - theirs).abs().max() < 1e-4
    assert (theirs - single).abs().max() > 0.05  # segment B matters: a folded segment A would not pass

    (tmp_path / "pairs.tsv").write_text("\n".join(f"{a}\t{b}" for a, b in pairs) + "\n", encoding="utf-8")
    command = ["classify", str(tmp_path / "model"), "-i", str(tmp_path / "pairs.tsv"), "--pairs", "--device", "cpu"]
    assert main([*command, "-o", str(tmp_path / "labels.txt")]) == 0
    labels = [line.split("\t")[0] for line in (tmp_path / "labels.txt").read_text(encoding="utf-8").splitlines()]
    assert labels == [hf.config.id2label[int(i)] for i in theirs.argmax(-1)]
    (tmp_path / "bad.tsv").write_text("a\tb\nno tab here\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["classify", str(tmp_path / "model"), "-i", str(tmp_path / "bad.tsv"), "--pairs"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "line 2" in err and "--pairs reads two" in err

    rows = [f"{label}\t{a}\t{b}" for (label, a), (_, b) in zip(sst2("train", 64), sst2("train", 64, 64), strict=True)]
    (tmp_path / "ft").mkdir()
    out = finetune_a_classifier(bert.mlm, tmp_path / "ft", ["label\ta\tb", *rows[:48]], ["label\ta\tb", *rows[48:]])
    tuned = Classifier.load(out, "cpu")
    assert tuned.config.model.pairs and tuned.config.model.segments == 2
    assert len(tuned.classify(pairs[:4])) == 4


def test_vaswani_classify_gives_the_checkpoint_s_labels(bert, texts, tmp_path):
    hf = transformers.BertForSequenceClassification.from_pretrained(str(bert.hf_classifier)).eval()
    with torch.no_grad():
        best = hf(**bert.tokenizer(texts, return_tensors="pt", padding=True)).logits.argmax(-1)
    expected = [hf.config.id2label[int(i)] for i in best]
    assert set(expected) == set(LABELS.values())
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    args = ["classify", str(bert.classifier), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]
    assert main([*args, "--device", "cpu"]) == 0
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert [line.split("\t")[0] for line in lines] == expected


def test_a_checkpoint_with_vocab_txt_only_imports_equal(bert, texts, tmp_path):
    src = shutil.copytree(bert.hf_mlm, tmp_path / "src")
    (src / "tokenizer.json").unlink()  # as older hub checkpoints: vocab.txt and tokenizer_config.json
    model_dir = import_pretrained(src, tmp_path / "model")
    assert (model_dir / "tokenizer.json").is_file()
    ours = Tokenizer.load(model_dir)
    assert ours.encode_src(texts) == bert.tokenizer(texts, add_special_tokens=False)["input_ids"]
    _mlm_logits_agree(model_dir, bert.hf_mlm, bert.tokenizer, texts)


def test_finetune_an_imported_bert_end_to_end(bert, tmp_path):
    train, dev = (
        ["label\tsentence", *(f"{label}\t{text}" for label, text in rows)]
        for rows in (sst2("train", 160, start=20000), sst2("dev", 40, start=100))
    )
    # λ 0.5: BERT's masked tokens ([MASK]) through its MLM head, beside the task
    out = finetune_a_classifier(bert.mlm, tmp_path, train, dev)
    assert Tokenizer.load(out).file_names == Tokenizer.load(bert.mlm).file_names
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("valid_pretrain_loss" in record for record in history)
    classifier = Classifier.load(out, "cpu")
    m = classifier.config.model
    assert m.n_classes == 2 and m.embedding_norm and m.output_transform and not m.pooler
    sample = ["a gorgeous , witty , seductive movie .", "the plot is nothing but boilerplate clichés"]
    assert [list(x) for x in classifier_inputs(classifier.tokenizer, sample, m, 128)] == bert.tokenizer(sample)[
        "input_ids"
    ]
    assert [label for label, _ in classifier.classify(sample)] != [] and classifier.labels == ["0", "1"]


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: set_config(d, position_embedding_type="relative_key"), "position_embedding_type"),
        (lambda d: set_config(d, hidden_size=32, num_attention_heads=4), "shape"),
        (without("tokenizer.json", "vocab.txt"), "vocab.txt"),
        (lambda d: set_config(d, hidden_act="silu"), "hidden_act"),
        (lambda d: set_config(d, is_decoder=True), "is_decoder"),
        (lambda d: set_config(d, add_cross_attention=True), "add_cross_attention"),
        (lambda d: set_config(d, architectures=["BertForTokenClassification"]), "BertForTokenClassification"),
        (lambda d: (d / "model.safetensors").write_bytes(b"garbage"), "model.safetensors"),
    ],
    ids=[
        "relative-positions",
        "shape-mismatch",
        "no-vocabulary",
        "activation",
        "decoder",
        "cross-attention",
        "token-classifier",
        "corrupt-weights",
    ],
)
def test_a_wrong_directory_is_one_line_exit_2_and_nothing_written(bert, tmp_path, capsys, edit, named):
    assert_refused(bert.hf_mlm, tmp_path, capsys, edit, named)
