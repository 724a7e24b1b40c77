"""No repetition loops: `--no-repeat-ngram N` and `--repetition-penalty P`, applied to each row's next-token scores.

- no_repeat_ngram N (fairseq's --no-repeat-ngram-size, transformers' no_repeat_ngram_size): a token that would
  complete an n-gram the output already holds gets probability zero (-inf after the log-softmax, its probability
  lost as transformers loses it), so no n-gram occurs twice in an output.
- repetition_penalty P (Keskar et al. 2019, CTRL; as transformers defines it): the logit of every token the output
  already holds is divided by P where positive, multiplied by P where negative, before the softmax; P > 1
  discourages repeating, 1 is off.

A row's history is the tokens generated so far; a language model's prompt counts too, as in transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Repetition:
    no_repeat_ngram: int = 0  # 0: off
    penalty: float = 1.0  # 1: off

    def __post_init__(self) -> None:
        if self.no_repeat_ngram < 0:
            raise ValueError(f"no_repeat_ngram must be >= 0 (0 is off), got {self.no_repeat_ngram}")
        if self.penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0 (1 is off), got {self.penalty}")

    @property
    def active(self) -> bool:
        return self.no_repeat_ngram > 0 or self.penalty != 1.0

    def penalize(self, logits: Tensor, histories: Sequence[Sequence[int]]) -> None:
        """The repetition penalty on `logits` (rows, V), in place, before the softmax."""
        if self.penalty == 1.0:
            return
        rows, columns = _pairs([set(h) for h in histories])
        if not rows:
            return
        rows_t = torch.tensor(rows, device=logits.device)
        columns_t = torch.tensor(columns, device=logits.device)
        values = logits[rows_t, columns_t]
        logits[rows_t, columns_t] = torch.where(values < 0, values * self.penalty, values / self.penalty)

    def ban(self, log_probs: Tensor, histories: Sequence[Sequence[int]]) -> None:
        """-inf, in place, for each row's tokens that would repeat an n-gram of its history. Shape: (rows, V)"""
        n = self.no_repeat_ngram
        if not n:
            return
        rows, columns = _pairs([repeating(h, n) for h in histories])
        if rows:
            log_probs[torch.tensor(rows, device=log_probs.device), torch.tensor(columns, device=log_probs.device)] = (
                float("-inf")
            )


def repeating(history: Sequence[int], n: int) -> set[int]:
    """The tokens that, put after `history`, would make an n-gram that `history` already holds."""
    if n < 1 or len(history) < n - 1:
        return set()
    prefix = tuple(history[len(history) - n + 1 :])
    return {history[j + n - 1] for j in range(len(history) - n + 1) if tuple(history[j : j + n - 1]) == prefix}


def _pairs(per_row: Sequence[set[int]]) -> tuple[list[int], list[int]]:
    rows = [i for i, tokens in enumerate(per_row) for _ in tokens]
    columns = [t for tokens in per_row for t in tokens]
    return rows, columns
