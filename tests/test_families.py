"""The families table: every model type is one row, and what reads it behaves as the row says."""

import pytest

from vaswani.config import Config, ConfigError, ModelConfig
from vaswani.families import FAMILIES, GENERATE, TRANSLATE, family
from vaswani.nn import build_model


def small(model_type: str, **fields) -> ModelConfig:
    return ModelConfig(
        type=model_type, src_vocab_size=40, tgt_vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_layers=1, **fields
    )


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_each_row_builds_its_class_and_its_default_task(model_type):
    row = family(model_type)
    assert type(build_model(small(model_type))).__name__ == row.model
    config = Config.from_dict({"model": small(model_type).to_dict()})
    assert config.task == row.task and row.task in row.tasks
    expected_pool = row.pool if "classify" in row.tasks else None
    if expected_pool:
        assert small(model_type, n_classes=2).pooling == expected_pool


def test_validation_reads_the_rows():
    with pytest.raises(ConfigError, match="encoder_decoder"):  # names the types that can learn the task
        Config.from_dict({"model": small("encoder_only").to_dict(), "train": {"task": "translation"}})
    with pytest.raises(ConfigError, match="decoder_only or encoder_only"):
        small("encoder_decoder", n_classes=2)
    with pytest.raises(ConfigError, match="n_decoder_layers"):
        small("decoder_only", n_decoder_layers=2)
    with pytest.raises(ValueError, match="must be one of encoder_decoder, decoder_only, encoder_only"):
        family("seq2seq")


def test_a_family_refuses_what_it_cannot_do_naming_the_command_that_can():
    family("encoder_decoder").check(TRANSLATE, "runs/x")  # no error
    with pytest.raises(ValueError, match="cannot translate; use vaswani generate, vaswani finetune"):
        family("decoder_only").check(TRANSLATE, "runs/lm")
    with pytest.raises(ValueError, match=r"runs/bert holds a model of type encoder_only .* cannot generate"):
        family("encoder_only").check(GENERATE, "runs/bert")


def test_only_translation_models_export():
    assert family("encoder_decoder").exports == ("ctranslate2", "huggingface")
    assert not family("decoder_only").exports and not family("encoder_only").exports
