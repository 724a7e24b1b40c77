"""`vaswani distill` (vaswani/distill): the student's targets are the teacher's own beam translations, filtered; the
teacher's pass is chunked, resumed and sharded with the chunks one process would write; a resumed distillation
equals an uninterrupted one; an imported OPUS-MT-layout teacher works as one trained here."""

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
import yaml
from sacrebleu.metrics import CHRF

from tests.helpers.common import MULTI30K, write_tiny_model_directory
from vaswani.cli import main
from vaswani.config import ConfigError
from vaswani.config.distill import DistillConfig
from vaswani.data.tokenizer import Tokenizer
from vaswani.distill import distill
from vaswani.distill import teacher as passes
from vaswani.distill.start import spread
from vaswani.model_dir import load_weights
from vaswani.train import checkpoint as ckpt
from vaswani.translate.translator import Translator

pytestmark = pytest.mark.shared_data


def _lines(name: str, n: int) -> list[str]:
    with gzip.open(MULTI30K / f"raw/{name}", "rt", encoding="utf-8") as f:
        return [line for _, line in zip(range(n), f, strict=False)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    for side in ("de", "en"):
        (root / f"train.{side}").write_text("".join(_lines(f"train.{side}.gz", 90)), encoding="utf-8")
        (root / f"dev.{side}").write_text("".join(_lines(f"val.{side}.gz", 12)), encoding="utf-8")
    teacher = root / "teacher"
    teacher.mkdir()
    write_tiny_model_directory(teacher, max_len_a=0.0, max_len_b=8)
    return root, teacher


def _recipe(root, path, max_steps=2, **distill_settings):
    values = {
        "model": {"d_model": 32, "n_heads": 2, "d_ff": 64, "n_layers": 2, "n_decoder_layers": 1, "dropout": 0.0},
        "data": {"train_src": str(root / "train.de"), "train_tgt": str(root / "train.en"),
                 "valid_src": str(root / "dev.de"), "valid_tgt": str(root / "dev.en"), "max_tokens": 500},
        "train": {"max_steps": max_steps, "valid_every": 2, "loader_workers": 0, "precision": "fp32",
                  "warmup_steps": 1},
        "distill": {"beam_size": 2, "chunk_lines": 40, "batch_size": 7, **distill_settings},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(values))
    return path


def test_the_student_learns_the_teacher_s_own_beam_translations_and_records_its_teacher(corpus, tmp_path):
    root, teacher = corpus
    student = tmp_path / "student"
    distill(teacher, _recipe(root, tmp_path / "s.yaml", max_len_ratio=0), student)
    sources = (root / "train.de").read_text(encoding="utf-8").splitlines()
    expected = Translator.load(teacher).translate(sources, beam_size=2, length_penalty=0.6)
    work = student / "distill"
    assert (work / "distilled.src").read_text(encoding="utf-8").splitlines() == sources
    assert (work / "distilled.tgt").read_text(encoding="utf-8").splitlines() == expected
    assert len(set(expected)) > 1  # the teacher's translations depend on the input
    origin = json.loads((student / "vaswani.json").read_text())["origin"]
    assert origin["distilled_from"] == str(teacher.resolve()) and origin["distill"]["beam_size"] == 2
    assert origin["distilled_pairs"] == {"sources": 90, "translations": 90, "kept": 90, "dropped": {},
                                         "settings": DistillConfig(max_len_ratio=0).corpus_settings()}  # fmt: skip
    assert Tokenizer.load(student).encode_src(sources[:3]) == Tokenizer.load(teacher).encode_src(sources[:3])
    assert len(Translator.load(student).translate(sources[:2])) == 2  # a model directory like any other


def test_shards_and_a_cut_pass_write_the_chunks_one_process_writes(corpus, tmp_path):
    root, teacher = corpus
    settings = DistillConfig(decode={"beam_size": 2, "batch_size": 7}, n_best=2, chunk_lines=40)
    sources = (root / "train.de").read_text(encoding="utf-8").splitlines()
    translator = Translator.load(teacher)
    one, shards = tmp_path / "one", tmp_path / "shards"
    passes.translate_chunks(translator, sources, one, settings, passes.pending(one, len(sources), 40))
    for rank in (1, 0):  # any order: each process writes its own chunks
        chunks = passes.pending(shards, len(sources), 40, rank, 2)
        assert chunks == [i for i in range(3) if i % 2 == rank]
        passes.translate_chunks(translator, sources, shards, settings, chunks)
    assert passes.pending(shards, len(sources), 40) == []
    for i in range(3):
        assert passes.chunk_path(shards, i).read_bytes() == passes.chunk_path(one, i).read_bytes()
    records = [json.loads(line) for line in passes.chunk_path(one, 0).read_text(encoding="utf-8").splitlines()]
    assert len(records) == 40 and all(len(r) == 2 and r[0][2] >= r[1][2] for r in records)  # 2-best, best first


def test_a_resumed_distillation_equals_an_uninterrupted_one(corpus, tmp_path):
    root, teacher = corpus
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    distill(teacher, _recipe(root, tmp_path / "a.yaml", max_steps=4), straight)
    # the pass cut after its first chunk, then the training after two steps
    settings = DistillConfig(decode={"beam_size": 2, "batch_size": 7}, chunk_lines=40)
    sources = (root / "train.de").read_text(encoding="utf-8").splitlines()
    work = stopped / "distill"
    passes.start(work, passes.stamp_of(teacher, settings, sources), print)
    passes.translate_chunks(Translator.load(teacher), sources, work, settings, [0])
    first = passes.chunk_path(work, 0).stat().st_mtime_ns
    distill(teacher, _recipe(root, tmp_path / "b.yaml", max_steps=2), stopped)
    assert passes.chunk_path(work, 0).stat().st_mtime_ns == first  # kept, not translated again
    distill(teacher, _recipe(root, tmp_path / "a.yaml", max_steps=4), stopped)
    for name in ("distilled.src", "distilled.tgt", "report.json"):
        assert (work / name).read_bytes() == (straight / "distill" / name).read_bytes()
    a = load_weights(straight / "checkpoints/step_00000004" / ckpt.WEIGHTS)
    b = load_weights(stopped / "checkpoints/step_00000004" / ckpt.WEIGHTS)
    assert a and a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def test_other_settings_translate_again_once_the_student_trained_on_the_old_ones_is_removed(corpus, tmp_path, capsys):
    root, teacher = corpus
    student = tmp_path / "student"
    distill(teacher, _recipe(root, tmp_path / "a.yaml", max_steps=1), student)
    other = _recipe(root, tmp_path / "b.yaml", max_steps=1, n_best=2)
    with pytest.raises(ConfigError, match="holds a student trained on the translations of another teacher"):
        distill(teacher, other, student)  # its checkpoints learnt from the other translations
    shutil.rmtree(student / "checkpoints")
    distill(teacher, other, student)
    assert "made from another teacher, other settings or other sources: translating again" in capsys.readouterr().err
    report = json.loads((student / "distill/report.json").read_text())
    assert report["translations"] == 180


def test_what_a_teacher_gets_wrong_is_not_taught():
    settings = DistillConfig(max_len_ratio=2.0, min_confidence=0.3, min_chrf=20.0)
    source = "Ein Mann fährt auf einem Fahrrad die Straße entlang ."
    good = "A man rides a bike along the street ."
    assert passes.dropped_because(source, good, 0.8, good, settings) is None
    assert passes.dropped_because(source, "", 0.8, good, settings) == "empty"
    assert passes.dropped_because(source, " ".join(["man"] * 40), 0.8, good, settings) == "length ratio"
    assert passes.dropped_because(source, "A man .", 0.8, good, settings) == "length ratio"  # stopped early
    assert passes.dropped_because("Hunde .", "The dogs are playing .", 0.8, None, settings) is None  # both short
    assert passes.dropped_because(source, good, 0.1, good, settings) == "confidence"
    assert passes.dropped_because(source, "Two dogs play in the snow together .", 0.8, good, settings) == "chrF"
    assert passes.dropped_because(source, good, None, None, DistillConfig()) is None  # the defaults: ratio 3


def test_pick_closest_teaches_the_n_best_translation_nearest_the_original_target(corpus, tmp_path, capsys):
    """distill.pick closest (Kim & Rush's sequence-level interpolation): one pair per source, the candidate of the
    teacher's n-best with the highest sentence chrF against the original target; a rerun with another pick builds
    the corpus again from the same chunks, and a student trained on the old corpus is not silently retrained."""
    root, teacher = corpus
    student = tmp_path / "student"
    distill(teacher, _recipe(root, tmp_path / "a.yaml", max_steps=1, n_best=2, max_len_ratio=0), student)
    work = student / "distill"
    assert json.loads((work / "report.json").read_text())["kept"] == 180  # pick all: both of the 2-best
    closest = _recipe(root, tmp_path / "b.yaml", max_steps=1, n_best=2, max_len_ratio=0, pick="closest")
    with pytest.raises(ConfigError, match="trained on a distilled corpus built with other filters or another pick"):
        distill(teacher, closest, student)
    shutil.rmtree(student / "checkpoints")
    chunks = {p.name: p.stat().st_mtime_ns for p in (work / "chunks").iterdir()}
    distill(teacher, closest, student)
    assert {p.name: p.stat().st_mtime_ns for p in (work / "chunks").iterdir()} == chunks  # not translated again
    report = json.loads((work / "report.json").read_text())
    assert report["kept"] == 90 and report["dropped"] == {"not the closest": 90}
    assert report["settings"]["pick"] == "closest"
    sources = (root / "train.de").read_text(encoding="utf-8").splitlines()
    originals = (root / "train.en").read_text(encoding="utf-8").splitlines()
    candidates = [[c[0] for c in json.loads(line)] for i in range(3)
                  for line in passes.chunk_path(work, i).read_text(encoding="utf-8").splitlines()]  # fmt: skip
    taught = (work / "distilled.tgt").read_text(encoding="utf-8").splitlines()
    assert (work / "distilled.src").read_text(encoding="utf-8").splitlines() == sources
    chrf = CHRF()
    for pair, target, original in zip(candidates, taught, originals, strict=True):
        scores = [chrf.sentence_score(c, [original]).score for c in pair]
        assert target == pair[scores.index(max(scores))]
    assert sum(t != pair[0] for t, pair in zip(taught, candidates, strict=True)) > 0  # not always the beam's best
    assert "distilled corpus: 90 of 180 translations kept (dropped: 90 not the closest)" in capsys.readouterr().err


def test_closest_is_the_candidate_nearest_the_reference():
    reference = "A man rides a bike along the street ."
    assert passes.closest(["A man walks .", "A man rides a bicycle along the street ."], reference).endswith("street .")
    assert passes.closest(["A man rides .", "A man rides ."], reference) == "A man rides ."
    with pytest.raises(ConfigError, match=r"set distill\.n_best to 2 or more"):
        DistillConfig(pick="closest").validate()


def test_the_teachers_search_is_any_decode_setting_over_its_own():
    settings = DistillConfig.from_dict({"beam_size": 2, "no_repeat_ngram": 3, "length_penalty": "1e0", "n_best": 2})
    assert settings.decode == {"beam_size": 2, "no_repeat_ngram": 3, "length_penalty": 1.0}
    assert DistillConfig.from_dict(settings.to_dict()) == settings  # written back as the section is written
    assert DistillConfig().beam_size == 4 and DistillConfig().decode == {}  # the paper's beam, from decode's default


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("distill.beam=4", "unknown key 'distill.beam' (did you mean 'beam_size'?)"),
        ("distill.n_best=5", "distill.n_best (5) cannot exceed distill.beam_size (2); raise the beam"),
        ("distill.beam_size=0", "distill.beam_size and distill.batch_size must be positive"),
        ("distill.no_repeat_ngram=x", "distill.no_repeat_ngram must be an integer, got 'x'"),
        ("distill.tokenizer=mine", "distill.tokenizer must be teacher or own, got 'mine'"),
        ("distill.pick=best", "distill.pick must be all or closest, got 'best'"),
        ("distill.init=teacher --set distill.tokenizer=own", "distill.init: teacher copies the teacher's embeddings"),
        ("distill.init=teacher --set model.d_ff=48", "the student's model.d_ff is 48 and the teacher's 64"),
        ("distill.init=teacher --set model.n_layers=3", "the student's model.n_layers (3) is deeper than the"),
        ("finetune.aux_weight=1", "a distillation config has the sections model, data, train, decode and distill"),
    ],
)
def test_a_wrong_setting_is_one_line_naming_it(corpus, tmp_path, capsys, setting, message):
    root, teacher = corpus
    recipe = _recipe(root, tmp_path / "s.yaml")
    settings = [x for one in setting.split(" --set ") for x in ("--set", one)]
    assert main(["distill", str(teacher), str(recipe), str(tmp_path / "s"), *settings]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("vaswani: threads:")]
    assert len(err) == 1 and message in err[0], err
    assert main(["distill", str(tmp_path / "nothing"), str(recipe), str(tmp_path / "s")]) == 2
    assert "is not a model directory (no config.yaml): give the teacher's directory" in capsys.readouterr().err
    assert not (tmp_path / "s" / "distill" / "chunks").exists()  # refused before the teacher's pass


