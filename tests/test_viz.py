import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from vaswani.translate.translator import Translator
from vaswani.viz import plot_attention, select_panels

pytestmark = pytest.mark.shared_data  # reads ../shared/data (tests/conftest.py skips it where absent)

SOURCE = "Ein Mann fährt Fahrrad."


@pytest.fixture(scope="module")
def translator(model_dir) -> Translator:
    return Translator.load(model_dir, "cpu", "fp32")


def test_attention_of_the_models_own_translation_and_of_a_given_target(translator):
    own = translator.attention(SOURCE, beam_size=1)
    [found] = translator.translate_with_details([SOURCE], beam_size=1)
    assert own.candidates == found.candidates
    # A given target is scored by the model: the greedy output's own log-probability, recomputed.
    forced = translator.attention(SOURCE, target=own.text)
    tokens = translator.tokenizer.encode_tgt([own.text])[0]
    assert forced.tgt_pieces == [translator.tokenizer.tgt.id_to_piece(i) for i in tokens] + ["</s>"]
    # A target's log-probability, teacher-forced, equals what greedy search summed step by step (this
    # untrained model's output stops at the length limit, without EOS).
    src_ids = translator.tokenizer.encode_src([SOURCE])[0]
    best = found.candidates[0]
    assert len(best.tokens) == translator.request().decode.max_len_b + len(src_ids) + 1
    assert translator._log_prob(src_ids, best.tokens, eos=False) == pytest.approx(best.log_prob, abs=1e-3)
    assert translator._log_prob(src_ids, best.tokens) < translator._log_prob(src_ids, best.tokens, eos=False)
    other = translator.attention(SOURCE, target="A man rides a bike.")
    assert other.text == "A man rides a bike." and other.candidates[0].log_prob < 0
    rows = len(other.tgt_pieces)
    assert [w.shape for w in other.attention.cross] == [(2, rows, len(other.src_pieces))] * 2
    assert [w.shape for w in other.attention.encoder] == [(2, len(other.src_pieces), len(other.src_pieces))] * 2
    assert [w.shape for w in other.attention.decoder_self] == [(2, rows, rows)] * 2
    assert other.decoder_pieces == ["<s>", *other.tgt_pieces[:-1]]
    assert torch.allclose(other.attention.decoder_self[0][0].triu(1), torch.zeros(rows, rows))  # causal


def test_to_dict_gives_plain_nested_lists_for_json(translator):
    translation = translator.attention(SOURCE)
    record = translation.to_dict(kinds=("cross", "encoder", "decoder"))
    json.dumps(record)
    attention = record["attention"]
    assert attention["source_pieces"] == translation.src_pieces
    for kind, weights in (
        ("cross", translation.attention.cross),
        ("encoder", translation.attention.encoder),
        ("decoder", translation.attention.decoder_self),
    ):
        assert torch.tensor(attention[kind]) == pytest.approx(torch.stack(weights), abs=1e-4)
    assert record["n_best"][0]["text"] == translation.text
    with pytest.raises(ValueError, match="attention kinds are"):
        translation.to_dict(kinds=("self",))


def test_panels_follow_layer_and_head():
    assert select_panels(2, 3, None, None) == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]
    assert select_panels(2, 3, 2, None) == [(2, 1), (2, 2), (2, 3)]
    assert select_panels(2, 3, None, 3) == [(1, 3), (2, 3)]
    assert select_panels(2, 3, 1, 2) == [(1, 2)]
    with pytest.raises(ValueError, match="--layer 3 is out of range: this model has 2 layers"):
        select_panels(2, 3, 3, None)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.mark.slow
def test_plots_have_one_panel_per_head_and_layer(translator, tmp_path):
    translation = translator.attention(SOURCE)
    every = _png_size(plot_attention(translation, tmp_path / "all.png"))
    one_layer = _png_size(plot_attention(translation, tmp_path / "layer.png", layer=2))
    one = _png_size(plot_attention(translation, tmp_path / "one.png", layer=2, head=1, kind="encoder"))
    assert every[1] > one_layer[1] * 1.5 and one_layer[0] > one[0] * 1.5


