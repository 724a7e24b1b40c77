"""Export proven by output: CTranslate2 and Hugging Face Marian give our model's tokens and logits.

A small model is trained here for seconds to reverse strings, and its outputs are compared on 250
held-out strings, which it reverses partly right: varied outputs and many near-ties between tokens,
a harder test of equality than a model that is sure of every token.
"""

import dataclasses
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from vaswani.config import Config
from vaswani.data.corpus import read_lines
from vaswani.data.tokenizer import Tokenizer
from vaswani.data.toy import toy_pairs
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import search_ids
from vaswani.export import ExportError, export
from vaswani.model_dir import WEIGHTS, load_model, load_weights, save_weights, weights_of, write_model_directory
from vaswani.nn import Transformer

pytestmark = [
    pytest.mark.shared_data,
    pytest.mark.slow,
]  # slow: a trained model converted for CTranslate2 and Hugging Face

ctranslate2 = pytest.importorskip("ctranslate2")
MULTI30K = Path(__file__).resolve().parents[2] / "../shared/data/multi30k/raw"
HELD_OUT = 250


def _quiet():
    from rich.console import Console

    return Console(file=open("/dev/null", "w"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    from vaswani.train.trainer import Trainer

    directory = tmp_path_factory.mktemp("trained") / "model"
    config = Config.from_dict(
        {
            "model": {"d_model": 64, "n_heads": 4, "d_ff": 128, "n_layers": 2, "dropout": 0.0},
            "data": {
                "toy_task": "reverse",
                "toy_train_size": 5000,
                "toy_valid_size": 50,
                "toy_max_len": 16,
                "tokenizer": "char",
                "vocab_size": 16,
                "max_tokens": 800,
            },
            "train": {
                "max_steps": 300,
                "warmup_steps": 100,
                "lr_factor": 1.0,
                "valid_every": 300,
                "keep_last": 1,
                "precision": "fp32",
                "early_stopping_metric": "loss",
            },
        }
    )
    Trainer(config, directory, _quiet()).train()
    return directory


@pytest.fixture(scope="module")
def held_out(trained) -> list[list[int]]:
    lines = [source for source, _ in toy_pairs("reverse", HELD_OUT, 16, seed=2024)]  # not the training seed
    return Tokenizer.load(trained).encode_src(lines)


def _ours(model_dir: Path, sources, beam: int, limit: int) -> list[list[int]]:
    model, _ = load_model(model_dir)
    request = DecodeRequest.of(beam_size=beam, length_penalty=0.0, max_len_a=0.0, max_len_b=limit, batch_size=32)
    return [hyps[0].tokens for hyps in search_ids(model, sources, request)]


def _ct2(path: Path, model_dir: Path, sources, beam: int, limit: int) -> list[list[int]]:
    tokenizer = Tokenizer.load(model_dir)
    translator = ctranslate2.Translator(str(path), intra_threads=torch.get_num_threads())
    batch = [[tokenizer.src.id_to_piece(i) for i in x] for x in sources]
    results = translator.translate_batch(
        batch,
        beam_size=beam,
        length_penalty=0.0,
        max_decoding_length=limit,
        min_decoding_length=0,
        suppress_sequences=[["<pad>"], ["<s>"]],
        max_batch_size=32,
    )
    return [[tokenizer.tgt.piece_to_id(p) for p in r.hypotheses[0]] for r in results]


@pytest.mark.parametrize("beam", [1, 4])
def test_ctranslate2_float32_output_ids_are_ours_on_every_held_out_sentence(trained, held_out, tmp_path, beam):
    """Greedy, and beam 4 where the length penalties coincide (alpha 0; CTranslate2 divides by length^alpha,
    we by GNMT's ((5 + length) / 6)^alpha)."""
    out = export(trained, tmp_path / "ct2", "ctranslate2")
    assert (out / "model.bin").is_file() and (out / "tokenizer.model").is_file()
    ours, theirs = _ours(trained, held_out, beam, 40), _ct2(out, trained, held_out, beam, 40)
    assert len({tuple(x) for x in ours}) > HELD_OUT // 4  # varied outputs, not one degenerate string
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    assert not differ, f"{len(differ)} of {HELD_OUT} differ, first: {ours[differ[0]]} vs {theirs[differ[0]]}"


def _random_model_dir(directory: Path, tokenizer_dir: Path, joint: bool = True, **model) -> Path:
    """An untrained model of another architecture with the trained model's tokenizer (`joint=False`: written
    as separate source and target models, so the exports take their two-vocabulary paths)."""
    directory.mkdir()
    vocab = Tokenizer.load(tokenizer_dir).src_vocab_size
    config = Config.from_dict(
        {
            "model": {
                "d_model": 32,
                "n_heads": 2,
                "d_ff": 64,
                "n_layers": 2,
                "n_decoder_layers": 3,
                "src_vocab_size": vocab,
                "tgt_vocab_size": vocab,
                **model,
            }
        }
    )
    for name in Tokenizer.files(joint):
        (directory / name).write_bytes((tokenizer_dir / "tokenizer.model").read_bytes())
    write_model_directory(directory, config)
    save_weights(weights_of(Transformer(config.model)), directory / WEIGHTS)
    return directory


@pytest.mark.parametrize(
    "options",
    [
        {"norm_first": True, "positions": "learned", "max_positions": 64, "activation": "gelu"},
        {"share_embeddings": False, "tie_output": False, "layer_norm_eps": 1e-5, "joint": False},
    ],
    ids=["pre-norm-learned-gelu", "untied-output-two-vocabularies"],
)
def test_ctranslate2_scores_every_token_as_we_do_for_other_architectures(trained, held_out, tmp_path, options):
    directory = _random_model_dir(tmp_path / "model", trained, **options)
    out = export(directory, tmp_path / "ct2", "ctranslate2")
    model, _ = load_model(directory)
    tokenizer = Tokenizer.load(directory)
    translator = ctranslate2.Translator(str(out))
    sources, targets = held_out[:20], [x[:12] for x in held_out[20:40]]
    piece = tokenizer.src.id_to_piece
    results = translator.score_batch([[piece(i) for i in s] for s in sources], [[piece(i) for i in t] for t in targets])
    for src, tgt, result in zip(sources, targets, results, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([[*src, 2]]), torch.tensor([[1, *tgt]]))[0]
        ours = torch.log_softmax(logits, -1).gather(1, torch.tensor([*tgt, 2])[:, None]).squeeze(1)
        assert torch.allclose(torch.tensor(result.log_probs), ours, atol=1e-4), (result.log_probs, ours)


def _cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "vaswani.cli", *args], capture_output=True, text=True, **kwargs)


