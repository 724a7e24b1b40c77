"""The engines a Translator decodes with, behind one small interface: token ids in, hypotheses out.

    engine(sources, request, progress) -> [[Hypothesis, ...] per source, in input order]

`TorchEngine` runs our own search on the model (vaswani/decode/search.py) in the precision measured for it;
`CTranslate2Engine` (decode/ct2_engine.py) runs a model that `vaswani export` (or `--engine ctranslate2`)
converted. Decoding never writes a model: converting is export's work (vaswani/export/).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from vaswani.runtime.allocator import freed_memory_returned

if TYPE_CHECKING:  # imported where used: the CLI reads CT2_TYPES and ENGINES without loading torch
    import torch

    from vaswani.decode.continuous import ContinuousSearch
    from vaswani.decode.request import DecodeRequest
    from vaswani.decode.search import Hypothesis
    from vaswani.decode.shortlist import Shortlist
    from vaswani.decode.terms import Constraints
    from vaswani.runtime.precision import Choice

ENGINES = ("torch", "ctranslate2")
# CTranslate2's weight and compute types (`--compute-type`, `vaswani export --quantization`); float32 gives our outputs
CT2_TYPES = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")
Progress = Callable[[int], None]


class Engine(Protocol):
    """What a Translator needs of an engine."""

    def __call__(
        self,
        sources: Sequence[Sequence[int]],
        request: DecodeRequest,
        progress: Progress | None = None,
        constraints: Constraints | None = None,
        forced: Sequence[int] | None = None,
    ) -> list[list[Hypothesis]]:
        """The request's n_best hypotheses of each tokenized source (without EOS), in input order; `progress(n)`
        after each batch of n sentences. `constraints`: per source, what its output must hold (a glossary's terms:
        decode/terms.py). `forced`: per source, the token its output starts with (search.search_ids)."""
        ...

    def choose_precision(self, request: DecodeRequest) -> Choice:
        """The precision this request decodes in (and why)."""
        ...

    def prepare(self, request: DecodeRequest) -> Choice:
        """Everything a first request like this one would wait for, done now (a server's start): the precision
        settled (measured where it must be) and returned, and with decode.compile the step compiled."""
        ...

    def describe(self) -> str | None:
        """One line naming the engine where it is not our own search (None)."""
        ...


@dataclass(frozen=True)
class StepChoice:
    """Which decoder step a search runs, decided in one place (`choose_step`) and received by the engine that builds
    it and the command that reports it: `kind` eager (the model's own step: a shortlist's too), compiled
    (torch.compile, decode.compile), static (decode.static_cache: buffers allocated once) or cuda_graphs (the static
    cache captured as CUDA graphs, on a GPU); `note`: why a request's wish was not followed, for the user."""

    kind: Literal["eager", "compiled", "static", "cuda_graphs"]
    note: str | None = None


def choose_step(request: DecodeRequest, model: torch.nn.Module, shortlist: bool = False) -> StepChoice:
    """The step for `request` on `model` (on its device); a one-line ValueError where the request asks for what the
    engine cannot do together (a shortlist changes the output layer at every batch: neither compiled nor static).
    On a GPU a translation model's static cache runs as CUDA graphs (decode.static_cache auto), faster than the
    compiled step (docs/benchmarks.md, "GPU decoding"); decode.static_cache false lets it compile."""
    from vaswani.families import TRANSLATE, family

    d = request.decode
    if shortlist:
        if d.compile:
            raise ValueError(
                "a shortlist changes the output layer at every batch, which a compiled step cannot: leave out "
                "--shortlist or --compile (--no-compile where the model's config.yaml sets decode.compile)"
            )
        if d.static_cache is True:
            raise ValueError(
                "a shortlist changes the output layer at every batch, which decode.static_cache cannot: leave "
                "out --shortlist, or set decode.static_cache to auto in the model's config.yaml"
            )
        return StepChoice("eager")
    cuda = next(model.parameters()).device.type == "cuda"
    translates = TRANSLATE in family(model.config.type).can
    static = translates and (cuda if d.static_cache == "auto" else bool(d.static_cache))
    if d.compile and not (cuda and d.static_cache == "auto" and translates):
        return StepChoice("compiled")
    note = None
    if d.compile:
        note = (
            "on a GPU the decoder's step runs as CUDA graphs (decode.static_cache), faster than compiled: --compile "
            "is not used (decode.static_cache: false in the model's config.yaml compiles it)"
        )
    if static:
        return StepChoice("cuda_graphs" if cuda else "static", note)
    return StepChoice("eager", note)


class TorchEngine:
    """Our own search (greedy, beam, sampling on the KV cache) on a model in memory.

    `precision`: "auto" (fp32: runtime/precision.py), "fp32", "bf16" (autocast) or "int8" (on a CPU: the model's linear
    layers made int8 in place, the small ones kept float32, nn/cpu_linear/int8.py). `owned`: the model is the
    engine's alone (Translator.load's), so in fp32 on a CPU its linear layers are packed for oneDNN in place
    (nn/cpu_linear/onednn_fp32.py); a model passed in by its owner is left as it is. With decode.compile the
    decoder's step runs through torch.compile (search.compiled_step), compiled once for the engine's life.
    `shortlist` (decode/shortlist.py): each batch's output layer covers the words its sources may produce; it runs
    on the model's own eager step, so not with decode.compile or decode.static_cache true."""

    def __init__(
        self, model: torch.nn.Module, precision: str = "auto", owned: bool = False, shortlist: Shortlist | None = None
    ) -> None:
        from vaswani.runtime.precision import check

        check(precision, decoding=True)
        # each float32 weight given back as its copy is made (runtime/allocator.py; load_model allocated them that way)
        if precision == "int8":  # the linear layers made int8 once, here (nn/cpu_linear/int8.py)
            from vaswani.nn.cpu_linear.int8 import quantize_int8

            with freed_memory_returned():
                quantize_int8(model, whole_output=shortlist is None)
        elif owned and precision in ("auto", "fp32"):  # a model only this engine runs: its float32 layers packed
            from vaswani.nn.cpu_linear.onednn_fp32 import pack_fp32

            with freed_memory_returned():  # each hidden layer where packing is not slower here
                pack_fp32(model, whole_output=shortlist is None)
        self.model, self.precision, self.shortlist = model, precision, shortlist
        self._choices: dict[int, Choice] = {}
        self._prepared: set[DecodeRequest] = set()
        self._compiled = None
        self._static_step = None  # decode/static.py's StaticDecoding, made at the first search that uses it

    def choose_precision(self, request: DecodeRequest) -> Choice:
        """Measured once per batch shape (request.rows) for "auto", then kept."""
        from vaswani.runtime.precision import choose

        if request.rows not in self._choices:
            device = next(self.model.parameters()).device
            self._choices[request.rows] = choose(self.precision, self.model.config, device, request.rows, False)
        return self._choices[request.rows]

    def prepare(self, request: DecodeRequest) -> Choice:
        choice = self.choose_precision(request)
        if request not in self._prepared:  # once per request: a server's start and its command line share it
            self.warm_up(request)
            self._prepared.add(request)
        return choice

    def __call__(
        self,
        sources: Sequence[Sequence[int]],
        request: DecodeRequest,
        progress: Progress | None = None,
        constraints: Constraints | None = None,
        forced: Sequence[int] | None = None,
    ) -> list[list[Hypothesis]]:
        from vaswani.decode.search import PerSource, search_ids

        precision = self.choose_precision(request).precision if sources else "fp32"
        step = self._step(request)
        return search_ids(
            self.model, sources, request, precision, progress, step, self.shortlist, PerSource(constraints, forced)
        )

    def continuous(self, request: DecodeRequest) -> ContinuousSearch | None:
        """A running batch that sentences join and leave at every step (decode/continuous.py), where this engine runs
        `request` on the model's own eager step without a shortlist and the search takes it; else None."""
        from vaswani.decode.continuous import ContinuousSearch, supports

        if self.shortlist is not None or self.step_choice(request).kind != "eager" or supports(self.model, request):
            return None
        return ContinuousSearch(self.model, request, self.choose_precision(request).precision)

    def step_choice(self, request: DecodeRequest) -> StepChoice:
        """The step this engine runs for `request` (choose_step)."""
        return choose_step(request, self.model, self.shortlist is not None)

    def _step(self, request: DecodeRequest):
        """The decoder's step the search runs, as `choose_step` decides: None (the model's own, eager), compiled
        once for this engine's life, or the static cache's (buffers allocated once; on a GPU, CUDA graphs)."""
        kind = self.step_choice(request).kind
        if kind == "compiled":
            if self._compiled is None:
                from vaswani.decode.search import compiled_step

                self._compiled = compiled_step(self.model)
            return self._compiled
        if kind in ("static", "cuda_graphs"):
            if self._static_step is None:
                from vaswani.decode.static import StaticDecoding

                rows = request.decode.batch_size * request.decode.beam_size
                self._static_step = StaticDecoding(self.model, rows=rows)
            return self._static_step
        return None

    def warm_up(self, request: DecodeRequest, beam_size: int = 4) -> None:
        """With decode.compile: compile the step now, so that requests do not wait for the compiler. Greedy and
        beam search (`beam_size`, or the request's if larger), over one sentence, two of different lengths and an
        empty one, 3 steps each: every variant the step compiles into (tests/decode/test_compile.py)."""
        step = self._step(request)
        if step is None:
            return
        from vaswani.data.batching import collate
        from vaswani.decode.request import DecodeRequest
        from vaswani.decode.search import beam_search, decoding, greedy

        c, device = self.model.config, next(self.model.parameters()).device
        word = next(i for i in range(c.src_vocab_size) if i not in (c.pad_id, c.bos_id, c.eos_id))  # any word
        special = (c.pad_id, c.bos_id, c.eos_id, c.source_eos)
        sentences = collate([([word] * 3, []), ([word], [])], *special).src.to(device)  # padded
        shortest = [] if c.source_eos else [word]  # EOS alone, or one word: one-token sources
        empty = collate([(shortest, [])] * 2, *special).src.to(device)
        precision = self.choose_precision(request).precision
        three = DecodeRequest.of(max_len_a=0.0, max_len_b=3, min_len=3)
        beam = three.replace(beam_size=max(2, beam_size, request.decode.beam_size))
        with decoding(device, precision):
            for src in (sentences, sentences[:1], empty, empty[:1]):
                greedy(self.model, src, three, step=step)
                beam_search(self.model, src, beam, step=step)

    def describe(self) -> str | None:
        return None
