"""Side-by-side speed of samplers: same model, prompts and seeds, one process, ratios against `ar`.

Step compression (AR forward passes / sampler forward passes) is hardware-free; latency speedup is
measured in the same run, so both columns compare like with like. Each sampler runs once untimed first
(warm-up), then the images are generated one call at a time (`batch_size` prompts per call), samplers
interleaved per call so that drift in machine load hits every sampler alike; `images / s` is the
throughput (images over the seconds of the calls that made them); the result warns when its seconds are not
trustworthy (calls of one sampler far apart, other processes busy on the cores). Milliseconds per forward pass are set against the bandwidth
floor of one forward (`arjet.bench.floor`): the bytes it must read over the device's measured copy bandwidth.
The per-sampler figures are `arjet.bench.speed`'s, the same as `arjet eval` reports.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .. import checks, machine
from .. import samplers as sampler_registry
from ..reports.tables import markdown_table, number, ratio, significant
from ..session.capture import CAPTURE_KEYS
from .floor import (
    ForwardFloor,
    average_kv_tokens,
    forward_weight_bytes,
    kv_bytes_per_token,
    measure_copy_bandwidth,
)
from .speed import SamplerSummary, environment, summarise, timing_warnings

HEADER = (
    "sampler",
    "forward passes",
    "step compression",
    "s / image",
    "images / s",
    "latency speedup",
    "accepted / step",
    "peak memory (MB)",
    "ms / forward",
    "floor ms / forward",
    "x floor",
)


@dataclass
class BenchResult:
    summaries: list[SamplerSummary]
    records: list[dict[str, Any]]
    environment: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # why the seconds may not be trustworthy

    def to_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "samplers": [asdict(s) for s in self.summaries],
            "images": self.records,
            "warnings": self.warnings,
        }

    def table(self) -> str:
        """A markdown table, one row per sampler."""
        rows = [
            (
                s.sampler,
                number(s.forward_passes, 1),
                ratio(s.step_compression),
                number(s.seconds, 3),
                significant(s.images_per_second),
                ratio(s.latency_speedup),
                number(s.accepted_per_step),
                number(s.peak_memory_mb, 0),
                significant(s.ms_per_forward),
                significant(s.floor_ms),
                ratio(s.floor_ratio, 1),
            )
            for s in self.summaries
        ]
        return markdown_table(HEADER, rows, numeric=[False, *[True] * (len(HEADER) - 1)])


def run_bench(
    pipe,
    sampler_specs: Sequence[str],
    prompts: Sequence[str],
    seed: int = 0,
    warmup: bool = True,
    progress: bool = True,
    *,
    arch: str | None = None,
    copy_bandwidth: float | None = None,
    batch_size: int = 1,
    **call_kwargs: Any,
) -> BenchResult:
    """Generate every prompt with every sampler (image `i` with seed `seed + i`) and summarise.

    `batch_size` prompts go to each pipeline call (the last call may have fewer); `call_kwargs` go to every
    call. The device's copy bandwidth (bytes / s) for the floor is measured once here unless
    `copy_bandwidth` gives it; `arch` (the preset name of a random-weight model) is recorded in the
    environment."""
    specs = list(dict.fromkeys(sampler_specs))
    instances = {spec: sampler_registry.get(spec) for spec in specs}  # validates every spec up front
    if not prompts:
        raise ValueError("bench needs at least one prompt")
    if not checks.is_integer(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if copy_bandwidth is not None and not copy_bandwidth > 0:
        raise ValueError(
            f"copy_bandwidth must be a positive number of bytes per second, got {copy_bandwidth!r}"
        )
    pipe.set_progress_bar_config(disable=True)
    device = pipe._execution_device
    floors = forward_floors(pipe, prompts, call_kwargs, copy_bandwidth)
    calls = [
        list(range(start, min(start + batch_size, len(prompts))))
        for start in range(0, len(prompts), batch_size)
    ]
    if warmup:
        for spec in specs:
            first = [prompts[i] for i in calls[0]]
            pipe(first, sampler=instances[spec], seed=seed, output_type="latent", **call_kwargs)
    records: list[dict[str, Any]] = []
    peaks: dict[str, float | None] = {spec: None for spec in specs}
    iterator = list(enumerate(calls))
    load_reading, began = machine.cpu_seconds(), time.perf_counter()
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="bench", unit="call" if batch_size > 1 else "prompt")
    for call, indices in iterator:
        batch = [prompts[i] for i in indices]
        for spec in specs:
            with PeakMemory(device) as memory:
                start = time.perf_counter()
                out = pipe(
                    batch,
                    sampler=instances[spec],
                    seed=seed + indices[0],
                    output_type="latent",
                    **call_kwargs,
                )
                _synchronize(device)
                seconds = time.perf_counter() - start
            if memory.peak_mb is not None:
                peaks[spec] = max(peaks[spec] or 0.0, memory.peak_mb)
            call_passes = max(stat.forward_passes for stat in out.stats)
            call_floor = None if floors is None else _call_floor([floors[i] for i in indices])
            codes = out.codes.cpu()
            for index, stat, image_codes in zip(indices, out.stats, codes, strict=True):
                records.append(
                    {
                        "sampler": spec,
                        "index": index,
                        "seed": seed + index,
                        "prompt": prompts[index],
                        "forward_passes": stat.forward_passes,
                        "tokens": stat.tokens,
                        "seconds": seconds / len(indices),
                        "mean_accepted": statistics.fmean(stat.accepted_per_step),
                        "floor_ms": None if call_floor is None else call_floor.ms,
                        "call": call,
                        "call_images": len(indices),
                        "call_seconds": seconds,
                        "call_forward_passes": call_passes,
                        "codes_sha1": hashlib.sha1(image_codes.numpy().tobytes()).hexdigest(),
                        **{key: stat.extra[key] for key in CAPTURE_KEYS if key in stat.extra},
                    }
                )
    info = environment(pipe, call_kwargs)
    info["others_busy_cores"] = machine.others_busy(load_reading, time.perf_counter() - began)
    info["arch"] = arch
    info["batch_size"] = batch_size
    info.update(floor_environment(floors))
    return BenchResult(summarise(specs, records, peaks), records, info, timing_warnings(records, info))


def forward_floors(
    pipe, prompts: Sequence[str], call_kwargs: dict[str, Any], copy_bandwidth: float | None = None
) -> list[ForwardFloor] | None:
    """The bandwidth floor of one forward for each prompt (its KV cache length differs); the copy bandwidth
    is measured now unless given. None when the pipeline's adapter does not say which weights it reads."""
    weights = forward_weight_bytes(pipe)
    per_token = kv_bytes_per_token(pipe)
    if weights is None or per_token is None:
        return None
    bandwidth = copy_bandwidth or measure_copy_bandwidth(pipe._execution_device)
    return [
        ForwardFloor(weights, per_token * average_kv_tokens(pipe, prompt, call_kwargs), bandwidth)
        for prompt in prompts
    ]


