import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from vaswani import ConfigError, ModelConfig


def test_defaults_are_the_paper_base_model():
    c = ModelConfig()
    assert (c.d_model, c.n_heads, c.d_ff, c.n_layers, c.decoder_layers, c.d_head) == (512, 8, 2048, 6, 6, 64)
    assert (c.dropout, c.norm_first, c.positions, c.share_embeddings, c.activation) == (
        0.1,
        False,
        "sinusoidal",
        True,
        "relu",
    )


def test_big_preset_is_table_3():
    c = ModelConfig.preset("big", vocab_size=37000)
    assert (c.d_model, c.d_ff, c.n_heads, c.dropout, c.src_vocab_size) == (1024, 4096, 16, 0.3, 37000)


def test_d_model_not_divisible_by_heads_is_explained():
    with pytest.raises(ConfigError, match=r"d_model \(100\) must be divisible by model.n_heads \(8\)"):
        ModelConfig(d_model=100, n_heads=8)


def test_source_eos_is_an_encoder_decoder_s_option_and_says_what_a_source_ends_with():
    assert ModelConfig().source_end == (ModelConfig().eos_id,)  # every source gets </s> appended
    assert ModelConfig(source_eos=False).source_end == ()  # NLLB's legacy layout: the tokenizer wrote it
    with pytest.raises(ConfigError, match=r"model\.source_eos applies to an encoder_decoder's sources"):
        ModelConfig(type="decoder_only", source_eos=False, share_embeddings=True)


def test_unknown_key_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"unknown key 'model\.n_head'.*did you mean 'n_heads'"):
        ModelConfig.from_dict({"n_head": 4})
    with pytest.raises(ConfigError, match="did you mean 'small'"):
        ModelConfig.preset("smal")


def test_shared_embeddings_need_one_vocabulary():
    with pytest.raises(ConfigError, match="share_embeddings"):
        ModelConfig(src_vocab_size=100, tgt_vocab_size=200)
    assert ModelConfig(src_vocab_size=100, tgt_vocab_size=200, share_embeddings=False).tgt_vocab_size == 200


@pytest.mark.parametrize(
    "field,value",
    [
        ("dropout", 1.0),
        ("n_layers", 0),
        ("activation", "tanh"),
        ("positions", "rotary"),
        ("pad_id", 99999),
        ("eos_id", 0),
    ],
)
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


@pytest.mark.parametrize(
    "text,match",
    [
        ("trian:\n  max_steps: 3\n", "unknown section 'trian'.*did you mean 'train'"),
        ("distill:\n  beam_size: 4\n", "distillation recipe: run it with `vaswani distill"),
        ("train:\n  max_steps: many\n", "train.max_steps must be an integer"),
        ("train:\n  adam_eps: tiny\n", "train.adam_eps must be a number"),
        ("model:\n  norm_first: 3\n", "model.norm_first must be true or false"),
        ("train:\n  compile: auto\n", "train.compile must be true or false"),
        ("data:\n  src_sampling_alpha: 1.0\n", r"data.src_sampling_alpha must be in \[0, 1\)"),
        ("data:\n  tokenizer: char\n  tgt_sampling_alpha: 0.1\n", "data.tgt_sampling_alpha needs a bpe or unigram"),
    ],
)
def test_bad_recipes_name_the_key(tmp_path, text, match):
    from vaswani.config import Config

    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        Config.load(path)


# -- config.yaml: the fields that take effect ---------------------------------------------------------------------

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
# sst2_finetune.yaml is a fine-tuning config: it is read with its pretrained model's (_classify); the distillation
# recipes with their teacher's (tests/distill)
DISTILLATION = "multi30k_de_en_distill"
RECIPES = sorted(p for p in CONFIGS.glob("*.yaml") if p.name != "sst2_finetune.yaml" and DISTILLATION not in p.name)


def _saved(config, tmp_path) -> dict:
    config.save(tmp_path / "config.yaml")
    return yaml.safe_load((tmp_path / "config.yaml").read_text())


def _toy():
    from vaswani.config import Config

    return Config.load(CONFIGS / "toy_reverse.yaml")


def _lm():
    from vaswani.config import Config

    return Config.from_dict(
        {
            "model": {
                "type": "decoder_only",
                "d_model": 32,
                "n_heads": 2,
                "d_ff": 64,
                "n_layers": 2,
                "src_vocab_size": 300,
                "tgt_vocab_size": 300,
                "positions": "learned",
            },
            "data": {"text": ["a.txt", "b.txt"], "tokenizer": "char", "block_size": 64},
            "train": {"lr_schedule": "constant", "peak_lr": 3e-3, "max_time": "2m"},
        }
    )


