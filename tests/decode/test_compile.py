"""decode.compile: the decoder's step through torch.compile gives the search's own outputs, from a few graphs
that every later batch reuses (a graph per step would compile on every step and never pay off), and every step
runs compiled code: past Dynamo's limit of variants a function runs eager again, silently."""

from __future__ import annotations

import copy
import dataclasses
import os
import subprocess
import sys

import pytest
import torch
from torch._dynamo.utils import counters

from tests.helpers.common import random_ids, tiny_config
from vaswani.decode import search
from vaswani.decode.engine import TorchEngine
from vaswani.decode.request import DecodeRequest
from vaswani.nn import build_model
from vaswani.nn.cpu_linear.onednn_fp32 import PackedLinear, packed_available

pytestmark = pytest.mark.slow  # torch.compile

COMPILED_STEP = search.compiled_step  # the real one, where tests put a counting one in its place


class Counted:
    """A torch.compile backend that records the graphs it is given and how often they run (as they are, or
    through Inductor when `inductor`); and the step it makes, which counts its own calls."""

    def __init__(self, inductor: bool = False) -> None:
        torch._dynamo.reset()
        counters.clear()
        self.graphs, self.runs, self.calls, self.inductor = 0, 0, 0, inductor

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs += 1
        if self.inductor:
            from torch._inductor.compile_fx import compile_fx

            run = compile_fx(gm, example_inputs)
        else:
            run = gm.forward

        def counted(*args):
            self.runs += 1
            return run(*args)

        return counted

    def step(self, decoder):
        compiled = COMPILED_STEP(decoder, backend=self)

        def step(*args, **kwargs):
            self.calls += 1
            return compiled(*args, **kwargs)

        return step

    def check(self) -> None:
        assert not counters["graph_break"], dict(counters["graph_break"])
        assert self.calls > 0 and self.runs == self.calls, f"{self.calls - self.runs} of {self.calls} steps ran eager"


def test_the_compiled_step_compiles_a_few_graphs_that_later_batches_reuse(model):
    backend = Counted()
    step = backend.step(model)

    def decode(*batches: list[int]) -> int:
        with torch.inference_mode():
            for lengths in batches:
                src = random_ids(lengths)
                search.beam_search(model, src, DecodeRequest.of(beam_size=4, min_len=3), step=step)
                search.greedy(model, src, step=step)
        return backend.graphs

    # Variants: an empty cache, one position, more; one row or several; sources of one token (an empty line's EOS)
    # or more; a beam's rows sharing their source's keys or one row per source. Each is compiled once, whatever the
    # lengths and numbers of rows that come later.
    warm = decode([3, 7, 5, 2, 8], [6, 1, 4], [5], [1], [1, 1])
    later = decode([9, 9, 2, 5, 3, 7, 4], [2, 6], [4], [8, 1], [1, 1, 1])
    assert later == warm, "recompiled as rows or lengths changed"
    assert warm <= 20, f"{warm} graphs"
    backend.check()


def test_a_language_models_compiled_step_compiles_a_few_graphs_too():
    config = dataclasses.replace(tiny_config(src_vocab_size=30, tgt_vocab_size=30), type="decoder_only")
    torch.manual_seed(0)
    lm = build_model(config).eval()
    backend = Counted()
    step = backend.step(lm)

    def generate(*shapes: tuple[int, int]) -> int:
        with torch.inference_mode():
            for batch, prompt in shapes:
                prompts = torch.randint(4, 30, (batch, prompt))
                search.greedy(lm, prompts, DecodeRequest.of(max_len_a=0, max_len_b=6), step=step)
        return backend.graphs

    warm = generate((2, 4), (5, 6), (1, 3), (3, 1), (1, 1))
    assert generate((4, 5), (2, 9), (1, 7)) == warm, "recompiled as rows or lengths changed"
    assert warm <= 20, f"{warm} graphs"
    backend.check()


