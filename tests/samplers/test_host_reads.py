"""The decode loop does not wait for the device: host reads of tensors during a decode stay fixed in number
(plain AR, plain ZipAR) or come once every few steps (samplers whose step count depends on the data)."""

import math

import pytest
import torch
from test_sjd2 import _with_noise_conditioning

from arjet.samplers import SJD, SJD2, Sampler, ZipAR, decode, get
from arjet.testing import tiny_drafter, tiny_pipeline

from families import decoded_grids

READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy")


class _Counted(Sampler):
    """A sampler that counts host reads of tensors while the wrapped sampler runs."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.counting = False
        self.reads = 0

    @property
    def name(self):
        return self.sampler.name

    def run(self, decode):
        self.counting = True
        try:
            self.sampler.run(decode)
        finally:
            self.counting = False


@pytest.fixture
def counted(monkeypatch):
    samplers = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, _original=original, **kwargs):
            for sampler in samplers:
                sampler.reads += sampler.counting
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapper)

    def make(sampler):
        samplers.append(_Counted(get(sampler)))
        return samplers[-1]

    return make


def _decode(pipe, sampler, grid):
    out = pipe("a red circle", sampler=sampler, seed=0, output_type="latent", num_images_per_prompt=2)
    assert (out.codes >= 0).all() and out.codes.shape[1:] == grid
    return out


@pytest.mark.parametrize("sampler", ["ar", "zipar:w=2"])
def test_a_fixed_length_decode_reads_the_device_a_fixed_number_of_times(family, sampler, counted):
    reads = []
    for side in (3, 6):
        grid = (side, side)
        pipe = tiny_pipeline(family, grid=grid, vocab_size=8)
        spy = counted(sampler)
        _decode(pipe, spy, grid)
        reads.append(spy.reads)
    assert reads[0] == reads[1] <= 3 * len(decoded_grids(pipe, grid))  # 4x the cells, the same reads


@pytest.mark.parametrize(
    "sampler",
    [
        "sjd:window=3",
        "mc-sjd:window=3",
        "mc-sjd:window=3,coupling=gumbel",
        "sjd:window=3,reuse=0.5",
        "zipar+sjd:w=3,window=2",
        "pjd:c=2,window=3",
        "lantern:k=3,window=3",
        "gsd:window=3",
        "mc-sjd+entropy:window=3,temperature=true",
        "sjd-pac+gsd:window=9,tree_width=2",
        "sjd-pac:window=16",
        "sjd-pac:window=9,tree_width=2,coupling=false,init=sample_vertical",
        "lantern++:window=16,k=3",
        "eagle:window=8,tree_width=2",
        "eagle:chain=jacobi,window=9,tree_width=2",
        "eagle2:tree_width=2,expand=2,tree_depth=4",
        "lantern:drafter=true,tree_width=2,expand=1,tree_depth=3,k=3",
        "lantern++:drafter=true,window=8,tree_width=2,k=3",
        "cool-sd:window=8,tree_width=2",
        "eagle2+cool-sd:tree_width=2,expand=2,tree_depth=4,delta=2",
    ],
)
def test_a_speculative_decode_reads_the_device_once_every_few_steps(family, sampler, counted):
    """Beyond one read every `CHECK_EVERY` steps, the reads are a fixed set-up (e.g. LANTERN's neighbour
    table): the same for a grid of 36 cells and one of 100. The pipelines have a drafter (which only the
    drafter samplers use)."""
    extra = []
    for side in (6, 10):
        grid = (side, side)
        pipe = tiny_drafter(tiny_pipeline(family, grid=grid, vocab_size=16, logit_scale=3.0))
        spy = counted(sampler)
        out = _decode(pipe, spy, grid)
        steps = _steps(out)  # forwards after each grid's prefill
        assert sum(steps) > 2 * decode.CHECK_EVERY
        extra.append(spy.reads - sum(math.ceil(s / decode.CHECK_EVERY) for s in steps))
    assert 0 <= extra[0] == extra[1] <= 8 * len(steps)


def _steps(out) -> list[int]:
    """The decode loop's steps in each grid the call decoded (a preview grid's first): the forwards after
    the grid's prefill, of the image that took most."""
    preview = [s.extra.get("preview_forward_passes") for s in out.stats]
    if preview[0] is None:
        return [max(s.forward_passes for s in out.stats) - 1]
    target = [s.forward_passes - p for s, p in zip(out.stats, preview, strict=True)]
    return [max(preview) - 1, max(target) - 1]


def test_sjd2_reads_the_device_once_every_few_steps(counted):
    grid = (4, 4)
    pipe = _with_noise_conditioning(tiny_pipeline("emu3", grid=grid, vocab_size=8, logit_scale=3.0))
    spy = counted(SJD2(window=4))
    out = _decode(pipe, spy, grid)
    steps = max(s.forward_passes for s in out.stats) - 1
    assert spy.reads <= math.ceil(steps / decode.CHECK_EVERY) + 2


def test_the_counter_sees_a_host_read(counted):
    """The instrument itself: a sampler that reads the device every step is caught."""

    class Chatty(SJD):
        def run(self, decode):
            trace = decode.trace
            original = trace.commit

            def commit(*args, **kwargs):
                original(*args, **kwargs)
                bool(trace.done.all())

            trace.commit = commit
            super().run(decode)

    grid = (4, 4)
    spy = counted(Chatty(window=3))
    out = _decode(tiny_pipeline("janus", grid=grid, vocab_size=8), spy, grid)
    assert spy.reads >= max(s.forward_passes for s in out.stats)


def test_zipar_row_slots_follow_the_schedule():
    from arjet.samplers.zipar import row_slots

    assert row_slots(48, 48, 16) == 4 and row_slots(48, 48, 48) == 1 and row_slots(3, 48, 1) == 3
    assert ZipAR(w=2).lags((3, 4)) == [1, 1] and ZipAR(w=3, schedule="llamagen").lags((4, 4)) == [4, 3, 3]
