"""The engine's adaptive mode changes speed only: whatever window it picks at each step, and however the
windows change during a decode, its images follow `ar`'s exact distribution (the statistical test of
`tests/samplers/test_lossless.py`, with its negative control run through the engine)."""

import functools
import random

import pytest
import torch

from arjet.engine import Engine
from arjet.pipelines.adaptive import CostModel
from arjet.samplers import LogitsPolicy, jacobi
from arjet.testing import tiny_pipeline

from stats import exact_joint, goodness_of_fit

# Thousands of draws per test: the whole suite (CI) runs them, the fast lane (`-m "not slow"`) does not.
pytestmark = pytest.mark.slow

PROMPT = "a red circle left of a blue square"
GUIDANCE, POLICY = 3.0, LogitsPolicy(temperature=0.8, top_k=3)
SAMPLES = 4000
ALPHA, REJECT_BELOW = 1e-5, 1e-6  # as in test_lossless.py
GRIDS = {"janus": (2, 2), "emu3": (2, 3), "lumina_mgpt": (2, 3)}
LOGIT_SCALES = {"janus": 3.0, "emu3": 3.0, "lumina_mgpt": 6.0}


@functools.cache
def _setup(family):
    pipe = tiny_pipeline(family, grid=GRIDS[family], vocab_size=4, logit_scale=LOGIT_SCALES[family])
    pipe.set_progress_bar_config(disable=True)
    return pipe, exact_joint(pipe, PROMPT, GRIDS[family], POLICY, GUIDANCE)


def _draw(pipe, samples=SAMPLES):
    with Engine(pipe, lanes=64, max_queue=samples, prompt_tokens=32) as engine:
        results = engine.generate(
            [PROMPT] * samples,
            seed=0,
            sampler="adaptive",
            guidance_scale=GUIDANCE,
            temperature=POLICY.temperature,
            top_k=POLICY.top_k,
        )
    return [tuple(result.codes.flatten().tolist()) for result in results], engine.stats


def _fit(samples, exact):
    return goodness_of_fit(torch.tensor(samples), exact)


def test_the_adaptive_mode_is_exact():
    """The windows the cost model picks (the next test covers every family with windows changing at
    every step, which exercises the same code harder)."""
    pipe, exact = _setup("emu3")
    samples, stats = _draw(pipe)
    assert _fit(samples, exact) > ALPHA
    assert sum(stats.windows.values()) == stats.steps  # every step of the group chose a window


def test_the_adaptive_mode_is_exact_when_its_window_changes_at_every_step(family, monkeypatch):
    """A window drawn at random for every step: draft slots narrowed away and back again, drafts of every
    age verified; still `ar`'s distribution."""
    if family == "glm_image":
        pytest.skip("GLM-Image decodes two grids: the engine runs it as whole calls, with no window to adapt")
    chooser = random.Random(0)
    monkeypatch.setattr(CostModel, "choose", lambda self, size, busy: chooser.choice(self.windows))
    pipe, exact = _setup(family)
    samples, stats = _draw(pipe)
    assert _fit(samples, exact) > ALPHA
    assert len(stats.windows) >= 3


def test_negative_control_wrong_maths_in_the_adaptive_mode_is_rejected(monkeypatch):
    """The same test, through the engine, rejects verification whose residual is replaced by `p`."""
    monkeypatch.setattr(jacobi, "residual", lambda target, q: target)
    monkeypatch.setattr(CostModel, "choose", lambda self, size, busy: max(self.windows))
    pipe, exact = _setup("emu3")
    samples, _ = _draw(pipe, samples=2 * SAMPLES)
    assert _fit(samples, exact) < REJECT_BELOW
