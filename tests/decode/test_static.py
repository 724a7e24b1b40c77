"""decode.static_cache (decode/static.py): the same outputs as the dynamic KV cache, on buffers allocated once."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from tests.helpers.common import random_ids, tiny_config
from vaswani import Transformer
from vaswani.config import ConfigError, DecodeConfig
from vaswani.decode import search
from vaswani.decode.engine import TorchEngine, choose_step
from vaswani.decode.request import DecodeRequest
from vaswani.decode.static import StaticDecoding, bucket

BATCHES = [[3, 7, 1, 5], [12], [2, 9, 4, 4, 8, 6, 1, 3, 11], [40, 2]]  # source lengths, one batch each


def tokens(results):
    return [[h.tokens for h in r] if isinstance(r, list) else r.tokens for r in results]


def scores(results):
    return [h.log_prob for r in results for h in (r if isinstance(r, list) else [r])]


def searches(model, src, step, sampling=True):
    limits = DecodeRequest.of(max_len_a=1.5, max_len_b=5)
    out = {
        "greedy": search.greedy(model, src, limits, step=step),
        "beam 4, n-best 2": search.beam_search(model, src, limits.replace(beam_size=4, n_best=2), step=step),
        "beam 3, early stopping": search.beam_search(
            model, src, limits.replace(beam_size=3, early_stopping=True, min_len=2), step=step
        ),
        "beam 2, forced EOS": search.beam_search(
            model, src, limits.replace(beam_size=2, forced_eos=True, ban_after_softmax=True), step=step
        ),
    }
    if sampling:
        generator = torch.Generator(src.device).manual_seed(4)
        out["sampling"] = search.sample(model, src, limits.replace(top_k=5), generator, step=step)
    return out


@pytest.mark.parametrize(
    "positions, fused", [("sinusoidal", ""), ("learned", ""), ("sinusoidal", "fused"), ("sinusoidal", "chained")]
)
def test_the_static_cache_gives_the_dynamic_caches_outputs(model, positions, fused):
    """One StaticDecoding serves batches of other sizes and lengths (its buffers grow, rows leave the batch, beam
    search widens it): every output is the dynamic cache's, token for token, its score within rounding. `fused`:
    each beam step as the one function a GPU captures (the reordering deferred into the next step, the banned words
    by mask, the best continuations on the device), run eagerly here; `chained`: each step also leaving the next
    one's inputs, the next launched before the host reads this one, the sentences found done dropped after."""
    if positions == "learned":
        torch.manual_seed(1)
        model = Transformer(tiny_config(positions="learned", max_positions=96)).eval()
    static = StaticDecoding(model, rows=2)
    static.fused, static.chains = bool(fused), fused == "chained"
    calls, compacted = [], []
    continuations, compact = static.continuations, static.compact
    static.continuations = lambda *args: calls.append(args[0] is None or args[0][2] is not None) or continuations(*args)
    static.compact = lambda *args: compacted.append(args[0].numel()) or compact(*args)
    torch.manual_seed(0)
    with torch.inference_mode():
        for lengths in BATCHES:
            src = random_ids(lengths)
            dynamic, fixed = searches(model, src, None), searches(model, src, static)
            for name in dynamic:
                assert tokens(fixed[name]) == tokens(dynamic[name]), (name, lengths)
                assert scores(fixed[name]) == pytest.approx(scores(dynamic[name]), abs=1e-4), (name, lengths)
    # fused steps, some reordering (chained or deferred), some not (after the first step's widening)
    assert (any(calls) and not all(calls)) if fused else not calls
    assert bool(compacted) == (fused == "chained")  # sentences done while the next step ran
    assert static.cache.rows >= 9 * 4 and static.cache.source_length >= 41


def test_the_padded_output_projection_gives_the_same_outputs(model):
    """On a GPU the output projection is padded to a multiple of 64 rows (alignment); forced here on the CPU."""
    static = StaticDecoding(model)
    static.pad_output = True
    src = random_ids([3, 7, 1, 5])
    with torch.inference_mode():
        dynamic, fixed = searches(model, src, None), searches(model, src, static)
    assert static._output[0].shape == (64, model.config.d_model)  # 50 words padded to 64
    for name in dynamic:
        assert tokens(fixed[name]) == tokens(dynamic[name]), name
    with torch.no_grad():
        model.output_weight.mul_(1.5)  # the model changes (training goes on): the next batch sees it
        try:
            searches(model, src, static)
            assert torch.equal(static._output[0][:50], model.output_weight)
        finally:
            model.output_weight.div_(1.5)


