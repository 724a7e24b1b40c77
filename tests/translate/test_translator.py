import gzip
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vaswani.data.corpus import read_lines
from vaswani.evaluate import multi30k_tok_reference, tok_lc
from vaswani.runtime.precision import Measurement
from vaswani.train import checkpoint as ckpt
from vaswani.translate.translator import Translator

pytestmark = pytest.mark.shared_data  # reads ../shared/data (tests/conftest.py skips it where absent)

MULTI30K = Path(__file__).resolve().parents[2] / "../shared/data/multi30k"


SENTENCES = [
    "Ein Mann fährt Fahrrad.",
    "",
    "Zwei Hunde spielen im Schnee.",
    "   ",
    "Eine Frau.",
    "Ein kleines Mädchen in einem rosa Kleid klettert auf eine Treppe.",
]


def test_translations_keep_input_order_and_do_not_depend_on_the_batch(model_dir):
    translator = Translator.load(model_dir)
    together = translator.translate(SENTENCES)
    assert len(together) == len(SENTENCES)
    assert together[1] == "" and together[3] == ""
    assert all(together[i] for i in (0, 2, 4, 5))
    assert together == [translator.translate([s])[0] for s in SENTENCES]
    assert translator.translate(SENTENCES, beam_size=1) == [
        translator.translate([s], beam_size=1)[0] for s in SENTENCES
    ]


def test_texts_alone_skip_the_greedy_softmax_and_details_keep_the_scores(model_dir, monkeypatch):
    from vaswani.decode import search, steps

    translator = Translator.load(model_dir)
    details = translator.translate_with_details(SENTENCES, beam_size=1)
    scored = [r.candidates[0] for r in details if r.candidates]  # the four texts that are not blank
    assert len(scored) == 4 and all(c.log_prob <= 0 and 0 < c.confidence <= 1 for c in scored)
    assert details[0].to_dict()["log_prob"] is not None
    softmaxes = []
    counted = search.banned_log_probs

    def counting(*args, **kwargs):
        softmaxes.append(1)
        return counted(*args, **kwargs)

    monkeypatch.setattr(steps, "banned_log_probs", counting)
    assert translator.translate(SENTENCES, beam_size=1) == [r.text for r in details]
    assert not softmaxes  # the texts alone: no softmax over the vocabulary
    bare = translator.translate_with_details(SENTENCES, translator.request(beam_size=1).replace(scores=False))
    assert [r.text for r in bare] == [r.text for r in details] and not softmaxes
    assert bare[0].to_dict()["log_prob"] is None and bare[0].to_dict()["confidence"] is None  # unknown, not 0
    assert translator.translate(SENTENCES[:1], beam_size=4) == [
        translator.translate_with_details(SENTENCES[:1])[0].text
    ]
    assert softmaxes  # a beam ranks by the log-probabilities


def test_details_n_best_scores_and_attention(model_dir):
    translator = Translator.load(model_dir)
    [result] = translator.translate_with_details([SENTENCES[0]], n_best=3, attention=True)
    assert len(result.candidates) == 3
    assert [c.score for c in result.candidates] == sorted((c.score for c in result.candidates), reverse=True)
    assert result.text == translator.translate([SENTENCES[0]])[0]
    layers = translator.model.config.n_layers
    assert len(result.attention.cross) == len(result.attention.decoder_self) == layers
    rows, columns = len(result.tgt_pieces), len(result.src_pieces)
    assert result.attention.cross[0].shape == (2, rows, columns)  # (H, target positions, source positions)
    assert torch.allclose(result.attention.cross[-1].sum(-1), torch.ones(2, rows), atol=1e-5)
    assert rows == len(result.candidates[0].tokens) + 1 and result.src_pieces[-1] == "</s>"
    with pytest.raises(ValueError, match="n_best=5 needs beam_size >= 5"):
        translator.translate_with_details(["x"], n_best=5)
    with pytest.raises(ValueError, match="unknown decoding option"):
        translator.translate(["x"], beam=4)


def _cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "vaswani.cli", *args], input=stdin, capture_output=True, timeout=120)


