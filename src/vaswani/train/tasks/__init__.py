"""The tasks the trainer runs: translation (the paper), lm (GPT), mlm (BERT), classify (fine-tuning)."""

from __future__ import annotations

from vaswani.train.tasks.base import RunContext, Task


def make_task(context: RunContext) -> Task:
    """The task of `context.config` (train.task, or model.type's)."""
    name = context.config.task
    if name == "translation":
        from vaswani.train.tasks.translation import Translation

        return Translation(context)
    if name == "classify":
        from vaswani.train.tasks.classify import Classify

        return Classify(context)
    from vaswani.train.tasks.language import LanguageModelling, MaskedLanguageModelling

    return LanguageModelling(context) if name == "lm" else MaskedLanguageModelling(context)


__all__ = ["RunContext", "Task", "make_task"]
