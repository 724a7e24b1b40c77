"""Scores with sacreBLEU: BLEU (cased, 13a tokenization, detokenized text) and chrF, with their
signatures, printed as `sacrebleu -f text` prints them; and the Multi30k literature's tokenized,
lowercased BLEU ("tok-lc"), so that our numbers can be put next to published ones."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import sacrebleu
from sacrebleu.metrics.base import Score


def bleu(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False) -> Score:
    """sacreBLEU's corpus BLEU; `lowercase` is its case-insensitive variant (`sacrebleu -lc`)."""
    return sacrebleu.metrics.BLEU(lowercase=lowercase).corpus_score(list(hypotheses), [list(references)])


def report(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False) -> list[tuple[Score, str]]:
    """BLEU and chrF, each with its text line as the sacrebleu command prints it (`-f text`; with
    `lowercase`, `-lc`: case-insensitive BLEU, chrF as it is)."""
    _check_lengths(hypotheses, references)
    lines = []
    for metric in (sacrebleu.metrics.BLEU(lowercase=lowercase), sacrebleu.metrics.CHRF()):
        score = metric.corpus_score(list(hypotheses), [list(references)])
        lines.append((score, score.format(width=1, signature=str(metric.get_signature()))))
    return lines


def tok_lc(lines: Sequence[str], lang: str) -> list[str]:
    """Lowercase, normalise punctuation and Moses-tokenize (with HTML escapes) as the Multi30k `tok/`
    references were made (lowercase.perl, normalize-punctuation.perl, tokenizer.perl); this
    reproduces them line for line."""
    try:
        from sacremoses import MosesPunctNormalizer, MosesTokenizer
    except ImportError:
        raise ImportError("tokenized lowercased BLEU needs sacremoses: pip install 'vaswani[moses]'") from None
    normalizer, tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [tokenizer.tokenize(normalizer.normalize(line.lower()), return_str=True, escape=True) for line in lines]


def tok_lc_bleu(hypotheses: Sequence[str], tok_references: Sequence[str], lang: str) -> tuple[Score, str]:
    """BLEU of tok-lc hypotheses against already tokenized, lowercased references (no further
    tokenization: multi-bleu.perl's setting), with its text line."""
    _check_lengths(hypotheses, tok_references)
    metric = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    score = metric.corpus_score(tok_lc(hypotheses, lang), [list(tok_references)])
    return score, "tok-lc " + score.format(width=1, signature=str(metric.get_signature()))


def multi30k_tok_reference(reference: str | Path) -> Path | None:
    """The tok/ reference next to a Multi30k raw/ reference: raw/test_2016_flickr.de.gz ->
    tok/test_2016_flickr.lc.norm.tok.de, when it exists."""
    reference = Path(reference)
    match = re.fullmatch(r"(.+)\.([a-z]{2})", reference.name.removesuffix(".gz"))
    if match is None or reference.parent.name != "raw":
        return None
    path = reference.parent.parent / "tok" / f"{match.group(1)}.lc.norm.tok.{match.group(2)}"
    return path if path.is_file() else None


def language_of(path: str | Path) -> str | None:
    """The language code a file name ends with (train.de.gz, newstest.en) or None."""
    match = re.search(r"\.([a-z]{2})(\.gz)?$", Path(path).name)
    return match.group(1) if match else None


def _check_lengths(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; they must pair line by line")
