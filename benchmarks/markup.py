"""Markup (issue 42): tags kept, text as line mode, tags around the right words, on test_2016_flickr as HTML.

    python benchmarks/markup.py runs/quick
    python benchmarks/markup.py runs/quick --layer 2        # read another layer's heads (default: the penultimate)

The test document: the 1,000 sentences of test_2016_flickr in paragraphs of five, each sentence with up to two of
its words wrapped in inline tags (`<b>`, `<i>`, `<a href=…>`, `<span class=…>`, each with an id). A word is
wrapped where its translation is known: a de→en word dictionary learned from the training pairs
(benchmarks/glossary.py), the word once in the source, its dictionary translation once in the line-mode
translation. Measured:
1. every tag kept (the multiset of tags before and after), the output well formed;
2. the text equal to line mode: each paragraph's sentences as found in the HTML are the test's sentences, and
   their translations are line mode's;
3. placement: the tag's words in the output are the known translation (punctuation aside);
4. speed: the document through `translate_markup` against its sentences through line mode.
The same for Markdown (`**…**`, `*…*`, `[…](…)`; links scored by their unique destination).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import torch

from vaswani.data.corpus import read_lines
from vaswani.runtime.machine import cpu_name
from vaswani.translate import align
from vaswani.translate.formats import translate_markup
from vaswani.translate.markup import Mark, parse, pieces
from vaswani.translate.translator import Translator

sys.path.insert(0, str(Path(__file__).parent))
from glossary import WORD, dictionary

HTML_TAGS = ('<b id="t{k}">', "</b>"), ('<i id="t{k}">', "</i>"), ('<a href="https://example.org/{k}">', "</a>")
HTML_TAGS += (('<span class="term" id="t{k}">', "</span>"),)
MD_TAGS = ("**", "**"), ("*", "*"), ("[", "](https://example.org/{k})")


def known_words(source: str, translation: str, words: dict[str, str]) -> list[tuple[str, str]]:
    """(source word, its translation) where the word is once in the source and its translation once in the output."""
    src = WORD.findall(source)
    out = [w.lower() for w in WORD.findall(translation)]
    pairs = []
    for word in src:
        target = words.get(word.lower())
        if target and src.count(word) == 1 and out.count(target) == 1 and not any(t == target for _, t in pairs):
            pairs.append((word, target))
    return pairs[:2]


def tagged(source: str, pairs: list[tuple[str, str]], tags, first: int) -> str:
    out = source
    for j, (word, _) in enumerate(pairs):
        k = first + j
        opening, closing = tags[k % len(tags)]
        wrap = opening.format(k=k) + word + closing.format(k=k)
        out = re.sub(rf"(?<!\w){re.escape(word)}(?!\w)", lambda _, wrap=wrap: wrap, out, count=1)
    return out


def marks(markup) -> list[tuple[Mark, str]]:
    """Every mark of a parsed document with the text it wraps."""
    out = []

    def visit(nodes, text):
        for node in nodes:
            if isinstance(node, Mark):
                out.append((node, text[node.start : node.end]))
                visit(node.children, text)

    for run in markup.runs:
        visit(run.children, run.text)
    return out


def measure(name, translator, sources, plain, pairs, tags, fmt, args_show=False) -> None:
    paragraphs, expected, sentence_of, k = [], {}, {}, 0
    for p in range(0, len(sources), 5):
        parts = []
        for i in range(p, min(p + 5, len(sources))):
            parts.append(tagged(sources[i], pairs[i], tags, k))
            for j, (_, target) in enumerate(pairs[i]):
                expected[k + j], sentence_of[k + j] = target, sources[i]
            k += len(pairs[i])
        paragraphs.append(" ".join(parts))
    document = "".join(f"<p>{p}</p>\n" for p in paragraphs) if fmt == "html" else "\n\n".join(paragraphs) + "\n"
    started = time.perf_counter()
    [result] = translate_markup(translator, [document], fmt)
    markup_time = time.perf_counter() - started
    found = [s.source for r in result.runs for s in r.sentences]
    started = time.perf_counter()
    line_mode = translator.translate(found)  # the sentences as the document's splitting found them
    line_time = time.perf_counter() - started

    before, after = parse(document, fmt), parse(result.text, fmt)
    outputs = [s.text for r in result.runs for s in r.sentences]
    as_line_mode = sum(a == b for a, b in zip(outputs, line_mode, strict=True))
    texts_after, texts_line, i = [run.text for run in after.runs], [], 0
    for run in result.runs:
        texts_line.append(run.document.join(line_mode[i : i + len(run.sentences)], run.spaced))
        i += len(run.sentences)
    same_text = sum(a == b for a, b in zip(texts_after, texts_line, strict=True))
    print(f"\n## {name}")
    print(f"- tags and kept spans: {sum(pieces(before).values())}, the same after: {pieces(before) == pieces(after)}")
    print(
        f"- sentences found in the {fmt}: {len(found)} ({sum(s in found for s in sources)} of the test's "
        f"{len(sources)} as they are; where a sentence has no full stop, the next one joins it)"
    )
    print(
        f"- translations equal to line mode's of the same sentences: {as_line_mode} of {len(found)}; "
        f"paragraphs' text without the tags equal to line mode's: {same_text} of {len(texts_line)}"
    )
    right = total = 0
    as_found = set(found)  # a sentence joined with the next has another translation: its words are not known
    for mark, text in marks(after):
        key = re.search(r"(?:id=\"t|example\.org/)(\d+)", mark.open + mark.close)
        if key is None or int(key.group(1)) not in expected or sentence_of[int(key.group(1))] not in as_found:
            continue
        total += 1
        right += text.strip().strip(".,;:!?\"'").lower() == expected[int(key.group(1))]
        if args_show and text.strip().strip(".,;:!?\"'").lower() != expected[int(key.group(1))]:
            print(f"  {text!r} for {expected[int(key.group(1))]!r}")
    print(f"- tags around the known translation: {right} of {total} ({right / max(total, 1):.1%})")
    print(f"- time: {markup_time:.2f} s with markup, {line_time:.2f} s line mode ({line_time / markup_time:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--data", default="../shared/data/multi30k/raw")
    parser.add_argument("--test", default="test_2016_flickr")
    parser.add_argument("--layer", type=int, default=None, help="the decoder layer whose heads align (0-based)")
    parser.add_argument("--show", action="store_true", help="print each misplaced tag's words")
    args = parser.parse_args()
    data = Path(args.data)
    translator = Translator.load(args.model_dir, "cpu")
    if args.layer is not None:
        align.layers_of = lambda n: [args.layer]
    sources = read_lines(data / f"{args.test}.de.gz")
    print(f"# {cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads; {args.model_dir}")
    plain = translator.translate(sources)
    words = dictionary(read_lines(data / "train.de.gz"), read_lines(data / "train.en.gz"))
    pairs = [known_words(s, t, words) for s, t in zip(sources, plain, strict=True)]
    print(f"words wrapped: {sum(map(len, pairs))} in {sum(bool(p) for p in pairs)} sentences")
    measure("HTML", translator, sources, plain, pairs, HTML_TAGS, "html", args.show)
    measure("Markdown", translator, sources, plain, pairs, MD_TAGS, "markdown")


if __name__ == "__main__":
    main()
