"""Glossaries (issue 42): term use, BLEU and speed of the lexically constrained search on test_2016_flickr.

    python benchmarks/glossary.py runs/quick
    python benchmarks/glossary.py runs/quick --data ../shared/data/multi30k/raw --repeats 3

1. Reference-derived glossaries (the setting of Post & Vilar 2018 and Hu et al. 2019): a de→en word dictionary
   learned from the training pairs (Dice coefficient of words that occur in the same pair; the 100 most frequent
   words of each side left out), and for each test sentence the dictionary's pairs whose source word is in the
   source and whose target word, as the reference writes it, is in the reference: the sentence's own glossary.
   BLEU and chrF with and without.
2. Terms the model would not choose by itself (Hund → canine, ...), one glossary for the whole test set: the
   share of occurrences whose target term is in the translation, against the plain search's; BLEU.
3. Speed: the sentences that hold a term of (2), translated with the glossary and without (beam 4, batch 64),
   sentences/s, alternating, median of `--repeats`.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections import Counter
from pathlib import Path

import sacrebleu
import torch

from vaswani.data.corpus import read_lines
from vaswani.decode.glossary import Glossary, missing
from vaswani.runtime.machine import cpu_name
from vaswani.translate.translator import Translator

WORD = re.compile(r"\w+")
UNUSUAL = {
    "Hund": "canine",
    "Mann": "gentleman",
    "Frau": "lady",
    "Straße": "roadway",
    "Fahrrad": "velocipede",
    "Kind": "youngster",
    "Wasser": "aqua",
    "Ball": "sphere",
    "Auto": "automobile",
    "Gebäude": "edifice",
}


def dictionary(src: list[str], tgt: list[str], min_count: int = 10, min_dice: float = 0.3) -> dict[str, str]:
    """source word -> its target word by the Dice coefficient over the training pairs (lowercased words)."""
    src_words = [set(WORD.findall(s.lower())) for s in src]
    tgt_words = [set(WORD.findall(t.lower())) for t in tgt]
    src_df, tgt_df = Counter(w for s in src_words for w in s), Counter(w for t in tgt_words for w in t)
    common = {w for w, _ in src_df.most_common(100)} | {w for w, _ in tgt_df.most_common(100)}
    keep_src = {w for w, n in src_df.items() if n >= min_count and w not in common and len(w) > 2}
    keep_tgt = {w for w, n in tgt_df.items() if n >= min_count and w not in common and len(w) > 2}
    pairs = Counter()
    for s, t in zip(src_words, tgt_words, strict=True):
        tt = t & keep_tgt
        for a in s & keep_src:
            pairs.update((a, b) for b in tt)
    best: dict[str, tuple[float, str]] = {}
    for (a, b), n in pairs.items():
        dice = 2 * n / (src_df[a] + tgt_df[b])
        if dice >= min_dice and dice > best.get(a, (0.0, ""))[0]:
            best[a] = (dice, b)
    return {a: b for a, (_, b) in best.items()}


def sentence_terms(source: str, reference: str, words: dict[str, str]) -> list[tuple[str, str]]:
    """The dictionary's pairs for this sentence: source word in the source, target word in the reference, both as
    these sentences write them."""
    ref_words = {w.lower(): w for w in reversed(WORD.findall(reference))}  # the first spelling of each word
    out = []
    for word in dict.fromkeys(WORD.findall(source)):
        target = words.get(word.lower())
        if target and target in ref_words:
            out.append((word, ref_words[target]))
    return out


def translate_each(translator: Translator, sources: list[str], glossaries: list[Glossary | None]) -> list[str]:
    """Each sentence with its own glossary, through the engine at once (per-sentence constraints)."""
    request = translator.request()
    ids = translator.encode_sources(sources)
    pairs = zip(sources, glossaries, strict=True)
    constraints = [translator.terms.term_ids(g.targets(s)) if g else [] for s, g in pairs]
    found = translator.engine(ids, request, None, constraints)
    return translator.tokenizer.decode_tgt([hyps[0].tokens if hyps else [] for hyps in found])


def scores(hypotheses: list[str], references: list[str]) -> str:
    bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    chrf = sacrebleu.corpus_chrf(hypotheses, [references]).score
    return f"BLEU {bleu:.1f}, chrF {chrf:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--data", default="../shared/data/multi30k/raw")
    parser.add_argument("--test", default="test_2016_flickr")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = Path(args.data)
    torch.set_num_threads(torch.get_num_threads())
    translator = Translator.load(args.model_dir, "cpu")
    sources, references = read_lines(data / f"{args.test}.de.gz"), read_lines(data / f"{args.test}.en.gz")
    print(f"# {cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads; {args.model_dir}")

    plain = translator.translate(sources)
    words = dictionary(read_lines(data / "train.de.gz"), read_lines(data / "train.en.gz"))
    per_sentence = [sentence_terms(s, r, words) for s, r in zip(sources, references, strict=True)]
    glossaries = [Glossary.of(p) if p else None for p in per_sentence]
    derived = translate_each(translator, sources, glossaries)
    asked = sum(len(g.targets(s)) for s, g in zip(sources, glossaries, strict=True) if g)
    lost = sum(len(missing(g.targets(s), t)) for s, g, t in zip(sources, glossaries, derived, strict=True) if g)
    with_terms = sum(g is not None for g in glossaries)
    print("\n## Reference-derived glossaries")
    print(f"dictionary: {len(words)} words; sentences with terms: {with_terms} of {len(sources)}; terms: {asked}")
    print(f"- without a glossary: {scores(plain, references)}")
    print(f"- with each sentence's glossary: {scores(derived, references)}; terms missing: {lost}")
    changed = sum(a != b for a, b in zip(plain, derived, strict=True))
    same = all(p == d for p, d, g in zip(plain, derived, glossaries, strict=True) if g is None)
    print(f"- lines changed: {changed}; every line without a term unchanged: {same}")

    glossary = Glossary.of(UNUSUAL)
    found = translator.translate_with_details(sources, glossary=glossary)
    occurrences = [(i, term) for i, s in enumerate(sources) for term in glossary.targets(s)]
    used = sum(1 for i, term in occurrences if term in found[i].text)
    by_itself = sum(1 for i, term in occurrences if term in plain[i])
    print("\n## Terms the model would not choose (" + ", ".join(f"{k} → {v}" for k, v in UNUSUAL.items()) + ")")
    print(f"- occurrences: {len(occurrences)} in {len({i for i, _ in occurrences})} sentences")
    print(f"- term in the translation: {used} ({used / len(occurrences):.1%}); without the glossary: {by_itself}")
    print(f"- {scores([t.text for t in found], references)} (without: {scores(plain, references)})")

    chosen = sorted({i for i, _ in occurrences})
    subset = [sources[i] for i in chosen]
    times: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(args.repeats):
        for name, options in (("without", {}), ("with", {"glossary": glossary})):
            start = time.perf_counter()
            translator.translate(subset, **options)
            times[name].append(time.perf_counter() - start)
    speed = {k: len(subset) / statistics.median(v) for k, v in times.items()}
    print(f"\n## Speed ({len(subset)} sentences with terms, beam 4, median of {args.repeats})")
    print(
        f"- without: {speed['without']:.1f} sentences/s; with: {speed['with']:.1f} sentences/s; "
        f"ratio {speed['with'] / speed['without']:.2f}x"
    )


if __name__ == "__main__":
    main()
