"""Throughput through the engine: images / s, latency and lane utilisation per sampler and concurrency."""

import contextlib

import pytest
import torch

from arjet.bench.throughput import _percentile, run_throughput
from arjet.testing import tiny_pipeline

PROMPTS = ["a red circle", "a blue square", "star", "a green star", "a", "two circles"]


def test_every_sampler_at_every_concurrency_decodes_every_prompt():
    pipe = tiny_pipeline("emu3", grid=(3, 4), vocab_size=8, logit_scale=3.0)
    result = run_throughput(pipe, ["ar", "mc-sjd:window=4", "adaptive"], PROMPTS, [1, 3], progress=False)
    assert [(row.sampler, row.concurrency) for row in result.rows] == [
        (sampler, c) for c in (1, 3) for sampler in ("ar", "mc-sjd:window=4", "adaptive")
    ]
    for row in result.rows:
        assert row.images == len(PROMPTS) and row.images_per_second > 0
        assert 0 < row.latency_p50 <= row.latency_p95 and 0 < row.utilisation <= 1
        assert (row.vs_ar == 1.0) == (row.sampler == "ar")
    ar = [row for row in result.rows if row.sampler == "ar"]
    assert all(row.forward_passes == 12 for row in ar)  # 3x4 codes, one per step
    adaptive = [row for row in result.rows if row.sampler == "adaptive"]
    assert all(sum(row.windows.values()) > 0 for row in adaptive) and not ar[0].windows
    assert "| ar | 1 |" in result.table() and "| adaptive | 3 |" in result.table()


def test_bad_settings_are_refused_before_any_engine_starts():
    pipe = tiny_pipeline("janus")
    with pytest.raises(ValueError, match="concurrency must be an integer >= 1, got 0"):
        run_throughput(pipe, ["ar"], PROMPTS, [0], progress=False)
    with pytest.raises(ValueError, match="windw"):
        run_throughput(pipe, ["sjd:windw=3"], PROMPTS, [1], progress=False)
    with pytest.raises(ValueError, match="at least one prompt"):
        run_throughput(pipe, ["ar"], [], [1], progress=False)


def test_percentiles_interpolate_between_ranks():
    assert _percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert _percentile([1.0, 2.0], 0.95) == pytest.approx(1.95)
    assert _percentile([7.0], 0.95) == 7.0


@pytest.mark.parametrize(("busy", "warned"), [(1.0, True), (0.1, False)])
def test_the_throughput_bench_warns_when_other_processes_kept_the_cores_busy(busy, warned, monkeypatch):
    """The same load measurement and warning as the bench's (`--concurrency` had none), from injected
    readings."""
    from arjet import machine

    monkeypatch.setattr(machine, "others_busy", lambda reading, seconds: busy)
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=8)
    with torch_threads(1):
        result = run_throughput(pipe, ["ar"], PROMPTS[:2], [1], progress=False)
    environment = result.to_dict()["environment"]
    assert environment["others_busy_cores"] == busy and environment["usable_cores"] == 2
    assert environment["torch_threads"] == 1
    assert bool(result.warnings) == warned and result.to_dict()["warnings"] == result.warnings
    if warned:
        assert result.warnings[0].startswith("other processes kept 1.0 of the 2 cores busy")


@contextlib.contextmanager
def torch_threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
