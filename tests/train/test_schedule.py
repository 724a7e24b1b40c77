import pytest

from vaswani.config import TrainConfig
from vaswani.train.schedule import learning_rate


def test_noam_is_the_paper_formula_and_peaks_at_warmup():
    t = TrainConfig(warmup_steps=4000)
    for step in (1, 100, 4000, 10000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert learning_rate(step, t, 512) == pytest.approx(expected)
    rates = [learning_rate(s, t, 512) for s in range(1, 8000, 10)]
    assert max(rates) == pytest.approx(learning_rate(4000, t, 512), rel=1e-3)


def test_inverse_sqrt_peaks_at_peak_lr():
    t = TrainConfig(lr_schedule="inverse_sqrt", peak_lr=7e-4, warmup_steps=100)
    assert learning_rate(100, t, 512) == pytest.approx(7e-4)
    assert learning_rate(400, t, 512) == pytest.approx(3.5e-4)
    assert learning_rate(50, t, 512) == pytest.approx(3.5e-4)


def test_constant_with_cosine_decay_is_gpts_schedule():
    import math

    t = TrainConfig(lr_schedule="constant", peak_lr=3e-3, warmup_steps=100, lr_decay="cosine", max_steps=1000)
    assert learning_rate(50, t, 256, spent=0.05) == pytest.approx(1.5e-3 * 0.5 * (1 + math.cos(math.pi * 0.05)))
    assert learning_rate(100, t, 256, spent=0.0) == pytest.approx(3e-3)
    assert learning_rate(500, t, 256, spent=0.5) == pytest.approx(1.5e-3)
    assert learning_rate(1000, t, 256, spent=1.0) == pytest.approx(0.0, abs=1e-12)
    no_decay = TrainConfig(lr_schedule="constant", peak_lr=3e-3, warmup_steps=100)
    assert learning_rate(5000, no_decay, 256, spent=0.9) == pytest.approx(3e-3)


def test_a_linear_decay_reaches_zero_at_whichever_limit_comes_first():
    from vaswani.train.schedule import progress

    t = TrainConfig(max_steps=1000, max_time="10m", max_epochs=4, lr_decay="linear")
    assert progress(100, 60.0, t) == pytest.approx(0.1)  # steps and time alike; epochs unknown: left out
    assert progress(100, 60.0, t, epochs=2.0) == pytest.approx(0.5)  # the epochs' share is the largest
    assert progress(900, 60.0, t, epochs=2.0) == pytest.approx(0.9)
    assert progress(100, 600.0, t, epochs=1.0) == 1.0
    assert progress(100, 60.0, TrainConfig(max_steps=1000), epochs=3.0) == pytest.approx(0.1)  # no max_epochs
    assert learning_rate(500, t, 128, progress(499, 60.0, t, epochs=4.0)) == 0.0