def test_layers_are_spread_over_the_teacher_s_stack_first_and_last_kept():
    assert spread(4, 2) == [0, 3] and spread(6, 3) == [0, 2, 5] and spread(12, 1) == [0] and spread(3, 3) == [0, 1, 2]


def test_a_student_started_from_its_teacher_holds_its_embeddings_and_spread_layers(corpus, tmp_path):
    """distill.init: teacher (Shleifer & Rush's shrink and fine-tune): the 2-1 student's first weights are the
    teacher's embeddings, its two encoder layers and its first decoder layer; trained, it stays near them."""
    root, teacher = corpus
    student = tmp_path / "student"
    steps = ["train.lr_schedule=constant", "train.peak_lr=1e-3"]  # Adam: each weight moves about 1e-3 a step
    distill(teacher, _recipe(root, tmp_path / "s.yaml", init="teacher"), student, steps)
    theirs = load_weights(teacher / "model.safetensors")
    start = load_weights(student / "distill" / "start" / "model.safetensors")
    assert set(start) == set(load_weights(student / "model.safetensors"))  # every weight of the student, no other
    for name, tensor in start.items():
        if name != "output_words":
            assert torch.equal(tensor, theirs[name]), name  # 2-1 of 2-2: the same names, decoder layer 1 left
    assert not any(name.startswith("decoder.layers.1.") for name in start)
    trained = load_weights(student / "model.safetensors")
    moved = max((trained[n] - start[n]).abs().max().item() for n in start if n != "output_words")
    assert 0 < moved < 0.01  # two steps from the teacher's weights, not from random ones
    origin = json.loads((student / "vaswani.json").read_text())["origin"]
    assert origin["distill"]["init"] == "teacher"


