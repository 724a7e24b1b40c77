"""The tasks the trainer runs: translation (the paper), lm (GPT), mlm (BERT), classify (fine-tuning)."""

from __future__ import annotations

from vaswani.train.tasks.base import Task


def make_task(trainer) -> Task:
    """The task of `trainer.config` (train.task, or model.type's)."""
    name = trainer.config.task
    if name == "translation":
        from vaswani.train.tasks.translation import Translation

        return Translation(trainer)
    if name == "classify":
        from vaswani.train.tasks.classify import Classify

        return Classify(trainer)
    from vaswani.train.tasks.language import LanguageModelling, MaskedLanguageModelling

    return LanguageModelling(trainer) if name == "lm" else MaskedLanguageModelling(trainer)


__all__ = ["Task", "make_task"]
