"""Throughput through the engine: images / s, latency and lane utilisation per sampler and concurrency."""

import pytest

from arjet.eval.throughput import _percentile, run_throughput
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
