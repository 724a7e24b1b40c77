import pytest
import torch

from tests.helpers.common import tiny_config
from vaswani import Transformer
from vaswani.train import checkpoint as ckpt


def test_weights_round_trip_with_tied_embeddings(tmp_path):
    model = Transformer(tiny_config())
    ckpt.save_weights(ckpt.weights_of(model), tmp_path / "w.safetensors")
    other = Transformer(tiny_config())
    ckpt.load_into(other, ckpt.load_weights(tmp_path / "w.safetensors"), tmp_path)
    for (name, a), b in zip(model.state_dict().items(), other.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert other.decoder.embed.tokens.weight is other.encoder.embed.tokens.weight


def test_average_is_the_elementwise_mean(tmp_path):
    paths = []
    for i in range(3):
        torch.manual_seed(i)
        path = tmp_path / f"step_{i}"
        path.mkdir()
        ckpt.save_weights(ckpt.weights_of(Transformer(tiny_config())), path / ckpt.WEIGHTS)
        paths.append(path)
    average = ckpt.average_checkpoints(paths)
    each = [ckpt.load_weights(p / ckpt.WEIGHTS) for p in paths]
    for name, value in average.items():
        torch.testing.assert_close(value, sum(w[name] for w in each) / 3)


def test_average_keeps_the_output_words_mask_and_the_averaged_model_loads(tmp_path):
    """A model of the targets' words (output_words: target, a distilled student's) averaged by `vaswani average`:
    its bool mask is the run's, not a weight to average into floats that no model then reads."""
    config = tiny_config(output_words="target")
    paths = []
    for i in range(2):
        torch.manual_seed(i)
        model = Transformer(config)
        model.output_words[5:9] = False
        path = tmp_path / f"step_{i}"
        path.mkdir()
        ckpt.save_weights(ckpt.weights_of(model), path / ckpt.WEIGHTS)
        paths.append(path)
    average = ckpt.average_checkpoints(paths)
    assert average["output_words"].dtype == torch.bool and not average["output_words"][5:9].any()
    ckpt.save_weights(average, tmp_path / "averaged.safetensors")  # as `vaswani average` writes them
    loaded = Transformer(config)
    ckpt.read_weights_into(loaded, tmp_path / "averaged.safetensors")  # as load_model reads them
    assert torch.equal(loaded.output_words, average["output_words"])
    model.output_words[5] = True
    ckpt.save_weights(ckpt.weights_of(model), paths[1] / ckpt.WEIGHTS)
    with pytest.raises(ckpt.CheckpointError, match="output_words differs"):
        ckpt.average_checkpoints(paths)


def test_corrupt_weights_give_a_clear_error(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(ckpt.CheckpointError, match="corrupt or incomplete"):
        ckpt.load_weights(path)


@pytest.mark.parametrize(
    "config",
    [
        tiny_config(),
        tiny_config(share_embeddings=False, tgt_vocab_size=40, tie_output=False, output_bias=True),
        tiny_config(positions="learned", output_words="target"),
        tiny_config(type="decoder_only", n_layers=2),
    ],
    ids=["tied", "untied-with-bias", "learned-target-words", "decoder-only"],
)
def test_weights_read_a_tensor_at_a_time_are_the_saved_model(tmp_path, config):
    """load_model's path (model_dir.read_weights_into): the same state and outputs, the ties kept."""
    from vaswani.nn import build_model

    model = build_model(config).eval()
    if config.output_words == "target":
        model.output_words[5:9] = False
    ckpt.save_weights(ckpt.weights_of(model), tmp_path / "w.safetensors")
    torch.manual_seed(1)
    other = build_model(config).eval()
    ckpt.read_weights_into(other, tmp_path / "w.safetensors")
    assert model.state_dict().keys() == other.state_dict().keys()
    for (name, a), b in zip(model.state_dict().items(), other.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    ids = torch.randint(3, 40, (2, 7))
    with torch.no_grad():
        expected = model(ids, ids) if config.type == "encoder_decoder" else model(ids)
        got = other(ids, ids) if config.type == "encoder_decoder" else other(ids)
    assert torch.equal(expected, got)
    if config.type == "encoder_decoder" and config.share_embeddings:
        assert other.decoder.embed.tokens.weight is other.encoder.embed.tokens.weight


def test_saved_weights_that_do_not_fit_are_one_clear_error(tmp_path):
    weights = ckpt.weights_of(Transformer(tiny_config()))
    for name, broken in (
        ("missing", {k: v for k, v in weights.items() if not k.startswith("decoder.layers.1.")}),
        ("shape", {**weights, "encoder.embed.tokens.weight": torch.ones(7, 32)}),
        ("unexpected", {**weights, "encoder.extra": torch.ones(3)}),
    ):
        path = tmp_path / f"{name}.safetensors"
        ckpt.save_weights(broken, path)
        for from_file in (True, False):
            model = Transformer(tiny_config())
            with pytest.raises(ckpt.CheckpointError, match="does not fit this model") as error:
                ckpt.read_weights_into(model, path) if from_file else ckpt.load_into(model, broken, path)
            assert "\n" not in str(error.value), name
    path = tmp_path / "garbage.safetensors"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(ckpt.CheckpointError, match="corrupt or incomplete"):
        ckpt.read_weights_into(Transformer(tiny_config()), path)
