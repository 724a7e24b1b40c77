"""Classification with a fine-tuned model: lines in, `label<TAB>probability` out, one per line, in order.

classifier = Classifier.load("runs/sst2_lm")
classifier.classify(["a gorgeous , witty , seductive movie ."])   # [('1', 0.97)]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch

from vaswani.config import Config
from vaswani.data.labelled import Text, classifier_inputs, pad
from vaswani.data.tokenizer import Tokenizer
from vaswani.model_dir import CheckpointError, load_model, load_tokenizer
from vaswani.runtime.allocator import freed_memory_returned
from vaswani.runtime.device import autocast, pick_device
from vaswani.runtime.precision import check


class Classifier:
    """A fine-tuned decoder-only or encoder-only model with its classifier, tokenizer and label names."""

    def __init__(self, model, tokenizer: Tokenizer, config: Config, precision: str = "fp32") -> None:
        """`precision`: "fp32" ("auto" is fp32), "bf16" (autocast) or "int8" (a CPU's: cpu_linear/int8.py, made
        here)."""
        if not config.model.n_classes or not config.finetune.labels:
            raise CheckpointError("this model has no classifier; fine-tune it first (vaswani finetune)")
        check(precision, decoding=True)
        if precision == "int8":
            from vaswani.nn.cpu_linear.int8 import quantize_int8

            with freed_memory_returned():  # each float32 weight given back as its int8 copy is made
                quantize_int8(model)
        self.precision = "fp32" if precision == "auto" else precision
        self.model, self.tokenizer, self.config = model.eval(), tokenizer, config
        self.labels = [str(x) for x in config.finetune.labels]
        self.device = next(model.parameters()).device

    @classmethod
    def load(
        cls, model_dir: str | Path, device: str = "auto", pairs: bool = False, precision: str = "fp32"
    ) -> Classifier:
        """The classifier in `model_dir`; `pairs`: it reads sentence pairs (a BERT classifier imported from a
        paraphrase or entailment checkpoint; one fine-tuned on pairs reads them already); `precision`: as in
        __init__."""
        model, config = load_model(model_dir, pick_device(device))
        if pairs and not config.model.pairs:
            if config.model.segments < 2:
                raise ValueError(
                    f"{model_dir}: this model has no segment B (model.segments {config.model.segments}); sentence "
                    "pairs need a BERT (token type embeddings)"
                )
            m = dataclasses.replace(config.model, pairs=True)
            model.config, config = m, dataclasses.replace(config, model=m)
        return cls(model, load_tokenizer(model_dir, config), config, precision)

    @torch.inference_mode()
    def probabilities(self, texts: Sequence[Text], batch_size: int = 64) -> torch.Tensor:
        """Class probabilities of each text (or sentence pair, (a, b), where the model reads pairs), in input
        order. Shape: -> (N, n_classes)"""
        inputs = classifier_inputs(
            self.tokenizer, list(texts), self.config.model, self.config.data.block_size, self.config.data.lowercase
        )
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))  # similar lengths batch together
        out = torch.empty(len(inputs), len(self.labels))
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            ids = pad([inputs[i] for i in chunk], self.config.model.pad_id).to(self.device)
            with autocast(self.device, self.precision):
                out[chunk] = self.model.classify(ids).float().softmax(-1).cpu()
        return out

    def classify(self, texts: Sequence[Text], batch_size: int = 64) -> list[tuple[str, float]]:
        """(label, its probability) of each text (or sentence pair)."""
        if not texts:
            return []
        probs = self.probabilities(texts, batch_size)
        best = probs.argmax(-1)
        return [(self.labels[int(b)], float(p[b])) for b, p in zip(best, probs, strict=True)]