def test_translate_with_ctranslate2_converts_once_and_writes_our_lines(trained, tmp_path):
    source = tmp_path / "source.de"
    lines = [source for source, _ in toy_pairs("reverse", 40, 16, seed=7)]
    lines[5], lines[9] = "", "   "
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # CTranslate2 applies one maximum length to a batch: the same for all here
    common = [
        "translate",
        str(trained),
        "-i",
        str(source),
        "--length-penalty",
        "0",
        "--batch-size",
        "8",
        "--max-len-a",
        "0",
        "--max-len-b",
        "40",
    ]
    torch_run = _cli(*common, "--precision", "fp32")
    first = _cli(*common, "--engine", "ctranslate2")
    assert first.returncode == 0, first.stderr
    assert "engine ctranslate2" in first.stderr
    assert first.stdout == torch_run.stdout and len(first.stdout.splitlines()) == len(lines)
    stamp = trained / "ctranslate2" / "model.bin"
    converted_at = stamp.stat().st_mtime_ns
    again = _cli(*common, "--engine", "ctranslate2", "--compute-type", "int8")
    assert again.returncode == 0, again.stderr
    assert stamp.stat().st_mtime_ns == converted_at  # reused, not converted again
    assert len(again.stdout.splitlines()) == len(lines)


def test_a_glossary_with_ctranslate2_gives_our_engine_s_lines(trained, tmp_path):
    """Terms go into CTranslate2's translations as into ours (float32: the same translations to start from; the
    alignment, the scores and the constrained search are the torch model's)."""
    pairs = toy_pairs("reverse", 30, 16, seed=13)
    source, glossary = tmp_path / "source.txt", tmp_path / "terms.tsv"
    source.write_text("\n".join(s for s, _ in pairs) + "\n", encoding="utf-8")
    # a source (one word here) asked for as another word of the model's letters: its reversal, letters rotated
    letters = sorted({c for s, _ in pairs for c in s})
    rotate = {c: letters[(i + 1) % len(letters)] for i, c in enumerate(letters)}
    terms = {s: "".join(rotate[c] for c in t) for s, t in pairs[:3]}
    glossary.write_text("".join(f"{k}\t{v}\n" for k, v in terms.items()), encoding="utf-8")
    common = ["translate", str(trained), "-i", str(source), "--glossary", str(glossary), "--max-len-a", "0"]
    common += ["--max-len-b", "40", "--length-penalty", "0"]
    ours, theirs = _cli(*common, "--precision", "fp32"), _cli(*common, "--engine", "ctranslate2")
    assert ours.returncode == 0 and theirs.returncode == 0, theirs.stderr
    assert theirs.stdout == ours.stdout and len(theirs.stdout.splitlines()) == len(pairs)
    assert [theirs.stdout.splitlines()[i] for i in range(3)] == list(terms.values())  # the word is the term


