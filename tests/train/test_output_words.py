"""model.output_words target: the output layer covers the pieces the training targets use, in the loss, in every
decoding path and in the saved model; `vaswani train` finds them in the prepared data."""

import copy
import gzip
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.helpers.common import MULTI30K, random_ids, tiny_config
from tests.helpers.decode_models import constrained_beam_search
from tests.helpers.toy import quiet
from vaswani import Transformer
from vaswani.config import Config, ConfigError
from vaswani.data import store
from vaswani.decode import search
from vaswani.decode.request import DecodeRequest
from vaswani.model_dir import WEIGHTS, load_model, load_weights
from vaswani.nn.cpu_linear.int8 import int8_available, quantize_int8
from vaswani.nn.cpu_linear.onednn_fp32 import pack_fp32, packed_available
from vaswani.nn.transformer import NEVER
from vaswani.train.loss import label_smoothed_cross_entropy


def test_the_loss_over_words_is_cross_entropy_over_those_columns_and_skips_targets_outside():
    torch.manual_seed(0)
    hidden = torch.randn(2, 7, 16, requires_grad=True)
    weight = torch.randn(30, 16, requires_grad=True)
    bias = torch.randn(30, requires_grad=True)
    words = torch.tensor([2, 3, 5, 8, 13, 21, 29])
    target = words[torch.randint(0, len(words), (2, 7))]
    target[0, 5:] = 0  # padding
    target[1, 0] = 4  # a dev set's piece the training targets never had: left out
    loss, n = label_smoothed_cross_entropy(hidden, weight, target, 0.1, 0, chunk_rows=3, bias=bias, words=words)
    kept = (target != 0) & torch.isin(target, words)
    logits = (hidden @ weight.T + bias)[..., words][kept]
    renumbered = torch.searchsorted(words, target[kept])
    expected = F.cross_entropy(logits, renumbered, label_smoothing=0.1, reduction="sum")
    assert int(n) == int(kept.sum()) == 11
    torch.testing.assert_close(loss, expected)
    got = torch.autograd.grad(loss, (hidden, weight, bias))
    for g, e in zip(got, torch.autograd.grad(expected, (hidden, weight, bias)), strict=True):
        torch.testing.assert_close(g, e)
    assert got[1][4].abs().sum() == 0 and got[2][4] == 0  # a word outside gets no gradient through the softmax