def _classify(pretrained: str = "sst2_mlm.yaml"):
    """sst2_finetune.yaml on the model of `pretrained`, as `vaswani finetune` puts them together."""
    from vaswani.config import Config

    pretrained = yaml.safe_load((CONFIGS / pretrained).read_text())
    finetuning = yaml.safe_load((CONFIGS / "sst2_finetune.yaml").read_text())
    return Config.from_dict(
        {
            "model": {**pretrained["model"], "n_classes": 2, "pool": "mean"},
            "data": {**pretrained["data"], **finetuning["data"]},
            "train": {**finetuning["train"], "task": "classify"},
            "finetune": {**finetuning["finetune"], "labels": ["0", "1"]},
        }
    )


def test_the_quick_recipe_is_saved_without_the_rate_its_schedule_ignores(tmp_path):
    from vaswani.config import Config

    config = Config.load(CONFIGS / "multi30k_de_en_quick.yaml")
    saved = _saved(config, tmp_path)
    assert config.train.lr_schedule == "constant" and "lr_factor" not in saved["train"]
    # every field that takes effect is there, defaults included: the run can be made again from it
    assert saved["train"]["peak_lr"] == 4.4e-3 and saved["train"]["warmup_steps"] == 400
    assert saved["train"]["lr_decay"] == "linear"  # held at the peak after warmup, then annealed to zero
    assert saved["train"]["adam_beta2"] == 0.98 and saved["train"]["max_time"] == "9m20s"
    assert saved["model"]["d_model"] == 128 and saved["model"]["dropout"] == 0.0 and saved["model"]["n_layers"] == 2
    assert saved["data"]["max_tokens"] == 1600 and saved["data"]["valid_max_sentences"] == 500
    assert saved["data"]["vocab_size"] == 6000
    # fp32 on every CPU (a fast bf16 one reaches 7 epochs in fp32 too); validations every 400 updates
    assert saved["train"]["precision"] == "fp32" and saved["train"]["valid_every"] == 400
    assert saved["decode"]["beam_size"] == 4 and saved["decode"]["temperature"] == 1.0  # --sample reads it
    assert saved["decode"]["length_penalty"] == 1.0  # chosen on the dev set: what translate and evaluate use
    for key in ("n_decoder_layers", "n_classes", "pool"):  # None; no classifier
        assert key not in saved["model"]
    assert saved["model"]["tie_output"] is True  # the output is the embedding (false: a matrix of its own)
    for key in (
        "toy_train_size",
        "text",
        "valid_fraction",
        "block_size",
        "batch_size",
        "mask_prob",
        "labelled_train",
        "corpora",
    ):
        assert key not in saved["data"]
    assert "finetune" not in saved and saved["train"]["max_epochs"] == 7


def test_each_kind_of_run_leaves_out_what_it_does_not_read(tmp_path):
    toy = _saved(_toy(), tmp_path)
    assert toy["data"]["toy_max_len"] == 10 and "train_src" not in toy["data"] and "valid_src" not in toy["data"]
    assert toy["train"]["lr_factor"] == 0.5 and "peak_lr" not in toy["train"]

    lm = _saved(_lm(), tmp_path)
    assert lm["train"]["peak_lr"] == 3e-3 and "lr_factor" not in lm["train"]
    assert lm["data"]["text"] == ["a.txt", "b.txt"] and lm["data"]["block_size"] == 64
    assert lm["data"]["valid_fraction"] == 0.1 and lm["data"]["tokenizer"] == "char"
    for key in (
        "train_src",
        "toy_max_len",
        "max_len",
        "src_sampling_alpha",
        "valid_max_sentences",
        "mask_prob",
        "labelled_train",
    ):
        assert key not in lm["data"]
    assert "loader_workers" not in lm["train"] and "decode" not in lm and "finetune" not in lm

    classify = _saved(_classify(), tmp_path)
    assert classify["finetune"] == {"aux_weight": 0.5, "init": "pretrained", "labels": ["0", "1"]}
    assert classify["model"]["n_classes"] == 2 and classify["model"]["pool"] == "mean"
    assert classify["data"]["mask_prob"] == 0.15  # encoder_only: the auxiliary loss masks tokens
    assert classify["data"]["labelled_train"].endswith("train.tsv") and classify["data"]["block_size"] == 128
    for key in ("text", "tokenizer", "vocab_size", "prepared"):  # the pretrained model's tokenizer is kept
        assert key not in classify["data"]
    assert "label_smoothing" not in classify["train"] and "decode" not in classify
    assert "mask_prob" not in _saved(_classify("sst2_lm.yaml"), tmp_path)["data"]  # decoder_only: the next token


