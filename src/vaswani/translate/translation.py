"""What a Translator returns for a sentence: its candidates (text, tokens, scores, confidence), and what was found on
the way (attention, alignment, missing glossary terms, the language it was read as)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vaswani.nn.transformer import AttentionWeights
from vaswani.translate.align import Alignment


@dataclass(frozen=True)
class Candidate:
    """One output text with its token ids, log-probability and search score."""

    text: str
    tokens: list[int]
    log_prob: float
    score: float
    confidence: float | None = None  # the mean probability of its tokens (Hypothesis.confidence)
    token_log_probs: tuple[float, ...] = ()  # each token's log-probability, EOS's included (empty: not known)


@dataclass(frozen=True)
class Translation:
    """A source sentence's n-best translations, best first, and optionally the attention weights of
    the best one: each tensor (H, rows, columns), rows labelled by `tgt_pieces` (the token each
    decoder position predicts, ending with </s>), columns by `src_pieces` (ending with </s>)."""

    source: str
    candidates: list[Candidate]
    truncated: bool = False
    attention: AttentionWeights | None = None
    src_pieces: list[str] | None = None
    tgt_pieces: list[str] | None = None
    # with a glossary: its target terms the best candidate lacks (none: all there; None: no glossary asked)
    missing_terms: tuple[str, ...] | None = None
    # with --source-language auto: the model's code of the language the source was read as, and the identifier's
    # probability for it (0.0: not sure, or not one of the model's, so read as most of the others were)
    detected: tuple[str, float] | None = None
    # a model of one source language: the language the source was detected as, where that is another one, and the
    # identifier's probability (--other-languages; with copy, the source is its own "translation")
    other_language: tuple[str, float] | None = None
    alignment: Alignment | None = None  # the best candidate's words aligned to the source's (translate/align.py)

    @property
    def text(self) -> str:
        return self.candidates[0].text if self.candidates else ""

    @classmethod
    def copied(cls, source: str, other_language: tuple[str, float]) -> Translation:
        """A sentence in another language than the model reads, copied through unchanged (--other-languages copy)."""
        return cls(source, [Candidate(one_line(source.strip()), [], 0.0, 0.0)], other_language=other_language)

    def n_best_record(self, decimals: int = 4) -> list[dict[str, Any]]:
        """The candidates, best first, as plain dicts for JSON: text, score, log_prob and confidence (rounded;
        None where not finite or not known). `vaswani translate --n-best/--scores` writes one such list per input
        line."""
        return [
            {
                "text": c.text,
                "score": _round(c.score, decimals),
                "log_prob": _round(c.log_prob, decimals),
                "confidence": None if c.confidence is None else _round(c.confidence, decimals),
            }
            for c in self.candidates
        ]

    def to_dict(self, kinds: Sequence[str] = ("cross",), decimals: int = 4) -> dict[str, Any]:
        """Plain lists and numbers for JSON: the best text and its scores, the n-best, and (when computed)
        the attention weights of `kinds` ("cross", "encoder", "decoder") indexed [layer][head][row][column]."""
        best = self.candidates[0] if self.candidates else None
        out: dict[str, Any] = {
            "text": self.text,
            "score": _round(best.score if best else 0.0, decimals),
            "log_prob": _round(best.log_prob if best else 0.0, decimals),
            "confidence": None if best is None or best.confidence is None else _round(best.confidence, decimals),
            "truncated": self.truncated,
            "n_best": self.n_best_record(decimals),
        }
        if self.missing_terms is not None:
            out["missing_terms"] = list(self.missing_terms)
        if self.detected is not None:
            out["detected_language"] = {"language": self.detected[0], "probability": _round(self.detected[1], 4)}
        if self.other_language is not None:
            language, probability = self.other_language
            out["other_language"] = {"language": language, "probability": _round(probability, 4)}
        if self.alignment is not None:  # [source word, target word] pairs, whitespace-separated words from 0
            out["alignment"] = [[i, j] for i, targets in enumerate(self.alignment.links) for j in targets]
        if self.attention is not None:
            groups = {
                "encoder": self.attention.encoder,
                "decoder": self.attention.decoder_self,
                "cross": self.attention.cross,
            }
            unknown = sorted(set(kinds) - set(groups))
            if unknown:
                raise ValueError(f"attention kinds are {', '.join(groups)}, not {', '.join(unknown)}")
            out["attention"] = {
                "source_pieces": self.src_pieces,
                "target_pieces": self.tgt_pieces,
                "decoder_pieces": self.decoder_pieces,
                # numpy, not torch: a server calls this outside its compute thread (serve/compute.py)
                **{kind: [w.float().numpy().round(decimals).tolist() for w in groups[kind]] for kind in kinds},
            }
        return out

    @property
    def decoder_pieces(self) -> list[str] | None:
        """What each decoder position reads (<s>, then the target but its last piece): the columns of
        the decoder's self-attention, whose rows are `tgt_pieces`."""
        return None if self.tgt_pieces is None else ["<s>", *self.tgt_pieces[:-1]]


def _round(value: float, decimals: int) -> float | None:
    """`value` rounded for JSON; None where it is not finite (JSON has no infinity)."""
    return round(value, decimals) if math.isfinite(value) else None


def one_line(text: str) -> str:
    """Translations are written one per line: no line breaks inside one."""
    return " ".join(text.splitlines()) if text else text