def test_a_step_runs_at_a_bucket_of_rows_wasting_at_most_a_third():
    for n in range(1, 600):
        size = bucket(n, 10_000)
        assert n <= size <= max(2, -(-3 * n // 2)), n
    assert bucket(300, 256) == 256
    assert len({bucket(n, 256) for n in range(1, 257)}) == 16  # 1, 2, 3, 4, 6, ..., 128, 192, 256


def test_the_translator_decodes_alike_with_and_without_the_static_cache(model):
    from vaswani.decode.engine import TorchEngine

    engine = TorchEngine(model, "fp32")
    sources = [[5, 6, 7], [], [9] * 12, [4, 4]]
    plain = engine(sources, DecodeRequest.of(batch_size=3, static_cache=False, n_best=2))
    static = engine(sources, DecodeRequest.of(batch_size=3, static_cache=True, n_best=2))
    assert tokens(static) == tokens(plain)
    assert engine._static_step is not None  # the static step was the one used
    assert engine._step(DecodeRequest()) is None  # auto: not on a CPU


def test_static_cache_settings_are_checked():
    with pytest.raises(ConfigError, match="static_cache must be"):
        DecodeConfig(static_cache="yes").validate()
    with pytest.raises(ConfigError, match="choose one"):
        DecodeConfig(static_cache=True, compile=True).validate()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("mode", ["chained", "fused", "unfused"])
def test_cuda_graphs_give_the_dynamic_caches_outputs(model, precision, mode):
    """The default on a GPU (chained): each beam step one graph, bf16's linear layers cast once per batch, the next
    step launched before the host reads a step's results; `fused`: not launched ahead; `unfused`: neither."""
    on_gpu = Transformer(model.config)
    on_gpu.load_state_dict(model.state_dict())
    on_gpu = on_gpu.cuda().eval()
    static = StaticDecoding(on_gpu, rows=8)
    assert static.fused and static.chains and static.cast_weights
    static.fused = static.cast_weights = mode != "unfused"
    static.chains = mode == "chained"
    fused = mode != "unfused"
    torch.manual_seed(0)
    with search.decoding(torch.device("cuda"), precision):
        for lengths in BATCHES:
            src = random_ids(lengths).cuda()
            dynamic, fixed = searches(on_gpu, src, None), searches(on_gpu, src, static)
            for name in dynamic:
                assert tokens(fixed[name]) == tokens(dynamic[name]), (name, lengths)
    assert static._captured  # replayed as graphs
    assert any(key[0] == "beam" for key in static._captured) == fused
    assert bool(static._weights) == (fused and precision == "bf16")


def test_decode_compile_gives_way_to_the_cuda_graphs_on_a_gpu(model):
    """On a GPU the static cache's graphs run faster than torch.compile's step (docs/benchmarks.md, "GPU
    decoding"): --compile there keeps them (the CLI says so), unless decode.static_cache is false; on a CPU it
    compiles, and so does a model that has no static cache (a language model)."""

    class OnGpu:  # a model's device and type, as choose_step reads them, without a GPU
        def __init__(self, config) -> None:
            self.config = config

        def parameters(self):
            yield SimpleNamespace(device=torch.device("cuda"))

    def kind(request, model, shortlist=False):
        return choose_step(request, model, shortlist).kind

    request = DecodeRequest.of(compile=True)
    gpu = OnGpu(model.config)
    assert kind(request, gpu) == "cuda_graphs" and "CUDA graphs" in choose_step(request, gpu).note  # said to users
    assert kind(request.replace(static_cache=False), gpu) == "compiled"
    assert kind(DecodeRequest.of(), gpu) == "cuda_graphs"
    assert kind(request, model) == "compiled"  # on the CPU
    assert kind(DecodeRequest.of(), model) == "eager" and kind(DecodeRequest.of(static_cache=True), model) == "static"
    language_model = OnGpu(dataclasses.replace(model.config, type="decoder_only"))
    assert kind(request, language_model) == "compiled"
    assert kind(DecodeRequest.of(), model, shortlist=True) == "eager"
    with pytest.raises(ValueError, match="a shortlist changes the output layer"):
        choose_step(request, model, shortlist=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
def test_an_engine_asked_to_compile_on_a_gpu_runs_the_graphs(model):
    on_gpu = Transformer(model.config)
    on_gpu.load_state_dict(model.state_dict())
    engine = TorchEngine(on_gpu.cuda().eval(), "fp32")
    request = DecodeRequest.of(compile=True, beam_size=4)
    sources = [random_ids([n])[0].tolist() for n in (3, 7, 5)]
    assert [h[0].tokens for h in engine(sources, request)] == [
        h[0].tokens for h in engine(sources, request.replace(static_cache=False, compile=False))
    ]
    assert isinstance(engine._step(request), StaticDecoding) and engine._compiled is None
