"""The Multi30k recipes end to end: train, average the last checkpoints, translate the test sets with
beam search (the recipe file's decode section), and score them (sacreBLEU, tokenized lowercased BLEU,
chrF); prints a Markdown table.

    python benchmarks/multi30k.py                         # all four recipes (about 4 hours on 2 cores)
    python benchmarks/multi30k.py --recipes multi30k_de_en_quick
    python benchmarks/multi30k.py --skip-training         # score models that are already trained

Models go to runs/<recipe>/ (not committed). Training resumes if interrupted: run the same command again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from vaswani import evaluate
from vaswani.config import Config
from vaswani.data.corpus import read_lines
from vaswani.evaluate import language_of, multi30k_tok_reference, report, tok_lc_bleu
from vaswani.runtime.machine import cpu_name
from vaswani.train import checkpoint as ckpt
from vaswani.translate.translator import Translator

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "../shared/data/multi30k/raw"
RECIPES = ["multi30k_en_de", "multi30k_de_en", "multi30k_de_en_quick", "multi30k_en_de_lc"]
TEST_SETS = ["test_2016_flickr", "test_2017_flickr"]


def run(*command: str) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


def training_facts(model_dir: Path) -> tuple[float, float]:
    """(training wall time in minutes, median training tokens/s) from metrics.jsonl."""
    records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    elapsed = [r["elapsed_s"] for r in records if "elapsed_s" in r]
    if elapsed:
        minutes = elapsed[-1] / 60
    else:  # runs from before elapsed_s was recorded: first file to last checkpoint
        last = ckpt.checkpoint_dirs(model_dir)[-1]
        minutes = (last.stat().st_mtime - (model_dir / "data_report.json").stat().st_mtime) / 60
    return minutes, statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", nargs="+", default=RECIPES)
    parser.add_argument("--runs", default="runs", help="where the model directories go")
    parser.add_argument("--average", type=int, default=None, help="checkpoints to average (default: keep_last)")
    parser.add_argument("--skip-training", action="store_true")
    args = parser.parse_args()
    rows = []
    for recipe in args.recipes:
        config_path, model_dir = ROOT / "configs" / f"{recipe}.yaml", ROOT / args.runs / recipe
        if not args.skip_training:
            run("vaswani", "train", str(config_path), str(model_dir))
        translator = Translator.load(model_dir, device="cpu")
        # Annealed to zero at the end (lr_decay: linear), the last checkpoint is what averaging would
        # approximate, and averaging in earlier, higher-rate checkpoints lowered test BLEU (issue 43, in
        # docs/benchmarks.md's git history).
        annealed = translator.config.train.lr_decay == "linear"
        n = args.average or (1 if annealed else translator.config.train.keep_last)
        if n > 1:
            run("vaswani", "average", str(model_dir), "--last", str(n))
            translator = Translator.load(model_dir, device="cpu")
        minutes, rate = training_facts(model_dir)
        decode = Config.load(config_path).decode  # the recipe's search settings (chosen on val)
        search = f"beam {decode.beam_size}, α {decode.length_penalty}"
        if decode.early_stopping:
            search += ", early stopping"
        data = translator.config.data
        src_lang, tgt_lang = language_of(data.train_src), language_of(data.train_tgt)
        for test in TEST_SETS:
            sources = read_lines(DATA / f"{test}.{src_lang}.gz")
            ref_path = DATA / f"{test}.{tgt_lang}.gz"
            references = read_lines(ref_path)
            began = time.perf_counter()
            hypotheses = translator.translate(sources, **dataclasses.asdict(decode))
            seconds = time.perf_counter() - began
            (model_dir / f"{test}.{tgt_lang}").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
            (bleu, bleu_line), (chrf, _) = report(hypotheses, references)
            tok_ref = multi30k_tok_reference(ref_path)
            tok_bleu = tok_lc_bleu(hypotheses, read_lines(tok_ref), tgt_lang)[0].score if tok_ref else float("nan")
            print(bleu_line)
            lc_bleu = evaluate.bleu(hypotheses, references, lowercase=True).score
            rows.append(
                (
                    recipe,
                    test,
                    search,
                    bleu.score,
                    lc_bleu,
                    tok_bleu,
                    chrf.score,
                    translator.model.num_parameters(),
                    minutes,
                    rate,
                    len(sources) / seconds,
                )
            )
    print(
        f"\n{cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads; averaged checkpoints "
        "(none for a recipe annealed to zero)"
    )
    print(
        "| recipe | test set | search | sacreBLEU | sacreBLEU -lc | tok-lc BLEU | chrF | parameters | training min | "
        "train tok/s | translate sent/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for recipe, test, search, bleu, lc_bleu, tok, chrf, params, minutes, rate, speed in rows:
        print(
            f"| {recipe} | {test} | {search} | {bleu:.1f} | {lc_bleu:.1f} | {tok:.1f} | {chrf:.1f} | {params:,} | "
            f"{minutes:.0f} | {rate:,.0f} | {speed:.0f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
