import dataclasses

import pytest

from vaswani import ConfigError, ModelConfig


def test_defaults_are_the_paper_base_model():
    c = ModelConfig()
    assert (c.d_model, c.n_heads, c.d_ff, c.n_layers, c.decoder_layers, c.d_head) == (512, 8, 2048, 6, 6, 64)
    assert (c.dropout, c.norm_first, c.positions, c.share_embeddings, c.activation) == (
        0.1, False, "sinusoidal", True, "relu")


def test_big_preset_is_table_3():
    c = ModelConfig.preset("big", vocab_size=37000)
    assert (c.d_model, c.d_ff, c.n_heads, c.dropout, c.src_vocab_size) == (1024, 4096, 16, 0.3, 37000)


def test_d_model_not_divisible_by_heads_is_explained():
    with pytest.raises(ConfigError, match=r"d_model \(100\) must be divisible by model.n_heads \(8\)"):
        ModelConfig(d_model=100, n_heads=8)


def test_unknown_key_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"unknown key 'model\.n_head'.*did you mean 'n_heads'"):
        ModelConfig.from_dict({"n_head": 4})
    with pytest.raises(ConfigError, match="did you mean 'small'"):
        ModelConfig.preset("smal")


def test_shared_embeddings_need_one_vocabulary():
    with pytest.raises(ConfigError, match="share_embeddings"):
        ModelConfig(src_vocab_size=100, tgt_vocab_size=200)
    assert ModelConfig(src_vocab_size=100, tgt_vocab_size=200, share_embeddings=False).tgt_vocab_size == 200


@pytest.mark.parametrize("field,value", [("dropout", 1.0), ("n_layers", 0), ("activation", "tanh"),
                                         ("positions", "rotary"), ("pad_id", 99999), ("eos_id", 0)])
def test_invalid_values_are_rejected_by_name(field, value):
    with pytest.raises(ConfigError, match=field):
        ModelConfig(**{field: value})


def test_config_is_frozen_and_round_trips():
    c = ModelConfig.preset("tiny", vocab_size=1000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 8
    assert ModelConfig.from_dict(c.to_dict()) == c


def test_yaml_recipe_with_overrides_and_number_strings(tmp_path):
    from vaswani.config import Config

    path = tmp_path / "r.yaml"
    path.write_text("model:\n  preset: small\ntrain:\n  adam_eps: 1e-3\n  max_steps: 10\n")
    config = Config.load(path, ["train.max_steps=2000", "model.dropout=0.2"])
    assert config.train.adam_eps == 0.001 and config.train.max_steps == 2000
    assert config.model.d_model == 256 and config.model.dropout == 0.2
    config.save(tmp_path / "saved.yaml")
    assert Config.load(tmp_path / "saved.yaml") == config


@pytest.mark.parametrize("text,match", [
    ("trian:\n  max_steps: 3\n", "unknown section 'trian'.*did you mean 'train'"),
    ("train:\n  max_steps: many\n", "train.max_steps must be an integer"),
    ("train:\n  adam_eps: tiny\n", "train.adam_eps must be a number"),
    ("model:\n  norm_first: 3\n", "model.norm_first must be true or false"),
    ("data:\n  src_sampling_alpha: 1.0\n", r"data.src_sampling_alpha must be in \[0, 1\)"),
    ("data:\n  tokenizer: char\n  tgt_sampling_alpha: 0.1\n", "data.tgt_sampling_alpha needs a bpe or unigram"),
])
def test_bad_recipes_name_the_key(tmp_path, text, match):
    from vaswani.config import Config

    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        Config.load(path)
