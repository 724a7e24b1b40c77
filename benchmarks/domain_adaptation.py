"""Domain adaptation with `vaswani finetune`: a model trained on general Multi30k captions, adapted with a
few thousand in-domain pairs, scored on a general and an in-domain test set, with λ = 0 (in-domain loss
alone) and λ > 0 (plus λ times the loss on a sample of the original training data).

The domain is carved out of Multi30k itself (the data here has no second parallel domain): captions of
sports and games, found by keywords on the English side (SPORT below). The general model never sees them;
adaptation gets ADAPT of them, and the in-domain test set is the rest; the general test set is
test_2016_flickr without its sports captions.

    python benchmarks/domain_adaptation.py           # ~20 minutes on 2 cores; models in runs/adapt/

Prints a Markdown table (BLEU, sacreBLEU's default signature, beam 4) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gzip
import re
import subprocess
import sys
from pathlib import Path

import yaml

from vaswani.evaluate import bleu
from vaswani.runtime.machine import cpu_name
from vaswani.translate.translator import Translator

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "../shared/data/multi30k/raw"
SPORT = re.compile(
    r"\b(soccer|football|basketball|baseball|volleyball|tennis|hockey|rugby|lacrosse|softball|golf|cricket|"
    r"ball|bat|racket|goal|goalie|pitcher|batter|player|players|team|teams|game|match|referee|tackle|"
    r"skateboard\w*|skater|snowboard\w*|ski|skier|skiing|surf\w*|bmx|racing|race|wrestl\w*|boxing|"
    r"martial|karate|jersey|uniform|uniforms|field|court|stadium)\b"
)
ADAPT = 3000
ORIGINAL_SAMPLE = 3000


def read(name: str) -> list[str]:
    with gzip.open(RAW / name, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def split(out: Path) -> dict[str, tuple[str, str]]:
    """The general and in-domain files: train (general), adapt and test (sport), original sample, general test."""
    de, en = read("train.de.gz"), read("train.en.gz")
    sport = [i for i, line in enumerate(en) if SPORT.search(line.lower())]
    chosen = set(sport)
    general = [i for i in range(len(en)) if i not in chosen]
    test_de, test_en = read("test_2016_flickr.de.gz"), read("test_2016_flickr.en.gz")
    general_test = [i for i, line in enumerate(test_en) if not SPORT.search(line.lower())]
    parts = {
        "general": (general, de, en),
        "adapt": (sport[:ADAPT], de, en),
        "sport_test": (sport[ADAPT:], de, en),
        "original": (general[:: max(1, len(general) // ORIGINAL_SAMPLE)][:ORIGINAL_SAMPLE], de, en),
        "general_test": (general_test, test_de, test_en),
    }
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, (indices, src, tgt) in parts.items():
        files[name] = (
            write(out / f"{name}.de", [src[i] for i in indices]),
            write(out / f"{name}.en", [tgt[i] for i in indices]),
        )
        print(f"{name}: {len(indices)} pairs", flush=True)
    return files


def run(*command: str) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/adapt")
    parser.add_argument("--general-steps", type=int, default=2500)
    parser.add_argument("--adapt-steps", type=int, default=400)
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.0, 1.0])
    args = parser.parse_args()
    out = ROOT / args.out
    files = split(out / "data")
    base = out / "general"
    if not (base / "model.safetensors").is_file():
        run(
            "vaswani", "train", "configs/multi30k_de_en_quick.yaml", str(base),
            "--set", f"data.train_src={files['general'][0]}", "--set", f"data.train_tgt={files['general'][1]}",
            "--set", "train.max_time=null", "--set", f"train.max_steps={args.general_steps}",
        )  # fmt: skip
    models = {"general model": base}
    for lam in args.lambdas:
        recipe = {
            "data": {
                "train_src": files["adapt"][0],
                "train_tgt": files["adapt"][1],
                "valid_src": files["sport_test"][0],
                "valid_tgt": files["sport_test"][1],
                "max_tokens": 1600,
                "valid_max_sentences": 200,
            },
            "train": {
                "max_steps": args.adapt_steps,
                "lr_schedule": "constant",
                "peak_lr": 5e-4,
                "warmup_steps": 50,
                "lr_decay": "linear",
                "valid_every": args.adapt_steps,
                "keep_last": 1,
            },
            "finetune": {"aux_weight": lam},
        }
        if lam:
            recipe["finetune"].update(original_src=files["original"][0], original_tgt=files["original"][1])
        path = out / f"adapt_{lam:g}.yaml"
        path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
        target = out / f"adapted_lambda_{lam:g}"
        if not (target / "model.safetensors").is_file():
            run("vaswani", "finetune", str(base), str(path), str(target))
        models[f"adapted, λ = {lam:g}" + ("" if lam else " (in-domain loss alone)")] = target
    print(f"\nCPU: {cpu_name()}; beam 4, α 0.6; BLEU: sacreBLEU 13a, cased\n")
    print("| model | general test (test_2016_flickr without sports, BLEU) | sports test (BLEU) |")
    print("|---|---|---|")
    for name, directory in models.items():
        translator = Translator.load(directory, "cpu")
        scores = []
        for test in ("general_test", "sport_test"):
            src, tgt = (Path(p).read_text(encoding="utf-8").splitlines() for p in files[test])
            scores.append(bleu(translator.translate(src), tgt).score)
        print(f"| {name} | {scores[0]:.1f} | {scores[1]:.1f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
