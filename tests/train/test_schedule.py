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
