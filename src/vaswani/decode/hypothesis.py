"""What a search returns and how it ranks what it found: the hypothesis, the length penalty, and a sentence's finished
hypotheses (the k best kept, and whether a live one could still beat them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class Hypothesis:
    """One output: token ids without BOS/EOS, their total log-probability, and the search's score
    (the log-probability divided by the length penalty for beam search, the same value otherwise);
    `token_log_probs`: the log-probability of each token chosen, EOS's included where the model chose it
    (empty where the engine does not say: CTranslate2)."""

    tokens: list[int]
    log_prob: float
    score: float
    token_log_probs: tuple[float, ...] = ()

    @property
    def confidence(self) -> float | None:
        """The mean probability of the tokens chosen (EOS's included where chosen): near 1 where the model was
        sure at every step; low values flag doubtful outputs. None where the token probabilities are unknown."""
        if not self.token_log_probs:
            return None
        return sum(math.exp(x) for x in self.token_log_probs) / len(self.token_log_probs)


def length_penalty(length: int | Tensor, alpha: float, rule: str = "gnmt") -> float | Tensor:
    """GNMT's ((5 + |Y|) / 6)^alpha (Wu et al. 2016), as in the paper's tensor2tensor code (§6.1: alpha 0.6);
    with rule "power", |Y|^alpha (Hugging Face's generate, fairseq). |Y| counts the generated tokens including
    EOS."""
    if rule == "power":
        return length**alpha
    return ((5.0 + length) / 6.0) ** alpha


class Finished:
    """One sentence's finished hypotheses: at most `k` kept, the worst replaced by a better one; a hypothesis's score
    is its log-probability divided by `length_penalty` of its length (EOS counted where it ends one)."""

    def __init__(self, k: int, alpha: float, rule: str) -> None:
        self.k, self.alpha, self.rule = k, alpha, rule
        self.hyps: list[Hypothesis] = []

    def __len__(self) -> int:
        return len(self.hyps)

    def add(self, tokens: list[int], log_prob: float, eos: bool, token_log_probs: Sequence[float] = ()) -> None:
        """Keep `tokens` (without EOS; `eos`: whether one ends it) if it is among the k best; -inf never."""
        if log_prob == float("-inf"):
            return
        score = log_prob / length_penalty(len(tokens) + eos, self.alpha, self.rule)
        hyp = Hypothesis(tokens, log_prob, score, tuple(token_log_probs))
        if len(self.hyps) < self.k:
            self.hyps.append(hyp)
            return
        worst = min(range(self.k), key=lambda i: self.hyps[i].score)
        if hyp.score > self.hyps[worst].score:
            self.hyps[worst] = hyp

    def cannot_improve(self, n_best: int, reachable: float) -> bool:
        """Whether the n_best best finished hypotheses all score at least `reachable`."""
        return len(self.hyps) >= n_best and sorted(h.score for h in self.hyps)[-n_best] >= reachable

    def best(self, n: int) -> list[Hypothesis]:
        return sorted(self.hyps, key=lambda h: -h.score)[:n]