@pytest.mark.parametrize("beam", ["1", "4"])
def test_ctranslate2_scores_are_our_log_probabilities(trained, tmp_path, beam):
    source = tmp_path / "source.txt"
    source.write_text("\n".join(s for s, _ in toy_pairs("reverse", 12, 16, seed=11)) + "\n", encoding="utf-8")
    # greedy: the model's own length penalty (0.6) must not reach CTranslate2's greedy score; beam: alpha 0
    penalty = ["--length-penalty", "0"] if beam != "1" else []
    common = [
        "translate",
        str(trained),
        "-i",
        str(source),
        "--scores",
        "--beam",
        beam,
        *penalty,
        "--max-len-a",
        "0",
        "--max-len-b",
        "40",
    ]
    ours, theirs = _cli(*common, "--precision", "fp32"), _cli(*common, "--engine", "ctranslate2")
    assert theirs.returncode == 0, theirs.stderr
    assert ours.returncode == 0 and len(ours.stdout.splitlines()) == 12, ours.stderr  # a line per source line
    for a, b in zip(ours.stdout.splitlines(), theirs.stdout.splitlines(), strict=True):
        (a,), (b,) = json.loads(a), json.loads(b)
        assert a["text"] == b["text"] and a["log_prob"] == pytest.approx(b["log_prob"], abs=1e-3)
    texts = _cli(*[x for x in common if x != "--scores"], "--engine", "ctranslate2")  # without return_scores
    assert texts.returncode == 0, texts.stderr
    assert texts.stdout.splitlines() == [json.loads(a)[0]["text"] for a in theirs.stdout.splitlines()]


def test_new_weights_are_converted_again(trained, tmp_path):
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(trained), str(copy)], check=True)
    from vaswani.export.ctranslate2 import converted

    first = (converted(copy) / "vaswani_source.json").read_text()
    weights = weights_of(load_model(copy)[0])
    weights = {k: v * 1.01 if k.endswith("linear2.weight") else v for k, v in weights.items()}
    save_weights(weights, copy / WEIGHTS)
    assert (converted(copy) / "vaswani_source.json").read_text() != first