def test_a_field_without_effect_does_not_change_the_config():
    from vaswani.config import Config

    base = Config.load(CONFIGS / "multi30k_de_en_quick.yaml")
    ignored = Config.load(
        CONFIGS / "multi30k_de_en_quick.yaml",
        [
            "train.lr_factor=2.0",
            "data.block_size=64",
            "data.toy_max_len=3",
            "model.pool=mean",
            "finetune.aux_weight=0.1",
            "data.labelled_train=x.tsv",
        ],
    )
    assert ignored == base and ignored.train.lr_factor == 1.0  # the constant schedule's rate is peak_lr
    assert Config.load(CONFIGS / "multi30k_de_en_quick.yaml", ["train.peak_lr=0.01"]) != base
    with pytest.raises(ConfigError, match=r"data\.mask_prob must be in"):  # still checked
        Config.load(CONFIGS / "multi30k_de_en_quick.yaml", ["data.mask_prob=2"])


@pytest.mark.parametrize("name", [*(p.name for p in RECIPES), "toy", "lm", "classify", "classify_lm"])
def test_a_saved_config_loads_back_equal(name, tmp_path):
    from vaswani.config import Config

    made = {"toy": _toy, "lm": _lm, "classify": _classify, "classify_lm": lambda: _classify("sst2_lm.yaml")}
    config = made[name]() if name in made else Config.load(CONFIGS / name)
    config.save(tmp_path / "config.yaml")
    loaded = Config.load(tmp_path / "config.yaml")
    assert loaded == config
    loaded.save(tmp_path / "again.yaml")
    assert (tmp_path / "again.yaml").read_text() == (tmp_path / "config.yaml").read_text()


def test_vaswani_model_shows_the_fields_that_take_effect():
    tiny = ModelConfig.preset("tiny").in_effect()
    assert tiny["d_model"] == 128 and tiny["share_embeddings"] is True
    assert not {"n_decoder_layers", "n_classes", "pool"} & set(tiny) and tiny["tie_output"] is True
    two = ModelConfig(share_embeddings=False, tie_output=False, tgt_vocab_size=100, n_decoder_layers=2).in_effect()
    assert (two["tie_output"], two["n_decoder_layers"]) == (False, 2)


@pytest.mark.parametrize(
    ("name", "preset", "steps", "averaged"), [("base", "base", 100_000, 5), ("big", "big", 300_000, 20)]
)
def test_the_wmt14_recipes_are_the_papers(name, preset, steps, averaged):
    """configs/wmt14_en_de_{base,big}.yaml against ../shared/docs/PAPER.md (§5-6, Table 3)."""
    from vaswani.config import Config
    from vaswani.train.schedule import learning_rate

    c = Config.load(Path(__file__).resolve().parents[1] / f"configs/wmt14_en_de_{name}.yaml")
    assert dataclasses.asdict(c.model) == dataclasses.asdict(
        ModelConfig.preset(preset, vocab_size=37000, max_positions=c.model.max_positions)
    )
    assert (c.data.tokenizer, c.data.vocab_size, c.model.share_embeddings) == ("bpe", 37000, True)
    assert c.data.max_tokens * c.train.accumulate == 25_000  # ~25k source + ~25k target tokens a step, one GPU
    t = c.train
    assert (t.max_steps, t.warmup_steps, t.lr_schedule, t.label_smoothing, t.keep_last) == (
        steps,
        4000,
        "noam",
        0.1,
        averaged,
    )
    assert (t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay, t.clip_norm) == (0.9, 0.98, 1e-9, 0.0, 0.0)
    d_model = c.model.d_model
    assert learning_rate(4000, t, d_model) == pytest.approx(d_model**-0.5 * 4000**-0.5)  # the peak, §5.3
    assert (c.decode.beam_size, c.decode.length_penalty, c.decode.max_len_a, c.decode.max_len_b) == (4, 0.6, 1.0, 50)


