"""precision auto: bf16 only where measured faster; explicit bf16 warns when slower; the measurement is real."""

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.runtime import precision
from vaswani.runtime.precision import Measurement, choose

CONFIG = ModelConfig.preset("tiny", vocab_size=1000)
CPU = torch.device("cpu")


def fake(speedup: float, emulated: bool = False):
    def measure(config, device, rows, training):
        return Measurement(fp32_s=0.01, bf16_s=0.01 / speedup, rows=rows, emulated=emulated)

    return measure


@pytest.mark.parametrize(
    ("speedup", "training", "expected"),
    [
        (1.7, True, "bf16"),
        (1.1, True, "fp32"),
        (0.5, True, "fp32"),  # AMD EPYC-like, near-equal, Xeon-like
    ],
)
def test_auto_picks_the_precision_that_measured_faster(speedup, training, expected):
    choice = choose("auto", CONFIG, CPU, 4000, training, measure=fake(speedup))
    assert choice.precision == expected
    assert "fp32 10.0 ms" in choice.describe() and f"{speedup:.2f}x" in choice.describe()
    assert choice.warning() is None


def test_decoding_auto_is_fp32_and_never_measured():
    """The same command gives the same translation under any load: "auto" never times anything for decoding."""

    def measure(*args):
        raise AssertionError("decoding's auto must not measure")

    choice = choose("auto", CONFIG, CPU, 256, False, measure=measure)
    assert choice.precision == "fp32" and choice.measurement is None and "same translation" in choice.describe()
    assert choose("bf16", CONFIG, CPU, 256, False, measure=fake(1.7)).precision == "bf16"  # asked for: bf16


def test_emulated_bf16_gives_fp32_and_says_why():
    choice = choose("auto", CONFIG, CPU, 4000, True, measure=fake(0.01, emulated=True))
    assert choice.precision == "fp32" and "emulated" in choice.describe()


def test_explicit_bf16_that_is_slower_warns_with_the_ratio_and_goes_on():
    choice = choose("bf16", CONFIG, CPU, 4000, True, measure=fake(0.52))
    assert choice.precision == "bf16"
    assert "0.52x fp32's speed" in choice.warning() and "as asked" in choice.warning()
    assert choose("bf16", CONFIG, CPU, 4000, True, measure=fake(1.7)).warning() is None


def test_explicit_fp32_is_not_measured():
    def measure(*args):
        raise AssertionError("measured")

    assert choose("fp32", CONFIG, CPU, 4000, True, measure=measure).precision == "fp32"


@pytest.mark.parametrize(("fp32_s", "bf16_s", "chosen"), [(2.0, 1.0, "bf16"), (1.0, 1.0, "fp32")])
def test_a_cuda_gpu_with_bf16_is_measured_as_a_cpu_is(monkeypatch, fp32_s, bf16_s, chosen):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    seen = []

    def measure(config, device, rows, training):
        seen.append(device.type)
        return precision.Measurement(fp32_s, bf16_s, rows)

    choice = choose("auto", CONFIG, torch.device("cuda"), 4000, True, measure=measure)
    assert seen == ["cuda"] and choice.precision == chosen and choice.measurement is not None


def test_a_cuda_gpu_without_bf16_runs_fp32_unmeasured(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    choice = choose("auto", CONFIG, torch.device("cuda"), 4000, True, measure=None)
    assert choice.precision == "fp32" and choice.measurement is None and "no bf16" in choice.reason


def test_the_measured_vocabulary_projection_is_chunked_as_the_loss_chunks_it_on_that_device():
    """The loss's 256-row chunks timed on a GPU made precision auto pick fp32 for the base model on an H100
    (a pass of launches, bf16 no faster than fp32); the GPU's chunks are the loss's GPU chunks."""
    config = ModelConfig.preset("base", vocab_size=8000)
    vocab = [s for s in precision._shapes(config, True, 4096, "cpu") if s[1] == 8000]
    assert vocab == [(512, 8000, 4096 / 256, 256)]
    vocab = [s for s in precision._shapes(config, True, 4096, "cuda") if s[1] == 8000]
    assert vocab == [(512, 8000, 1.0, 4096)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (measures on it)")
@pytest.mark.parametrize("training", [True, False])
def test_the_measurement_runs_on_a_real_gpu(training):
    m = precision.measure_matmuls(CONFIG, torch.device("cuda"), 4096, training)
    assert 0 < m.fp32_s < 1 and 0 < m.bf16_s < 1 and not m.emulated


def test_unknown_precision_is_an_error():
    with pytest.raises(ValueError, match="auto, fp32 or bf16"):
        choose("fp16", CONFIG, CPU, 10, True)


@pytest.mark.parametrize("training", [True, False])
def test_real_measurement_is_quick_finite_and_leaves_the_random_state_alone(training):
    state = torch.get_rng_state()
    m = precision.measure_matmuls(CONFIG, CPU, 256, training)
    assert torch.equal(state, torch.get_rng_state())
    assert 0 < m.fp32_s < 1 and 0 < m.bf16_s < float("inf")


def test_benchmarks_learn_why_bf16_is_skipped_where_it_is_emulated(monkeypatch):
    monkeypatch.setattr(precision, "_probe", lambda device, generator: (1e-4, 1e-2))
    assert "emulated" in precision.bf16_emulated() and "(100x slower)" in precision.bf16_emulated()
    monkeypatch.setattr(precision, "_probe", lambda device, generator: None)
    assert precision.bf16_emulated() is None