def _restricted(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(tiny_config(src_vocab_size=60, tgt_vocab_size=60, output_words="target")).eval()
    allowed = torch.ones(60, dtype=torch.bool)
    allowed[torch.arange(4, 60, 2)] = False  # half the words (EOS, 2, stays)
    model.output_words.copy_(allowed)
    return model


def test_decoding_gives_the_words_outside_never_and_produces_none_of_them():
    model = _restricted()
    outside = ~model.output_words
    src, tgt = random_ids([7, 4, 9], vocab=60), random_ids([5, 3, 6], vocab=60)
    with torch.inference_mode():
        logits = model(src, tgt)
        full = F.linear(model.hidden_states(src, tgt), model.output_weight)
    torch.testing.assert_close(logits[..., ~outside], full[..., ~outside])
    assert torch.equal(logits[..., outside], full[..., outside] + NEVER)
    for beam in (1, 4):
        request = DecodeRequest.of(beam_size=beam, max_len_b=12, length_penalty=0.0)
        found = search.beam_search(model, src, request)
        produced = {t for hyps in found for h in hyps for t in h.tokens}
        assert produced and not produced & set(outside.nonzero().flatten().tolist())
        unrestricted = copy.deepcopy(model)
        unrestricted.output_words.fill_(True)
        theirs = {t for hyps in search.beam_search(unrestricted, src, request) for h in hyps for t in h.tokens}
        assert theirs & set(outside.nonzero().flatten().tolist())  # the test can fail: without the mask they come


def test_a_glossary_still_forces_a_word_outside():
    model = _restricted(2)
    src = random_ids([6, 5, 7], vocab=60)
    terms = [[[10, 11]], [[12]], [[20, 5]]]  # 10, 12 and 20 are outside
    request = DecodeRequest.of(beam_size=4, max_len_a=1.0, max_len_b=8)
    for wanted, hyps in zip(terms, constrained_beam_search(model, src, terms, request), strict=True):
        tokens = hyps[0].tokens
        term = wanted[0]
        assert any(tokens[i : i + len(term)] == term for i in range(len(tokens))), (tokens, term)
        outside = set((~model.output_words).nonzero().flatten().tolist())
        forced = sum(t in outside for t in term)
        assert abs(hyps[0].log_prob - forced * NEVER) < 200  # finite: -10,000 for each forced word outside
        assert not (set(tokens) - set(term)) & outside


@pytest.mark.parametrize("kind", ["packed", "int8"])
def test_packed_and_int8_projections_keep_the_words_outside_out(kind):
    if kind == "packed" and not packed_available():
        pytest.skip("this torch has no oneDNN prepacked linear")
    if kind == "int8" and int8_available():
        pytest.skip(int8_available())
    model = _restricted(1)
    made = copy.deepcopy(model)
    made = pack_fp32(made, every_layer=True) if kind == "packed" else quantize_int8(made)
    src = random_ids([6, 8], vocab=60)
    with torch.inference_mode():
        got, expected = made(src, src), model(src, src)
    outside = ~model.output_words
    assert (got[..., outside] < NEVER / 2).all()
    tolerance = 1e-4 if kind == "packed" else 0.5
    torch.testing.assert_close(got[..., ~outside], expected[..., ~outside], rtol=tolerance, atol=tolerance)


def test_a_model_of_every_word_has_no_mask_in_its_weights_and_the_option_is_checked():
    assert "output_words" not in Transformer(tiny_config()).state_dict()  # older model directories load as before
    assert "output_words" in Transformer(tiny_config(output_words="target")).state_dict()
    with pytest.raises(ConfigError, match="output_words must be all or target"):
        tiny_config(output_words="seen")
    with pytest.raises(ConfigError, match="applies to a translation model"):
        tiny_config(type="decoder_only", output_words="target")


def _corpus(directory, lines: int = 400):
    for side in ("de", "en"):
        with gzip.open(MULTI30K / f"raw/val.{side}.gz", "rt") as f:
            text = list(itertools.islice(f, lines))
        (directory / f"train.{side}").write_text("".join(text[:300]))
        (directory / f"valid.{side}").write_text("".join(text[300:]))


def _config(directory, max_steps: int = 4, **data) -> Config:
    return Config.from_dict(
        {
            "model": {"d_model": 32, "n_heads": 2, "d_ff": 64, "n_layers": 2, "dropout": 0.0, "output_words": "target"},
            "data": {
                "train_src": str(directory / "train.de"),
                "train_tgt": str(directory / "train.en"),
                "valid_src": str(directory / "valid.de"),
                "valid_tgt": str(directory / "valid.en"),
                "vocab_size": 500,
                "max_tokens": 400,
                **data,
            },
            "train": {"max_steps": max_steps, "valid_every": 2, "warmup_steps": 10, "precision": "fp32"},
        }
    )


@pytest.mark.shared_data
def test_training_keeps_the_pieces_of_the_training_targets_and_a_resumed_run_its_saved_ones(tmp_path):
    from vaswani.train.trainer import Trainer

    _corpus(tmp_path)
    model_dir = tmp_path / "model"
    trainer = Trainer(_config(tmp_path), model_dir, quiet())
    trainer.train()
    prepared = store.PreparedData.open(model_dir / "prepared")
    expected = np.zeros(500, dtype=bool)
    expected[np.unique(prepared.train.tgt.values)] = True
    expected[trainer.config.model.eos_id] = True
    assert 100 < expected.sum() < 450  # a joint vocabulary: many German pieces are never a target
    assert np.array_equal(trainer.model.output_words.numpy(), expected)
    saved = load_weights(model_dir / WEIGHTS)["output_words"]
    assert np.array_equal(saved.numpy(), expected)
    model, _ = load_model(model_dir)
    assert torch.equal(model.output_words, saved)
    metrics = (model_dir / "metrics.jsonl").read_text()
    assert "valid_loss" in metrics and "nan" not in metrics.lower() and "inf" not in metrics.lower()

    resumed = Trainer(_config(tmp_path, max_steps=6), model_dir, quiet())  # a resumed run keeps its saved words
    resumed.train()
    assert np.array_equal(resumed.model.output_words.numpy(), expected)

    # fine-tuning on other text: the pretrained model's words and those of the new targets
    from vaswani.train.finetune import finetune

    with (
        gzip.open(MULTI30K / "raw/test_2016_flickr.de.gz", "rt") as de,
        gzip.open(MULTI30K / "raw/test_2016_flickr.en.gz", "rt") as en,
    ):
        (tmp_path / "domain.de").write_text("".join(itertools.islice(de, 200)))
        (tmp_path / "domain.en").write_text("".join(itertools.islice(en, 200)))
    recipe = tmp_path / "finetune.yaml"
    recipe.write_text(
        f"data: {{train_src: {tmp_path / 'domain.de'}, train_tgt: {tmp_path / 'domain.en'}, max_tokens: 400}}\n"
        "train: {max_steps: 2, valid_every: 2, warmup_steps: 10, precision: fp32}\n"
    )
    finetune(model_dir, recipe, tmp_path / "tuned", console=quiet())
    new = np.zeros(500, dtype=bool)
    new[np.unique(store.PreparedData.open(tmp_path / "tuned" / "prepared").train.tgt.values)] = True
    assert (new & ~expected).any()  # the test can fail: the new text has pieces the old targets never had
    tuned, _ = load_model(tmp_path / "tuned")
    assert np.array_equal(tuned.output_words.numpy(), expected | new)


@pytest.mark.shared_data
def test_target_subword_sampling_is_refused_in_one_line(tmp_path):
    from vaswani.train.trainer import Trainer

    _corpus(tmp_path)
    with pytest.raises(ConfigError, match="tgt_sampling_alpha"):
        Trainer(_config(tmp_path, tgt_sampling_alpha=0.1), tmp_path / "model", quiet()).train()
