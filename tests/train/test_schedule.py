"""The warm-up + cosine learning-rate schedule shared by the training stages."""

from types import SimpleNamespace

import pytest

from arjet.train.schedule import warmup_cosine


def _config(**changes):
    values = {"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 10, "max_steps": 110, "max_minutes": 60.0}
    return SimpleNamespace(**{**values, **changes})


def test_warm_up_then_cosine_down_to_min_lr_over_the_step_budget():
    config = _config()
    assert warmup_cosine(config, 0, 0.0) == pytest.approx(1e-4)
    assert warmup_cosine(config, 9, 0.0) == pytest.approx(1e-3)
    assert warmup_cosine(config, 10, 0.0) == pytest.approx(1e-3)
    assert warmup_cosine(config, 60, 0.0) == pytest.approx(5.5e-4)  # half-way: the mean of lr and min_lr
    assert warmup_cosine(config, 110, 0.0) == pytest.approx(1e-4)
    assert warmup_cosine(config, 500, 0.0) == pytest.approx(1e-4)


def test_the_wall_clock_budget_decays_it_when_it_runs_out_first():
    config = _config(max_steps=10**6, max_minutes=2.0)
    assert warmup_cosine(config, 20, 60.0) == pytest.approx(5.5e-4)
    assert warmup_cosine(config, 20, 120.0) == pytest.approx(1e-4)


def test_min_lr_equal_to_lr_is_a_constant_rate_after_warm_up():
    config = _config(min_lr=1e-3)
    assert [warmup_cosine(config, step, 30.0) for step in (10, 50, 200)] == pytest.approx([1e-3] * 3)