@pytest.mark.slow
def test_torchrun_processes_share_the_teacher_s_pass_and_write_one_process_s_corpus(corpus, tmp_path):
    root, teacher = corpus
    recipe = _recipe(root, tmp_path / "s.yaml", max_steps=2, max_len_ratio=0)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "vaswani.cli", "distill"]
    done = subprocess.run([*command, str(teacher), str(recipe), str(tmp_path / "ddp")], capture_output=True,
                          text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    distill(teacher, recipe, tmp_path / "one")
    for name in ("distilled.src", "distilled.tgt", "report.json"):
        assert (tmp_path / "ddp/distill" / name).read_bytes() == (tmp_path / "one/distill" / name).read_bytes()
    assert (tmp_path / "ddp/checkpoints/step_00000002").is_dir()


def test_the_multi30k_recipe_is_a_student_of_its_teacher_with_the_teacher_s_vocabulary(corpus, tmp_path):
    from pathlib import Path

    from vaswani.config import Config
    from vaswani.config.recipe import load_values
    from vaswani.distill import student_config

    _, teacher = corpus
    values = load_values(Path(__file__).resolve().parents[2] / "configs/multi30k_de_en_distill.yaml")
    settings = DistillConfig.from_dict(values.pop("distill"))
    taught = Config.load(teacher / "config.yaml")
    config = student_config(values, taught, settings, tmp_path / "distill")
    assert (config.model.n_layers, config.model.n_decoder_layers, config.model.d_model) == (2, 1, 128)
    assert (config.model.src_vocab_size, config.model.tgt_vocab_size) == (taught.model.src_vocab_size,) * 2
    # the closest of the teacher's 4-best, beside the original pairs (docs/benchmarks.md, "Distillation")
    assert [(c["name"], c["weight"]) for c in config.data.corpora] == [("distilled", 1.0), ("original train", 1.0)]
    assert (settings.beam_size, settings.n_best, settings.pick) == (4, 4, "closest")
    # greedy, with no 4-gram twice: a student's runaway repetitions cut (faster, no BLEU lost)
    assert (config.decode.beam_size, config.decode.no_repeat_ngram) == (1, 4)
    mixed = student_config(values, taught, DistillConfig(original_weight=0.5), tmp_path / "distill")
    alone = student_config(values, taught, DistillConfig(), tmp_path / "distill")
    assert [c["name"] for c in alone.data.corpora] == ["distilled"]
    assert [(c["name"], c["weight"]) for c in mixed.data.corpora] == [("distilled", 1.0), ("original train", 0.5)]


def test_the_greedy_recipe_starts_from_the_full_recipe_s_teacher_of_its_own_shape(tmp_path):
    """configs/multi30k_de_en_distill_greedy.yaml: a student of the full de-en recipe's shape, started from its
    teacher's weights (the shape check passes), taught the closest of the teacher's 4-best, at a fine-tuning rate."""
    from pathlib import Path

    from vaswani.config import Config
    from vaswani.config.recipe import load_values
    from vaswani.distill import student_config

    configs = Path(__file__).resolve().parents[2] / "configs"
    values = load_values(configs / "multi30k_de_en_distill_greedy.yaml")
    settings = DistillConfig.from_dict(values.pop("distill"))
    full = load_values(configs / "multi30k_de_en.yaml")
    teacher = Config.from_dict({**full, "model": {**full["model"], "src_vocab_size": 8000, "tgt_vocab_size": 8000}})
    config = student_config(values, teacher, settings, tmp_path / "distill")  # raises where a shape differs
    m = config.model
    assert (m.n_layers, m.decoder_layers, m.d_model) == (teacher.model.n_layers, teacher.model.decoder_layers, 128)
    assert (settings.init, settings.n_best, settings.pick) == ("teacher", 4, "closest")
    assert config.train.peak_lr < 1e-3 and config.decode.beam_size == 1
    two = student_config({**values, "model": {**values["model"], "n_decoder_layers": 2}}, teacher, settings, tmp_path)
    assert two.model.decoder_layers == 2


@pytest.mark.slow
def test_an_imported_opus_mt_teacher_gives_its_tokenizer_and_special_ids_to_its_student(corpus, tmp_path):
    pytest.importorskip("transformers")
    from tests.helpers.hf_models import save_marian
    from vaswani.config import Config
    from vaswani.pretrained import import_pretrained

    root, _ = corpus
    teacher = import_pretrained(save_marian(tmp_path / "hf", steps=60), tmp_path / "opus")
    student = tmp_path / "student"
    distill(teacher, _recipe(root, tmp_path / "s.yaml", max_steps=2, max_len_ratio=0), student)
    taught, learnt = Config.load(teacher / "config.yaml").model, Config.load(student / "config.yaml").model
    for key in ("src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id", "share_embeddings"):
        assert getattr(learnt, key) == getattr(taught, key), key
    assert (learnt.n_layers, learnt.n_decoder_layers, learnt.d_model) == (2, 1, 32)
    sources = (root / "train.de").read_text(encoding="utf-8").splitlines()
    expected = Translator.load(teacher).translate(sources, beam_size=2, length_penalty=0.6)
    assert (student / "distill/distilled.tgt").read_text(encoding="utf-8").splitlines() == expected
    assert Tokenizer.load(student).encode_src(sources[:5]) == Tokenizer.load(teacher).encode_src(sources[:5])
    assert len(Translator.load(student).translate(sources[:3])) == 3
