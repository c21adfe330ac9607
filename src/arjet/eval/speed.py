"""The speed figures `arjet bench` and `arjet eval` share: per-sampler means of what each image cost, the
ratios against `ar`, and the environment they were measured in.

Step compression (mean forward passes of `ar` / of the sampler, same prompts and seeds) is hardware-free;
latency speedup (mean seconds per image of `ar` / of the sampler) holds only for samplers timed in the
same run.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class SamplerSummary:
    sampler: str
    images: int
    forward_passes: float
    tokens: float
    seconds: float
    accepted_per_step: float
    peak_memory_mb: float | None
    step_compression: float | None = None
    latency_speedup: float | None = None
    ms_per_forward: float | None = None  # seconds / forward passes
    floor_ms: float | None = None  # bandwidth floor of one forward (mean over this sampler's images)
    floor_ratio: float | None = None  # ms_per_forward / floor_ms


def summarise(
    specs: list[str], records: list[dict[str, Any]], peaks: dict[str, float | None]
) -> list[SamplerSummary]:
    """Per-sampler means of `records` (forward passes, tokens, seconds, accepted per step) and the ratios
    against `ar` when it is among them."""
    summaries = []
    for spec in specs:
        rows = [r for r in records if r["sampler"] == spec]
        summaries.append(
            SamplerSummary(
                sampler=spec,
                images=len(rows),
                forward_passes=statistics.fmean(r["forward_passes"] for r in rows),
                tokens=statistics.fmean(r["tokens"] for r in rows),
                seconds=statistics.fmean(r["seconds"] for r in rows),
                accepted_per_step=statistics.fmean(r["mean_accepted"] for r in rows),
                peak_memory_mb=peaks[spec],
            )
        )
    for s in summaries:
        floor = [
            r["floor_ms"] for r in records if r["sampler"] == s.sampler and r.get("floor_ms") is not None
        ]
        s.ms_per_forward = s.seconds / s.forward_passes * 1e3
        if floor:
            s.floor_ms = statistics.fmean(floor)
            s.floor_ratio = s.ms_per_forward / s.floor_ms
    baseline = next((s for s in summaries if s.sampler == "ar"), None)
    if baseline is not None:
        for s in summaries:
            s.step_compression = baseline.forward_passes / s.forward_passes
            s.latency_speedup = baseline.seconds / s.seconds
    return summaries


def environment(pipe, call_kwargs: dict[str, Any]) -> dict[str, Any]:
    device = pipe._execution_device
    info = {
        "pipeline": type(pipe).__name__,
        "device": str(device),
        "dtype": str(pipe.dtype),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "call": {k: v for k, v in call_kwargs.items() if v is not None},
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def speed_summaries(samplers: Sequence[str], records: Sequence[dict[str, Any]]) -> list[SamplerSummary]:
    """Per sampler with records (`forward_passes`, `tokens`, `seconds`, `mean_accepted` each): the means
    and the ratios against `ar` (None without it); no memory figures."""
    present = [spec for spec in samplers if any(r["sampler"] == spec for r in records)]
    return summarise(present, list(records), {spec: None for spec in present})