@pytest.mark.parametrize("owned", [False, True], ids=["as-passed", "packed"])
def test_compiled_decoding_gives_the_searchs_own_outputs(model, monkeypatch, owned):
    """Inductor's code (a C++ compiler on the CPU), through the engine as `vaswani translate --compile` runs it:
    there the engine owns its model and packs its float32 layers for oneDNN (cpu_linear/onednn_fp32.py), whose products
    Inductor's lowering refused ("torch.compile failed (LoweringException...)") for every model loaded from disk."""
    from vaswani.nn.cpu_linear import onednn_fp32

    backend = Counted(inductor=True)
    monkeypatch.setattr(search, "compiled_step", backend.step)
    # packed as if timed faster: a test's small layers may stay torch's on this CPU (onednn_fp32.float32_layer)
    monkeypatch.setattr(onednn_fp32, "timed", lambda *shape: (1.0, 2.0))
    sources = [random_ids([n])[0].tolist() for n in (3, 7, 5, 2, 8, 6, 1, 4)]
    engine = TorchEngine(copy.deepcopy(model) if owned else model, "fp32", owned=owned)
    if owned and packed_available():
        assert any(isinstance(m, PackedLinear) for m in engine.model.modules())
    for beam in (4, 1):
        request = DecodeRequest.of(beam_size=beam, batch_size=3, n_best=beam)
        eager = engine(sources, request)
        compiled = engine(sources, request.replace(compile=True))
        assert [[h.tokens for h in hyps] for hyps in compiled] == [[h.tokens for h in hyps] for hyps in eager]
        for ours, theirs in zip(compiled, eager, strict=True):
            for a, b in zip(ours, theirs, strict=True):
                assert abs(a.log_prob - b.log_prob) < 1e-4
    backend.check()  # every step ran Inductor's code


def test_warm_up_compiles_every_graph_before_the_first_request(model, monkeypatch):
    """What `vaswani serve --compile` does at startup: afterwards no request waits for the compiler, and every
    request runs compiled code (beam sizes, one sentence or several, any lengths)."""
    backend = Counted()
    monkeypatch.setattr(search, "compiled_step", backend.step)
    engine = TorchEngine(model, "fp32")
    request = DecodeRequest.of(compile=True, batch_size=4, beam_size=1)  # a model whose default is greedy
    engine.warm_up(request)
    warm = backend.graphs
    assert warm > 0
    sources = [random_ids([n])[0].tolist() for n in (3, 7, 5, 2, 8, 6, 1, 9, 9)]
    for beam in (4, 1, 8):
        engine(sources, request.replace(beam_size=beam, n_best=1))
        engine(sources[:1], request.replace(beam_size=beam, n_best=1))
        engine([[5]], request.replace(beam_size=beam, n_best=1))
    assert backend.graphs == warm, "a request compiled"
    backend.check()


def test_a_failure_to_compile_is_a_one_line_error_naming_the_setting_and_the_fix(model):
    torch._dynamo.reset()

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


STEP_TWICE = """
import sys, torch
from tests.helpers.common import random_ids
from tests.helpers.decode_models import random_model
from vaswani.decode import search
model = random_model(50, seed=3)
with torch.inference_mode():
    memory, mask = model.encode(random_ids([3, 7, 5]))
    step = search.compiled_step(model)
    tokens = torch.full((3,), model.config.bos_id)
    for _ in range(2):
        eager, cache = model.decode_step(tokens, memory, mask, None if _ == 0 else cache)
        compiled, compiled_cache = step(tokens, memory, mask, None if _ == 0 else compiled_cache)
        print((eager - compiled).abs().max().item())
        tokens = eager.argmax(-1)
"""


def test_code_compiled_for_one_cpu_kind_is_not_reused_for_another(tmp_path):
    """Inductor's on-disk cache keys its code without the vector instructions it was made for: the step compiled
    as an AVX2-only CPU (the AVX2 setting) and then loaded on the same machine natively (AVX-512) corrupted memory,
    and the reverse gave wrong outputs (in CI's second run). runtime.cpu_kind goes into the key."""
    avx2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    if os.environ.get("ATEN_CPU_CAPABILITY") == "avx2":
        pytest.skip("played as an AVX2 CPU (CI's second run): this test plays both kinds itself, in the first run")
    env = {k: v for k, v in os.environ.items() if k not in avx2} | {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    native = subprocess.run(
        [sys.executable, "-c", "from vaswani.runtime.device import cpu_kind; print(cpu_kind())"],
        env=env,
        text=True,
        capture_output=True,
        check=True,
    ).stdout
    if "vec_isa=avx2" in native:
        pytest.skip("this CPU's own kind is AVX2: one kind only")
    for kind in (env | avx2, env):  # the order that corrupted memory
        run = subprocess.run([sys.executable, "-c", STEP_TWICE], env=kind, text=True, capture_output=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        differences = [float(x) for x in run.stdout.split()]
        assert len(differences) == 2 and max(differences) < 1e-4, run.stdout  # one per step of STEP_TWICE