def test_export_errors_are_one_line(trained, tmp_path):
    bad = _cli("export", str(trained), str(tmp_path / "x"), "--to", "huggingface", "--quantization", "int8")
    assert bad.returncode == 2 and "ctranslate2 only" in bad.stderr and "Traceback" not in bad.stderr
    missing = _cli("export", str(tmp_path / "nothing"), str(tmp_path / "y"), "--to", "ctranslate2")
    assert missing.returncode == 2 and "not a model directory" in missing.stderr
    same = _cli("export", str(trained), str(trained), "--to", "ctranslate2")
    assert same.returncode == 2 and "model directory itself" in same.stderr
    full = tmp_path / "full"
    full.mkdir()
    (full / "old.txt").write_text("x")
    again = _cli("export", str(trained), str(full), "--to", "ctranslate2")
    assert again.returncode == 2 and "not empty" in again.stderr
    torch_only = _cli("translate", str(trained), "--compute-type", "int8", input="abc\n")
    assert torch_only.returncode == 2 and "--engine ctranslate2" in torch_only.stderr


def test_a_directory_the_engine_did_not_make_is_left_alone(trained, tmp_path):
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(trained), str(copy)], check=True)
    subprocess.run(["rm", "-rf", str(copy / "ctranslate2")], check=True)
    export(copy, copy / "ctranslate2", "ctranslate2", quantization="int8")  # the user's own export
    run = _cli("translate", str(copy), "--engine", "ctranslate2", input="abc\n")
    assert run.returncode == 2 and "not made by --engine ctranslate2" in run.stderr
    assert (copy / "ctranslate2" / "model.bin").is_file()


# --- Hugging Face -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def marian(trained, tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    out = export(trained, tmp_path_factory.mktemp("hf") / "marian", "huggingface")
    assert json.loads((out / "config.json").read_text())["decoder_start_token_id"] == 1
    model = transformers.MarianMTModel.from_pretrained(str(out)).eval()
    return model, transformers.MarianTokenizer.from_pretrained(str(out))


def test_marian_generation_config_bans_the_n_grams_ours_bans(trained, tmp_path):
    """decode.no_repeat_ngram was not written: generate repeated what vaswani translate never repeats."""
    pytest.importorskip("transformers")
    directory = shutil.copytree(trained, tmp_path / "model")
    config = Config.load(directory / "config.yaml")
    write_model_directory(
        directory, dataclasses.replace(config, decode=dataclasses.replace(config.decode, no_repeat_ngram=3))
    )
    out = export(directory, tmp_path / "hf", "huggingface")
    assert json.loads((out / "generation_config.json").read_text())["no_repeat_ngram_size"] == 3


def test_marian_tokenizer_gives_our_source_ids(trained, marian):
    lines = read_lines(MULTI30K / "test_2016_flickr.de.gz")[:50]
    ours = Tokenizer.load(trained).encode_src(lines)
    assert marian[1](lines)["input_ids"] == [[*x, 2] for x in ours]


def test_marian_logits_are_ours_within_1e_4_and_generate_greedy_is_ours(trained, held_out, marian):
    model, _ = load_model(trained)
    hf, _ = marian
    ours = _ours(trained, held_out, beam=1, limit=40)
    for start in range(0, HELD_OUT, 50):
        rows = range(start, min(start + 50, HELD_OUT))
        src = torch.nn.utils.rnn.pad_sequence([torch.tensor([*held_out[i], 2]) for i in rows], batch_first=True)
        tgt = torch.nn.utils.rnn.pad_sequence([torch.tensor([1, *ours[i]]) for i in rows], batch_first=True)
        with torch.no_grad():
            expected = model(src, tgt)
            got = hf(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=tgt).logits
            generated = hf.generate(
                input_ids=src, attention_mask=(src != 0).long(), num_beams=1, do_sample=False, max_new_tokens=40
            )
        real = tgt != 0
        assert (expected - got)[real].abs().max() < 1e-4
        for i, row in zip(rows, generated.tolist(), strict=True):
            tokens = [t for t in row[1:] if t != 0]  # after the start token, without padding
            assert tokens[: len(ours[i]) + 1] in (ours[i], [*ours[i], 2]), i