def _call_floor(floors: list[ForwardFloor]) -> ForwardFloor:
    """The floor of one forward of a call decoding several images: the weights once, every image's cache."""
    first = floors[0]
    return ForwardFloor(first.weight_bytes, sum(f.kv_bytes for f in floors), first.bandwidth)


def floor_environment(floors: list[ForwardFloor] | None) -> dict[str, Any]:
    if floors is None:
        return {"copy_bandwidth_gb_s": None, "forward_weight_bytes": None, "mean_kv_bytes": None}
    return {
        "copy_bandwidth_gb_s": floors[0].bandwidth / 1e9,  # read + write counted
        "forward_weight_bytes": floors[0].weight_bytes,
        "mean_kv_bytes": statistics.fmean(f.kv_bytes for f in floors),  # per forward, both CFG halves
    }


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PeakMemory:
    """Peak memory of a block in MB: allocated CUDA memory on a GPU; on CPU, the peak resident set size
    above its level at the start, sampled every few milliseconds (Linux only, else None)."""

    def __init__(self, device: torch.device, interval: float = 0.002):
        self.device = device
        self.interval = interval
        self.peak_mb: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None  # the RSS watcher (CPU, where RSS can be read)

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        elif _rss_bytes() is not None:
            self._base = self._peak = _rss_bytes()
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, _rss_bytes() or 0)
            time.sleep(self.interval)

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
        elif self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, _rss_bytes() or 0)
            self.peak_mb = (self._peak - self._base) / 2**20


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None