def _pixels(path: Path) -> torch.Tensor:
    from matplotlib.image import imread

    return torch.from_numpy(imread(path))[..., :3]  # (height, width, RGB) in [0, 1]


def _with_encoder_panel(translation, value: float):
    """`translation` with every weight of the encoder's layer 2, head 1 set to `value`."""
    encoder = [w.clone() for w in translation.attention.encoder]
    encoder[1][0] = value
    return replace(translation, attention=replace(translation.attention, encoder=encoder))


@pytest.mark.slow
def test_plots_draw_the_chosen_panels_weights(translator, tmp_path):
    translation = translator.attention(SOURCE)
    zeros, ones = _with_encoder_panel(translation, 0.0), _with_encoder_panel(translation, 1.0)
    panel = {"layer": 2, "head": 1, "kind": "encoder"}
    white = _pixels(plot_attention(zeros, tmp_path / "zeros.png", **panel))
    dark = _pixels(plot_attention(ones, tmp_path / "ones.png", **panel))
    # Weight 1 is the colour map's darkest blue, weight 0 white: the changed cells darken the image.
    assert white.shape == dark.shape and white.mean() - dark.mean() > 0.15
    blue = [(image[..., 2] - image[..., 0] > 0.2).float().mean() for image in (white, dark)]  # blue, not grey
    assert blue[0] < 0.05 and blue[1] > 0.2  # white: the colour bar alone is blue; dark: most of the panel too
    # Layer 1 is untouched, so its picture is the same pixel for pixel; the changed layer 2's is not.
    for layer, same in ((1, True), (2, False)):
        before = _pixels(plot_attention(translation, tmp_path / "before.png", kind="encoder", layer=layer))
        after = _pixels(plot_attention(ones, tmp_path / "after.png", kind="encoder", layer=layer))
        assert torch.equal(before, after) == same


@pytest.mark.slow
def test_a_dollar_in_the_sentence_is_drawn_as_text_not_mathtext(translator, tmp_path, monkeypatch):
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    figures, savefig = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), savefig(self, *a, **k))[1])
    dollars = translator.attention("Er zahlt $5 und $6.", target="He pays $5 and $6.")
    plot_attention(dollars, tmp_path / "dollars.png")
    [figure] = figures
    assert figure.get_suptitle().endswith("\nEr zahlt $5 und $6. → He pays $5 and $6.")
    texts = [t for t in figure.findobj(Text) if "$" in t.get_text()]
    assert figure.get_suptitle() in [t.get_text() for t in texts]
    assert not any(t.get_parse_math() for t in texts)  # mathtext would drop the "$"s and italicise "5 und "


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "vaswani.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_attention_cli_writes_a_png_and_refuses_bad_options_in_one_line(model_dir, translator, tmp_path):
    out = tmp_path / "attention.png"
    result = _cli(
        "attention",
        str(model_dir),
        SOURCE,
        "--target",
        "A man rides a bike.",
        "--layer",
        "1",
        "--device",
        "cpu",
        "-o",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    assert "A man rides a bike." in result.stdout
    # The CLI draws what the library draws for the same sentence, target and layer.
    forced = translator.attention(SOURCE, target="A man rides a bike.")
    expected = _pixels(plot_attention(forced, tmp_path / "expected.png", layer=1))
    assert _pixels(out).shape == expected.shape and (_pixels(out) - expected).abs().mean() < 0.002
    for args, words in ((["--layer", "3"], "--layer 3 is out of range"), (["--head", "0"], "--head 0 is out of range")):
        result = _cli("attention", str(model_dir), SOURCE, *args, "-o", str(tmp_path / "x.png"))
        assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr
    result = _cli("attention", str(model_dir), "  ", "-o", str(tmp_path / "x.png"))
    assert result.returncode == 2 and "empty" in result.stderr
