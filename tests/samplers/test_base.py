"""The sampler contract as README's "Writing a sampler" describes it: a dataclass `Sampler` with declared
options, `run(decode)` handing a `Stepper` to `decode.run`, registered by name."""

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from arjet import samplers
from arjet.samplers import Sampler, Stepper, option, registry
from arjet.testing import tiny_pipeline


@dataclass
class Echo(Sampler):
    """Cell 0 from the prefill, then every other cell a copy of it, `per_step` cells per step, no forward."""

    per_step: int = option(2, "cells copied per step", minimum=1, maximum=64)
    name: ClassVar[str] = "echo"

    def run(self, decode):
        steps = -(-(decode.session.num_cells - 1) // self.per_step)
        decode.run(_EchoStepper(decode, self.per_step), steps, fixed_steps=True)


class _EchoStepper(Stepper):
    reach = 0  # it feeds the model nothing

    def __init__(self, decode, per_step):
        self.decode, self.per_step = decode, per_step

    def start(self, first):
        self.first = first[:, None].expand(-1, self.per_step)
        self.cells = torch.arange(1, self.per_step + 1).expand_as(self.first).clone()

    def step(self):
        cells = self.decode.session.num_cells
        trace = self.decode.trace
        trace.commit(torch.where(self.cells < cells, self.cells, -1), self.first)
        self.cells += self.per_step


def test_a_sampler_written_as_the_readme_says_runs_by_name_with_its_options(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    samplers.register("echo", Echo, samplers.options_of(Echo))
    pipe = tiny_pipeline("emu3", grid=(2, 3), vocab_size=8)
    out = pipe(["a red circle", "a blue square"], sampler="echo:per_step=4", seed=0, output_type="latent")
    codes = out.codes.flatten(1)
    assert (codes == codes[:, :1]).all()
    assert [s.forward_passes for s in out.stats] == [1, 1]  # the prefill alone
    assert [s.sampler for s in out.stats] == ["echo:per_step=4", "echo:per_step=4"]
    with pytest.raises(ValueError, match="per_step must be an integer from 1 to 64, got '0'"):
        samplers.get("echo:per_step=0")
    assert samplers.get("echo") == Echo(per_step=2)


class _StoppingStepper(_EchoStepper):
    """Echo's stepper that asks its decode to stop once `stop_after` steps are taken."""

    def __init__(self, decode, per_step, stop_after):
        super().__init__(decode, per_step)
        self.stop_after, self.taken = stop_after, 0

    def step(self):
        super().step()
        self.taken += 1
        self.decode.trace.stop.requested = self.taken == self.stop_after


@dataclass
class _Stopping(Echo):
    """Echo, one cell per step, whose stepper sets the decode's stop flag after its second step."""

    name: ClassVar[str] = "stopping"

    def run(self, decode):
        self.stepper = _StoppingStepper(decode, 1, stop_after=2)
        decode.run(self.stepper, decode.session.num_cells - 1)


def test_the_stop_flag_ends_the_decode_after_the_step_in_progress():
    pipe = tiny_pipeline("emu3", grid=(2, 3), vocab_size=8)
    sampler = _Stopping()
    out = pipe("a red circle", sampler=sampler, seed=0, output_type="latent")
    assert sampler.stepper.taken == 2
    assert (out.codes >= 0).sum() == 3  # cell 0, then one cell per step taken


def test_the_base_declares_every_member_with_a_default():
    class Bare(Sampler):
        pass

    bare = Bare()
    assert (bare.requires, bare.parts, bare.check_grid((2, 2))) == (frozenset(), (), None)
    assert samplers.requirements(bare) == {}
    with pytest.raises(NotImplementedError, match="Bare does not implement run"):
        bare.run(None)