def test_marian_export_refuses_what_marian_cannot_compute(trained, tmp_path):
    pytest.importorskip("transformers")
    for options, key in (({"norm_first": True}, "model.norm_first"), ({"positions": "learned"}, "model.positions")):
        directory = _random_model_dir(tmp_path / key, trained, **options)
        with pytest.raises(ExportError, match=key):
            export(directory, tmp_path / f"{key}-out", "huggingface")


@pytest.mark.parametrize("tie_output", [True, False])
def test_marian_of_a_model_with_two_vocabularies_gives_our_logits(trained, held_out, tmp_path, tie_output):
    transformers = pytest.importorskip("transformers")
    directory = _random_model_dir(
        tmp_path / "model", trained, joint=False, share_embeddings=False, tie_output=tie_output
    )
    out = export(directory, tmp_path / "hf", "huggingface")
    hf = transformers.MarianMTModel.from_pretrained(str(out)).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(str(out))
    assert tokenizer.separate_vocabs
    model, _ = load_model(directory)
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor([*x, 2]) for x in held_out[:20]], batch_first=True)
    tgt = torch.nn.utils.rnn.pad_sequence([torch.tensor([1, *x[:10]]) for x in held_out[20:40]], batch_first=True)
    with torch.no_grad():
        expected = model(src, tgt)
        got = hf(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=tgt).logits
    assert (expected - got)[tgt != 0].abs().max() < 1e-4


def _restricted_model_dir(directory: Path, trained: Path, left_out: list[int]) -> Path:
    """The trained model as model.output_words target, never writing the characters `left_out`."""
    shutil.copytree(trained, directory, ignore=shutil.ignore_patterns("checkpoints", "prepared*", "*.png"))
    config = Config.load(directory / "config.yaml")
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, output_words="target"))
    write_model_directory(directory, config)
    model = Transformer(config.model)
    model.load_state_dict(load_weights(trained / WEIGHTS), strict=False)
    model.output_words[left_out] = False
    save_weights(weights_of(model), directory / WEIGHTS)
    return directory


def test_a_model_of_the_target_words_exports_them_only(trained, held_out, tmp_path):
    """CTranslate2 and Marian carry model.output_words target as a bias of -10,000 on the words left out: the
    same ids and logits as ours, and none of those words, where the unrestricted model writes them often."""
    transformers = pytest.importorskip("transformers")
    before = _ours(trained, held_out, 1, 40)
    common = Counter(t for x in before for t in x).most_common(2)
    left_out = [t for t, _ in common]
    directory = _restricted_model_dir(tmp_path / "model", trained, left_out)
    ours = _ours(directory, held_out, 1, 40)
    assert not {t for x in ours for t in x} & set(left_out)
    for beam in (1, 4):
        out = export(directory, tmp_path / f"ct2-{beam}", "ctranslate2")
        expected = ours if beam == 1 else _ours(directory, held_out, beam, 40)
        assert _ct2(out, directory, held_out, beam, 40) == expected
    hf = transformers.MarianMTModel.from_pretrained(str(export(directory, tmp_path / "hf", "huggingface"))).eval()
    model, _ = load_model(directory)
    rows = range(50)
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor([*held_out[i], 2]) for i in rows], batch_first=True)
    tgt = torch.nn.utils.rnn.pad_sequence([torch.tensor([1, *ours[i]]) for i in rows], batch_first=True)
    with torch.no_grad():
        expected = model(src, tgt)
        got = hf(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=tgt).logits
    real, kept = tgt != 0, model.output_words
    assert (expected - got)[real][:, kept].abs().max() < 1e-4
    assert (got[real][:, ~kept] < -5000).all()
