import pytest
import torch

from tests.conftest import tiny_config
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


def test_corrupt_weights_give_a_clear_error(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(ckpt.CheckpointError, match="corrupt or incomplete"):
        ckpt.load_weights(path)
