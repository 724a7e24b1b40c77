"""Terms as the user wrote them: term use, replacement and fluency of a glossary's translations, method by method.

    python benchmarks/terms.py runs/quick --split val                # where the method was chosen
    python benchmarks/terms.py runs/quick runs/marian --split test_2016_flickr

Two kinds of glossary, built as users build them:
1. *reference-derived*: a de→en word dictionary learned from the training pairs (Dice coefficient; the 100 most
   frequent words of each side left out), and per sentence the pairs whose source word is in the source and whose
   target word is in the reference (Post & Vilar 2018, Hu et al. 2019): words the model often writes anyway.
2. *unchosen*: one glossary of frequent source words mapped to valid words the model would not choose, and to
   invented product names (WMT 2023's terminology task tests with such "wrong" terms).

Measures (whole words, compared by case folding, never substrings):
- *term use*: occurrences of each target term in the output, against occurrences of its source term;
- *replaced*: of the occurrences whose source term the plain translation aligned to a word other than the term
  (translate/align.py), those where that word is gone (as often as the source term occurs);
- *fluency*: BLEU and chrF against the reference in which the reference's word for the source term (the training
  dictionary's translation of it) is replaced by the glossary term, beside the plain translation's BLEU on the
  original reference; and lines without a term identical to the plain translation.
Methods: `search` (the terms placed where the search fits them: dynamic beam allocation, whole words), `unbounded`
(the same without the whole-word rule: what vaswani did before), `swap` (the plain translation's aligned word
replaced in its text), `vaswani` (what `translate --glossary` does: the aligned word replaced token for token, the
constrained search where a term has no aligned word, translate/term_placement.py). A fifth method, the edited
translation forced up to its last term and searched on from there, was measured at commit b560493 (docs).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import sacrebleu
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from glossary import dictionary, sentence_terms

from vaswani.data.corpus import read_lines
from vaswani.decode.glossary import Glossary, fold, occurrences
from vaswani.decode.terms import Constraints
from vaswani.runtime.machine import cpu_name
from vaswani.translate.align import alignments
from vaswani.translate.translator import Translator

# source word: (the glossary's term, the word a reference writes for it, which the term replaces there)
UNCHOSEN = {
    "Hund": ("hound", "dog"),
    "Mann": ("gentleman", "man"),
    "Frau": ("lady", "woman"),
    "Straße": ("roadway", "street|road"),
    "Kind": ("youngster", "child|kid"),
    "Mädchen": ("lass", "girl"),
    "Junge": ("lad", "boy"),
    "Auto": ("automobile", "car"),
    "Gebäude": ("edifice", "building"),
    "Fahrrad": ("cycle", "bicycle|bike"),
    "Kamera": ("Lumix", "camera"),
    "Gitarre": ("Stratocaster", "guitar"),
}


def whole(word: str, text: str) -> int:
    return occurrences(word, text)


def aligned_words(translator: Translator, sources: list[str], plain, glossaries) -> list[list[tuple[str, str]]]:
    """Per sentence, (target term, the plain translation's word aligned to its source term) per occurrence."""
    found = alignments(translator.model, translator.tokenizer, plain, translator.encode_sources(sources))
    out = []
    for source, translation, alignment, glossary in zip(sources, plain, found, glossaries, strict=True):
        pairs = []
        for start, end, term in glossary.matches(source) if glossary else []:
            words = [w for w, (a, b) in enumerate(alignment.source) if a < end and b > start]
            targets = sorted({t for w in words for t in alignment.links[w]})
            word = " ".join(translation.text[a:b] for a, b in (alignment.target[t] for t in targets))
            pairs.append((term, re.sub(r"^\W+|\W+$", "", word)))
        out.append(pairs)
    return out


def swapped(text: str, pairs: list[tuple[str, str]]) -> str:
    """The plain translation with each aligned word replaced by its term (once per occurrence)."""
    for term, word in pairs:
        if word:
            text = re.sub(rf"(?<!\w){re.escape(word)}(?!\w)", term, text, count=1)
    return text


def measures(outputs: list[str], plain: list[str], pairs: list[list[tuple[str, str]]]) -> tuple[int, int, int, int]:
    """(term occurrences used, asked, aligned words gone, aligned words that should go)."""
    used = asked = gone = should = 0
    for out, before, found in zip(outputs, plain, pairs, strict=True):
        for term, n in Counter(t for t, _ in found).items():
            used, asked = used + min(n, whole(term, out)), asked + n
        for word, n in Counter(w for t, w in found if w and fold(w) != fold(t)).items():
            should += n
            gone += min(n, max(0, whole(word, before) - whole(word, out)))
    return used, asked, gone, should


def term_reference(reference: str, source: str, glossary: Glossary, words: dict[str, str]) -> str:
    """The reference with its word for each source term replaced by the glossary's term, once per occurrence."""
    for start, end, term in glossary.matches(source):
        word = words.get(fold(source[start:end]))
        if word:
            reference = re.sub(rf"(?<!\w)(?:{word})(?!\w)", term, reference, count=1, flags=re.IGNORECASE)
    return reference


METHODS = ("unbounded", "search", "swap", "vaswani")


def run_methods(translator, sources, glossaries, plain_texts, plain, methods) -> dict[str, list[str]]:
    request = translator.request()
    ids = translator.encode_sources(sources)
    targets = [g.targets(s) if g else [] for s, g in zip(sources, glossaries, strict=True)]
    term_ids = [translator.terms.term_ids(t) for t in targets]
    out = {}
    for name, rule in (("unbounded", ()), ("search", translator.terms.continues_word)):
        if name in methods:
            found = translator.engine(ids, request, None, Constraints.of(term_ids, rule))
            out[name] = translator.tokenizer.decode_tgt([h[0].tokens if h else [] for h in found])
    if "swap" in methods:
        pairs = aligned_words(translator, sources, plain, glossaries)
        out["swap"] = [swapped(text, p) for text, p in zip(plain_texts, pairs, strict=True)]
    if "vaswani" in methods:
        out["vaswani"] = translate_each(translator, sources, glossaries)
    return out


def translate_each(translator: Translator, sources: list[str], glossaries: list[Glossary | None]) -> list[str]:
    """Each sentence with its own glossary (sentences grouped by glossary, so that each group is one call)."""
    out = [""] * len(sources)
    groups: dict[Glossary | None, list[int]] = {}
    for i, g in enumerate(glossaries):
        groups.setdefault(g, []).append(i)
    for g, chosen in groups.items():
        texts = translator.translate([sources[i] for i in chosen], glossary=g)
        for i, text in zip(chosen, texts, strict=True):
            out[i] = text
    return out


def report(name, translator, sources, references, glossaries, words, repeats, methods) -> None:
    plain = translator.translate_with_details(sources)
    plain_texts = [t.text for t in plain]
    pairs = aligned_words(translator, sources, plain, glossaries)
    term_refs = [
        term_reference(r, s, g, words) if g else r for s, r, g in zip(sources, references, glossaries, strict=True)
    ]
    with_terms = [i for i, g in enumerate(glossaries) if g and g.matches(sources[i])]
    base = sacrebleu.corpus_bleu(plain_texts, [references]).score
    print(f"\n### {name}: {len(with_terms)} of {len(sources)} sentences hold a term; plain BLEU {base:.1f}")
    print(
        "| method | term use | replaced | BLEU (term reference) | chrF | BLEU − plain BLEU | lines without terms same |"
    )
    print("|---|---|---|---|---|---|---|")
    used, asked, gone, should = measures(plain_texts, plain_texts, pairs)
    bleu = sacrebleu.corpus_bleu(plain_texts, [term_refs]).score
    chrf = sacrebleu.corpus_chrf(plain_texts, [term_refs]).score
    print(f"| none (plain) | {used}/{asked} ({used / max(asked, 1):.1%}) | 0/{should} | {bleu:.1f} | {chrf:.1f} | | |")
    for method, outputs in run_methods(translator, sources, glossaries, plain_texts, plain, methods).items():
        used, asked, gone, should = measures(outputs, plain_texts, pairs)
        bleu = sacrebleu.corpus_bleu(outputs, [term_refs]).score
        chrf = sacrebleu.corpus_chrf(outputs, [term_refs]).score
        same = all(outputs[i] == plain_texts[i] for i in range(len(sources)) if i not in set(with_terms))
        print(
            f"| {method} | {used}/{asked} ({used / max(asked, 1):.1%}) | {gone}/{should} ({gone / max(should, 1):.1%})"
            f" | {bleu:.1f} | {chrf:.1f} | {bleu - base:+.1f} | {same} |"
        )
    if repeats:
        speed(translator, [sources[i] for i in with_terms], glossaries[with_terms[0]], repeats)


def speed(translator: Translator, subset: list[str], glossary: Glossary, repeats: int) -> None:
    times: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(repeats):
        for name, options in (("without", {}), ("with", {"glossary": glossary})):
            start = time.perf_counter()
            translator.translate(subset, **options)
            times[name].append(time.perf_counter() - start)
    rate = {k: len(subset) / statistics.median(v) for k, v in times.items()}
    print(
        f"\nspeed, the {len(subset)} sentences with a term (median of {repeats}): without {rate['without']:.1f}, with "
        f"{rate['with']:.1f} sentences/s: **{rate['with'] / rate['without']:.2f}x**"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dirs", nargs="+")
    parser.add_argument("--data", default="../shared/data/multi30k/raw")
    parser.add_argument("--split", default="val")
    parser.add_argument("--limit", type=int, default=0, help="the first N sentences only")
    parser.add_argument("--repeats", type=int, default=3, help="speed runs (0: none)")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"some of {', '.join(METHODS)}")
    args = parser.parse_args()
    data = Path(args.data)
    sources, references = read_lines(data / f"{args.split}.de.gz"), read_lines(data / f"{args.split}.en.gz")
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    words = dictionary(read_lines(data / "train.de.gz"), read_lines(data / "train.en.gz"))
    derived = [sentence_terms(s, r, words) for s, r in zip(sources, references, strict=True)]
    kinds = {
        "reference-derived": [Glossary.of(p) if p else None for p in derived],
        "unchosen (" + ", ".join(f"{k} → {v}" for k, (v, _) in UNCHOSEN.items()) + ")": [
            Glossary.of({k: v for k, (v, _) in UNCHOSEN.items()})
        ]
        * len(sources),
    }
    words = {fold(k): w for k, (_, w) in UNCHOSEN.items()}  # the references' words for the unchosen terms
    for model_dir in args.model_dirs:
        translator = Translator.load(model_dir, "cpu")
        threads = torch.get_num_threads()
        print(f"\n## {model_dir} on {args.split}: {cpu_name()}, torch {torch.__version__}, {threads} threads")
        for kind, glossaries in kinds.items():
            repeats = args.repeats if "unchosen" in kind else 0
            report(kind, translator, sources, references, glossaries, words, repeats, args.methods.split(","))


if __name__ == "__main__":
    main()
