"""Terms as the user wrote them, measured from the output text alone: does the term stand in the translation, is the
model's own word for it gone, and what does it cost the rest of the sentence.

    python benchmarks/terms.py runs/quick                           # val, test_2016_flickr, test_2017_flickr
    python benchmarks/terms.py runs/quick --splits val --repeats 0  # no speed runs

Each glossary maps frequent German words to English words the model does not write for them, with the word it does
write known in advance (Hund → hound where the model writes dog; WMT 2023's terminology task tests with such terms).
Nothing here reads vaswani's alignment or its glossary code: every count is a regular expression over the texts.

- *asked*: whole-word, case-insensitive occurrences of a glossary's source word in the source;
- *term use*: of those, how many the output holds as whole words (no more than asked, per sentence and term);
- *model's word kept*: of those, how many times the model's own word (dog) still stands in the output; the same count
  in the plain translation says how well the model's word was known (it should be near all);
- *BLEU*: the glossary's output against the reference with its word for the term (the model's word, where the
  reference uses it) replaced by the term, beside the plain translation against the reference as it is. Where the loss
  comes from: *find and replace* (the plain translation with the model's word replaced by the term, its article a/an
  agreed) against the same term reference is what the term itself costs; vaswani's output against find and replace
  is what its method changes beyond the word. Sentences without a term must come out as the plain translation.

Multi30k's validation split is where the placement was chosen; test_2016_flickr and test_2017_flickr were not looked
at for it (the 2017 MSCOCO set is not in ../shared/data). Results: benchmarks/results/terms.json (commit, splits).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import sacrebleu
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import stamp

from vaswani.data.corpus import read_lines
from vaswani.decode.glossary import Glossary
from vaswani.translate.translator import Translator

# glossary: source word -> (the term asked for, the model's own word for it as a regular expression), fixed before
# any measurement
GLOSSARIES = {
    "people": {
        "Mann": ("gentleman", "man"),
        "Frau": ("lady", "woman"),
        "Kind": ("youngster", "child|kid"),
        "Mädchen": ("lass", "girl"),
        "Junge": ("lad", "boy"),
    },
    "things": {
        "Hund": ("hound", "dog"),
        "Auto": ("automobile", "car"),
        "Gebäude": ("edifice", "building"),
        "Fahrrad": ("cycle", "bicycle|bike"),
        "Straße": ("roadway", "street|road"),
    },
    "names": {
        "Kamera": ("Lumix", "camera"),
        "Gitarre": ("Stratocaster", "guitar"),
        "Ball": ("sphere", "ball"),
        "Strand": ("seashore", "beach"),
        "Hut": ("fedora", "hat"),
    },
}
SPLITS = ("val", "test_2016_flickr", "test_2017_flickr")
HEADER = (
    "| split | glossary | sentences with a term | term use | model's word kept | plain BLEU | vaswani BLEU (term ref.) "
    "| loss | of it, the term (find and replace) | of it, a/an not agreed | of it, the rest "
    "| lines without terms as plain |"
)


def count(pattern: str, text: str) -> int:
    """How often `pattern` stands in `text` as whole words, case aside."""
    return len(re.findall(rf"(?<!\w)(?:{pattern})(?!\w)", text, flags=re.IGNORECASE))


def put_term(text: str, word: str, term: str, times: int) -> str:
    """`text` with its first `times` whole-word occurrences of `word` (a pattern) replaced by `term`, an indefinite
    article right before each agreed with the term (a lad, an automobile)."""

    def swap(m: re.Match) -> str:
        article = m.group(1)
        if article:
            an = term[0].lower() in "aeiou"
            article = (("An" if an else "A") if article[0] == "A" else ("an" if an else "a")) + m.group(2)
        return (article or "") + term

    return re.sub(rf"(?<!\w)(?:(an?|An?)(\s+))?(?:{word})(?!\w)", swap, text, count=times, flags=re.IGNORECASE)


def articles_agreed(text: str, glossary: dict) -> str:
    """`text` with an indefinite article right before a glossary term agreed with it (a diagnostic: how much of
    the method's loss is "a automobile")."""
    for term, _ in glossary.values():
        text = put_term(text, re.escape(term), term, 0)
    return text


def asked(source: str, glossary: dict) -> dict[str, int]:
    """Per source word of the glossary, how often the source asks for its term."""
    return {k: n for k in glossary if (n := count(re.escape(k), source))}


def term_counts(outputs: list[str], wants: list[dict[str, int]], glossary: dict) -> dict[str, int]:
    """Terms asked, used, and the model's word kept, counted in the texts."""
    total = {"asked": 0, "used": 0, "model_word_kept": 0}
    for out, want in zip(outputs, wants, strict=True):
        for source, n in want.items():
            term, word = glossary[source]
            total["asked"] += n
            total["used"] += min(n, count(re.escape(term), out))
            total["model_word_kept"] += min(n, count(word, out))
    return total


def replaced(texts: list[str], wants: list[dict[str, int]], glossary: dict) -> list[str]:
    """Each text with the model's word replaced by the term, as often as the source asks for it."""
    out = []
    for text, want in zip(texts, wants, strict=True):
        for source, n in want.items():
            term, word = glossary[source]
            text = put_term(text, word, term, n)
        out.append(text)
    return out


def bleu(outputs: list[str], references: list[str], rows: list[int]) -> float:
    return sacrebleu.corpus_bleu([outputs[i] for i in rows], [[references[i] for i in rows]]).score


def measure(translator, sources, references, plain, glossary: dict) -> dict:
    """One glossary on one split: term counts, BLEU whole and on the sentences with a term, and the changes."""
    wants = [asked(s, glossary) for s in sources]
    outputs = translator.translate(sources, glossary=Glossary.of({k: t for k, (t, _) in glossary.items()}))
    term_refs = replaced(references, wants, glossary)
    found = replaced(plain, wants, glossary)  # find and replace in the plain translation
    agreed = [articles_agreed(text, glossary) for text in outputs]
    every, with_terms = list(range(len(sources))), [i for i, w in enumerate(wants) if w]
    without = [i for i in every if not wants[i]]
    result = {"sentences": len(sources), "with_terms": len(with_terms)}
    result["plain"] = term_counts(plain, wants, glossary)
    result["vaswani"] = term_counts(outputs, wants, glossary)
    result["find_and_replace"] = term_counts(found, wants, glossary)
    for name, rows in (("all", every), ("with_terms", with_terms)):
        result[f"bleu_{name}"] = {
            "plain, reference": bleu(plain, references, rows),
            "plain, term reference": bleu(plain, term_refs, rows),
            "find and replace, term reference": bleu(found, term_refs, rows),
            "vaswani, term reference": bleu(outputs, term_refs, rows),
            "vaswani with a/an agreed, term reference": bleu(agreed, term_refs, rows),
        }
    result["chrf_vaswani_term_reference"] = sacrebleu.corpus_chrf(outputs, [term_refs]).score
    result["lines_without_terms_as_plain"] = sum(outputs[i] == plain[i] for i in without)
    result["lines_without_terms"] = len(without)
    result["lines_with_terms_as_find_and_replace"] = sum(outputs[i] == found[i] for i in with_terms)
    result["lines_with_an_article_to_agree"] = sum(outputs[i] != agreed[i] for i in with_terms)
    result["examples"] = [
        {"source": sources[i], "plain": plain[i], "vaswani": outputs[i], "term_reference": term_refs[i]}
        for i in with_terms
        if outputs[i] != found[i]
    ][:8]
    return result


def speed(translator: Translator, sources: list[str], glossary: dict, repeats: int) -> dict:
    """Sentences/s with the glossary and without, on the sentences that hold a term: medians of `repeats`."""
    subset = [s for s in sources if asked(s, glossary)]
    terms = Glossary.of({k: t for k, (t, _) in glossary.items()})
    times: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(repeats):
        for name, options in (("without", {}), ("with", {"glossary": terms})):
            start = time.perf_counter()
            translator.translate(subset, **options)
            times[name].append(time.perf_counter() - start)
    rate = {k: len(subset) / statistics.median(v) for k, v in times.items()}
    return {"sentences": len(subset), **rate, "ratio": rate["with"] / rate["without"]}


def row(split: str, name: str, r: dict) -> str:
    v, p, b = r["vaswani"], r["plain"], r["bleu_all"]
    loss = b["vaswani, term reference"] - b["plain, reference"]
    replace = b["find and replace, term reference"] - b["plain, reference"]
    article = b["vaswani, term reference"] - b["vaswani with a/an agreed, term reference"]
    return (
        f"| {split} | {name} | {r['with_terms']} | {v['used']}/{v['asked']} | {v['model_word_kept']} "
        f"({p['model_word_kept']} plain) | {b['plain, reference']:.1f} | {b['vaswani, term reference']:.1f} "
        f"| {loss:+.1f} | {replace:+.1f} | {article:+.1f} | {loss - replace - article:+.1f} "
        f"| {r['lines_without_terms_as_plain']}/{r['lines_without_terms']} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--data", default="../shared/data/multi30k/raw")
    parser.add_argument("--splits", default=",".join(SPLITS))
    parser.add_argument("--repeats", type=int, default=3, help="speed runs on val (0: none)")
    parser.add_argument("--out", default="benchmarks/results/terms.json")
    args = parser.parse_args()
    data, splits = Path(args.data), args.splits.split(",")
    translator = Translator.load(args.model_dir, "cpu")
    results: dict = {"model": args.model_dir, "glossaries": GLOSSARIES, "splits": {}}
    print(HEADER)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for split in splits:
        sources, references = read_lines(data / f"{split}.de.gz"), read_lines(data / f"{split}.en.gz")
        plain = translator.translate(sources)
        results["splits"][split] = {}
        for name, glossary in GLOSSARIES.items():
            result = measure(translator, sources, references, plain, glossary)
            if args.repeats and split == splits[0]:
                result["speed"] = speed(translator, sources, glossary, args.repeats)
            results["splits"][split][name] = result
            print(row(split, name, result), flush=True)
    header = stamp("Multi30k " + ", ".join(splits) + " (val chose the method)")
    header["torch_threads"] = torch.get_num_threads()
    Path(args.out).write_text(json.dumps({**header, **results}, indent=1, ensure_ascii=False) + "\n")
    print(f"\n{args.out}")


if __name__ == "__main__":
    main()
