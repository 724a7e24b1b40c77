"""Text generation with a decoder-only language model: prompt in, continuation out, token by token.

    generator = Generator.load("runs/shakespeare")
    generator.generate("ROMEO:", max_new_tokens=300, temperature=0.8, top_k=40, seed=1)

The same search code as translation (decode/search.py: the step protocol on the KV cache). What a newline is
follows the tokenizer (Tokenizer.text_newlines). For a text tokenizer trained here EOS is the language model's
line break (data/plain.py): generation goes on through it, writing a newline. To an imported tokenizer whose
newlines are text (GPT-2's byte-level BPE) they are tokens like any other, and EOS (<|endoftext|>) ends the
document: generation stops there, as transformers' generate does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vaswani.config import Config
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import decoding, greedy, sample
from vaswani.families import GENERATE, family
from vaswani.model_dir import load_model, load_tokenizer
from vaswani.runtime.allocator import freed_memory_returned
from vaswani.runtime.device import pick_device
from vaswani.runtime.precision import check
from vaswani.special import EOS_ID


class Generator:
    """A decoder-only model and its text tokenizer."""

    def __init__(self, model, tokenizer: Tokenizer, config: Config, precision: str = "fp32") -> None:
        check(precision, decoding=True)
        if precision == "int8":  # nn/cpu_linear/int8.py: the linear layers made int8, in place
            from vaswani.nn.cpu_linear.int8 import quantize_int8

            with freed_memory_returned():  # each float32 weight given back as its int8 copy is made
                quantize_int8(model)
        family(config.model.type).check(GENERATE, "this model directory")
        self.model, self.tokenizer, self.config = model.eval(), tokenizer, config
        self.precision = "fp32" if precision == "auto" else precision
        self.device = next(model.parameters()).device

    @classmethod
    def load(cls, model_dir: str | Path, device: str = "auto", precision: str = "fp32") -> Generator:
        model, config = load_model(model_dir, pick_device(device))
        return cls(model, load_tokenizer(model_dir, config), config, precision)

    def encode(self, prompt: str) -> list[int]:
        """The prompt's ids. Newlines as text: the prompt read whole, an empty one BOS (where GPT-2's documents
        start). Else its lines separated by EOS (the line break), an empty prompt one EOS: a new line."""
        if self.config.data.lowercase:
            prompt = prompt.lower()
        if self.tokenizer.text_newlines:
            return self.tokenizer.encode_src([prompt])[0] or [self.config.model.bos_id]
        ids: list[int] = []
        for i, line_ids in enumerate(self.tokenizer.encode_src(prompt.split("\n"))):
            ids.extend(([EOS_ID] if i else []) + line_ids)
        return ids or [EOS_ID]

    def decode(self, ids: list[int]) -> str:
        """Text of ids: as the tokenizer writes it where newlines are text (special tokens left out); else each
        EOS a newline."""
        if self.tokenizer.text_newlines:
            return self.tokenizer.src.decode(list(ids))
        lines, current = [], []
        for i in ids:
            if i == EOS_ID:
                lines.append(current)
                current = []
            else:
                current.append(i)
        lines.append(current)
        return "\n".join(self.tokenizer.src.decode(line) for line in lines)

    def generate_ids(
        self,
        prompt: list[int],
        max_new_tokens: int,
        seed: int | None = 1,
        n: int = 1,
        greedy_search: bool = False,
        cache: bool = True,
        on_token: Callable[[int, int], None] | None = None,
        **decode: Any,
    ) -> list[list[int]]:
        """`n` continuations of `prompt` (ids), each `max_new_tokens` long, drawn one after the other from one
        generator seeded with `seed` (the same seed, the same samples). `on_token(sample, id)` sees each
        token as it is chosen. Where newlines are text, a continuation ends at EOS (not included).
        `decode`: the sampling fields of the decode section (temperature, top_k, top_p) and the repetition rules
        (no_repeat_ngram, repetition_penalty: decode/repetition.py; the prompt counts as output there)."""
        src = torch.tensor([prompt], dtype=torch.long, device=self.device)
        sampling = {} if greedy_search else {"sampling": True}
        if greedy_search:
            decode = {k: v for k, v in decode.items() if k not in ("temperature", "top_k", "top_p")}
        # the tokens alone: greedy search skips the softmax over the vocabulary
        request = DecodeRequest.of(
            scores=False, beam_size=1, max_len_a=0.0, max_len_b=max_new_tokens, **sampling, **decode
        )
        # the model sees at most the context it was trained on (search.DecoderOnlySteps moves the window on);
        # EOS ends a document where newlines are text, else it is a line break
        run = dict(cache=cache, context=self.config.data.block_size, stop_at_eos=self.tokenizer.text_newlines)
        generator = torch.Generator(self.device)
        if seed is not None:
            generator.manual_seed(seed)
        out = []
        with decoding(self.device, self.precision):
            for k in range(n):
                step = None if on_token is None else (lambda tokens, k=k: on_token(k, int(tokens[0])))
                if greedy_search:
                    hyp = greedy(self.model, src, request, on_step=step, **run)[0]
                else:
                    hyp = sample(self.model, src, request, generator, on_step=step, **run)[0]
                out.append(hyp.tokens)
        return out

    def generate(self, prompt: str, max_new_tokens: int = 300, **options) -> list[str]:
        """Continuations of `prompt` as text (see generate_ids for the options)."""
        return [self.decode(ids) for ids in self.generate_ids(self.encode(prompt), max_new_tokens, **options)]
