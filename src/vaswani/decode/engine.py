"""The engines a Translator decodes with, behind one small interface: token ids in, hypotheses out.

    engine(sources, decode, n_best, progress) -> [[Hypothesis, ...] per source, in input order]

`TorchEngine` runs our own search on the model (vaswani/decode/search.py) in the precision measured for it;
`CTranslate2Engine` (decode/ct2_engine.py) runs a model that `vaswani export` (or `--engine ctranslate2`)
converted. Decoding never writes a model: converting is export's work (vaswani/export/).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # imported where used: the CLI reads CT2_TYPES and ENGINES without loading torch
    import torch

    from vaswani.config import DecodeConfig
    from vaswani.decode.search import Hypothesis
    from vaswani.precision import Choice

ENGINES = ("torch", "ctranslate2")
# CTranslate2's weight and compute types (`--compute-type`, `vaswani export --quantization`); float32 gives our outputs
CT2_TYPES = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")
Progress = Callable[[int], None]


class Engine(Protocol):
    """What a Translator needs of an engine."""

    def __call__(
        self, sources: Sequence[Sequence[int]], decode: DecodeConfig, n_best: int = 1, progress: Progress | None = None
    ) -> list[list[Hypothesis]]:
        """The `n_best` hypotheses of each tokenized source (without EOS), in input order; `progress(n)` after
        each batch of n sentences."""
        ...

    def choose_precision(self, decode: DecodeConfig) -> Choice:
        """The precision these settings decode in (and why)."""
        ...

    def describe(self) -> str | None:
        """One line naming the engine where it is not our own search (None)."""
        ...


class TorchEngine:
    """Our own search (greedy, beam, sampling on the KV cache) on a model in memory.

    `precision`: "auto" (fp32: vaswani/precision.py), "fp32", "bf16" (autocast) or "int8" (on a CPU: the model's
    linear layers made int8 in place, nn/int8.py). `owned`: the model is the engine's alone (Translator.load's), so
    in fp32 on a CPU its linear layers are packed for oneDNN in place (nn/packed.py); a model passed in by its
    owner is left as it is. With decode.compile the
    decoder's step runs through torch.compile (search.compiled_step), compiled once for the engine's life."""

    def __init__(self, model: torch.nn.Module, precision: str = "auto", owned: bool = False) -> None:
        from vaswani.precision import check

        check(precision, decoding=True)
        if precision == "int8":  # the linear layers made int8 once, here (nn/int8.py)
            from vaswani.nn.int8 import quantize_int8

            quantize_int8(model)
        elif owned and precision in ("auto", "fp32"):  # a model only this engine runs: its float32 layers packed
            from vaswani.nn.packed import pack_fp32

            pack_fp32(model)
        self.model, self.precision = model, precision
        self._choices: dict[int, Choice] = {}
        self._compiled = None
        self._static_step = None  # decode/static.py's StaticDecoding, made at the first search that uses it

    def choose_precision(self, decode: DecodeConfig) -> Choice:
        from vaswani.precision import choose

        rows = decode.batch_size * (1 if decode.sampling else decode.beam_size)
        if rows not in self._choices:
            device = next(self.model.parameters()).device
            self._choices[rows] = choose(self.precision, self.model.config, device, rows, training=False)
        return self._choices[rows]

    def __call__(
        self, sources: Sequence[Sequence[int]], decode: DecodeConfig, n_best: int = 1, progress: Progress | None = None
    ) -> list[list[Hypothesis]]:
        from vaswani.decode.search import search_ids

        precision = self.choose_precision(decode).precision if sources else "fp32"
        return search_ids(self.model, sources, decode, n_best, precision, progress, self._step(decode))

    def _step(self, decode: DecodeConfig):
        """The decoder's step the search runs: with decode.compile, compiled once for this engine's life; with
        decode.static_cache (auto: on a GPU), on buffers allocated once and, on a GPU, as CUDA graphs."""
        if not decode.compile:
            return self._static(decode)
        if self._compiled is None:
            from vaswani.decode.search import compiled_step

            self._compiled = compiled_step(self.model)
        return self._compiled

    def _static(self, decode: DecodeConfig):
        from vaswani.families import TRANSLATE, family

        device = next(self.model.parameters()).device
        wanted = device.type == "cuda" if decode.static_cache == "auto" else decode.static_cache
        if not wanted or TRANSLATE not in family(self.model.config.type).can:
            return None
        if self._static_step is None:
            from vaswani.decode.static import StaticDecoding

            self._static_step = StaticDecoding(self.model, rows=decode.batch_size * decode.beam_size)
        return self._static_step

    def warm_up(self, decode: DecodeConfig, beam_size: int = 4) -> None:
        """With decode.compile: compile the step now, so that requests do not wait for the compiler. Greedy and
        beam search (`beam_size`, or decode's if larger), over one sentence, two of different lengths and an empty
        one, 3 steps each: every variant the step compiles into (tests/decode/test_compile.py)."""
        step = self._step(decode)
        if step is None:
            return
        from vaswani.data.batching import collate
        from vaswani.decode.search import beam_search, decoding, greedy

        c, device = self.model.config, next(self.model.parameters()).device
        word = next(i for i in range(c.src_vocab_size) if i not in (c.pad_id, c.bos_id, c.eos_id))  # any word
        sentences = collate([([word] * 3, []), ([word], [])], c.pad_id, c.bos_id, c.eos_id).src.to(device)  # padded
        empty = collate([([], [])] * 2, c.pad_id, c.bos_id, c.eos_id).src.to(device)  # EOS alone: one-token sources
        precision = self.choose_precision(decode).precision
        limits = dict(max_len_a=0.0, max_len_b=3, min_len=3, step=step)
        with decoding(device, precision):
            for src in (sentences, sentences[:1], empty, empty[:1]):
                greedy(self.model, src, **limits)
                beam_search(self.model, src, max(2, beam_size, decode.beam_size), **limits)

    def describe(self) -> str | None:
        return None
