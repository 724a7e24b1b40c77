"""Scores with sacreBLEU: BLEU (cased, 13a tokenization, detokenized text) and chrF, with signatures."""

from __future__ import annotations

from collections.abc import Sequence

import sacrebleu


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> sacrebleu.metrics.bleu.BLEUScore:
    metric = sacrebleu.metrics.BLEU()
    return metric.corpus_score(list(hypotheses), [list(references)])


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> sacrebleu.metrics.chrf.CHRFScore:
    return sacrebleu.metrics.CHRF().corpus_score(list(hypotheses), [list(references)])