# Issue 60: recipes as users write them (tests/fuzz/config_yaml.py found each): a one-line ConfigError naming the
# file, section, key or override, never a traceback, a hang or a value taken silently.
@pytest.mark.parametrize(
    ("recipe", "says"),
    [
        ("- model\n- train\n", "must hold a mapping of sections"),  # was AttributeError
        ("model: 5\n", "section 'model' must be a mapping"),  # was TypeError
        ("model: abc\n", "section 'model' must be a mapping"),  # was ValueError: dictionary update sequence
        ("model: false\n", "section 'model' must be a mapping"),  # was loaded as the defaults
        ("1: 2\n", "unknown section '1'"),  # was TypeError in difflib
        ("train:\n  1: 2\n", "unknown key 'train.1'"),
        ("data:\n  corpora: [{src: a, tgt: b, 1: c}]\n", "unknown key 'data.corpora[0].1'"),
        ("data:\n  corpora: [{src: a, tgt: b, name: {x: 1}}]\n", "data.corpora[0].name must be a name"),
        ("data:\n  corpora: [{src: a, tgt: b, weight: .inf}]\n", "data.corpora[0].weight"),
        ("model:\n  preset: [tiny]\n", "model.preset must name a preset"),  # was TypeError: unhashable
        ("model:\n  preset: tiny\n  3: 4\n", "unknown key 'model.3'"),  # was TypeError: keywords must be strings
        ("model:\n  Preset: tiny\n", "did you mean 'preset'"),
        ("model:\n  dropout: [1]\n", "model.dropout must be a number"),  # was TypeError comparing list and float
        ("train:\n  lr_factor: .nan\n", "train.lr_factor must be a finite number"),  # was loaded
        ("train:\n  peak_lr: nan\n", "train.peak_lr must be a finite number"),
        ("train:\n  max_time: .nan\n", "train.max_time must be positive and finite"),  # was loaded
        ("train:\n  max_time: 1" + "0" * 400 + "\n", "train.max_time must be positive and finite"),  # OverflowError
        ("train:\n  max_steps: 1\n  max_steps: 2\n", "line 3: key 'max_steps' given twice (first at line 2)"),
        ("train:\n  max_steps: \x1c\n", "at line 2: character U+001C is not allowed"),  # was 2 lines
        ('train:\n  "a\\nb": 1\n', "unknown key 'train.a\\nb'"),  # the newline split the message
        ("[" * 2000, "nested too deeply"),  # was RecursionError
        ("train:\n  seed: -1\n", "train.seed must be an integer from 0"),  # numpy's generators refuse it
        ("train:\n  adam_beta2: 1.5\n", "train.adam_beta2 must be in [0, 1)"),  # torch refused it at step 1
        ("train:\n  lr_factor: 0\n", "train.lr_factor must be positive"),
        ("data:\n  max_len_ratio: -1\n", "data.max_len_ratio must be positive"),
        ("data:\n  toy_task: copy\n  toy_max_len: 1\n", "data.toy_max_len must be 2 or more"),  # randint failed
        ("decode:\n  early_stopping: 1\n", "decode.early_stopping must be true, false or heuristic"),
    ],
)
def test_a_broken_recipe_is_one_line_naming_the_key(tmp_path, recipe, says):
    from vaswani.config import Config

    (tmp_path / "r.yaml").write_text(recipe, encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        Config.load(tmp_path / "r.yaml")
    assert says in str(error.value) and len(str(error.value).splitlines()) == 1, str(error.value)


def test_a_recipe_that_is_not_utf8_names_the_file_and_line(tmp_path):
    from vaswani.config import Config

    (tmp_path / "r.yaml").write_bytes(b"train:\n  max_steps: \xff\n")
    with pytest.raises(ConfigError, match=r"r\.yaml, line 2: not UTF-8 text"):  # was UnicodeDecodeError
        Config.load(tmp_path / "r.yaml")


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("train.max_steps=[1", "override 'train.max_steps=[1' is not valid YAML at line 1"),  # was ParserError
        ("train.max_steps={a: 1, a: 2}", "key 'a' given twice"),
        ("model.max_steps=1", "section 'model' of the config is not a mapping"),  # was TypeError
    ],
)
def test_a_broken_override_is_one_line_naming_it(tmp_path, override, says):
    from vaswani.config import Config

    (tmp_path / "r.yaml").write_text("model: 5\n" if override.startswith("model") else "", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(says)):
        Config.load(tmp_path / "r.yaml", [override])


def test_a_huge_d_model_is_refused_at_once():
    """The suggested n_heads was searched among every number up to d_model: 10^12 never ended."""
    with pytest.raises(ConfigError, match=r"e\.g\. n_heads=1"):
        ModelConfig(d_model=10**12 + 1, n_heads=7, src_vocab_size=100, tgt_vocab_size=100)


def test_yaml_merges_and_empty_sections_still_load(tmp_path):
    from vaswani.config import Config

    (tmp_path / "r.yaml").write_text("train:\n  <<: {max_steps: 5}\n  max_steps: 6\ndecode:\n", encoding="utf-8")
    assert Config.load(tmp_path / "r.yaml").train.max_steps == 6