@pytest.mark.slow
def test_translate_cli_writes_one_line_per_input_line_whatever_the_input(model_dir, tmp_path):
    long_line = " ".join(["Hund"] * 60)  # more tokens than the model's 40 positions
    lines = [s.encode() for s in SENTENCES] + [b"Ein Mann\r mit \xff\xfe Hut.", long_line.encode(), b"Ende."]
    source = tmp_path / "in.de"
    source.write_bytes(b"\n".join(lines))  # no final newline: the last line still counts
    result = _cli("translate", str(model_dir), "-i", str(source), "-o", str(tmp_path / "out.en"))
    assert result.returncode == 0, result.stderr
    stderr = result.stderr.decode()
    assert "line 7: invalid UTF-8, replaced" in stderr
    assert "line 8: " in stderr and "translated the first 39" in stderr
    output = (tmp_path / "out.en").read_text(encoding="utf-8").split("\n")
    assert output[-1] == "" and len(output) - 1 == len(lines)
    expected = Translator.load(model_dir).translate([*SENTENCES, "Ein Mann  mit \ufffd\ufffd Hut.", long_line, "Ende."])
    assert output[:-1] == expected
    piped = _cli("translate", str(model_dir), stdin=gzip.decompress(gzip.compress(source.read_bytes())))
    assert piped.returncode == 0 and piped.stdout.decode().split("\n")[:-1] == expected


@pytest.mark.slow
def test_translate_cli_n_best_is_one_json_list_per_line(model_dir):
    result = _cli("translate", str(model_dir), "--n-best", "2", stdin=b"Ein Mann.\n\nEine Frau.\n")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert [len(r) for r in records] == [2, 0, 2]
    assert records[0][0]["score"] >= records[0][1]["score"]
    details = Translator.load(model_dir).translate_with_details(["Ein Mann.", "", "Eine Frau."], n_best=2)
    assert records == [t.n_best_record() for t in details]  # the library's record, one JSON list per line
    best = details[0].candidates[0]
    assert records[0][0] == {
        "text": best.text,
        "score": round(best.score, 4),
        "log_prob": round(best.log_prob, 4),
        "confidence": round(best.confidence, 4),
    }
    assert 0 < best.confidence <= 1


@pytest.mark.slow
def test_cli_errors_name_the_problem(model_dir, tmp_path):
    result = _cli("translate", str(tmp_path / "nope"), stdin=b"x\n")
    assert result.returncode == 2 and b"is not a model directory" in result.stderr
    result = _cli("translate", str(model_dir), "-i", str(tmp_path / "missing.txt"))
    assert result.returncode == 2 and result.stderr.decode().strip().endswith("missing.txt: file not found")
    result = _cli("translate", str(model_dir), "--compile", "--engine", "ctranslate2", stdin=b"x\n")
    assert result.returncode == 2 and result.stdout == b""
    said = [line for line in result.stderr.decode().splitlines() if not line.startswith("vaswani: threads:")]
    assert said == [  # apart from the thread count a busy CPU makes it say
        "vaswani: error: --compile applies to --engine torch (our own search); CTranslate2 runs compiled code already"
    ]
    result = _cli("translate", str(model_dir), "--beam", "0", stdin=b"x\n")
    assert result.returncode == 2 and b"beam_size" in result.stderr and b"Traceback" not in result.stderr


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.slow
def test_evaluate_prints_what_sacrebleu_prints(tmp_path, lowercase):
    references = read_lines(MULTI30K / "raw/val.en.gz")[:300]
    hypotheses = [" ".join(r.split()[:-2]) if i % 3 else r.replace("a", "the") for i, r in enumerate(references)]
    hypotheses = [h.upper() if i % 5 == 0 else h for i, h in enumerate(hypotheses)]  # case errors
    ref, hyp = tmp_path / "ref.en", tmp_path / "hyp.en"
    ref.write_text("\n".join(references) + "\n")
    hyp.write_text("\n".join(hypotheses) + "\n")
    lc = ["-lc"] if lowercase else []
    ours = _cli("evaluate", "--hyp", str(hyp), "--ref", str(ref), *(["--lc"] if lowercase else []))
    theirs = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(ref), "-i", str(hyp), "-m", "bleu", "chrf", "-f", "text", *lc],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.decode().splitlines() == [line.strip() for line in theirs.stdout.splitlines()]
    assert f"BLEU|nrefs:1|case:{'lc' if lowercase else 'mixed'}|eff:no|tok:13a" in theirs.stdout


