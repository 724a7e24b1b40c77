"""decode.compile: the decoder's step through torch.compile gives the search's own outputs, from a few graphs
that every later batch reuses (a graph per step would compile on every step and never pay off)."""

from __future__ import annotations

import dataclasses

import torch
from torch._dynamo.utils import counters

from tests.conftest import random_ids, tiny_config
from tests.decode.test_search import model  # noqa: F401  (the half-trained fixture)
from vaswani.config import DecodeConfig
from vaswani.decode import search
from vaswani.decode.engine import TorchEngine
from vaswani.nn import build_model


def _counting() -> tuple[list[torch.fx.GraphModule], callable]:
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    counters.clear()
    return graphs, backend


def test_the_compiled_step_compiles_a_few_graphs_that_later_batches_reuse(model):  # noqa: F811
    graphs, backend = _counting()
    step = torch.compile(model.decode_step, dynamic=True, backend=backend)

    def decode(*batches: list[int]) -> int:
        with torch.inference_mode():
            for lengths in batches:
                src = random_ids(lengths)
                search.greedy(model, src, step=step)
                search.beam_search(model, src, 4, step=step, min_len=3)
        return len(graphs)

    # Graphs for: the first step (an empty cache), the second (one position), later ones; one row or several.
    warm = decode([3, 7, 5, 2, 8], [6, 1, 4], [5])
    assert decode([9, 9, 2, 5, 3, 7, 4], [2, 6], [4], [8, 1]) == warm, "recompiled as rows or lengths changed"
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert warm <= 8, f"{warm} graphs"


def test_a_language_models_compiled_step_compiles_a_few_graphs_too():
    config = dataclasses.replace(tiny_config(src_vocab_size=30, tgt_vocab_size=30), type="decoder_only")
    torch.manual_seed(0)
    lm = build_model(config).eval()
    graphs, backend = _counting()
    step = torch.compile(lm.decode_step, dynamic=True, backend=backend)

    def generate(*shapes: tuple[int, int]) -> int:
        with torch.inference_mode():
            for batch, prompt in shapes:
                search.greedy(lm, torch.randint(4, 30, (batch, prompt)), max_len_a=0, max_len_b=6, step=step)
        return len(graphs)

    warm = generate((2, 4), (5, 6), (1, 3), (3, 1))
    assert generate((4, 5), (2, 9), (1, 7)) == warm, "recompiled as rows or lengths changed"
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert warm <= 8, f"{warm} graphs"


def test_compiled_decoding_gives_the_searchs_own_outputs(model):  # noqa: F811
    """Inductor's code (a C++ compiler on the CPU), through the engine as `vaswani translate --compile` runs it."""
    sources = [random_ids([n])[0].tolist() for n in (3, 7, 5, 2, 8, 6, 1, 4)]
    engine = TorchEngine(model, "fp32")
    for beam in (1, 4):
        decode = DecodeConfig(beam_size=beam, batch_size=3)
        eager = engine(sources, decode, n_best=beam)
        compiled = engine(sources, dataclasses.replace(decode, compile=True), n_best=beam)
        assert [[h.tokens for h in hyps] for hyps in compiled] == [[h.tokens for h in hyps] for hyps in eager]
        for ours, theirs in zip(compiled, eager, strict=True):
            for a, b in zip(ours, theirs, strict=True):
                assert abs(a.log_prob - b.log_prob) < 1e-4
    assert engine._compiled is not None  # compiled once, for the engine's life


def test_warm_up_compiles_every_graph_before_the_first_request(model, monkeypatch):  # noqa: F811
    """What `vaswani serve --compile` does at startup: afterwards no request waits for the compiler."""
    graphs, backend = _counting()
    monkeypatch.setattr(search, "compiled_step", lambda m: torch.compile(m.decode_step, dynamic=True, backend=backend))
    engine = TorchEngine(model, "fp32")
    decode = DecodeConfig(compile=True, batch_size=4)
    engine.warm_up(decode)
    warm = len(graphs)
    assert warm > 0
    sources = [random_ids([n])[0].tolist() for n in (3, 7, 5, 2, 8, 6, 1)]
    for beam in (4, 1):
        engine(sources, dataclasses.replace(decode, beam_size=beam), n_best=1)
        engine(sources[:1], dataclasses.replace(decode, beam_size=beam), n_best=1)
    assert len(graphs) == warm, "a request compiled"


def test_a_failure_to_compile_is_a_one_line_error_naming_the_setting_and_the_fix(model):  # noqa: F811
    def no_compiler(gm, example_inputs):
        raise FileNotFoundError("no C++ compiler: g++ not found")

    step = search.compiled_step(model, backend=no_compiler)
    with torch.inference_mode():
        try:
            search.greedy(model, random_ids([3, 5]), step=step)
        except ValueError as error:
            message = str(error)
        else:
            raise AssertionError("no error")
    assert message.startswith("decode.compile: torch.compile failed (FileNotFoundError: no C++ compiler")
    assert message.endswith("decode without --compile (decode.compile false)") and "\n" not in message
