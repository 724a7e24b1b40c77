"""No repetition loops (issue 42): repeated trigrams, BLEU and speed with `--no-repeat-ngram` and
`--repetition-penalty`, on test_2016_flickr and on inputs that make a weak model loop.

    python benchmarks/repetition.py runs/quick

For each setting (none; no_repeat_ngram 3; repetition_penalty 1.2):
- outputs that hold a token trigram twice (what no_repeat_ngram 3 forbids) and a word trigram twice;
- sacreBLEU and chrF on test_2016_flickr, and lines changed;
- the loop inputs: test sentences repeated four times on one line (a weak model drops or loops on them), with the
  same counts;
- sentences/s on the test set, beam 4.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import sacrebleu
import torch

from vaswani.data.corpus import read_lines
from vaswani.runtime.machine import cpu_name
from vaswani.translate.translator import Translator

SETTINGS = {
    "none": {},
    "no_repeat_ngram 3": {"no_repeat_ngram": 3},
    "repetition_penalty 1.2": {"repetition_penalty": 1.2},
}


def repeats(items: list, n: int = 3) -> bool:
    """Whether some n-gram of `items` occurs twice."""
    grams = [tuple(items[i : i + n]) for i in range(len(items) - n + 1)]
    return len(grams) != len(set(grams))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--data", default="../shared/data/multi30k/raw")
    parser.add_argument("--test", default="test_2016_flickr")
    args = parser.parse_args()
    data = Path(args.data)
    translator = Translator.load(args.model_dir, "cpu")
    sources, references = read_lines(data / f"{args.test}.de.gz"), read_lines(data / f"{args.test}.en.gz")
    loops = [" ".join([s] * 4) for s in sources[:200]]
    print(f"# {cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads; {args.model_dir}")
    print(
        "| setting | test: token / word trigram twice | sacreBLEU | chrF | lines changed | sentences/s "
        "| loop inputs: token / word trigram twice |"
    )
    print("|---|---|---|---|---|---|---|")
    plain = None
    for name, options in SETTINGS.items():
        started = time.perf_counter()
        found = translator.translate_with_details(sources, **options)
        speed = len(sources) / (time.perf_counter() - started)
        texts = [t.text for t in found]
        plain = plain or texts
        looped = translator.translate_with_details(loops, **options)
        token = sum(repeats(t.candidates[0].tokens) for t in found if t.candidates)
        word = sum(repeats(t.split()) for t in texts)
        loop_token = sum(repeats(t.candidates[0].tokens) for t in looped if t.candidates)
        loop_word = sum(repeats(t.text.split()) for t in looped)
        bleu = sacrebleu.corpus_bleu(texts, [references]).score
        chrf = sacrebleu.corpus_chrf(texts, [references]).score
        changed = sum(a != b for a, b in zip(plain, texts, strict=True))
        print(
            f"| {name} | {token} / {word} of {len(texts)} | {bleu:.1f} | {chrf:.1f} | {changed} | {speed:.1f} "
            f"| {loop_token} / {loop_word} of {len(loops)} |"
        )


if __name__ == "__main__":
    main()