@pytest.mark.parametrize("split,lang", [("test_2016_flickr", "de"), ("test_2017_flickr", "en")])
@pytest.mark.slow
def test_tok_lc_reproduces_the_multi30k_tokenized_references(split, lang):
    raw = MULTI30K / f"raw/{split}.{lang}.gz"
    reference = multi30k_tok_reference(raw)
    assert reference == MULTI30K / f"tok/{split}.lc.norm.tok.{lang}"
    assert tok_lc(read_lines(raw), lang) == read_lines(reference)


@pytest.mark.slow
def test_evaluate_tok_lc_of_the_reference_itself_is_100():
    raw = MULTI30K / "raw/test_2016_flickr.de.gz"
    result = _cli("evaluate", "--hyp", str(raw), "--ref", str(raw), "--tok-lc")
    lines = result.stdout.decode().splitlines()
    assert result.returncode == 0 and lines[2].startswith("tok-lc BLEU|") and " = 100.0 " in lines[2]
    assert "lc.norm.tok.de" in lines[2]


def test_a_model_trained_on_lowercased_text_lowercases_what_it_translates(model_dir, tmp_path):
    import dataclasses
    import shutil

    lower_dir = tmp_path / "lower"
    shutil.copytree(model_dir, lower_dir)
    config = Translator.load(model_dir).config
    ckpt.write_model_directory(
        lower_dir, dataclasses.replace(config, data=dataclasses.replace(config.data, lowercase=True))
    )
    cased, lower = Translator.load(model_dir), Translator.load(lower_dir)
    sentence, lowered = "EIN MANN FÄHRT FAHRRAD.", "ein mann fährt fahrrad."
    assert lower.translate([sentence]) == lower.translate([lowered]) == cased.translate([lowered])
    assert cased.tokenizer.encode_src([sentence]) != cased.tokenizer.encode_src([lowered])  # so the case matters


def test_the_stopping_rule_reaches_the_search_from_the_config_and_the_command_line(model_dir, monkeypatch):
    from vaswani import cli
    from vaswani.cli.translate import decode_options
    from vaswani.decode import search as search_module  # where search_ids finds beam_search

    seen = []
    search = search_module.beam_search
    monkeypatch.setattr(
        search_module,
        "beam_search",
        lambda model, src, request, *a, **kw: (
            seen.append(request.decode.early_stopping) or search(model, src, request, *a, **kw)
        ),
    )
    translator = Translator.load(model_dir)
    translator.translate(SENTENCES[:1])
    translator.translate(SENTENCES[:1], early_stopping=True)
    assert seen == [False, True]  # default: the paper's rule
    parser = cli.build_parser()
    assert decode_options(parser.parse_args(["translate", str(model_dir), "--early-stopping"]))["early_stopping"]
    assert decode_options(parser.parse_args(["translate", str(model_dir)]))["early_stopping"] is None


