"""The learning-rate schedule of `arjet train ar` and `arjet train sjd2`."""

from __future__ import annotations

import math


def warmup_cosine(config, step: int, seconds: float) -> float:
    """`config.lr` after a linear warm-up over `warmup_steps`, decaying to `config.min_lr` along a cosine over
    whichever budget, `max_steps` or `max_minutes` of wall clock, runs out first."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = max(
        (step - config.warmup_steps) / max(config.max_steps - config.warmup_steps, 1),
        seconds / (config.max_minutes * 60),
    )
    return config.min_lr + 0.5 * (config.lr - config.min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))
