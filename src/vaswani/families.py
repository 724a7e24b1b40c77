"""The model families: one row per `model.type`, read by every place that depends on what a model is.

A row says which `vaswani.nn` class builds the model, which task `vaswani train` runs for it by default and
which it can learn, what the trained model can do (translate, generate, classify, fill masks), how a text is
framed for its classifier, and which `vaswani export` targets take it. Nothing else in the package compares
`model.type` with a name; configuration validation reads these rows too.

    family("decoder_only").can  # frozenset({'generate', 'classify'})
"""

from __future__ import annotations

from dataclasses import dataclass

# What a trained model can be asked to do; each is a command of its own.
TRANSLATE, GENERATE, CLASSIFY, FILL_MASKS = "translate", "generate", "classify", "fill_masks"
COMMANDS = {
    TRANSLATE: "vaswani translate",
    GENERATE: "vaswani generate",
    CLASSIFY: "vaswani finetune, then vaswani classify",
    FILL_MASKS: "MaskedLM from Python",
}


@dataclass(frozen=True)
class Family:
    """What one `model.type` is."""

    type: str  # the value of model.type
    model: str  # the class of vaswani.nn that builds it from a ModelConfig
    task: str  # the task train.task auto runs: the family's own (pre)training objective
    tasks: tuple[str, ...]  # every task it can learn (classify: with model.n_classes)
    can: frozenset[str]  # what the trained model does (TRANSLATE, GENERATE, CLASSIFY, FILL_MASKS)
    pool: str  # where the classification head reads a sequence under model.pool auto ("" where none)
    bos_first: bool  # its classifier reads `BOS text EOS` (BERT's [CLS] position), else `text EOS`
    one_vocabulary: bool  # source and target are one vocabulary (a single stack)
    exports: tuple[str, ...]  # `vaswani export --to` targets that take it
    about: str  # a few words for messages and documentation
    # Which stacks run: "encoder-decoder" (the encoder reads the source, the decoder the target), "decoder"
    # (causal, one sequence) or "encoder" (bidirectional, one sequence); read by runtime/flops.py's count.
    stack: str = "encoder-decoder"

    def check(self, ability: str, what: str) -> None:
        """A ValueError naming the command to use when this family cannot do `ability`; `what` names the model."""
        if ability not in self.can:
            others = ", ".join(command for a, command in COMMANDS.items() if a in self.can)
            doing = ability.replace("_", " ")
            raise ValueError(
                f"{what} holds a model of type {self.type} ({self.about}), which cannot {doing}; use {others}"
            )


FAMILIES: dict[str, Family] = {
    f.type: f
    for f in (
        Family(
            type="encoder_decoder",
            model="Transformer",
            task="translation",
            tasks=("translation",),
            can=frozenset({TRANSLATE}),
            pool="",
            bos_first=False,
            one_vocabulary=False,
            exports=("ctranslate2", "huggingface"),
            about="the paper's encoder-decoder translation model",
            stack="encoder-decoder",
        ),
        Family(
            type="decoder_only",
            model="CausalLM",
            task="lm",
            tasks=("lm", "classify"),
            can=frozenset({GENERATE, CLASSIFY}),
            pool="last",
            bos_first=False,
            one_vocabulary=True,
            exports=(),
            about="a causal language model, GPT's",
            stack="decoder",
        ),
        Family(
            type="encoder_only",
            model="MaskedLM",
            task="mlm",
            tasks=("mlm", "classify"),
            can=frozenset({FILL_MASKS, CLASSIFY}),
            pool="first",
            bos_first=True,
            one_vocabulary=True,
            exports=(),
            about="a bidirectional masked language model, BERT's",
            stack="encoder",
        ),
    )
}
MODEL_TYPES = tuple(FAMILIES)
TASKS = ("translation", "lm", "mlm", "classify")


def family(model_type: str) -> Family:
    """The row of `model_type` (a ValueError listing the types for an unknown one)."""
    if model_type not in FAMILIES:
        raise ValueError(f"model.type must be one of {', '.join(MODEL_TYPES)}, got {model_type!r}")
    return FAMILIES[model_type]