def test_translate_and_evaluate_show_progress_lines_and_precision_in_a_log(model_dir, tmp_path, monkeypatch, capsys):
    from vaswani import cli, console
    from vaswani.runtime import precision

    monkeypatch.setattr(console, "PLAIN_EVERY_S", 0.0)  # a line at every batch
    monkeypatch.setattr(
        precision, "measure_matmuls", lambda config, device, rows, training: Measurement(0.01, 0.02, rows)
    )
    source = tmp_path / "in.de"
    source.write_text("\n".join(SENTENCES * 3) + "\n", encoding="utf-8")
    assert cli.main(["translate", str(model_dir), "-i", str(source), "-o", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "precision auto -> fp32: decoding runs fp32 unless --precision bf16" in err
    progress = [line for line in err.splitlines() if line.startswith("translating: ")]
    assert progress[-1].startswith("translating: 18/18,") and progress[-1].endswith(", done")
    assert len(progress) >= 3 and "left" in progress[0]
    assert len((tmp_path / "out").read_text(encoding="utf-8").splitlines()) == 18

    assert (
        cli.main(["translate", str(model_dir), "-i", str(source), "-o", str(tmp_path / "out"), "--precision", "bf16"])
        == 0
    )
    assert "warning: bf16 runs at 0.50x fp32's speed" in capsys.readouterr().err
    reference = tmp_path / "ref.en"
    reference.write_text("\n".join(SENTENCES * 3) + "\n", encoding="utf-8")
    assert cli.main(["evaluate", str(model_dir), "--src", str(source), "--ref", str(reference)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("BLEU") and "translating: 18/18" in captured.err


def test_no_repeat_ngram_reaches_the_search_from_the_command_line_and_the_api(model_dir, tmp_path):
    from vaswani import cli

    translator = Translator.load(model_dir, "cpu")
    looping = [c.tokens for t in translator.translate_with_details(SENTENCES) for c in t.candidates]
    assert any(len(set(itertools.pairwise(x))) < len(x) - 1 for x in looping if x)  # the tiny model loops
    details = translator.translate_with_details(SENTENCES, n_best=2, no_repeat_ngram=2, repetition_penalty=1.2)
    for x in (c.tokens for t in details for c in t.candidates):
        assert len(set(itertools.pairwise(x))) == max(len(x) - 1, 0), x
    source, out = tmp_path / "in.de", tmp_path / "out"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert cli.main(["translate", str(model_dir), "-i", str(source), "-o", str(out), "--no-repeat-ngram", "2"]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == [t.text for t in translator.translate_with_details(
        SENTENCES, no_repeat_ngram=2)]  # fmt: skip
    assert cli.main(["translate", str(model_dir), "-i", str(source), "--repetition-penalty", "0"]) == 2


def test_translate_and_evaluate_in_int8_write_every_line_and_say_so(model_dir, tmp_path, capsys):
    from vaswani import cli

    source = tmp_path / "in.de"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert cli.main(["translate", str(model_dir), "-i", str(source), "-o", str(out), "--precision", "int8"]) == 0
    assert "precision int8: int8 linear layers" in capsys.readouterr().err
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(SENTENCES) and lines[1] == "" and lines[3] == ""
    evaluate = ["evaluate", str(model_dir), "--src", str(source), "--ref", str(source), "--precision", "int8"]
    assert cli.main(evaluate) == 0
    assert capsys.readouterr().out.startswith("BLEU")
    assert cli.main(["translate", str(model_dir), "--precision", "int8", "--engine", "ctranslate2"]) == 2
    assert "use --compute-type" in capsys.readouterr().err


@pytest.mark.slow
def test_translate_compile_runs_the_compiled_step_and_writes_the_same_lines(model_dir, tmp_path, monkeypatch):
    """`vaswani translate --compile` (decode.compile): the search runs the step search.compiled_step made, here
    through Dynamo alone (a backend that runs the graphs it is given, to keep this test to seconds)."""
    from vaswani import cli
    from vaswani.decode import search as search_module

    calls = []
    compiled = search_module.compiled_step

    def counted(model, backend="inductor"):
        step = compiled(model, backend="eager")
        return lambda *a, **kw: calls.append(1) or step(*a, **kw)

    monkeypatch.setattr(search_module, "compiled_step", counted)
    source = tmp_path / "in.de"
    source.write_text("\n".join(SENTENCES) + "\n")
    for name, flags in (("eager", []), ("compiled", ["--compile"])):
        assert cli.main(["translate", str(model_dir), "-i", str(source), "-o", str(tmp_path / name), *flags]) == 0
        assert bool(calls) == (name == "compiled")
    assert (tmp_path / "compiled").read_text() == (tmp_path / "eager").read_text()


# `vaswani` as its console script runs it (main() with the process's arguments: threads settled), then the torch
# thread count it ran with
CLI_AND_THREADS = """
import sys, torch
from vaswani.cli import main
code = main()
print(f"torch ran {torch.get_num_threads()} threads", file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.slow
def test_the_same_command_gives_the_same_lines_with_a_busy_process_beside_it(model_dir, tmp_path):
    """precision auto is settled without timing anything for decoding, so a CPU-bound process running beside
    `vaswani translate` changes nothing but the thread count (runtime/threads.py: one fewer per busy CPU): identical
    lines with fewer threads, and the lines of --precision fp32. Alone it runs a thread on every CPU it may use
    (VASWANI_THREADS: other work on a shared machine does not lower it)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if cpus < 2:
        pytest.skip("one CPU: a busy process beside leaves the thread count at 1, no different count to compare")
    source = tmp_path / "in.de"
    source.write_text("\n".join(SENTENCES * 4) + "\n", encoding="utf-8")
    automatic = {
        k: v for k, v in os.environ.items() if k not in ("VASWANI_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }

    def translate(out: str, *extra: str, env=automatic) -> tuple[list[str], int, str]:
        command = [sys.executable, "-c", CLI_AND_THREADS, "translate", str(model_dir), "-i", str(source)]
        run = subprocess.run([*command, "-o", str(tmp_path / out), *extra], capture_output=True, text=True, env=env)
        assert run.returncode == 0, run.stderr
        assert "precision auto -> fp32" in run.stderr or extra
        threads = re.findall(r"^torch ran (\d+) threads$", run.stderr, re.MULTILINE)
        assert len(threads) == 1, run.stderr
        return (tmp_path / out).read_text(encoding="utf-8").splitlines(), int(threads[0]), run.stderr

    alone, alone_threads, _ = translate("alone.en", env=automatic | {"VASWANI_THREADS": str(cpus)})
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded, loaded_threads, log = translate("loaded.en")
    finally:
        busy.kill()
        busy.wait()
    assert alone_threads == cpus and loaded_threads < cpus, (alone_threads, loaded_threads, log)
    assert alone == loaded == translate("fp32.en", "--precision", "fp32")[0]
    assert len(alone) == len(SENTENCES) * 4 and sum(bool(line) for line in alone) == 16


def test_a_model_of_several_target_languages_refuses_a_sentence_without_one(model_dir, monkeypatch, capsys, tmp_path):
    """Without --target-language a multilingual model (>>lang<< tokens) would translate into whatever it drifts
    to: the CLI, the Python API and the HTTP API refuse in one line listing the languages; a target given, or a
    sentence that starts with its own >>lang<<, translates."""
    from fastapi.testclient import TestClient

    from vaswani import cli
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.serve.app import Settings, create_app

    monkeypatch.setattr(Tokenizer, "language_tokens", property(lambda self: [">>deu<<", ">>fra<<"]))
    translator = Translator.load(model_dir)
    with pytest.raises(ValueError, match=r"^sentence 2: no target language, .* translates into deu, fra; give one"):
        translator.translate(["", "Ein Hund."])
    assert len(translator.translate(["Ein Hund.", ""], target_language="fra")) == 2
    assert len(translator.translate([">>deu<< Ein Hund."])) == 1
    source = tmp_path / "in.de"
    source.write_text("Ein Hund.\n", encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["translate", str(model_dir), "-i", str(source), "--precision", "fp32"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "translates into deu, fra" in err and "Traceback" not in err
    with TestClient(create_app(translator, model_dir, Settings())) as client:
        reply = client.post("/v1/translate", json={"text": ["Ein Hund."]})
        assert reply.status_code == 422 and "--target-language" in reply.json()["error"]
        assert client.get("/v1/model").json()["target_languages"] == ["deu", "fra"]
        reply = client.post("/v1/translate", json={"text": ["Ein Hund.", "Zwei."], "target_language": "fra"})
        assert reply.status_code == 200 and len(reply.json()["translations"]) == 2
