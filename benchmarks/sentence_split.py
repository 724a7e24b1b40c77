"""Sentence splitters compared on what `--document` and the API's split_sentences meet: German and English.

Two tests, each splitter given one line at a time as translate/sentences.py gives it:
  * Multi30k paragraphs: the test_2016_flickr sentences that end in . ! or ? (98% of the German, 95% of the
    English), joined four at a time with a space. Scored: the gold sentences a splitter returns exactly
    (recall), the sentences it returns that are gold (precision), the paragraphs it cuts exactly right.
  * A challenge set written by hand: abbreviations, ordinals, decimals, times, quotes, initials, ellipses, URLs,
    text without final punctuation. Scored: the texts cut exactly right.
Speed: sentences per second over the Multi30k paragraphs (one CPU thread of Python).

    pip install pysbd sentencex blingfire syntok sentence-splitter
    python benchmarks/sentence_split.py            # a splitter that is not installed is skipped
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from vaswani.data.corpus import read_lines
from vaswani.translate.sentences import _pysbd_spans, rule_spans

MULTI30K = Path(__file__).resolve().parents[1] / "../shared/data/multi30k/raw"

# (language, text, the sentences it holds)
CHALLENGES = [
    ("de", "Dr. Müller kam am 3. Oktober an. Er war spät.", ["Dr. Müller kam am 3. Oktober an.", "Er war spät."]),
    (
        "de",
        "Das kostet 3.50 Euro, z.B. im Laden. Wir gehen heim.",
        ["Das kostet 3.50 Euro, z.B. im Laden.", "Wir gehen heim."],
    ),
    ("de", "Er sagt: „Komm her.“ Dann ging er.", ["Er sagt: „Komm her.“", "Dann ging er."]),
    ("de", "Ein Mann fährt Fahrrad", ["Ein Mann fährt Fahrrad"]),
    ("de", "Ein Mann fährt Fahrrad. Zwei Hunde spielen", ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen"]),
    ("de", "Was? Wirklich! Ja...", ["Was?", "Wirklich!", "Ja..."]),
    (
        "de",
        "Der Zug fährt um 14.30 Uhr ab. Bitte sei pünktlich.",
        ["Der Zug fährt um 14.30 Uhr ab.", "Bitte sei pünktlich."],
    ),
    (
        "de",
        "Wir trafen Prof. Schmidt u. a. in Berlin. Es regnete.",
        ["Wir trafen Prof. Schmidt u. a. in Berlin.", "Es regnete."],
    ),
    (
        "de",
        "Sie wohnt in der Hauptstr. 5 in Bonn. Das ist nah.",
        ["Sie wohnt in der Hauptstr. 5 in Bonn.", "Das ist nah."],
    ),
    ("de", "Siehe www.example.de für mehr. Danke!", ["Siehe www.example.de für mehr.", "Danke!"]),
    ("de", "Er wurde 1990 geboren. 2010 zog er um.", ["Er wurde 1990 geboren.", "2010 zog er um."]),
    (
        "de",
        "Das ist Nr. 7 der Liste (siehe S. 4). Weiter geht es.",
        ["Das ist Nr. 7 der Liste (siehe S. 4).", "Weiter geht es."],
    ),
    (
        "en",
        "Mr. Smith went to Washington, D.C. on Jan. 5. He arrived at 3 p.m. yesterday.",
        ["Mr. Smith went to Washington, D.C. on Jan. 5.", "He arrived at 3 p.m. yesterday."],
    ),
    ("en", "The U.S. economy grew 2.5 percent. Prices rose.", ["The U.S. economy grew 2.5 percent.", "Prices rose."]),
    ("en", 'He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("en", "A man rides a bike", ["A man rides a bike"]),
    ("en", "It costs $4.50. That is cheap!", ["It costs $4.50.", "That is cheap!"]),
    ("en", "J. R. R. Tolkien wrote it. It is long.", ["J. R. R. Tolkien wrote it.", "It is long."]),
    ("en", "Is it? Yes! It is... maybe not.", ["Is it?", "Yes!", "It is... maybe not."]),
    ("en", "Email me at jo.doe@example.com. Thanks.", ["Email me at jo.doe@example.com.", "Thanks."]),
    ("en", "She works for Acme Inc. in London. It pays well.", ["She works for Acme Inc. in London.", "It pays well."]),
    ("en", "(This is an aside.) The main text goes on.", ["(This is an aside.)", "The main text goes on."]),
    ("en", "A dog runs. a cat sleeps.", ["A dog runs.", "a cat sleeps."]),
    ("en", "The results (see Fig. 2) are clear. We agree.", ["The results (see Fig. 2) are clear.", "We agree."]),
]


def splitters() -> dict[str, Callable[[str, str], list[str]]]:
    """Each installed splitter as f(line, language) -> its sentences, stripped."""
    found: dict[str, Callable[[str, str], list[str]]] = {}

    def spans(function):
        return lambda line, language: [line[a:b] for a, b in function(line, language)]

    found["pysbd (chosen)"] = spans(lambda line, language: _pysbd_spans(line, language) or [])
    try:
        import sentencex

        found["sentencex"] = lambda line, language: [s.strip() for s in sentencex.segment(language, line) if s.strip()]
    except ImportError:
        pass
    try:
        import blingfire

        found["blingfire"] = lambda line, language: [s for s in blingfire.text_to_sentences(line).split("\n") if s]
    except ImportError:
        pass
    try:
        import syntok.segmenter as syntok

        def _syntok(line, language):
            return [
                "".join(t.spacing + t.value for t in sentence).strip()
                for paragraph in syntok.process(line)
                for sentence in paragraph
            ]

        found["syntok"] = _syntok
    except ImportError:
        pass
    try:
        from sentence_splitter import SentenceSplitter

        moses = {}

        def _moses(line, language):
            if language not in moses:
                moses[language] = SentenceSplitter(language=language)
            return moses[language].split(line)

        found["sentence-splitter (Moses)"] = _moses
    except ImportError:
        pass
    found["vaswani rules (fallback)"] = spans(lambda line, language: rule_spans(line))
    return found


def paragraphs(language: str, size: int) -> list[list[str]]:
    sentences = [s.strip() for s in read_lines(MULTI30K / f"test_2016_flickr.{language}.gz")]
    sentences = [s for s in sentences if s[-1:] in ".!?"]
    return [sentences[i : i + size] for i in range(0, len(sentences) - size + 1, size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4, help="sentences per Multi30k paragraph")
    args = parser.parse_args()
    rows = []
    for name, split in splitters().items():
        row = [name]
        for language in ("de", "en"):
            gold_total = found_total = hit = exact = 0
            groups = paragraphs(language, args.size)
            started = time.perf_counter()
            for group in groups:
                got = split(" ".join(group), language)
                gold_total += len(group)
                found_total += len(got)
                hit += len(set(got) & set(group))
                exact += got == group
            seconds = time.perf_counter() - started
            row += [
                f"{100 * hit / gold_total:.1f}",
                f"{100 * hit / max(found_total, 1):.1f}",
                f"{100 * exact / len(groups):.1f}",
                f"{gold_total / seconds:,.0f}",
            ]
        right = sum(split(text, language) == gold for language, text, gold in CHALLENGES)
        row.append(f"{right}/{len(CHALLENGES)}")
        rows.append(row)
    header = (
        ["splitter"]
        + [
            f"{language} {what}"
            for language in ("de", "en")
            for what in ("recall %", "precision %", "paragraphs %", "sent/s")
        ]
        + ["challenge set"]
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    for name, split in splitters().items():
        wrong = [text for language, text, gold in CHALLENGES if split(text, language) != gold]
        print(f"{name} misses: " + " / ".join(wrong))


if __name__ == "__main__":
    main()
